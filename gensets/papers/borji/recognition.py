"""Generated-image recognition sets (Borji 2022): everyday categories, generated or imported.

Each category maps to the ImageNet indices that count as correct (``json.imagenet_ids``: its word set over the
ImageNet-1k label names by the paper's rule, :func:`gensets.labels.wordset.imagenet_label_words`, with the paper's
synonym rabbit ~ hare and the config's ``synonyms``: clock -> analog / wall / digital clock), so a set is scored with
both the ``imagenet`` (index) and ``wordset`` protocols of ``gensets eval``. Sources mix freely:
``generate`` (one or more generators; every image records its generator) and ``imports`` (a folder of
``category/*.jpg`` or a CSV / JSONL of path, category, source). One published config per source, so
results compare per generator. ``eval.models`` lists the classifiers that score the set (the card shows
them and ``gensets leaderboard --models configs/leaderboard.recognition.yaml`` reads them).

Where the files lie never enters a build: import paths stay as written (relative to the config file), units
know an imported file by its import, its path inside the import (``rel``) and its sha256, and skip reasons
name files relative to the config, so the same config and files copied to another directory build the same
fingerprint, unit ids and shards. The file is found at run time under ``cfg.base_dir`` (the config's folder).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Literal

from ...builders import base
from ...builders.common import BuildFields, GeneratorConfig, ImageConfig, Unit, check_spec
from ...cards.markdown import code, table, text
from ...config import check_count, to_dict
from ...errors import DataError
from ...labels.wordset import BORJI_CATEGORIES, SYNONYMS, imagenet_label_words, wordset_targets
from ...records import Sample, derive_seed, slug
from ...registry import BUILDERS
from ...sources.imports import check_max_pixels, file_digest, list_items
from .common import chunked_units, load_or_skip

BORJI_2022 = """
@article{borji2022generated,
  title   = {How good are deep models in understanding the generated images?},
  author  = {Borji, Ali},
  journal = {arXiv preprint arXiv:2208.10760},
  year    = {2022}
}"""


# the provenance fields recognition sets add to the common ones (records.schema); an import's config is its
# nuisance_kind
FIELDS = (("imagenet_ids", ("list", "int64")), ("synonyms", ("list", "string")), ("nuisance_kind", "string"),
          ("original_path", "string"), ("original_sha256", "string"))

FIELD_DOCS = {
    "imagenet_ids": "the ImageNet-1k class indices that count as this class (names: the ImageNet-1k class list)" + " (the category's word set over the ImageNet label names)",
    "synonyms": "the extra words that count for the category (the paper's and the config's synonyms)",
    "nuisance_kind": "the image's source: its published config",
    "original_path": "an imported image's path inside its import (null: generated)",
    "original_sha256": "an imported image's sha256 (null: generated)",
}


def default_categories() -> list[str]:
    return list(BORJI_CATEGORIES)


@dataclass(frozen=True)
class GenerateSource:
    generator: GeneratorConfig
    name: str | None = None  # the config name; default: from the generator spec
    images_per_category: int = 10
    template: str = "a photo of a {}"

    def validate(self, base_dir: Path) -> None:
        check_count("images_per_category", self.images_per_category)
        if "{}" not in self.template:
            raise ValueError("template: must contain {} for the category")

    @property
    def config_name(self) -> str:
        return slug(self.name or self.generator.model.split("@")[0])


@dataclass(frozen=True)
class ImportSource:
    path: str  # a folder of category/*.jpg, or a .csv / .jsonl with path, category[, source, key]
    source: str | None = None  # who made the images (e.g. "dall-e-2"), recorded per sample
    name: str | None = None  # the config name; default: the source, else "imported"

    def validate(self, base_dir: Path) -> None:
        pass  # the path is looked for by RecognitionConfig.validate

    @property
    def config_name(self) -> str:
        return slug(self.name or self.source or "imported")


@dataclass(frozen=True)
class EvalModels:
    models: tuple[str, ...] = ()  # model specs (e.g. timm:hf-hub:timm/resnet50.tv_in1k) that score the set

    def validate(self, base_dir: Path) -> None:
        for i, m in enumerate(self.models):
            check_spec(m, f"models[{i}]")


@dataclass(frozen=True)
class RecognitionConfig(BuildFields):
    builder: Literal["recognition"]
    name: str = "recognition"
    pretty_name: str = "Generated-image recognition set (gensets)"
    license: str = "cc-by-4.0"
    seed: int = 0
    categories: Literal["borji"] | tuple[str, ...] = "borji"  # names; each is its own word set
    synonyms: dict[str, tuple[str, ...]] | None = None  # extra synonyms, e.g. {rabbit: [hare]}
    generate: tuple[GenerateSource, ...] = ()
    imports: tuple[ImportSource, ...] = ()
    max_pixels: int = 50_000_000  # larger images are skipped as decompression bombs
    image: ImageConfig = ImageConfig()
    unit_size: int = 16  # images per work unit
    shard_size: int = 1000
    eval: EvalModels | None = None  # the models that score the set
    # Where the import paths lead (the config file's folder): set by load_build_config.
    base_dir: ClassVar[Path] = Path(".")

    def validate(self, base_dir: Path | None) -> None:
        check_max_pixels(self.max_pixels)
        for key in ("unit_size", "shard_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be at least 1, got {getattr(self, key)}")
        if base_dir is not None:  # not in a workspace's frozen copy (see gensets.config)
            for i, s in enumerate(self.imports):
                if not (base_dir / s.path).exists():
                    raise ValueError(f"imports: [{i}] path: not found: {base_dir / s.path}")
        if not self.generate and not self.imports:
            raise ValueError("give at least one source: generate or imports")
        names = [s.config_name for s in (*self.generate, *self.imports)]
        if len(set(names)) != len(names):
            raise ValueError(f"sources must have distinct names (got {names}); set name: on each")
        if self.categories != "borji":
            keys = {}
            for c in self.categories:  # a category's slug is part of its sample keys
                if keys.setdefault(slug(c), c) != c:
                    raise ValueError(f"categories: {keys[slug(c)]!r} and {c!r} give the same key {slug(c)!r}")

    def resolved(self, base_dir: Path) -> RecognitionConfig:
        """Categories read into the config, so the frozen copy stands alone. Import paths stay as written
        (the frozen copy and the card hold no absolute path of this machine); ``base_dir`` is kept beside
        the config (not in it) to read the imports from."""
        cats = tuple(default_categories()) if self.categories == "borji" else self.categories
        return replace(self, categories=cats)


def category_synonyms(cfg: RecognitionConfig) -> dict[str, list[str]]:
    """Each category -> its alternative words: the paper's SYNONYMS (rabbit ~ hare) and the config's ``synonyms``.
    Every sample carries its category's list (``json.synonyms``), so the ``wordset`` protocol of
    ``gensets eval`` counts the same words that ``imagenet_ids`` were computed from."""
    syn: dict[str, list[str]] = {}
    for k, v in (*SYNONYMS.items(), *(cfg.synonyms or {}).items()):  # keys as wordset reads them
        alts = syn.setdefault(k.strip().lower(), [])
        alts += [w for w in v if w not in alts]
    return {c: syn.get(c.strip().lower(), []) for c in cfg.categories}


def category_ids(cfg: RecognitionConfig) -> dict[str, list[int]]:
    """Each category -> the ImageNet indices its word set (with synonyms) hits, by the paper's rule: the words of
    the ImageNet-1k label names (the first lemma: 33 "loggerhead" is no turtle), not CLIP's names (gensets
    before issue #24: "loggerhead sea turtle") nor the lemma lists."""
    names = imagenet_label_words("names")
    return {c: wordset_targets(c, names, {c: alts}) for c, alts in category_synonyms(cfg).items()}


