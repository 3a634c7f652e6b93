"""The card's cost section, per data type (GenBench Fig. 3, Table 1): generated images cost the generator seconds
measured while building (gensets.timings) x the configured price per hour; retrieved images the measured query
seconds x the same price; original images the configured labelling price (``cost.labelling``), with its source;
beside the other ways to get an image the config lists."""

from __future__ import annotations

from collections import defaultdict

from ...cards.markdown import table
from ...timings import cost_per_image, measured
from .config import GenBenchConfig

WHAT = {"generated": ("Generated images", "generator"), "retrieval": ("Retrieved images", "retrieval query")}


def _data_type(meta: dict) -> str:
    return (meta.get("data") or {}).get("type") or "generated"


def cost_section(cfg: GenBenchConfig, manifest: dict, samples: list) -> str:
    c = cfg.cost
    price = f"{c.price_per_hour:g} {c.currency}/hour" + (f" ({c.hardware})" if c.hardware else "")
    units: dict[str, set] = defaultdict(set)
    for s in samples:
        units[_data_type(s.meta)].add(s.meta["unit"])
    types = [t for t in ("generated", "retrieval", "original") if t in units] or ["generated"]
    lines = []
    for t in types:
        if t == "original":
            lab = c.labelling_price
            lines.append(f"- Original images: labelled at **{lab.per_image:g} {c.currency} per image** (configured, "
                         f"`cost.labelling`; source: {lab.source}).")
            continue
        what, seconds = WHAT[t]
        m = measured(manifest["build"], units[t]) if units[t] else None
        if m:
            per = cost_per_image(m["seconds_per_image"], c.price_per_hour)
            lines.append(f"- {what}: Measured while building: {m['seconds_per_image']:.3f} {seconds} seconds per image "
                         f"over {m['images']} images on {', '.join(m['devices'])}; at {price} that is "
                         f"**{per:.6f} {c.currency} per image** ({1000 * per:.4f} per 1,000).")
        else:
            lines.append(f"- {what}: {seconds} time was not measured on this machine (timings are kept per build "
                         f"under `$GENSETS_CACHE/timings/{manifest['build']}` where it was built); price {price}.")
    ref_rows = [[k, f"{v.per_image:g} {c.currency}", v.source] for k, v in c.reference.items()]
    refs = ("\n\nFor comparison:\n\n" + table(["way to get an image", "per image", "source"], ref_rows)
            if ref_rows else "")
    return "\n".join(lines) + refs
