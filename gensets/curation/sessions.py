"""Who sends a request to the review page: links, the sessions they open, CSRF tokens, and refusals.

Every request but the page's shell, its script and its style needs a link's token, on loopback too (every user of
a shared machine reaches loopback): the owner's, a secret the server makes for its run and prints in its start-up
address (as Jupyter does), or an invited reviewer's (:mod:`gensets.curation.reviewers`: a name, a role, an
expiry). An invited reviewer is who their link says, never a name typed on the page; the owner reviews under the
name in the page's Reviewer field (``--reviewer`` its default) and may adjudicate.

No cookie: cookies are scoped by host, not by port, so a browser sends a site's cookies to every other server of
the same host (a TensorBoard, a Jupyter on another port of a shared GPU machine would receive them). The page
exchanges the link for a session instead (``POST /api/session``): a random id of this server's run (:class:`Sessions`:
kept in the server's memory, never written; ended by a restart, by :data:`IDLE_S` unused, and at once when its link
is revoked or expires), which the page keeps in its tab's ``sessionStorage`` (the browser gives it to this origin
only: scheme, host and port) and sends in the :data:`SESSION_HEADER` header, images included (fetched by the page's
script). A request without one gets 401 with its ``reason`` (:data:`REASONS`), so a page tells its reviewer at once
what ended and what to do. Every POST also carries the session's CSRF token (:data:`CSRF_HEADER`: an HMAC of the
session under a secret of the server's). The images route alone also takes a link in its query (``?token=``):
Label Studio's editor reads images from another origin, with an images-only link.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from . import reviewers, shared

SESSION_HEADER = "X-Gensets-Session"  # every request of the page's script carries its session in it (review.js)
CSRF_HEADER = "X-CSRF-Token"  # every POST carries the session's CSRF token in it
IDLE_S = 3600.0  # a session unused this long ends (an open page polls every few seconds: it never does)
SESSIONS_MAX = 10_000  # sessions kept at once; beyond, the least recently used ends
SESSION_PATH = "/api/session"  # where a page exchanges its link for a session
ADJUDICATORS = ("owner", "adjudicator")  # the roles that may settle a double review's disagreement
MAX_TOKEN = 200  # longer than any link's token or session id: not looked up
NEEDS_LINK = ("this review page needs a link: the address `gensets review serve` printed (it ends in ?token=...), "
              "or a personal link from whoever runs the review (gensets review invite WORKSPACE NAME)")
# why a request was refused (the 401's "reason"), and what to do: the page shows it in a banner
REASONS = {
    "link": NEEDS_LINK,
    "restarted": "the review server was restarted since this page was opened, which ends its sessions: open your "
                 "link again (the owner: the new address `gensets review serve` printed)",
    "ended": "this page's session ended (unused for an hour): open your link again",
    "revoked": "your link was revoked: ask whoever runs the review for a new one (gensets review invite WORKSPACE "
               "NAME)",
    "expired": "your link expired: ask whoever runs the review for a new one (gensets review invite WORKSPACE NAME "
               "--expires ...)",
    "unknown": "this review link is unknown, expired or revoked: if you run the review, open the address `gensets "
               "review serve` printed this time (its link changes at every start); else ask whoever runs it for a "
               "new one (gensets review invite WORKSPACE NAME)",
}
REFUSAL = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>"
           "<body style=\"font-family: sans-serif; max-width: 40em; margin: 3em auto\"><h1>{title}</h1><p>{why}</p>"
           "</body></html>\n")  # a refusal as a browser shows it (401: how to get a link)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


@dataclass
class Session:
    link: str  # the digest of the link that opened it
    used: float  # when it was last used (monotonic)


class Sessions:
    """The sessions of this server's run: id -> the link that opened it. An id is ``<run>.<secret>``: the run's
    prefix tells a page opened before a restart (:data:`REASONS` ``restarted``) from a session that ended."""

    def __init__(self, idle_s: float = IDLE_S, clock=time.monotonic):
        self.run = secrets.token_hex(4)
        self.idle_s, self.clock = idle_s, clock
        self.by_id: dict[str, Session] = {}  # digest of the id -> session (no id is kept, nor compared)
        self.lock = threading.Lock()

    def open(self, link: str) -> str:
        """A new session for the link whose digest is ``link``: its id."""
        sid = f"{self.run}.{secrets.token_urlsafe(32)}"
        with self.lock:
            if len(self.by_id) >= SESSIONS_MAX:
                oldest = min(self.by_id, key=lambda k: self.by_id[k].used)
                del self.by_id[oldest]
            self.by_id[digest(sid)] = Session(link, self.clock())
        return sid

    def find(self, sid: str | None) -> tuple[Session | None, str]:
        """The session ``sid`` names, renewed, and ``""``; or None and why (:data:`REASONS`: ``link`` when there is
        none, ``restarted``, ``ended``)."""
        if not sid or len(sid) > MAX_TOKEN:
            return None, "link"
        run = sid.partition(".")[0]
        if not hmac.compare_digest(run.encode(), self.run.encode()):
            return None, "restarted"
        now = self.clock()
        with self.lock:
            s = self.by_id.get(digest(sid))
            if s is None or now - s.used > self.idle_s:
                self.by_id.pop(digest(sid), None)
                return None, "ended"
            s.used = now
            return s, ""

    def end_link(self, link: str) -> None:
        """End every session the link ``link`` (a digest) opened: it was revoked, or it expired."""
        with self.lock:
            for k in [k for k, s in self.by_id.items() if s.link == link]:
                del self.by_id[k]


def identify(rs, request, g):
    """Who sends ``request``, into ``g`` (``reviewer``: the invited reviewer, None for the owner, who reviews under
    the name the request gives; ``role``; ``csrf``: the session's CSRF token); a response when it is refused, None
    otherwise. The page's shell (``GET /``) needs nobody (it holds nothing of the review: the script asks for
    it with the session), but a link in its address is checked at once, and a bad one refused there."""
    image = request.path.startswith("/image/")
    link = request.args.get("token") if request.method == "GET" else None
    g.reviewer, g.role, g.csrf, g.session = None, None, None, None
    if request.path == "/" and request.method == "GET":
        if link is not None:
            state, who = rs.link(link)
            if who is None:
                return refusal(request, 401, REASONS["expired" if state == "expired" else "unknown"], state)
            if who[1] == reviewers.IMAGES:
                return refusal(request, 403, "this link opens images only (a Label Studio export's): the review page "
                               "needs the address `gensets review serve` printed, or a personal link")
        return None
    if request.path == SESSION_PATH:
        return None  # the route checks the link it is given
    if image and link is not None:  # an image read by another origin's page (Label Studio's editor)
        state, who = rs.link(link)
        if who is None:
            return refusal(request, 401, REASONS["expired" if state == "expired" else "unknown"], state)
        g.reviewer, g.role = who
        return None
    session, why = rs.sessions.find(request.headers.get(SESSION_HEADER))
    if session is None:
        return refusal(request, 401, REASONS[why], why)
    state, who = rs.link_state(session.link)
    if who is None:
        rs.sessions.end_link(session.link)
        return refusal(request, 401, REASONS.get(state, REASONS["unknown"]), state)
    if who[1] == reviewers.IMAGES and not image:
        return refusal(request, 403, "this link opens images only (a Label Studio export's)")
    g.reviewer, g.role = who
    g.session = request.headers.get(SESSION_HEADER)
    g.csrf = rs.csrf("s:" + g.session)
    return None


def adjudicating(rs, request, g, max_key: int, bulk_max: int):
    """In double review, a decision (``/api/decide``, ``/api/bulk``) on an image two other reviewers already
    decided settles it (:func:`review.verdicts`): refused (403) unless the request's role may adjudicate."""
    import json

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
            or not all(isinstance(k, str) and 0 < len(k) <= max_key for k in keys[:bulk_max]):
        return None
    settled = rs.adjudicated(keys[:bulk_max], reviewer.strip())
    if settled:
        return refusal(request, 403, f"'{settled[0]}' was already decided by two other reviewers: only an "
                       "adjudicator settles it (gensets review invite WORKSPACE NAME --role adjudicator)")
    return None


