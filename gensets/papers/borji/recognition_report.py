"""``gensets report recognition``: Borji-style tables and plots, all SQL over the results database.

Per model (and source config): top-1 / top-5 averaged as Borji (2022) does, over its categories (each
category's accuracy, then their mean: ``top1`` / ``top5``, the default), and over images (``top1_images`` /
``top5_images``, a named second reading). Per category: the best model's top-1, the fraction of images that
every model fails and that every model gets right at top-1 and at top-5 (Borji 2022, Fig. 2), images per
category. Per model and category: the top-1 / top-5 table of the paper's appendix (markdown, JSON, heatmap).
Beside them, Borji's published numbers (gensets/data/borji/published.json, with their source), each set beside
every model's number over all of the run set's images (``pooled``: its sources pooled, as the paper pooled its
DALL-E 2 and Midjourney images, Sec. 4) and compared by :func:`gensets.compare.compare`: only the paper's own
images (sources ``dall-e-2`` and ``midjourney``, imported) are the same population, only resnext101_32x8d_wsl the
same model, and both numbers are approximate ("around 60%", "about 80%"): shown, never judged. Numbers are
exactly what ``gensets query`` gives over ``predictions`` and ``runs`` of one dataset revision and one
protocol (the report names it: ``wordset``, the paper's rule, or a named variant: ``wordset-plural``,
``wordset-lemmas``, ``wordset-gensets``): by default the
revision scored last, so a rebuilt and re-scored set replaces the old one and no model counts twice.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...cards.figures import figure, save
from ...cards.markdown import table
from ...compare import Measured, compare
from ...errors import GensetsError
from ...evaluation import store
from ...evaluation.reports.base import Report, add_precision, pick_run_set, random_weights_note, rows
from ...labels.wordset import BORJI_CATEGORIES
from ...output import files
from ...records import slug
from ...registry import REPORTS
from ...sources.packaged import borji_published

PROTOCOLS = {  # the word-set readings, as the report states them
    "wordset": "Borji 2022's rule: the category word is exactly one of the words of the predicted label's name "
               "(its first name: 'loggerhead', not 'loggerhead turtle'); rabbit ~ hare the only synonym",
    "wordset-plural": "gensets' lenient reading of the word-set rule: a trailing s/es is optional",
    "wordset-lemmas": "the word-set rule on the labels' whole WordNet lemma lists (a named variant)",
    "wordset-gensets": "gensets' earlier word-set rule: the lemma lists and gensets' extra synonyms "
                       "(sunglass -> sunglasses, teddy -> teddy bear)",
}
AVERAGES = ("`top1` / `top5`: each category's accuracy, then the mean over categories (Borji 2022's "
            "averaging, the default); `top1_images` / `top5_images`: the mean over images")

INTERVAL = ("95% percentile bootstrap over images (1000 resamples, seed 0): each category's images resampled on "
            "their own, the statistic the mean over categories (gensets.metrics.mean_of_groups_ci); none where a "
            "category has fewer than two images")
OUTCOMES = """
SELECT r.model, r.config, p.target, p.correct1, p.correct5
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
  AND coalesce(r.autocast, r.precision, 'fp32') = ?
ORDER BY r.model, r.config, p.target, p.key
"""
PER_MODEL_CATEGORY = """
SELECT r.model, r.config, p.target, count(*) AS n, sum(p.correct1::INT)::INT AS hits1,
       sum(p.correct5::INT)::INT AS hits5, avg(p.correct1::INT) AS top1, avg(p.correct5::INT) AS top5
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
  AND coalesce(r.autocast, r.precision, 'fp32') = ?
GROUP BY ALL ORDER BY r.config, r.model, p.target
"""
PER_MODEL = f"""
WITH per_category AS ({PER_MODEL_CATEGORY})
SELECT model, config, sum(n)::INT AS n, count(*)::INT AS categories, avg(top1) AS top1, avg(top5) AS top5,
       sum(hits1) / sum(n) AS top1_images, sum(hits5) / sum(n) AS top5_images
FROM per_category GROUP BY ALL ORDER BY config, top1 DESC, model
"""
PER_MODEL_POOLED = f"""
WITH per_category AS (
    SELECT r.model, p.target, count(*) AS n, avg(p.correct1::INT) AS top1, avg(p.correct5::INT) AS top5,
           bool_or({store.RANDOM_WEIGHTS}) AS random_weights, list(DISTINCT r.config ORDER BY r.config) AS configs
    FROM predictions p JOIN runs r USING (run_id)
    WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
      AND coalesce(r.autocast, r.precision, 'fp32') = ?
    GROUP BY ALL)
SELECT model, sum(n)::INT AS n, count(*)::INT AS categories, avg(top1) AS top1, avg(top5) AS top5,
       bool_or(random_weights) AS random_weights,
       list_sort(list_distinct(flatten(list(configs)))) AS configs
