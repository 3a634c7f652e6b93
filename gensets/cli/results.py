"""gensets leaderboard, report, query: what a results database holds, as tables, reports and SQL."""

from __future__ import annotations

import json
import sys

from ..config import positive_int, seconds
from ..db import interruptible
from ..errors import GensetsError
from ..evaluation import leaderboard, store
from ..output import claimable
from ..registry import REPORTS
from ..workspace import refuse_own_file
from .common import emit, log, print_rows


def add_parser(sub) -> None:
    lb = sub.add_parser("leaderboard", help="the leaderboard of a results database; with --models, score a model "
                        "list on datasets first and write it as files",
                        description="Print the leaderboard of a results database (gensets eval). With --models LIST "
                        "--dataset D [--dataset D2 ...] --out DIR: first score every model on every dataset (runs "
                        "the database holds complete are skipped: a resume), then write DIR/leaderboard.md, .html, "
                        ".parquet and .csv, one row per run with top-1's 95%% interval, datasets named without local "
                        "paths and the dataset's surrogate models marked.")
    lb.add_argument("--db", required=True)
    lb.add_argument("--dataset", action="append", help="the runs of this dataset only; with --models: a dataset to "
                    "score (a workspace, a folder, a hub id; NAME=DATASET names it in the files), repeatable")
    lb.add_argument("--models", metavar="LIST", help="a model list: a YAML file (models: [{spec, protocol, ...}]), "
                    "a shipped one (imagenet-d, smoke) or specs separated by commas")
    lb.add_argument("--out", metavar="DIR", help="with --models: the folder of the leaderboard's files")
    lb.add_argument("--batch-size", type=positive_int, default=32, help="with --models (default 32)")
    lb.add_argument("--limit", type=positive_int, help="with --models: only the first N images of each split")
    lb.add_argument("--allow-pickle", action="store_true", help="with --models: allow pickle weights (unsafe)")
    lb.add_argument("--quiet", action="store_true", help="with --models: no progress bar")
    lb.add_argument("--eval-results", action="store_true", help="with --models: also each model's Hub .eval_results "
                    "entries (top-1 per config and split) under DIR/eval_results/<model>/, for the datasets named by "
                    "a Hub id (--dataset ORG/NAME=PATH names a local one)")
    lb.add_argument("--config")
    lb.add_argument("--split")
    lb.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    lb.add_argument("--json", action="store_true", help="the same as --format json")
    lb.add_argument("--pivot", action="store_true",
                    help="a grid: one row per model (and protocol), one column per config/split, --metric in the cells")
    lb.add_argument("--metric", help="with --pivot: the cell (default top1; e.g. top5, masked_top1)")
    lb.add_argument("--output", metavar="FILE", help="write the result to FILE (whole, or not at all) instead of "
                    "stdout; - is stdout")
    lb.add_argument("--percent", action="store_true", help="accuracies in percent, as the card and reproduce print "
                    "them (columns named 'NAME %%'); by default fractions (0-1), as --format json always has them")
    lb.set_defaults(func=_leaderboard)

    rp = sub.add_parser("report", help="reports of a builder's results: tables and plots")
    rpsub = rp.add_subparsers(dest="report", required=True, metavar="KIND")
    for kind, report in REPORTS.items():  # each report adds its own arguments (gensets.evaluation.reports)
        rk, r = rpsub.add_parser(kind, help=report.help, description=report.description), report()
        r.add_arguments(rk)
        rk.set_defaults(func=_report(r.run))

    q = sub.add_parser("query", help="run read-only SQL on a results database",
                       description="Tables: runs (key run_id), predictions and metrics (name, value, lo, hi; "
                       "each joins runs on run_id), the view results (runs JOIN metrics: dataset, config, split, "
                       "model, protocol, metric, value, ...) from gensets eval; scores, score_summaries from gensets "
                       "score. --schema lists every column and two example queries. The connection is read-only.")
    q.add_argument("--db", help="the results database (DuckDB file)")
    q.add_argument("sql", nargs="?", help="the query, e.g. \"SELECT model, config, metric, value FROM results\"")
    q.add_argument("--schema", action="store_true", help="print the tables (of --db, else the ones gensets "
                   "creates), their columns and types, how they join, and two example queries")
    q.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    q.add_argument("--json", action="store_true", help="the same as --format json")
    q.add_argument("--timeout", type=seconds, default=300.0, metavar="SECONDS",
                   help="stop the query after this many seconds, exit 1 (default 300; 0: no limit); Ctrl-C stops "
                   "it too, exit 130")
    q.add_argument("--output", metavar="FILE", help="write the result to FILE (whole, or not at all) instead of "
                   "stdout; - is stdout")
    q.set_defaults(func=_query)


