"""ImageNet-D (Zhang et al., CVPR 2024): objects on unusual backgrounds, textures and materials.

The prompt grid is (class x nuisance x image index); a work unit is one class with a chunk of the
nuisances of one kind. Each image is scored by every surrogate classifier right after generation and
kept when at least ``min_failures`` of them miss all of the class's ImageNet ids in their top-k.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ...builders import base
from ...builders.common import BuildFields, GeneratorConfig, ImageConfig, Unit, check_spec
from ...cards.markdown import code, table, text
from ...config import check_count, control_char, to_dict
from ...curation import surrogates
from ...curation.surrogates import SurrogateFilter
from ...errors import did_you_mean
from ...images import decode_image
from ...records import Sample, content_id, derive_seed, slug
from ...registry import BUILDERS
from ...sources.packaged import imagenet_d_class_names, imagenet_d_classes, imagenet_d_nuisances

KINDS = ("background", "texture", "material")
# the provenance fields ImageNet-D adds to the common provenance (records.schema)
FIELDS = (("imagenet_ids", ("list", "int64")), ("nuisance_kind", "string"), ("nuisance", "string"),
          *surrogates.FIELDS)
FIELD_DOCS = {
    "imagenet_ids": "the ImageNet-1k class indices that count as this class (names: the ImageNet-1k class list)",
    "nuisance_kind": "background, texture or material: the image's config",
    "nuisance": "the nuisance (a background, texture or material name) in the prompt",
    **surrogates.FIELD_DOCS,
}
DEFAULT_TEMPLATES = {
    # the paper's prompt forms, one per nuisance kind
    "background": "a photo of a {cls} in the {nuisance}",
    "texture": "a photo of a {cls} with {nuisance} texture",
    "material": "a photo of a {cls} made of {nuisance}",
}


def prompt_name(name: str) -> str:
    """How a class or nuisance name reads in a prompt: 'living_room-s' -> 'living room'."""
    if name.endswith("-s"):
        name = name[:-2]
    return name.replace("_", " ").replace("-", " ").replace("/", " or ").strip()


def read_names(path: Path) -> list[str]:
    """Nuisance names from a CSV with a ``name`` column, or a text file with one name per line.

    Raises ValueError naming the file when it cannot be read, is not UTF-8, or has no ``name`` column.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read ({e.strerror or e})") from None
    if path.suffix.lower() == ".csv":
        try:
            reader = csv.DictReader(text.splitlines())
            if "name" not in (reader.fieldnames or ()):
                raise ValueError(f"{path}: expected a CSV with a 'name' column")
            names = [(r["name"] or "").strip() for r in reader]
        except csv.Error as e:
            raise ValueError(f"{path}: malformed CSV ({e})") from None
        names = [n for n in names if n]
    else:
        names = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    for n in names:
        if control_char(n):
            raise ValueError(f"{path}: name {n[:80]!r} has control character {control_char(n)}; refusing it")
    return names


@dataclass(frozen=True)
class NuisanceConfig:
    """One nuisance kind: names from the packaged list, a file of the user's, or inline."""

    source: str = "builtin"  # "builtin", or a .csv (with a name column) / .txt file, relative to the config
    names: tuple[str, ...] = ()  # inline names; when given, source is not read
    limit: int | None = None  # keep the first N names
    template: str | None = None  # prompt; {cls} and {nuisance} are filled in

    def validate(self, base_dir: Path) -> None:
        if self.source != "builtin" and not self.names:
            if not (base_dir / self.source).is_file():
                raise ValueError(f"source: data file not found: {base_dir / self.source}")
            try:  # read here, where a bad file is reported against this key; resolved() reads it again
                read_names(base_dir / self.source)
            except ValueError as e:
                raise ValueError(f"source: {e}") from None
        if self.limit is not None:
            check_count("limit", self.limit)
        if self.template is not None and "{cls}" not in self.template:
            raise ValueError("template: must contain {cls}")