FROM per_category GROUP BY model ORDER BY top1 DESC, model
"""
PER_CATEGORY_MODEL = """
SELECT r.model, p.target, count(*) AS n, avg(p.correct1::INT) AS top1
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
  AND coalesce(r.autocast, r.precision, 'fp32') = ?
GROUP BY ALL ORDER BY p.target, top1 DESC, r.model
"""
ALL_FAIL = """
WITH per_image AS (
    SELECT r.config, p.key, any_value(p.target) AS target, count(*) AS models,
           bool_and(NOT p.correct1) AS fail1, bool_and(p.correct1) AS succeed1,
           bool_and(NOT p.correct5) AS fail5, bool_and(p.correct5) AS succeed5
    FROM predictions p JOIN runs r USING (run_id)
    WHERE r.dataset = ? AND r.protocol = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
  AND coalesce(r.autocast, r.precision, 'fp32') = ?
    GROUP BY r.config, p.key)
SELECT target, count(*) AS images, avg(fail1::INT) AS all_fail_top1, avg(succeed1::INT) AS all_succeed_top1,
       avg(fail5::INT) AS all_fail_top5, avg(succeed5::INT) AS all_succeed_top5, min(models) AS models
FROM per_image GROUP BY target ORDER BY target
"""


PAPER_IMAGES = ("dall-e-2", "midjourney")  # Borji (2022) scored DALL-E 2 and Midjourney images (Fig. 2), pooled


def compute(db: str | Path, dataset: str | None = None, protocol: str = "wordset",
            revision: str | None = None, precision: str = "fp32", population: str | None = None) -> dict:
    """The report over one dataset revision: ``revision``, else the one of the latest finished run; of the runs
    at ``precision`` (``gensets eval --precision``: fp32 by default, so an autocast run never counts twice).
    ``population``: whose images the run set's are (:data:`gensets.compare.OUR_POPULATIONS`; ``reproduce``
    reads it from the workspace's config); None: the paper's when every config is one of its sources
    (:data:`PAPER_IMAGES`, the configs of imports with those sources), else other images."""
    con = store.connect(db, read_only=True)
    try:
        dataset, revision = pick_run_set(con, db, dataset, protocol, revision)
        args = [dataset, protocol, revision, precision]
        names_row = con.execute("SELECT class_names FROM runs WHERE dataset = ? AND protocol = ? AND "
                                "dataset_revision IS NOT DISTINCT FROM ? AND coalesce(autocast, precision, 'fp32') = ? "
                                "AND class_names IS NOT NULL "
                                "ORDER BY finished DESC, run_id LIMIT 1", args).fetchone()
        names = json.loads(names_row[0]) if names_row else None
        per_model = rows(con, PER_MODEL, args)
        pooled = rows(con, PER_MODEL_POOLED, args)
        per_model_category = rows(con, PER_MODEL_CATEGORY, args)
        per_cat_model = rows(con, PER_CATEGORY_MODEL, args)
        fails = rows(con, ALL_FAIL, args)
        outcomes = rows(con, OUTCOMES, args)
    finally:
        con.close()
    _intervals(per_model, outcomes)
    _intervals(pooled, outcomes, pooled=True)

    def name(t):
        return names[t] if names and t is not None and 0 <= t < len(names) else str(t)

    best = {}
    for r in per_cat_model:  # ordered by top-1 descending within a category
        best.setdefault(r["target"], r)
    per_category = [{"category": name(f["target"]), "images": f["images"], "best_model": best[f["target"]]["model"],
                     "best_top1": best[f["target"]]["top1"],
                     **{k: f[k] for k in ("all_fail_top1", "all_succeed_top1", "all_fail_top5", "all_succeed_top5")},
                     "models": f["models"]} for f in fails]
    for r in per_model_category:
        r["category"] = name(r.pop("target"))
    if not per_model:
        raise GensetsError(f"{db}: no {precision} runs of dataset {dataset!r} with protocol {protocol!r} "
                           "(another --precision?)")
    configs = sorted({r["config"] for r in per_model})
    if population is None:  # an import's config is named by its source (slugged: dall_e_2)
        population = "paper-images" if set(configs) <= {slug(x) for x in PAPER_IMAGES} else "other"
    categories = [name(f["target"]) for f in fails]
    classes = "all" if set(BORJI_CATEGORIES) <= set(categories) else tuple(categories)
    published = borji_published()
    return {"dataset": dataset, "revision": revision, "protocol": protocol, "precision": precision,
            "protocol_rule": PROTOCOLS.get(protocol, protocol), "averages": AVERAGES, "interval": INTERVAL,
            "per_model": per_model, "pooled": pooled, "configs": configs, "population": population,
            "random_weights": sorted(r["model"] for r in pooled if r["random_weights"]),
            "per_category": per_category, "per_model_category": per_model_category,
            "published": {"source": published["paper"], "url": published["url"], "checked": published["checked"],
                          "numbers": published["recognition"],
                          "rows": compared(published["recognition"], pooled, protocol, population, classes)}}


def compared(numbers: list[dict], pooled: list[dict], protocol: str, population: str, classes) -> list[dict]:
    """Each published number beside every model's pooled number (all the run set's images, mean over categories),
    compared by :func:`gensets.compare.compare`."""
    out = []
    for p in numbers:
        m = p["quantity"]
        for r in pooled:
            c = compare(p, Measured(r[m], m, "mean-of-categories", population, classes=classes, protocol=protocol,
                                    model=r["model"], random_weights=r["random_weights"], n=r["n"]))
            out.append({"what": p["what"], "metric": m, "published": p["value"], "approximate":
                        p["precision"]["kind"] == "approximate", "model": r["model"], "gensets": r[m],
                        "interval": r.get(f"{m}_interval"), "configs": r["configs"], "difference": c.difference,
                        "random_weights": r["random_weights"], "comparison": c.as_dict()})
    return out


def _intervals(per_model: list[dict], outcomes: list[dict], pooled: bool = False) -> None:
    """Each model's ``top1_interval`` / ``top5_interval`` (:data:`INTERVAL`) from its per-image outcomes (``pooled``:
    of every config's images together)."""
    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    groups: dict = {}
    for o in outcomes:
        groups.setdefault(o["model"] if pooled else (o["model"], o["config"]), {}).setdefault(o["target"], []).append(o)
    for r in per_model:
        cats = groups.get(r["model"] if pooled else (r["model"], r["config"]), {}).values()
        for k in ("top1", "top5"):
            ci = M.mean_of_groups_ci([[bool(o[f"correct{k[-1]}"]) for o in c] for c in cats])
            r[f"{k}_interval"] = None if ci is None else list(ci)


