"""Work handed out on the review page: the images of a reviewer's "to review" page are leased to them.

A lease holds an image for one reviewer until a time (:data:`LEASE_S` from when it was taken or last renewed); the
page renews its reviewer's leases while it is open (its polls of ``/api/changes``), a decision releases the image,
and a lease not renewed ends. A reviewer's next "to review" page skips the images others hold: in single review any
image another reviewer holds, in double review an image whose missing decisions others already hold (two leases on
an image nobody decided, one on an image one reviewer decided), so each image goes to exactly two reviewers. Within
what is left the queue's sort order applies (:func:`gensets.curation.queue.page`).

Leases live where decisions are, in state.duckdb (``review_leases``: key, reviewer, until, in UTC), so a server
restarted mid-review, or a second server on the same workspace, hands out the images the way the first one did:
nobody's open page loses its images to another. A page hands out :data:`HAND_OUT` images at a time (``review serve
--hand-out``): about what one reviewer sees and decides in a minute, so a team shares a small queue instead of the
first page taking it all. What keeps a decision from replacing another unseen is the image's version (HTTP 409),
not the lease.
"""

from __future__ import annotations

import datetime as dt

from ..db import transaction

LEASE_S = 120.0  # how long an image stays with a reviewer whose page stopped renewing it (closed, asleep)
RENEW_S = 40.0  # a lease is renewed once less than LEASE_S - RENEW_S is left: a write every RENEW_S per page
HAND_OUT = 12  # images handed to a reviewer at a time: about a minute's work at five seconds an image
TABLE = "review_leases"


def now() -> dt.datetime:
    """The time leases are written and compared in: UTC, naive (as the TIMESTAMP column holds it)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def _there(con) -> bool:
    """The table exists (a database from before it, opened read-only, has none: nobody holds anything)."""
    return bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [TABLE]).fetchall())


def others(con, reviewer: str, at: dt.datetime) -> dict[str, int]:
    """Every image leased to someone other than ``reviewer`` at ``at`` -> how many others hold it."""
    return dict(con.execute(f"SELECT key, count(DISTINCT reviewer) FROM {TABLE} WHERE until > ? AND reviewer <> ? "
                            "GROUP BY key", [at, reviewer]).fetchall())


def take(con, reviewer: str, keys, at: dt.datetime, seconds: float = LEASE_S) -> None:
    """``reviewer``'s leases are now ``keys`` (the images of their page), until ``at`` + ``seconds``: the others
    they held are released; leases that ended are dropped."""
    keys = sorted(set(keys))
    with transaction(con):
        con.execute(f"DELETE FROM {TABLE} WHERE until <= ? OR (reviewer = ? AND NOT list_contains(?, key))",
                    [at, reviewer, keys])
        con.execute(f"UPDATE {TABLE} SET until = ? WHERE reviewer = ? AND list_contains(?, key)",
                    [at + dt.timedelta(seconds=seconds), reviewer, keys])
        held = {k for (k,) in con.execute(f"SELECT key FROM {TABLE} WHERE reviewer = ?", [reviewer]).fetchall()}
        new = [(k, reviewer, at + dt.timedelta(seconds=seconds)) for k in keys if k not in held]
        if new:
            con.executemany(f"INSERT INTO {TABLE} VALUES (?, ?, ?)", new)


def renew(con, reviewer: str, at: dt.datetime, seconds: float = LEASE_S) -> int:
    """Extend ``reviewer``'s live leases (their page is open), those due (less than ``seconds`` - :data:`RENEW_S`
    left: a poll every few seconds writes once in a while); how many they hold."""
    until = at + dt.timedelta(seconds=seconds)
    con.execute(f"UPDATE {TABLE} SET until = ? WHERE reviewer = ? AND until > ? AND until < ?",
                [until, reviewer, at, until - dt.timedelta(seconds=RENEW_S)])
    return con.execute(f"SELECT count(*) FROM {TABLE} WHERE reviewer = ? AND until > ?",
                       [reviewer, at]).fetchall()[0][0]


def release(con, reviewer: str, keys) -> None:
    """``reviewer`` decided ``keys``: their leases on them end."""
    con.execute(f"DELETE FROM {TABLE} WHERE reviewer = ? AND list_contains(?, key)", [reviewer, list(keys)])


def held(con, at: dt.datetime) -> dict[str, int]:
    """reviewer -> how many images they hold at ``at`` (what their open pages show them to decide)."""
    if not _there(con):
        return {}
    return dict(con.execute(f"SELECT reviewer, count(*) FROM {TABLE} WHERE until > ? GROUP BY reviewer",
                            [at]).fetchall())
