"""Measured generation time, the basis of cost per image: seconds per unit, kept outside the shards (which
must stay byte-identical) under the gensets cache, keyed by the build fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

from . import recordio
from .cache import cache_root
from .output import atomic_open
from .safety import inside, writable_inside


def timings_dir(build_id: str) -> Path:
    """Where a build's measured generation times go: per unit, outside the shards (they must stay
    byte-identical), under the gensets cache, keyed by the build fingerprint."""
    return cache_root() / "timings" / build_id


def record_timing(build_id: str, unit_id: str, images: int, seconds: float, expansion_seconds: float) -> None:
    """Write ``timings/<build>/<unit>.json`` under the cache, atomically; a symlink on the way below the cache
    folder (``timings``, the build's folder, the file or its temporary name) is refused, not written through."""
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    row = {"unit": unit_id, "images": images, "generator_seconds": seconds,
           "expansion_seconds": expansion_seconds, "device": device}
    path = writable_inside(cache_root(), f"timings/{build_id}/{unit_id}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as f:
        f.write(json.dumps(row).encode("utf-8"))


def _row(path: Path) -> dict:
    """One timings file, checked: DataError naming it, the key and the problem when it is not a regular file of
    the JSON record_timing writes (the timings schema, through :mod:`gensets.recordio`)."""
    return recordio.read(path, "Timing")


def measured(build_id: str, units: set[str] | None = None) -> dict | None:
    """Generator seconds per image measured while building (None when this machine holds no timings)."""
    d = inside(cache_root(), f"timings/{build_id}")  # no symlink on the way out of the cache
    rows = []
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        row = _row(inside(d, f.name))
        if units is None or row["unit"] in units:
            rows.append(row)
    images = sum(r["images"] for r in rows)
    if not images:
        return None
    seconds = sum(r["generator_seconds"] for r in rows)
    return {"units": len(rows), "images": images, "generator_seconds": seconds,
            "seconds_per_image": seconds / images, "devices": sorted({r["device"] for r in rows})}


def cost_per_image(seconds_per_image: float, price_per_hour: float) -> float:
    return seconds_per_image * price_per_hour / 3600.0
