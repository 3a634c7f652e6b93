"""The three stages of a failure-mode build: plan each from the committed stages before it, run its units."""

from __future__ import annotations

import hashlib

from ...builders import base
from ...builders.base import PlannedLater
from ...builders.common import Unit
from ...config import to_dict
from ...curation import surrogates
from ...curation.surrogates import SurrogateFilter
from ...errors import DataError, GensetsError
from ...images import decode_image
from ...models import load_classifier
from ...models.captioner import load_captioner
from ...records import Sample, content_id, derive_seed, provenance_of, slug
from . import prompts
from .config import STAGES, FailureModesConfig
from .prompts import label_ids

NAME = "failure-modes"
# a cluster of misclassified images, its captions (the medoid's is the mode's caption), and on regenerated
# images the mode they were generated for
FAILURE_MODE = [("id", "string"), ("cluster", "int64"), ("k", "int64"), ("silhouette", "float64"),
                ("size", "int64"), ("medoid", "string"), ("members", ("list", "string")),
                ("captions", ("list", ("struct", [("key", "string"), ("caption", "string")]))),
                ("caption", "string"), ("description", "string"), ("confusion", "int64")]
# what names the numbers of a build (prompts.variant): baseline template, regeneration form, k of the top-k rule
VARIANT = [("template", "string"), ("regeneration", "string"), ("top_k", "int64")]
# the provenance fields failure-mode builds add to the common provenance (records.schema)
FIELDS = (("imagenet_ids", ("list", "int64")), ("superclass", "string"), ("variant", ("struct", VARIANT)),
          *surrogates.FIELDS, ("failure_mode", ("struct", FAILURE_MODE)))

FIELD_DOCS = {
    "imagenet_ids": "the ImageNet-1k class indices that count as this class (names: the ImageNet-1k class list)",
    "superclass": "the label's WordNet superclass",
    "variant": "what names the numbers of the build: baseline template, regeneration form, k of the top-k rule",
    "failure_mode": "the failure mode (a cluster of misclassified images and its caption) the image belongs to or "
                    "was regenerated for (null: a baseline image)",
    **surrogates.FIELD_DOCS,
}


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
                payload = {**base, **models, "label": label, "imagenet_id": ids[label],
                           "prompt": prompts.baseline_prompt(cfg, label),
                           "images": [start, min(n, start + cfg.unit_size)]}
                units.append(Unit(content_id(payload), payload))
        return units
    if workspace is None:
        raise PlannedLater(f"failure-modes: stage {stage!r} is planned from a workspace's earlier stages")
    if stage == "clusters":
        failures: dict[str, list[dict]] = {label: [] for label in cfg.labels}
        for shard, s in _committed(workspace, plan(cfg, "baseline")):
            if s.meta["kept"]:
                failures[s.meta["label"]].append({"key": s.key, "shard": shard, "top1": top1(s.meta),
                                                  "sha256": hashlib.sha256(s.image).hexdigest()})
        for label in cfg.labels:
            rows = sorted(failures[label], key=lambda r: r["key"])
            if len(rows) < cfg.clustering.min_failures:
                continue
            payload = {**base, "label": label, "imagenet_id": ids[label], "failures": rows,
                       "embedder": cfg.embedder, "captioner": to_dict(cfg.captioner),
                       "clustering": to_dict(cfg.clustering), "baseline_prompt": prompts.baseline_prompt(cfg, label),
                       "mode_template": prompts.mode_template_text(cfg)}
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
                       "description": mode["description"],
                       "medoid": mode["medoid"], "confusion": mode["confusion"], "prompt": s.meta["prompt"],
                       "images": [start, min(n, start + cfg.unit_size)]}
            units.append(Unit(content_id(payload), payload))
    return units


def top1(meta: dict) -> int:
    """The classifier's top-1 class of a classified image."""
    return int(meta["surrogates"][0]["top5"][0])


def _committed(ws, units: list[Unit]):
    """(shard, Sample) of every unit, in unit order; DataError when one is not committed."""

    rows = {r["unit"]: r for r in ws.manifest().rows()}
    missing = [u.id for u in units if u.id not in rows]
    if missing:
        raise DataError(f"{ws.root}: {len(missing)} unit(s) of an earlier stage are not committed "
                        f"(first: {missing[0]}); run `gensets build` again")
    for u in units:
        shard = rows[u.id]["shard"]
        for s in ws.read_candidates(shard):
            yield shard, s