@dataclass(frozen=True)
class FilterConfig:
    models: tuple[str, ...] = ()  # surrogate classifier specs over the ImageNet-1k label space
    top_k: int = 1  # an image fails a surrogate when none of its class's ids is in the top-k
    min_failures: int | None = None  # keep images failed by at least this many surrogates (default: all)
    batch_size: int = 16
    templates: tuple[str, ...] = ("a photo of a {}.",)  # for zero-shot (CLIP) surrogates

    def validate(self, base_dir: Path) -> None:
        for spec in self.models:
            check_spec(spec, "models")
        if not 1 <= self.top_k <= 5:
            raise ValueError("top_k: must be between 1 and 5")
        if self.min_failures is not None and not 0 <= self.min_failures <= len(self.models):
            raise ValueError(f"min_failures: must be between 0 and the number of models ({len(self.models)})")


@dataclass(frozen=True)
class ImageNetDConfig(BuildFields):
    builder: Literal["imagenet-d"]
    generator: GeneratorConfig
    name: str = "imagenet-d"
    pretty_name: str = "ImageNet-D (gensets)"
    license: str = "mit"
    seed: int = 0
    classes: Literal["all"] | tuple[str, ...] = "all"  # class folder names, e.g. [backpack, mug]
    images_per_pair: int = 1  # images per (class, nuisance)
    nuisances: dict[str, NuisanceConfig] = field(default_factory=dict)
    filter: FilterConfig = FilterConfig()
    image: ImageConfig = ImageConfig()
    unit_size: int = 8  # nuisances per work unit (a unit is the resumable, atomic piece of a build)
    shard_size: int = 1000  # samples per published shard

    def validate(self, base_dir: Path) -> None:
        table = imagenet_d_classes()
        if self.classes != "all":
            unknown = [c for c in self.classes if c not in table]
            if unknown:
                raise ValueError(f"classes: unknown class {unknown[0]!r}{did_you_mean(unknown[0], table)} (not one of "
                                 "ImageNet-D's 113 classes)")
        bad = [k for k in self.nuisances if k not in KINDS]
        if bad:
            raise ValueError(f"nuisances: unknown nuisance kind {bad[0]!r} (known: {', '.join(KINDS)})")
        if not self.nuisances:
            raise ValueError("nuisances: give at least one of background, texture, material")
        for key in ("images_per_pair", "unit_size", "shard_size"):
            check_count(key, getattr(self, key))

    def resolved(self, base_dir: Path) -> ImageNetDConfig:
        """Nuisance lists read from their files into the config, so the frozen copy stands alone."""
        nuis = {}
        for kind, n in self.nuisances.items():
            if n.names:
                names = list(n.names)
            elif n.source == "builtin":
                names = imagenet_d_nuisances(kind)
            else:
                names = read_names(base_dir / n.source)
            if n.limit:
                names = names[: n.limit]
            nuis[kind] = NuisanceConfig(source="inline", names=tuple(names), limit=None,
                                        template=n.template or DEFAULT_TEMPLATES[kind])
        classes = tuple(imagenet_d_classes()) if self.classes == "all" else self.classes
        return replace(self, nuisances=nuis, classes=classes)


def plan(cfg: ImageNetDConfig) -> list[Unit]:
    """Deterministic work units: (kind, class, chunk of nuisances), ids from content."""
    table = imagenet_d_classes()
    gen = to_dict(cfg.generator)
    filt = to_dict(cfg.filter)
    units = []
    for kind in KINDS:
        if kind not in cfg.nuisances:
            continue
        n = cfg.nuisances[kind]
        for cls in cfg.classes:
            for start in range(0, len(n.names), cfg.unit_size):
                chunk = list(n.names[start : start + cfg.unit_size])
                payload = {
                    "builder": "imagenet-d", "kind": kind, "class": cls, "nuisances": chunk,
                    "template": n.template, "images_per_pair": cfg.images_per_pair, "seed": cfg.seed,
                    "generator": gen, "filter": filt, "image": to_dict(cfg.image),
                    "label_index": table[cls]["index"],
                }
                units.append(Unit(id=content_id(payload), payload=payload))
    return units


