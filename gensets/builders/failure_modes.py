"""Failure-mode discovery (Wiles et al. 2022): generate, classify, cluster the failures, caption, regenerate.

A staged build; each stage's units are planned from the committed shards of the stages before it
(gensets.builders.runner plans stage by stage and skips committed units, so a killed build resumes):

1. ``baseline``   per label, ``images_per_label`` images from ``template`` ("a realistic photograph of
                  a {label}"), classified by ``classifier`` over ImageNet-1k: the baseline failure rate
                  and confusion counts. A unit is a chunk of one label's images.
2. ``clusters``   per label, the misclassified images (named by key and image sha256 in the unit, so
                  the unit's id changes when they do) are embedded with ``embedder``, clustered (rule:
                  gensets.curation.failure_modes), every member is captioned with ``captioner``; one
                  record per cluster (its medoid image) keeps the members, all captions, and the
                  medoid's caption as the mode's caption.
3. ``regenerate`` per cluster of at least ``clustering.min_size`` images, ``images_per_mode`` images from
                  ``mode_template`` ("{caption}"), classified again.
After the build, ``after_build`` compares every mode with its label's baseline (one-sided Fisher exact
test, Holm-corrected by default) and writes ``modes.json`` and the ``failure_*`` tables of
state.duckdb. Seeds derive from content: (seed, stage, label, index) and (seed, stage, mode, caption,
index). Published configs: ``baseline`` and ``modes``, the misclassified images of each.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ..config import to_dict
from ..errors import DataError, GensetsError
from ..records import Sample, content_id, derive_seed, provenance, slug
from ..registry import BUILDERS
from .common import GeneratorConfig, ImageConfig, Unit, check_spec

STAGES = ("baseline", "clusters", "regenerate")
CLUSTER_RULE = ("KMeans (n_init=10, random_state=seed) on L2-normalised embeddings; k in "
                "2..min(max_k, n-1, distinct images) with the highest mean cosine silhouette (ties: smaller k); "
                "k=1 when fewer than 3 images failed or the best silhouette is below min_silhouette")


@dataclass(frozen=True)
class ClusterConfig:
    max_k: int = 8  # the largest number of clusters tried per label
    min_silhouette: float = 0.1  # below this best silhouette a label's failures stay one cluster
    min_failures: int = 3  # labels with fewer misclassified images are not clustered
    min_size: int = 2  # smaller clusters are kept for review but not regenerated
    batch_size: int = 16

    def validate(self, base_dir: Path) -> None:
        if self.max_k < 1 or self.min_failures < 1 or self.min_size < 1 or self.batch_size < 1:
            raise ValueError("max_k, min_failures, min_size and batch_size must be at least 1")
        if not -1.0 <= self.min_silhouette <= 1.0:
            raise ValueError("min_silhouette: must be between -1 and 1")


@dataclass(frozen=True)
class CaptionConfig:
    model: str  # hf:Salesforce/blip-image-captioning-large, tiny:blip-caption, ...
    prompt: str | None = None  # BLIP's caption prefix ("a photography of") or a chat model's question
    max_new_tokens: int = 30
    num_beams: int = 1
    batch_size: int = 8

    def validate(self, base_dir: Path) -> None:
        check_spec(self.model, "model")
        if self.max_new_tokens < 1 or self.num_beams < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens, num_beams and batch_size must be at least 1")


@dataclass(frozen=True)
class FailureModesConfig:
    builder: Literal["failure-modes"]
    classifier: str  # the model under test, over the ImageNet-1k label space
    labels: tuple[str, ...]  # ImageNet class names (as gensets.labels.imagenet.imagenet_names)
    generator: GeneratorConfig
    embedder: str  # image features for clustering (a CLIP spec; any classifier spec works)
    captioner: CaptionConfig
    name: str = "failure-modes"
    pretty_name: str = "Discovered failure modes (gensets)"
    license: str = "cc-by-4.0"
    seed: int = 0
    template: str = "a realistic photograph of a {label}"
    images_per_label: int = 100
    images_per_mode: int | None = None  # default: images_per_label
    mode_template: str = "{caption}"  # the regeneration prompt; {caption} and {label} are filled in
    top_k: int = 1  # an image fails when its label's class is not in the classifier's top-k
    classifier_templates: tuple[str, ...] = ("a photo of a {}.",)  # for a zero-shot CLIP classifier
    batch_size: int = 16  # classifier batch
    clustering: ClusterConfig = ClusterConfig()
    test: Literal["fisher", "binomial"] = "fisher"
    correction: Literal["holm", "bh"] = "holm"
    alpha: float = 0.05
    image: ImageConfig = ImageConfig()
    unit_size: int = 16  # images per work unit
    shard_size: int = 1000

    def validate(self, base_dir: Path) -> None:
        check_spec(self.classifier, "classifier")
        check_spec(self.embedder, "embedder")
        if not self.labels:
            raise ValueError("labels: give at least one ImageNet class name")
        canonical = _canonical_labels(self.labels)
        if len(set(canonical)) != len(canonical):
            raise ValueError("labels: a class is listed twice")
        for key, text, need in (("template", self.template, "{label}"),
                                ("mode_template", self.mode_template, "{caption}")):
            try:
                text.format(label="x", caption="x")
            except (IndexError, KeyError, ValueError) as e:
                raise ValueError(f"{key}: bad template {text!r} ({e}); use {{label}} and {{caption}}") from None
            if need not in text:
                raise ValueError(f"{key}: must contain {need}")
        if self.images_per_label < 1 or (self.images_per_mode is not None and self.images_per_mode < 1):
            raise ValueError("images_per_label and images_per_mode must be at least 1")
        if not 1 <= self.top_k <= 5:
            raise ValueError("top_k: must be between 1 and 5")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha: must be between 0 and 1")
        if self.unit_size < 1 or self.shard_size < 1 or self.batch_size < 1:
            raise ValueError("unit_size, shard_size and batch_size must be at least 1")

    def resolved(self, base_dir: Path) -> FailureModesConfig:
        return replace(self, labels=tuple(_canonical_labels(self.labels)),
                       images_per_mode=self.images_per_mode or self.images_per_label)


def _canonical_labels(labels) -> list[str]:
    """Each label as spelled in imagenet_names() (case-insensitive); ValueError naming a bad one."""
    import difflib

    from ..labels.imagenet import imagenet_names

    by_lower = {n.lower(): n for n in imagenet_names()}
    out = []
    for i, label in enumerate(labels):
        name = by_lower.get(str(label).strip().lower())
        if name is None:
            close = difflib.get_close_matches(str(label).lower(), list(by_lower), n=3)
            hint = f" (did you mean: {', '.join(by_lower[c] for c in close)})" if close else ""
            raise ValueError(f"labels: labels[{i}] {label!r} is not an ImageNet class name{hint}")
        out.append(name)
    return out


def label_ids(cfg: FailureModesConfig) -> dict[str, int]:
    """Each label -> its ImageNet-1k index."""
    from ..labels.imagenet import imagenet_names

    index = {n: i for i, n in enumerate(imagenet_names())}
    return {label: index[label] for label in cfg.labels}


# ------------------------------------------------------------------ planning
def plan(cfg: FailureModesConfig, stage: str = "baseline", workspace=None) -> list[Unit]:
    """The units of one stage; ``clusters`` and ``regenerate`` read the committed earlier stages."""
    if stage not in STAGES:
        raise GensetsError(f"failure-modes: unknown stage {stage!r} (stages: {', '.join(STAGES)})")
    ids = label_ids(cfg)
    models = {"generator": to_dict(cfg.generator), "classifier": cfg.classifier, "top_k": cfg.top_k,
              "classifier_templates": list(cfg.classifier_templates), "image": to_dict(cfg.image)}
    base = {"builder": "failure-modes", "stage": stage, "seed": cfg.seed}
    units = []
    if stage == "baseline":
        for label in cfg.labels:
            n = cfg.images_per_label
            for start in range(0, n, cfg.unit_size):
                payload = {**base, **models, "label": label, "imagenet_id": ids[label], "template": cfg.template,
                           "images": [start, min(n, start + cfg.unit_size)]}
                units.append(Unit(content_id(payload), payload))
        return units
    if workspace is None:
        raise GensetsError(f"failure-modes: stage {stage!r} is planned from a workspace's earlier stages")
    if stage == "clusters":
        failures: dict[str, list[dict]] = {label: [] for label in cfg.labels}
        for shard, s in _committed(workspace, plan(cfg, "baseline")):
            if s.meta["kept"]:
                failures[s.meta["label"]].append({"key": s.key, "shard": shard, "top1": _top1(s.meta),
                                                  "sha256": hashlib.sha256(s.image).hexdigest()})
        for label in cfg.labels:
            rows = sorted(failures[label], key=lambda r: r["key"])
            if len(rows) < cfg.clustering.min_failures:
                continue
            payload = {**base, "label": label, "imagenet_id": ids[label], "failures": rows,
                       "embedder": cfg.embedder, "captioner": to_dict(cfg.captioner),
                       "clustering": to_dict(cfg.clustering)}
            units.append(Unit(content_id(payload), payload))
        return units
    records = [s for _, s in _committed(workspace, plan(cfg, "clusters", workspace))]
    n = cfg.images_per_mode or cfg.images_per_label
    for s in sorted(records, key=lambda s: s.key):
        mode = s.meta["failure_mode"]
        if mode["size"] < cfg.clustering.min_size:
            continue
        for start in range(0, n, cfg.unit_size):
            payload = {**base, **models, "label": s.meta["label"], "imagenet_id": ids[s.meta["label"]],
                       "mode": mode["id"], "cluster": mode["cluster"], "caption": mode["caption"],
                       "medoid": mode["medoid"], "confusion": mode["confusion"], "prompt": s.meta["prompt"],
                       "images": [start, min(n, start + cfg.unit_size)]}
            units.append(Unit(content_id(payload), payload))
    return units


def _top1(meta: dict) -> int:
    return int(meta["surrogates"][0]["top5"][0])


def _committed(ws, units: list[Unit]):
    """(shard, Sample) of every unit, in unit order; DataError when one is not committed."""
    from ..shards import Manifest

    rows = {r["unit"]: r for r in Manifest(ws.manifest_path).rows()}
    missing = [u.id for u in units if u.id not in rows]
    if missing:
        raise DataError(f"{ws.root}: {len(missing)} unit(s) of an earlier stage are not committed "
                        f"(first: {missing[0]}); run `gensets build` again")
    for u in units:
        shard = rows[u.id]["shard"]
        for s in ws.read_candidates(shard):
            yield shard, s


# ------------------------------------------------------------------ running
class Context:
    """Models loaded once per process, lazily; ``workspace`` is set by the runner."""

    def __init__(self, cfg: FailureModesConfig):
        self.cfg = cfg
        self.workspace = None
        self._generator = self._filter = self._embedder = self._captioner = None

    def load(self) -> None:
        self.generator  # noqa: B018 - load now
        self.filter.models  # noqa: B018
        self.embedder  # noqa: B018
        self.captioner  # noqa: B018

    @property
    def generator(self):
        if self._generator is None:
            self._generator = self.cfg.generator.load()
        return self._generator

    @property
    def filter(self):
        if self._filter is None:
            from ..curation.surrogates import SurrogateFilter

            c = self.cfg
            self._filter = SurrogateFilter([c.classifier], top_k=c.top_k, templates=c.classifier_templates,
                                           batch_size=c.batch_size)
        return self._filter

    @property
    def embedder(self):
        if self._embedder is None:
            from ..models import load_classifier

            # a zero-shot model needs some label space to load; only its image features are used
            self._embedder = load_classifier(self.cfg.embedder, labels=list(self.cfg.labels))
        return self._embedder

    @property
    def captioner(self):
        if self._captioner is None:
            from ..models.captioner import load_captioner

            self._captioner = load_captioner(self.cfg.captioner.model)
        return self._captioner


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    if unit.payload["stage"] == "clusters":
        return _cluster(unit, ctx, build_id)
    return _generate(unit, ctx, build_id)


def mode_meta(**values) -> dict:
    """A complete ``failure_mode`` struct (every field present, None where unknown)."""
    from ..records import _FAILURE_MODE

    return {name: values.get(name) for name, _ in _FAILURE_MODE}


def _generate(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """Baseline or regenerated images: generate, encode, classify the decoded bytes."""
    from ..images import decode_image, encode_image

    p = unit.payload
    cfg, g = ctx.cfg, ctx.cfg.generator
    label = p["label"]
    rows = []
    for i in range(*p["images"]):
        if p["stage"] == "baseline":
            rows.append({"key": f"base_{slug(label)}_{i:04d}", "prompt": p["template"].format(label=label),
                         "seed": derive_seed(p["seed"], "baseline", label, i)})
        else:
            rows.append({"key": f"mode_{p['mode']}_{i:04d}", "prompt": p["prompt"],
                         "seed": derive_seed(p["seed"], "regenerate", p["mode"], p["caption"], i)})
    images: list[bytes] = []
    for start in range(0, len(rows), g.batch_size):
        batch = rows[start : start + g.batch_size]
        pil = ctx.generator.generate([r["prompt"] for r in batch], [r["seed"] for r in batch],
                                     negative_prompts=[g.negative_prompt] * len(batch) if g.negative_prompt else None,
                                     steps=g.steps, guidance=g.guidance, width=g.width, height=g.height)
        images += [encode_image(im, cfg.image.format, cfg.image.quality) for im in pil]
    verdicts = ctx.filter.score([decode_image(b) for b in images], [[p["imagenet_id"]]] * len(rows))
    gen = ctx.generator
    generator = g.provenance(gen)
    config = "baseline" if p["stage"] == "baseline" else "modes"
    mode = None if config == "baseline" else mode_meta(id=p["mode"], cluster=p["cluster"], caption=p["caption"],
                                                        medoid=p["medoid"], confusion=p["confusion"])
    index = list(cfg.labels).index(label)
    out = []
    for r, data, v in zip(rows, images, verdicts, strict=True):
        meta = provenance(key=r["key"], builder="failure-modes", build=build_id, unit=unit.id, config=config,
                          label=label, label_index=index, imagenet_ids=[p["imagenet_id"]], prompt=r["prompt"],
                          negative_prompt=g.negative_prompt, seed=r["seed"], steps=g.steps, guidance=g.guidance,
                          width=g.width, height=g.height, generator=generator, source=g.model,
                          surrogate_top_k=cfg.top_k, surrogates=v.surrogates, surrogate_failures=v.failures,
                          kept=v.kept, failure_mode=mode)
        out.append(Sample(r["key"], data, cfg.image.format, index, meta))
    return out


def _cluster(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """One label's misclassified images: embed, cluster, caption every member; a record per cluster."""
    import torch

    from ..curation import failure_modes as fm
    from ..images import decode_image

    p = unit.payload
    cfg = ctx.cfg
    if ctx.workspace is None:
        raise GensetsError("failure-modes: the clusters stage needs the workspace (run it with gensets build)")
    rows = p["failures"]
    wanted = {r["key"]: r for r in rows}
    found: dict[str, Sample] = {}

    for shard in sorted({r["shard"] for r in rows}):
        for s in ctx.workspace.read_candidates(shard):
            if s.key in wanted:
                if hashlib.sha256(s.image).hexdigest() != wanted[s.key]["sha256"]:
                    raise DataError(f"{ctx.workspace.candidates / shard}: image {s.key} changed since it was "
                                    "classified; rebuild in a new workspace")
                found[s.key] = s
    missing = [k for k in wanted if k not in found]
    if missing:
        raise DataError(f"{ctx.workspace.root}: misclassified image {missing[0]} is missing from its shard")
    samples = [found[r["key"]] for r in rows]
    pil = [decode_image(s.image) for s in samples]
    emb, cap, cc = ctx.embedder, ctx.captioner, cfg.captioner
    with torch.inference_mode():
        feats = torch.cat([emb.embed(emb.preprocess(pil[i : i + cfg.clustering.batch_size]))
                           for i in range(0, len(pil), cfg.clustering.batch_size)]).double().numpy()
    result = fm.cluster(feats, max_k=cfg.clustering.max_k, min_silhouette=cfg.clustering.min_silhouette,
                        seed=derive_seed(p["seed"], "clusters", p["label"]))
    captions = cap.caption(pil, prompt=cc.prompt, max_new_tokens=cc.max_new_tokens, num_beams=cc.num_beams,
                           batch_size=cc.batch_size)
    label = p["label"]
    index = list(cfg.labels).index(label)
    out = []
    for j in range(result.k):
        members = [i for i, c in enumerate(result.labels) if c == j]
        m = fm.medoid(feats, members)
        mode_id = f"{slug(label)}_{j:02d}"
        caption = captions[m]
        mode = mode_meta(id=mode_id, cluster=j, k=result.k, silhouette=result.silhouette, size=len(members),
                         medoid=rows[m]["key"], members=[rows[i]["key"] for i in members],
                         captions=[{"key": rows[i]["key"], "caption": captions[i]} for i in members],
                         caption=caption, confusion=fm.most_common([rows[i]["top1"] for i in members]))
        key = f"cluster_{mode_id}"
        meta = provenance(key=key, builder="failure-modes", build=build_id, unit=unit.id, config="clusters",
                          label=label, label_index=index, imagenet_ids=[p["imagenet_id"]],
                          prompt=cfg.mode_template.format(caption=caption, label=label),
                          source=rows[m]["key"], kept=False, failure_mode=mode)
        out.append(Sample(key, samples[m].image, samples[m].ext, index, meta))
    return out


