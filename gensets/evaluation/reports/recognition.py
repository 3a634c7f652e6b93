"""``gensets report recognition``: Borji-style tables and plots, all SQL over the results database.

Per model (and source config): top-1 / top-5. Per category: the best model's top-1, the fraction of
images that every model fails and that every model gets right (Borji 2022, Fig. 2), images per
category. Numbers are exactly what ``gensets query`` gives over ``predictions`` and ``runs`` of one
dataset revision: by default the one scored last, so a rebuilt and re-scored set replaces the old one
and no model counts twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...cards.markdown import table
from ...errors import GensetsError
from ...registry import REPORTS
from .. import store
from .base import Report

PER_MODEL = """
SELECT r.model, r.config, count(*) AS n, avg(p.correct1::INT) AS top1, avg(p.correct5::INT) AS top5
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
GROUP BY ALL ORDER BY r.config, top1 DESC, r.model
"""
PER_CATEGORY_MODEL = """
SELECT r.model, p.target, count(*) AS n, avg(p.correct1::INT) AS top1
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
GROUP BY ALL ORDER BY p.target, top1 DESC, r.model
"""
ALL_FAIL = """
WITH per_image AS (
    SELECT r.config, p.key, any_value(p.target) AS target, count(*) AS models,
           bool_and(NOT p.correct1) AS all_fail, bool_and(p.correct1) AS all_succeed
    FROM predictions p JOIN runs r USING (run_id)
    WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
    GROUP BY r.config, p.key)
SELECT target, count(*) AS images, avg(all_fail::INT) AS all_fail, avg(all_succeed::INT) AS all_succeed,
       min(models) AS models
