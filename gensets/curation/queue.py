"""The review page's queue in state.duckdb: rows in page order, each reviewer's latest decision, and counts.

``reviews`` and ``review_log`` are the truth; three tables derived from them let a page or a decision cost the
same with a thousand images or a million:

- ``queue``: one row per image in the review queue, stored in page order (``pos``: config, class, key) with
  its status, note, "several objects" flag, number of reviewers who decided it (``n``) and, when that is one,
  who (``sole``); and what the surrogates said (``failures``: how many fail, ``top1`` / ``confidence``: the
  ImageNet index and score of the most confident surrogate's first guess), with the positions of the two other
  orders a page can take (:data:`SORTS`: ``pos_failures``, most failures first; ``pos_confidence``, most
  confident first; then page order). A page is a keyset query (a position after or before a cursor,
  ``LIMIT``): DuckDB's top-N pushes its bound into the scan, whose row-group statistics on ``pos`` (and on
  config and class, stored in that order) skip the rest of the table; the other orders scan it.
- ``review_latest``: each reviewer's latest decision on each image (indexed by key): double review's view,
  and the per-reviewer counts.
- ``queue_counts``: per (reviewer, config, class) the counters the page shows; reviewer ``''`` holds the
  global ones. Counts, filter options and the number of matching images are sums over this small table.

:func:`rebuild` derives all three from the truth (after an ingest, or for a database from before them);
:func:`refresh` updates the rows of the images a decision touched, in the decision's transaction
(``review.record`` calls it), from the same truth by the same definitions: the counts change by the
difference of those images' contributions. The settings row ``state.QUEUE`` says the tables are up to date;
``state.ingest`` clears it, and whoever reads the tables first rebuilds them (:func:`ensure`).

In double review, a reviewer's own-status filters (pending, accepted, rejected, relabeled, several objects)
scan that reviewer's ``review_latest`` rows; the "to review" and "all" pages do not.
"""

from __future__ import annotations

from collections import Counter

from ..db import transaction
from ..errors import GensetsError
from . import state

VERSION = "3"  # 2: the surrogates' columns and the sort orders; 3: a latest decision's NULL note or label is its own
FLAG = "several objects"
STATUSES = ("pending", "accepted", "rejected", "relabeled")
REFRESH_MAX = 1000  # a decision touching more images than this rebuilds the tables (set-based) instead

# every reviewer's latest decision per image; rowid orders decisions (their time may be another tool's, e.g. a
# Label Studio annotation's); a name in reviewer_aliases counts as the reviewer it names (one person, one reviewer).
# arg_max_null, not arg_max: arg_max passes over rows whose value is NULL, so a decision without a note (or label)
# took the note of an older one (a comment refused after "several objects" was undone and the image relabelled)
LOG = """SELECT l.key, coalesce(a.reviewer, l.reviewer) AS reviewer, l.status, l.label, l.note, l.time,
                l.rowid AS seq FROM review_log l LEFT JOIN reviewer_aliases a ON a.alias = l.reviewer"""
LATEST = """
    SELECT key, reviewer, arg_max_null(status, seq) AS status, arg_max_null(label, seq) AS label,
           arg_max_null(note, seq) AS note, arg_max_null(time, seq) AS time,
           min(seq) AS first_seq, max(seq) AS last_seq
    FROM (""" + LOG + """ {where}) GROUP BY key, reviewer"""

TABLES = """
CREATE TABLE queue (
    key VARCHAR PRIMARY KEY, pos INTEGER, config VARCHAR, label VARCHAR, nuisance VARCHAR, status VARCHAR,
    review_label VARCHAR, note VARCHAR, flagged BOOLEAN, n INTEGER, sole VARCHAR, failures INTEGER,
    top1 INTEGER, confidence DOUBLE, pos_failures INTEGER, pos_confidence INTEGER);
CREATE TABLE review_latest (
    key VARCHAR, reviewer VARCHAR, status VARCHAR, label VARCHAR, note VARCHAR, flagged BOOLEAN, pos INTEGER,
    config VARCHAR, sample_label VARCHAR);
CREATE INDEX review_latest_key ON review_latest (key);
CREATE TABLE queue_counts (reviewer VARCHAR, config VARCHAR, label VARCHAR, name VARCHAR, n BIGINT);
"""