def _generated_key(config: str, category: str, i: int) -> str:
    return f"{config}_{slug(category)}_{i:04d}"


def import_items(cfg: RecognitionConfig, src: ImportSource):
    """The files of an import, listed under ``cfg.base_dir``: (Item, its name relative to the config)
    per file. The name is what skip reasons and messages show; it holds no absolute path of this machine
    unless the config wrote one."""
    root = cfg.base_dir / src.path
    if not root.exists():
        raise DataError(f"import {src.path}: not found under {cfg.base_dir}")
    top = Path(src.path) if root.is_dir() else Path(src.path).parent
    return [(it, (top / it.rel).as_posix()) for it in list_items(root, src.source)]


def plan(cfg: RecognitionConfig) -> list[Unit]:
    units = []
    base = {"builder": "recognition", "seed": cfg.seed, "image": to_dict(cfg.image),
            "categories": list(cfg.categories), "max_pixels": cfg.max_pixels}
    owner: dict[str, tuple[str, str | None]] = {}  # sample key -> (what has it, its sha256)
    for src in cfg.generate:
        rows = [(c, i) for c in cfg.categories for i in range(src.images_per_category)]
        owner.update({_generated_key(src.config_name, c, i): (f"generator config {src.config_name}", None)
                      for c, i in rows})
        units += chunked_units({**base, "kind": "generate", "config": src.config_name,
                                "generator": to_dict(src.generator), "template": src.template},
                               "images", rows, cfg.unit_size)
    for src in cfg.imports:
        rows = []
        # a file is known by its import (the unit's config), its index in the import's listing and its path
        # inside the import (checked again at run time) and its sha256: never by where it lies
        for index, (it, where) in enumerate(import_items(cfg, src)):
            row = {"index": index, "rel": it.rel, "category": it.category, "source": it.source, "key": None,
                   "sha256": None, "skip": it.skip}
            if row["skip"] is None and it.category not in cfg.categories:
                row["skip"] = f"unknown category '{it.category}'"
            if row["skip"] is None:
                sha = row["sha256"] = file_digest(it.path)
                key = row["key"] = slug(it.key or f"{src.config_name}_{it.category}_{sha[:12]}")
                if key in owner:  # a second sample with one key: skipped, the first one stays
                    first, first_sha = owner[key]
                    row["skip"] = (f"duplicate of {first}" if sha == first_sha
                                   else f"key '{key}' is already used by {first}")
                elif not sha.startswith("unreadable:"):  # skipped when read; its key stays free
                    owner[key] = (where, sha)
            rows.append(row)
        units += chunked_units({**base, "kind": "import", "config": src.config_name}, "items", rows, cfg.unit_size)
    return units