def _pct(v) -> str:
    return f"{100 * v:.1f}" if isinstance(v, float) else str(v)


def _md_table(rows_: list[dict], cols: list[str]) -> str:
    return table(cols, [[r[c] for c in cols] for r in rows_], _pct)


def _matrix(rep: dict, metric: str) -> list[str]:
    """The per-model x per-category table of ``metric``, one per config (the paper's appendix table)."""
    cats = [r["category"] for r in rep["per_category"]]
    out = []
    for config in dict.fromkeys(r["config"] for r in rep["per_model"]):
        cells = {(r["model"], r["category"]): r[metric] for r in rep["per_model_category"] if r["config"] == config}
        models = [r["model"] for r in rep["per_model"] if r["config"] == config]
        out += [f"Config `{config}`:", "",
                table(["model", *cats], [[m, *(cells.get((m, c), "-") for c in cats)] for m in models], _pct), ""]
    return out


def _published(rep: dict) -> list[str]:
    """Borji's published numbers beside every model's number over the run set's images, pooled, compared."""
    pub = rep["published"]
    lines = [[r["what"], r["metric"], ("about " if r["approximate"] else "") + _pct(r["published"]),
              f"`{r['model']}`" + (" (random weights)" if r["random_weights"] else ""), _pct(r["gensets"]),
              "-" if r["interval"] is None else f"[{100 * r['interval'][0]:.1f}, {100 * r['interval'][1]:.1f}]",
              "-" if r["difference"] is None else f"{100 * r['difference']:+.1f}", r["comparison"]["text"]]
             for r in pub["rows"]]
    return ["Each model's number over every image of the run set (configs " + ", ".join(f"`{c}`" for c in rep["configs"])
            + " pooled, as the paper pooled its DALL-E 2 and Midjourney images; mean over categories), beside the "
            "paper's; difference = gensets - published, in points; comparison: the test that fits (README, \"How "
            "gensets compares with a paper\"): the paper's own images only, its model only.", "",
            table(["published", "metric", "Borji 2022", "gensets model", f"gensets (protocol {rep['protocol']})",
                   "gensets 95% interval (images)", "difference", "comparison"], lines),
            "", f"Interval: {rep.get('interval', INTERVAL)} (gensets' own uncertainty, which decides nothing).", "",
            f"Source: {pub['source']} ({pub['url']}). {pub['checked']}", ""]


