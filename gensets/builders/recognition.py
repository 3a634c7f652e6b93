"""Generated-image recognition sets (Borji 2022): everyday categories, generated or imported.

Each category maps to the ImageNet indices that count as correct (its word set over the ImageNet
names, with synonyms: clock -> analog / wall / digital clock; rabbit ~ hare), so a set is scored with
both the ``imagenet`` (index) and ``wordset`` protocols of ``gensets eval``. Sources mix freely:
``generate`` (one or more generators; every image records its generator) and ``imports`` (a folder of
``category/*.jpg`` or a CSV / JSONL of path, category, source). One published config per source, so
results compare per generator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from ..config import to_dict
from ..records import Sample, content_id, derive_seed, provenance, slug
from .common import GeneratorConfig, ImageConfig, Unit

BORJI_2022 = """
@article{borji2022generated,
  title   = {How good are deep models in understanding the generated images?},
  author  = {Borji, Ali},
  journal = {arXiv preprint arXiv:2208.10760},
  year    = {2022}
}"""


def default_categories() -> list[str]:
    from ..labels.wordset import BORJI_CATEGORIES

    return list(BORJI_CATEGORIES)


@dataclass(frozen=True)
class GenerateSource:
    generator: GeneratorConfig
    name: str | None = None  # the config name; default: from the generator spec
    images_per_category: int = 10
    template: str = "a photo of a {}"

    def validate(self, base_dir: Path) -> None:
        if self.images_per_category < 1:
            raise ValueError("images_per_category: must be at least 1")
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
        if not (base_dir / self.path).exists():
            raise ValueError(f"path: not found: {base_dir / self.path}")

    @property
    def config_name(self) -> str:
        return slug(self.name or self.source or "imported")


@dataclass(frozen=True)
class RecognitionConfig:
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

    def validate(self, base_dir: Path) -> None:
        if not self.generate and not self.imports:
            raise ValueError("give at least one source: generate or imports")
        names = [s.config_name for s in (*self.generate, *self.imports)]
        if len(set(names)) != len(names):
            raise ValueError(f"sources must have distinct names (got {names}); set name: on each")

    def resolved(self, base_dir: Path) -> RecognitionConfig:
        cats = tuple(default_categories()) if self.categories == "borji" else self.categories
        imports = tuple(replace(s, path=str((base_dir / s.path).resolve())) for s in self.imports)
        return replace(self, categories=cats, imports=imports)


def category_ids(cfg: RecognitionConfig) -> dict[str, list[int]]:
    """Each category -> the ImageNet indices its word set (with synonyms) hits."""
    from ..labels.imagenet import imagenet_names
    from ..labels.wordset import SYNONYMS, wordset_targets

    names = imagenet_names()
    syn = {k: list(v) for k, v in SYNONYMS.items()}
    for k, v in (cfg.synonyms or {}).items():
        syn.setdefault(k, []).extend(v)
    return {c: wordset_targets(c, names, syn) for c in cfg.categories}


def plan(cfg: RecognitionConfig) -> list[Unit]:
    from .importing import file_digest, list_items

    units = []
    base = {"builder": "recognition", "seed": cfg.seed, "image": to_dict(cfg.image),
            "categories": list(cfg.categories), "max_pixels": cfg.max_pixels}
    for src in cfg.generate:
        rows = [(c, i) for c in cfg.categories for i in range(src.images_per_category)]
        for start in range(0, len(rows), cfg.unit_size):
            payload = {**base, "kind": "generate", "config": src.config_name, "generator": to_dict(src.generator),
                       "template": src.template, "images": rows[start : start + cfg.unit_size]}
            units.append(Unit(content_id(payload), payload))
    for src in cfg.imports:
        items = list_items(Path(src.path), src.source)
        rows = [{"path": it.path, "category": it.category, "source": it.source, "key": it.key,
                 "sha256": file_digest(it.path)} for it in items]
        for start in range(0, len(rows), cfg.unit_size):
            payload = {**base, "kind": "import", "config": src.config_name, "items": rows[start : start + cfg.unit_size]}
            units.append(Unit(content_id(payload), payload))
    return units


class Context:
    def __init__(self, cfg: RecognitionConfig):
        self.cfg = cfg
        self.generators: dict[str, object] = {}
        self.ids = category_ids(cfg)

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
    return provenance(key=key, builder="recognition", build=build_id, unit=unit.id, config=unit.payload["config"],
                      label=category,
                      label_index=cats.index(category) if category in cats else None,
                      imagenet_ids=ctx.ids.get(category), kept=True, **kw)


def _generate(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    from ..shards import encode_image

    p = unit.payload
    src = next(s for s in ctx.cfg.generate if s.config_name == p["config"])
    g = src.generator
    gen = ctx.generator(g)
    rows = [{"category": c, "i": i, "prompt": src.template.format(c),
             "seed": derive_seed(p["seed"], p["config"], c, i)} for c, i in p["images"]]
    images = []
    for start in range(0, len(rows), g.batch_size):
        batch = rows[start : start + g.batch_size]
        images += gen.generate([r["prompt"] for r in batch], [r["seed"] for r in batch],
                               negative_prompts=[g.negative_prompt] * len(batch) if g.negative_prompt else None,
                               steps=g.steps, guidance=g.guidance, width=g.width, height=g.height)
    generator = g.provenance(gen)
    out = []
    for r, im in zip(rows, images, strict=True):
        key = f"{p['config']}_{slug(r['category'])}_{r['i']:04d}"
        meta = _meta(ctx, unit, build_id, key, r["category"], prompt=r["prompt"],
                     negative_prompt=g.negative_prompt, seed=r["seed"], steps=g.steps, guidance=g.guidance,
                     width=g.width, height=g.height, generator=generator, source=g.model)
        out.append(Sample(key, encode_image(im, ctx.cfg.image.format, ctx.cfg.image.quality),
                          ctx.cfg.image.format, meta["label_index"], meta))
    return out


def _import(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    from ..shards import encode_image
    from .importing import Skip, load_checked

    p = unit.payload
    cfg = ctx.cfg
    out = []
    for it in p["items"]:
        if it["category"] not in cfg.categories:
            ctx.skipped.append({"path": it["path"], "reason": f"unknown category '{it['category']}'"})
            continue
        try:
            data, ext, rgb = load_checked(it["path"], cfg.max_pixels)
        except Skip as e:
            ctx.skipped.append({"path": it["path"], "reason": str(e)})
            continue
        if ext != cfg.image.format:  # keep the original bytes when they are already in the set's format
            data = encode_image(rgb, cfg.image.format, cfg.image.quality)
        key = it["key"] or f"{p['config']}_{slug(it['category'])}_{it['sha256'][:12]}"
        meta = _meta(ctx, unit, build_id, key, it["category"], nuisance_kind=p["config"],
                     width=rgb.width, height=rgb.height, source=it["source"], original_path=it["path"],
                     original_sha256=it["sha256"])
        out.append(Sample(slug(key), data, cfg.image.format, meta["label_index"], meta))
    return out


class RecognitionBuilder:
    name = "recognition"
    description = ("Generated (or collected) images of everyday categories for testing ImageNet classifiers "
                   "on generated images, after Borji, 'How good are deep models in understanding the "
                   "generated images?' (2022). Each category counts the ImageNet classes whose names contain "
                   "its word (with synonyms) as correct.")
    citation = BORJI_2022
    config_class = RecognitionConfig
    split = "test"
    needs_review = False
    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)
    Context = Context

    @staticmethod
    def config_names(cfg: RecognitionConfig) -> list[str]:
        return [s.config_name for s in (*cfg.generate, *cfg.imports)]

    @staticmethod
    def class_names(cfg: RecognitionConfig) -> list[str]:
        return list(cfg.categories)

    @staticmethod
    def config_of(meta: dict) -> str:
        return meta["config"]

    @staticmethod
    def relabel(meta: dict, new_class: str):
        raise KeyError(new_class)  # recognition sets have no review step

    @staticmethod
    def card_body(cfg: RecognitionConfig, manifest: dict, samples: list) -> str:
        """The card's "How it was built" section: sources, category word sets, skipped imports."""
        from ..cards.card import _table
        from ..labels.imagenet import imagenet_names

        names = imagenet_names()
        ids = category_ids(cfg)
        src_rows = [[s.config_name, "generated", f"`{s.generator.model}`", f"{s.images_per_category} per category",
                     f"`{s.template}`, {s.generator.steps} steps, guidance {s.generator.guidance}"]
                    for s in cfg.generate]
        src_rows += [[s.config_name, "imported", s.source or "-", manifest["counts"].get(s.config_name, 0), "-"]
                     for s in cfg.imports]
        cat_rows = [[c, ", ".join(f"{names[i]} ({i})" for i in ids[c]) or "(no ImageNet class)"]
                    for c in cfg.categories]
        return f"""
{_table(["config", "kind", "generator / source", "images", "settings"], src_rows)}

Each category is its own word set: a prediction counts as correct when the category's word (or a
synonym) appears among the words of the predicted ImageNet class name, so these ImageNet classes count:

{_table(["category", "ImageNet classes that count (index)"], cat_rows)}

Imported files that are not images, corrupt or truncated, or over {cfg.max_pixels} pixels are skipped
with their reason (see `skipped` in the workspace's state.duckdb).
"""


BUILDER = RecognitionBuilder()
