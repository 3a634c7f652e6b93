"""#54 items 1 and 2: nobody who reaches the port can stall the review (a deadline for a whole request however it
trickles in, a cap per address, the stalest connection making way for a fresh one), and the sessions a link opens
(bound to the server's run, ended when unused, revocable)."""

import re
import socket
import subprocess
import sys
import threading
import time

from .conftest import HTTP_WAIT, ROOT, stop_server
from .test_review_web import _workspace, open_session


def _app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def _serving(**guards):
    """``serving.make_server`` of a plain WSGI app on a free loopback port, its event loop in a thread: (port, stop)."""
    from waitress import wasyncore

    from gensets.curation import serving

    server = serving.make_server(_app, "127.0.0.1", 0, **guards)
    done = threading.Event()

    def loop():
        while not done.is_set():
            wasyncore.loop(timeout=0.05, map=server._map, use_poll=True, count=1)
        wasyncore.close_all(server._map)

    t = threading.Thread(target=loop, daemon=True)
    t.start()

    def stop():
        done.set()
        t.join(10)

    return server.effective_port, stop


def _ask(port: int, timeout: float = HTTP_WAIT) -> tuple[bytes, float]:
    """A request on a fresh connection: the answer's first line and how long it took."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
        first = c.makefile("rb").readline()
    return first, time.monotonic() - t0


def _trickle(port: int, n: int, every: float, stop: threading.Event) -> list:
    """``n`` connections, each sending one more byte of a request's headers every ``every`` seconds (never silent
    for long, never done): the ones the server closed are noted in ``closed``."""
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    line = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: " + "a" * 10_000
    state = {"socks": socks, "closed": set()}

    def run():
        i = 0
        while not stop.is_set():
            for k, c in enumerate(socks):
                if k in state["closed"]:
                    continue
                try:
                    c.sendall(line[i % len(line)].encode())
                except OSError:
                    state["closed"].add(k)
            i += 1
            stop.wait(every)

    threading.Thread(target=run, daemon=True).start()
    return state


def _alive(state) -> int:
    """How many trickling connections the server has not closed (a closed one reads as end of file)."""
    import select

    n = 0
    for k, c in enumerate(state["socks"]):
        if k in state["closed"]:
            continue
        r, _, _ = select.select([c], [], [], 0)
        if r:
            try:
                if c.recv(1, socket.MSG_PEEK) == b"":
                    state["closed"].add(k)
                    continue
            except OSError:
                state["closed"].add(k)
                continue
        n += 1
    return n


def test_a_request_must_arrive_whole_in_time_and_one_address_holds_a_few_connections():
    """The server's guards, fast (small bounds): 60 connections trickling a byte every 0.2 s from one address keep
    at most ``per_address`` open, a fresh request is answered at once meanwhile, and every trickling connection is
    closed once ``request_s`` passed since its first byte, although none was ever silent for long."""
    port, stop_server_ = _serving(per_address=20, request_s=2.0, timeout_s=30, cleanup_s=0.25)
    stop = threading.Event()
    try:
        state = _trickle(port, 60, 0.2, stop)
        time.sleep(0.6)
        assert _alive(state) <= 20
        first, took = _ask(port)
        assert first.startswith(b"HTTP/1.1 200") and took < 2.0, (first, took)
        deadline = time.monotonic() + 10
        while _alive(state) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive(state) == 0  # closed by the deadline of a whole request (the silence timeout is 30 s)
        assert _ask(port)[0].startswith(b"HTTP/1.1 200")
    finally:
        stop.set()
        stop_server_()


def test_510_trickling_connections_do_not_stall_a_reviewer(reference, tmp_path):
    """Item 2: 510 connections, each sending one header byte every few seconds, held all 500 of waitress's slots, and
    a reviewer's request waited until they stopped. Now it is answered within 2 s, on a fresh connection."""
    ws = _workspace(reference, tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "gensets.cli", "review", "serve", str(ws), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    try:
        url, owner = re.search(r"(http://127\.0\.0\.1:\d+/)\?token=([\w-]+) ", proc.stdout.readline()).groups()
        port = int(url.rsplit(":", 1)[1].strip("/"))
        sid = open_session(url, owner)["session"]
        _trickle(port, 510, 1.0, stop)
        time.sleep(2.5)  # every one of them has sent a few bytes
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=HTTP_WAIT) as c:
            c.sendall(f"GET /api/counts HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Gensets-Session: {sid}\r\n"
                      "Connection: close\r\n\r\n".encode())
            answer = c.makefile("rb").read()
        took = time.monotonic() - t0
        print(f"a reviewer's request among 510 trickling connections: answered in {took * 1000:.0f} ms")
        assert answer.startswith(b"HTTP/1.1 200") and b'"total":42' in answer.replace(b" ", b"")
        assert took < 2.0, took
    finally:
        stop.set()
        stop_server(proc)


def test_sessions_end_with_the_run_when_unused_and_with_their_link():
    from gensets.curation.sessions import Sessions

    now = [0.0]
    s = Sessions(idle_s=60, clock=lambda: now[0])
    a, b = s.open("link-a"), s.open("link-b")
    assert s.find(a)[0].link == "link-a" and s.find(b)[1] == ""
    assert s.find(None) == (None, "link") and s.find("x" * 500) == (None, "link")
    assert s.find(Sessions().open("link-a")) == (None, "restarted")  # another run's (a server restarted since)
    assert s.find(a.rsplit(".", 1)[0] + ".guess") == (None, "ended")
    now[0] = 50
    assert s.find(a)[0] is not None  # used at 50: renewed
    now[0] = 100
    assert s.find(b) == (None, "ended") and s.find(a)[0] is not None  # b unused for 100 s, a for 50
    s.end_link("link-a")  # its link was revoked, or expired
    assert s.find(a) == (None, "ended")
