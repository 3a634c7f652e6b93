"""Pieces every builder shares: the generator and image settings, the work unit, the model-spec check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal


def check_spec(spec: str, key: str) -> None:
    """A config value that must be a model spec: a bad one is a ValueError naming ``key`` (the config
    loader adds the file and line)."""
    from ..models.spec import parse_spec

    try:
        parse_spec(spec)
    except Exception as e:  # ModelError: name the key
        raise ValueError(f"{key}: {e}") from None


@dataclass(frozen=True)
class GeneratorConfig:
    model: str  # a model spec, e.g. diffusers:stabilityai/stable-diffusion-2-1@<revision> or tiny:sd
    scheduler: str | None = None  # a diffusers scheduler class name; default: the pipeline's own
    steps: int = 50
    guidance: float = 7.5
    width: int = 512
    height: int = 512
    negative_prompt: str = ""
    batch_size: int = 4
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"

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
        if self.batch_size < 1:
            raise ValueError("batch_size: must be at least 1")

    def load(self):
        """The generator this config names (``gensets.models.Generator``)."""
        from ..models import load_generator

        return load_generator(self.model, scheduler=self.scheduler, torch_dtype=self.dtype)

    def provenance(self, gen, pipeline: str | None = None) -> dict:
        """The ``generator`` struct of a sample's provenance: spec, resolved id and revision, classes."""
        return {"spec": self.model, "id": gen.model_id, "revision": gen.revision,
                "pipeline": pipeline or gen.pipeline, "scheduler": gen.scheduler}


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