# ------------------------------------------------------------------ after the build: statistics
def tally(metas: list[dict]) -> dict:
    """Classified images (sample metadata): ``n``, ``failures`` and ``confusions`` ({top-1 class: count}).
    Only failed images are confusions, for a label's baseline and for a mode's regenerated images alike:
    with ``top_k`` > 1 an image whose top-1 is another class but whose label is in its top-k did not fail."""
    from collections import Counter

    failed = [m for m in metas if m["kept"]]
    return {"n": len(metas), "failures": len(failed), "confusions": Counter(_top1(m) for m in failed)}


def analyze(ws) -> dict:
    """Every mode against its label's baseline; writes modes.json and the failure_* tables."""
    from collections import defaultdict

    from ..curation import failure_modes as fm
    from ..curation import state
    from ..labels.imagenet import imagenet_names
    from ..shards import write_json_atomic

    _, cfg = ws.load()
    names = imagenet_names()
    con = state.connect(ws.state_path)
    try:
        rows = con.execute("SELECT key, config, shard, meta FROM samples ORDER BY key").fetchall()
        metas = [(key, config, shard, json.loads(meta)) for key, config, shard, meta in rows]
        baseline_images: dict[str, list] = {label: [] for label in cfg.labels}
        regen: dict[str, list] = defaultdict(list)
        clusters, seeds = [], {}
        for key, config, shard, m in metas:
            if config == "baseline":
                seeds[key] = m["seed"]
                baseline_images[m["label"]].append(m)
            elif config == "modes":
                regen[m["failure_mode"]["id"]].append((key, m))
            elif config == "clusters":
                clusters.append((key, shard, m))
        base = {label: tally(images) for label, images in baseline_images.items()}
        tested = []
        for key, _, m in clusters:
            mode = m["failure_mode"]
            images = regen.get(mode["id"], [])
            if not images:
                continue  # too small to regenerate
            t = tally([r for _, r in images])
            tested.append({"id": mode["id"], "label": m["label"], "record": key, "n": t["n"],
                           "failures": t["failures"], "confusion": mode["confusion"],
                           "confused": t["confusions"][mode["confusion"]]})
        compared = {c["id"]: c for c in fm.compare(tested, base, test=cfg.test, correction=cfg.correction,
                                                   alpha=cfg.alpha)}
        modes = []
        for key, _, m in clusters:
            mode = m["failure_mode"]
            c = compared.get(mode["id"], {})
            images = regen.get(mode["id"], [])
            modes.append({
                "id": mode["id"], "label": m["label"], "cluster": mode["cluster"], "k": mode["k"],
                "silhouette": mode["silhouette"], "size": mode["size"], "record": key,
                "medoid": mode["medoid"], "members": mode["members"],
                "member_seeds": [seeds[k] for k in mode["members"]], "captions": mode["captions"],
                "caption": mode["caption"], "prompt": m["prompt"], "confusion": mode["confusion"],
                "confusion_name": names[mode["confusion"]] if mode["confusion"] is not None else None,
                "regenerated": bool(images), "images": [k for k, _ in images],
                "seeds": [r["seed"] for _, r in images],
                "failed": [k for k, r in images if r["kept"]],
                **{k: c.get(k) for k in ("n", "failures", "confused", "baseline_n", "baseline_failures",
                                         "baseline_confused", "p_failure", "p_failure_adjusted",
                                         "p_confusion", "p_confusion_adjusted")},
                "discovered": bool(c.get("discovered", False)),
            })
        baseline = {label: {"n": b["n"], "failures": b["failures"],
                            "rate": b["failures"] / b["n"] if b["n"] else None,
                            "confusions": [{"class": c, "name": names[c], "count": n}
                                           for c, n in sorted(b["confusions"].items(), key=lambda kv: (-kv[1], kv[0]))]}
                    for label, b in base.items()}
        report = {"builder": "failure-modes", "build": ws.fingerprint, "classifier": cfg.classifier,
                  "embedder": cfg.embedder, "captioner": cfg.captioner.model, "generator": cfg.generator.model,
                  "template": cfg.template, "mode_template": cfg.mode_template, "test": cfg.test,
                  "correction": cfg.correction, "alpha": cfg.alpha, "top_k": cfg.top_k, "cluster_rule": CLUSTER_RULE,
                  "labels": list(cfg.labels), "baseline": baseline, "modes": modes,
                  "discovered": [m["id"] for m in modes if m["discovered"]]}
        _write_tables(con, report)
    finally:
        con.close()
    write_json_atomic(ws.root / "modes.json", report)
    return report