class Context(base.Context):
    """The generator, the classifier under test, the embedder and the captioner, loaded once per process,
    lazily; ``workspace`` is set by the runner (the later stages read the earlier ones from it)."""

    _filter = _embedder = _captioner = None

    def load(self) -> None:
        super().load()
        self.filter.models  # noqa: B018
        self.embedder  # noqa: B018
        self.captioner  # noqa: B018

    @property
    def filter(self):
        if self._filter is None:
            c = self.cfg
            self._filter = SurrogateFilter([c.classifier], top_k=c.top_k, templates=c.classifier_templates,
                                           batch_size=c.batch_size)
        return self._filter

    @property
    def embedder(self):
        if self._embedder is None:
            # a zero-shot model needs some label space to load; only its image features are used
            self._embedder = load_classifier(self.cfg.embedder, labels=list(self.cfg.labels))
        return self._embedder

    @property
    def captioner(self):
        if self._captioner is None:
            self._captioner = load_captioner(self.cfg.captioner.model)
        return self._captioner


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    if unit.payload["stage"] == "clusters":
        return _cluster(unit, ctx, build_id)
    return _generate(unit, ctx, build_id)


def mode_meta(**values) -> dict:
    """A complete ``failure_mode`` struct (every field present, None where unknown)."""
    return {name: values.get(name) for name, _ in FAILURE_MODE}


def _generate(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """Baseline or regenerated images: generate, encode, classify the decoded bytes."""
    p = unit.payload
    cfg, g = ctx.cfg, ctx.cfg.generator
    label = p["label"]
    rows = []
    for i in range(*p["images"]):
        if p["stage"] == "baseline":
            rows.append({"key": f"base_{slug(label)}_{i:04d}", "prompt": p["prompt"],
                         "seed": derive_seed(p["seed"], "baseline", label, i)})
        else:
            rows.append({"key": f"mode_{p['mode']}_{i:04d}", "prompt": p["prompt"],
                         "seed": derive_seed(p["seed"], "regenerate", p["mode"], p["caption"], i)})
    images, _, texts = base.generate_encoded(ctx.generator, g, cfg.image, [r["prompt"] for r in rows],
                                             [r["seed"] for r in rows])
    verdicts = ctx.filter.score([decode_image(b) for b in images], [[p["imagenet_id"]]] * len(rows))
    gen = ctx.generator
    config = "baseline" if p["stage"] == "baseline" else "modes"
    mode = None if config == "baseline" else mode_meta(id=p["mode"], cluster=p["cluster"], caption=p["caption"],
                                                        description=p["description"], medoid=p["medoid"],
                                                        confusion=p["confusion"])
    index = list(cfg.labels).index(label)
    out = []
    for i, (r, data, v) in enumerate(zip(rows, images, verdicts, strict=True)):
        meta = provenance_of(FIELDS, builder=NAME, key=r["key"], build=build_id, unit=unit.id, config=config,
                          label=label, label_index=index, imagenet_ids=[p["imagenet_id"]], prompt=r["prompt"],
                          superclass=prompts.superclass(cfg, label), variant=prompts.variant(cfg),
                          negative_prompt=g.negative_prompt, seed=r["seed"], steps=g.steps, guidance=g.guidance,
                          width=g.width, height=g.height, generator=g.provenance(gen, index=i, count=len(rows)),
                          source=g.model, surrogate_top_k=cfg.top_k, surrogates=v.surrogates, surrogate_failures=v.failures,
                          kept=v.kept, failure_mode=mode, **texts[i])
        out.append(Sample(r["key"], data, cfg.image.format, index, meta))
    return out


def _cluster(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """One label's misclassified images: embed, cluster, caption every member; a record per cluster."""
    import torch

    from . import statistics as fm  # lazy: numpy, off the CLI parser's path (it lists the builders)

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
                         caption=caption, description=prompts.description(caption, cc.prompt),
                         confusion=fm.most_common([rows[i]["top1"] for i in members]))
        key = f"cluster_{mode_id}"
        meta = provenance_of(FIELDS, builder=NAME, key=key, build=build_id, unit=unit.id, config="clusters",
                          label=label, label_index=index, imagenet_ids=[p["imagenet_id"]],
                          superclass=prompts.superclass(cfg, label), variant=prompts.variant(cfg),
                          prompt=prompts.regeneration_prompt(cfg, label, caption),
                          source=rows[m]["key"], kept=False, failure_mode=mode)
        out.append(Sample(key, samples[m].image, samples[m].ext, index, meta))
    return out
