"""Results in DuckDB: ``runs``, ``predictions`` (per sample) and ``metrics``.

A run is identified by (dataset, revision, config, split, model, protocol) and its ``autocast`` (``gensets eval
--precision``) when not fp32 (an autocast run is another run; fp32 runs keep their ids); writing it again replaces it, in one
transaction, so a killed evaluation leaves no half-written run. A run cut short by
``--limit`` (``sample_limit``) never replaces a complete one with fewer samples. Bulk rows go through Arrow
and every value is a parameter or an Arrow column: model specs and keys are plain data, never SQL.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..db import transaction
from ..errors import GensetsError, did_you_mean
from ..records import content_id

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY, dataset VARCHAR, dataset_revision VARCHAR, config VARCHAR,
    split VARCHAR, model VARCHAR, model_id VARCHAR, model_revision VARCHAR, protocol VARCHAR,
    label_space VARCHAR, n INTEGER, started TIMESTAMP, finished TIMESTAMP, seconds DOUBLE,
    images_per_second DOUBLE, versions JSON);
ALTER TABLE runs ADD COLUMN IF NOT EXISTS class_names JSON;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS sample_limit INTEGER;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS precision VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS execution JSON;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS settings VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS autocast VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS random_weights BOOLEAN;
CREATE TABLE IF NOT EXISTS predictions (
    run_id VARCHAR, key VARCHAR, target INTEGER, target_ids INTEGER[], top5 INTEGER[],
    scores DOUBLE[], correct1 BOOLEAN, correct5 BOOLEAN);
CREATE TABLE IF NOT EXISTS metrics (
    run_id VARCHAR, name VARCHAR, value DOUBLE, lo DOUBLE, hi DOUBLE);
CREATE TABLE IF NOT EXISTS answers (
    run_id VARCHAR, key VARCHAR, question VARCHAR, answer VARCHAR, flag VARCHAR);
"""
# the columns a later gensets added to runs, as a database written before them reads them (NULL): a read-only
# connection to such a database sees `runs` with them (a temporary view), so every query reads every database
LATER_RUN_COLUMNS = {"class_names": "JSON", "sample_limit": "INTEGER", "precision": "VARCHAR", "execution": "JSON",
                     "settings": "VARCHAR", "autocast": "VARCHAR", "random_weights": "BOOLEAN"}
# SQL over `runs r`: whether a run's numbers are noise (its models or its images from random-weight models); a
# run written before the column: its model spec's kind (tiny:, random:)
RANDOM_WEIGHTS = "coalesce(r.random_weights, r.model LIKE 'tiny:%' OR r.model LIKE 'random:%')"
# SQL over `runs r`: the --precision of `gensets eval` a run was scored at (autocast; `precision` is the dtype the
# model computed in, e.g. fp16 for a LLaVA model on CUDA); a run written before the column: its precision
AUTOCAST = "coalesce(r.autocast, r.precision, 'fp32')"


# A read-only connection reaches nothing but its own database (``gensets query`` runs anyone's SQL on a
# results file that may have been downloaded): DuckDB's own switches, locked so that SQL cannot undo them.
# No COPY ... TO, ATTACH, read_csv / read_text / glob of other files, INSTALL or LOAD of extensions.
SEALED = {"enable_external_access": False, "autoinstall_known_extensions": False,
          "autoload_known_extensions": False, "allow_community_extensions": False,
          "allow_unsigned_extensions": False, "lock_configuration": True}

# the tables of `gensets score` (gensets.evaluation.scoring)
SCORES_SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    dataset VARCHAR, revision VARCHAR, config VARCHAR, split VARCHAR, key VARCHAR, generator VARCHAR,
    metric VARCHAR, variant VARCHAR, models JSON, commits JSON, value DOUBLE);
CREATE TABLE IF NOT EXISTS score_summaries (
    dataset VARCHAR, revision VARCHAR, config VARCHAR, split VARCHAR, metric VARCHAR, name VARCHAR, level VARCHAR,
    variant VARCHAR, models JSON, commits JSON, reference VARCHAR, generators JSON, n INTEGER, value DOUBLE,
    lo DOUBLE, hi DOUBLE, higher_is_better BOOLEAN, details JSON, scored TIMESTAMP);
