"""state.duckdb: samples, surrogate predictions, curation and review decisions of one workspace.

DuckDB lets one process at a time open the file (a writer excludes readers of other processes too), so every
process opens it for the moment it needs and closes it: :func:`connect` waits for another holder (a review
server's request, a command, finalize's :func:`snapshot`) and says so in one line naming it.
Bulk inserts go through Arrow; every value is passed as a parameter or an Arrow column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .. import notices
from ..db import transaction
from ..errors import Busy, DataError
from ..images import IMAGE_EXTS
from ..shards import iter_index
from . import shared

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
CREATE TABLE IF NOT EXISTS images (
    key VARCHAR PRIMARY KEY, shard VARCHAR, byte_offset BIGINT, nbytes BIGINT, ext VARCHAR);
CREATE TABLE IF NOT EXISTS reviewer_aliases (
    alias VARCHAR PRIMARY KEY, reviewer VARCHAR, time TIMESTAMP);
CREATE TABLE IF NOT EXISTS reviewer_tokens (
    token_sha256 VARCHAR PRIMARY KEY, reviewer VARCHAR, created TIMESTAMP, revoked TIMESTAMP);
CREATE TABLE IF NOT EXISTS label_studio_annotations (
    project VARCHAR, annotation VARCHAR, key VARCHAR, reviewer VARCHAR, updated_at TIMESTAMP,
    decided TIMESTAMP, withdrawn BOOLEAN, imported TIMESTAMP);
CREATE TABLE IF NOT EXISTS label_studio_exports (
    export VARCHAR PRIMARY KEY, made TIMESTAMP, tasks BIGINT, images VARCHAR, project VARCHAR, server VARCHAR);
CREATE TABLE IF NOT EXISTS label_studio_tasks (
    project VARCHAR, task VARCHAR, key VARCHAR, created VARCHAR);
CREATE TABLE IF NOT EXISTS review_undo (
    undo_seq BIGINT, undone_seq BIGINT, key VARCHAR, reviewer VARCHAR, time TIMESTAMP);
CREATE TABLE IF NOT EXISTS review_leases (
    key VARCHAR, reviewer VARCHAR, until TIMESTAMP);
"""
# reviewer_tokens: the review page's invitations (gensets.curation.reviewers): the sha256 of each secret link's
# token, never the token, with whose it is, when it was made and revoked.
# reviewer_aliases: a name decisions were logged under before the reviewer's name was known (a Label Studio
# user id, ``label-studio:1``) -> that name; every reading of the log (queue.LATEST) goes through it, so one person
# is one reviewer whatever form of their id an import carried. label_studio_annotations: append-only, the Label
# Studio annotations whose decisions an import logged (by project and annotation id, with their updated_at and the
# time of the decision that stands for them) and
# those it withdrew because Label Studio no longer has them (gensets.curation.interchange).
# label_studio_exports: each Label Studio export (its id is in every task's data.gensets_export) and the project
# (and server, when the export named it) its tasks are for; the id '' stands for tasks exported before exports had
# ids. label_studio_tasks: the tasks imports read (project, task id, key, created_at): a file whose task of that
# project is another one comes from another server (or a project made again) and is refused.
# review_undo: append-only, the review page's undos (review.undo): the log row (its rowid) that undid another one,
# which is a decision like any other in review_log; nothing is ever deleted from the log.
# review_leases: the images handed out on review pages (gensets.curation.leases): who holds which, until when (UTC);
# kept here so that a restarted server, or a second one, hands out the same way


WAIT_S = 60.0  # how long a command waits for state.duckdb held by another process (a request of a review
# server holds it for milliseconds; finalize for its ingest and snapshot), then: Busy, in one line
NOTICE_S = 0.3  # a wait longer than this is said, once, in one line naming the holder
RETRY_S = 0.01  # between two tries
ASK_S = 1.0  # between two requests to a review server holding it (shared.ask_release)