def unit_prompts(unit: Unit) -> list[dict]:
    """Every image of a unit: its key, prompt and seed."""
    p = unit.payload
    rows = []
    for nuisance in p["nuisances"]:
        for i in range(p["images_per_pair"]):
            text = p["template"].format(cls=prompt_name(p["class"]), nuisance=prompt_name(nuisance))
            rows.append({
                "key": f"{p['kind']}_{slug(p['class'])}_{slug(nuisance)}_{i:03d}",
                "nuisance": nuisance,
                "prompt": text,
                "seed": derive_seed(p["seed"], p["kind"], p["class"], nuisance, i),
            })
    return rows


class Context(base.Context):
    """The generator and the surrogates, loaded once per process, lazily."""

    _filter = None

    def load(self) -> None:
        super().load()
        self.filter.models  # noqa: B018

    @property
    def filter(self) -> SurrogateFilter:
        if self._filter is None:
            f = self.cfg.filter
            self._filter = SurrogateFilter(f.models, top_k=f.top_k, min_failures=f.min_failures,
                                           templates=f.templates, batch_size=f.batch_size)
        return self._filter


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """Generate a unit's images, encode them, score the decoded bytes with every surrogate."""
    p = unit.payload
    cfg = ctx.cfg
    g = cfg.generator
    info = imagenet_d_classes()[p["class"]]
    rows = unit_prompts(unit)
    images, _, texts = base.generate_encoded(ctx.generator, g, cfg.image, [r["prompt"] for r in rows],
                                             [r["seed"] for r in rows])
    # the surrogates see exactly the stored bytes, each image decoded once
    verdicts = ctx.filter.score([decode_image(b) for b in images], [info["imagenet_ids"]] * len(rows))
    gen = ctx.generator
    samples = []
    for i, (r, data, v) in enumerate(zip(rows, images, verdicts, strict=True)):
        meta = ImageNetDBuilder.provenance(
            key=r["key"], build=build_id, unit=unit.id, config=p["kind"],
            label=info["name"], label_index=info["index"], imagenet_ids=info["imagenet_ids"],
            nuisance_kind=p["kind"], nuisance=r["nuisance"],
            prompt=r["prompt"], negative_prompt=g.negative_prompt, seed=r["seed"], steps=g.steps,
            guidance=g.guidance, width=g.width, height=g.height, generator=g.provenance(gen, index=i, count=len(rows)),
            source=g.model,
            surrogate_top_k=cfg.filter.top_k, surrogates=v.surrogates,
            surrogate_failures=v.failures, kept=v.kept, review=None, **texts[i])
        samples.append(Sample(key=r["key"], image=data, ext=cfg.image.format, cls=info["index"], meta=meta))
    return samples


