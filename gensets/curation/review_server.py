"""The review page: ``gensets review serve`` shows the queue in a browser and saves each decision at once.

One Flask app, served by werkzeug's threaded server on loopback by default. The server owns the one
read-write DuckDB connection of the workspace while it runs (DuckDB allows one writer process); every
request uses it under a lock, and every decision goes through :func:`review.decide`, so ``reviews``
and ``review_log`` change together with the reviewer and the time.

Nothing grows with the queue: a page reads its rows by keyset from ``queue`` and its counts from
``queue_counts`` (:mod:`gensets.curation.queue`), a decision updates the rows of its image, and an image is
read from its candidate shard at the byte offset recorded at ingest (``images``), when the browser asks for
it. Starting the server reads the config and one settings row; no candidate shard is opened.

"Several objects" is a flag kept in the decision's note (see :data:`FLAG`); a later decision by the
same reviewer keeps it. In double-review mode (recorded in state.duckdb; the workspace stays in it) each
image needs decisions from two reviewers: the page shows each reviewer their own decisions only (blind)
and its agreement endpoint only counts and kappa; ``reviews`` holds the latest decision, but finalize
uses :func:`review.verdicts` (the two agree, or someone else adjudicates). :func:`agreement` reports
Cohen's kappa between the first two reviewers of every image, with the disagreements (for the CLI).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import os
import signal
import sys
import threading
import time

from ..errors import GensetsError
from . import queue, review, state
from .queue import FLAG, has_flag, with_flag

__all__ = ["FLAG", "has_flag", "with_flag", "ReviewState", "Stopped", "create_app", "serve", "agreement"]
PAGE_SIZE = 60
MIME = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp"}
SUMMARY = ("items", "reviewed_once", "kappa", "observed_agreement")  # what the page may see of agreement
MAX_BODY = 16 * 1024  # a decision is a few hundred bytes: a larger request body is refused unread (413)
MAX_KEY = 200  # longer than any sample key: refused without being echoed
# the page loads only its own script, style and images, and no other site may frame it (clickjacking)
CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def agreement(con) -> dict:
    """Agreement of the first two reviewers of every image decided by at least two (Cohen's kappa)."""
    from ..metrics import cohen_kappa

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


class ReviewState:
    """The queue seen by the page: listing, counts and decisions over one locked connection."""

    def __init__(self, workspace, *, reviewer: str | None = None, double: bool = False):
        import getpass

        from ..labels.imagenet import imagenet_names
        from ..workspace import Workspace

        self.ws = Workspace(workspace)
        self.builder, self.cfg = self.ws.load()
        if not self.ws.state_path.exists():
            raise GensetsError(f"{self.ws.root}: nothing built yet (no state.duckdb)")
        self.con = state.connect(self.ws.state_path)  # the one writer while the page is served
        self.lock = threading.Lock()
        self.reviewer = reviewer or getpass.getuser()
        self.double = double or review.is_double(self.con)  # recorded by keep_mode(), once serving
        self.class_names = list(self.builder.class_names(self.cfg))
        self.imagenet = imagenet_names()
        queue.ensure(self.con)  # up to date after every build: one settings lookup

    @contextlib.contextmanager
    def _held(self):
        """The lock, around a use of the connection; :class:`Stopped` once :meth:`close` closed it."""
        with self.lock:
            if self.con is None:
                raise Stopped("the review page is stopping: nothing was saved")
            yield

    def keep_mode(self) -> None:
        """Record double review in state.duckdb: once double, always (finalize relies on it)."""
        if self.double and not review.is_double(self.con):
            with self._held():
                review.set_double(self.con)

    def close(self) -> None:
        """Close the connection once the request using it, if any, is done (a decision is then committed);
        a request after this one gets :class:`Stopped`."""
        with self.lock:
            if self.con is not None:
                self.con.close()
                self.con = None

    # ---------------------------------------------------------------- reading
    def counts(self, reviewer: str) -> dict:
        with self._held():
            return queue.summary(self.con, reviewer, self.double)["counts"]

    def page(self, reviewer: str, *, label: str | None = None, config: str | None = None,
             status: str = "todo", after: int | None = None, before: int | None = None) -> dict:
        """One page of the queue with its details, the filter options, the progress counts and the cursors of
        the pages before and after it (``after`` / ``before``: a cursor of a page shown before)."""
        if status not in queue.VIEWS:
            raise GensetsError(f"unknown status '{status[:40]}' (known: {', '.join(queue.VIEWS)})")
        with self._held():
            p = queue.page(self.con, reviewer, self.double, label=label, config=config, view=status,
                           after=after, before=before, size=PAGE_SIZE)
            s = queue.summary(self.con, reviewer, self.double, label=label, config=config, view=status)
            self._details(p["items"])
        return {**p, **s}

    def _details(self, items: list[dict]) -> None:
        """Prompt, seed and every surrogate's top-5 (ImageNet names) for the given items, from their provenance."""
        keys = [r["key"] for r in items]
        if not keys:
            return
        meta = dict(self.con.execute("SELECT key, meta FROM samples WHERE list_contains(?, key)", [keys]).fetchall())
        for r in items:
            m = json.loads(meta[r["key"]])
            ids = set(m.get("imagenet_ids") or [])
            r.update(prompt=m.get("prompt"), seed=m.get("seed"), nuisance_kind=m.get("nuisance_kind"),
                     failures=m.get("surrogate_failures"), imagenet_ids=sorted(ids))
            r["surrogates"] = [
                {"model": p["model"], "hit": bool(p["hit"]),
                 "top5": [{"name": self.imagenet[i] if 0 <= i < len(self.imagenet) else str(i),
                           "score": round(float(sc), 4), "target": i in ids}
                          for i, sc in zip(p["top5"], p["scores"], strict=True)]}
                for p in m.get("surrogates") or []]
            r.pop("note", None)

    # ---------------------------------------------------------------- writing
    def decide(self, key: str, action: str, reviewer: str, *, label: str | None = None,
               flagged: bool | None = None) -> dict:
        """Save one decision now: accept, reject, relabel (to ``label``) or flag (``flagged``)."""
        reviewer = review.check_reviewer((reviewer or "").strip())
        if action not in (*review.ACTIONS, "flag"):
            raise GensetsError(f"unknown action '{action}' (known: accept, reject, relabel, flag)")
        with self._held():
            row = next(iter(self.con.execute("SELECT status, label, note FROM reviews WHERE key = ?",
                                             [key]).fetchall()), None)
            if row is None:
                raise GensetsError(f"sample '{key}' is not in the review queue")
            if self.double:  # the reviewer's own latest decision, if any
                row = next((r[1:] for r in self.con.execute(
                    "SELECT reviewer, status, label, note FROM review_latest WHERE key = ?", [key]).fetchall()
                    if r[0] == reviewer), ("pending", None, None))
            status, current_label, note = row
            if action == "flag":
                if not isinstance(flagged, bool):
                    raise GensetsError(f"flag needs 'flagged': true or false, got {json.dumps(flagged)[:40]}")
                if self.double and status == "pending":
                    raise GensetsError("decide on this image first (a, r or l), then flag it")
                note = with_flag(note, flagged)
                label = current_label if status == "relabeled" else None
            else:
                status = review.ACTIONS[action]
            review.decide(self.con, [key], status, label=label, reviewer=reviewer, note=note,
                          valid_labels=self.class_names)
            counts = queue.summary(self.con, reviewer, self.double)["counts"]
        return {"key": key, "status": status, "label": label, "flagged": has_flag(note), "counts": counts}

    def agreement(self) -> dict:
        """The page's view of agreement: counts and kappa, never anyone's decisions."""
        with self._held():
            a = agreement(self.con)
        return {k: a[k] for k in SUMMARY}

    def image(self, key: str) -> tuple[bytes, str]:
        """An image's bytes, read at its offset in its candidate shard; KeyError if the key has none."""
        from ..shards import read_at

        with self._held():
            where = state.images_of(self.con, [key], self.ws.candidate).get(key)
        if where is None:
            raise KeyError(key)
        path, offset, size, ext = where
        return read_at(path, offset, size, key), MIME.get(ext, "application/octet-stream")


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
    DNS rebinding; a POST must be JSON from the page's own origin, of at most :data:`MAX_BODY` bytes."""
    from flask import Flask, Response, abort, jsonify, render_template, request

    app = Flask(__name__)
    app.json.sort_keys = False
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    @app.before_request
    def _guard():
        if allowed_hosts is not None and not host_allowed(request.host, allowed_hosts):
            abort(403)
        if request.method == "POST":
            if not request.is_json:  # no cross-site form posts
                abort(415)
            origin = request.headers.get("Origin")
            if (origin and origin.split("://", 1)[-1] != request.host) \
                    or request.headers.get("Sec-Fetch-Site") == "cross-site":
                abort(403)

    @app.after_request
    def _headers(response):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.errorhandler(GensetsError)
    def _bad(e):
        return jsonify(error=str(e)), 503 if isinstance(e, Stopped) else 400

    def _query():
        a = request.args
        reviewer = (a.get("reviewer") or rs.reviewer).strip()[:64] or rs.reviewer
        cursors = {}
        for name in ("after", "before"):
            value = a.get(name) or None
            if value is not None and not (value.isascii() and value.isdecimal()):
                raise GensetsError(f"{name} must be a whole number (a page cursor), got {value[:20]!r}")
            cursors[name] = None if value is None else int(value)
        return reviewer, {"label": a.get("class") or None, "config": a.get("config") or None,
                          "status": a.get("status") or "todo", **cursors}

    @app.get("/")
    def index():
        a = request.args
        reviewer, q = _query()
        status = q["status"]
        p = rs.page(reviewer, **q)
        return render_template(
            "review.html", p=p, reviewer=reviewer, double=rs.double, class_names=rs.class_names,
            filters={"class": a.get("class") or "", "config": a.get("config") or "", "status": status},
            title=rs.cfg.pretty_name, workspace=str(rs.ws.root),
            statuses=["todo", "pending", "accepted", "rejected", "relabeled", "flagged", "all"])

    @app.get("/image/<key>")
    def image(key):
        try:
            data, mime = rs.image(key)
        except KeyError:
            abort(404)
        return Response(data, mimetype=mime, headers={"Cache-Control": "max-age=86400, immutable"})

    @app.get("/api/items")
    def items():
        reviewer, q = _query()
        return jsonify(rs.page(reviewer, **q))

    @app.get("/api/counts")
    def counts():
        return jsonify(rs.counts(request.args.get("reviewer") or rs.reviewer))

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
        t0 = time.perf_counter()
        out = rs.decide(d["key"], str(d.get("action"))[:40], d.get("reviewer") or rs.reviewer,
                        label=d.get("label"), flagged=d.get("flagged"))
        out["ms"] = round(1000 * (time.perf_counter() - t0), 1)
        return jsonify(out)

    @app.get("/api/agreement")
    def agreement_():
        return jsonify(rs.agreement())

    return app


class _Stop:
    """The handler of SIGINT and SIGTERM in :func:`serve`. Until the server serves, it raises KeyboardInterrupt
    (start-up stops where it is). Once it serves, the first signal raises nothing: it only asks the loop of
    :func:`serve` to end at its next turn, so that no exception lands inside werkzeug's handling of a connection
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
          double: bool = False, announce=print) -> None:
    """Serve the review page until SIGINT (Ctrl-C) or SIGTERM; in the main thread it sets their handlers
    (:class:`_Stop`: also where the shell started it with SIGINT ignored). Stopping closes the listening
    socket, lets the request holding the database finish and closes the database; connections still open
    (idle keep-alive, half-sent requests) are left to the end of the process, and a request that reaches the
    database after that is answered 503 (:class:`Stopped`)."""
    import logging

    from werkzeug.serving import make_server

    stop = _Stop()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
    rs = ReviewState(workspace, reviewer=reviewer, double=double)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    loopback = host in ("127.0.0.1", "localhost", "::1")
    allowed: set[str] = set()  # filled once the port is known (--port 0 picks a free one)
    said = io.StringIO()  # werkzeug prints why it cannot bind and exits: we say it in one line
    try:
        with contextlib.redirect_stderr(said):
            server = make_server(host, port, create_app(rs, allowed_hosts=allowed), threaded=True)
    except (OSError, SystemExit) as e:
        rs.close()
        why = said.getvalue().strip().split("\n")[0] or getattr(e, "strerror", None) or str(e)
        raise GensetsError(f"cannot listen on {host}:{port} ({why})") from None
    try:
        rs.keep_mode()  # only now: a server that failed to start leaves the workspace's mode alone
        port = server.server_port
        shown = f"[{host}]" if ":" in host else host
        # the loopback names, and the address given; bound to every address, any IP address (never a host name)
        allowed.update(f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]", shown))
        if host in ("0.0.0.0", "::", ""):
            allowed.add(f"*:{port}")
        mode = "double review" if rs.double else "single review"
        if not loopback:
            print(f"warning: {shown}:{port} is not loopback and the review page has no authentication: anyone "
                  "who can reach it can see the images and change decisions", file=sys.stderr, flush=True)
        announce(f"review page: http://{shown}:{port}/  ({rs.counts(rs.reviewer)['total']} images, {mode}, "
                 f"reviewer {rs.reviewer}; Ctrl-C to stop)", flush=True)
        server.timeout = 0.1  # handle_request() returns at least this often, to see a stop asked
        stop.serving = True  # from here on a signal raises nothing (one just before: the finally below)
        while not stop.asked:
            server.handle_request()
    finally:
        server.server_close()  # no new connection; its request threads are daemons, not waited for
        rs.close()