"""


# the table of `gensets audit --db` (gensets.audit): per audited image, its nearest neighbour per reference and
# method (``duplicate``: within the threshold, ``threshold`` the one applied), replaced per audited dataset
AUDIT_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    dataset VARCHAR, config VARCHAR, key VARCHAR, reference VARCHAR, reference_source VARCHAR, method VARCHAR,
    neighbour VARCHAR, hamming INTEGER, cosine DOUBLE, duplicate BOOLEAN, threshold DOUBLE, model VARCHAR,
    audited TIMESTAMP);
"""


def write_audit(con, dataset: str, rows: list[dict]) -> int:
    """Replace the audit rows of ``dataset`` (``gensets audit``'s target, as named) by ``rows``, in one
    transaction; the number written."""
    import pyarrow as pa

    table = pa.Table.from_pylist([{**r, "dataset": dataset} for r in rows], schema=pa.schema([
        ("dataset", pa.string()), ("config", pa.string()), ("key", pa.string()), ("reference", pa.string()),
        ("reference_source", pa.string()), ("method", pa.string()), ("neighbour", pa.string()),
        ("hamming", pa.int32()), ("cosine", pa.float64()), ("duplicate", pa.bool_()), ("threshold", pa.float64()),
        ("model", pa.string()), ("audited", pa.timestamp("us"))]))
    con.execute(AUDIT_SCHEMA)
    with transaction(con):
        con.execute("DELETE FROM audit WHERE dataset = ?", [dataset])
        con.register("_audit", table)
        try:
            con.execute("INSERT INTO audit SELECT * FROM _audit")
        finally:
            con.unregister("_audit")
    return len(rows)


def connect(path: str | Path, read_only: bool = False):
    """The results database; ``read_only``: a :data:`SEALED` connection (read-only, no file system, no
    extensions). A file that is not a DuckDB database, or one another process writes, is a GensetsError."""
    import duckdb

    if read_only and not Path(path).is_file():
        raise GensetsError(f"{path}: no results database")
    try:
        if read_only:
            return _with_later_columns(duckdb.connect(str(path), read_only=True, config=SEALED))
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(path))
    except duckdb.Error as e:  # not a DuckDB file, or another process holds its write lock
        why = str(e).splitlines()[0][:200]
        if "Could not set lock" in why:
            why = f"in use by another process that writes it, e.g. `gensets review serve` ({why})"
        raise GensetsError(f"{path}: cannot open the database: {why}") from None
    con.execute(SCHEMA)
    return con


def _with_later_columns(con):
    """``con`` where a ``runs`` table lacks :data:`LATER_RUN_COLUMNS` (an older database): a temporary view of it
    with them, NULL, shadowing it (the file is not changed)."""
    have = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' "
                                      "AND table_schema = 'main'").fetchall()}
    missing = [c for c in LATER_RUN_COLUMNS if c not in have]
    if have and missing:
        extra = ", ".join(f"NULL::{LATER_RUN_COLUMNS[c]} AS {c}" for c in missing)
        con.execute(f"CREATE TEMP VIEW runs AS SELECT *, {extra} FROM main.runs")
    return con


def run_id(dataset: str, revision: str | None, config: str, split: str, model: str, protocol: str,
           precision: str | None = None) -> str:
    extra = [precision] if precision not in (None, "fp32") else []
    return content_id([dataset, revision, config, split, model, protocol, *extra])