def _leaderboard(a) -> int:
    if a.metric is not None and not a.pivot:  # accepted and ignored, it would look as if it had been honoured
        raise GensetsError(f"--metric {a.metric}: picks the cells of --pivot; add --pivot (without it, each metric "
                           "has its own column)")
    if a.models or a.out:
        return _leaderboard_run(a)
    if a.dataset and len(a.dataset) > 1:
        raise GensetsError("--dataset: one dataset to show (several are scored with --models LIST --out DIR)")
    a.dataset = a.dataset[0] if a.dataset else None
    con = store.connect(a.db, read_only=True)
    cols, rows = store.leaderboard(con, a.dataset, a.config, a.split)
    why = None if rows else store.unmatched(con, a.dataset, a.config, a.split)
    con.close()
    if why:
        raise GensetsError(f"{a.db}: {why}")
    if a.pivot:
        cols, rows = store.pivot(cols, rows, a.metric or "top1")
    if a.percent:  # every float of the leaderboard is a fraction (top1, its interval, top5, ...)
        if a.json or a.format == "json":
            raise GensetsError("--percent: the JSON keeps fractions (0-1); use --format table, markdown or csv")
        pct = [any(isinstance(r[i], float) for r in rows) for i in range(len(cols))]
        cols = [f"{c} %" if p else c for c, p in zip(cols, pct, strict=True)]
        rows = [[100 * v if isinstance(v, float) else v for v in r] for r in rows]
    print_rows(cols, rows, "json" if a.json else a.format, a.output, a.db)
    return 0


def _leaderboard_run(a) -> int:
    if not (a.models and a.out and a.dataset):
        raise GensetsError("--models LIST, --dataset D (one or more) and --out DIR go together: score LIST on D "
                           "and write DIR/leaderboard.{md,html,parquet,csv}")
    refuse_own_file(a.db, "--db")
    done = leaderboard.run(leaderboard.Plan(
        leaderboard.load_models(a.models), tuple(a.dataset), a.db, a.out, config=a.config, split=a.split,
        batch_size=a.batch_size, limit=a.limit, allow_pickle=a.allow_pickle, quiet=a.quiet,
        eval_results=a.eval_results), log=log(a.quiet))
    rows = done["rows"]
    print_rows(leaderboard.COLUMNS, [[r[c] for c in leaderboard.COLUMNS] for r in rows],
               "json" if a.json else a.format)
    print(f"{done['scored']} run(s) scored, {done['resumed']} already in {a.db}; "
          + ", ".join(str(f) for f in done["files"]), file=sys.stderr)
    return 0


def _report(run):
    """A report's run, after checking that its --out folder is none of a workspace's own files."""
    def checked(a) -> int:
        if getattr(a, "out", None):
            refuse_own_file(a.out, "--out")
            claimable(a.out, "gensets report")  # a user's folder refused before the report is computed
        return run(a)

    return checked


def _query(a) -> int:
    import duckdb  # heavy, third-party: here for its error class only

    if a.schema:
        return _schema(a)
    if not a.db or a.sql is None:
        raise GensetsError("gensets query: give --db FILE and SQL (or --schema: the tables and their columns)")
    con = store.query_connection(a.db)
    try:
        cols, rows = interruptible(con, a.sql, a.timeout)  # Ctrl-C and --timeout stop it
    except duckdb.Error as e:
        raise GensetsError(f"query failed: {store.query_error(con, a.sql, e)}") from None
    finally:
        con.close()
    print_rows(cols, rows, "json" if a.json else a.format, a.output, a.db)
    return 0


def _schema(a) -> int:
    """gensets query --schema: the tables (of --db, else the ones gensets creates), columns, keys, examples."""
    con = store.query_connection(a.db) if a.db else None
    try:
        tables = store.schema(con)
    finally:
        if con is not None:
            con.close()
    if a.json:
        text = json.dumps({"tables": tables, "examples": store.EXAMPLES}, indent=1) + "\n"
    else:
        text = "".join(f"{t['name']}: {t['about']}\n  " + ", ".join(f"{c['name']} {c['type']}" for c in t["columns"])
                       + "\n" for t in tables)
        text += "examples:\n" + "".join(f"  gensets query --db results.duckdb \"{q}\"\n" for q in store.EXAMPLES)
    emit(text, a.output, a.db)
    return 0