def release(rs, request):
    """Another gensets process waits for state.duckdb (:func:`shared.ask_release`): it shows the key this server
    recorded in ``.review-server.json`` (readable by whoever can write the workspace), and the server gives the
    database up (:meth:`Holder.release`). No page, no session, nothing else."""
    from flask import Response

    sent = request.headers.get(shared.RELEASE_HEADER) or ""
    if request.method != "POST" or not hmac.compare_digest(sent.encode(), rs.release_key.encode()):
        return Response(status=403)
    rs.release()
    return Response(status=204)


def image_preflight():
    """The CORS preflight of the image route: GET from any origin, no credentials (``--images url`` tasks: Label
    Studio's editor loads each image by XHR from its own origin). No other route answers another origin."""
    from flask import Response

    return Response(status=204, headers={"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET",
                                         "Access-Control-Max-Age": "86400"})


def csrf_ok(sent: str | None, expected: str | None) -> bool:
    return isinstance(sent, str) and isinstance(expected, str) and hmac.compare_digest(sent.encode(),
                                                                                         expected.encode())


def refusal(request, code: int, why: str, reason: str | None = None):
    """A refusal in one line: JSON ``{"error": why, "reason": reason}`` for the page's script, a small HTML page for
    a browser."""
    from html import escape

    from flask import Response, jsonify

    if request.path.startswith("/api/"):
        response = jsonify(error=why, **({"reason": reason} if reason else {}))
    else:
        title = "This review page needs a link" if code == 401 else "Refused"
        response = Response(REFUSAL.format(title=title, why=escape(why)), mimetype="text/html")
    response.status_code = code
    return response