# what every image adds to queue_counts: contributions() in SQL, for rebuild (a test holds the two together)
_CONTRIBUTIONS = """
    SELECT c.reviewer AS reviewer, config, label, c.name AS name, count(*) AS n
    FROM (SELECT config, label, unnest([{'reviewer': '', 'name': 'total'}, {'reviewer': '', 'name': status}]
                 || CASE WHEN flagged THEN [{'reviewer': '', 'name': 'flagged'}] ELSE [] END
                 || CASE WHEN n < 2 THEN [{'reviewer': '', 'name': 'lt2'}] ELSE [] END
                 || CASE WHEN n = 1 THEN [{'reviewer': sole, 'name': 'sole'}] ELSE [] END) AS c
          FROM queue)
    GROUP BY 1, 2, 3, 4
    UNION ALL
    SELECT reviewer, config, sample_label AS label, name, count(*) AS n
    FROM (SELECT reviewer, config, sample_label,
                 unnest([status] || CASE WHEN flagged THEN ['flagged'] ELSE [] END) AS name FROM review_latest)
    GROUP BY 1, 2, 3, 4"""


def has_flag(note: str | None) -> bool:
    return bool(note) and FLAG in [p.strip() for p in note.split(";")]


def with_flag(note: str | None, on: bool) -> str | None:
    """The note with the "several objects" flag set or cleared; other note text is kept."""
    parts = [p.strip() for p in (note or "").split(";") if p.strip() and p.strip() != FLAG]
    parts = ([FLAG] if on else []) + parts
    return "; ".join(parts) or None


COMMENT_MAX = 500  # characters of a comment
OVERRIDE = "override of "  # a note's part: this decision knowingly replaced another reviewer's (a 409 seen first)


def with_override(note: str | None, what: str | None) -> str | None:
    """The note with its override mark replaced by ``what`` ("ana: accepted"; None: none)."""
    parts = [p.strip() for p in (note or "").split(";") if p.strip() and not p.strip().startswith(OVERRIDE)]
    return "; ".join(parts + ([OVERRIDE + what] if what else [])) or None


def comment_of(note: str | None) -> str:
    """The comment in a note: its text besides the "several objects" flag and an override mark."""
    return "; ".join(p.strip() for p in (note or "").split(";")
                     if p.strip() and p.strip() != FLAG and not p.strip().startswith(OVERRIDE))


def with_comment(note: str | None, text) -> str | None:
    """The note with its comment replaced by ``text`` (one line, at most :data:`COMMENT_MAX` characters; empty:
    none); the flag is kept."""
    if not isinstance(text, str) or len(text) > COMMENT_MAX or not text.replace("\n", " ").isprintable():
        raise GensetsError(f"a comment is text of at most {COMMENT_MAX} printable characters")
    text = " ".join(text.split())
    if text.startswith(OVERRIDE.strip()):
        raise GensetsError(f"a comment cannot begin with {OVERRIDE.strip()!r}: that marks an override")
    return "; ".join(([FLAG] if has_flag(note) else []) + ([text] if text else [])) or None


def fresh(con) -> bool:
    return state.setting(con, state.QUEUE) == VERSION


def ensure(con) -> None:
    """Rebuild the tables unless they are up to date (one settings lookup when they are)."""
    if not fresh(con):
        rebuild(con)


def _register_flags(con) -> None:
    """``_flags(note, flagged)`` for every distinct note of a decision: :func:`has_flag` decides (notes are few:
    most decisions have none)."""
    import pyarrow as pa

    notes = [r[0] for r in con.execute("SELECT DISTINCT note FROM reviews UNION SELECT DISTINCT note FROM "
                                       "review_log").fetchall() if r[0] is not None]
    con.register("_flags", pa.table({"note": pa.array(notes, pa.string()),
                                     "flagged": pa.array([has_flag(n) for n in notes], pa.bool_())}))


def rebuild(con) -> None:
    """Derive ``queue``, ``review_latest`` and ``queue_counts`` from ``reviews``, ``review_log`` and ``samples``."""
    with transaction(con):
        _derive(con)