def connect(path: Path, read_only: bool = False, *, schema: bool = True, wait: float | None = None,
            notice=notices.notice, cancelled=None):
    """A connection to state.duckdb. Another process holding it (a review server, a command, finalize) is waited
    for, a review server asked to give it up (:func:`shared.ask_release`), up to ``wait`` seconds (:data:`WAIT_S`); once the wait passes :data:`NOTICE_S`, ``notice`` (default: a
    notice, :mod:`gensets.notices`; None to say nothing) gets one line naming the holder (:func:`shared.describe`); after it,
    :class:`~gensets.errors.Busy` in one line. ``cancelled()`` true ends the wait early (a stopping server).
    ``schema``: create missing tables (a process that opens it again and again does it once)."""
    import time

    import duckdb

    wait = WAIT_S if wait is None else wait
    start, said, asked = time.monotonic(), False, {}
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.Error as e:  # another process has it, or not a database
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if not shared.is_lock_conflict(why):
                raise DataError(f"{path}: not a readable state database ({why}); it was left as it is") from None
            waited, pid = time.monotonic() - start, shared.holder_pid(str(e))
            if time.monotonic() - asked.get(pid, -ASK_S) >= ASK_S:  # a review server keeps it between requests:
                asked[pid] = time.monotonic()  # asked to give it up (again each ASK_S: it may have just started)
                shared.ask_release(Path(path).parent, pid)
            if waited >= wait or (cancelled is not None and cancelled()):
                who = shared.describe(Path(path).parent, pid)
                raise Busy(f"{path}: in use by {who} for more than {wait:g} s; try again when it is done") from None
            if not said and waited >= NOTICE_S and notice:
                notice(f"waiting for {path}: {shared.describe(Path(path).parent, pid)} is using it")
                said = True
            time.sleep(RETRY_S)
    if read_only:
        return _read_only(con)
    if schema:
        con.execute(SCHEMA)
    return con


def snapshot(path: Path, dest: Path) -> Path:
    """A copy of state.duckdb at ``dest``, for a long read (finalize streams every published row from it): the
    database is held only while it is checkpointed and copied (every change in the file, the write-ahead log
    empty), so review servers and commands go on meanwhile, and the long read sees one moment of it."""
    import shutil

    con = connect(path)
    try:
        con.execute("CHECKPOINT")
        shutil.copyfile(path, dest)
        wal = Path(f"{path}.wal")
        if wal.is_file() and wal.stat().st_size:  # nothing left to checkpoint should remain; copied if so
            shutil.copyfile(wal, f"{dest}.wal")
    finally:
        con.close()
    return dest


def _read_only(con):
    """A read-only connection to a database from before ``reviewer_aliases``: an empty one of its own (a
    temporary table), so that reading the log, which joins it, needs no writer."""
    if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'reviewer_aliases' AND NOT temporary"
                       ).fetchall():
        con.execute("CREATE TEMP TABLE reviewer_aliases (alias VARCHAR PRIMARY KEY, reviewer VARCHAR, time TIMESTAMP)")
    return con


def setting(con, name: str, default: str | None = None) -> str | None:
    """A workspace setting (e.g. ``review_mode``); ``default`` when unset, or in a database from before
    the ``settings`` table opened read-only."""
    import duckdb

    try:
        row = next(iter(con.execute("SELECT value FROM settings WHERE name = ?", [name]).fetchall()), None)
    except duckdb.CatalogException:
        return default
    return row[0] if row else default


def set_setting(con, name: str, value: str) -> None:
    con.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", [name, value])


BATCH = 1_000  # samples per Arrow batch fed to DuckDB (a key lookup of this many uses the index)
# DuckDB's buffer pool during ingest. Uncapped (80% of RAM by default) it keeps every block the ingest wrote,
# so the process grew with the build (benchmarks/scale.py: +302 MB from 10k to 100k images). Capped, it writes
# them out; the cap is a floor plus what the tables' primary-key (ART) indexes need, which DuckDB holds in
# memory: about 40 bytes a key measured here (a 100 MB cap failed past ~2.5M keys), 64 counted, 4 keys a sample.
INGEST_MEMORY_MB = 96
INDEX_BYTES_PER_SAMPLE = 4 * 64
QUEUE = "queue"  # the settings row that says the review page's tables (curation.queue) are up to date
INDEXED = "image_index"  # the settings row that says every ingested unit's images are in ``images``

_SCHEMAS = {
    "units": [("unit", "string"), ("shard", "string"), ("sha256", "string"), ("n", "int32")],
    "samples": [("key", "string"), ("unit", "string"), ("shard", "string"), ("config", "string"),
                ("label", "string"), ("label_index", "int32"), ("nuisance", "string"), ("prompt", "string"),
                ("seed", "int64"), ("surrogate_failures", "int32"), ("kept", "bool_"), ("meta", "string")],
    "surrogate_predictions": [("key", "string"), ("model", "string"), ("rank", "int32"),
                              ("class_index", "int32"), ("score", "float64"), ("hit", "bool_")],
    "reviews": [("key", "string"), ("status", "string"), ("label", "string"), ("reviewer", "string"),
                ("time", "timestamp"), ("note", "string")],
    "skipped": [("unit", "string"), ("path", "string"), ("reason", "string")],
    "images": [("key", "string"), ("shard", "string"), ("byte_offset", "int64"), ("nbytes", "int64"),
               ("ext", "string")],
}


