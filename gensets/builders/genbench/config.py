"""GenBench's config: the dataset and its classes, the strategies, CE's expansion model, NP's negatives, RA's
references, the cost figures."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from ...quality.thresholds import QualityFields
from ...registry import STRATEGIES
from ...sources.classes import DatasetInfo, dataset_info, split_rev
from ...sources.packaged import genbench_datasets
from ..common import GeneratorConfig, ImageConfig, check_spec
from .strategies import QUALITY_NEGATIVES, RESTRICTIVE

METRICS = ("accuracy", "mean-per-class", "11-point-map", "roc-auc")


def _config_slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "dataset"


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
class GenBenchConfig(QualityFields):
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
    strategies: tuple[Annotated[str, STRATEGIES], ...] = ("ST",)  # registered names (strategies.py)
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
            raise ValueError("strategies: give at least one of " + ", ".join(STRATEGIES.names()))
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
        from ...labels.imagenet import imagenet_templates

        return replace(self, dataset_name=_config_slug(name), class_names=info.classes, metric=self.metric or info.metric,
                       templates=self.templates or info.templates or tuple(imagenet_templates()))


def config_name(dataset_name: str, strategy: str) -> str:
    return f"{dataset_name}-{strategy.lower()}"


def selected(cfg: GenBenchConfig) -> list[tuple[int, str]]:
    """The (label index, class name) pairs to generate."""
    if cfg.classes == "all":
        return list(enumerate(cfg.class_names))
    return [(cfg.class_names.index(c), c) for c in cfg.classes]
