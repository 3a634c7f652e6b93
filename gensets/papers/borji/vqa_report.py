"""``gensets report vqa``: binary VQA accuracy per model (protocol ``vqa``, Borji 2022), SQL over the results
database, beside Borji's published number (OFA on the paper's 241 questions; gensets/data/borji/published.json).

Per model (and config): ``accuracy``, the fraction of questions answered right (the protocol's top-1, the
default); ``accuracy_images``, each image's fraction of right answers, then the mean over images (a named
second reading: the abstract's 77.3% is no whole count out of 241, so the paper may average otherwise);
``yes_accuracy`` / ``no_accuracy`` on the questions whose answer is yes / no. One dataset revision, by
default the one scored last. Every answer's raw text is in the results database (``answers``).

Beside every model: OFA's 77.27% (Sec. 3), compared by :func:`gensets.compare.compare`. gensets runs no OFA (no
transformers port), so every model is "other model"; the paper's averaging is unknown (77.27% is no whole count
out of 241); and only the paper's own images are its population (``--paper-images``: the run set is Borji's 50
images and 241 questions; ``reproduce borji-vqa`` says so from its config).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...cards.markdown import table
from ...compare import Measured, compare
from ...errors import GensetsError
from ...evaluation import store
from ...evaluation.reports.base import Report, add_precision, pick_run_set, random_weights_note, rows
from ...output import files
from ...registry import REPORTS
from ...sources.packaged import borji_published

PROTOCOL = "vqa"
PER_MODEL = f"""
WITH q AS (
    SELECT r.model, r.config, r.protocol, {store.RANDOM_WEIGHTS} AS random_weights, regexp_replace(p.key, '/q[0-9]+$', '') AS image, p.target, p.correct1
    FROM predictions p JOIN runs r USING (run_id)
    WHERE r.dataset = ? AND split_part(r.protocol, ' (', 1) = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
      AND coalesce(r.autocast, r.precision, 'fp32') = ?),
per_image AS (SELECT model, config, image, avg(correct1::INT) AS accuracy FROM q GROUP BY ALL)
SELECT q.model, q.config, any_value(q.protocol) AS protocol, bool_or(q.random_weights) AS random_weights,
       count(*)::INT AS questions, count(DISTINCT q.image)::INT AS images,
       avg(q.correct1::INT) AS accuracy,
       (SELECT avg(i.accuracy) FROM per_image i WHERE i.model = q.model AND i.config = q.config) AS accuracy_images,
       avg(q.correct1::INT) FILTER (WHERE q.target = 1) AS yes_accuracy,
       avg(q.correct1::INT) FILTER (WHERE q.target = 0) AS no_accuracy
FROM q GROUP BY ALL ORDER BY q.config, accuracy DESC, q.model
"""
PER_IMAGE = """
SELECT r.model, r.config, regexp_replace(p.key, '/q[0-9]+$', '') AS image, sum(p.correct1::INT)::INT AS right,
       count(*)::INT AS questions
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset = ? AND split_part(r.protocol, ' (', 1) = ? AND r.dataset_revision IS NOT DISTINCT FROM ?
  AND coalesce(r.autocast, r.precision, 'fp32') = ?
GROUP BY ALL ORDER BY r.model, r.config, image
"""
INTERVAL = ("95% percentile bootstrap over images (1000 resamples, seed 0): images resampled with all their "
            "questions, the statistic the fraction of questions answered right (gensets.metrics.bootstrap_ci)")
COLUMNS = ("`accuracy`: the fraction of questions answered right (the default); `accuracy_images`: each image's "
           "fraction, then the mean over images; `yes_accuracy` / `no_accuracy`: on the questions answered yes / no")


def compute(db: str | Path, dataset: str | None = None, revision: str | None = None,
            precision: str = "fp32", paper_images: bool = False) -> dict:
    """The report over one dataset revision (default: the one scored last), of the runs at ``precision``;
    ``paper_images``: the run set is the paper's own images and questions (else other images)."""
    con = store.connect(db, read_only=True)
    try:
        dataset, revision = pick_run_set(con, db, dataset, PROTOCOL, revision)
        per_model = rows(con, PER_MODEL, [dataset, PROTOCOL, revision, precision])
        per_image = rows(con, PER_IMAGE, [dataset, PROTOCOL, revision, precision])
    finally:
        con.close()
    if not per_model:
        raise GensetsError(f"{db}: no {precision} runs of dataset {dataset!r} with protocol {PROTOCOL!r} "
                           "(another --precision?)")
    import numpy as np

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    for r in per_model:  # accuracy_interval: INTERVAL
        counts = np.array([[i["right"], i["questions"]] for i in per_image
                           if (i["model"], i["config"]) == (r["model"], r["config"])], float)
        r["accuracy_interval"] = list(M.bootstrap_ci(counts, lambda c: c[:, 0].sum() / c[:, 1].sum()))
    published = borji_published()
    population = "paper-images" if paper_images else "other"
    return {"dataset": dataset, "revision": revision, "protocol": PROTOCOL, "precision": precision, "columns": COLUMNS,
            "interval": INTERVAL, "population": population,
            "random_weights": sorted({r["model"] for r in per_model if r["random_weights"]}),
            "per_model": per_model,
            "published": {"source": published["paper"], "url": published["url"], "checked": published["checked"],
                          "numbers": published["vqa"], "rows": compared(published["vqa"], per_model, population)}}


