"""The review page: ``gensets review serve`` shows the queue in a browser and saves each decision at once.

One Flask app, served by waitress (:func:`serve`: request timeouts, a connection cap, bounded threads) on
loopback by default. DuckDB lets one process at a time
open state.duckdb. The server uses it under a lock and keeps it open between requests (opening it costs more
than a decision), but gives it up as soon as another gensets process asks (:func:`shared.ask_release`: the
review commands, ``finalize``, another server on the same workspace) or after :data:`IDLE_S` unused; it is
recorded in ``.review-server.json`` while it runs. Every decision goes
through :func:`review.decide`, so ``reviews`` and ``review_log`` change together with the reviewer and the time.

Every request needs a link's token, on loopback too (another user of the machine reaches loopback): the
owner's, a secret the server makes for its run and prints in its start-up address (as Jupyter does), or an invited
reviewer's (:mod:`gensets.curation.reviewers`: their name, role and expiry); its ``?token=`` becomes a cookie.
An invited reviewer is who their link says, never a name typed on the page; the owner reviews under the name in
the page's Reviewer field (``--reviewer`` its default), as on one's own machine, and may adjudicate. Inviting
someone changes nothing for a page already open. Without a valid token: 401 (a small HTML page saying how to get
a link; JSON under /api/). In double review only an adjudicator (or the owner) may decide an image two others
already decided (:meth:`ReviewState.adjudicated`).
Every POST carries the session's CSRF token (an HMAC of the token's digest under a secret of the server's,
embedded in the page).

Besides one decision at a time the page sends a range of images decided alike (``/api/bulk``: at most
:data:`BULK_MAX` keys, all or none in one transaction, each a decision of the reviewer) and undos
(``/api/undo``: :func:`review.undo`, the reviewer's own latest decisions taken back by new ones, never a
deletion); it pages in three orders (:data:`queue.SORTS`: page order, most surrogates failing, most confident
surrogate first), shows the config's instructions (:meth:`Builder.instructions`) and, where the config names a
folder of them (``review.references``), a few real images of the class; and each reviewer's decisions and rate.

Nothing grows with the queue: a page reads its rows by keyset from ``queue`` and its counts from
``queue_counts`` (:mod:`gensets.curation.queue`), a decision updates the rows of its image, and an image is
read from its candidate shard at the byte offset recorded at ingest (``images``), when the browser asks for
it. Starting the server reads the config and one settings row; no candidate shard is opened.

"Several objects" is a flag kept in the decision's note (see :data:`FLAG`); a later decision by the
same reviewer keeps it. A comment (``/api/decide``, action ``comment``) is the reviewer's latest decision logged
again with the comment in its note (:func:`queue.with_comment`); ``/api/history`` lists every decision on an
image (:func:`review.history`; in double review the reviewer's own). In double-review mode (recorded in
state.duckdb; the workspace stays in it until ``gensets review mode WS single``, which a running server follows
when it next opens the database) each
image needs decisions from two reviewers: the page shows each reviewer their own decisions only (blind)
and its agreement endpoint only counts and kappa; ``reviews`` holds the latest decision, but finalize
uses :func:`review.verdicts` (the two agree, or someone else adjudicates). :func:`agreement` reports
Cohen's kappa between the first two reviewers of every image, with the disagreements (for the CLI).

A team on one queue: the images of a reviewer's "to review" page are leased to them (:mod:`.leases`: another
page passes them over; in double review an image goes to two reviewers), renewed by the page's polls of
``/api/changes`` (the images decided since the page's cursor, their newest state, the counts) and released by
a decision. Every decision from the page carries the image's version (how many decisions its log holds); in
single review one made on an older version is refused with 409 and the newer decision (:class:`Stale`), and
the reviewer's next decision on it, sent with ``override``, is logged with an override mark in its note.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import threading
import time
from pathlib import Path

from .. import notices
from ..errors import Busy, GensetsError
from ..images import is_image_file
from ..labels.imagenet import imagenet_names
from ..metrics import cohen_kappa
from ..safety import inside, open_regular
from ..shards import read_at
from ..workspace import Workspace
from . import leases, queue, review, reviewers, shared, state
from .queue import FLAG, comment_of, has_flag, with_comment, with_flag, with_override

__all__ = ["FLAG", "has_flag", "with_flag", "ReviewState", "Stopped", "create_app", "serve", "agreement"]
PAGE_SIZE = 60
MIME = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
SUMMARY = ("items", "reviewed_once", "kappa", "observed_agreement")  # what the page may see of agreement
MAX_BODY = 16 * 1024  # a decision is a few hundred bytes: a larger request body is refused unread (413)
UNDO_MAX = 500  # decisions one undo request takes back (the page's last bulk decision at most)
REFERENCES = 4  # real images of a class shown beside its generated ones (review.references)
MAX_KEY = 200  # longer than any sample key: refused without being echoed
BULK_MAX = 500  # keys of one bulk decision (a page holds PAGE_SIZE)
BULK_BODY = BULK_MAX * (MAX_KEY + 8) + 1024  # the largest body of a bulk decision, refused unread beyond
SERVER_WAIT = 10.0  # how long a request waits for state.duckdb held by another process (finalize's snapshot, a
# command, another server's request), then: 503 with one line naming it
IDLE_S = 10.0  # the server gives state.duckdb up after this long unused (else: when another process asks)
SHARED_S = 2.0  # after a release, the server closes state.duckdb after every use for this long
WHERE_MAX = 10_000  # image locations kept for the pages shown (a page has PAGE_SIZE)
POLL_MS = 2000  # how often a page asks /api/changes for others' decisions (and renews its leases)
CHANGES_MAX = 500  # images one /api/changes answer lists; more changed since the page's cursor: it reloads
THREADS = 8  # the server's request threads: decisions take turns at state.duckdb anyway
CONNECTIONS = 500  # connections open at once (below the usual limit of 1024 open files); more wait to be accepted
TIMEOUT_S = 15  # a connection that sends nothing for this long (a half-sent request, an idle keep-alive) is closed
CLEANUP_S = 2  # how often the server looks for such connections
CSRF_HEADER = "X-CSRF-Token"  # every POST carries the page's token in it (review.js)
COOKIE_S = 30 * 86400  # the longest a link's cookie lives (an expiring invitation's: until it expires)
ADJUDICATORS = ("owner", "adjudicator")  # the roles that may settle a double review's disagreement
REFUSAL = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>"
           "<body style=\"font-family: sans-serif; max-width: 40em; margin: 3em auto\"><h1>{title}</h1><p>{why}</p>"
           "</body></html>\n")  # a refusal as a browser shows it (401: how to get a link)
# the page loads only its own script, style and images, and no other site may frame it (clickjacking)
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def agreement(con) -> dict:
    """Agreement of the first two reviewers of every image decided by at least two (Cohen's kappa)."""
    by_key = {key: [(reviewer, review.category(status, label)) for reviewer, status, label, _ in ds]
              for key, ds in review.decisions(con).items()}
    pairs = {k: v[:2] for k, v in by_key.items() if len(v) >= 2}
    out = {"items": len(pairs), "reviewed_once": sum(len(v) == 1 for v in by_key.values()),
           "kappa": None, "observed_agreement": None, "pairs": [], "disagreements": []}
    if not pairs:
        return out
    a = [v[0][1] for v in pairs.values()]
    b = [v[1][1] for v in pairs.values()]
    kappa = cohen_kappa(a, b)
    out["kappa"] = None if kappa != kappa else round(kappa, 4)  # NaN (one label only) -> null
    out["observed_agreement"] = round(sum(x == y for x, y in zip(a, b, strict=True)) / len(a), 4)
    by_pair: dict[tuple, list] = {}
    for v in pairs.values():
        (ra, ca), (rb, cb) = sorted(v)
        by_pair.setdefault((ra, rb), []).append((ca, cb))
    for (ra, rb), cats in sorted(by_pair.items()):
        k = cohen_kappa([c[0] for c in cats], [c[1] for c in cats])
        out["pairs"].append({"reviewers": [ra, rb], "items": len(cats),
                             "kappa": None if k != k else round(k, 4)})
    out["disagreements"] = [{"key": k, "decisions": {r: c for r, c in v}}
                            for k, v in sorted(pairs.items()) if v[0][1] != v[1][1]]
    return out


class Stopped(GensetsError):
    """A request that comes after the server closed its connection (it is stopping): nothing was read or saved."""


class Stale(GensetsError):
    """A decision made on an older version of an image than the latest (someone decided it since): nothing was
    saved; ``newest`` holds the latest decisions of the images concerned (answered with HTTP 409)."""

    def __init__(self, message: str, newest: list[dict]):
        super().__init__(message)
        self.newest = newest


class ReviewState:
    """The queue seen by the page: listing, counts and decisions over state.duckdb, held between requests and
    given up when another process asks (:meth:`_held`, :meth:`release`), so that the review commands,
    ``finalize`` and other servers use it in between."""

    def __init__(self, workspace, *, reviewer: str | None = None, double: bool = False, keep_open: bool = False,
                 page_size: int | None = None):
        """``keep_open``: never give state.duckdb up between requests (a caller alone with the workspace: a test, a
        profile); the server keeps it open while it is in use and gives it up when asked (:meth:`release`)."""
        import secrets

        self.ws = Workspace(workspace)
        self.builder, self.cfg = self.ws.load()
        self.ws.require_state()
        self.lock = threading.Lock()  # one use of the database at a time in this process
        self.lock_sessions = threading.Lock()  # the reviewers' session counts (activity)
        self.closed = False
        self.keep_open = keep_open
        self.con = None  # state.duckdb while this process holds it
        self.used = 0.0  # when it was last used (monotonic)
        self.shared_until = 0.0  # until then (after a release), closed after every use
        self.release_asked = False
        # the page's default name (--reviewer, else GENSETS_REVIEWER); none: each reviewer types theirs on the page
        self.reviewer = reviewer or review.configured_reviewer() or ""
        self.page_size = page_size or PAGE_SIZE  # images per page
        self.sessions: dict[str, tuple] = {}  # reviewer -> (decisions through this server, monotonic time of the first)
        self.class_names = list(self.builder.class_names(self.cfg))
        self.instructions = self.builder.instructions(self.cfg)
        refs = getattr(self.cfg, "review", None)
        self.reference_root = Path(refs.references) if refs is not None and refs.references else None
        self.reference_files: dict[str, list] = {}  # class -> its first REFERENCES image files
        self.imagenet = imagenet_names()
        self.where: dict[str, tuple] = {}  # key -> (shard, offset, size, ext) of the images of pages shown
        self.leases = leases.Leases()  # the images of each reviewer's "to review" page, handed out to them
        self.secret = secrets.token_bytes(32)  # CSRF tokens are HMACs of the session under it
        self.release_key = secrets.token_urlsafe(24)  # what a process asking for the database shows (shared.py)
        self.loopback = True  # serve() says whether it listens on loopback only
        self.cookie = "gensets"  # serve() names it after the port: servers on one host keep their sessions apart
        self.owner_token = reviewers.new_token()  # the owner's link, for this run only (never stored)
        self.owner_digest = reviewers.digest(self.owner_token)
        # digest -> (reviewer, role, expires) (reviewers.active), read whenever the database opens
        self.tokens: dict[str, tuple] = {}
        self.by_invitation = False  # someone was invited (reviewers.ever_invited): the start-up line says so
        # --double: recorded by keep_mode(), once serving; from then on the workspace's mode, read whenever the
        # database opens (gensets review mode switches it)
        self.double_asked, self.mode_kept = double, False
        con = state.connect(self.ws.state_path, wait=SERVER_WAIT)  # the schema, once; the page's tables
        try:
            self._opened(con)
        except BaseException:
            con.close()
            raise
        if keep_open:
            self.con = con
        else:
            con.close()

    def _opened(self, con) -> None:
        """What another process may have changed while this one did not hold the database: the invitations (a
        revoked link stops here) and the page's tables (a build since)."""
        queue.ensure(con)
        self.double = (self.double_asked and not self.mode_kept) or review.is_double(con)
        self.tokens, self.by_invitation = reviewers.active(con), reviewers.ever_invited(con)

    @contextlib.contextmanager
    def _held(self):
        """state.duckdb for one use, under the lock: opened if this process does not hold it (waiting for another
        holder), kept open after it unless someone asked for it (:meth:`release`) in the last :data:`SHARED_S`
        seconds. A wait ends, as :class:`Stopped`, once :meth:`close` was called."""
        with self.lock:
            if self.closed:
                raise Stopped("the review page is stopping: nothing was saved")
            if self.con is None:
                self.con = self._open()
            try:
                yield self.con
            finally:
                self.used = time.monotonic()
                if not self.keep_open and (self.release_asked or self.used < self.shared_until):
                    self._close()

    def _open(self):
        try:
            con = state.connect(self.ws.state_path, schema=False, wait=SERVER_WAIT, notice=None,
                                cancelled=lambda: self.closed)
        except Busy:
            if self.closed:
                raise Stopped("the review page is stopping: nothing was saved") from None
            raise
        try:
            self._opened(con)
        except BaseException:
            con.close()
            raise
        return con

    def _close(self) -> None:
        """Give the database up (the lock held)."""
        if self.con is not None:
            self.con.close()
            self.con = None
        if self.release_asked:
            self.release_asked = False
            self.shared_until = time.monotonic() + SHARED_S

    def release(self) -> None:
        """Another process asks for state.duckdb: given up now, or by the request using it once it is done; for
        :data:`SHARED_S` seconds after, it is closed after every use (the asker gets its turn)."""
        self.release_asked = True
        if self.lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self.lock.release()

    def release_if_idle(self) -> None:
        """Give the database up after :data:`IDLE_S` seconds unused (a process that could not ask gets it then)."""
        if self.con is not None and not self.keep_open and time.monotonic() - self.used > IDLE_S \
                and self.lock.acquire(blocking=False):
            try:
                if self.con is not None and time.monotonic() - self.used > IDLE_S:
                    self._close()
            finally:
                self.lock.release()

    def keep_mode(self) -> None:
        """Record double review in state.duckdb (finalize relies on it); from then on the page follows the recorded
        mode (``gensets review mode`` switches it, the server reading it when it next opens the database)."""
        if self.double:
            with self._held() as con:
                if not review.is_double(con):
                    review.set_double(con)
        self.mode_kept = True

    def close(self) -> None:
        """No use of the database after this one: a request waiting for it gives up (:class:`Stopped`), and this
        returns once the request using it, if any, is done (a decision is then committed)."""
        self.closed = True
        with self.lock:
            self._close()

    # ---------------------------------------------------------------- who
    def identity(self, token: str | None) -> tuple[str | None, str] | None:
        """``(reviewer, role)`` of the link carrying ``token``: the owner's (None: the name in the page's Reviewer
        field, ``--reviewer`` its default; role ``owner``) or an invited reviewer's; None for no token, or one
        unknown, expired or revoked. The invitations are read whenever this process opens the database (while it
        holds it, nobody changes them); an expiry is checked at every request."""
        import hmac

        if not token:
            return None
        d = reviewers.digest(token[:200])  # looked up by digest: no token is compared
        if hmac.compare_digest(d, self.owner_digest):
            return (None, "owner")
        if self.con is None:
            with self._held():
                pass
        entry = self.tokens.get(d)
        return (entry[0], entry[1]) if reviewers.valid(entry) else None

    def reviewer_of(self, token: str | None) -> str | None:
        """The invited reviewer whose link carries ``token`` (see :meth:`identity`); None for none or the owner's."""
        who = self.identity(token)
        return None if who is None else who[0]

    def invited(self) -> bool:
        """Someone was invited (a link revoked since counts)."""
        if self.con is None:
            with self._held():
                pass
        return self.by_invitation

    def expires(self, token: str) -> float | None:
        """Seconds until the link of ``token`` expires (its cookie's lifetime); None: it does not."""
        entry = self.tokens.get(reviewers.digest(token[:200]))
        if entry is None or entry[2] is None:
            return None
        return max((entry[2] - reviewers.now()).total_seconds(), 1.0)

    def adjudicated(self, keys: list, reviewer: str) -> list[str]:
        """Of ``keys``, in double review, the images that two reviewers other than ``reviewer`` already decided:
        deciding them is adjudicating (:func:`review.verdicts`), for an adjudicator only."""
        if not self.double or not keys:
            return []
        with self._held() as con:
            latest = queue.LATEST.format(where="WHERE list_contains(?, l.key)")
            rows = con.execute(f"SELECT key, reviewer FROM ({latest}) WHERE status <> 'pending' "
                               "ORDER BY key, first_seq", [keys]).fetchall()
        first: dict[str, list] = {}
        for key, who in rows:
            first.setdefault(key, []).append(who)
        return [k for k, who in first.items() if len(who) >= 2 and reviewer not in who[:2]]

    def csrf(self, session: str) -> str:
        """The CSRF token of a session (a reviewer's token digest, or a session cookie): every POST carries it."""
        import hashlib
        import hmac

        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    # ---------------------------------------------------------------- reading
    def counts(self, reviewer: str) -> dict:
        with self._held() as con:
            return queue.summary(con, reviewer, self.double)["counts"]

    def page(self, reviewer: str, *, label: str | None = None, config: str | None = None,
             status: str = "todo", after: int | None = None, before: int | None = None, sort: str = "page") -> dict:
        """One page of the queue in the order ``sort`` (:data:`queue.SORTS`) with its details, the filter options,
        the progress counts, the reviewer's activity (``me``) and the cursors of the pages before and after it
        (``after`` / ``before``: a cursor of a page shown before, in the same order)."""
        if status not in queue.VIEWS:
            raise GensetsError(f"unknown status '{status[:40]}' (known: {', '.join(queue.VIEWS)})")
        if sort not in queue.SORTS:
            raise GensetsError(f"unknown sort '{sort[:40]}' (known: {', '.join(queue.SORTS)})")
        lease = status == "todo" and bool(reviewer)  # the work view: its images are handed out (leases.py)
        with self._held() as con:  # under the lock: no other page takes the same images meanwhile
            p = queue.page(con, reviewer, self.double, label=label, config=config, view=status,
                           after=after, before=before, size=self.page_size, sort=sort,
                           taken=self.leases.others(reviewer) if lease else None)
            if lease:
                self.leases.take(reviewer, [it["key"] for it in p["items"]])
            s = queue.summary(con, reviewer, self.double, label=label, config=config, view=status)
            self._details(con, p["items"])
            versions = self._versions(con, [it["key"] for it in p["items"]])
            cursor = self._cursor(con)
        for it in p["items"]:
            it["version"] = versions.get(it["key"], 0)
        return {**p, **s, "me": self.activity(reviewer, s["decided"]), "cursor": cursor, "leased": lease}

    @staticmethod
    def _versions(con, keys: list[str]) -> dict[str, int]:
        """Each image's version: how many decisions its log holds (it only grows: an undo is a decision too)."""
        if not keys:
            return {}
        return dict(con.execute("SELECT key, count(*) FROM review_log WHERE list_contains(?, key) GROUP BY key",
                                [keys]).fetchall())

    @staticmethod
    def _cursor(con) -> int:
        """Where the log ends now: its number of rows (``count(*)`` reads no row). The log is only appended to,
        its rows numbered from 0 (``queue.LOG``'s ``seq``), so the rows after a cursor N are those from seq N on."""
        return con.execute("SELECT count(*) FROM review_log").fetchall()[0][0]

    def _newest(self, con, keys: list[str], reviewer: str | None = None) -> list[dict]:
        """The images' current states for a page: ``status``, ``label``, ``flagged``, ``version`` and, in single
        review, who made the latest decision (``by``) and when; in double review (blind) ``reviewer``'s own
        latest decision and ``n``, how many reviewers decided."""
        if not keys:
            return []
        versions = self._versions(con, keys)
        out = []
        if self.double:
            own = {k: (st, lb, fl) for k, who, st, lb, fl in con.execute(
                "SELECT key, reviewer, status, label, flagged FROM review_latest WHERE list_contains(?, key)",
                [keys]).fetchall() if who == reviewer}
            for key, n, status in con.execute("SELECT key, n, status FROM queue WHERE list_contains(?, key)",
                                              [keys]).fetchall():
                st, lb, fl = own.get(key, ("pending" if status != queue.BELOW else status, None, False))
                st = st if st != "pending" or status != queue.BELOW else status
                out.append({"key": key, "status": st, "label": lb, "flagged": bool(fl), "n": n,
                            "todo": st in ("pending",) and n < 2 and status != queue.BELOW,
                            "version": versions.get(key, 0)})
            return out
        last = {k: (who, t) for k, who, t in con.execute(
            f"SELECT key, arg_max(reviewer, seq), arg_max(time, seq) FROM ({queue.LOG} WHERE list_contains(?, l.key)) "
            "GROUP BY key", [keys]).fetchall()}
        for key, status, label, flagged in con.execute(
                "SELECT key, status, review_label, flagged FROM queue WHERE list_contains(?, key)", [keys]).fetchall():
            who, when = last.get(key, (None, None))
            out.append({"key": key, "status": status, "label": label, "flagged": bool(flagged),
                        "by": who, "time": None if when is None else str(when), "version": versions.get(key, 0)})
        return out

    def changes(self, reviewer: str, since: int | None) -> dict:
        """What changed since the cursor ``since`` (:meth:`_cursor`): the current
        state of every image decided since (:meth:`_newest`; at most :data:`CHANGES_MAX` images, else
        ``reload``), the counts and the new cursor. It renews ``reviewer``'s leases: their page is open."""
        held = self.leases.renew(reviewer) if reviewer else []
        with self._held() as con:
            cursor = self._cursor(con)
            keys = [] if since is None or since >= cursor else [k for (k,) in con.execute(
                "SELECT DISTINCT key FROM review_log WHERE rowid >= ? LIMIT ?", [since, CHANGES_MAX + 1]).fetchall()]
            reload = len(keys) > CHANGES_MAX
            items = [] if reload else self._newest(con, keys, reviewer)
            counts = queue.summary(con, reviewer, self.double)["counts"]
        return {"cursor": cursor, "items": items, "reload": reload, "counts": counts, "leases": len(held)}

    def _details(self, con, items: list[dict]) -> None:
        """Prompt, seed and every surrogate's top-5 (ImageNet names) for the given items, from their provenance;
        where their images lie is kept, so that the browser's requests for them need no database."""
        keys = [r["key"] for r in items]
        if not keys:
            return
        if len(self.where) > WHERE_MAX:
            self.where.clear()
        self.where.update({k: rest for k, *rest in con.execute(
            "SELECT key, shard, byte_offset, nbytes, ext FROM images WHERE list_contains(?, key)", [keys]).fetchall()})
        meta = dict(con.execute("SELECT key, meta FROM samples WHERE list_contains(?, key)", [keys]).fetchall())
        for r in items:
            m = json.loads(meta[r["key"]])
            ids = set(m.get("imagenet_ids") or [])
            r.update(prompt=m.get("prompt"), seed=m.get("seed"), nuisance_kind=m.get("nuisance_kind"),
                     failures=m.get("surrogate_failures"), imagenet_ids=sorted(ids),
                     top1_name=None if r["top1"] is None else self._imagenet_name(r["top1"]))
            r["surrogates"] = [
                {"model": p["model"], "hit": bool(p["hit"]),
                 "top5": [{"name": self._imagenet_name(i),
                           "score": round(float(sc), 4), "target": i in ids}
                          for i, sc in zip(p["top5"], p["scores"], strict=True)]}
                for p in m.get("surrogates") or []]
            r["comment"] = comment_of(r.pop("note", None))

    def _imagenet_name(self, i: int) -> str:
        return self.imagenet[i] if 0 <= i < len(self.imagenet) else str(i)

    # ---------------------------------------------------------------- writing
    def decide(self, key: str, action: str, reviewer: str, *, label: str | None = None,
               flagged: bool | None = None, comment: str | None = None, version: int | None = None,
               override: bool = False) -> dict:
        """Save one decision now: accept, reject, relabel (to ``label``), flag (``flagged``) or comment (``comment``:
        the reviewer's own latest decision logged again with the comment in its note, the flag kept; in single
        review only while it is the image's latest, so that a comment changes no outcome).

        ``version``: the image's version the decision was made on (the page sends it); in single review an older
        one than the image's is refused (:class:`Stale`, nothing saved). ``override``: the reviewer saw the newer
        decision (the 409) and replaces it knowingly: logged with an override mark in its note
        (:func:`queue.with_override`). The reviewer's lease on the image ends."""
        reviewer = _named(reviewer)
        if action not in (*review.ACTIONS, "flag", "comment"):
            raise GensetsError(f"unknown action '{action}' (known: accept, reject, relabel, flag, comment)")
        _check_version(version)
        with self._held() as con:
            row = next(iter(con.execute("SELECT status, label, note FROM reviews WHERE key = ?",
                                        [key]).fetchall()), None)
            if row is None:
                raise GensetsError(f"sample '{key}' is not in the review queue")
            over = self._stale(con, {key: version}, reviewer) if version is not None and not self.double else {}
            last = row  # single review: the image's latest decision; a comment needs it to be the reviewer's own
            if self.double or action == "comment":  # the reviewer's own latest decision, if any
                row = next((r[1:] for r in con.execute(
                    "SELECT reviewer, status, label, note FROM review_latest WHERE key = ?", [key]).fetchall()
                    if r[0] == reviewer), ("pending", None, None))
            status, current_label, note = row
            if action == "comment" and (status == "pending" or not self.double and row != last):
                raise GensetsError("decide on this image first (a, r or l), then comment it: a comment goes with "
                                   "your latest decision, and changes no outcome")
            if action in ("flag", "comment"):
                if action == "flag" and not isinstance(flagged, bool):
                    raise GensetsError(f"flag needs 'flagged': true or false, got {json.dumps(flagged)[:40]}")
                if self.double and status == "pending":
                    raise GensetsError("decide on this image first (a, r or l), then flag it")
                note = with_flag(note, flagged) if action == "flag" else with_comment(note, comment)
                label = current_label if status == "relabeled" else None
            else:
                status = review.ACTIONS[action]
            newest = over.get(key)
            note = with_override(note, f"{newest['by']}: {newest['status']}" if override and newest else None)
            review.decide(con, [key], status, label=label, reviewer=reviewer, note=note,
                          valid_labels=self.class_names)
            s = queue.summary(con, reviewer, self.double)
            new_version = self._versions(con, [key]).get(key, 0)
        self.leases.release(reviewer, [key])
        return {"key": key, "status": status, "label": label, "flagged": has_flag(note), "comment": comment_of(note),
                "version": new_version, "override": bool(override and newest), "counts": s["counts"],
                "me": self.activity(reviewer, s["decided"], 1)}

    def _stale(self, con, versions: dict[str, int | None], reviewer: str) -> dict[str, dict]:
        """Single review: refused (:class:`Stale`, with the images' newest states) where an image's version is not
        the one the decision was made on; else the newest states of the images whose latest decision is another
        reviewer's (what an override replaces)."""
        keys = [k for k, v in versions.items() if v is not None]
        current = {n["key"]: n for n in self._newest(con, keys, reviewer)}
        moved = [current[k] for k in keys if k in current and current[k]["version"] != versions[k]]
        if moved:
            first = moved[0]
            raise Stale(f"{first['by']} decided this image meanwhile ({first['status']}, {first['time']}): nothing "
                        "was saved; decide again to override", moved)
        return {k: n for k, n in current.items() if n["by"] not in (None, reviewer) and n["status"] != "pending"}

    def bulk(self, keys, action: str, reviewer: str, versions: dict | None = None) -> dict:
        """Accept or reject the images ``keys`` (at most :data:`BULK_MAX`) at once: one decision of ``reviewer``
        each, all in one transaction or none (an unknown key refuses them all). Each image keeps its "several
        objects" flag (the reviewer's own, in double review). ``versions`` (key -> the version the page showed):
        in single review, one image decided meanwhile refuses them all (:class:`Stale`)."""
        reviewer = _named(reviewer)
        if action not in ("accept", "reject"):
            raise GensetsError(f"unknown bulk action '{action}' (known: accept, reject)")
        if not isinstance(keys, list) or not 1 <= len(keys) <= BULK_MAX \
                or not all(isinstance(k, str) and 0 < len(k) <= MAX_KEY for k in keys):
            raise GensetsError(f"'keys' must be a list of 1 to {BULK_MAX} sample keys")
        keys = list(dict.fromkeys(keys))
        status = review.ACTIONS[action]
        if versions is not None and not isinstance(versions, dict):
            raise GensetsError("'versions' must map sample keys to the versions the page showed")
        versions = {k: v for k, v in (versions or {}).items() if k in keys}
        for v in versions.values():
            _check_version(v)
        with self._held() as con:
            notes = dict(con.execute("SELECT key, note FROM reviews WHERE list_contains(?, key)", [keys]).fetchall())
            missing = [k for k in keys if k not in notes]
            if missing:
                raise GensetsError(f"sample '{missing[0][:MAX_KEY]}' is not in the review queue: nothing was saved")
            if versions and not self.double:
                self._stale(con, versions, reviewer)
            notes = {k: with_override(n, None) for k, n in notes.items()}
            if self.double:  # the reviewer's own notes
                own = dict(con.execute("SELECT key, note FROM review_latest WHERE reviewer = ? AND "
                                       "list_contains(?, key)", [reviewer, keys]).fetchall())
                notes = {k: own.get(k) for k in keys}
            review.record(con, [(k, status, None, reviewer, notes[k]) for k in keys])
            s = queue.summary(con, reviewer, self.double)
            now = self._versions(con, keys)
        self.leases.release(reviewer, keys)
        return {"status": status, "items": [{"key": k, "status": status, "label": None, "flagged": has_flag(notes[k]),
                                             "version": now.get(k, 0)} for k in keys], "counts": s["counts"],
                "me": self.activity(reviewer, s["decided"], len(keys))}

    def history(self, key: str, reviewer: str) -> list[dict]:
        """Every decision on ``key`` (:func:`review.history`); in double review the reviewer's own only (blind)."""
        with self._held() as con:
            rows = review.history(con, key, reviewer=_named(reviewer) if self.double else None)
        return [{**r, "time": str(r["time"])} for r in rows]

    def undo(self, reviewer: str, n: int = 1) -> dict:
        """Take back ``reviewer``'s ``n`` latest decisions (:func:`review.undo`): the images' states as restored."""
        reviewer = _named(reviewer)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= UNDO_MAX:
            raise GensetsError(f"'n' must be a whole number from 1 to {UNDO_MAX}")
        with self._held() as con:
            undone = review.undo(con, reviewer, n)
            s = queue.summary(con, reviewer, self.double)
            versions = self._versions(con, [k for k, *_ in undone])
        return {"items": [{"key": k, "status": st, "label": lb, "flagged": has_flag(note), "version": versions.get(k, 0)}
                          for k, st, lb, note in undone], "counts": s["counts"], "me": self.activity(reviewer, s["decided"])}

    def activity(self, reviewer: str, decided: int, made: int = 0) -> dict:
        """What the page says of a reviewer: ``decided``, the images their latest decision decides (the queue's
        counts); ``session``, the decisions they made through this server (``made`` more now; an undo is none),
        and its ``rate`` per hour since the first of them (over at least a minute; None before any)."""
        with self.lock_sessions:
            n, first = self.sessions.get(reviewer, (0, None))
            if made:
                n, first = n + made, first if first is not None else time.monotonic()
                self.sessions[reviewer] = (n, first)
        rate = None if first is None else round(n / max(time.monotonic() - first, 60.0) * 3600, 1)
        return {"decided": decided, "session": n, "rate": rate}

    def references(self, label: str) -> list:
        """The first :data:`REFERENCES` image files of ``label``'s folder under ``review.references`` (named as the
        class, or with ``_`` for its spaces); none without such a folder. ``label`` must be a class."""
        if self.reference_root is None:
            return []
        if label not in self.class_names:
            raise GensetsError(f"unknown class '{label[:60]}'")
        if label not in self.reference_files:
            files = []
            for name in dict.fromkeys((label, label.replace(" ", "_"))):
                try:
                    folder = inside(self.reference_root, name)
                except GensetsError:  # a class name that is no folder name (a '/', '..')
                    continue
                if folder.is_dir():
                    files = [f for f in sorted(folder.iterdir()) if is_image_file(f) and f.is_file()
                             and self._contained(f)][:REFERENCES]
                    break
            self.reference_files[label] = files
        return self.reference_files[label]

    def _contained(self, path: Path) -> bool:
        """``path`` lies in the reference folder (a symlink leading out of it is passed over)."""
        try:
            inside(self.reference_root, path.relative_to(self.reference_root))
        except (GensetsError, ValueError):
            return False
        return True

    def reference(self, label: str, i: int) -> tuple[bytes, str]:
        """The ``i``-th reference image of ``label``: bytes and type; IndexError when there is none."""
        import mimetypes

        path = self.references(label)[i]
        with open_regular(path) as f:
            data = f.read()
        return data, mimetypes.guess_type(path.name)[0] or "application/octet-stream"

    def agreement(self) -> dict:
        """The page's view of agreement: counts and kappa, never anyone's decisions."""
        with self._held() as con:
            a = agreement(con)
        return {k: a[k] for k in SUMMARY}

    def image(self, key: str) -> tuple[bytes, str]:
        """An image's bytes, read at its offset in its candidate shard; KeyError if the key has none. An image of
        a page shown is found without the database."""
        if key in self.where:
            shard, offset, size, ext = self.where[key]
            where = (self.ws.candidate(shard), offset, size, ext)
        else:
            with self._held() as con:
                where = state.images_of(con, [key], self.ws.candidate).get(key)
        if where is None:
            raise KeyError(key)
        path, offset, size, ext = where
        return read_at(path, offset, size, key), MIME.get(ext, "application/octet-stream")


def _check_version(version) -> None:
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        raise GensetsError(f"'version' must be a whole number (the image's version on the page), got "
                           f"{json.dumps(version)[:20]}")


def _named(reviewer) -> str:
    """The reviewer of a decision from the page, checked; none named (the server has no default): refused."""
    if reviewer is None or isinstance(reviewer, str) and not reviewer.strip():
        raise GensetsError("enter your name in Reviewer first: it is published with your decisions (the server "
                           f"has no default name: --reviewer NAME or {review.REVIEWER_ENV})")
    return review.check_reviewer((reviewer or "").strip())


def host_allowed(host: str, allowed: set[str]) -> bool:
    """A request's Host (``name:port``) is one the server answers to: one of ``allowed``, or, when ``allowed``
    holds ``*:PORT`` (bound to every address), any IP address with that port. A name that is not in ``allowed``
    is refused whatever it resolves to (DNS rebinding)."""
    if host in allowed:
        return True
    name, _, port = host.rpartition(":")
    try:
        ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return f"*:{port}" in allowed


def create_app(rs: ReviewState, *, allowed_hosts: set[str] | None = None):
    """The Flask app over a ReviewState. ``allowed_hosts`` (host:port, see :func:`host_allowed`) guards against
    DNS rebinding; a POST must be JSON from the page's own origin, of at most :data:`MAX_BODY` bytes, and carry
    the session's CSRF token (:data:`CSRF_HEADER`). Every request but the page's script and style needs a link's
    token (:func:`_identify`); the owner's is ``rs.owner_token``."""
    from urllib.parse import urlencode

    from flask import Flask, Response, abort, g, jsonify, render_template, request

    app = Flask(__name__)
    app.json.sort_keys = False
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    @app.before_request
    def _guard():
        if allowed_hosts is not None and not host_allowed(request.host, allowed_hosts):
            abort(403)
        if request.path == shared.RELEASE_PATH:
            return _release(rs, request)
        if request.method == "OPTIONS" and request.path.startswith("/image/"):
            return _image_preflight()
        if request.path == "/api/bulk":
            request.max_content_length = BULK_BODY
        if request.method == "POST":
            if not request.is_json:  # no cross-site form posts
                abort(415)
            origin = request.headers.get("Origin")
            if (origin and origin.split("://", 1)[-1] != request.host) \
                    or request.headers.get("Sec-Fetch-Site") == "cross-site":
                abort(403)
        if request.path.startswith("/static/"):
            return None
        refused = _identify(rs, request, g)
        if refused is not None:
            return refused
        if request.method == "POST" and not _csrf_ok(request.headers.get(CSRF_HEADER), g.csrf):
            return _refusal(request, 403, "this request lacks the page's CSRF token: reload the review page")
        if request.method == "POST":
            return _adjudicating(rs, request, g)
        return None

    @app.after_request
    def _headers(response):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        if request.path.startswith("/image/"):  # Label Studio's editor (another origin) reads it by XHR
            response.headers["Access-Control-Allow-Origin"] = "*"
        return response

    @app.errorhandler(Stale)
    def _stale(e):
        return jsonify(error=str(e), newest=e.newest), 409

    @app.errorhandler(GensetsError)
    def _bad(e):
        return jsonify(error=str(e)), 503 if isinstance(e, (Stopped, Busy)) else 400

    def _who(asked) -> str:
        """The reviewer of a request: the link's (a different name asked for is refused), else the name asked
        for, else the server's default."""
        if g.reviewer is not None:
            if asked and asked != g.reviewer:
                abort(_refusal(request, 403, f"you review as {g.reviewer} (your link): not as {str(asked)[:64]!r}"))
            return g.reviewer
        return (asked or rs.reviewer).strip()[:64] or rs.reviewer

    def _query():
        a = request.args
        reviewer = _who(a.get("reviewer"))
        cursors = {}
        for name in ("after", "before"):
            value = a.get(name) or None
            if value is not None and not (value.isascii() and value.isdecimal()):
                raise GensetsError(f"{name} must be a whole number (a page cursor), got {value[:20]!r}")
            cursors[name] = None if value is None else int(value)
        return reviewer, {"label": a.get("class") or None, "config": a.get("config") or None,
                          "status": a.get("status") or "todo", "sort": a.get("sort") or "page", **cursors}

    @app.get("/")
    def index():
        a = request.args
        reviewer, q = _query()
        status = q["status"]
        p = rs.page(reviewer, **q)
        return render_template(
            "review.html", p=p, reviewer=reviewer, double=rs.double, class_names=rs.class_names,
            filters={"class": a.get("class") or "", "config": a.get("config") or "", "status": status,
                     "sort": q["sort"]},
            title=rs.cfg.pretty_name, workspace=str(rs.ws.root), csrf=g.csrf, signed_in=g.reviewer is not None,
            role=g.role,
            statuses=["todo", "pending", "accepted", "rejected", "relabeled", "flagged", "all"],
            sorts={"page": "page order", "failures": "most surrogates fail", "confidence": "most confident surrogate"},
            instructions=rs.instructions,
            references=rs.reference_root is not None, undo_max=UNDO_MAX, bulk_max=BULK_MAX, poll_ms=POLL_MS)

    @app.get("/image/<key>")
    def image(key):
        try:
            data, mime = rs.image(key)
        except KeyError:
            abort(404)
        return Response(data, mimetype=mime, headers={"Cache-Control": "private, max-age=86400, immutable"})

    @app.get("/api/items")
    def items():
        reviewer, q = _query()
        return jsonify(rs.page(reviewer, **q))

    @app.get("/api/counts")
    def counts():
        return jsonify(rs.counts(_who(request.args.get("reviewer"))))

    @app.post("/api/decide")
    def decide():
        try:
            d = json.loads(request.get_data(cache=False))  # over MAX_BODY: 413 before anything is read
        except (ValueError, RecursionError):
            d = None
        if not isinstance(d, dict) or not isinstance(d.get("key"), str):
            raise GensetsError("a JSON object with 'key' and 'action' is needed")
        if len(d["key"]) > MAX_KEY:
            raise GensetsError(f"'key' is longer than {MAX_KEY} characters: no sample has such a key")
        if not isinstance(d.get("reviewer") or "", str) or not isinstance(d.get("label") or "", str):
            raise GensetsError("'reviewer' and 'label' must be strings")
        reviewer = _who(d.get("reviewer")) if g.reviewer is not None else (d.get("reviewer") or rs.reviewer)
        t0 = time.perf_counter()
        out = rs.decide(d["key"], str(d.get("action"))[:40], reviewer, label=d.get("label"),
                        flagged=d.get("flagged"), comment=d.get("comment"), version=d.get("version"),
                        override=d.get("override") is True)
        out["ms"] = round(1000 * (time.perf_counter() - t0), 1)
        return jsonify(out)

    def _body() -> dict:
        try:
            d = json.loads(request.get_data(cache=False))  # over the body limit: 413 before anything is read
        except (ValueError, RecursionError):
            d = None
        if not isinstance(d, dict) or not isinstance(d.get("reviewer") or "", str):
            raise GensetsError("a JSON object is needed ('reviewer', when given, a string)")
        return d

    def _poster(d: dict) -> str:
        return _who(d.get("reviewer")) if g.reviewer is not None else (d.get("reviewer") or rs.reviewer)

    @app.post("/api/bulk")
    def bulk():
        d = _body()
        return jsonify(rs.bulk(d.get("keys"), str(d.get("action"))[:40], _poster(d), d.get("versions")))

    @app.get("/api/changes")
    def changes():
        since = request.args.get("since") or None
        if since is not None and not (since.lstrip("-").isascii() and since.lstrip("-").isdecimal()):
            raise GensetsError(f"since must be a whole number (a cursor of /api/changes), got {since[:20]!r}")
        return jsonify(rs.changes(_who(request.args.get("reviewer")), None if since is None else int(since)))

    @app.post("/api/undo")
    def undo():
        d = _body()
        return jsonify(rs.undo(_poster(d), d.get("n", 1)))

    @app.get("/api/history")
    def history():
        key = request.args.get("key") or ""
        if not 0 < len(key) <= MAX_KEY:
            raise GensetsError(f"'key' must name a sample (1 to {MAX_KEY} characters)")
        return jsonify({"key": key, "history": rs.history(key, _who(request.args.get("reviewer")))})

    @app.get("/api/references")
    def references():
        label = request.args.get("class") or ""
        return jsonify([f"/reference/{i}?{urlencode({'class': label})}" for i in range(len(rs.references(label)))])

    @app.get("/reference/<int:i>")
    def reference(i):
        try:
            data, mime = rs.reference(request.args.get("class") or "", i)
        except IndexError:
            abort(404)
        return Response(data, mimetype=mime, headers={"Cache-Control": "private, max-age=3600"})

    @app.get("/api/agreement")
    def agreement_():
        return jsonify(rs.agreement())

    return app


def _identify(rs: ReviewState, request, g):
    """Who sends ``request``, into ``g`` (``reviewer``: the invited reviewer, None for the owner, who
    reviews under the name the request gives; ``role``; ``csrf``: the session's CSRF token); a response when it
    is refused. A link's ``?token=`` becomes a cookie (HttpOnly, SameSite=Lax; for an invitation that expires,
    until then) and the browser goes on to the same address without it (out of its history and of the page's
    links). A request without a valid token is refused (401), on loopback too."""
    from urllib.parse import quote, urlencode

    from flask import redirect

    link = request.args.get("token") if request.method == "GET" else None
    image = request.path.startswith("/image/")
    if link is not None:
        who = rs.identity(link)
        if who is None:
            return _refusal(request, 401, "this review link is unknown, expired or revoked: ask whoever runs the "
                            "review for a new one (gensets review invite WORKSPACE NAME)")
        if image:  # an image read by another origin's page (Label Studio's editor): no cookie, no redirect
            g.reviewer, g.role = who
            g.csrf = None
            return None
        if who[1] == reviewers.IMAGES:
            return _refusal(request, 403, "this link opens images only (a Label Studio export's): the review page "
                            "needs the address `gensets review serve` printed, or a personal link")
        rest = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "token"])
        # a path of this server, never another site's address: every byte but letters, digits and "/" escaped
        # (a browser drops a tab or newline and reads "\\" as "/": "/\t/evil.example" is "//evil.example" to it),
        # and one leading "/" ("//host/..." is an address)
        response = redirect("/" + quote(request.path, safe="/").lstrip("/") + (f"?{rest}" if rest else ""), code=303)
        lifetime = rs.expires(link)
        response.set_cookie(rs.cookie, link, max_age=int(min(lifetime or COOKIE_S, COOKIE_S)), httponly=True,
                            samesite="Lax")
        return response
    token = request.cookies.get(rs.cookie)
    who = rs.identity(token)
    if who is None:
        return _refusal(request, 401, "this review page needs a link: the address `gensets review serve` printed "
                        "(it ends in ?token=...), or a personal link from whoever runs the review "
                        "(gensets review invite WORKSPACE NAME)")
    if who[1] == reviewers.IMAGES and not image:
        return _refusal(request, 403, "this link opens images only (a Label Studio export's)")
    g.reviewer, g.role = who
    g.csrf = rs.csrf("t:" + reviewers.digest(token))
    return None


