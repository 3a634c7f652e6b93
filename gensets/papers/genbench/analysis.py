"""The GenBench report's comparisons across its rows (issue #16): the data types at equal K with their costs
(Fig. 3, Table 1), score against shots with the cost axis (Fig. 3), the correlations of CLER, CLIP score and FD
with linear-probe accuracy (Fig. 4) and of the change in CLER with MTS (Fig. 6), evaluation time per metric (Fig. 5).

Readings, gensets' own: the paper (shared/papers/001_f04b4de81b95e690.txt) correlates on 18 datasets with 100-shot
generated data, leaving out four datasets with few categories (Sec. 3, Fig. 4), and the CLER change with the
dataset-level MTS (Sec. 3.3, Fig. 6) without saying what the change is taken against:
- Fig. 4: one point per (dataset, generated strategy) of the report, at its build's largest K; only generated
  rows (CLER is a measure of generated data; CLIP score needs prompts), every dataset of the report together.
- Fig. 6: one point per dataset with a retrieval row: x = that row's MTS, y = its CLER minus the CLER of the
  dataset's ``base`` generated strategy (default ST) at the same K.
- Fewer than 3 points, or a constant side: no correlation (``None``; ``n/a`` in report.md).
"""

from __future__ import annotations

from pathlib import Path

from ...cards.figures import PALETTE, figure, save
from ...cards.markdown import table
from ...registry import STRATEGIES

CORRELATED = (("cler", "CLER"), ("clip_score", "CLIP score"), ("fd", "FD"))
TIMED = (("embed", "embedding"), ("cler", "CLER"), ("clip_score", "CLIP score"), ("fd", "FD (FID)"),
         ("linear_probe", "linear probe"))


def strategy_order(name: str) -> tuple:
    """Sort key of a strategy: the paper's table order of its first part, composed ones (NP+RD) after it."""
    names, parts = STRATEGIES.names(), name.split("+")
    return (names.index(parts[0]) if parts[0] in names else len(names), len(parts), name)


