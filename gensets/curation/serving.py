"""``gensets review serve``: the review page's server, its start-up line, and stopping it.

The server is waitress (pure Python, no C build, in production use for years, maintained by the Pylons project):
one event loop reads and writes every connection and only whole requests reach its :data:`THREADS` threads, so a
half-sent request holds no thread, and a body beyond the largest decision is refused before it is read. Nobody
who reaches the port, link or not, can stall the review (:class:`_Server`): a request must arrive whole within
:data:`REQUEST_S` of its first byte, however slowly it trickles in (else the connection is closed), a connection
silent for :data:`TIMEOUT_S` is closed, one address holds at most :data:`PER_ADDRESS` connections and all together
at most :data:`CONNECTIONS`; a connection beyond either takes the place of the stalest of that address (the
oldest still sending its request, else the longest idle), so a reviewer's fresh request is answered while someone
else holds hundreds of half-sent ones. Beyond loopback it serves plain HTTP: a reverse proxy with TLS belongs in
front (README).

Bound to every address (``--host 0.0.0.0``), the links it prints carry an address others can reach: this
machine's outward interface address (:func:`reachable`), and its host name is accepted in a request's Host; where
it has none, the line says that ``review invite --url`` must give the address reviewers reach.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

from .. import notices
from ..errors import GensetsError
from . import shared
from .review_state import ReviewState
from .routes import BULK_BODY, create_app

THREADS = 8  # the server's request threads: decisions take turns at state.duckdb anyway
CONNECTIONS = 500  # connections open at once (below the usual limit of 1024 open files)
PER_ADDRESS = 100  # connections one address holds at once (a team behind one NAT: a few browsers, six each)
TIMEOUT_S = 15  # a connection that sends nothing for this long (an idle keep-alive) is closed
REQUEST_S = 12  # a request must arrive whole (headers and body) within this long of its first byte
CLEANUP_S = 2  # how often the server looks for such connections
EVERY = ("0.0.0.0", "::", "")  # hosts that bind every address
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def make_server(app, host: str, port: int, *, connections: int = CONNECTIONS, per_address: int = PER_ADDRESS,
                request_s: float = REQUEST_S, timeout_s: float = TIMEOUT_S, cleanup_s: float = CLEANUP_S):
    """A waitress server of ``app`` listening on ``host:port`` with the guards of :class:`_Server` (driven by
    ``wasyncore.loop`` over its ``_map``: :func:`serve`)."""
    from waitress.adjustments import Adjustments
    from waitress.channel import HTTPChannel
    from waitress.server import TcpWSGIServer
    from waitress.task import ThreadedTaskDispatcher

    class _Channel(HTTPChannel):
        """A connection that remembers when the request it is receiving began (its first byte)."""

        began = 0.0

        def received(self, data):
            if self.request is None and data:
                self.began = time.monotonic()
            return super().received(data)

    class _Server(TcpWSGIServer):
        """waitress's server with a deadline for a whole request and caps per address and in all, each enforced
        by closing the stalest connection rather than refusing a fresh one."""

        channel_class = _Channel

        def handle_accept(self):
            try:
                got = self.accept()
                if got is None:
                    return
                conn, addr = got
                self.set_socket_options(conn)
            except OSError:  # the client left before it was accepted
                return
            addr = self.fix_addr(addr)
            channels = list(self.active_channels.values())
            mine = [c for c in channels if c.addr and c.addr[0] == addr[0]]
            if len(mine) >= per_address or len(channels) >= connections:
                if len(mine) < per_address:  # all together: the address holding the most gives one up
                    by: dict = {}
                    for c in channels:
                        by.setdefault(c.addr[0] if c.addr else None, []).append(c)
                    mine = max(by.values(), key=len)
                victim = _stalest(mine)
                if victim is None:  # every one of them is being answered: this one waits for its turn
                    conn.close()
                    return
                victim.handle_close()
            self.channel_class(self, conn, addr, self.adj, map=self._map)

        def maintenance(self, now):
            super().maintenance(now)  # silent for timeout_s: closed
            late = time.monotonic() - request_s
            for c in list(self.active_channels.values()):
                if c.request is not None and not c.requests and c.began < late:
                    c.will_close = True  # a request still arriving after request_s: closed, however it trickles

    adj = Adjustments(host=host, port=port, threads=THREADS, connection_limit=connections + 16,
                      channel_timeout=timeout_s, cleanup_interval=cleanup_s, max_request_body_size=BULK_BODY,
                      ident="gensets", clear_untrusted_proxy_headers=True, asyncore_use_poll=True)
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    return _Server(app, {}, dispatcher=dispatcher, adj=adj, sockinfo=adj.listen[0])


def _stalest(channels):
    """Of ``channels``, the one to close for a new connection: the oldest still receiving its request, else the
    longest idle; never one whose request is being answered. None when every one is."""
    idle = [c for c in channels if not c.requests and not c.total_outbufs_len and not c.will_close]
    sending = [c for c in idle if c.request is not None]
    if sending:
        return min(sending, key=lambda c: c.began)
    return min(idle, key=lambda c: c.last_activity) if idle else None


def reachable(host: str) -> tuple[str | None, str]:
    """For a server bound to every address: an IP address of this machine that others can reach (its outward
    interface's, else the first of its interfaces that is not loopback; None if it has none), and its host name."""
    import ipaddress

    name = socket.gethostname()
    family = socket.AF_INET6 if host == "::" else socket.AF_INET
    found = None
    try:  # the address a packet to the outside would leave from (a UDP socket sends nothing by connecting)
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(("2001:db8::1" if family == socket.AF_INET6 else "198.51.100.1", 9))
            found = s.getsockname()[0]
    except OSError:
        found = None
    candidates = [found] if found else []
    try:
        candidates += [a[4][0] for a in socket.getaddrinfo(name, None, family)]
    except OSError:
        pass
    for ip in candidates:
        try:
            a = ipaddress.ip_address(ip.split("%")[0])
        except ValueError:
            continue
        if not (a.is_loopback or a.is_unspecified or a.is_link_local):
            return str(a), name
    return None, name


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
          double: bool = False, announce=print, page_size: int | None = None, hand_out: int | None = None) -> None:
    """Serve the review page until SIGINT (Ctrl-C) or SIGTERM; in the main thread it sets their handlers
    (:class:`_Stop`: also where the shell started it with SIGINT ignored). Stopping closes the listening
    socket, lets the request holding the database finish and closes the database; connections still open
    (idle keep-alive, half-sent requests) are left to the end of the process, and a request that reaches the
    database after that is answered 503 (:class:`Stopped`)."""
    import logging

    from waitress import wasyncore

    stop = _Stop()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
    rs = ReviewState(workspace, reviewer=reviewer, double=double, page_size=page_size, hand_out=hand_out)
    logging.getLogger("waitress").setLevel(logging.ERROR)  # no line per queued task or full connection table
    loopback = host in LOOPBACK
    allowed: set[str] = set()  # filled once the port is known (--port 0 picks a free one)
    try:
        server = make_server(create_app(rs, allowed_hosts=allowed), "127.0.0.1" if host == "localhost" else host,
                             port)
    except (OSError, ValueError) as e:
        rs.close()
        why = getattr(e, "strerror", None) or str(e)
        busy = "; --port 0 picks a free port" if "in use" in why.lower() else ""
        raise GensetsError(f"cannot listen on {host}:{port} ({why}){busy}") from None
    registered = False
    try:
        rs.keep_mode()  # only now: a server that failed to start leaves the workspace's mode alone
        port = server.effective_port
        shown = f"[{host}]" if ":" in host else host
        # the loopback names, and the address given; bound to every address, any IP address and this host's name
        allowed.update(f"{h}:{port}" for h in ("127.0.0.1", "localhost", "[::1]", shown))
        where, note = shown, ""
        if host in EVERY:
            allowed.add(f"*:{port}")
            ip, name = reachable(host)
            allowed.update(f"{n}:{port}" for n in {name, socket.getfqdn()} if n)
            if ip is not None:
                where = f"[{ip}]" if ":" in ip else ip
                note = (f"; bound to every address: others reach it at {ip} (host {name}); `review invite --url` "
                        "if they know this machine by another address")
            else:
                note = (f"; bound to every address, but this machine has no address but loopback: give reviewers' "
                        f"links `review invite --url http://ADDRESS:{port}/`")
        mode = "double review" if rs.double else "single review"
        if not loopback:
            notices.warn(f"warning: {shown}:{port} is not loopback and serves plain HTTP: reviewers' links and images "
                         "cross the network unencrypted (a TLS proxy in front of it keeps them private)")
        url = f"http://{where}:{port}/"
        shared.register(rs.ws.root, url, rs.release_key)
        registered = True
        invited = len(rs.invited_names()) if rs.invited() else 0
        who = (f"you: {rs.reviewer}" if rs.reviewer else "you: the name typed on the page") \
            + (f"; {invited} invited reviewer(s)" if invited else "")
        # the owner's own link: whoever opens it is the owner, so it is printed here only
        announce(f"review page: {url}?token={rs.owner_token}  ({rs.counts(rs.reviewer)['total']} images, {mode}, "
                 f"{rs.hand_out} handed out at a time, {who}{note}; Ctrl-C to stop)", flush=True)
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