def compared(numbers: list[dict], per_model: list[dict], population: str) -> list[dict]:
    """Each published number beside every model's accuracy (each config), compared by
    :func:`gensets.compare.compare`: OFA is compared with OFA only."""
    out = []
    for p in numbers:
        for r in per_model:
            c = compare(p, Measured(r["accuracy"], "vqa-accuracy", "pooled-questions", population,
                                    protocol=PROTOCOL, model=r["model"], random_weights=r["random_weights"],
                                    n=r["questions"]))
            out.append({"what": p["what"], "published": p["value"], "digits": p["precision"].get("digits"),
                        "questions": p["n"], "images": p["images"],
                        "model": r["model"], "config": r["config"], "gensets": r["accuracy"],
                        "gensets_images": r["accuracy_images"], "interval": r.get("accuracy_interval"),
                        "difference": c.difference, "random_weights": r["random_weights"], "comparison": c.as_dict()})
    return out


def _interval(ci) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _pct(v) -> str:
    return f"{100 * v:.1f}" if isinstance(v, float) else "-" if v is None else str(v)


def write(rep: dict, out: str | Path) -> Path:
    cols = ["model", "protocol", "config", "questions", "images", "accuracy", "accuracy_images", "yes_accuracy",
            "no_accuracy"]
    pub = rep["published"]
    published = [[r["what"], f"{r['questions']} questions, {r['images']} images",
                  f"{100 * r['published']:.{r.get('digits') or 1}f}",
                  f"`{r['model']}` on `{r['config']}`" + (" (random weights)" if r["random_weights"] else ""),
                  f"{_pct(r['gensets'])} / {_pct(r['gensets_images'])}", _interval(r["interval"]),
                  "-" if r["difference"] is None else f"{100 * r['difference']:+.1f}", r["comparison"]["text"]]
                 for r in pub["rows"]]
    md = [f"# VQA report: {rep['dataset']}", "", *random_weights_note(rep.get("random_weights") or ()),
          f"Revision `{rep['revision']}`, protocol `{rep['protocol']}` (binary questions, answers normalised to "
          f"yes / no), runs at `{rep.get('precision', 'fp32')}`; accuracies in %. {rep['columns']}. Every answer's "
          "text: `gensets query` over `answers`.", "",
          "## Per model", "", table(cols, [[r[c] for c in cols] for r in rep["per_model"]], _pct), "",
          "## Published numbers (Borji 2022)", "",
          "Every model beside the paper's number; difference = accuracy - published, in points; comparison: the test "
          "that fits (README, \"How gensets compares with a paper\"): OFA only with OFA, the paper's images only.", "",
          table(["published", "set", "Borji 2022", "gensets model", "gensets: accuracy / accuracy_images",
                 "gensets 95% interval (images)", "difference", "comparison"], published), "",
          f"Interval: {rep.get('interval', INTERVAL)} (gensets' own uncertainty, which decides nothing).", "",
          f"Source: {pub['source']} ({pub['url']}). {pub['checked']}"]
    with files(out, "gensets report vqa") as staged:
        staged.write("report.json", json.dumps(rep, indent=1, sort_keys=True) + "\n")
        return staged.write("report.md", "\n".join(md) + "\n")


@REPORTS.register("vqa")
class VQA(Report):
    help = "Borji-style binary VQA report from a results database"
    description = ("Per-model accuracy over questions and over images, on yes and on no questions, beside Borji "
                   "(2022)'s published OFA accuracy, as markdown and JSON.")

    def add_arguments(self, parser):
        parser.add_argument("--db", required=True, help="the results database of `gensets eval --protocol vqa`")
        parser.add_argument("--dataset", help="the dataset as recorded in runs (default: the only one)")
        parser.add_argument("--revision", help="the dataset revision as recorded in runs (default: the one "
                            "scored last)")
        add_precision(parser, "which runs")
        parser.add_argument("--paper-images", action="store_true",
                            help="the run set is Borji's own 50 images and 241 questions (configs/vqa.yaml's): the "
                            "paper's population (without it: other images, never compared)")
        parser.add_argument("--out", "--output", default="out/report-vqa", help="folder for report.md and report.json")

    def run(self, args):
        path = write(compute(args.db, args.dataset, args.revision, args.precision, args.paper_images), args.out)
        print(f"{path} (+ report.json in {path.parent})")
        return 0