def _plots(rep: dict, out) -> list[str]:
    names = []
    pm = rep["per_model"]
    labels = [f"{r['model']}\n{r['config']}" for r in pm]
    fig = figure(max(4, 0.9 * len(pm)), 3.5)
    ax = fig.add_subplot(1, 1, 1)
    x = range(len(pm))
    ax.bar([i - 0.2 for i in x], [100 * r["top1"] for r in pm], 0.4, label="top-1")
    ax.bar([i + 0.2 for i in x], [100 * r["top5"] for r in pm], 0.4, label="top-5")
    ax.set_xticks(list(x), labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("accuracy (%), mean over categories")
    ax.set_ylim(0, 100)
    ax.legend()
    ax.set_title(f"Per-model accuracy ({rep['protocol']})")
    names.append(_save(fig, out.path("per_model.png")))

    pc = rep["per_category"]
    cats = [r["category"] for r in pc]
    for fname, title, series in (
        ("best_per_category.png", "Best model's top-1 per category", [("best top-1", "best_top1")]),
        ("all_fail_all_succeed.png", "Images all models fail / all succeed",
         [("all fail, top-1", "all_fail_top1"), ("all succeed, top-1", "all_succeed_top1"),
          ("all fail, top-5", "all_fail_top5"), ("all succeed, top-5", "all_succeed_top5")]),
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
        names.append(_save(fig, out.path(fname)))
    names.append(_heatmap(rep, out.path("per_model_category.png")))
    return names


def _heatmap(rep: dict, path: Path) -> str:
    """Top-1 per model (and config) and category, in %."""
    cats = [r["category"] for r in rep["per_category"]]
    runs = [(r["model"], r["config"]) for r in rep["per_model"]]
    cells = {(r["model"], r["config"], r["category"]): r["top1"] for r in rep["per_model_category"]}
    grid = [[100 * cells.get((m, c, k), float("nan")) for k in cats] for m, c in runs]
    fig = figure(4 + 0.45 * len(cats), max(2.5, 1.5 + 0.35 * len(runs)))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cats)), cats, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(runs)), [f"{m} ({c})" for m, c in runs], fontsize=7)
    fig.colorbar(im, ax=ax, label="top-1 (%)")
    ax.set_title(f"Top-1 per model and category ({rep['protocol']})", fontsize=10)
    return _save(fig, path)


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    save(fig, path)
    return path.name


def write(rep: dict, out: str | Path) -> Path:
    with files(out, "gensets report recognition") as staged:
        return _write(rep, staged)


def _write(rep: dict, staged) -> Path:
    figures = _plots(rep, staged)
    md = [f"# Recognition report: {rep['dataset']}", "", *random_weights_note(rep.get("random_weights") or ()),
          f"Revision `{rep['revision']}`, protocol `{rep['protocol']}` ({rep['protocol_rule']}), runs at "
          f"`{rep.get('precision', 'fp32')}`; accuracies in %. "
          f"{rep['averages']}. Per-image detail: `gensets query` over `predictions`.", "",
          "## Per model", "",
          _md_table(rep["per_model"], ["model", "config", "n", "categories", "top1", "top5", "top1_images",
                                       "top5_images"]), "",
          "## Published numbers (Borji 2022)", "", *_published(rep),
          "## Per category", "",
          "`all_fail_topK` / `all_succeed_topK`: the fraction of the category's images that every model gets wrong "
          "/ right at top-K.", "",
          _md_table(rep["per_category"], ["category", "images", "best_model", "best_top1", "all_fail_top1",
                                          "all_succeed_top1", "all_fail_top5", "all_succeed_top5", "models"]), "",
          "## Per model and category, top-1", "", *_matrix(rep, "top1"),
          "## Per model and category, top-5", "", *_matrix(rep, "top5")]
    md += [f"![{f}]({f})" for f in figures]
    staged.write("report.json", json.dumps(rep, indent=1, sort_keys=True) + "\n")
    return staged.write("report.md", "\n".join(md) + "\n")


@REPORTS.register("recognition")
class Recognition(Report):
    help = "Borji-style recognition report from a results database"
    description = ("Per-model top-1/top-5 (mean over categories, and over images), the best model per category, "
                   "the fraction of images all models fail / all succeed per category at top-1 and top-5, the "
                   "per-model x per-category table and Borji (2022)'s published numbers, as markdown, JSON and "
                   "PNG plots.")

    def add_arguments(self, parser):
        parser.add_argument("--db", required=True, help="the results database of `gensets eval`")
        parser.add_argument("--dataset", help="the dataset as recorded in runs (default: the only one)")
        parser.add_argument("--protocol", default="wordset",
                            help="which protocol's runs (default: wordset, the paper's rule; or wordset-plural, "
                            "wordset-lemmas, wordset-gensets)")
        parser.add_argument("--revision", help="the dataset revision (build fingerprint) as recorded in runs "
                            "(default: the one scored last)")
        add_precision(parser, "which runs")
        parser.add_argument("--out", "--output", default="out/report-recognition",
                            help="folder for report.md, report.json and figures")

    def run(self, args):
        path = write(compute(args.db, args.dataset, args.protocol, args.revision, args.precision), args.out)
        print(f"{path} (+ report.json and figures in {path.parent})")
        return 0
