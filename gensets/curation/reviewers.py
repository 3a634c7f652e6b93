"""Who may review: personal links to the review page (``gensets review invite WS NAME``).

A link carries a secret token (:func:`secrets.token_urlsafe`); state.duckdb keeps only its sha256, with the
reviewer's name and when it was made (``reviewer_tokens``), so a copy of the database gives nobody a way in.
The review page takes a reviewer's identity from the token (a cookie set from the link), never from a name
typed on the page. ``gensets review revoke WS NAME`` ends every link of that reviewer: a running page reads
the invitations whenever it opens the database again, which it does after giving it up to the command.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from ..db import transaction
from ..errors import GensetsError
from .review import check_reviewer

TOKEN_BYTES = 32  # 256 bits of randomness: 43 URL-safe characters


def digest(token: str) -> str:
    """What is stored of a token: its sha256 (hex)."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def invite(con, name: str) -> str:
    """A new secret token for reviewer ``name`` (their earlier links stay valid until revoked); only its
    digest is stored."""
    name = check_reviewer(name)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    with transaction(con):
        con.execute("INSERT INTO reviewer_tokens VALUES (?, ?, ?, NULL)", [digest(token), name, now])
    return token


def revoke(con, name: str) -> int:
    """Revoke every active link of reviewer ``name``; how many. None active: an error naming who has one."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    with transaction(con):
        n = con.execute("SELECT count(*) FROM reviewer_tokens WHERE reviewer = ? AND revoked IS NULL",
                        [name]).fetchone()[0]
        if not n:
            known = sorted(active(con).values())
            raise GensetsError(f"reviewer {name[:64]!r} has no active link to revoke (invited: "
                               f"{', '.join(sorted(set(known))) or 'nobody'})")
        con.execute("UPDATE reviewer_tokens SET revoked = ? WHERE reviewer = ? AND revoked IS NULL", [now, name])
    return n


def active(con) -> dict[str, str]:
    """digest -> reviewer of every link not revoked."""
    return dict(con.execute("SELECT token_sha256, reviewer FROM reviewer_tokens WHERE revoked IS NULL").fetchall())


def ever_invited(con) -> bool:
    """Someone was invited, revoked since or not: the page then admits links only (revoking the last link does
    not open it to everyone)."""
    return con.execute("SELECT count(*) FROM reviewer_tokens").fetchone()[0] > 0
