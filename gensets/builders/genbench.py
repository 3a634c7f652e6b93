"""GenBench (Li et al., 2023): K generated training shots per class of a downstream dataset, per prompt strategy.

Classes come from one of the 22 packaged GenBench datasets (gensets/data/genbench/datasets.json: class
names, CLIP templates, group, metric), from any Hugging Face image-classification dataset (the names of
its ClassLabel feature) or from a local folder (one sub-folder per class). The six prompt strategies:

    ST  simple template          "a photo of a {class}"
    DT  defined templates        the dataset's CLIP prompt templates
    CE  category enhancement     a seq2seq model expands the class name into a sentence (the prompt)
    RD  restrictive description  "a photo of a {class}, ((sharp focus)), ((highly detailed)), ((hires))"
    NP  negative prompts         ST, with a seeded sample of the dataset's other class names plus quality
                                 negatives ("((deformed)), blurry, lowres, ...") as the negative prompt
    RA  retrieval augmented      ST, image-to-image from a real reference image of the class

Every strategy yields a pool of prompts per class (ST, RD, NP, RA: one; DT: the templates; CE: N
expansions, each sampled under its own seed). Shot i of a class takes entry ``order_r[i mod n]`` of the
pool, where ``order_r`` is a shuffle of the pool drawn with the seed of round ``r = i div n``: K <= n gives
a seeded subset without repeats, and when K exceeds the pool the prompts are drawn again, round after
round, each round's seed recorded in the sample (``prompting.draw_seed``). RA draws its init image from
the class's reference images the same way. One published config per (dataset, strategy), split ``train``;
a work unit is one (strategy, class, chunk of shots).

Where the files lie never enters a build: paths in the config stay as written (relative to the config file),
seeds and unit ids know a local dataset or reference folder by its name (:func:`source_name`) and RA's
reference images by path inside the reference folder and sha256, and samples record those, so the same config
and files copied to another directory (paths written relative to the config) build byte-identical shards.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar, Literal

from ..config import to_dict
from ..errors import DataError, GensetsError
from ..images import is_image_file
from ..records import Sample, content_id, derive_seed, provenance, slug
from ..registry import BUILDERS
from ..registry import STRATEGIES as STRATEGY_REGISTRY
from ..shards import sha256_file
from ..sources.classes import (
    DatasetInfo,
    class_folders,
    dataset_info,
    hf_label_feature,
    match_classes,
    plain_name,
    report_match,
    source_name,
    split_rev,
)
from ..sources.packaged import genbench_datasets
from ..timings import cost_per_image, measured, record_timing
from .common import GeneratorConfig, ImageConfig, Unit, check_spec

STRATEGIES = ("ST", "DT", "CE", "RD", "NP", "RA")
Strategy = Literal["ST", "DT", "CE", "RD", "NP", "RA"]
DESCRIPTIONS = {
    "ST": "simple template", "DT": "the dataset's defined (CLIP) templates",
    "CE": "category enhancement: a seq2seq model expands the class name into a sentence",
    "RD": "restrictive description appended to the simple template",
    "NP": "simple template; negative prompt of other class names of the dataset plus quality negatives",
    "RA": "retrieval augmented: image-to-image from a real reference image of the class",
}
METRICS = ("accuracy", "mean-per-class", "11-point-map", "roc-auc")
for _name in STRATEGIES:  # the paper's table order
    STRATEGY_REGISTRY.register(_name, DESCRIPTIONS[_name])
RESTRICTIVE = "((sharp focus)), ((highly detailed)), ((hires))"
QUALITY_NEGATIVES = ("((disfigured)), ((bad art)), ((deformed)), ((poorly drawn)), ((extra limbs)), ((close up)), "
                     "((b&w)), weird colors, blurry, lowres, worst quality, low quality, jpeg artifacts, "
                     "signature, watermark, text")


def _config_slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "dataset"


# ------------------------------------------------------------------ config
@dataclass(frozen=True)
class ExpansionConfig:
    """CE: the seq2seq model that expands a class name into a sentence, and how."""

    model: str = "hf:google/flan-t5-base"  # any transformers seq2seq model spec, or tiny:t5
    input: str = "Write a short sentence describing a photo of a {}."  # {} is the class name
    prompts: int = 8  # expansions per class: the CE prompt pool
    max_new_tokens: int = 40
    do_sample: bool = True
    top_p: float = 0.95
    temperature: float = 1.0

    def validate(self, base_dir: Path) -> None:
        check_spec(self.model, "model")
        if "{}" not in self.input:
            raise ValueError("input: must contain {} for the class name")
        if self.prompts < 1 or self.max_new_tokens < 1:
            raise ValueError("prompts and max_new_tokens must be at least 1")


@dataclass(frozen=True)
class NegativeConfig:
    """NP: other class names of the dataset (a seeded sample per image) plus quality negatives."""

    classes: int = 10
    quality: str = QUALITY_NEGATIVES

    def validate(self, base_dir: Path) -> None:
        if self.classes < 0:
            raise ValueError("classes: must be at least 0")


@dataclass(frozen=True)
class ReferenceConfig:
    """RA: real reference images of each class, the init images of image-to-image generation."""

    source: str | None = None  # folder:<path> (class_name/*.jpg) or hf:<repo or path>[@rev]
    split: str = "train"  # hf: the split to take references from
    hf_config: str | None = None
    label_column: str | None = None  # hf: the ClassLabel column (default: the first)
    per_class: int = 5  # the first N images of each class
    strength: float = 0.75  # image-to-image strength (1.0 ignores the reference)

    def validate(self, base_dir: Path) -> None:
        if self.source is not None:
            kind, sep, rest = self.source.partition(":")
            if not sep or kind not in ("folder", "hf") or not rest:
                raise ValueError(f"source: expected folder:<path> or hf:<repo or path>, got {self.source!r}")
            # a folder is looked for where the config lies: GenBenchConfig.validate (a workspace's frozen
            # copy keeps the path as written, relative to the config it was built from)
        if self.per_class < 1:
            raise ValueError("per_class: must be at least 1")
        if not 0 < self.strength <= 1:
            raise ValueError("strength: must be in (0, 1]")


@dataclass(frozen=True)
class ReferenceCost:
    per_image: float  # price of one image this way, in the currency of cost
    source: str  # where the figure comes from


@dataclass(frozen=True)
class CostConfig:
    price_per_hour: float = 1.0  # price of one hour of the generator's device
    currency: str = "USD"
    hardware: str = ""  # what the price is for, e.g. "1x A100 80GB, on demand"
    reference: dict[str, ReferenceCost] = field(default_factory=dict)  # other ways to get an image

    def validate(self, base_dir: Path) -> None:
        if self.price_per_hour < 0:
            raise ValueError("price_per_hour: must be at least 0")


@dataclass(frozen=True)
class GenBenchConfig:
    builder: Literal["genbench"]
    generator: GeneratorConfig
    name: str = "genbench"
    pretty_name: str = "GenBench generated training data (gensets)"
    license: str = "openrail++"
    seed: int = 0
    dataset: str = "cifar-10"  # a packaged GenBench dataset, hf:<repo or path>[@rev] or folder:<path>
    hf_config: str | None = None  # hf: the dataset config
    label_column: str | None = None  # hf: the ClassLabel column (default: the first)
    dataset_name: str | None = None  # names the published configs <dataset_name>-<strategy>
    class_names: tuple[str, ...] = ()  # every class of the dataset (filled in from the dataset when empty)
    classes: Literal["all"] | tuple[str, ...] = "all"  # the classes to generate
    metric: Literal["accuracy", "mean-per-class", "11-point-map", "roc-auc"] | None = None  # default: packaged
    shots: int = 16  # K images per class and strategy
    strategies: tuple[Strategy, ...] = ("ST",)
    simple_template: str = "a photo of a {}"
    templates: tuple[str, ...] = ()  # DT; default: the dataset's own CLIP templates (others: ImageNet's)
    restrictive: str = RESTRICTIVE
    expansion: ExpansionConfig = ExpansionConfig()
    negative: NegativeConfig = NegativeConfig()
    reference: ReferenceConfig = ReferenceConfig()
    cost: CostConfig = CostConfig()
    image: ImageConfig = ImageConfig()
    unit_size: int = 8  # shots per work unit
    shard_size: int = 1000
    # Where this config's relative folder: paths lead (the config file's folder): set by load_build_config.
    base_dir: ClassVar[Path] = Path(".")

    def info(self, base_dir: Path) -> DatasetInfo:
        if self.class_names:
            d = genbench_datasets().get(self.dataset, {})
            return DatasetInfo(self.class_names, tuple(d.get("templates", ())), d.get("metric", "accuracy"),
                               d.get("group", "custom"))
        return dataset_info(self.dataset, base_dir, self.hf_config, self.label_column)

    def validate(self, base_dir: Path | None) -> None:
        if not self.strategies:
            raise ValueError("strategies: give at least one of " + ", ".join(STRATEGIES))
        if len(set(self.strategies)) != len(self.strategies):
            raise ValueError("strategies: each strategy at most once")
        if self.shots < 1 or self.unit_size < 1 or self.shard_size < 1:
            raise ValueError("shots, unit_size and shard_size must be at least 1")
        for key, t in [("simple_template", self.simple_template)] + [("templates", t) for t in self.templates]:
            if "{}" not in t and "{c}" not in t:
                raise ValueError(f"{key}: {t!r} must contain {{}} for the class name")
        if "RA" in self.strategies and not self.reference.source:
            raise ValueError("reference.source: RA needs reference images: folder:<path> (class_name/*.jpg) "
                             "or hf:<dataset>")
        src = self.reference.source or ""
        # the folder is checked where the config lies (base_dir None: a workspace's frozen copy, see gensets.config)
        if src.startswith("folder:") and base_dir is not None and not (base_dir / src[len("folder:"):]).is_dir():
            raise ValueError(f"reference: source: folder not found: {base_dir / src[len('folder:'):]}")
        names = self.info(base_dir).classes
        if len(set(names)) != len(names):
            raise ValueError("class_names: class names must be unique")
        if self.classes != "all":
            unknown = [c for c in self.classes if c not in names]
            if unknown:
                raise ValueError(f"classes: unknown class {unknown[0]!r} of {self.dataset} "
                                 f"(e.g. {', '.join(names[:5])})")

    def resolved(self, base_dir: Path) -> GenBenchConfig:
        """Class names, templates and metric read into the config, so the frozen copy stands alone. Paths
        stay as written (the frozen copy and the card hold no absolute path of this machine);
        ``base_dir`` is kept beside the config (not in it) to read the reference folder from."""
        info = self.info(base_dir)
        name = self.dataset_name or (self.dataset if self.dataset in genbench_datasets()
                                     else split_rev(self.dataset.partition(":")[2].rstrip("/"))[0].split("/")[-1])
        from ..labels.imagenet import imagenet_templates

        return replace(self, dataset_name=_config_slug(name), class_names=info.classes, metric=self.metric or info.metric,
                       templates=self.templates or info.templates or tuple(imagenet_templates()))


def config_name(dataset_name: str, strategy: str) -> str:
    return f"{dataset_name}-{strategy.lower()}"


def selected(cfg: GenBenchConfig) -> list[tuple[int, str]]:
    """The (label index, class name) pairs to generate."""
    if cfg.classes == "all":
        return list(enumerate(cfg.class_names))
    return [(cfg.class_names.index(c), c) for c in cfg.classes]


def fill(template: str, name: str) -> str:
    return template.format(plain_name(name), c=plain_name(name))


# ------------------------------------------------------------------ plan
def _pool(cfg: GenBenchConfig, strategy: str, name: str, files: dict | None = None) -> dict:
    """What a strategy's prompts are made of, for one class (all of it goes into the unit's id); ``files``:
    :func:`reference_files`."""
    st = cfg.simple_template
    if strategy == "DT":
        return {"templates": list(cfg.templates)}
    if strategy == "RD":
        return {"templates": [f"{st}, {cfg.restrictive}"]}
    if strategy == "CE":
        return {"templates": [], "expansion": to_dict(cfg.expansion)}
    if strategy == "NP":
        others = [c for c in dict.fromkeys(map(plain_name, cfg.class_names)) if c != plain_name(name)]
        return {"templates": [st], "negatives": others, "negative_classes": cfg.negative.classes,
                "quality": cfg.negative.quality}
    if strategy == "RA":
        ref = {**to_dict(cfg.reference), "source": source_name(cfg.reference.source)}
        return {"templates": [st], "reference": ref if files is None else {**ref, "files": files[name]}}
    return {"templates": [st]}


def plan(cfg: GenBenchConfig) -> list[Unit]:
    """Deterministic work units: (strategy, class, chunk of shots), ids from content (the dataset by
    :func:`source_name`, RA's folder references by path in the folder and sha256)."""
    gen, image = to_dict(cfg.generator), to_dict(cfg.image)
    files = reference_files(cfg) if "RA" in cfg.strategies else None
    units = []
    for strategy in cfg.strategies:
        for index, name in selected(cfg):
            pool = _pool(cfg, strategy, name, files)
            for start in range(0, cfg.shots, cfg.unit_size):
                payload = {
                    "builder": "genbench", "dataset": source_name(cfg.dataset), "dataset_name": cfg.dataset_name,
                    "config": config_name(cfg.dataset_name, strategy), "strategy": strategy, "class": name,
                    "label_index": index, "shots": list(range(start, min(start + cfg.unit_size, cfg.shots))),
                    "seed": cfg.seed, "generator": gen, "image": image, **pool}
                units.append(Unit(id=content_id(payload), payload=payload))
    return units


def draw(n: int, i: int, *parts) -> tuple[int, int]:
    """Shot ``i``'s entry of a pool of ``n``: ``(index, seed of its round)``. The pool is shuffled once per
    round of ``n`` shots, each round with its own seed, so every entry is used once per round."""
    r, j = divmod(i, n)
    seed = derive_seed(*parts, "round", r)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[j], seed


def unit_prompts(unit: Unit, expand=None, references: list | None = None) -> list[dict]:
    """Every image of a unit: key, prompt, negative prompt, seeds and how the prompt was made.

    ``expand(inputs, seeds) -> texts`` is the CE expansion model (required for CE units);
    ``references`` the class's reference images (required for RA units; only their number is used here).
    """
    p = unit.payload
    s, name = p["strategy"], p["class"]
    base = (p["seed"], p["dataset"], s, name)
    gen_negative = p["generator"]["negative_prompt"]
    rows = []
    for i in p["shots"]:
        row = {"key": f"{s.lower()}_{p['label_index']:04d}_{slug(name)}_{i:04d}", "shot": i,
               "seed": derive_seed(*base, i), "negative_prompt": gen_negative,
               "prompting": {"template": None, "draw_seed": None}}
        if s == "CE":
            e = p["expansion"]
            j, row["prompting"]["draw_seed"] = draw(e["prompts"], i, *base)
            row["prompting"].update(expansion_model=e["model"], expansion_input=fill(e["input"], name),
                                    expansion_seed=derive_seed(p["seed"], p["dataset"], "CE", name, j))
        else:
            j, draw_seed = draw(len(p["templates"]), i, *base)
            template = p["templates"][j]
            row["prompt"] = fill(template, name)
            row["prompting"].update(template=template, draw_seed=draw_seed)
        if s == "NP":
            rng = random.Random(derive_seed(*base, i, "negatives"))
            others = rng.sample(p["negatives"], min(p["negative_classes"], len(p["negatives"])))
            row["negative_prompt"] = ", ".join([*others, p["quality"]] if p["quality"] else others)
        if s == "RA":
            if not references:
                raise GensetsError(f"RA: no reference images for class {name!r}")
            row["reference"], row["prompting"]["draw_seed"] = draw(len(references), i, *base, "references")
            row["prompting"]["strength"] = p["reference"]["strength"]
        rows.append(row)
    if s == "CE":
        if expand is None:
            raise GensetsError("CE prompts need the expansion model (expand=)")
        texts = expand([r["prompting"]["expansion_input"] for r in rows],
                       [r["prompting"]["expansion_seed"] for r in rows])
        for r, text in zip(rows, texts, strict=True):
            r["prompt"] = text
    return rows


# ------------------------------------------------------------------ references (RA)
@dataclass(frozen=True)
class Reference:
    id: str  # the file's path inside the reference folder, or hf:<dataset>/<split>#<row> (source_name)
    sha256: str
    data: bytes

    def image(self):
        from ..images import decode_image

        return decode_image(self.data)


def reference_root(cfg: GenBenchConfig) -> Path:
    """The folder of a folder: reference source, on this machine (relative paths: to the config's folder)."""
    return cfg.base_dir / cfg.reference.source[len("folder:"):]


def _reference_paths(cfg: GenBenchConfig) -> tuple[dict[str, list[Path]], list[str]]:
    """Each selected class's reference files (the first ``per_class`` by file name in its class folder, class
    folders matched to the dataset's classes by name) and the folders that match no class."""
    root = reference_root(cfg)
    if not root.is_dir():
        raise GensetsError(f"reference: folder not found: {root}")
    folders = class_folders(root)
    matched, _ = match_classes([p.name for p in folders], cfg.class_names, by_index=False)
    folder_of: dict[str, Path] = {}
    for j, i in sorted(matched.items()):
        folder_of.setdefault(cfg.class_names[i], folders[j])
    out = {}
    for _, name in selected(cfg):
        folder = folder_of.get(name)
        files = sorted(f for f in folder.iterdir() if is_image_file(f) and f.is_file()) if folder else []
        out[name] = files[: cfg.reference.per_class]
    return out, [p.name for j, p in enumerate(folders) if j not in matched]


def reference_files(cfg: GenBenchConfig) -> dict[str, list[list[str]]] | None:
    """folder: references of each selected class as ``[path inside the folder, sha256]``: they go into the RA
    units' ids (changed images make new units; the folder's location does not). None for hf: references
    (rows named by dataset, split and row; pin the dataset with @rev)."""
    if not (cfg.reference.source or "").startswith("folder:"):
        return None
    root = reference_root(cfg)
    paths, _ = _reference_paths(cfg)
    return {n: [[f.relative_to(root).as_posix(), sha256_file(f)] for f in fs] for n, fs in paths.items()}


def _folder_references(cfg: GenBenchConfig) -> dict[str, list[Reference]]:
    import hashlib

    root = reference_root(cfg)
    paths, unmatched = _reference_paths(cfg)
    report_match(f"reference {cfg.reference.source}", unmatched, cfg.class_names, {}, "name")
    out = {}
    for name, files in paths.items():
        out[name] = []
        for f in files:
            data = f.read_bytes()
            out[name].append(Reference(f.relative_to(root).as_posix(), hashlib.sha256(data).hexdigest(), data))
    return out


def _hf_references(cfg: GenBenchConfig) -> dict[str, list[Reference]]:
    """The first ``per_class`` rows of each selected class: rows are picked from the label column alone, then
    only their images are read."""
    import hashlib

    import datasets

    ref = cfg.reference
    name = ref.source[len("hf:"):]
    repo, rev = split_rev(name)
    column, label = hf_label_feature(name, ref.hf_config, ref.label_column, ref.split)
    try:
        ds = datasets.load_dataset(repo, ref.hf_config, split=ref.split, revision=rev)
    except Exception as e:
        raise GensetsError(f"reference: hf:{name} split {ref.split!r} is not available: "
                           f"{str(e).strip().splitlines()[0][:200]}") from None
    image_col = next((k for k, f in ds.features.items() if isinstance(f, datasets.Image)), None)
    if image_col is None:
        raise GensetsError(f"reference: hf:{name} has no Image feature")
    matched, how = match_classes(label.names, cfg.class_names)
    report_match(f"reference {ref.source}", label.names, cfg.class_names, matched, how)
    wanted = {i: n for i, n in selected(cfg)}
    rows: dict[str, list[int]] = {n: [] for n in wanted.values()}
    for i, y in enumerate(ds[column]):  # the label column only: no image is read here
        n = wanted.get(matched.get(y, -1))
        if n is not None and len(rows[n]) < ref.per_class:
            rows[n].append(i)
    picked = sorted(i for r in rows.values() for i in r)
    images = ds.select_columns([image_col]).cast_column(image_col, datasets.Image(decode=False)).select(picked)
    data = {}
    for i, img in zip(picked, images[image_col], strict=True):
        data[i] = img["bytes"] if img.get("bytes") else Path(img["path"]).read_bytes()
    where = f"{source_name(ref.source)}/{ref.split}"
    return {n: [Reference(f"{where}#{i}", hashlib.sha256(data[i]).hexdigest(), data[i]) for i in r]
            for n, r in rows.items()}


def load_references(cfg: GenBenchConfig) -> dict[str, list[Reference]]:
    """Each selected class's reference images (the first ``per_class``, in file-name / dataset order)."""
    refs = _folder_references(cfg) if cfg.reference.source.startswith("folder:") else _hf_references(cfg)
    missing = [n for n in refs if not refs[n]]
    if missing:
        raise GensetsError(f"reference: no reference images for class {missing[0]!r} in {cfg.reference.source} "
                           f"({len(missing)} class(es) without any)")
    return refs


# ------------------------------------------------------------------ run
class Context:
    """Models (and reference images) loaded once per process, lazily."""

    def __init__(self, cfg: GenBenchConfig):
        self.cfg = cfg
        self.skipped: list[dict] = []
        self._generator = None
        self._text = None
        self._references = None

    def load(self) -> None:
        self.generator  # noqa: B018 - load now
        if "CE" in self.cfg.strategies:
            self.text  # noqa: B018
        if "RA" in self.cfg.strategies:
            self.references  # noqa: B018

    @property
    def generator(self):
        if self._generator is None:
            self._generator = self.cfg.generator.load()
        return self._generator

    @property
    def text(self):
        if self._text is None:
            from ..models.text import load_text2text

            self._text = load_text2text(self.cfg.expansion.model)
        return self._text

    @property
    def references(self) -> dict[str, list[Reference]]:
        if self._references is None:
            self._references = load_references(self.cfg)
        return self._references

    def expand(self, inputs: list[str], seeds: list[int]) -> list[str]:
        e = self.cfg.expansion
        return self.text.generate(inputs, seeds, max_new_tokens=e.max_new_tokens, do_sample=e.do_sample,
                                  top_p=e.top_p, temperature=e.temperature)


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """Make the unit's prompts, generate its images (timed), encode them, record their provenance."""
    from ..images import encode_image

    p = unit.payload
    cfg, g = ctx.cfg, ctx.cfg.generator
    ra = p["strategy"] == "RA"
    refs = ctx.references[p["class"]] if ra else None
    if ra and p["reference"].get("files") not in (None, [[r.id, r.sha256] for r in refs]):
        raise DataError(f"reference {cfg.reference.source}: the images of class {p['class']!r} changed while "
                        "building; run the build again")
    t0 = time.perf_counter()
    rows = unit_prompts(unit, expand=ctx.expand if p["strategy"] == "CE" else None, references=refs)
    expansion_seconds = time.perf_counter() - t0
    images: list[bytes] = []
    seconds = 0.0
    for start in range(0, len(rows), g.batch_size):
        batch = rows[start : start + g.batch_size]
        negatives = [r["negative_prompt"] for r in batch]
        init = [refs[r["reference"]].image() for r in batch] if ra else None
        t0 = time.perf_counter()
        pil = ctx.generator.generate(
            [r["prompt"] for r in batch], [r["seed"] for r in batch],
            negative_prompts=negatives if any(negatives) else None, steps=g.steps, guidance=g.guidance,
            width=g.width, height=g.height, init_images=init, strength=cfg.reference.strength)
        seconds += time.perf_counter() - t0
        images += [encode_image(im, cfg.image.format, cfg.image.quality) for im in pil]
    record_timing(build_id, unit.id, len(rows), seconds, expansion_seconds)
    gen = ctx.generator
    generator = g.provenance(gen, gen.img2img_pipe().__class__.__name__ if ra else None)
    samples = []
    for r, data in zip(rows, images, strict=True):
        prompting = dict(r["prompting"])
        if p["strategy"] == "CE":
            prompting.update(expansion_model=ctx.text.model_id, expansion_revision=ctx.text.revision)
        if ra:
            ref = refs[r["reference"]]
            prompting.update(init_image=ref.id, init_image_sha256=ref.sha256)
        prompting = {k: prompting.get(k) for k in ("template", "draw_seed", "expansion_model", "expansion_revision",
                                                    "expansion_input", "expansion_seed", "init_image",
                                                    "init_image_sha256", "strength")}
        meta = provenance(
            key=r["key"], builder="genbench", build=build_id, unit=unit.id, config=p["config"],
            label=p["class"], label_index=p["label_index"], strategy=p["strategy"], prompt=r["prompt"],
            negative_prompt=r["negative_prompt"], seed=r["seed"], steps=g.steps, guidance=g.guidance,
            width=g.width, height=g.height, generator=generator, prompting=prompting, source=g.model,
            kept=True, review=None)
        samples.append(Sample(key=r["key"], image=data, ext=cfg.image.format, cls=p["label_index"], meta=meta))
    return samples


# ------------------------------------------------------------------ the builder
class GenBenchBuilder:
    name = "genbench"
    description = (
        "Generated training images for image classification: K shots per class of a downstream dataset, "
        "one config per prompt strategy (simple template, defined templates, category enhancement, "
        "restrictive description, negative prompts, retrieval augmented), after GenBench (Li et al., 2023). "
        "Score them with CLER: `gensets report genbench`.")
    citation = """
@article{li2023genbench,
  title   = {Benchmarking and Analyzing Generative Data for Visual Recognition},
  author  = {Li, Bo and Liu, Haotian and Chen, Liangyu and Lee, Yong Jae and Li, Chunyuan and Liu, Ziwei},
  journal = {arXiv preprint arXiv:2307.13697},
  year    = {2023}
}"""
    config_class = GenBenchConfig
    split = "train"
    needs_review = False  # generated training data goes straight to accepted
    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)
    Context = Context

    @staticmethod
    def config_names(cfg: GenBenchConfig) -> list[str]:
        """One published config per (dataset, strategy), each with a train split."""
        return [config_name(cfg.dataset_name, s) for s in cfg.strategies]

    @staticmethod
    def class_names(cfg: GenBenchConfig) -> list[str]:
        return list(cfg.class_names)

    @staticmethod
    def config_of(meta: dict) -> str:
        return meta["config"]

    @staticmethod
    def relabel(meta: dict, new_class: str):
        raise KeyError(new_class)  # generated training data has no review step

    @staticmethod
    def card_body(cfg: GenBenchConfig, manifest: dict, samples: list) -> str:
        """The card's "How it was built" section: dataset, strategies and their prompts, seeds, cost."""
        from ..cards.markdown import table

        g = cfg.generator
        gen = samples[0].meta["generator"] if samples else {}
        first = {}
        for s in samples:
            first.setdefault(s.meta["strategy"], s.meta)
        rows = []
        for st in cfg.strategies:
            m = first.get(st, {})
            cell = (m.get("prompt") or "-").replace("|", "\\|")
            neg = (m.get("negative_prompt") or "(none)").replace("|", "\\|")
            rows.append([f"`{config_name(cfg.dataset_name, st)}`", st, DESCRIPTIONS[st], f"`{cell}`",
                         f"`{neg[:120]}{'...' if len(neg) > 120 else ''}`",
                         manifest["counts"].get(config_name(cfg.dataset_name, st), 0)])
        n_classes = len(selected(cfg))
        details = [f"- ST: `{cfg.simple_template}`."]
        if "DT" in cfg.strategies:
            details.append(f"- DT: the {len(cfg.templates)} templates of the dataset, e.g. `{cfg.templates[0]}`.")
        if "CE" in cfg.strategies:
            e = cfg.expansion
            details.append(f"- CE: `{e.model}` expands `{e.input}` into {e.prompts} sentences per class, each "
                           f"sampled under its own seed (top-p {e.top_p}, temperature {e.temperature}, at most "
                           f"{e.max_new_tokens} new tokens); the sentence is the prompt.")
        if "RD" in cfg.strategies:
            details.append(f"- RD: `{cfg.simple_template}, {cfg.restrictive}`.")
        if "NP" in cfg.strategies:
            details.append(f"- NP: negative prompt = {cfg.negative.classes} other class names of the dataset "
                           f"(a seeded sample per image) + `{cfg.negative.quality}`.")
        if "RA" in cfg.strategies:
            r = cfg.reference
            details.append(f"- RA: image-to-image (strength {r.strength}) from the first {r.per_class} reference "
                           f"images of each class in `{r.source}`; each image records its init image and sha256.")
        c = cfg.cost
        m = measured(manifest["build"], {s.meta["unit"] for s in samples}) if samples else None
        price = f"{c.price_per_hour:g} {c.currency}/hour" + (f" ({c.hardware})" if c.hardware else "")
        if m:
            per = cost_per_image(m["seconds_per_image"], c.price_per_hour)
            cost = (f"Measured while building: {m['seconds_per_image']:.3f} generator seconds per image over "
                    f"{m['images']} images on {', '.join(m['devices'])}; at {price} that is "
                    f"**{per:.6f} {c.currency} per image** ({1000 * per:.4f} per 1,000).")
        else:
            cost = (f"Generator time was not measured on this machine (timings are kept per build under "
                    f"`$GENSETS_CACHE/timings/{manifest['build']}` where it was built); price {price}.")
        ref_rows = [[k, f"{v.per_image:g} {c.currency}", v.source] for k, v in c.reference.items()]
        refs = ("\n\nFor comparison:\n\n" + table(["way to get an image", "per image", "source"], ref_rows)
                if ref_rows else "")
        return f"""
- Classes: {n_classes} of the {len(cfg.class_names)} classes of `{cfg.dataset}` (metric {cfg.metric}),
  {cfg.shots} generated shots per class and strategy, label ids as in the dataset.
- Generator: `{g.model}` (id `{gen.get('id')}`, revision `{gen.get('revision')}`), scheduler
  `{gen.get('scheduler')}`, {g.steps} steps, guidance {g.guidance}, {g.width}x{g.height}, base seed {cfg.seed}.
- Seeds: every image's seed is derived from (base seed, dataset, strategy, class, shot). A strategy's
  prompt pool is shuffled once per round of shots, each round under its own seed (`prompting.draw_seed`),
  so when K exceeds the prompts a strategy yields, prompts are drawn again.

{table(["config", "strategy", "what", "example prompt", "negative prompt", "images"], rows)}

{chr(10).join(details)}

### Cost

{cost}{refs}

Score the strategies with CLER (and CLIP zero-shot, a linear probe, FD/KID/precision/recall):
`gensets report genbench WORKSPACE --test <real test images>`.
"""


BUILDER = BUILDERS.register("genbench", GenBenchBuilder())
