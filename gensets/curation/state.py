"""state.duckdb: samples, surrogate predictions, curation and review decisions of one workspace.

One writer at a time (the build's rank 0, the review commands); readers open it read-only.
Bulk inserts go through Arrow; every value is passed as a parameter or an Arrow column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ..db import transaction

BELOW_QUALITY = "below-quality"  # the review status of a kept image below a quality: threshold

SCHEMA = """
CREATE TABLE IF NOT EXISTS units (
    unit VARCHAR PRIMARY KEY, shard VARCHAR, sha256 VARCHAR, n INTEGER);
CREATE TABLE IF NOT EXISTS samples (
    key VARCHAR PRIMARY KEY, unit VARCHAR, shard VARCHAR, config VARCHAR, label VARCHAR,
    label_index INTEGER, nuisance VARCHAR, prompt VARCHAR, seed BIGINT,
    surrogate_failures INTEGER, kept BOOLEAN, meta JSON);
CREATE TABLE IF NOT EXISTS surrogate_predictions (
    key VARCHAR, model VARCHAR, rank INTEGER, class_index INTEGER, score DOUBLE, hit BOOLEAN);
CREATE TABLE IF NOT EXISTS reviews (
    key VARCHAR PRIMARY KEY, status VARCHAR, label VARCHAR, reviewer VARCHAR, time TIMESTAMP,
    note VARCHAR);
CREATE TABLE IF NOT EXISTS skipped (
    unit VARCHAR, path VARCHAR, reason VARCHAR);
CREATE TABLE IF NOT EXISTS review_log (
    key VARCHAR, status VARCHAR, label VARCHAR, reviewer VARCHAR, time TIMESTAMP, note VARCHAR);
CREATE TABLE IF NOT EXISTS settings (
    name VARCHAR PRIMARY KEY, value VARCHAR);
