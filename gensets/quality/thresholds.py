"""A builder config's ``quality:`` thresholds, applied while building (the curation step).

    quality:
      clip_score: {min: 25}                       # a per-image metric (gensets.quality.metrics) and its bounds
      aesthetic: {min: 4.5, models: {clip: tiny:hf-clip, head: tiny:aesthetic-head}}

Every sample of a unit gets ``json.quality``: each metric's value and bounds, whether it passed, and the scorers
(metric, variant, role, spec, commit loaded). An image below a threshold (or above a ``max``) does not enter the
review queue: state.duckdb gives it the status ``below-quality`` (a reviewer may still accept it by key), the
card's funnel counts it, and ``finalize`` publishes it only if accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from ..images import decode_image
from ..models.spec import parse_spec
from ..registry import QUALITY_METRICS
from .metrics import Models


class _PerImage:
    """The metrics a build can threshold: per image, and needing at most the sample's prompt (config keys are
    checked against it, as ``Annotated[str, REGISTRY]`` names are)."""

    def _ok(self, name) -> bool:
        if not isinstance(name, str) or name not in QUALITY_METRICS:
            return False
        m = QUALITY_METRICS.get(name)
        return m.level == "image" and set(m.needs) <= {"prompt"}

    def __contains__(self, name) -> bool:
        return self._ok(name)

    def names(self) -> list[str]:
        return [n for n in QUALITY_METRICS.names() if self._ok(n)]


PER_IMAGE = _PerImage()


@dataclass(frozen=True)
class Threshold:
    min: float | None = None  # images scoring below are kept out of the queue
    max: float | None = None  # ... or above
    models: dict[str, str] = field(default_factory=dict)  # role -> model spec, instead of the metric's defaults

    def validate(self, base_dir: Path | None) -> None:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        for role, spec in self.models.items():
            try:
                parse_spec(spec)
            except Exception as e:
                raise ValueError(f"models: {role}: {e}") from None

    def passes(self, value: float) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


@dataclass(frozen=True)
class QualityFields:
    """The ``quality:`` key every builder config accepts (a base class of each builder's Config). Left out of the
    frozen config and its fingerprint while unset, so builds without it keep their ids."""

    quality: dict[Annotated[str, PER_IMAGE], Threshold] | None = field(
        default=None, kw_only=True, metadata={"omit_default": True})


class QualityFilter:
    """Scores the samples of a unit with the thresholded metrics (models loaded once) and records the verdicts."""

    def __init__(self, thresholds: Mapping[str, Threshold], *, batch_size: int = 16, device: str | None = None):
        self.thresholds = dict(thresholds)
        self.batch_size = batch_size
        models = Models(device=device)
        self.metrics = {name: QUALITY_METRICS.get(name)(models, dict(t.models)) for name, t in self.thresholds.items()}
        self._scorers = None

    def load(self) -> None:
        for m in self.metrics.values():
            m.load()

    @property
    def scorers(self) -> list[dict]:
        """Provenance: one row per (metric, role): the variant, the spec and the commit loaded."""
        if self._scorers is None:
            self._scorers = [{"metric": name, "variant": p["variant"], "role": role, "spec": spec,
                              "commit": p["commits"][role]}
                             for name, m in self.metrics.items()
                             for p in [m.provenance()] for role, spec in p["models"].items()]
        return self._scorers

    def apply(self, samples: list) -> None:
        """Add ``json.quality`` to each sample (its image decoded once here)."""
        images = [decode_image(s.image) for s in samples]
        metas = [s.meta for s in samples]
        values = {}
        for name, m in self.metrics.items():
            values[name] = [v for i in range(0, len(images), self.batch_size)
                            for v in m.score(images[i : i + self.batch_size], metas[i : i + self.batch_size])]
        for i, s in enumerate(samples):
            scores = []
            for name, t in self.thresholds.items():
                v = round(float(values[name][i]), 6)
                scores.append({"metric": name, "value": v, "min": t.min, "max": t.max, "passed": t.passes(v)})
            s.meta["quality"] = {"passed": all(x["passed"] for x in scores), "scores": scores,
                                 "scorers": self.scorers}