def _adjudicating(rs: ReviewState, request, g):
    """In double review, a decision (``/api/decide``, ``/api/bulk``) on an image two other reviewers already
    decided settles it (:func:`review.verdicts`): refused (403) unless the request's role may adjudicate."""
    if not rs.double or g.role in ADJUDICATORS or request.path not in ("/api/decide", "/api/bulk"):
        return None
    try:
        d = json.loads(request.get_data(cache=True))  # kept for the route (over the body limit: 413)
    except (ValueError, RecursionError):
        return None  # the route says what is wrong with it
    if not isinstance(d, dict):
        return None
    keys = [d.get("key")] if request.path == "/api/decide" else d.get("keys")
    reviewer = g.reviewer or d.get("reviewer")
    if not isinstance(keys, list) or not isinstance(reviewer, str) \
            or not all(isinstance(k, str) and 0 < len(k) <= MAX_KEY for k in keys[:BULK_MAX]):
        return None
    settled = rs.adjudicated(keys[:BULK_MAX], reviewer.strip())
    if settled:
        return _refusal(request, 403, f"'{settled[0]}' was already decided by two other reviewers: only an "
                        "adjudicator settles it (gensets review invite WORKSPACE NAME --role adjudicator)")
    return None


def _image_preflight():
    """The CORS preflight of the image route: GET from any origin, no credentials (``--images url`` tasks: Label
    Studio's editor loads each image by XHR from its own origin). No other route answers another origin."""
    from flask import Response

    return Response(status=204, headers={"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET",
                                         "Access-Control-Max-Age": "86400"})