"""


def connect(path: Path, read_only: bool = False):
    import duckdb

    try:
        if read_only:
            return duckdb.connect(str(path), read_only=True)
        con = duckdb.connect(str(path))
    except duckdb.IOException as e:  # another process is the writer (e.g. `gensets review serve`)
        from ..errors import GensetsError

        raise GensetsError(f"{path}: in use by another process ({str(e).splitlines()[0][:200]}); "
                           "stop it (e.g. `gensets review serve`) and try again") from None
    con.execute(SCHEMA)
    return con


def setting(con, name: str, default: str | None = None) -> str | None:
    """A workspace setting (e.g. ``review_mode``); ``default`` when unset, or in a database from before
    the ``settings`` table opened read-only."""
    import duckdb

    try:
        row = con.execute("SELECT value FROM settings WHERE name = ?", [name]).fetchone()
    except duckdb.CatalogException:
        return default
    return row[0] if row else default


def set_setting(con, name: str, value: str) -> None:
    con.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", [name, value])


def ingest(con, manifest_rows: Iterable[dict], read_samples, config_of, initial_status: str = "pending") -> int:
    """Load the samples of every committed unit not yet in the database, in one transaction.

    ``read_samples(shard)`` yields the Sample records of a shard; ``config_of(meta)`` names the
    published config a sample belongs to. Kept samples enter the review queue as ``initial_status``
    (``pending``; ``accepted`` for builders without a human review step).
    Returns the number of samples added.
    """
    import pyarrow as pa

    have = {r[0] for r in con.execute("SELECT unit FROM units").fetchall()}
    todo = {}
    for row in manifest_rows:  # the last row of a unit wins (a re-written identical shard)
        if row["unit"] not in have:
            todo[row["unit"]] = row
    if not todo:
        return 0
    units, samples, preds, reviews, skipped = [], [], [], [], []
    for unit, row in sorted(todo.items()):
        units.append({"unit": unit, "shard": row["shard"], "sha256": row["sha256"], "n": row["n"]})
        skipped += [{"unit": unit, "path": r["path"], "reason": r["reason"]} for r in row.get("skipped") or []]
        for s in read_samples(row["shard"]):
            m = s.meta
            samples.append({
                "key": s.key, "unit": unit, "shard": row["shard"], "config": config_of(m),
                "label": m.get("label"), "label_index": s.cls, "nuisance": m.get("nuisance"),
                "prompt": m.get("prompt"), "seed": m.get("seed"),
                "surrogate_failures": m.get("surrogate_failures"), "kept": bool(m.get("kept")),
                "meta": json.dumps(m, sort_keys=True),
            })
            for p in m.get("surrogates") or []:
                for rank, (idx, score) in enumerate(zip(p["top5"], p["scores"], strict=True)):
                    preds.append({"key": s.key, "model": p["model"], "rank": rank + 1,
                                  "class_index": idx, "score": score, "hit": p["hit"]})
            if m.get("kept"):  # below a quality: threshold: out of the queue (a reviewer may still accept it)
                status = BELOW_QUALITY if (m.get("quality") or {}).get("passed") is False else initial_status
                reviews.append({"key": s.key, "status": status, "label": m.get("label"),
                                "reviewer": None, "time": None, "note": None})
    tables = {
        "units": pa.Table.from_pylist(units),
        "samples": pa.Table.from_pylist(samples, schema=pa.schema([
            ("key", pa.string()), ("unit", pa.string()), ("shard", pa.string()), ("config", pa.string()),
            ("label", pa.string()), ("label_index", pa.int32()), ("nuisance", pa.string()),
            ("prompt", pa.string()), ("seed", pa.int64()), ("surrogate_failures", pa.int32()),
            ("kept", pa.bool_()), ("meta", pa.string())])),
        "surrogate_predictions": pa.Table.from_pylist(preds, schema=pa.schema([
            ("key", pa.string()), ("model", pa.string()), ("rank", pa.int32()),
            ("class_index", pa.int32()), ("score", pa.float64()), ("hit", pa.bool_())])),
        "reviews": pa.Table.from_pylist(reviews, schema=pa.schema([
            ("key", pa.string()), ("status", pa.string()), ("label", pa.string()),
            ("reviewer", pa.string()), ("time", pa.timestamp("us")), ("note", pa.string())])),
        "skipped": pa.Table.from_pylist(skipped, schema=pa.schema([
            ("unit", pa.string()), ("path", pa.string()), ("reason", pa.string())])),
    }
    with transaction(con):
        for name, table in tables.items():
            if table.num_rows:
                con.register("_incoming", table)
                # a sample re-generated by an identical unit replaces its row; review decisions stay
                if name in ("samples", "reviews"):
                    con.execute(f"INSERT OR IGNORE INTO {name} SELECT * FROM _incoming")
                elif name == "surrogate_predictions":
                    con.execute("DELETE FROM surrogate_predictions WHERE key IN (SELECT key FROM _incoming)")
                    con.execute(f"INSERT INTO {name} SELECT * FROM _incoming")
                else:
                    con.execute(f"INSERT INTO {name} SELECT * FROM _incoming")
                con.unregister("_incoming")
    return len(samples)


def funnel(con, statuses: dict[str, str] | None = None, quality: bool = False) -> dict[str, dict[str, int]]:
    """Per config: generated -> failed the surrogates (kept) -> accepted / pending / rejected.

    ``statuses`` (key -> status) replaces the status in ``reviews`` of those keys (double review's
    verdicts); an image still ``disputed`` or ``held`` counts as pending. ``quality``: the build has quality:
    thresholds; each config also counts its kept images ``below_quality`` (never queued, not accepted).
    """
    import pyarrow as pa

    con.register("_status", pa.table({"key": pa.array(list(statuses or {}), pa.string()),
                                      "status": pa.array(list((statuses or {}).values()), pa.string())}))
    try:
        rows = con.execute("""
            SELECT s.config, count(*) AS generated, count(*) FILTER (WHERE s.kept) AS kept,
                   count(*) FILTER (WHERE r.status IN ('accepted', 'relabeled')) AS accepted,
                   count(*) FILTER (WHERE r.status IN ('pending', 'disputed', 'held')) AS pending,
                   count(*) FILTER (WHERE r.status = 'rejected') AS rejected,
                   count(*) FILTER (WHERE r.status = 'below-quality') AS below_quality
            FROM samples s
            LEFT JOIN (SELECT key, coalesce(v.status, r.status) AS status
                       FROM reviews r LEFT JOIN _status v USING (key)) r USING (key)
            GROUP BY s.config ORDER BY s.config""").fetchall()
    finally:
        con.unregister("_status")
    names = ("generated", "kept", "accepted", "pending", "rejected", "below_quality")
    return {r[0]: dict(zip(names, r[1:] if quality else r[1:-1], strict=False)) for r in rows}
