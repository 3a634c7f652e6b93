"""What a build will do, before it runs (``gensets build CONFIG --plan``): its units, its images per config and in
all, the models it will download (their size where the Hugging Face cache holds them, their licence where gensets
knows it), the disk its shards take, and the GPU-hours and cost of its generation by the cost model
(:mod:`gensets.cost`). From the config alone, offline: nothing is loaded, nothing written.

Units are the builder's own ``plan`` (the ones ``gensets build`` runs); each unit's images come from the builder's
:meth:`~gensets.builders.base.Builder.work`. A stage planned from the ones before it (``PlannedLater``) is counted
only by its bound (``planned_images``). The size of a stored image is read from the unit's payload as every
builder writes it: ``image`` (its format), ``resize``, else the generator's ``width`` x ``height``.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path

from .. import cost
from ..cards.licensing import licence_of
from ..errors import GensetsError
from ..models.hub import cached_commit, hub_cache_dir, hub_repo
from ..models.spec import parse_spec
from ..workspace import load_build_config
from .base import PlannedLater


def plan(config_path: str | Path, overrides=(), price_per_hour: float | None = None) -> dict:
    """The plan of building ``config_path`` (with ``--set`` ``overrides``), as JSON-ready data."""
    builder, cfg = load_build_config(config_path, list(overrides))
    images: Counter = Counter()
    stages, models, later, unknown = [], {}, [], 0
    generated = gpu_generate = gpu_filter = stored = 0.0
    not_estimated: Counter = Counter()
    other: Counter = Counter()
    for role, spec in builder.models(cfg):
        models.setdefault(spec, role)
    for stage in builder.stages or (None,):
        try:
            units = builder.plan(cfg) if stage is None else builder.plan(cfg, stage=stage, workspace=None)
        except PlannedLater:
            later.append(stage)
            stages.append({"stage": stage, "units": None, "images": None})
            continue
        counts: Counter = Counter()
        for unit in units:
            work = builder.work(unit)
            if work is None:
                unknown += 1
                continue
            counts.update(work.images)
            n = sum(work.images.values())
            for role, spec in work.models:
                models.setdefault(spec, role)
            if work.other:
                other[work.other] += 1
            if work.generator is None:
                continue
            g = work.generator
            models.setdefault(g["model"], "generator")
            generated += n
            stored += n * _image_bytes(unit.payload, g)
            seconds = cost.generation_seconds(g["model"], g["steps"], g["width"], g["height"])
            if seconds is None:
                not_estimated[g["model"]] += n
            else:
                gpu_generate += n * seconds
                gpu_filter += n * cost.filter_seconds(work.surrogates)
        images.update(counts)
        stages.append({"stage": stage, "units": len(units), "images": dict(counts)})
    bound = sum(math.prod(n for _, n in term) for term in builder.planned_images(cfg))
    price = price_of(cfg, price_per_hour)
    hours = (gpu_generate + gpu_filter) / 3600
    return {
        "config": str(config_path), "builder": builder.name, "overrides": list(overrides), "stages": stages,
        "units": sum(s["units"] or 0 for s in stages), "images": dict(images), "images_total": sum(images.values()),
        "generated": int(generated), "planned_later": later, "images_at_most": bound if later else None,
        "units_not_counted": unknown, "models": [model(spec, role) for spec, role in models.items()],
        "disk": {"candidates_bytes": int(stored), "dataset_bytes_at_most": int(stored), "assumption": cost.BITS_NOTE},
        "gpu": {"hours": hours, "generation_hours": gpu_generate / 3600, "filter_hours": gpu_filter / 3600,
                "not_estimated": [{"generator": m, "images": n, "why": "no measured rate for its architecture"}
                                  for m, n in not_estimated.items()],
                "not_costed": [{"what": w, "units": n} for w, n in other.items()],
                "rates": [_rate(cost.SD2_GENERATION), _rate(cost.SURROGATE_FILTER)]},
        "cost": {**price, "total": hours * price["price_per_hour"]},
    }


def _rate(m: cost.Measured) -> dict:
    return {"what": m.what, "images_per_second": m.images_per_second, "card": m.card, "date": m.date,
            "settings": m.settings, "source": m.source}


def price_of(cfg, given: float | None) -> dict:
    """--price-per-hour, else the config's ``cost.price_per_hour`` (GenBench's), else the cost model's."""
    if given is not None:
        return {"price_per_hour": given, "currency": "USD", "source": "--price-per-hour"}
    own = getattr(cfg, "cost", None)
    if own is not None and getattr(own, "price_per_hour", None) is not None:
        return {"price_per_hour": own.price_per_hour, "currency": own.currency,
                "source": f"the config's cost: {own.hardware}"}
    return dict(cost.PRICE)


def _image_bytes(payload: dict, generator: dict) -> float:
    image = payload.get("image") or {}
    side = payload.get("resize")
    width, height = (side, side) if side else (generator["width"], generator["height"])
    return cost.image_bytes(image.get("format", "png"), width, height)


