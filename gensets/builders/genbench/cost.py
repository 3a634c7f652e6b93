"""Cost per generated image, for the card: generator seconds measured while building (gensets.timings) x the
configured price per hour, beside the other ways to get an image the config lists."""

from __future__ import annotations

from ...cards.markdown import table
from ...timings import cost_per_image, measured
from .config import GenBenchConfig


def cost_section(cfg: GenBenchConfig, manifest: dict, samples: list) -> str:
    c = cfg.cost
    m = measured(manifest["build"], {s.meta["unit"] for s in samples}) if samples else None
    price = f"{c.price_per_hour:g} {c.currency}/hour" + (f" ({c.hardware})" if c.hardware else "")
    if m:
        per = cost_per_image(m["seconds_per_image"], c.price_per_hour)
        cost = (f"Measured while building: {m['seconds_per_image']:.3f} generator seconds per image over "
                f"{m['images']} images on {', '.join(m['devices'])}; at {price} that is "
                f"**{per:.6f} {c.currency} per image** ({1000 * per:.4f} per 1,000).")
    else:
        cost = (f"Generator time was not measured on this machine (timings are kept per build under "
                f"`$GENSETS_CACHE/timings/{manifest['build']}` where it was built); price {price}.")
    ref_rows = [[k, f"{v.per_image:g} {c.currency}", v.source] for k, v in c.reference.items()]
    refs = ("\n\nFor comparison:\n\n" + table(["way to get an image", "per image", "source"], ref_rows)
            if ref_rows else "")
    return cost + refs
