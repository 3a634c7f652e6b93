"""What the two Borji builders (recognition.py, vqa.py) share: a plan's rows cut into units, and an imported file
loaded as a sample's image or skipped with its reason."""

from __future__ import annotations

from ...builders.common import Unit
from ...records import content_id
from ...sources.imports import Skip, load_checked


def chunked_units(head: dict, field: str, rows: list, size: int) -> list[Unit]:
    """Units of ``size`` rows each, in order: the payload ``{**head, field: its rows}``, its id its content."""
    units = []
    for start in range(0, len(rows), size):
        payload = {**head, field: rows[start : start + size]}
        units.append(Unit(content_id(payload), payload))
    return units


def load_or_skip(ctx, path: str, sha256: str, where: str, skip: str | None = None):
    """An imported file's (encoded bytes, RGB image) under the config's ``max_pixels`` and image format, checked
    against the sha256 it was planned with; None when it is skipped (``skip``: a reason known at planning), the
    reason recorded in ``ctx.skipped`` under ``where`` (the file as the config names it)."""
    cfg = ctx.cfg
    try:
        if skip:
            raise Skip(skip)
        return load_checked(path, cfg.max_pixels, cfg.image.format, cfg.image.quality, sha256=sha256, name=where)
    except Skip as e:
        ctx.skipped.append({"path": where, "reason": str(e)})
        return None