class Context(base.Context):
    """One generator per generate source, the categories' ImageNet ids and synonyms, the imports' files."""

    def __init__(self, cfg: RecognitionConfig):
        super().__init__(cfg)
        self.generators: dict[str, object] = {}
        self.ids = category_ids(cfg)
        self.synonyms = category_synonyms(cfg)
        self.listed: dict[str, list] = {}  # import config name -> import_items(), listed once per process

    def import_items(self, src: ImportSource) -> list:
        if src.config_name not in self.listed:
            self.listed[src.config_name] = import_items(self.cfg, src)
        return self.listed[src.config_name]

    def generator(self, g: GeneratorConfig):
        if g.model not in self.generators:
            self.generators[g.model] = g.load()
        return self.generators[g.model]

    def load(self) -> None:
        for src in self.cfg.generate:
            self.generator(src.generator)


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    p = unit.payload
    if p["kind"] == "generate":
        return _generate(unit, ctx, build_id)
    return _import(unit, ctx, build_id)


def _meta(ctx, unit, build_id, key, category, **kw) -> dict:
    cats = list(ctx.cfg.categories)
    return RecognitionBuilder.provenance(key=key, build=build_id, unit=unit.id, config=unit.payload["config"],
                      label=category,
                      label_index=cats.index(category) if category in cats else None,
                      imagenet_ids=ctx.ids.get(category), synonyms=ctx.synonyms.get(category), kept=True, **kw)


def _rows(src: GenerateSource, p: dict) -> list[dict]:
    """The images of a generate unit: category, index, prompt, seed."""
    return [{"category": c, "i": i, "prompt": src.template.format(c),
             "seed": derive_seed(p["seed"], p["config"], c, i)} for c, i in p["images"]]