# the failure_* tables of state.duckdb: name -> "column:type ..." (S string, I int64, F float64, B bool)
TABLES = {
    "failure_baseline": "label:S n:I failures:I rate:F",
    "failure_modes": "id:S label:S cluster:I k:I silhouette:F size:I medoid:S caption:S prompt:S confusion:I "
                     "confusion_name:S n:I failures:I confused:I baseline_n:I baseline_failures:I "
                     "baseline_confused:I p_failure:F p_failure_adjusted:F p_confusion:F p_confusion_adjusted:F "
                     "discovered:B",
    "failure_mode_members": "mode:S key:S seed:I caption:S medoid:B",
    "failure_mode_images": "mode:S key:S seed:I failed:B",
}


def _write_tables(con, report: dict) -> None:
    """The TABLES, from the report, replaced together in one transaction."""
    import pyarrow as pa

    types = {"S": pa.string(), "I": pa.int64(), "F": pa.float64(), "B": pa.bool_()}
    modes = report["modes"]
    failed = {k for m in modes for k in m["failed"]}
    data = {
        "failure_baseline": [{"label": k, **v} for k, v in report["baseline"].items()],
        "failure_modes": modes,
        "failure_mode_members": [{"mode": m["id"], "key": c["key"], "caption": c["caption"],
                                  "seed": m["member_seeds"][m["members"].index(c["key"])],
                                  "medoid": c["key"] == m["medoid"]} for m in modes for c in m["captions"]],
        "failure_mode_images": [{"mode": m["id"], "key": k, "seed": s, "failed": k in failed}
                                for m in modes for k, s in zip(m["images"], m["seeds"], strict=True)],
    }
    tables = {}
    for name, spec in TABLES.items():
        schema = pa.schema([(col, types[t]) for col, t in (c.split(":") for c in spec.split())])
        tables[name] = pa.Table.from_pylist([{c: row[c] for c in schema.names} for row in data[name]], schema=schema)
    con.execute("BEGIN TRANSACTION")
    try:
        for name, table in tables.items():
            con.register("_incoming", table)
            con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _incoming")
            con.unregister("_incoming")
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


