"""Failure-mode discovery's config: the classifier under test, the labels, the generator, the clustering,
captioning and statistics settings."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ...builders.common import BuildFields, GeneratorConfig, ImageConfig, check_spec
from ...config import check_count
from ...labels.imagenet import imagenet_names
from .prompts import MODE_TEMPLATES, TEMPLATES

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
class FailureModesConfig(BuildFields):
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
    # the baseline prompt: a name in prompts.TEMPLATES (the paper's "wiles2022", gensets' earlier "label-only")
    # or a template with {label} (and {superclass})
    template: str = "wiles2022"
    superclasses: dict[str, str] = field(default_factory=dict)  # label -> superclass (default: WordNet 3.0's)
    # a small default for a first look: the paper's scale, 31,250 images per caption (the smallest sample on which its
    # published rates 0.0032% and 0.016% are whole counts), is configs/failure_modes.yaml's (the arithmetic there)
    images_per_label: int = 100
    images_per_mode: int | None = None  # default: images_per_label
    # the regeneration prompt: a name in prompts.MODE_TEMPLATES (the paper's "wiles2022": baseline prompt +
    # " " + description; gensets' earlier "caption") or a template with {caption} or {description}
    mode_template: str = "wiles2022"
    top_k: int = 3  # an image fails when its label's class is not in the classifier's top-k (the paper's: 3)
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
        for key, text, presets, need in (("template", self.template, TEMPLATES, ["{label}"]),
                                         ("mode_template", self.mode_template, MODE_TEMPLATES,
                                          ["{caption}", "{description}"])):
            if text in presets:
                continue
            names = ", ".join(presets)
            try:
                text.format(label="x", superclass="x", caption="x", description="x", baseline="x")
            except (IndexError, KeyError, ValueError) as e:
                raise ValueError(f"{key}: bad template {text!r} ({e}); give one of {names} or a template with "
                                 f"{' or '.join(need)}") from None
            if not any(n in text for n in need):
                raise ValueError(f"{key}: must be one of {names} or contain {' or '.join(need)}")
        unknown = [k for k in self.superclasses if k.lower() not in {c.lower() for c in canonical}]
        if unknown:
            raise ValueError(f"superclasses: {unknown[0]!r} is not one of labels")
        if not all(str(v).strip() for v in self.superclasses.values()):
            raise ValueError("superclasses: a superclass is empty")
        for key in ("images_per_label", "images_per_mode"):
            if getattr(self, key) is not None:
                check_count(key, getattr(self, key))
        if not 1 <= self.top_k <= 5:
            raise ValueError("top_k: must be between 1 and 5")
        if not 0 < self.alpha < 1:
            raise ValueError("alpha: must be between 0 and 1")
        for key in ("unit_size", "shard_size", "batch_size"):
            check_count(key, getattr(self, key))

    def resolved(self, base_dir: Path) -> FailureModesConfig:
        labels = _canonical_labels(self.labels)
        by_lower = {label.lower(): label for label in labels}
        return replace(self, labels=tuple(labels), images_per_mode=self.images_per_mode or self.images_per_label,
                       superclasses={by_lower[k.lower()]: v for k, v in self.superclasses.items()})


def _canonical_labels(labels) -> list[str]:
    """Each label as spelled in imagenet_names() (case-insensitive); ValueError naming a bad one."""
    import difflib

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
