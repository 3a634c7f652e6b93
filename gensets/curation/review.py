"""The review queue: kept images wait as ``pending`` until a person accepts, rejects or relabels them.

Every decision updates ``reviews`` and is appended to ``review_log`` (the audit trail), in one
transaction, with the reviewer and the time.
"""

from __future__ import annotations

import datetime as dt
import getpass
from collections.abc import Sequence

from ..errors import GensetsError

STATUSES = ("pending", "accepted", "rejected", "relabeled")


def list_queue(con, status: str | None = "pending", label: str | None = None,
               config: str | None = None, limit: int | None = None) -> list[dict]:
    q = """SELECT r.key, r.status, s.config, s.label, r.label AS review_label, s.nuisance,
                  s.surrogate_failures, r.reviewer, r.time, s.prompt
           FROM reviews r JOIN samples s USING (key) WHERE 1=1"""
    args: list = []
    if status:
        q += " AND r.status = ?"
        args.append(status)
    if label:
        q += " AND s.label = ?"
        args.append(label)
    if config:
        q += " AND s.config = ?"
        args.append(config)
    q += " ORDER BY s.config, r.key"
    if limit:
        q += " LIMIT ?"
        args.append(int(limit))
    cur = con.execute(q, args)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def decide(con, keys: Sequence[str], status: str, *, label: str | None = None,
           reviewer: str | None = None, note: str | None = None, valid_labels: Sequence[str] = ()) -> int:
    """Record one decision for each key. Unknown keys are refused before anything is written."""
    if status not in STATUSES:
        raise GensetsError(f"unknown review status '{status}' (known: {', '.join(STATUSES)})")
    if status == "relabeled":
        if not label:
            raise GensetsError("relabel needs the new class (--to CLASS)")
        if valid_labels and label not in valid_labels:
            raise GensetsError(f"unknown class '{label}' for relabel")
    keys = list(dict.fromkeys(keys))
    if not keys:
        raise GensetsError("no sample keys given")
    known = {r[0] for r in con.execute(
        "SELECT key FROM reviews WHERE list_contains(?, key)", [keys]).fetchall()}
    missing = [k for k in keys if k not in known]
    if missing:
        raise GensetsError(f"sample '{missing[0]}' is not in the review queue")
    reviewer = reviewer or getpass.getuser()
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    con.execute("BEGIN TRANSACTION")
    try:
        for key in keys:
            new_label = label if status == "relabeled" else None
            con.execute(
                "UPDATE reviews SET status = ?, label = coalesce(?, (SELECT label FROM samples s "
                "WHERE s.key = reviews.key)), reviewer = ?, time = ?, note = ? WHERE key = ?",
                [status, new_label, reviewer, now, note, key])
            con.execute("INSERT INTO review_log SELECT key, status, label, reviewer, time, note "
                        "FROM reviews WHERE key = ?", [key])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return len(keys)