def _release(rs: ReviewState, request):
    """Another gensets process waits for state.duckdb (:func:`shared.ask_release`): it shows the key this server
    recorded in ``.review-server.json`` (readable by whoever can write the workspace), and the server gives the
    database up (:meth:`ReviewState.release`). No page, no session, nothing else."""
    import hmac

    from flask import Response

    sent = request.headers.get(shared.RELEASE_HEADER) or ""
    if request.method != "POST" or not hmac.compare_digest(sent.encode(), rs.release_key.encode()):
        return Response(status=403)
    rs.release()
    return Response(status=204)


def _csrf_ok(sent: str | None, expected: str) -> bool:
    import hmac

    return isinstance(sent, str) and hmac.compare_digest(sent.encode(), expected.encode())


def _refusal(request, code: int, why: str):
    """A refusal in one line: JSON ``{"error": why}`` for the page's script, a small HTML page for a browser."""
    from html import escape

    from flask import Response, jsonify

    if request.path.startswith("/api/"):
        response = jsonify(error=why)
    else:
        title = "This review page needs a link" if code == 401 else "Refused"
        response = Response(REFUSAL.format(title=title, why=escape(why)), mimetype="text/html")
    response.status_code = code
    return response


class _Stop:
    """The handler of SIGINT and SIGTERM in :func:`serve`. Until the server serves, it raises KeyboardInterrupt
    (start-up stops where it is). Once it serves, the first signal raises nothing: it only asks the loop of
    :func:`serve` to end at its next turn, so that no exception lands inside the server's handling of a connection
    or inside the closing of the database; a second one ends the process at once (a decision being written
    then is rolled back by DuckDB, and was never answered)."""

    serving = asked = False

    def __call__(self, signum, frame):
        if not self.serving:
            raise KeyboardInterrupt
        if self.asked:
            os.write(2, b"review page stopped at once; every answered decision is in state.duckdb\n")
            os._exit(128 + signum)
        self.asked = True