def _arrow(name: str, rows: list[dict]):
    import pyarrow as pa

    types = {"timestamp": pa.timestamp("us")}
    return pa.Table.from_pylist(rows, schema=pa.schema(
        [(col, types.get(t) or getattr(pa, t)()) for col, t in _SCHEMAS[name]]))


def _insert(con, name: str, rows: list[dict]) -> None:
    """Append ``rows`` to table ``name`` through Arrow."""
    if not rows:
        return
    con.register("_incoming", _arrow(name, rows))
    try:
        # a sample ingested again keeps its row (and review decisions stay); its predictions are replaced
        if name in ("samples", "reviews", "images"):
            con.execute(f"INSERT OR IGNORE INTO {name} SELECT * FROM _incoming")
        else:
            con.execute(f"INSERT INTO {name} SELECT * FROM _incoming")
    finally:
        con.unregister("_incoming")


def _image_row(d: dict, shard: str) -> dict:
    ext = next((e for e in IMAGE_EXTS if e in d["__members__"]), None)
    if ext is None:
        raise DataError(f"{shard}: {d['__key__']}: no image member")
    offset, size = d["__members__"][ext]
    return {"key": d["__key__"], "shard": shard, "byte_offset": offset, "nbytes": size, "ext": ext}


def ingest(con, manifest_rows: Iterable[dict], shard_path, config_of, initial_status: str = "pending",
           index_of=None) -> int:
    """Load the samples of every committed unit not yet in the database.

    ``shard_path(shard)`` is the file of a manifest row's shard; only its json and cls members are read
    (:func:`gensets.shards.iter_index`: the images are skipped), and where each image lies (shard, byte
    offset, size) goes into ``images`` for the review page. ``index_of(shards)``, if given, yields for each shard
    in turn what iter_index would give, or None to read the shard (a workspace on object storage reads its
    commit markers: :meth:`gensets.store.Store.committed_indexes`). ``config_of(meta)`` names the published config
    a sample belongs to. Kept samples enter the review queue as ``initial_status`` (``pending``;
    ``accepted`` for builders without a human review step). Rows reach DuckDB in Arrow batches of whole
    units (about :data:`BATCH` samples), one transaction each, so memory does not grow with the number of
    samples; a killed ingest keeps whole units and the next one adds the others. DuckDB's buffer pool is capped
    meanwhile (:data:`INGEST_MEMORY_MB`), so what it caches does not grow with them either.
    Returns the number of samples added.
    """
    have = {r[0] for r in con.execute("SELECT unit FROM units").fetchall()}
    todo = {}
    for row in manifest_rows:  # the last row of a unit wins (a re-written identical shard)
        if row["unit"] not in have:  # only what ingest reads of the row is kept
            todo[row["unit"]] = (row["shard"], row["sha256"], row["n"], row.get("skipped") or ())
    if not todo:
        return 0
    samples = con.execute("SELECT count(*) FROM samples").fetchone()[0] + sum(t[2] for t in todo.values())
    mb = min(INGEST_MEMORY_MB + -(-int(samples) * INDEX_BYTES_PER_SAMPLE // 2**20), 1 << 22)  # at most 4 TB
    con.execute(f"SET memory_limit = '{int(mb)}MB'")
    try:
        return _ingest(con, todo, shard_path, config_of, initial_status, index_of)
    finally:
        con.execute("RESET memory_limit")


def _meta(d: dict, shard: str) -> dict:
    """A sample's json member as a dict; DataError naming the shard and key otherwise."""
    try:
        m = json.loads(d["json"])
    except (KeyError, ValueError, RecursionError) as e:
        raise DataError(f"{shard}: {d['__key__']}: unreadable json member ({type(e).__name__})") from None
    if not isinstance(m, dict):
        raise DataError(f"{shard}: {d['__key__']}: the json member is not an object")
    return m


def _cls(d: dict, shard: str) -> int:
    """A sample's cls member as a class index; DataError naming the shard and key otherwise."""
    try:
        v = int(d["cls"].decode("ascii"))
    except (KeyError, ValueError, UnicodeDecodeError):
        v = -1
    if not 0 <= v < 1 << 31:
        raise DataError(f"{shard}: {d['__key__']}: the cls member is not a class index")
    return v


def _ingest(con, todo: dict, shard_path, config_of, initial_status: str, index_of=None) -> int:
    added = 0
    batch: dict[str, list[dict]] = {name: [] for name in _SCHEMAS}

    def flush():
        with transaction(con):
            con.execute("DELETE FROM settings WHERE name = ?", [QUEUE])  # new rows: the page's tables are stale
            keys = [r["key"] for r in batch["samples"]]  # samples seen before, found by key (indexed)
            seen = [k for (k,) in con.execute("SELECT key FROM samples WHERE list_contains(?, key)", [keys]).fetchall()]
            if seen:
                con.execute("DELETE FROM surrogate_predictions WHERE list_contains(?, key)", [seen])
            for name, rows in batch.items():
                _insert(con, name, rows)
                rows.clear()

    units = sorted(todo.items())
    indexes = index_of([shard for _, (shard, *_) in units]) if index_of else None
    for unit, (shard, sha256, n, skipped) in units:
        batch["units"].append({"unit": unit, "shard": shard, "sha256": sha256, "n": n})
        batch["skipped"] += [{"unit": unit, "path": r["path"], "reason": r["reason"]} for r in skipped]
        entries = next(indexes) if indexes else None
        for d in iter_index(shard_path(shard)) if entries is None else entries:
            key, m = d["__key__"], _meta(d, shard)
            batch["images"].append(_image_row(d, shard))
            batch["samples"].append({
                "key": key, "unit": unit, "shard": shard, "config": config_of(m),
                "label": m.get("label"), "label_index": _cls(d, shard), "nuisance": m.get("nuisance"),
                "prompt": m.get("prompt"), "seed": m.get("seed"),
                "surrogate_failures": m.get("surrogate_failures"), "kept": bool(m.get("kept")),
                "meta": json.dumps(m, sort_keys=True),
            })
            for p in m.get("surrogates") or []:
                for rank, (idx, score) in enumerate(zip(p["top5"], p["scores"], strict=True)):
                    batch["surrogate_predictions"].append({
                        "key": key, "model": p["model"], "rank": rank + 1, "class_index": idx,
                        "score": score, "hit": p["hit"]})
            if m.get("kept"):  # below a quality: threshold: out of the queue (a reviewer may still accept it)
                status = BELOW_QUALITY if (m.get("quality") or {}).get("passed") is False else initial_status
                batch["reviews"].append({"key": key, "status": status, "label": m.get("label"),
                                         "reviewer": None, "time": None, "note": None})
            added += 1
        if len(batch["samples"]) >= BATCH:
            flush()
    flush()
    return added


def index_images(con, shard_path) -> int:
    """Record where the images of every ingested unit lie, for units ingested before ``images`` existed (once:
    then the setting :data:`INDEXED` says so). Reads tar headers only. Returns the number of shards indexed."""
    if setting(con, INDEXED) == "1":
        return 0
    shards = [r[0] for r in con.execute(
        "SELECT u.shard FROM units u WHERE u.n > 0 AND NOT EXISTS "
        "(SELECT 1 FROM images i WHERE i.shard = u.shard) ORDER BY 1").fetchall()]
    with transaction(con):
        for shard in shards:
            _insert(con, "images", [_image_row(d, shard) for d in iter_index(shard_path(shard), read=())])
        set_setting(con, INDEXED, "1")
    return len(shards)


def images_of(con, keys: list[str], shard_path) -> dict[str, tuple[Path, int, int, str]]:
    """key -> (shard file, byte offset, size, ext) of the images of ``keys``, from ``images`` (indexed by key).
    A sample ingested before ``images`` existed is found in its shard's tar headers (not recorded: a read-only
    connection may ask; ``gensets finalize`` or the next build records them all)."""
    found = {k: (shard_path(sh), o, n, e) for k, sh, o, n, e in con.execute(
        "SELECT key, shard, byte_offset, nbytes, ext FROM images WHERE list_contains(?, key)", [keys]).fetchall()}
    missing = [k for k in keys if k not in found]
    if missing:
        shards = sorted({r[0] for r in con.execute(
            "SELECT shard FROM samples WHERE list_contains(?, key)", [missing]).fetchall()})
        wanted = set(missing)
        for shard in shards:
            for d in iter_index(shard_path(shard), read=()):
                if d["__key__"] in wanted:
                    r = _image_row(d, shard)
                    found[r["key"]] = (shard_path(shard), r["byte_offset"], r["nbytes"], r["ext"])
    return found


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