# ------------------------------------------------------------------ the builder
class FailureModesBuilder:
    name = "failure-modes"
    description = ("Images that a classifier gets wrong, found by failure-mode discovery after Wiles et al., "
                   "'Discovering Bugs in Vision Models using Off-the-shelf Image Generation and Captioning' "
                   "(2022): generated images per label are classified, the misclassified ones clustered and "
                   "captioned, and images regenerated from each caption tested for a higher failure rate.")
    citation = """
@article{wiles2022discovering,
  title   = {Discovering Bugs in Vision Models using Off-the-shelf Image Generation and Captioning},
  author  = {Wiles, Olivia and Albuquerque, Isabela and Gowal, Sven},
  journal = {arXiv preprint arXiv:2208.08831},
  year    = {2022}
}"""
    config_class = FailureModesConfig
    split = "test"
    needs_review = False
    stages = STAGES
    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)
    after_build = staticmethod(analyze)
    Context = Context

    @staticmethod
    def config_names(cfg: FailureModesConfig) -> list[str]:
        return ["baseline", "modes"]

    @staticmethod
    def class_names(cfg: FailureModesConfig) -> list[str]:
        return list(cfg.labels)

    @staticmethod
    def config_of(meta: dict) -> str:
        return meta["config"]

    @staticmethod
    def relabel(meta: dict, new_class: str):
        raise KeyError(new_class)  # no review step

    @staticmethod
    def card_body(cfg: FailureModesConfig, manifest: dict, samples: list) -> str:
        from collections import Counter

        from ..cards.markdown import table

        per_mode = Counter(s.meta["failure_mode"]["id"] for s in samples if s.meta.get("failure_mode"))
        captions = {s.meta["failure_mode"]["id"]: s.meta["failure_mode"]["caption"] for s in samples
                    if s.meta.get("failure_mode")}
        rows = [[m, captions[m], per_mode[m]] for m in sorted(per_mode)]
        g = cfg.generator
        return f"""
Every image here is misclassified by `{cfg.classifier}` (its label's ImageNet class is not in its
top-{cfg.top_k}): an adversarial set for that classifier. Score other classifiers on it with
`gensets eval` to see whether the failures transfer.

- `baseline`: images of {len(cfg.labels)} label(s) from `{cfg.template}` ({cfg.images_per_label} per label),
  generator `{g.model}`, {g.steps} steps, guidance {g.guidance}, {g.width}x{g.height}.
- `modes`: images regenerated ({cfg.images_per_mode} per mode) from `{cfg.mode_template}`, the caption
  (by `{cfg.captioner.model}`) of the medoid of a cluster of misclassified images (embedded with
  `{cfg.embedder}`; {CLUSTER_RULE}). Each sample's `json.failure_mode` names its mode.
- Modes are compared with their label's baseline by a one-sided {cfg.test} test, {cfg.correction}-corrected,
  alpha {cfg.alpha}: see `modes.json` and `gensets report failure-modes` in the build's workspace.

{table(["mode", "caption", "misclassified images"], rows) if rows else "(no regenerated image was misclassified)"}
"""


BUILDER = BUILDERS.register("failure-modes", FailureModesBuilder())