def serve(workspace, *, host: str = "127.0.0.1", port: int = 8765, reviewer: str | None = None,
          double: bool = False, announce=print, page_size: int | None = None) -> None:
    """Serve the review page until SIGINT (Ctrl-C) or SIGTERM; in the main thread it sets their handlers
    (:class:`_Stop`: also where the shell started it with SIGINT ignored). Stopping closes the listening
    socket, lets the request holding the database finish and closes the database; connections still open
    (idle keep-alive, half-sent requests) are left to the end of the process, and a request that reaches the
    database after that is answered 503 (:class:`Stopped`).

    The server is waitress (pure Python, no C build, in production use for years, maintained by the Pylons
    project): one event loop reads and writes every connection and only whole requests reach its
    :data:`THREADS` threads, so a half-sent request holds no thread; a connection silent for
    :data:`TIMEOUT_S` is closed, at most :data:`CONNECTIONS` are open at once (more wait in the listen backlog),
    and a body beyond :data:`BULK_BODY` is refused before it is read. Beyond loopback it serves plain HTTP:
    a reverse proxy with TLS belongs in front (README)."""
    import logging

    from waitress import wasyncore
    from waitress.server import create_server

    stop = _Stop()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
    rs = ReviewState(workspace, reviewer=reviewer, double=double, page_size=page_size)
    logging.getLogger("waitress").setLevel(logging.ERROR)  # no line per queued task or full connection table
    loopback = rs.loopback = host in ("127.0.0.1", "localhost", "::1")
    allowed: set[str] = set()  # filled once the port is known (--port 0 picks a free one)
    try:
        server = create_server(create_app(rs, allowed_hosts=allowed), host="127.0.0.1" if host == "localhost" else host,
                               port=port, threads=THREADS, connection_limit=CONNECTIONS, channel_timeout=TIMEOUT_S,
                               cleanup_interval=CLEANUP_S, max_request_body_size=BULK_BODY, ident="gensets",
                               clear_untrusted_proxy_headers=True, asyncore_use_poll=True)
    except (OSError, ValueError) as e:
        rs.close()
        why = getattr(e, "strerror", None) or str(e)
        busy = "; --port 0 picks a free port" if "in use" in why.lower() else ""
        raise GensetsError(f"cannot listen on {host}:{port} ({why}){busy}") from None
    registered = False
    try:
        rs.keep_mode()  # only now: a server that failed to start leaves the workspace's mode alone
        port = server.effective_port
        rs.cookie = f"gensets-{port}"
        shown = f"[{host}]" if ":" in host else host
        # the loopback names, and the address given; bound to every address, any IP address (never a host name)
        allowed.update(f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]", shown))
        if host in ("0.0.0.0", "::", ""):
            allowed.add(f"*:{port}")
        mode = "double review" if rs.double else "single review"
        if not loopback:
            notices.warn(f"warning: {shown}:{port} is not loopback and serves plain HTTP: reviewers' links and images "
                         "cross the network unencrypted (a TLS proxy in front of it keeps them private)")
        url = f"http://{shown}:{port}/"
        shared.register(rs.ws.root, url, rs.release_key)
        registered = True
        invited = len({r for r, _, _ in rs.tokens.values()}) if rs.invited() else 0
        who = (f"you: {rs.reviewer}" if rs.reviewer else "you: the name typed on the page") \
            + (f"; {invited} invited reviewer(s)" if invited else "")
        # the owner's own link: whoever opens it is the owner, so it is printed here only
        announce(f"review page: {url}?token={rs.owner_token}  ({rs.counts(rs.reviewer)['total']} images, {mode}, "
                 f"{who}; Ctrl-C to stop)", flush=True)
        stop.serving = True  # from here on a signal raises nothing (one just before: the finally below)
        while not stop.asked:  # one turn of the event loop at least every 0.1 s, to see a stop asked
            wasyncore.loop(timeout=0.1, map=server._map, use_poll=True, count=1)
            rs.release_if_idle()
    finally:
        # no new connection (the listening socket closed; the loop's wake-up pipe stays, for request threads still
        # finishing); its request threads are daemons, not waited for
        wasyncore.dispatcher.close(server)
        rs.close()
        if registered:
            shared.unregister(rs.ws.root)
