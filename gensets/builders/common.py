"""Pieces every builder shares: the generator and image settings, the work unit, the model-spec check."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from ..config import check_count
from ..models import load_generator
from ..models.spec import parse_spec
from ..quality.thresholds import QualityFields


def check_spec(spec: str, key: str) -> None:
    """A config value that must be a model spec: a bad one is a ValueError naming ``key`` (the config
    loader adds the file and line)."""
    try:
        parse_spec(spec)
    except Exception as e:  # ModelError: name the key
        raise ValueError(f"{key}: {e}") from None


def batch_plan(n: int, batch_size: int, batching: str = "batched") -> list[range]:
    """How ``n`` images of a unit are split into pipeline calls: consecutive slices of ``batch_size`` (the last
    one shorter, never padded), or one image per call (``batching: per-image``). A pure function of its
    arguments, so a unit is split the same way on every run, every resume and every process."""
    size = 1 if batching == "per-image" else batch_size
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


MAX_INSTRUCTIONS = 4000  # characters: a page's panel, not a manual


@dataclass(frozen=True)
class ReviewConfig:
    """The ``review:`` key: what the review page shows besides the images. ``instructions``: what accept, reject,
    relabel and "several objects" mean under this dataset's protocol, a list of paragraphs of plain text (default:
    the builder's ``review_instructions``). ``references``: a folder of class sub-folders of real images (named as
    the classes, or with ``_`` for spaces), of which the page shows a few beside an image of that class; a
    relative path is found from the folder ``gensets review serve`` runs in."""

    instructions: tuple[str, ...] | None = None
    references: str | None = None

    def validate(self, base_dir: Path | None) -> None:
        if self.instructions is not None:
            size = sum(len(t) for t in self.instructions)
            if not any(t.strip() for t in self.instructions) or size > MAX_INSTRUCTIONS:
                raise ValueError(f"instructions: paragraphs of 1 to {MAX_INSTRUCTIONS} characters in all, got {size}")
        if self.references is not None:
            if not self.references.strip():
                raise ValueError("references: a folder of class sub-folders")
            if base_dir is not None and not (base_dir / self.references).is_dir():
                raise ValueError(f"references: folder not found: {base_dir / self.references}")


@dataclass(frozen=True)
class BuildFields(QualityFields):
    """The keys every builder config accepts besides its own (a base class of each builder's Config): the
    ``quality:`` thresholds, ``reproducible``: ``strict`` (default) pins the CPU kernels and turns on the
    GPU's deterministic algorithms, so a rebuild gives the same bytes on any x86-64 CPU of the same vendor (Intel
    or AMD; on GPUs: the same model, driver and versions); ``fast`` leaves the libraries' own kernels (same bytes on the same machine only),
    see :mod:`gensets.determinism`; and ``review`` (:class:`ReviewConfig`: the review page's instructions and
    reference images). Each is left out of the frozen config and its fingerprint while at its default."""

    reproducible: Literal["strict", "fast"] = field(default="strict", kw_only=True, metadata={"omit_default": True})
    review: ReviewConfig | None = field(default=None, kw_only=True, metadata={"omit_default": True})


@dataclass(frozen=True)
class GeneratorConfig:
    """The generator of a build and how it runs.

    ``batching``: ``batched`` (default) runs a unit's images in pipeline calls of ``batch_size`` (:func:`batch_plan`),
    each image with its own seeded generator; an image's pixels then depend (by float rounding, a few pixel
    values off by one) on the other images of its call, which provenance names (``generator.batch_*``).
    ``per-image`` runs one image per call: each image is reproducible alone, at the price of an idle GPU.
    ``dtype``, ``attention`` (``sdpa``: torch's scaled_dot_product_attention, diffusers' default; ``eager``:
    diffusers' AttnProcessor), ``compile`` (``torch.compile`` of the UNet and the VAE's decoder; a variant, named on
    the card, since compiled kernels round differently) and ``channels_last`` (the UNet's
    and VAE's memory format) are speed settings for GPUs; each is recorded in every sample's provenance.
    ``long_prompts``: a prompt or negative prompt longer than the text encoder's window (77 tokens for Stable
    Diffusion's CLIP) is ``truncate``d as the papers' diffusers pipelines did (the default; each sample records its
    token counts and the text the encoder received), or an ``error`` before any image is generated.
    """

    model: str  # a model spec, e.g. diffusers:stabilityai/stable-diffusion-2-1@<revision> or tiny:sd
    scheduler: str | None = None  # a diffusers scheduler class name; default: the pipeline's own
    steps: int = 50
    guidance: float = 7.5
    width: int = 512
    height: int = 512
    negative_prompt: str = ""
    batch_size: int = 4
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    batching: Literal["batched", "per-image"] = "batched"
    attention: Literal["sdpa", "eager"] = "sdpa"
    compile: bool = False
    channels_last: bool = False
    long_prompts: Literal["truncate", "error"] = "truncate"

    MAX_STEPS: ClassVar[int] = 1000  # the diffusion schedules' own length (DDPM trains on 1000)
    MAX_SIDE: ClassVar[int] = 4096  # 4x the largest size Stable Diffusion pipelines are trained at

    def validate(self, base_dir: Path) -> None:
        check_spec(self.model, "model")
        if not 1 <= self.steps <= self.MAX_STEPS:
            raise ValueError(f"steps: must be in 1..{self.MAX_STEPS}, got {self.steps}")
        for key in ("width", "height"):
            value = getattr(self, key)
            if value % 8 or not 8 <= value <= self.MAX_SIDE:
                raise ValueError(f"{key}: must be a multiple of 8 in 8..{self.MAX_SIDE}, got {value}")
        check_count("batch_size", self.batch_size)

    def load(self):
        """The generator this config names (``gensets.models.Generator``)."""
        return load_generator(self.model, scheduler=self.scheduler, torch_dtype=self.dtype, attention=self.attention,
                              compile=self.compile, channels_last=self.channels_last)

    def batches(self, n: int) -> list[range]:
        """The pipeline calls of a unit of ``n`` images (:func:`batch_plan`)."""
        return batch_plan(n, self.batch_size, self.batching)

    def provenance(self, gen, pipeline: str | None = None, *, index: int, count: int) -> dict:
        """The ``generator`` struct of image ``index`` of the ``count`` a unit generated in one
        ``generate_encoded`` call: spec, resolved id and revision, classes, how the pipeline ran (dtype,
        attention, compile, channels_last, device) and the image's call (``batch_index``: which call of
        the unit, ``batch_size``: images in that call, ``batch_position``: its place in it)."""
        calls = self.batches(count)
        call = next(i for i, r in enumerate(calls) if index in r)
        return {"spec": self.model, "id": gen.model_id, "revision": gen.revision,
                "pipeline": pipeline or gen.pipeline, "scheduler": gen.scheduler, **gen.settings,
                "batching": self.batching, "batch_index": call, "batch_size": len(calls[call]),
                "batch_position": index - calls[call].start, "text_window": gen.text_window}


@dataclass(frozen=True)
class ImageConfig:
    format: Literal["jpg", "png", "webp"] = "jpg"
    quality: int = 95  # jpg / webp quality; png is lossless

    def validate(self, base_dir: Path) -> None:
        if not 1 <= self.quality <= 100:
            raise ValueError("quality: must be between 1 and 100")


@dataclass(frozen=True)
class Unit:
    """A deterministic piece of work; ``id`` is a hash of ``payload``."""

    id: str
    payload: dict[str, Any]