def largest_k(rows: list[dict]) -> list[dict]:
    """Each (dataset, config)'s row at its largest K."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["dataset"], r["config"])
        if key not in best or r["shots"] > best[key]["shots"]:
            best[key] = r
    return list(best.values())


def _pairs(points: list[tuple]) -> tuple[list, list]:
    kept = [(x, y) for x, y in points if x is not None and y is not None]
    return [x for x, _ in kept], [y for _, y in kept]


def cler_deltas(rows: list[dict], base: str) -> list[dict]:
    """Fig. 6's points: per dataset with a retrieval row (at its largest K), its MTS and CLER(retrieval) minus
    CLER(``base`` at the same K)."""
    out = []
    for r in largest_k(rows):
        if r["data_type"] != "retrieval":
            continue
        b = next((x for x in rows if x["dataset"] == r["dataset"] and x["strategy"] == base
                  and x["shots"] == r["shots"]), None)
        delta = None if b is None or r["cler"] is None or b["cler"] is None else r["cler"] - b["cler"]
        out.append({"dataset": r["dataset"], "shots": r["shots"], "mts": r["mts"], "cler_delta": delta})
    return out


def correlations(rows: list[dict], base: str = "ST") -> dict:
    """Fig. 4 and Fig. 6 as numbers (:func:`gensets.metrics.correlation`), with the points behind them."""
    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    gen = [r for r in largest_k(rows) if r["data_type"] == "generated"]
    out = {"points": "one per (dataset, generated strategy) at its largest K", "n_points": len(gen),
           "with_linear_probe": {}}
    for key, _ in CORRELATED:
        xs, ys = _pairs([(r[key], r["linear_probe"]) for r in gen])
        out["with_linear_probe"][key] = M.correlation(xs, ys)
    deltas = cler_deltas(rows, base)
    xs, ys = _pairs([(d["mts"], d["cler_delta"]) for d in deltas])
    out["cler_delta_with_mts"] = {"base": base, "means": f"CLER(retrieval) - CLER({base}) at the same K, per dataset",
                                  "points": deltas, "correlation": M.correlation(xs, ys)}
    return out


# ------------------------------------------------------------------ markdown
def _corr_cells(c: dict | None, n: int) -> list[str]:
    if c is None:
        return [str(n), "n/a", "n/a"]
    return [str(c["n"]), f"{c['pearson']:.3f} (p {c['pearson_p']:.3g})", f"{c['spearman']:.3f} (p {c['spearman_p']:.3g})"]


def _cost(v, currency: str, fmt: str) -> str:
    return "-" if v is None else f"{v:{fmt}} {currency}"


def chosen_cell(r: dict) -> str:
    """How a row's K shots were chosen: its selection variant and, for it, what was done (e.g. ``clip: top K by CLIP
    score ...``)."""
    return f"{r.get('selection', '-')}: {r.get('selected_by', '-')}"


def markdown_sections(rep: dict, pct, probe_cell) -> list[str]:
    """The report.md sections of this module: equal K, correlations, evaluation time."""
    rows = sorted(rep["rows"], key=lambda r: (r["dataset"], r["shots"], strategy_order(r["strategy"])))
    lines = ["", "## Data types at equal K", "",
             "Every data type and strategy of a dataset at the same K shots per class (chosen from its build as the "
             "`K chosen` column says: the report's `selection` variant), with the cost of the set (Fig. 3, Table 1).",
             "",
             table(["dataset", "K", "K chosen", "strategy", "data", "images", "CLER", "linear probe (variant)", "MTS",
                    "cost / image", "cost", "cost source"],
                   [[r["dataset"], r["shots"], chosen_cell(r), r["strategy"], r["data_type"], r["generated"],
                     pct(r["cler"]),
                     probe_cell(r), "-" if r["mts"] is None else f"{r['mts']:.3f}",
                     _cost(r["cost_per_image"], r["currency"], ".3g"), _cost(r["cost_total"], r["currency"], ".3g"),
                     r["cost_source"]] for r in rows])]
    c = rep["correlations"]
    n = c["n_points"]
    d = c["cler_delta_with_mts"]
    lines += ["", "## Correlations", "",
              f"Across the report's datasets, {c['points']} (GenBench Fig. 4), Pearson r and Spearman rho "
              "(scipy.stats, two-sided p); n/a below 3 points. The change in CLER against MTS (Fig. 6): "
              f"{d['means']}. Both are gensets' readings of the figures (the paper's text on them could not be "
              "read offline).", "",
              table(["x", "y", "points", "Pearson r", "Spearman rho"],
                    [[label, "linear probe", *_corr_cells(c["with_linear_probe"][key], n)] for key, label in CORRELATED]
                    + [["MTS", f"CLER change (retrieval - {d['base']})",
                        *_corr_cells(d["correlation"], sum(p["cler_delta"] is not None for p in d["points"]))]]),
              "", "![correlations](correlations.png)", ""]
    lines += ["## Evaluation time per metric", "",
              "Wall-clock seconds per row (GenBench Fig. 5): embedding = decoding and embedding the set's images "
              "(shared by every metric); CLER with its ensemble; CLIP score with its prompt embeddings; FD; the linear "
              "probe with its search. Measured on the machine that ran the report.", "",
              table(["dataset", "strategy", "K", *[label for _, label in TIMED]],
                    [[r["dataset"], r["strategy"], r["shots"],
                      *["-" if r.get(f"{k}_seconds") is None else f"{r[f'{k}_seconds']:.4f} s" for k, _ in TIMED]]
                     for r in rep["rows"]]),
              "", "![score against shots and cost](shots.png)", ""]
    return lines


# ------------------------------------------------------------------ figures
def plot_correlations(rep: dict, path: Path) -> None:
    """Scatter plots: CLER, CLIP score, FD against linear-probe accuracy (generated rows), CLER change against MTS."""
    c = rep["correlations"]
    gen = [r for r in largest_k(rep["rows"]) if r["data_type"] == "generated"]
    names = sorted({r["dataset"] for r in rep["rows"]})
    fig = figure(12.0, 3.2)
    panels = [(label, [(r[key], r["linear_probe"], r["dataset"]) for r in gen], "linear probe",
               c["with_linear_probe"][key]) for key, label in CORRELATED]
    d = c["cler_delta_with_mts"]
    panels.append(("MTS", [(p["mts"], p["cler_delta"], p["dataset"]) for p in d["points"]],
                   f"CLER change vs {d['base']}", d["correlation"]))
    for i, (xlabel, pts, ylabel, corr) in enumerate(panels):
        ax = fig.add_subplot(1, 4, i + 1)
        for j, name in enumerate(names):
            xy = [(x, y) for x, y, n in pts if n == name and x is not None and y is not None]
            if xy:
                ax.scatter([x for x, _ in xy], [y for _, y in xy], s=18, color=PALETTE[j % len(PALETTE)],
                           label=name if i == 0 else None)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title("n/a" if corr is None else f"r {corr['pearson']:.2f}, rho {corr['spearman']:.2f}", fontsize=8)
    if names:
        fig.legend(loc="lower center", ncol=min(len(names), 6), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save(fig, path)


def plot_shots(rep: dict, path: Path) -> None:
    """Per dataset: CLER against K shots per class, and against the cost of the set (log scale where every cost
    is positive), one line per strategy / data type (Fig. 3)."""
    names = sorted({r["dataset"] for r in rep["rows"]})
    fig = figure(8.0, 2.8 * max(1, len(names)))
    for i, name in enumerate(names):
        rows = [r for r in rep["rows"] if r["dataset"] == name and r["cler"] is not None]
        by_k, by_cost = fig.add_subplot(len(names), 2, 2 * i + 1), fig.add_subplot(len(names), 2, 2 * i + 2)
        costs = []
        for j, s in enumerate(sorted({r["strategy"] for r in rows}, key=strategy_order)):
            pts = sorted((r["shots"], 100 * r["cler"], r["cost_total"]) for r in rows if r["strategy"] == s)
            color = PALETTE[j % len(PALETTE)]
            by_k.plot([k for k, _, _ in pts], [v for _, v, _ in pts], marker="o", color=color, label=s)
            priced = [(c, v) for _, v, c in pts if c is not None]
            costs += [c for c, _ in priced]
            by_cost.plot([c for c, _ in priced], [v for _, v in priced], marker="o", color=color)
        if costs and min(costs) > 0:
            by_cost.set_xscale("log")
        by_k.set_xlabel("K (shots per class)")
        by_k.set_ylabel(f"CLER (%), {name}")
        by_cost.set_xlabel(f"cost of the set ({rows[0]['currency'] if rows else ''})")
        by_k.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    save(fig, path)
