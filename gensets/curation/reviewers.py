"""Who may review: personal links to the review page (``gensets review invite WS NAME``), and the page owner's.

A link carries a secret token (:func:`secrets.token_urlsafe`); state.duckdb keeps only its sha256, with the
reviewer's name, their role (:data:`ROLES`), when it was made, when it expires (``--expires``, else never) and
when it was revoked (``reviewer_tokens``), so a copy of the database gives nobody a way in. The review page takes
a reviewer's identity and role from the token (exchanged for a session of the server's run: :mod:`.sessions`),
never from a name typed on the page.
``gensets review invite WS --revoke NAME`` (or ``review revoke``) ends every link of that reviewer, and ``--list``
says who holds which (never a secret): a running page reads the invitations whenever it opens the database again,
which it does after giving it up to the command; an expired link is refused from the moment it expires.

The person who runs ``gensets review serve`` needs no invitation: the server makes a secret of its own for the
run (:func:`new_token`, never stored) and prints it in its start-up address, as Jupyter does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets

from ..db import transaction
from ..errors import GensetsError
from .review import check_reviewer

TOKEN_BYTES = 32  # 256 bits of randomness: 43 URL-safe characters
ROLES = ("reviewer", "adjudicator")  # an adjudicator may also settle a double review's disagreement
IMAGES = "images"  # the role of an images-only link: the image route alone (Label Studio's URL-mode tasks)
IMAGES_READER = "label-studio-images"  # the name an images-only link is recorded under
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d{1,6})([smhd])")
MAX_DAYS = 366  # the longest --expires


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def digest(token: str) -> str:
    """What is stored of a token: its sha256 (hex)."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def now() -> dt.datetime:
    """The time invitations are written and compared in: UTC, naive (as the TIMESTAMP columns hold it)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)


def duration(text: str) -> dt.timedelta:
    """``--expires``: a whole number with a unit, s, m, h or d (``8h``, ``2d``), at most :data:`MAX_DAYS` days."""
    m = _DURATION.fullmatch(text.strip().lower())
    seconds = int(m.group(1)) * _UNITS[m.group(2)] if m else 0
    if not 0 < seconds <= MAX_DAYS * 86400:
        raise GensetsError(f"--expires {text[:20]!r}: give a duration such as 30m, 8h or 2d (at most {MAX_DAYS}d)")
    return dt.timedelta(seconds=seconds)


def _columns(con) -> None:
    """The columns added since the table was first made (a workspace from before has none: added, empty)."""
    have = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = "
                                      "'reviewer_tokens'").fetchall()}
    for name, kind in (("expires", "TIMESTAMP"), ("role", "VARCHAR")):
        if name not in have:
            con.execute(f"ALTER TABLE reviewer_tokens ADD COLUMN {name} {kind}")


def invite(con, name: str, *, role: str = "reviewer", expires: dt.timedelta | None = None) -> str:
    """A new secret token for reviewer ``name`` in ``role`` (their earlier links stay valid until revoked or
    expired), valid for ``expires`` (None: until revoked); only its digest is stored."""
    name = check_reviewer(name)
    if role not in (*ROLES, IMAGES):
        raise GensetsError(f"unknown role {role[:40]!r} (known: {', '.join(ROLES)})")
    token = new_token()
    made = now()
    _columns(con)
    with transaction(con):
        con.execute("INSERT INTO reviewer_tokens (token_sha256, reviewer, created, revoked, expires, role) "
                    "VALUES (?, ?, ?, NULL, ?, ?)", [digest(token), name, made,
                                                     None if expires is None else made + expires, role])
    return token


def revoke(con, name: str) -> int:
    """Revoke every link of reviewer ``name`` still valid; how many. None valid: an error naming who has one."""
    made = now()
    _columns(con)
    with transaction(con):
        n = con.execute("SELECT count(*) FROM reviewer_tokens WHERE reviewer = ? AND revoked IS NULL AND "
                        "(expires IS NULL OR expires > ?)", [name, made]).fetchone()[0]
        if not n:
            known = sorted({r for r, _, _ in active(con).values()})
            raise GensetsError(f"reviewer {name[:64]!r} has no valid link to revoke (invited: "
                               f"{', '.join(known) or 'nobody'})")
        con.execute("UPDATE reviewer_tokens SET revoked = ? WHERE reviewer = ? AND revoked IS NULL", [made, name])
    return n


def active(con) -> dict[str, tuple[str, str, dt.datetime | None]]:
    """digest -> (reviewer, role, expires) of every link not revoked (nor expired now; one expiring later is
    refused from then on by :func:`valid`)."""
    _columns(con)
    return {d: (r, role or "reviewer", exp) for d, r, role, exp in con.execute(
        "SELECT token_sha256, reviewer, role, expires FROM reviewer_tokens WHERE revoked IS NULL AND "
        "(expires IS NULL OR expires > ?)", [now()]).fetchall()}


def valid(entry: tuple | None) -> bool:
    """An entry of :func:`active` (or :func:`links`) that is not revoked and has not expired since it was read."""
    return state_of(entry) == "valid"


def links(con) -> dict[str, tuple[str, str, dt.datetime | None, dt.datetime | None]]:
    """digest -> (reviewer, role, expires, revoked) of every link made, revoked and expired ones included: a page
    whose link ends is told which way it ended (:func:`state_of`)."""
    _columns(con)
    return {d: (r, role or "reviewer", exp, rev) for d, r, role, exp, rev in con.execute(
        "SELECT token_sha256, reviewer, role, expires, revoked FROM reviewer_tokens").fetchall()}


def state_of(entry: tuple | None) -> str:
    """``valid``, ``revoked``, ``expired`` (now), or ``unknown`` (no such link) for an entry of :func:`links` or
    :func:`active`."""
    if entry is None:
        return "unknown"
    if len(entry) > 3 and entry[3] is not None:
        return "revoked"
    return "expired" if entry[2] is not None and entry[2] <= now() else "valid"


def listing(con) -> list[dict]:
    """Every link made, oldest first: reviewer, role, created, expires, revoked and its state (valid, expired,
    revoked); never the secret nor its digest."""
    _columns(con)
    at = now()
    rows = con.execute("SELECT reviewer, coalesce(role, 'reviewer'), created, expires, revoked FROM reviewer_tokens "
                       "ORDER BY created, reviewer").fetchall()
    return [{"reviewer": r, "role": role, "created": c, "expires": e, "revoked": v,
             "state": "revoked" if v is not None else "expired" if e is not None and e <= at else "valid"}
            for r, role, c, e, v in rows]


def ever_invited(con) -> bool:
    """Someone was invited, revoked since or not."""
    return con.execute("SELECT count(*) FROM reviewer_tokens").fetchone()[0] > 0


def images_link(con) -> str:
    """A new images-only token (role :data:`IMAGES`): a Label Studio export in URL mode puts it in each image's
    address, since Label Studio's editor reads images on another origin, with no cookie. It opens the image route
    and nothing else (no page, no decision); ``review invite WS --revoke label-studio-images`` ends it."""
    return invite(con, IMAGES_READER, role=IMAGES)