FROM per_image GROUP BY target ORDER BY target
"""


def _rows(con, sql: str, args: list) -> list[dict]:
    cur = con.execute(sql, args)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def compute(db: str | Path, dataset: str | None = None, protocol: str = "wordset",
            revision: str | None = None) -> dict:
    """The report over one dataset revision: ``revision``, else the one of the latest finished run."""
    con = store.connect(db, read_only=True)
    try:
        datasets = [r[0] for r in con.execute(
            "SELECT DISTINCT dataset FROM runs WHERE protocol = ? ORDER BY 1", [protocol]).fetchall()]
        if dataset is None:
            if len(datasets) != 1:
                raise GensetsError(f"{db}: {len(datasets)} datasets scored with protocol {protocol!r}; "
                                   f"name one with --dataset ({', '.join(datasets) or 'none'})")
            dataset = datasets[0]
        elif dataset not in datasets:
            raise GensetsError(f"{db}: no runs of dataset {dataset!r} with protocol {protocol!r}")
        revisions = [r[0] for r in con.execute(
            "SELECT dataset_revision FROM runs WHERE dataset = ? AND protocol = ? GROUP BY 1 "
            "ORDER BY max(finished) DESC, 1", [dataset, protocol]).fetchall()]
        if revision is None:
            revision = revisions[0]
        elif revision not in revisions:
            raise GensetsError(f"{db}: no runs of dataset {dataset!r} at revision {revision!r} with protocol "
                               f"{protocol!r} (revisions: {', '.join(map(str, revisions))})")
        args = [dataset, protocol, revision]
        names_row = con.execute("SELECT class_names FROM runs WHERE dataset = ? AND protocol = ? AND "
                                "dataset_revision IS NOT DISTINCT FROM ? AND class_names IS NOT NULL "
                                "ORDER BY finished DESC, run_id LIMIT 1", args).fetchone()
        names = json.loads(names_row[0]) if names_row else None
        per_model = _rows(con, PER_MODEL, args)
        per_cat_model = _rows(con, PER_CATEGORY_MODEL, args)
        fails = _rows(con, ALL_FAIL, args)
    finally:
        con.close()

    def name(t):
        return names[t] if names and t is not None and 0 <= t < len(names) else str(t)

    best = {}
    for r in per_cat_model:  # ordered by top-1 descending within a category
        best.setdefault(r["target"], r)
    per_category = [{"category": name(f["target"]), "images": f["images"], "best_model": best[f["target"]]["model"],
                     "best_top1": best[f["target"]]["top1"], "all_fail": f["all_fail"],
                     "all_succeed": f["all_succeed"], "models": f["models"]} for f in fails]
    return {"dataset": dataset, "revision": revision, "protocol": protocol, "per_model": per_model,
            "per_category": per_category}


def _md_table(rows: list[dict], cols: list[str]) -> str:
    def cell(v):
        return f"{100 * v:.1f}" if isinstance(v, float) else str(v)

    return table(cols, [[r[c] for c in cols] for r in rows], cell)


def _plots(rep: dict, out: Path) -> list[str]:
    from ...cards.figures import figure

    files = []
    pm = rep["per_model"]
    labels = [f"{r['model']}\n{r['config']}" for r in pm]
    fig = figure(max(4, 0.9 * len(pm)), 3.5)
    ax = fig.add_subplot(1, 1, 1)
    x = range(len(pm))
    ax.bar([i - 0.2 for i in x], [100 * r["top1"] for r in pm], 0.4, label="top-1")
    ax.bar([i + 0.2 for i in x], [100 * r["top5"] for r in pm], 0.4, label="top-5")
    ax.set_xticks(list(x), labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title(f"Per-model accuracy ({rep['protocol']})")
    files.append(_save(fig, out / "per_model.png"))

    pc = rep["per_category"]
    cats = [r["category"] for r in pc]
    for fname, title, series in (
        ("best_per_category.png", "Best model's top-1 per category", [("best top-1", "best_top1")]),
        ("all_fail_all_succeed.png", "Images all models fail / all succeed",
         [("all fail", "all_fail"), ("all succeed", "all_succeed")]),
        ("images_per_category.png", "Images per category", [("images", "images")]),
    ):
        fig = figure(max(4, 0.5 * len(cats)), 3.2)
        ax = fig.add_subplot(1, 1, 1)
        width = 0.8 / len(series)
        for j, (label, key) in enumerate(series):
            vals = [r[key] * (1 if key == "images" else 100) for r in pc]
            ax.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(cats))], vals, width, label=label)
        ax.set_xticks(range(len(cats)), cats, rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("images" if series[0][1] == "images" else "%")
        ax.set_title(title)
        if len(series) > 1:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        files.append(_save(fig, out / fname))
    return files


def _save(fig, path: Path) -> str:
    from ...cards.figures import save

    fig.tight_layout()
    save(fig, path)
    return path.name


def write(rep: dict, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = _plots(rep, out)
    md = [f"# Recognition report: {rep['dataset']}", "",
          f"Revision `{rep['revision']}`, protocol `{rep['protocol']}`; accuracies in %. Per-image detail: "
          "`gensets query` over `predictions`.", "",
          "## Per model", "", _md_table(rep["per_model"], ["model", "config", "n", "top1", "top5"]), "",
          "## Per category", "",
          _md_table(rep["per_category"], ["category", "images", "best_model", "best_top1", "all_fail",
                                          "all_succeed", "models"]), ""]
    md += [f"![{f}]({f})" for f in figures]
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    return path


@REPORTS.register("recognition")
class Recognition(Report):
    help = "Borji-style recognition report from a results database"
    description = ("Per-model top-1/top-5, the best model per category and the fraction of images all models fail / "
                   "all succeed per category, as markdown and PNG plots.")

    def add_arguments(self, parser):
        parser.add_argument("--db", required=True, help="the results database of `gensets eval`")
        parser.add_argument("--dataset", help="the dataset as recorded in runs (default: the only one)")
        parser.add_argument("--protocol", default="wordset", help="which protocol's runs (default: wordset)")
        parser.add_argument("--revision", help="the dataset revision (build fingerprint) as recorded in runs "
                            "(default: the one scored last)")
        parser.add_argument("--out", default="out/report-recognition", help="folder for report.md and figures")

    def run(self, args):
        path = write(compute(args.db, args.dataset, args.protocol, args.revision), args.out)
        print(f"{path} (+ figures in {path.parent})")
        return 0
