"""The card's figures: images per class and a sample grid, as PNGs that rebuild byte-identically.

matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), a fixed size and DPI,
and no ``Software`` / date metadata in the PNG, so the same samples give the same bytes.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

from ..errors import DataError

DPI = 100
PALETTE = ["#3b5bdb", "#e67700", "#2b8a3e", "#c2255c", "#1098ad", "#7048e8", "#868e96"]


def figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png", metadata={"Software": None})


def class_counts(counts: dict[str, Counter], path: Path) -> None:
    """Horizontal bars: images per class (``counts``: config -> class -> images), stacked by config, most
    frequent class on top."""
    totals = sum(counts.values(), Counter())
    classes = sorted(totals, key=lambda k: (-totals[k], k))
    used = [c for c in counts if counts[c]]
    height = 1.2 + 0.22 * max(len(classes), 1)
    fig = figure(8, height)
    ax = fig.add_axes((0.24, 0.6 / height, 0.56, 1 - 1.0 / height))
    y = list(range(len(classes)))[::-1]
    left = [0] * len(classes)
    for i, c in enumerate(used):
        vals = [counts[c].get(k, 0) for k in classes]
        ax.barh(y, vals, left=left, color=PALETTE[i % len(PALETTE)], label=c, height=0.75)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_yticks(y, classes, fontsize=8)
    ax.set_xlabel("images")
    ax.set_title(f"Images per class ({sum(totals.values())} images, {len(classes)} classes)", fontsize=10)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_ylim(-0.6, len(classes) - 0.4)
    if used:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False, title="config",
                  title_fontsize=8)
    save(fig, path)


class Picker:
    """Up to ``n`` samples, as varied as possible (a new class and a new nuisance first, then the smallest key),
    chosen from a stream of samples seen once.

    Which sample the greedy choice takes depends only on its (class, nuisance) and its key, so it only ever
    takes one of the ``n`` smallest keys of a (class, nuisance) pair: those are all that is kept (memory grows
    with the pairs, not with the samples), and :meth:`picked` makes the same choices over them as over all."""

    def __init__(self, n: int):
        self.n = n
        self.first: dict[tuple, list] = {}  # (class, nuisance) -> its n samples of smallest key

    def add(self, s) -> None:
        kept = self.first.setdefault((s.meta["label"], s.meta.get("nuisance")), [])
        if len(kept) < self.n or s.key < kept[-1].key:
            kept.append(s)
            kept.sort(key=lambda x: x.key)
            del kept[self.n:]

    def picked(self) -> list:
        rest = sorted((s for kept in self.first.values() for s in kept), key=lambda s: s.key)
        picked, classes, nuisances = [], set(), set()
        while rest and len(picked) < self.n:
            i, best = max(enumerate(rest), key=lambda t: (2 * (t[1].meta["label"] not in classes)
                                                          + (t[1].meta.get("nuisance") not in nuisances), -t[0]))
            del rest[i]
            picked.append(best)
            classes.add(best.meta["label"])
            nuisances.add(best.meta.get("nuisance"))
        return picked


def pick_samples(samples, n: int) -> list:
    """Up to ``n`` samples, as varied as possible (a new class and a new nuisance first), deterministic."""
    picker = Picker(n)
    for s in samples:
        picker.add(s)
    return picker.picked()


def sample_grid(picks: dict[str, list], path: Path) -> None:
    """A few images per config (``picks``: config -> its samples, one row each), each titled with its class
    and nuisance. Only these images are read."""
    from PIL import Image

    rows = [(c, picked) for c, picked in picks.items() if picked]
    if not rows:
        return
    cols = max(len(p) for _, p in rows)
    width, height = 2.0 * cols + 0.6, 2.35 * len(rows) + 0.2
    fig = figure(width, height)
    grid = fig.add_gridspec(len(rows), cols, left=0.45 / width, right=0.99, top=1 - 0.45 / height,
                            bottom=0.1 / height, wspace=0.08, hspace=0.4)
    for r, (config, picked) in enumerate(rows):
        for c in range(cols):
            ax = fig.add_subplot(grid[r, c])
            ax.set_axis_off()
            if c >= len(picked):
                continue
            s = picked[c]
            try:
                with Image.open(io.BytesIO(s.image)) as im:
                    img = im.convert("RGB")
            except Exception as e:  # noqa: BLE001 - any decoder failure: one line naming the shard and the key
                shard = (getattr(s, "where", None) or ("-",))[0]
                why = f"cannot decode image ({' '.join(f'{type(e).__name__}: {e}'.split())})"
                err = DataError(f"{shard}: {s.key}.{s.ext}: {why}")
                err.sample, err.why = (s.key, s.ext), why  # finalize names the candidate shard it came from
                raise err from None
            small = img.width < 160
            ax.imshow(img, interpolation="nearest" if small else "antialiased")
            ax.set_title(f"{s.meta['label']}\n{s.meta.get('nuisance') or ''}", fontsize=8)
            if c == 0:
                ax.text(-0.08, 0.5, config, transform=ax.transAxes, rotation=90, ha="right", va="center",
                        fontsize=10, fontweight="bold")
    save(fig, path)


def quality_histograms(config: str, values: dict[str, list[float]], path: Path, thresholds=None) -> None:
    """One histogram per metric of a config's per-image scores (20 bins over the values' range), a dashed line
    at each quality: threshold (``thresholds``: metric -> an object with ``min`` / ``max``)."""
    metrics = sorted(values)
    fig = figure(2.8 * len(metrics) + 0.4, 2.6)
    for i, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        v = values[metric]
        ax.hist(v, bins=20, color=PALETTE[i % len(PALETTE)])
        t = (thresholds or {}).get(metric)
        lo, hi = min(v), max(v)
        far = []  # a threshold far outside the values is named in the title instead of squashing the bars
        for sign, bound in ((">=", getattr(t, "min", None)), ("<=", getattr(t, "max", None))):
            if bound is not None and lo - (hi - lo) <= bound <= hi + (hi - lo):
                ax.axvline(bound, color="black", linestyle="dashed", linewidth=1)
            elif bound is not None:
                far.append(f"{sign} {bound:g}")
        ax.set_title(f"{metric} (n={len(v)})" + (f", kept {' '.join(far)}" if far else ""), fontsize=9)
        ax.set_xlabel(metric, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"Quality scores: {config}", fontsize=10)
    fig.tight_layout()
    save(fig, path)


def pairs(rows: list[tuple], path: Path) -> None:
    """Pairs side by side, one row each: ``(image, its title, neighbour, its title, the pair's caption)`` (PIL
    images; None where an image cannot be shown)."""
    width, height = 5.2, 2.5 * len(rows) + 0.3
    fig = figure(width, height)
    grid = fig.add_gridspec(len(rows), 2, left=0.03, right=0.97, top=1 - 0.25 / height, bottom=0.05 / height,
                            wspace=0.1, hspace=0.55)
    for r, (a, title_a, b, title_b, caption) in enumerate(rows):
        for c, (img, title) in enumerate(((a, title_a), (b, title_b))):
            ax = fig.add_subplot(grid[r, c])
            ax.set_axis_off()
            if img is not None:
                ax.imshow(img.convert("RGB"), interpolation="nearest" if img.width < 160 else "antialiased")
            ax.set_title(title if len(title) <= 34 else title[:31] + "...", fontsize=7)
            if c == 0:
                ax.text(1.05, -0.12, caption, transform=ax.transAxes, ha="center", va="top", fontsize=7)
    save(fig, path)