def write_run(con, run: dict, predictions: list[dict], metrics: list[dict], answers: list[dict] | None = None) -> str:
    """Replace the run with the same identity by this one, atomically.

    ``run["sample_limit"]``: the --limit that cut this run short (None: every sample). GensetsError
    when it would replace a complete run that has more samples. ``run["autocast"]``: ``gensets eval
    --precision`` (fp32, bf16, fp16; part of the run's identity when not fp32; None: ``run["precision"]``);
    ``run["precision"]``: the dtype the model computed in (a LLaVA model on CUDA: fp16; None: fp32);
    ``run["random_weights"]``: its numbers are noise (a model, or the images' generator, has random weights);
    ``run["execution"]``: how it ran (device, processes, workers, ...), which the results do not depend on.
    ``answers``: a VLM's answers, one ``{"key", "question", "answer", "flag"}`` per prediction row (the table
    ``answers``: its raw text and how it was counted: TRUE, FALSE, DOUBLE, TODO).
    """
    import pyarrow as pa

    autocast = run.get("autocast") or run.get("precision")
    rid = run_id(run["dataset"], run["dataset_revision"], run["config"], run["split"], run["model"],
                 run["protocol"], autocast)
    old = con.execute("SELECT n, sample_limit FROM runs WHERE run_id = ?", [rid]).fetchone()
    if old and old[1] is None and run.get("sample_limit") is not None and run["n"] < old[0]:
        raise GensetsError(
            f"{run['model']} on {run['dataset']} {run['config']}/{run['split']} ({run['protocol']}): "
            f"--limit {run['sample_limit']} ({run['n']} samples) would replace the complete run of {old[0]}; "
            "drop --limit or use another --db")
    run = {**run, "run_id": rid, "versions": json.dumps(run.get("versions") or {}, sort_keys=True),
           "class_names": json.dumps(run["class_names"]) if run.get("class_names") else None,
           "precision": run.get("precision") or "fp32", "autocast": autocast or "fp32",
           "execution": json.dumps(run["execution"], sort_keys=True) if run.get("execution") else None}
    cols = ["run_id", "dataset", "dataset_revision", "config", "split", "model", "model_id",
            "model_revision", "protocol", "label_space", "n", "started", "finished", "seconds",
            "images_per_second", "versions", "class_names", "sample_limit", "precision", "execution", "settings",
            "autocast", "random_weights"]
    preds = pa.Table.from_pylist([{**p, "run_id": rid} for p in predictions], schema=pa.schema([
        ("run_id", pa.string()), ("key", pa.string()), ("target", pa.int32()),
        ("target_ids", pa.list_(pa.int32())), ("top5", pa.list_(pa.int32())),
        ("scores", pa.list_(pa.float64())), ("correct1", pa.bool_()), ("correct5", pa.bool_())]))
    mets = pa.Table.from_pylist([{**m, "run_id": rid} for m in metrics], schema=pa.schema([
        ("run_id", pa.string()), ("name", pa.string()), ("value", pa.float64()), ("lo", pa.float64()),
        ("hi", pa.float64())]))
    said = pa.Table.from_pylist([{**a, "run_id": rid} for a in answers or ()], schema=pa.schema([
        ("run_id", pa.string()), ("key", pa.string()), ("question", pa.string()), ("answer", pa.string()),
        ("flag", pa.string())]))
    with transaction(con):
        for table in ("runs", "predictions", "metrics", "answers"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [rid])
        con.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [run.get(c) for c in cols])
        con.register("_preds", preds)
        con.execute("INSERT INTO predictions SELECT * FROM _preds")
        con.unregister("_preds")
        con.register("_mets", mets)
        con.execute("INSERT INTO metrics SELECT * FROM _mets")
        con.unregister("_mets")
        con.register("_said", said)
        con.execute("INSERT INTO answers SELECT * FROM _said")
        con.unregister("_said")
    return rid


def finished_run(con, rid: str, settings: str) -> dict | None:
    """The complete run ``rid`` (every sample: no ``sample_limit``) made with the same ``settings`` (what changes
    its results beyond its identity: templates, the model's revision, ...), as ``evaluate`` returns a run (its
    metrics and intervals read back), or None: ``gensets eval`` skips such a run unless --force."""
    row = con.execute("SELECT n, protocol FROM runs WHERE run_id = ? AND sample_limit IS NULL AND settings = ?",
                      [rid, settings]).fetchone()
    if row is None:
        return None
    mets = con.execute("SELECT name, value, lo, hi FROM metrics WHERE run_id = ? ORDER BY rowid", [rid]).fetchall()
    return {"n": row[0], "metrics": {m[0]: m[1] for m in mets},
            "intervals": {m[0]: [m[2], m[3]] for m in mets if m[2] is not None}}


