"""The card's quality section: each scored metric's distribution per config (a histogram figure per config), a
generator-by-metric table when several generators built the dataset, and the build's quality: thresholds.

Scores are rows ``{config, key, metric, value, generator}``: from a results database (``gensets card --db``: what
``gensets score`` wrote for this build, passed in by the CLI) or, without one, from the samples' own
``json.quality`` (the build's thresholded metrics).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..records import generator_label
from . import figures
from .markdown import table

PREFIX = "figures/quality_"


def rows_of_samples(samples: list, config_of) -> list[dict]:
    """The per-image scores a build recorded in its samples (``json.quality.scores``)."""
    return [{"config": config_of(s.meta), "key": s.key, "metric": q["metric"], "value": q["value"],
             "generator": generator_label(s.meta)}
            for s in samples for q in ((s.meta.get("quality") or {}).get("scores") or [])]


def write_figures(staged, rows: list[dict], configs: list[str], thresholds=None) -> list[str]:
    """``figures/quality_<config>.png`` for each config with scores, staged in ``staged`` (a
    :class:`gensets.output.Files`; old ones removed); the paths written."""
    for old in sorted((staged.root / "figures").glob("quality_*.png")):
        staged.remove(old.relative_to(staged.root).as_posix())
    written = []
    for config in configs:
        mine = [r for r in rows if r["config"] == config]
        if mine:
            rel = f"{PREFIX}{config}.png"
            figures.quality_histograms(config, _by_metric(mine), staged.path(rel), thresholds or {})
            written.append(rel)
    return written


def _by_metric(rows: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        out[r["metric"]].append(float(r["value"]))
    return dict(out)


def _num(v: float) -> str:
    return f"{v:.4g}"


def section(rows: list[dict], figures: list[str], cfg, samples: list) -> str:
    """The "Quality scores" section (empty when there is nothing to show)."""
    thresholds = getattr(cfg, "quality", None) or {}
    if not rows and not thresholds:
        return ""
    out = ["\n## Quality scores\n"]
    if thresholds:
        scorers = next(((s.meta.get("quality") or {}).get("scorers") for s in samples if s.meta.get("quality")), [])
        bounds = {name: " and ".join(b for b in (f">= {t.min:g}" if t.min is not None else "",
                                                  f"<= {t.max:g}" if t.max is not None else "") if b)
                  for name, t in thresholds.items()}
        out.append("Images outside the build's quality thresholds were kept out of the review queue (the funnel's "
                   "\"below quality\" column); each sample records its values, the thresholds and the scorers in "
                   "`json.quality`:\n")
        out.append(table(["metric", "kept when", "model role", "spec", "commit"],
                         [[s["metric"], bounds.get(s["metric"], ""), s["role"], f"`{s['spec']}`", s["commit"] or "-"]
                          for s in scorers] or [[n, b, "", "", ""] for n, b in bounds.items()]))
        out.append("")
    if rows:
        import numpy as np  # lazy: the builders registry imports finalize (-> the card) before a build pins numpy

        out.append("Per-image scores, per config (`gensets score` with `gensets card --db`, or the build's thresholded "
                   "metrics):\n")
        stats = []
        for (config, metric), values in sorted(_group(rows, ("config", "metric")).items()):
            v = np.asarray(values)
            stats.append([config, metric, len(v), _num(v.mean()), _num(np.median(v)), _num(v.min()), _num(v.max())])
        out.append(table(["config", "metric", "images", "mean", "median", "min", "max"], stats))
        out += [f"\n![Quality scores of {Path(f).stem[len('quality_'):]}]({f})" for f in figures]
        generators = sorted({r["generator"] for r in rows})
        if len(generators) > 1:
            metrics = sorted({r["metric"] for r in rows})
            means = {k: np.mean(v) for k, v in _group(rows, ("generator", "metric")).items()}
            out.append("\nBy generator (mean per image):\n")
            out.append(table(["generator", *metrics],
                             [[g, *(_num(means[(g, m)]) if (g, m) in means else "-" for m in metrics)]
                              for g in generators]))
    return "\n".join(out) + "\n"


def _group(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(float(r["value"]))
    return out