def model(spec: str, role: str) -> dict:
    """What loading ``spec`` will download: its Hub repo, its size where the cache holds it, its licence."""
    try:
        parsed = parse_spec(spec)
    except GensetsError:
        return {"spec": spec, "role": role, "download": None, "repo": None, "cached_bytes": None, "licence": None}
    if parsed.is_built:
        return {"spec": spec, "role": role, "download": False, "repo": None, "cached_bytes": None,
                "licence": "none (built locally, random weights)"}
    try:
        repo = hub_repo(parsed)
    except GensetsError:
        repo = None
    lic = licence_of(repo) or licence_of(parsed.name)
    return {"spec": spec, "role": role, "download": True, "repo": repo,
            "cached_bytes": _cached_bytes(repo, parsed.revision) if repo else None,
            "licence": lic["id"] if lic else None}


def _cached_bytes(repo: str, revision: str | None) -> int | None:
    """The bytes of ``repo@revision``'s snapshot in the Hugging Face cache (None: not there)."""
    commit = cached_commit(repo, revision)
    if commit is None:
        return None
    snapshot = hub_cache_dir() / ("models--" + repo.replace("/", "--")) / "snapshots" / commit
    total = 0
    for folder, _, files in os.walk(snapshot):
        for name in files:
            try:
                total += (Path(folder) / name).stat().st_size  # the blob its link names
            except OSError:
                continue
    return total


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


def model_line(m: dict) -> str:
    """A model of a plan as text: what loading it downloads, and its licence."""
    if m["download"] is False:
        where = "built locally (random weights, nothing to download)"
    elif m["repo"] is None:
        where = "downloaded by its library (size unknown ahead)"
    elif m["cached_bytes"] is None:
        where = f"Hub {m['repo']}: not in the Hugging Face cache (size unknown offline)"
    else:
        where = f"Hub {m['repo']}: {size(m['cached_bytes'])} in the Hugging Face cache"
    return f"{m['role']}: {m['spec']}: {where}; {m['licence'] or 'licence unknown to gensets: see the model card'}"


def lines(p: dict) -> list[str]:
    """The plan as text, one line a fact."""
    out = [f"{p['config']} ({p['builder']}" + (f"; {', '.join(p['overrides'])}" if p["overrides"] else "") + ")"]
    for s in p["stages"]:
        name = f"stage {s['stage']}: " if s["stage"] else ""
        if s["units"] is None:
            out.append(f"  {name}planned from the stages before it: its units, models and cost are known once they "
                       "are built")
        else:
            per = ", ".join(f"{c} {n:,}" for c, n in s["images"].items()) or "no images"
            out.append(f"  {name}{s['units']:,} unit{'s' * (s['units'] != 1)}; images per config: {per}")
    total = f"  in all: {p['units']:,} units, {p['images_total']:,} images ({p['generated']:,} generated)"
    if p["images_at_most"] is not None:
        total += f"; with the later stages at most {p['images_at_most']:,} images"
    out.append(total)
    if p["units_not_counted"]:
        out.append(f"  {p['units_not_counted']} units whose images only their run knows (not counted)")
    out.append("models:")
    out += [f"  {model_line(m)}" for m in p["models"]]
    d = p["disk"]
    known = [m["cached_bytes"] for m in p["models"] if m["cached_bytes"]]
    out.append(f"disk: candidate shards about {size(d['candidates_bytes'])}, dataset/ at most as much again "
               f"({d['assumption']})" + (f"; models in the cache {size(sum(known))}" if known else ""))
    g, c = p["gpu"], p["cost"]
    out.append(f"GPU: {g['hours']:,.1f} GPU-hours (generation {g['generation_hours']:,.1f}, surrogate filter "
               f"{g['filter_hours']:,.1f}); cost {c['total']:,.2f} {c['currency']} at {c['price_per_hour']:g} "
               f"{c['currency']} per GPU-hour ({c['source']})")
    scaled = ("scaled to each config's steps and size by the model's FLOPs", "scaled by the number of classifiers")
    for r, how, hours in zip(g["rates"], scaled, (g["generation_hours"], g["filter_hours"]), strict=True):
        if hours:
            out.append(f"  from {r['what']}: {r['images_per_second']} images/s on an {r['card']} ({r['date']}; "
                       f"{r['settings']}; {r['source']}), {how}")
    for n in g["not_estimated"]:
        out.append(f"  not estimated: {n['images']:,} images by {n['generator']} ({n['why']})")
    for n in g["not_costed"]:
        out.append(f"  not costed: {n['what']} ({n['units']} unit{'s' * (n['units'] != 1)})")
    if p["planned_later"]:
        out.append(f"  not costed: stage {', '.join(p['planned_later'])} (planned from the stages before it)")
    return out