def _derive(con) -> None:
    """:func:`rebuild` inside the caller's transaction."""
    for table in ("queue_counts", "review_latest", "queue"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute(TABLES)
    con.execute("CREATE INDEX IF NOT EXISTS review_log_key ON review_log (key)")
    _register_flags(con)
    try:
        con.execute(f"""
            INSERT INTO queue
            WITH latest AS ({LATEST.format(where="")}),
                 nrev AS (SELECT key, count(*) AS n, CASE WHEN count(*) = 1 THEN min(reviewer) END AS sole
                          FROM latest WHERE status <> 'pending' GROUP BY key),
                 top AS (SELECT key, arg_max(class_index, score) AS top1, max(score) AS confidence
                         FROM surrogate_predictions WHERE rank = 1 GROUP BY key),
                 rows AS (
                     SELECT r.key, row_number() OVER (ORDER BY s.config, s.label, r.key)::INTEGER AS pos, s.config,
                            s.label, s.nuisance, r.status, r.label AS review_label, r.note,
                            coalesce(f.flagged, false) AS flagged, coalesce(nrev.n, 0) AS n, nrev.sole,
                            s.surrogate_failures AS failures, top.top1, top.confidence
                     FROM reviews r JOIN samples s USING (key) LEFT JOIN nrev USING (key)
                     LEFT JOIN _flags f ON f.note = r.note LEFT JOIN top USING (key))
            SELECT *, row_number() OVER (ORDER BY failures DESC NULLS LAST, pos)::INTEGER,
                   row_number() OVER (ORDER BY confidence DESC NULLS LAST, pos)::INTEGER
            FROM rows ORDER BY pos""")
        con.execute(f"""
            INSERT INTO review_latest
            SELECT l.key, l.reviewer, l.status, l.label, l.note, coalesce(f.flagged, false), q.pos, q.config,
                   q.label
            FROM ({LATEST.format(where="")}) l JOIN queue q USING (key) LEFT JOIN _flags f ON f.note = l.note
            ORDER BY q.pos, l.first_seq""")
    finally:
        con.unregister("_flags")
    con.execute("INSERT INTO queue_counts " + _CONTRIBUTIONS)
    state.set_setting(con, state.QUEUE, VERSION)


def contributions(queue_rows, latest_rows) -> Counter:
    """What images add to ``queue_counts``, ``(reviewer, config, label, name) -> n``, from their ``queue`` rows
    ``(config, label, status, flagged, n, sole)`` and ``review_latest`` rows ``(reviewer, config, label, status,
    flagged)``; :data:`_CONTRIBUTIONS` computes the same in SQL for :func:`rebuild`.

    Global (reviewer ``''``): ``total``, the status, ``flagged``, ``lt2`` (fewer than two reviewers decided).
    Per reviewer: the status of their latest decision, ``flagged`` (their note), and ``sole`` for the images
    they alone decided."""
    out = Counter()
    for config, label, status, flagged, n, sole in queue_rows:
        for name in ("total", status, *(["flagged"] if flagged else []), *(["lt2"] if n < 2 else [])):
            out["", config, label, name] += 1
        if n == 1:
            out[sole, config, label, "sole"] += 1
    for reviewer, config, label, status, flagged in latest_rows:
        out[reviewer, config, label, status] += 1
        if flagged:
            out[reviewer, config, label, "flagged"] += 1
    return out


def refresh(con, keys) -> None:
    """Bring the derived rows of the images ``keys`` up to date after decisions on them (inside the caller's
    transaction); a no-op while the tables are stale (the next :func:`ensure` rebuilds them). Every statement
    finds its rows by key; a few statements whatever the size of the queue."""
    import pyarrow as pa

    keys = sorted(set(keys))
    if not keys or not fresh(con):
        return
    if len(keys) > REFRESH_MAX:
        _derive(con)
        return
    old = {k: row for k, *row in con.execute(
        "SELECT key, pos, config, label, status, flagged, n, sole FROM queue WHERE list_contains(?, key)",
        [keys]).fetchall()}
    old_latest = con.execute("SELECT reviewer, config, sample_label, status, flagged FROM review_latest "
                             "WHERE list_contains(?, key)", [keys]).fetchall()
    before = contributions([row[1:] for row in old.values()], old_latest)
    latest = con.execute(f"SELECT key, reviewer, status, label, note FROM ({LATEST.format(where='WHERE list_contains(?, key)')}) "
                         "ORDER BY key, first_seq", [keys]).fetchall()
    rows = [(k, r, s, lb, note, has_flag(note), *old[k][:3]) for k, r, s, lb, note in latest]
    deciders: dict[str, list[str]] = {k: [] for k in keys}
    for k, r, s, *_ in latest:
        if s != "pending":
            deciders[k].append(r)
    new = {}
    for key, status, label, note in con.execute(
            "SELECT key, status, label, note FROM reviews WHERE list_contains(?, key)", [keys]).fetchall():
        who = deciders[key]
        new[key] = (status, label, note, has_flag(note), len(who), who[0] if len(who) == 1 else None)
    con.execute("DELETE FROM review_latest WHERE list_contains(?, key)", [keys])
    if rows:
        con.register("_latest", pa.table(list(zip(*rows, strict=True)), names=[
            "key", "reviewer", "status", "label", "note", "flagged", "pos", "config", "sample_label"]))
        try:
            con.execute("INSERT INTO review_latest SELECT * FROM _latest")
        finally:
            con.unregister("_latest")
    for key, (status, label, note, flagged, n, sole) in new.items():
        con.execute("UPDATE queue SET status = ?, review_label = ?, note = ?, flagged = ?, n = ?, sole = ? "
                    "WHERE key = ?", [status, label, note, flagged, n, sole, key])
    delta = contributions([(*old[k][1:3], s, fl, n, sole) for k, (s, _, _, fl, n, sole) in new.items()],
                          [(r[1], r[7], r[8], r[2], r[5]) for r in rows])
    delta.subtract(before)
    changes = [(*k, n) for k, n in delta.items() if n]
    if changes:
        con.register("_delta", pa.table(list(zip(*changes, strict=True)),
                                        names=["reviewer", "config", "label", "name", "n"]))
        try:
            match = ("c.reviewer = d.reviewer AND c.config IS NOT DISTINCT FROM d.config "
                     "AND c.label IS NOT DISTINCT FROM d.label AND c.name = d.name")
            con.execute(f"UPDATE queue_counts c SET n = c.n + d.n FROM _delta d WHERE {match}")
            con.execute(f"INSERT INTO queue_counts SELECT d.* FROM _delta d ANTI JOIN queue_counts c ON {match}")
        finally:
            con.unregister("_delta")


# ------------------------------------------------------------------------------------------- the page
BELOW = state.BELOW_QUALITY  # out of the queue (nobody decided it yet: a decision replaces the status)
DISPUTED = "disputed"  # double review: the images whose reviewers disagree, not settled yet (review.verdicts)
VIEWS = ("todo", *STATUSES, BELOW, "flagged", DISPUTED, "all")  # what a page can show


def _view(g: Counter, m: Counter, double: bool) -> dict:
    """The page's counts from summed global counters ``g`` and the reviewer's own ``m``: in double review a
    reviewer sees their own decisions (pending: not decided by them, unless below quality) and still has to
    review the images fewer than two reviewers decided, except those they alone decided and those below
    quality (which nobody decided)."""
    if double:
        out = {s: m[s] for s in STATUSES[1:]}
        out = {"pending": g["total"] - sum(out.values()) - g[BELOW], **out}
        flagged, todo = m["flagged"], g["lt2"] - m["sole"] - g[BELOW]
    else:
        out = {s: g[s] for s in STATUSES}
        flagged, todo = g["flagged"], g["pending"]
    return {**out, "total": g["total"], "flagged": flagged, "todo": todo, "double_reviewed": g["total"] - g["lt2"]}


def summary(con, reviewer: str, double: bool, *, label: str | None = None, config: str | None = None,
            view: str = "all") -> dict:
    """The counts of the whole queue, the filter options (classes and configs with their numbers of images), how
    many images the filter (``label``, ``config``, ``view``) matches and how many images ``reviewer``'s latest
    decision decides (``decided``): sums over ``queue_counts``."""
    rows = con.execute("SELECT reviewer, config, label, name, n FROM queue_counts WHERE reviewer = '' "
                       "OR reviewer = ?", [reviewer]).fetchall()
    whole, chosen = (Counter(), Counter()), (Counter(), Counter())
    classes, configs = Counter(), Counter()
    for who, c, lb, name, n in rows:
        mine = int(who != "")
        whole[mine][name] += n
        if (not label or lb == label) and (not config or c == config):
            chosen[mine][name] += n
        if not mine and name == "total":
            classes[lb] += n
            configs[c] += n
    counts, matching = _view(*whole, double), _view(*chosen, double)
    matching = chosen[0][BELOW] if view == BELOW else matching.get("total" if view == "all" else view, 0)
    return {"counts": counts, "matching": matching, "decided": sum(whole[1][s] for s in STATUSES[1:]),
            "classes": sorted(classes.items()), "configs": sorted(configs.items())}


def _filter(reviewer: str, double: bool, label: str | None, config: str | None, view: str) -> tuple[str, list]:
    where, args = [], []
    if label:
        where.append("label = ?")
        args.append(label)
    if config:
        where.append("config = ?")
        args.append(config)
    mine = "SELECT key FROM review_latest WHERE reviewer = ? AND "
    if view in ("all", DISPUTED):  # disputed: the keys page() is given
        pass
    elif view == BELOW:
        where.append("status = ?")
        args.append(BELOW)
    elif double and view == "todo":
        where.append("(n = 0 OR (n = 1 AND sole <> ?)) AND status <> ?")
        args += [reviewer, BELOW]
    elif double and view == "pending":
        where.append(f"key NOT IN ({mine} status <> 'pending') AND status <> ?")
        args += [reviewer, BELOW]
    elif double:
        where.append(f"key IN ({mine} flagged)" if view == "flagged" else f"key IN ({mine} status = ?)")
        args += [reviewer] if view == "flagged" else [reviewer, view]
    elif view == "flagged":
        where.append("flagged")
    else:
        where.append("status = ?")
        args.append("pending" if view == "todo" else view)
    return " AND ".join(where) or "true", args


COLUMNS = ("key", "pos", "config", "label", "nuisance", "status", "review_label", "note", "flagged", "n",
           "failures", "top1", "confidence")
SORTS = {"page": "pos", "failures": "pos_failures", "confidence": "pos_confidence"}  # a page's order -> its column


def page(con, reviewer: str, double: bool, *, label: str | None = None, config: str | None = None,
         view: str = "todo", after: int | None = None, before: int | None = None, size: int = 60,
         sort: str = "page", taken: dict[str, int] | None = None, only: list[str] | None = None) -> dict:
    """``size`` images of the filtered queue in the order ``sort`` (:data:`SORTS`) after the cursor ``after`` (or
    before ``before``; the start without either), with the cursors of the pages around it (None at an end).

    In double review each row shows the reviewer's own latest decision (status, class, note, flag), or pending.
    Keyset pagination: every query is ``pos`` beyond a bound, ordered by ``pos``, with a ``LIMIT``.

    ``taken``: images leased to other reviewers -> how many hold each (:func:`leases.others`), passed over:
    in single review all of them, in double review those whose missing decisions they hold (two leases, or one
    on an image one reviewer decided). ``only``: the images a view is made of (:data:`DISPUTED`: the disputed ones,
    which the server works out from the log)."""
    cond, args = _filter(reviewer, double, label, config, view)
    if view == DISPUTED and not only:  # none given: none
        cond = "false"
    elif only is not None:
        cond, args = cond + " AND list_contains(?, key)", args + [only]
    if taken:
        full = [k for k, n in taken.items() if n >= 2 or not double]
        half = [k for k, n in taken.items() if n == 1 and double]
        if full:
            cond, args = cond + " AND NOT list_contains(?, key)", args + [full]
        if half:
            cond, args = cond + " AND NOT (n >= 1 AND list_contains(?, key))", args + [half]
    at = SORTS[sort]  # a KeyError for an order not in SORTS: the server checks it first
    cols = ", ".join(COLUMNS)

    def rows(bound: str, order: str, limit: int, value) -> list[tuple]:
        sql = f"SELECT {cols}, {at} FROM queue WHERE {cond}{bound} ORDER BY {at} {order} LIMIT {limit}"
        return con.execute(sql, args + ([value] if bound else [])).fetchall()

    if before is not None:
        got = rows(f" AND {at} < ?", "DESC", size + 1, before)
        more_before, got = len(got) > size, got[:size][::-1]
        more_after = bool(rows(f" AND {at} >= ?", "", 1, before))
    else:
        got = rows(f" AND {at} > ?" if after is not None else "", "", size + 1, after)
        more_after, got = len(got) > size, got[:size]
        more_before = after is not None and bool(rows(f" AND {at} <= ?", "DESC", 1, after))
    items = [dict(zip((*COLUMNS, "cursor"), r, strict=True)) for r in got]
    if double and items:
        own = {k: (s, lb, note, fl) for k, who, s, lb, note, fl in con.execute(
            "SELECT key, reviewer, status, label, note, flagged FROM review_latest WHERE list_contains(?, key)",
            [[it["key"] for it in items]]).fetchall() if who == reviewer}
        for it in items:
            s, lb, note, fl = own.get(it["key"], (None, None, None, False))
            mine, below = s not in (None, "pending"), it["status"] == BELOW
            it.update(status=s if mine else BELOW if below else "pending", review_label=lb if mine else it["label"],
                      note=note, flagged=fl, todo=not mine and not below and it["n"] < 2)
    for it in items:
        it.setdefault("todo", it["status"] == "pending")
    return {"items": items, "before": items[0]["cursor"] if items and more_before else None,
            "after": items[-1]["cursor"] if items and more_after else None}
