"""The queue as the review page sees it: pages, counts, decisions, versions, changes, a reviewer's activity.

:class:`ReviewState` reads and writes state.duckdb for ``gensets review serve`` (held between requests and given
up when another process asks: :class:`~.holding.Holder`). Every decision goes through :func:`review.decide` or
:func:`review.record`, so ``reviews`` and ``review_log`` change together with the reviewer and the time.

Besides one decision at a time the page sends a range of images decided alike (:meth:`ReviewState.bulk`: at most
:data:`BULK_MAX` keys, all or none in one transaction, each a decision of the reviewer) and undos
(:meth:`ReviewState.undo`: :func:`review.undo`, the reviewer's own latest decisions taken back by new ones, never a
deletion); it pages in three orders (:data:`queue.SORTS`), shows the config's instructions
(:meth:`Builder.instructions`) and, where the config names a folder of them (``review.references``), a few real
images of the class; and each reviewer's decisions and rate.

Nothing grows with the queue: a page reads its rows by keyset from ``queue`` and its counts from
``queue_counts`` (:mod:`gensets.curation.queue`), a decision updates the rows of its image, and an image is
read from its candidate shard at the byte offset recorded at ingest (``images``), when the browser asks for it.

A decision's note is its reviewer's own: their "several objects" flag (:data:`queue.FLAG`) and comment, kept by their
later decisions, never another reviewer's (a comment, ``action`` ``comment``, is the reviewer's latest decision
logged again with the comment: :func:`queue.with_comment`). In double review (recorded in state.duckdb; ``gensets
review mode`` switches it, the server following when it next opens the database) each image needs decisions from
two reviewers: a reviewer sees their own decisions only (blind); an adjudicator (or the owner) also sees the
disputes (:func:`team.disputes`: the images whose two reviewers disagree, with both decisions and notes), first.

A team on one queue: the images of a reviewer's "to review" page are handed out (:mod:`.leases`, in
state.duckdb: :data:`leases.HAND_OUT` at a time), renewed by the page's polls of ``/api/changes`` (the images
decided since the page's cursor, their newest state, the counts) and released by a decision. Every decision from
the page carries the image's version (how many decisions its log holds); in single review one made on an older
version is refused with 409 and the newer decision (:class:`Stale`), and the reviewer's next decision on it, sent
with ``override``, is logged with an override mark in its note.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from pathlib import Path

from ..errors import GensetsError
from ..images import is_image_file
from ..labels.imagenet import imagenet_names
from ..safety import inside, open_regular
from ..shards import read_at
from ..workspace import Workspace
from . import leases, queue, review, reviewers, state, team
from .holding import SERVER_WAIT, Holder, Stopped
from .queue import DISPUTED, comment_of, has_flag, with_comment, with_flag, with_override
from .sessions import Sessions

__all__ = ["MIME", "ReviewState", "Stale", "Stopped"]
PAGE_SIZE = 60  # images per page of a view that hands nothing out (all, accepted, ...)
MIME = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
SUMMARY = ("items", "reviewed_once", "kappa", "observed_agreement")  # what a plain reviewer's page sees of agreement
UNDO_MAX = 500  # decisions one undo request takes back (the page's last bulk decision at most)
REFERENCES = 4  # real images of a class shown beside its generated ones (review.references)
MAX_KEY = 200  # longer than any sample key: refused without being echoed
BULK_MAX = 500  # keys of one bulk decision (a page holds PAGE_SIZE)
WHERE_MAX = 10_000  # image locations kept for the pages shown (a page has PAGE_SIZE)
CHANGES_MAX = 500  # images one /api/changes answer lists; more changed since the page's cursor: it reloads
LEADS = ("owner", "adjudicator")  # the roles that see the team's progress and double review's disputes


def audit_neighbours(con, items: list[dict]) -> None:
    """A flagged image's near-duplicates and copies of reference images, from state.duckdb's ``audit_neighbours``
    (written by ``gensets audit WORKSPACE`` and finalize's audit stage; absent before either ran): one field per
    neighbour, its methods and distances; a neighbour in this workspace (``source`` self) with its key as
    ``image``, which the page shows beside it."""
    if not items or not con.execute("SELECT count(*) FROM information_schema.tables "
                                    "WHERE table_name = 'audit_neighbours'").fetchall()[0][0]:
        return
    rows = con.execute("SELECT key, reference, neighbour, source, method, hamming, cosine FROM audit_neighbours "
                       "WHERE key IN (SELECT unnest(?)) ORDER BY key, reference, neighbour, method",
                       [[r["key"] for r in items]]).fetchall()
    found: dict[tuple, list[str]] = {}
    for key, reference, neighbour, source, method, hamming, cosine in rows:
        found.setdefault((key, reference, neighbour, source), []).append(
            f"{method} {hamming} bits" if cosine is None else f"{method} cosine {cosine:.3f}")
    by_key: dict[str, list[dict]] = {}
    for (key, reference, neighbour, source), how in found.items():
        field = {"name": "near-duplicate of" if reference == "self" else f"copy of {reference} image",
                 "value": f"{neighbour} ({', '.join(how)})"}
        if source == "self":
            field["image"] = neighbour
        by_key.setdefault(key, []).append(field)
    for r in items:
        r["extra"] += by_key.get(r["key"], [])


# what the page shows of an image besides its own fields: functions (con, items) -> None that add to each item's
# ``extra`` list of {"name", "value"[, "image": a key of this workspace]} (the detail pane lists them)
EXTRA_FIELDS: tuple = (audit_neighbours,)


class Stale(GensetsError):
    """A decision made on an older version of an image than the latest (someone decided it since): nothing was
    saved; ``newest`` holds the latest decisions of the images concerned (answered with HTTP 409)."""

    def __init__(self, message: str, newest: list[dict]):
        super().__init__(message)
        self.newest = newest


class ReviewState(Holder):
    """The queue seen by the page: listing, counts and decisions over state.duckdb, held between requests and
    given up when another process asks (:class:`Holder`), so that the review commands, ``finalize`` and other
    servers use it in between."""

    def __init__(self, workspace, *, reviewer: str | None = None, double: bool = False, keep_open: bool = False,
                 page_size: int | None = None, hand_out: int | None = None):
        """``keep_open``: never give state.duckdb up between requests (a caller alone with the workspace: a test, a
        profile); the server keeps it open while it is in use and gives it up when asked (:meth:`release`).
        ``hand_out``: the images a "to review" page hands its reviewer (:data:`leases.HAND_OUT`, at most
        ``page_size``)."""
        self.ws = Workspace(workspace)
        self.builder, self.cfg = self.ws.load()
        self.ws.require_state()
        super().__init__(self.ws.state_path, keep_open=keep_open)
        self.lock_sessions = threading.Lock()  # the reviewers' session counts (activity)
        # the page's default name (--reviewer, else GENSETS_REVIEWER); none: each reviewer types theirs on the page
        self.reviewer = reviewer or review.configured_reviewer() or ""
        self.page_size = page_size or PAGE_SIZE  # images per page
        self.hand_out = min(hand_out or leases.HAND_OUT, self.page_size)  # images of a "to review" page
        self.activities: dict[str, tuple] = {}  # reviewer -> (decisions through this server, monotonic time of the 1st)
        self.class_names = list(self.builder.class_names(self.cfg))
        self.instructions = self.builder.instructions(self.cfg)
        refs = getattr(self.cfg, "review", None)
        self.reference_root = Path(refs.references) if refs is not None and refs.references else None
        self.reference_files: dict[str, list] = {}  # class -> its first REFERENCES image files
        self.imagenet = imagenet_names()
        self.where: dict[str, tuple] = {}  # key -> (shard, offset, size, ext) of the images of pages shown
        self.secret = secrets.token_bytes(32)  # CSRF tokens are HMACs of the session under it
        self.release_key = secrets.token_urlsafe(24)  # what a process asking for the database shows (shared.py)
        self.sessions = Sessions()  # the sessions links opened (sessions.py), for this run only
        self.owner_token = reviewers.new_token()  # the owner's link, for this run only (never stored)
        self.owner_digest = reviewers.digest(self.owner_token)
        # digest -> (reviewer, role, expires, revoked) of every link (reviewers.links), read whenever the database
        # opens: a revoked link is refused (and its sessions ended) from then on
        self.links: dict[str, tuple] = {}
        self.by_invitation = False  # someone was invited (reviewers.ever_invited): the start-up line says so
        self.disputed_at: tuple = (None, {})  # (the log's cursor, team.disputes then): read again once it moves
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
        self.links, self.by_invitation = reviewers.links(con), reviewers.ever_invited(con)

    def keep_mode(self) -> None:
        """Record double review in state.duckdb (finalize relies on it); from then on the page follows the recorded
        mode (``gensets review mode`` switches it, the server reading it when it next opens the database)."""
        if self.double:
            with self._held() as con:
                if not review.is_double(con):
                    review.set_double(con)
        self.mode_kept = True

    # ---------------------------------------------------------------- who
    def link(self, token: str | None) -> tuple[str, tuple[str | None, str] | None]:
        """The state of the link carrying ``token`` and, when it is valid, ``(reviewer, role)``: the owner's (None:
        the name in the page's Reviewer field, ``--reviewer`` its default; role ``owner``) or an invited reviewer's;
        else ``unknown``, ``revoked`` or ``expired`` and None (:meth:`link_state`)."""
        if not token:
            return "unknown", None
        return self.link_state(reviewers.digest(token[:200]))  # looked up by digest: no token is compared

    def link_state(self, d: str) -> tuple[str, tuple[str | None, str] | None]:
        """:meth:`link` of a token's digest. The invitations are read whenever this process opens the database
        (while it holds it, nobody changes them); an expiry is checked at every request."""
        if hmac.compare_digest(d, self.owner_digest):
            return "valid", (None, "owner")
        if self.con is None:
            with self._held():
                pass
        entry = self.links.get(d)
        st = reviewers.state_of(entry)
        return st, (entry[0], entry[1]) if st == "valid" else None

    def invited(self) -> bool:
        """Someone was invited (a link revoked since counts)."""
        if self.con is None:
            with self._held():
                pass
        return self.by_invitation

    def invited_names(self) -> set[str]:
        """The reviewers holding a valid link."""
        return {e[0] for e in self.links.values() if reviewers.state_of(e) == "valid"}

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
        """The CSRF token of a session: every POST carries it."""
        import hashlib

        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    # ---------------------------------------------------------------- reading
    def counts(self, reviewer: str) -> dict:
        with self._held() as con:
            return queue.summary(con, reviewer, self.double)["counts"]

    def default_view(self, role: str | None) -> str:
        """The view a page opens on: in double review, for an adjudicator, the disputes while there are any (the
        owner, who reviews too, finds them under the status filter); else the images to review."""
        if self.double and role == "adjudicator":
            with self._held() as con:
                if self._disputed(con):
                    return DISPUTED
        return "todo"

    def _disputed(self, con) -> dict[str, list[dict]]:
        """The disputes now (:func:`team.disputes`), read again only once the log has grown."""
        cursor = (self._cursor(con), self.double)
        if self.disputed_at[0] != cursor:
            self.disputed_at = (cursor, team.disputes(con) if self.double else {})
        return self.disputed_at[1]

    def page(self, reviewer: str, *, lead: bool = False, label: str | None = None, config: str | None = None,
             status: str = "todo", after: int | None = None, before: int | None = None, sort: str = "page") -> dict:
        """One page of the queue in the order ``sort`` (:data:`queue.SORTS`) with its details, the filter options,
        the progress counts, the reviewer's activity (``me``) and the cursors of the pages before and after it
        (``after`` / ``before``: a cursor of a page shown before, in the same order). "To review" hands its images
        out (:meth:`hand_out` of them). ``lead``: an adjudicator or the owner, who sees double review's disputes
        (``status`` disputed, each with every reviewer's decision and note)."""
        if status not in queue.VIEWS:
            raise GensetsError(f"unknown status '{status[:40]}' (known: {', '.join(queue.VIEWS)})")
        if sort not in queue.SORTS:
            raise GensetsError(f"unknown sort '{sort[:40]}' (known: {', '.join(queue.SORTS)})")
        if status == DISPUTED and not (self.double and lead):
            raise GensetsError("the disputed images are double review's, for an adjudicator (gensets review invite "
                               "WORKSPACE NAME --role adjudicator) or the owner")
        lease = status == "todo" and bool(reviewer)  # the work view: its images are handed out (leases.py)
        with self._held() as con:  # under the lock: no other page of this server takes the same images meanwhile
            at = leases.now()
            disputed = self._disputed(con) if self.double and lead else None
            p = queue.page(con, reviewer, self.double, label=label, config=config, view=status, after=after,
                           before=before, size=self.hand_out if lease else self.page_size, sort=sort,
                           taken=leases.others(con, reviewer, at) if lease else None,
                           only=sorted(disputed) if status == DISPUTED else None)
            if lease:
                leases.take(con, reviewer, [it["key"] for it in p["items"]], at)
            s = queue.summary(con, reviewer, self.double, label=label, config=config, view=status)
            if status == DISPUTED:
                s["matching"] = self._matching(con, sorted(disputed), label, config)
            self._details(con, p["items"])
            versions = self._versions(con, [it["key"] for it in p["items"]])
            cursor = self._cursor(con)
        for it in p["items"]:
            it["version"] = versions.get(it["key"], 0)
            if disputed is not None and it["key"] in disputed:
                it["dispute"] = disputed[it["key"]]
        if disputed is not None:
            s["counts"]["disputed"] = len(disputed)
        return {**p, **s, "me": self.activity(reviewer, s["decided"]), "cursor": cursor, "leased": lease}

    @staticmethod
    def _matching(con, keys: list[str], label: str | None, config: str | None) -> int:
        return con.execute("SELECT count(*) FROM queue WHERE list_contains(?, key) AND (? IS NULL OR label = ?) "
                           "AND (? IS NULL OR config = ?)", [keys, label, label, config, config]).fetchall()[0][0]

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

    def _newest(self, con, keys: list[str], reviewer: str | None = None, lead: bool = False) -> list[dict]:
        """The images' current states for a page: ``status``, ``label``, ``flagged``, ``version`` and, in single
        review, who made the latest decision (``by``) and when; in double review (blind) ``reviewer``'s own
        latest decision and ``n``, how many reviewers decided (and, for a ``lead``, ``dispute``: every reviewer's
        decision while the image is disputed, else None)."""
        if not keys:
            return []
        versions = self._versions(con, keys)
        out = []
        if self.double:
            own = {k: (st, lb, fl) for k, who, st, lb, fl in con.execute(
                "SELECT key, reviewer, status, label, flagged FROM review_latest WHERE list_contains(?, key)",
                [keys]).fetchall() if who == reviewer}
            disputes = team.disputes(con, keys) if lead else {}
            for key, n, status in con.execute("SELECT key, n, status FROM queue WHERE list_contains(?, key)",
                                              [keys]).fetchall():
                st, lb, fl = own.get(key, ("pending" if status != queue.BELOW else status, None, False))
                st = st if st != "pending" or status != queue.BELOW else status
                out.append({"key": key, "status": st, "label": lb, "flagged": bool(fl), "n": n,
                            "todo": st in ("pending",) and n < 2 and status != queue.BELOW,
                            "version": versions.get(key, 0), **({"dispute": disputes.get(key)} if lead else {})})
            return out
        last = {k: (who, t) for k, who, t in con.execute(
            f"SELECT key, arg_max(reviewer, seq), arg_max_null(time, seq) FROM ({queue.LOG} WHERE "
            "list_contains(?, l.key)) GROUP BY key", [keys]).fetchall()}
        for key, status, label, flagged in con.execute(
                "SELECT key, status, review_label, flagged FROM queue WHERE list_contains(?, key)", [keys]).fetchall():
            who, when = last.get(key, (None, None))
            out.append({"key": key, "status": status, "label": label, "flagged": bool(flagged),
                        "by": who, "time": None if when is None else str(when), "version": versions.get(key, 0)})
        return out

    def changes(self, reviewer: str, since: int | None, lead: bool = False) -> dict:
        """What changed since the cursor ``since`` (:meth:`_cursor`): the current state of every image decided
        since (:meth:`_newest`; at most :data:`CHANGES_MAX` images, else ``reload``), the counts and the new
        cursor. It renews ``reviewer``'s leases: their page is open."""
        with self._held() as con:
            held = leases.renew(con, reviewer, leases.now()) if reviewer else 0
            cursor = self._cursor(con)
            keys = [] if since is None or since >= cursor else [k for (k,) in con.execute(
                "SELECT DISTINCT key FROM review_log WHERE rowid >= ? LIMIT ?", [since, CHANGES_MAX + 1]).fetchall()]
            reload = len(keys) > CHANGES_MAX
            items = [] if reload else self._newest(con, keys, reviewer, lead and self.double)
            counts = queue.summary(con, reviewer, self.double)["counts"]
            if self.double and lead:
                counts["disputed"] = len(self._disputed(con))
        return {"cursor": cursor, "items": items, "reload": reload, "counts": counts, "leases": held}

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
            r["extra"] = []
        for add in EXTRA_FIELDS:
            add(con, items)

    def _imagenet_name(self, i: int) -> str:
        return self.imagenet[i] if 0 <= i < len(self.imagenet) else str(i)

    # ---------------------------------------------------------------- writing
    def decide(self, key: str, action: str, reviewer: str, *, label: str | None = None,
               flagged: bool | None = None, comment: str | None = None, version: int | None = None,
               override: bool = False) -> dict:
        """Save one decision now: accept, reject, relabel (to ``label``), flag (``flagged``) or comment (``comment``:
        the reviewer's own latest decision logged again with the comment in its note, the flag kept; in single
        review only while it is the image's latest, so that a comment changes no outcome). The note is the
        reviewer's own (their flag and comment), never another reviewer's.

        ``version``: the image's version the decision was made on (the page sends it); in single review an older
        one than the image's is refused (:class:`Stale`, nothing saved). ``override``: the reviewer saw the newer
        decision (the 409) and replaces it knowingly: logged with an override mark in its note
        (:func:`queue.with_override`). The reviewer's lease on the image ends."""
        reviewer = _named(reviewer)
        if action not in (*review.ACTIONS, "flag", "comment"):
            raise GensetsError(f"unknown action '{action}' (known: accept, reject, relabel, flag, comment)")
        _check_version(version)
        with self._held() as con:
            last = next(iter(con.execute("SELECT status, label, note FROM reviews WHERE key = ?",
                                         [key]).fetchall()), None)
            if last is None:
                raise GensetsError(f"sample '{key}' is not in the review queue")
            over = self._stale(con, {key: version}, reviewer) if version is not None and not self.double else {}
            own = next((r[1:] for r in con.execute(  # the reviewer's own latest decision, if any
                "SELECT reviewer, status, label, note FROM review_latest WHERE key = ?", [key]).fetchall()
                if r[0] == reviewer), ("pending", None, None))
            note = with_override(own[2], None)  # their own flag and comment: another reviewer's note is theirs
            if action == "comment" and (own[0] == "pending" or not self.double and own != last):
                raise GensetsError("decide on this image first (a, r or l), then comment it: a comment goes with "
                                   "your latest decision, and changes no outcome")
            if action in ("flag", "comment"):
                if action == "flag" and not isinstance(flagged, bool):
                    raise GensetsError(f"flag needs 'flagged': true or false, got {json.dumps(flagged)[:40]}")
                if self.double and own[0] == "pending":
                    raise GensetsError("decide on this image first (a, r or l), then flag it")
                # the outcome stays: in single review the image's latest decision, in double the reviewer's own
                status, current_label = (own if self.double or action == "comment" else last)[:2]
                note = with_flag(note, flagged) if action == "flag" else with_comment(note, comment)
                label = current_label if status == "relabeled" else None
            else:
                status = review.ACTIONS[action]
            newest = over.get(key)
            note = with_override(note, f"{newest['by']}: {newest['status']}" if override and newest else None)
            review.decide(con, [key], status, label=label, reviewer=reviewer, note=note,
                          valid_labels=self.class_names)
            leases.release(con, reviewer, [key])
            s = queue.summary(con, reviewer, self.double)
            new_version = self._versions(con, [key]).get(key, 0)
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
        each, all in one transaction or none (an unknown key refuses them all). Each image keeps the reviewer's own
        "several objects" flag and comment. ``versions`` (key -> the version the page showed): in single review,
        one image decided meanwhile refuses them all (:class:`Stale`)."""
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
            known = {k for (k,) in con.execute("SELECT key FROM reviews WHERE list_contains(?, key)", [keys]).fetchall()}
            missing = [k for k in keys if k not in known]
            if missing:
                raise GensetsError(f"sample '{missing[0][:MAX_KEY]}' is not in the review queue: nothing was saved")
            if versions and not self.double:
                self._stale(con, versions, reviewer)
            own = dict(con.execute("SELECT key, note FROM review_latest WHERE reviewer = ? AND list_contains(?, key)",
                                   [reviewer, keys]).fetchall())
            notes = {k: with_override(own.get(k), None) for k in keys}
            review.record(con, [(k, status, None, reviewer, notes[k]) for k in keys])
            leases.release(con, reviewer, keys)
            s = queue.summary(con, reviewer, self.double)
            now = self._versions(con, keys)
        return {"status": status, "items": [{"key": k, "status": status, "label": None, "flagged": has_flag(notes[k]),
                                             "version": now.get(k, 0)} for k in keys], "counts": s["counts"],
                "me": self.activity(reviewer, s["decided"], len(keys))}

    def history(self, key: str, reviewer: str, lead: bool = False) -> list[dict]:
        """Every decision on ``key`` (:func:`review.history`); in double review the reviewer's own only (blind),
        unless ``lead`` (an adjudicator or the owner) asks about an image two reviewers or more decided."""
        with self._held() as con:
            blind = self.double and not (lead and con.execute("SELECT count(*) FROM queue WHERE key = ? AND n >= 2",
                                                              [key]).fetchall()[0][0])
            rows = review.history(con, key, reviewer=_named(reviewer) if blind else None)
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
            n, first = self.activities.get(reviewer, (0, None))
            if made:
                n, first = n + made, first if first is not None else time.monotonic()
                self.activities[reviewer] = (n, first)
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
        """A plain reviewer's view of agreement: counts and kappa, never anyone's decisions."""
        with self._held() as con:
            a = review.agreement(con)
        return {k: a[k] for k in SUMMARY}

    def team(self) -> dict:
        """What a lead's page shows of the team: progress per reviewer (:func:`team.progress`) and agreement per
        class and per nuisance kind, with the confusion table (:func:`review.agreement`; the disagreements
        counted, not listed)."""
        with self._held() as con:
            p, a = team.progress(con), review.agreement(con)
        a["disagreements"] = len(a["disagreements"])
        return {"progress": p, "agreement": a}

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
