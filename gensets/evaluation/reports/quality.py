"""``gensets report quality``: the quality scores of workspaces or datasets side by side (what ``gensets score`` wrote
into a results database): one row per (dataset, config) with the generators that made it, one column per metric,
the value with its bootstrap interval, the best of each column in bold (lowest for FID / KID). Writes report.md,
report.json and quality.png (one panel per metric), and names the variant and models behind every column.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...cards.figures import PALETTE, figure, save
from ...cards.markdown import table
from ...errors import GensetsError
from ...models.spec import random_weights
from ...output import files
from ...registry import REPORTS
from ..data import open_source
from ..scoring import summaries
from .base import Report, random_weights_note


def _short(dataset: str) -> str:
    p = Path(dataset)
    return p.parent.name if p.name == "dataset" else dataset


def compute(db, sources: list[str] | None = None, metrics: list[str] | None = None) -> dict:
    """The report as plain data: rows (dataset, config, split, generators, n, {column: cell}) and columns."""
    wanted = None
    if sources:
        wanted = []
        for s in sources:
            src = open_source(s)
            wanted.append((src.id, src.revision))
    found = summaries(db, wanted, metrics)
    if not found:
        raise GensetsError(f"{db}: no quality scores of {', '.join(sources) if sources else 'any dataset'}"
                           f"{' for ' + ', '.join(metrics) if metrics else ''} (run `gensets score` first)")
    columns: dict[str, dict] = {}
    rows: dict[tuple, dict] = {}
    for r in found:
        key = (r["dataset"], r["revision"], r["config"], r["split"])
        row = rows.setdefault(key, {"dataset": r["dataset"], "name": _short(r["dataset"]), "revision": r["revision"],
                                    "config": r["config"], "split": r["split"],
                                    "generators": json.loads(r["generators"] or "[]"), "n": r["n"], "cells": {}})
        row["cells"][r["name"]] = {"value": r["value"], "lo": r["lo"], "hi": r["hi"], "n": r["n"]}
        columns.setdefault(r["name"], {"metric": r["metric"], "higher_is_better": r["higher_is_better"],
                                       "variants": []})
        what = {"variant": r["variant"], "models": json.loads(r["models"]), "commits": json.loads(r["commits"]),
                "reference": r["reference"]}
        if what not in columns[r["name"]]["variants"]:
            columns[r["name"]]["variants"].append(what)
    for name, col in columns.items():
        values = [row["cells"][name]["value"] for row in rows.values() if name in row["cells"]]
        col["best"] = (max if col["higher_is_better"] else min)(values)
    return {"db": str(db), "columns": columns, "rows": list(rows.values())}


def _cell(c: dict | None, best) -> str:
    if c is None:
        return "-"
    text = f"{c['value']:.4g}"
    text = f"**{text}**" if c["value"] == best else text
    return text + (f" ({c['lo']:.4g}-{c['hi']:.4g})" if c["lo"] is not None else "")


def markdown(rep: dict) -> str:
    cols = rep["columns"]
    head = ["dataset", "config", "generator", "images", *(f"{n} {'↑' if c['higher_is_better'] else '↓'}"
                                                         for n, c in cols.items())]
    body = [[r["name"], r["config"], ", ".join(r["generators"]) or "-", r["n"],
             *(_cell(r["cells"].get(n), c["best"]) for n, c in cols.items())] for r in rep["rows"]]
    specs = {g for r in rep["rows"] for g in r["generators"]} | {
        m for c in cols.values() for v in c["variants"] for m in v["models"].values() if isinstance(m, str)}
    lines = ["# Quality report", "", *random_weights_note(s for s in specs if random_weights(s)),
             f"Quality and alignment scores (`gensets score`, results in `{Path(rep['db']).name}`): per-image metrics "
             "are means with a 95% percentile bootstrap interval; set-level metrics (FID, KID, IS, precision / recall, "
             "LPIPS diversity) one value per config. Best per column in bold (↑ higher is better, ↓ lower).", "",
             table(head, body), "", "## What computed each column", ""]
    for n, c in cols.items():
        for v in c["variants"]:
            models = ", ".join(f"{role} `{spec}`" + (f" @ `{v['commits'].get(role)}`" if v["commits"].get(role) else "")
                               for role, spec in v["models"].items()) or "no model"
            ref = f"; reference `{v['reference']}`" if v["reference"] else ""
            lines.append(f"- **{n}** ({c['metric']}): {v['variant']}; {models}{ref}")
    lines += ["", "![Quality scores](quality.png)", ""]
    return "\n".join(lines)


def plot(rep: dict, path: Path) -> None:
    """One panel per metric: a bar per (dataset, config), the bootstrap interval as an error bar."""
    cols = list(rep["columns"])
    labels = [f"{r['name']}/{r['config']}" for r in rep["rows"]]
    fig = figure(2.6 * len(cols) + 1.6, 0.9 + 0.3 * len(labels))
    for i, name in enumerate(cols):
        ax = fig.add_subplot(1, len(cols), i + 1)
        ys, vals, errs = [], [], [[], []]
        for j, r in enumerate(rep["rows"]):
            c = r["cells"].get(name)
            if c is None:
                continue
            ys.append(j)
            vals.append(c["value"])
            errs[0].append(c["value"] - c["lo"] if c["lo"] is not None else 0)
            errs[1].append(c["hi"] - c["value"] if c["hi"] is not None else 0)
        ax.barh(ys, vals, xerr=errs, color=PALETTE[i % len(PALETTE)], height=0.6)
        ax.set_yticks(range(len(labels)), labels if i == 0 else [""] * len(labels), fontsize=7)
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.invert_yaxis()
        ax.set_title(f"{name} {'↑' if rep['columns'][name]['higher_is_better'] else '↓'}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    save(fig, path)


def write(rep: dict, out: str | Path) -> Path:
    with files(out, "gensets report quality") as staged:
        staged.write("report.json", json.dumps(rep, indent=1) + "\n")
        plot(rep, staged.path("quality.png"))
        return staged.write("report.md", markdown(rep))


@REPORTS.register("quality")
class Quality(Report):
    help = "quality scores of workspaces or datasets side by side (from gensets score)"
    description = ("Generators x metrics from a results database that `gensets score` filled: one row per (dataset, "
                   "config), each metric's value with its bootstrap interval, the best of each column in bold; "
                   "report.md, report.json and quality.png.")

    def add_arguments(self, parser):
        parser.add_argument("source", nargs="*", metavar="DATASET",
                            help="workspaces or datasets to compare, as given to gensets score (default: every one "
                            "in the database)")
        parser.add_argument("--db", required=True, help="the results database (gensets score --db)")
        parser.add_argument("--metric", action="append", help="only this metric (repeatable)")
        parser.add_argument("--out", "--output", default="out/report-quality", help="folder for report.md, report.json, quality.png")

    def run(self, args):
        rep = compute(args.db, args.source, args.metric)
        path = write(rep, args.out)
        for r in rep["rows"]:
            cells = "  ".join(f"{n} {c['value']:.4g}" for n, c in r["cells"].items())
            print(f"{r['name']}  {r['config']}/{r['split']}  {cells}")
        print(f"{path} (+ report.json, quality.png in {path.parent})")
        return 0