LEADERBOARD = f"""
SELECT r.dataset, r.dataset_revision AS revision, r.config, r.split, r.model,
       -- a run under autocast (or a model in half precision) names its dtype beside its protocol: 'imagenet [bf16]'
       CASE WHEN coalesce(r.precision, 'fp32') = 'fp32' THEN r.protocol
            ELSE r.protocol || ' [' || r.precision || ']' END AS protocol, r.n,
       max(m.value) FILTER (WHERE m.name = 'top1') AS top1,
       max(m.lo) FILTER (WHERE m.name = 'top1') AS top1_lo,
       max(m.hi) FILTER (WHERE m.name = 'top1') AS top1_hi,
       max(m.value) FILTER (WHERE m.name = 'top5') AS top5,
       max(m.value) FILTER (WHERE m.name = 'mean_per_class') AS mean_per_class,
       max(m.value) FILTER (WHERE m.name = 'masked_top1') AS masked_top1,
       -- two-way (the authors' TRUE / (TRUE + FALSE)): top-1 counts the answers naming one option only
       CASE WHEN split_part(r.protocol, ' (', 1) = 'two-way'
            THEN round(r.n * (1 - coalesce(max(m.value) FILTER (WHERE m.name = 'unparseable'), 0)))::INTEGER
            ELSE r.n END AS counted,
       max(m.value) FILTER (WHERE m.name = 'two_way_all') AS two_way_all,
       {RANDOM_WEIGHTS} AS random_weights
FROM runs r JOIN metrics m USING (run_id)
WHERE (? IS NULL OR r.dataset = ?) AND (? IS NULL OR r.config = ?) AND (? IS NULL OR r.split = ?)
GROUP BY r.run_id, r.dataset, r.dataset_revision, r.config, r.split, r.model, r.protocol, r.precision, r.n,
         r.random_weights
    -- runs never merge: two revisions of a dataset are two rows
ORDER BY r.dataset, r.config, r.split, top1 DESC, r.model, r.dataset_revision
"""


def leaderboard(con, dataset: str | None = None, config: str | None = None, split: str | None = None):
    """(columns, rows) of the leaderboard, best top-1 first within each (dataset, config, split): top-1 with its
    interval, top-5, ...; ``counted`` the answers top-1 counts of the run's ``n`` (two-way leaves out those naming
    both options or neither; ``two_way_all`` counts them wrong) and ``random_weights`` (its numbers are noise)."""
    cur = con.execute(LEADERBOARD, [dataset, dataset, config, config, split, split])
    return [d[0] for d in cur.description], cur.fetchall()


def unmatched(con, dataset: str | None = None, config: str | None = None, split: str | None = None) -> str | None:
    """Why :func:`leaderboard` with these filters has no row: the first filter that no run matches, with the
    values the runs have (None: every filter matches, or none was given)."""
    where, args = "TRUE", []
    for column, flag, value in (("dataset", "--dataset", dataset), ("config", "--config", config),
                                ("split", "--split", split)):
        if value is None:
            continue
        have = [v for (v,) in con.execute(f"SELECT DISTINCT {column} FROM runs WHERE {where} ORDER BY 1", args).fetchall()]
        if value not in have:
            listed = ", ".join(map(str, have[:20])) + (", ..." if len(have) > 20 else "") or "none"
            return f"{flag} {value!r}: no run has it ({column}s here: {listed}){did_you_mean(value, have)}"
        where, args = f"{where} AND {column} = ?", [*args, value]
    return None


def pivot(cols: list[str], rows: list, metric: str = "top1") -> tuple[list[str], list]:
    """The long leaderboard as a grid: one row per (model, protocol), one column per dataset config/split,
    ``metric`` in each cell (None where that model has no run), plus the mean over the cells it has. Rows in
    order of that mean, best first."""
    if metric not in cols:
        raise GensetsError(f"--metric {metric!r}: not a leaderboard column (one of {', '.join(cols[7:])})")
    at = {c: i for i, c in enumerate(cols)}
    several = len({r[at["dataset"]] for r in rows}) > 1
    columns: list[str] = []
    cells: dict[tuple, dict] = {}
    for r in rows:
        col = (f"{r[at['dataset']]}:" if several else "") + f"{r[at['config']]}/{r[at['split']]}"
        if col not in columns:
            columns.append(col)
        cells.setdefault((r[at["model"]], r[at["protocol"]]), {})[col] = r[at[metric]]
    out = []
    for (model, protocol), v in cells.items():
        have = [x for x in v.values() if x is not None]
        out.append([model, protocol, *(v.get(c) for c in columns), sum(have) / len(have) if have else None])
    out.sort(key=lambda r: (r[-1] is None, -(r[-1] or 0), r[0]))
    return ["model", "protocol", *columns, f"mean {metric}"], out


