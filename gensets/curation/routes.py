"""The review page's routes: one Flask app over a :class:`~.review_state.ReviewState`.

``GET /`` is the page's shell: it holds nothing of the review (the script asks for it, :data:`.sessions.SESSION_HEADER`
in every request), so it needs no link; a link in its address is exchanged by the script for a session
(``POST /api/session``) and taken out of the address. ``GET /api/page`` is what the shell shows (a page of the
queue, its filters and counts, the reviewer, their role, the instructions); ``/api/items``, ``/api/counts``,
``/api/changes`` (what pages poll), ``/api/history``, ``/api/agreement``, ``/api/team`` (a lead's: progress per
reviewer, agreement per class and nuisance), ``/api/references``; ``POST /api/decide``, ``/api/bulk``,
``/api/undo``; ``/image/KEY`` and ``/reference/I``. Who may do what is :mod:`.sessions`.

Guards before any route: a request's Host must be the server's (DNS rebinding: :func:`host_allowed`); a POST must
be JSON from the page's own origin, of at most :data:`MAX_BODY` bytes (a bulk decision :data:`BULK_BODY`), with
the session's CSRF token; the answers carry a strict Content-Security-Policy and may not be framed.
"""

from __future__ import annotations

import ipaddress
import json
import time

from ..errors import Busy, GensetsError
from . import reviewers, shared
from .review_state import BULK_MAX, LEADS, MAX_KEY, UNDO_MAX, Stale, Stopped
from .sessions import (
    CSRF_HEADER,
    REASONS,
    SESSION_PATH,
    adjudicating,
    csrf_ok,
    identify,
    image_preflight,
    refusal,
    release,
)

