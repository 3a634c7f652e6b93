"""Measured generation time, the basis of cost per image: seconds per unit, kept outside the shards (which
must stay byte-identical) under the gensets cache, keyed by the build fingerprint."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cache import cache_root


def timings_dir(build_id: str) -> Path:
    """Where a build's measured generation times go: per unit, outside the shards (they must stay
    byte-identical), under the gensets cache, keyed by the build fingerprint."""
    return cache_root() / "timings" / build_id


def record_timing(build_id: str, unit_id: str, images: int, seconds: float, expansion_seconds: float) -> None:
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    row = {"unit": unit_id, "images": images, "generator_seconds": seconds,
           "expansion_seconds": expansion_seconds, "device": device}
    d = timings_dir(build_id)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{unit_id}.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(row), encoding="utf-8")
    os.replace(tmp, d / f"{unit_id}.json")


def measured(build_id: str, units: set[str] | None = None) -> dict | None:
    """Generator seconds per image measured while building (None when this machine holds no timings)."""
    rows = []
    for f in sorted(timings_dir(build_id).glob("*.json")) if timings_dir(build_id).is_dir() else []:
        row = json.loads(f.read_text(encoding="utf-8"))
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