def _generate(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    p = unit.payload
    src = next(s for s in ctx.cfg.generate if s.config_name == p["config"])
    g = src.generator
    gen = ctx.generator(g)
    rows = _rows(src, p)
    images, _, texts = base.generate_encoded(gen, g, ctx.cfg.image, [r["prompt"] for r in rows],
                                             [r["seed"] for r in rows])
    out = []
    for i, (r, data) in enumerate(zip(rows, images, strict=True)):
        key = _generated_key(p["config"], r["category"], r["i"])
        meta = _meta(ctx, unit, build_id, key, r["category"], prompt=r["prompt"],
                     negative_prompt=g.negative_prompt, seed=r["seed"], steps=g.steps, guidance=g.guidance,
                     width=g.width, height=g.height, generator=g.provenance(gen, index=i, count=len(rows)),
                     source=g.model, **texts[i])
        out.append(Sample(key, data, ctx.cfg.image.format, meta["label_index"], meta))
    return out


def _import(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    p = unit.payload
    cfg = ctx.cfg
    src = next(s for s in cfg.imports if s.config_name == p["config"])
    listed = ctx.import_items(src)
    out = []
    for it in p["items"]:
        found = listed[it["index"]] if it["index"] < len(listed) else None
        if found is None or found[0].rel != it["rel"]:
            raise DataError(f"import {src.path}: its files changed since the build was planned "
                            f"({it['rel']} is not where it was); run the build again")
        item, where = found
        # it["skip"]: known at planning (outside a category folder, unknown category, duplicate)
        got = load_or_skip(ctx, item.path, it["sha256"], where, it["skip"])
        if got is None:
            continue
        data, rgb = got
        meta = _meta(ctx, unit, build_id, it["key"], it["category"], nuisance_kind=p["config"],
                     width=rgb.width, height=rgb.height, source=it["source"], original_path=it["rel"],
                     original_sha256=it["sha256"])
        out.append(Sample(it["key"], data, cfg.image.format, meta["label_index"], meta))
    return out


@BUILDERS.register("recognition")
class RecognitionBuilder(base.Builder):
    description = ("Generated (or collected) images of everyday categories for testing ImageNet classifiers "
                   "on generated images, after Borji, 'How good are deep models in understanding the "
                   "generated images?' (2022). Each category counts the ImageNet classes whose names contain "
                   "its word (with synonyms) as correct.")
    citation = BORJI_2022
    Config = RecognitionConfig
    Context = Context
    fields = FIELDS
    field_docs = FIELD_DOCS

    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)

    def planned_images(self, cfg: RecognitionConfig) -> list[tuple[tuple[str, int], ...]]:
        """The generated images (imports are files that exist: not counted)."""
        return [(("categories", len(cfg.categories)), (f"generate[{i}].images_per_category", src.images_per_category))
                for i, src in enumerate(cfg.generate)]


    def work(self, unit: Unit) -> base.Work:
        p = unit.payload
        if p["kind"] == "generate":
            return base.Work({p["config"]: len(p["images"])}, p["generator"])
        return base.Work({p["config"]: len(p["items"])})

    def check_prompts(self, unit: Unit, ctx: Context) -> None:
        p = unit.payload
        if p["kind"] == "generate":
            src = next(s for s in ctx.cfg.generate if s.config_name == p["config"])
            base.check_prompts(ctx.generator(src.generator), src.generator, [r["prompt"] for r in _rows(src, p)])

    def config_names(self, cfg: RecognitionConfig) -> list[str]:
        return [s.config_name for s in (*cfg.generate, *cfg.imports)]

    def class_names(self, cfg: RecognitionConfig) -> list[str]:
        return list(cfg.categories)

    def card_body(self, cfg: RecognitionConfig, manifest: dict, samples: list) -> str:
        """The card's "How it was built" section: sources, category word sets, skipped imports."""
        names = imagenet_label_words("names")
        ids = category_ids(cfg)
        src_rows = [[s.config_name, "generated", f"`{s.generator.model}`", f"{s.images_per_category} per category",
                     f"{code(s.template, in_table=True)}, {s.generator.steps} steps, guidance {s.generator.guidance}"]
                    for s in cfg.generate]
        src_rows += [[text(s.config_name), "imported", text(s.source or "-"), manifest["counts"].get(s.config_name, 0),
                      "-"]
                     for s in cfg.imports]
        cat_rows = [[text(c), ", ".join(f"{names[i]} ({i})" for i in ids[c]) or "(no ImageNet class)"]
                    for c in cfg.categories]
        specs = cfg.eval.models if cfg.eval else ()
        models = ("\nThe classifiers that score it (`eval.models`; `gensets eval DATASET --model SPEC ... --protocol "
                  "imagenet`, then `--protocol wordset`; `--allow-pickle` for `torchvision:` weights):\n\n" + "\n".join(f"- `{m}`" for m in specs) + "\n"
                  ) if specs else ""
        return f"""
{table(["config", "kind", "generator / source", "images", "settings"], src_rows)}

Each category is its own word set: a prediction counts as correct when the category's word (or a
synonym) appears among the words of the predicted ImageNet class name, so these ImageNet classes count:

{table(["category", "ImageNet classes that count (index)"], cat_rows)}

Imported files that are not images, corrupt or truncated, over {cfg.max_pixels} pixels, outside a
category folder, of an unknown category or duplicates of another file are skipped with their reason (see
`skipped` in the workspace's state.duckdb). Imported images are published without their metadata (EXIF,
XMP, ICC, text); `json.original_sha256` is the original file's hash, `json.original_path` its path
relative to the import.
{models}"""