MAX_BODY = 16 * 1024  # a decision is a few hundred bytes: a larger request body is refused unread (413)
BULK_BODY = BULK_MAX * (MAX_KEY + 8) + 1024  # the largest body of a bulk decision, refused unread beyond
MAX_CURSOR = 18  # digits of a page or log cursor (a 5000-digit one is refused, 400, not parsed)
POLL_MS = 2000  # how often a page asks /api/changes for others' decisions (and renews its leases)
STATUSES = ("todo", "pending", "accepted", "rejected", "relabeled", "flagged", "all")  # the page's status filter
SORTS = {"page": "page order", "failures": "most surrogates fail", "confidence": "most confident surrogate"}
# the page loads only its own script, style and images (blobs its script fetched), and no other site may frame it
CSP = ("default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


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


def cursor(value: str | None, name: str) -> int | None:
    """A page's or the log's cursor from a query: None, or a whole number of at most :data:`MAX_CURSOR` digits."""
    if value is None or value == "":
        return None
    if not (len(value) <= MAX_CURSOR and value.isascii() and value.isdecimal()):
        raise GensetsError(f"{name} must be a whole number of at most {MAX_CURSOR} digits (a cursor), got "
                           f"{value[:20]!r}" + ("..." if len(value) > 20 else ""))
    return int(value)


def create_app(rs, *, allowed_hosts: set[str] | None = None):
    """The Flask app over a ReviewState. ``allowed_hosts`` (host:port, see :func:`host_allowed`) guards against
    DNS rebinding; a POST must be JSON from the page's own origin, of at most :data:`MAX_BODY` bytes, and carry
    the session's CSRF token (:data:`CSRF_HEADER`). Every request but the shell, its script and style needs a
    session (:func:`.sessions.identify`) opened with a link; the owner's is ``rs.owner_token``."""
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
            return release(rs, request)
        if request.method == "OPTIONS" and request.path.startswith("/image/"):
            return image_preflight()
        if request.path == "/api/bulk":
            request.max_content_length = BULK_BODY
        if request.method == "POST":
            if not request.is_json:  # no cross-site forms
                abort(415)
            origin = request.headers.get("Origin")
            if (origin and origin.split("://", 1)[-1] != request.host) \
                    or request.headers.get("Sec-Fetch-Site") == "cross-site":
                abort(403)
        if request.path.startswith("/static/"):
            return None
        refused = identify(rs, request, g)
        if refused is not None:
            return refused
        if request.method == "POST" and request.path != SESSION_PATH:
            if not csrf_ok(request.headers.get(CSRF_HEADER), g.csrf):
                return refusal(request, 403, "this request lacks the page's CSRF token: reload the review page")
            return adjudicating(rs, request, g, MAX_KEY, BULK_MAX)
        return None

    @app.after_request
    def _headers(response):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        if request.path.startswith("/api/") or request.path == "/":
            response.headers["Cache-Control"] = "no-store"
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
                abort(refusal(request, 403, f"you review as {g.reviewer} (your link): not as {str(asked)[:64]!r}"))
            return g.reviewer
        return (asked or rs.reviewer).strip()[:64] or rs.reviewer

    def _lead() -> bool:
        return g.role in LEADS

    def _query():
        a = request.args
        reviewer = _who(a.get("reviewer"))
        cursors = {name: cursor(a.get(name), f"{name} (a page cursor)") for name in ("after", "before")}
        status = a.get("status") or rs.default_view(g.role)
        return reviewer, {"label": a.get("class") or None, "config": a.get("config") or None, "status": status,
                          "sort": a.get("sort") or "page", **cursors}

    @app.get("/")
    def index():
        return render_template("review.html")

    @app.post(SESSION_PATH)
    def session():
        d = _body()
        state, who = rs.link(d.get("token") if isinstance(d.get("token"), str) else None)
        if who is None:
            return refusal(request, 401, REASONS["expired" if state == "expired" else "unknown"], state)
        if who[1] == reviewers.IMAGES:
            return refusal(request, 403, "this link opens images only (a Label Studio export's)")
        sid = rs.sessions.open(reviewers.digest(d["token"][:200]))
        return jsonify(session=sid, csrf=rs.csrf("s:" + sid), reviewer=who[0], role=who[1])

    @app.get("/api/page")
    def page():
        reviewer, q = _query()
        p = rs.page(reviewer, lead=_lead(), **q)
        statuses = [*STATUSES[:-1], *(["disputed"] if rs.double and _lead() else []), STATUSES[-1]]
        return jsonify({
            **p, "reviewer": reviewer, "signed_in": g.reviewer is not None, "role": g.role, "double": rs.double,
            "title": rs.cfg.pretty_name, "workspace": str(rs.ws.root), "class_names": rs.class_names,
            "filters": {"class": q["label"] or "", "config": q["config"] or "", "status": q["status"],
                        "sort": q["sort"]},
            "statuses": statuses, "sorts": SORTS, "instructions": list(rs.instructions),
            "references": rs.reference_root is not None, "undo_max": UNDO_MAX, "bulk_max": BULK_MAX,
            "poll_ms": POLL_MS, "lead": _lead()})

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
        return jsonify(rs.page(reviewer, lead=_lead(), **q))

    @app.get("/api/counts")
    def counts():
        return jsonify(rs.counts(_who(request.args.get("reviewer"))))

    @app.post("/api/decide")
    def decide():
        d = _body()
        if not isinstance(d.get("key"), str):
            raise GensetsError("a JSON object with 'key' and 'action' is needed")
        if len(d["key"]) > MAX_KEY:
            raise GensetsError(f"'key' is longer than {MAX_KEY} characters: no sample has such a key")
        if not isinstance(d.get("label") or "", str):
            raise GensetsError("'reviewer' and 'label' must be strings")
        t0 = time.perf_counter()
        out = rs.decide(d["key"], str(d.get("action"))[:40], _poster(d), label=d.get("label"),
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
        since = cursor(request.args.get("since"), "since (a cursor of /api/changes)")
        return jsonify(rs.changes(_who(request.args.get("reviewer")), since, _lead()))

    @app.post("/api/undo")
    def undo():
        d = _body()
        return jsonify(rs.undo(_poster(d), d.get("n", 1)))

    @app.get("/api/history")
    def history():
        key = request.args.get("key") or ""
        if not 0 < len(key) <= MAX_KEY:
            raise GensetsError(f"'key' must name a sample (1 to {MAX_KEY} characters)")
        return jsonify({"key": key, "history": rs.history(key, _who(request.args.get("reviewer")), _lead())})

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

    @app.get("/api/team")
    def team_():
        if not _lead():
            return refusal(request, 403, "the team's progress and agreement are for whoever runs the review and its "
                           "adjudicators")
        return jsonify(rs.team())

    return app