def build_leaderboard(db, configs, build_id: str) -> tuple[list[str], list]:
    """The leaderboard rows of a results database (gensets eval) for these configs of this build.

    A run is of this build when its dataset revision is the build's fingerprint, which ``gensets eval``
    records for a workspace, its ``dataset/`` folder or a copy of it (manifest.json's ``build``).
    """
    con = connect(db, read_only=True)
    try:
        # a temporary `runs` of this build's runs only shadows the database's for the leaderboard query
        con.execute("CREATE TEMP TABLE build_runs AS SELECT * FROM runs "
                    "WHERE dataset_revision = ? AND list_contains(?, config)", [build_id, list(configs)])
        con.execute("CREATE OR REPLACE TEMP VIEW runs AS SELECT * FROM build_runs")
        return leaderboard(con)
    finally:
        con.close()


# `gensets query`: what each table holds and how it joins (--schema), and the `results` view a query may use
TABLES = {
    "runs": "one row per evaluation run (gensets eval); key: run_id",
    "predictions": "one row per image of a run; joins runs on run_id",
    "metrics": "one row per metric of a run (name: top1, top5, ...; lo, hi: its interval); joins runs on run_id",
    "answers": "one row per VLM answer of a run (vqa, two-way): its question, raw text and flag (TRUE, FALSE, DOUBLE, "
               "TODO: how top-1 counted it); joins runs on run_id, predictions on (run_id, key)",
    "results": "a view of runs JOIN metrics: one row per (run, metric), the metric's name as `metric`",
    "scores": "one row per (image, metric) of gensets score; key: dataset, revision, config, split, key, metric",
    "score_summaries": "one row per (config, split, metric) of gensets score: value, lo, hi, n",
}
RESULTS_VIEW = f"""
CREATE TEMP VIEW results AS
SELECT r.dataset, r.dataset_revision AS revision, r.config, r.split, r.model, r.protocol,
       coalesce(r.precision, 'fp32') AS precision, coalesce(r.autocast, r.precision, 'fp32') AS autocast,
       {RANDOM_WEIGHTS} AS random_weights, r.n, m.name AS metric, m.value, m.lo, m.hi, r.run_id
FROM runs r JOIN metrics m USING (run_id)
"""
EXAMPLES = [
    "SELECT model, config, metric, value FROM results WHERE metric = 'top1' ORDER BY config, value DESC",
    "SELECT r.model, r.config, avg(p.correct1::INT) AS top1 FROM predictions p JOIN runs r USING (run_id) "
    "GROUP BY ALL ORDER BY ALL",
]


def query_connection(db):
    """A sealed read-only connection to ``db`` (:func:`connect`) with the ``results`` view, where it has runs and
    metrics and no table of that name (a temporary view: the file is not changed)."""
    con = connect(db, read_only=True)
    have = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if {"runs", "metrics"} <= have and "results" not in have:
        con.execute(RESULTS_VIEW)
    return con


def schema(con=None) -> list[dict]:
    """``[{name, about, columns: [{name, type}]}]`` of the tables ``con`` holds (None: those gensets eval and
    gensets score create), in :data:`TABLES` order."""
    import duckdb

    if con is None:
        con = duckdb.connect(":memory:")
        con.execute(SCHEMA + SCORES_SCHEMA)
        con.execute(RESULTS_VIEW)
    rows = con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                       "ORDER BY table_name, ordinal_position").fetchall()
    tables: dict[str, list] = {}
    for t, c, ty in rows:
        tables.setdefault(t, []).append({"name": c, "type": ty})
    order = [t for t in TABLES if t in tables] + sorted(set(tables) - set(TABLES))
    return [{"name": t, "about": TABLES.get(t, ""), "columns": tables[t]} for t in order]


def query_error(con, sql: str, error: Exception) -> str:
    """DuckDB's error of ``sql`` in one line; for an unknown column or table, the columns of the tables the query
    names (else every table's names) and where the whole schema is."""
    import re

    first = str(error).splitlines()[0]
    if not first.startswith(("Binder Error", "Catalog Error")):
        return first
    tables = {t["name"]: t["columns"] for t in schema(con)}
    named = [t for t in tables if re.search(rf"\b{re.escape(t)}\b", sql, re.IGNORECASE)]
    if not named:
        return f"{first} (tables: {', '.join(tables)}; gensets query --schema)"
    cols = "; ".join(f"{t}: {', '.join(c['name'] for c in tables[t])}" for t in named)
    return f"{first} ({cols}; gensets query --schema)"