@BUILDERS.register("imagenet-d")
class ImageNetDBuilder(base.Builder):
    description = (
        "Images of everyday objects on unusual backgrounds, with unusual textures and made of unusual "
        "materials, generated with Stable Diffusion and kept only where several surrogate ImageNet "
        "classifiers fail together, after ImageNet-D (Zhang et al., CVPR 2024).")
    citation = """
@inproceedings{zhang2024imagenetd,
  title     = {ImageNet-D: Benchmarking Neural Network Robustness on Diffusion Synthetic Object},
  author    = {Zhang, Chenshuang and Pan, Fei and Kim, Junmo and Kweon, In So and Mao, Chengzhi},
  booktitle = {Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)},
  year      = {2024}
}"""
    Config = ImageNetDConfig
    needs_review = True  # kept images wait for people in the review queue
    review_instructions = (  # the paper's human check: "quality and single-class labels" (Zhang et al. 2024)
        "ImageNet-D keeps images whose class a person recognises at once while the surrogate classifiers fail: "
        "the nuisance (background, texture or material) should make it hard for models, not for people.",
        "Accept when the object of the class is clearly the main object of the image and the nuisance is as "
        "prompted (the object on that background, with that texture, or made of that material). An unusual look "
        "is the point: accept a chair made of jelly if it is plainly a chair.",
        "Reject when the object cannot be recognised as its class, is missing or cut off, is a different object, "
        "or the image is broken (noise, melted shapes, text); also when the nuisance is absent.",
        "Relabel when the image clearly shows one object of another ImageNet-D class instead (pick that class).",
        "Mark \"several objects\" (s) when objects of more than one class are prominent: the published label must "
        "be the single class of the image; decide as above as well.")
    Context = Context
    fields = FIELDS
    field_docs = FIELD_DOCS

    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)

    def planned_images(self, cfg: ImageNetDConfig) -> list[tuple[tuple[str, int], ...]]:
        return [(("classes", len(cfg.classes)), (f"nuisances.{kind}", len(n.names)),
                 ("images_per_pair", cfg.images_per_pair)) for kind, n in cfg.nuisances.items()]


    def work(self, unit: Unit) -> base.Work:
        p = unit.payload
        return base.Work({p["kind"]: len(p["nuisances"]) * p["images_per_pair"]}, p["generator"],
                         surrogates=len(p["filter"]["models"]))

    def check_prompts(self, unit: Unit, ctx: Context) -> None:
        base.check_prompts(ctx.generator, ctx.cfg.generator, [r["prompt"] for r in unit_prompts(unit)])

    def models(self, cfg: ImageNetDConfig) -> list[tuple[str, str]]:
        return [("generator", cfg.generator.model), *(("surrogate", m) for m in cfg.filter.models)]

    def selected_against(self, cfg: ImageNetDConfig) -> list[str]:
        return list(cfg.filter.models)

    def config_names(self, cfg: ImageNetDConfig) -> list[str]:
        """One published config per nuisance kind, each with a test split."""
        return [k for k in KINDS if k in cfg.nuisances]

    def class_names(self, cfg: ImageNetDConfig) -> list[str]:
        return imagenet_d_class_names()

    def config_of(self, meta: dict) -> str:
        return meta["nuisance_kind"]

    def relabel(self, meta: dict, new_class: str) -> tuple[int, dict]:
        """A reviewer's relabel: the new class index and the updated label fields."""
        table = imagenet_d_classes()
        by_name = {v["name"]: k for k, v in table.items()}
        folder = new_class if new_class in table else by_name.get(new_class)
        if folder is None:
            raise KeyError(new_class)
        info = table[folder]
        return info["index"], {"label": info["name"], "label_index": info["index"],
                               "imagenet_ids": info["imagenet_ids"]}

    def card_body(self, cfg: ImageNetDConfig, manifest: dict, samples: list) -> str:
        """The card's "How it was built" section."""
        g = cfg.generator
        gen = samples[0].meta["generator"] if samples else {}
        f = cfg.filter
        need = len(f.models) if f.min_failures is None else f.min_failures
        rows = [[kind, len(n.names), text(n.template)] for kind, n in cfg.nuisances.items()]
        models = "\n".join(f"  - `{m}`" for m in f.models) or "  - (none)"
        return f"""
- Generator: `{g.model}` (id `{gen.get('id')}`, revision `{gen.get('revision') or 'none: built locally'}`), scheduler
  `{gen.get('scheduler')}`, {g.steps} steps, guidance {g.guidance}, {g.width}x{g.height},
  negative prompt {code(g.negative_prompt or '(none)')}, base seed {cfg.seed}; one seed per image derived from
  (base seed, kind, class, nuisance, index), recorded in each sample.
- {cfg.images_per_pair} image(s) per (class, nuisance) over {len(cfg.classes)} classes.

{table(["nuisance kind", "names", "prompt template"], rows)}

- Surrogate failure filter: an image fails a surrogate when none of its class's ImageNet ids is in the
  surrogate's top-{f.top_k}; images failed by at least {need} of {len(f.models)} surrogates are kept:
{models}
- Kept images are then checked by people in a review queue (accept, reject, relabel).
"""

