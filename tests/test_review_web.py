"""Review in the browser (headless Chromium), concurrent reviewers, double review, CSV / Label Studio."""

import base64
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from .conftest import HTTP_WAIT, ROOT, owner_session, run_cli, stop_server

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))  # as .ci/run
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _workspace(reference, tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    return ws


class Server:
    """``gensets review serve`` in a subprocess on a free loopback port, stopped with Ctrl-C. Its requests carry
    the session a link opened (a link's ``token``, a reviewer's, else the owner's, from the address the server
    printed), as the page's script sends it, and POSTs carry the session's CSRF token."""

    def __init__(self, ws: Path, *args: str, token: str | None = None):
        self.ws = ws
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gensets.cli", "review", "serve", str(ws), "--port", "0", *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # the server prints its address once it listens
        m = re.search(r"(http://127\.0\.0\.1:(\d+)/)\?token=([\w-]+) ", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"no address in {line!r}; stderr: {self.proc.stderr.read()}")
        self.url, self.owner_token = m.group(1), m.group(3)
        self.opener = urllib.request.build_opener()
        self.csrf = self.session(token or self.owner_token)

    def session(self, token: str | None = None) -> str:
        """Open a session with a link (``token``, else the owner's), as the page's script does: its id goes with
        every request of this client from then on; its CSRF token is returned."""
        out = open_session(self.url, token or self.owner_token)
        self.opener.addheaders = [(SESSION_HEADER, out["session"])]
        return out["csrf"]

    def link(self, query: str = "") -> str:
        """The owner's link (as the server printed it), with more of a query: what a browser opens first."""
        return f"{self.url}?token={self.owner_token}" + (f"&{query}" if query else "")

    def get(self, path: str):
        with self.opener.open(self.url + path.lstrip("/"), timeout=HTTP_WAIT) as r:
            return json.loads(r.read())

    def post(self, payload, content_type: str = "application/json", csrf: bool = True,
             path: str = "api/decide") -> tuple[int, dict]:
        headers = {"Content-Type": content_type, **({"X-CSRF-Token": self.csrf} if csrf else {})}
        req = urllib.request.Request(self.url + path, data=json.dumps(payload).encode(), headers=headers,
                                     method="POST")
        try:
            with self.opener.open(req, timeout=HTTP_WAIT) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = e.read()
            return e.code, (json.loads(body) if body.startswith(b"{") else {})

    def stop(self) -> str | None:
        return stop_server(self.proc)  # a server that does not stop fails the test (it was killed silently)


SESSION_HEADER = "X-Gensets-Session"


def open_session(url: str, token: str) -> dict:
    """``POST /api/session`` with a link's token: ``{session, csrf, reviewer, role}``."""
    req = urllib.request.Request(url + "api/session", data=json.dumps({"token": token}).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=HTTP_WAIT) as r:
        return json.loads(r.read())


def _db(ws: Path):
    import duckdb

    return duckdb.connect(str(ws / "state.duckdb"), read_only=True)


def _keys(s: Server, **filters) -> list[str]:
    q = "&".join(f"{k}={v}" for k, v in {"status": "all", **filters}.items())
    return [it["key"] for it in s.get(f"/api/items?{q}")["items"]]


# ------------------------------------------------------------------------------ the page, in Chromium
def _browser(p):
    return p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)


def _playwright():
    """Playwright's sync API with Debian's chromium; without them a skip, or a failure under
    GENSETS_REQUIRE_BROWSER=1 (CI: .ci/run sets it, so CI cannot pass without the browser test)."""
    why = None
    if not CHROMIUM.exists():
        why = "Debian's chromium is not installed (apt-get install -y chromium chromium-driver; .ci/run does it)"
    else:
        try:
            from playwright import sync_api
        except ImportError:
            why = "playwright is not installed (pip install -e '.[dev]')"
    if why and os.environ.get("GENSETS_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{why}; GENSETS_REQUIRE_BROWSER=1 requires the browser test")
    if why:
        pytest.skip(why)
    return sync_api


def ready(page):
    """Wait until the page's script has opened its session and shown the page (its shell holds nothing of it)."""
    page.locator("body[data-ready]").wait_for(state="attached", timeout=30_000)
    return page


def goto(page, url: str):
    """Open ``url`` in ``page`` and wait until the page is shown (:func:`ready`)."""
    response = page.goto(url)
    ready(page)
    return response


def test_review_in_headless_chromium(reference, tmp_path, server_factory):
    sync_api = _playwright()
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    latencies = []
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        goto(page, s.link("config=texture"))
        assert "token" not in page.url and "config=texture" in page.url  # the link is out of the address
        cards = page.locator(".card")
        assert cards.count() == 12
        keys = [cards.nth(i).get_attribute("data-key") for i in range(3)]
        assert page.locator("#n-pending").inner_text() == "42"
        # the detail panel shows the selected image's class, prompt and every surrogate's top-5
        assert page.locator("#d-key").inner_text() == keys[0]
        assert page.locator("#d-prompt").inner_text().startswith("a photo of a ")
        assert page.locator("#d-surrogates .sur").count() == 3
        assert page.locator("#d-surrogates li").count() == 15

        def press(key, card, status):
            t0 = time.perf_counter()
            page.keyboard.press(key)
            page.wait_for_selector(f'.card[data-key="{card}"].status-{status}', timeout=10_000)
            latencies.append(1000 * (time.perf_counter() - t0))

        cards.nth(0).click()
        press("a", keys[0], "accepted")  # accept; the selection moves on to the next image
        assert page.locator("#d-key").inner_text() == keys[1]
        press("r", keys[1], "rejected")
        page.keyboard.press("l")  # relabel: the class picker opens
        page.locator("#relabel-input").fill("teapot")
        t0 = time.perf_counter()
        page.keyboard.press("Enter")
        page.wait_for_selector(f'.card[data-key="{keys[2]}"].status-relabeled', timeout=10_000)
        latencies.append(1000 * (time.perf_counter() - t0))
        assert "teapot" in cards.nth(2).inner_text()
        page.keyboard.press("k")  # back up three images, then flag the first as "several objects"
        page.keyboard.press("ArrowLeft")
        page.keyboard.press("ArrowLeft")
        assert page.locator("#d-key").inner_text() == keys[0]
        page.keyboard.press("s")
        page.wait_for_selector(f'.card[data-key="{keys[0]}"].flagged.status-accepted', timeout=10_000)
        counts = {k: page.locator(f"#n-{k}").inner_text() for k in ("pending", "accepted", "rejected", "relabeled", "flagged")}
        assert counts == {"pending": "39", "accepted": "1", "rejected": "1", "relabeled": "1", "flagged": "1"}
        # a wrong class is refused on the page, and nothing is saved
        page.locator(".card").nth(5).click()
        page.keyboard.press("l")
        page.locator("#relabel-input").fill("unicorn")
        page.keyboard.press("Enter")
        # (a locator wait: wait_for_function evaluates a string, which the page's CSP rightly forbids)
        page.locator("#relabel-error", has_text="unicorn").wait_for(timeout=10_000)
        page.keyboard.press("Escape")
        # after a reload the decisions are still there (they live in state.duckdb, not in the page)
        goto(page, s.url + "?config=texture&status=all")  # the tab's session: no link in the address
        assert "status-accepted" in page.locator(f'.card[data-key="{keys[0]}"]').get_attribute("class")
        page.screenshot(path=str(tmp_path / "review.png"))
        assert errors == []
        browser.close()
    s.stop()
    print(f"decision latency in the page (key press -> card updated), ms: {[round(x) for x in latencies]}")

    con = _db(ws)
    got = dict(con.execute("SELECT key, (status, label, reviewer, note) FROM reviews WHERE status <> 'pending'").fetchall())
    log = con.execute("SELECT key, status, label, reviewer, note FROM review_log ORDER BY rowid").fetchall()
    con.close()
    assert set(got) == set(keys)
    assert got[keys[0]][0] == "accepted" and got[keys[0]][2:] == ("ana", "several objects")
    assert got[keys[1]][0] == "rejected" and got[keys[2]][:3] == ("relabeled", "teapot", "ana")
    assert [(r[0], r[1]) for r in log] == [(keys[0], "accepted"), (keys[1], "rejected"), (keys[2], "relabeled"),
                                           (keys[0], "accepted")]

    run_cli("finalize", ws, check=0)
    import datasets

    ds = datasets.load_dataset(str(ws / "dataset"), "texture", split="test")
    rows = {r["__key__"]: r for r in ds}
    assert set(rows) == {keys[0], keys[2]}
    assert ds.features["cls"].int2str(rows[keys[2]]["cls"]) == "teapot"
    assert rows[keys[2]]["json"]["review"]["status"] == "relabeled"
    assert rows[keys[0]]["json"]["review"]["reviewer"] == "ana"
    assert datasets.get_dataset_config_names(str(ws / "dataset")) == ["texture"]


def test_double_review_page_is_blind_in_chromium(reference, tmp_path, server_factory):
    """A reviewer whose name the browser remembers sees their own queue, not the server's default reviewer's."""
    sync_api = _playwright()
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--double", "--reviewer", "ana")
    keys = _keys(s)[:2]
    for key, reviewer, action in ((keys[0], "ana", "accept"), (keys[1], "ana", "accept"), (keys[1], "cleo", "reject")):
        assert s.post({"key": key, "action": action, "reviewer": reviewer})[0] == 200
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page()
        page.add_init_script("localStorage.setItem('gensets-reviewer', 'ben')")
        responses = []
        page.on("response", lambda r: responses.append(r) if "/api/agreement" in r.url else None)
        goto(page, s.link())  # no ?reviewer=: the page asks as ben, whose name this browser remembers
        page.wait_for_url("**reviewer=ben**")
        page.wait_for_load_state("networkidle")
        assert page.locator("#reviewer").input_value() == "ben"
        assert "status-pending" in page.locator(f'.card[data-key="{keys[0]}"]').get_attribute("class")
        assert page.locator("#n-accepted").inner_text() == "0"
        bodies = [r.text() for r in responses]  # what the page learns of agreement: counts, no decisions
        browser.close()
    assert bodies and all(json.loads(b)["items"] == 1 for b in bodies)  # ana and cleo disagree on keys[1] ...
    assert not any(word in b for b in bodies for word in ("ana", "cleo", keys[1], "accepted", "rejected"))  # ... unsaid


# ------------------------------------------------------------------------------ HTTP: two reviewers at once
def test_two_reviewers_concurrently_lose_nothing(reference, tmp_path, server_factory):
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws)
    keys = _keys(s)
    assert len(keys) == 42
    actions = [("accept", {}), ("reject", {}), ("relabel", {"label": "teapot"}), ("flag", {"flagged": True})]
    results = {"ana": [], "ben": []}
    failures = []
    deadline = time.monotonic() + 120

    def reviewer(name: str, my_keys: list[str]):
        for i in range(50):  # bounded: 50 decisions each, on loopback, each with a timeout
            if time.monotonic() > deadline:
                failures.append(f"{name}: out of time")
                return
            action, extra = actions[(i + (name == "ben")) % len(actions)]
            t0 = time.perf_counter()
            code, out = s.post({"key": my_keys[i % len(my_keys)], "action": action, "reviewer": name, **extra})
            if code != 200:
                failures.append(f"{name}: {code} {out}")
                continue
            results[name].append((out["key"], name, out["status"], out["label"] if out["status"] == "relabeled" else None,
                                  1000 * (time.perf_counter() - t0)))

    # ana: keys 0..24, ben: keys 17..41; 17..24 are decided by both
    threads = [threading.Thread(target=reviewer, args=("ana", keys[:25])),
               threading.Thread(target=reviewer, args=("ben", keys[17:]))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    seconds = time.perf_counter() - t0
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    posted = results["ana"] + results["ben"]
    assert len(posted) == 100
    ms = sorted(r[4] for r in posted)
    print(f"100 concurrent decisions in {seconds:.2f} s; latency median {ms[50]:.0f} ms, max {ms[-1]:.0f} ms")
    s.stop()
    con = _db(ws)
    log = con.execute("SELECT key, reviewer, status, CASE WHEN status = 'relabeled' THEN label END "
                      "FROM review_log").fetchall()
    con.close()
    assert Counter(log) == Counter(r[:4] for r in posted)  # every decision, none lost or doubled


def test_page_guards_and_errors(reference, tmp_path, server_factory):
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    key = _keys(s)[0]
    assert s.post({"key": key, "action": "accept"}, content_type="text/plain")[0] == 415  # no cross-site forms
    req = urllib.request.Request(s.url, headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=HTTP_WAIT)
    assert e.value.code == 403  # DNS rebinding
    for payload, needle in (({"key": "nope", "action": "accept"}, "nope"),
                            ({"key": key, "action": "relabel", "label": "unicorn"}, "unicorn"),
                            ({"key": key, "action": "dance"}, "dance"),
                            ({"key": key, "action": "accept", "reviewer": "x" * 65}, "reviewer"),
                            ({"key": key, "action": "flag", "flagged": "false"}, "flagged")):
        code, out = s.post(payload)
        assert code == 400 and needle in out["error"], out
    assert s.get("/api/counts")["flagged"] == 0  # the string "false" did not set the flag
    for query in ("after=%C2%B2", "before=abc", "after=-1"):  # "²".isdigit() is true, int("²") fails
        with pytest.raises(urllib.error.HTTPError) as e:
            s.opener.open(s.url + f"api/items?{query}", timeout=HTTP_WAIT)
        assert e.value.code == 400 and "cursor" in json.loads(e.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as e:
        s.opener.open(s.url + "api/items?status=maybe", timeout=HTTP_WAIT)
    assert e.value.code == 400 and "maybe" in json.loads(e.value.read())["error"]
    with s.opener.open(s.url + f"image/{key}", timeout=HTTP_WAIT) as r:
        data = r.read()
        assert r.headers["Content-Type"] == "image/jpeg" and data[:2] == b"\xff\xd8"
    with pytest.raises(urllib.error.HTTPError) as e:
        s.opener.open(s.url + "image/nope", timeout=HTTP_WAIT)
    assert e.value.code == 404
    for path in ("static/review.js", "static/review.css"):
        with s.opener.open(s.url + path, timeout=HTTP_WAIT) as r:
            assert r.status == 200
    page = s.opener.open(s.url, timeout=HTTP_WAIT).read().decode()
    assert "http://" not in page.replace(s.url, "") and "https://" not in page  # nothing from a CDN
    # a POST without the page's CSRF token is refused, and so is one from another site
    assert s.post({"key": key, "action": "accept"}, csrf=False)[0] == 403
    assert s.get("/api/counts")["accepted"] == 0


def test_a_link_is_never_redirected_nor_set_as_a_cookie(reference, tmp_path, server_factory):
    """#46 item 5: ``GET /%09/evil.example?token=VALID`` answered ``Location: //evil.example`` (a browser drops the
    tab): an open redirect to another site. #54 item 1: the link's token became a cookie, which the browser sends to
    every port of the host. Now a link is answered where it is, with no redirect and no cookie: the shell at ``/``
    (its script exchanges the link for a session), a refusal anywhere else."""
    import http.client
    from urllib.parse import urlsplit

    ws = _workspace(reference, tmp_path)
    token = run_cli("review", "invite", ws, "ana", check=0).stdout.strip().split("?token=")[1]
    s = server_factory(ws, token=token)
    port = urlsplit(s.url).port
    for path in ("/%09/evil.example", "/%0A/evil.example", "/%5Cevil.example", "//evil.example", "/%2F/evil.example",
                 "/\\evil.example", "/status?x=1", "/", "/?status=all"):
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_WAIT)
        con.request("GET", f"{path}{'&' if '?' in path else '?'}token={token}")
        r = con.getresponse()
        body = r.read().decode()
        con.close()
        assert r.headers["Location"] is None and r.headers["Set-Cookie"] is None, (path, r.headers)
        assert (r.status == 200) == (path in ("/", "/?status=all")) and token not in body, (path, r.status)


def test_half_sent_requests_are_closed_and_hold_no_thread(reference, tmp_path, server_factory):
    """#46 item 5: 300 requests sent in part held a thread each, forever (werkzeug's development server). Now the
    server closes each within its timeout, its threads stay few, and it answers others meanwhile."""
    import selectors
    import socket

    from gensets.curation.serving import CLEANUP_S, PER_ADDRESS, REQUEST_S, TIMEOUT_S

    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    port = int(s.url.rsplit(":", 1)[1].strip("/"))
    status = Path(f"/proc/{s.proc.pid}/status")

    def threads() -> int:
        return int(re.search(r"^Threads:\s+(\d+)", status.read_text(), re.M).group(1))

    assert s.get("/api/counts")["total"] == 42
    before = threads()  # the server's own (THREADS), DuckDB's (about one per core, while it holds the database)
    socks = []
    try:
        for _ in range(300):
            c = socket.create_connection(("127.0.0.1", port), timeout=HTTP_WAIT)
            c.sendall(f"GET /api/counts HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # no end of headers
            socks.append(c)
        t0 = time.monotonic()
        time.sleep(1)
        assert s.get("/api/counts")["total"] == 42  # served meanwhile
        assert threads() <= before + 2, (before, threads())  # none per connection
        sel = selectors.DefaultSelector()
        for c in socks:
            c.setblocking(False)
            sel.register(c, selectors.EVENT_READ)
        open_ = set(socks)
        deadline = t0 + TIMEOUT_S + 2 * CLEANUP_S + 10  # its timeout, and slack for a loaded machine
        while open_ and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.5):
                try:
                    data = key.fileobj.recv(4096)  # an answer (408, 400) is read on to the end
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    data = b""
                if data == b"":
                    sel.unregister(key.fileobj)
                    open_.discard(key.fileobj)
        took = time.monotonic() - t0
        assert not open_, f"{len(open_)} of 300 half-sent requests still open after {took:.0f} s"
        # beyond the per-address cap the oldest made way at once; the rest were closed by the deadline of a whole
        # request (or the silence timeout), not at once
        assert took >= min(REQUEST_S, TIMEOUT_S) - 2 and PER_ADDRESS < 300, took
    finally:
        for c in socks:
            c.close()
    assert s.get("/api/counts")["total"] == 42


def test_serving_beyond_loopback_needs_links(reference, tmp_path):
    """Beyond loopback as on it: without a link nothing of the page (401); the owner's link, printed at start-up,
    and an invited reviewer's work. #54 item 12: the printed links carry an address others reach (not 0.0.0.0),
    in the same line, and `review invite` prints the same; they open from that address of the machine."""
    ws = _workspace(reference, tmp_path)
    link = run_cli("review", "invite", ws, "ana", check=0).stdout.strip()
    proc = subprocess.Popen([sys.executable, "-m", "gensets.cli", "review", "serve", str(ws), "--port", "0",
                             "--host", "0.0.0.0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        host, port, owner = re.search(r"review page: http://([^/]+):(\d+)/\?token=([\w-]+) ", line).groups()
        assert "1 invited reviewer(s)" in line and host != "0.0.0.0", line
        assert f"others reach it at {host}" in line or "review invite --url http://ADDRESS" in line, line
        with pytest.raises(urllib.error.HTTPError) as e:  # no link: nothing of the page
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/counts", timeout=HTTP_WAIT)
        assert e.value.code == 401
        for token in (link.split("?token=")[1], owner):
            for at in ("127.0.0.1", host):  # loopback, and the address the line printed
                sid = open_session(f"http://{at}:{port}/", token)["session"]
                req = urllib.request.Request(f"http://{at}:{port}/api/counts", headers={SESSION_HEADER: sid})
                with urllib.request.urlopen(req, timeout=HTTP_WAIT) as got:
                    assert json.loads(got.read())["total"] == 42
        invited = run_cli("review", "invite", ws, "ben", check=0).stdout.strip()
        assert invited.startswith(f"http://{host}:{port}/?token=") and " " not in invited, invited
    finally:
        err = stop_server(proc)
    warning = err.splitlines()[0]
    assert warning.startswith("warning: 0.0.0.0:") and "unencrypted" in warning


@pytest.mark.slow
def test_double_review_agreement(reference, tmp_path, server_factory):
    from sklearn.metrics import cohen_kappa_score

    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--double", "--reviewer", "ana")
    keys = _keys(s)[:10]
    ana = ["accept"] * 6 + ["reject"] * 4
    ben = ["accept"] * 4 + ["reject"] * 2 + ["accept"] + ["reject"] * 3
    code, out = s.post({"key": keys[0], "action": "flag", "flagged": True, "reviewer": "ben"})
    assert code == 400 and "first" in out["error"]  # double review: decide, then flag
    for key, a in zip(keys, ana, strict=True):
        assert s.post({"key": key, "action": a, "reviewer": "ana"})[0] == 200
    # blind: ben does not see ana's decisions; the images still wait for him
    mine = {it["key"]: it for it in s.get("/api/items?status=all&reviewer=ben")["items"]}
    assert all(mine[k]["status"] == "pending" and mine[k]["todo"] for k in keys)
    assert not any(it["todo"] for it in s.get("/api/items?status=all&reviewer=ana")["items"] if it["key"] in keys)
    for key, b in zip(keys, ben, strict=True):
        assert s.post({"key": key, "action": b, "reviewer": "ben"})[0] == 200
    assert s.post({"key": keys[0], "action": "flag", "flagged": True, "reviewer": "ben"})[0] == 200
    assert s.get("/api/counts?reviewer=ana")["double_reviewed"] == 10
    expected = cohen_kappa_score([a[:3] for a in ana], [b[:3] for b in ben])
    with s.opener.open(s.url + "api/agreement", timeout=HTTP_WAIT) as r:
        body = r.read().decode()
    a = json.loads(body)  # the page's agreement: counts and kappa, not who decided what
    assert a == {"items": 10, "reviewed_once": 0, "kappa": a["kappa"], "observed_agreement": 0.7}
    assert a["kappa"] == pytest.approx(expected, abs=1e-4) == pytest.approx(0.4)
    assert not any(word in body for word in ("ana", "ben", "accepted", "rejected", *keys))
    s.stop()
    r = run_cli("review", "agreement", ws, "--json", check=0)
    full = json.loads(r.stdout)  # the CLI keeps the whole picture
    assert {k: full[k] for k in a} == a and len(full["disagreements"]) == 3
    assert full["pairs"] == [{"reviewers": ["ana", "ben"], "items": 10, "kappa": a["kappa"]}]
    r = run_cli("review", "agreement", ws, check=0)
    assert "kappa 0.4" in r.stdout and "10 image(s) decided by two reviewers" in r.stdout

    # finalize: agreed images go in; a disagreement waits for an adjudication, not for whoever acted last
    # (ana and ben agree on keys 0-3 (accept) and 7-9 (reject); they disagree on 4, 5 (ana accepts) and 6)
    run_cli("review", "accept", ws, keys[4], "--reviewer", "cleo", "--note", "adjudicated", check=0)
    run_cli("review", "reject", ws, keys[5], "--reviewer", "ana", check=0)  # ana changes her mind: agreed
    r = run_cli("finalize", ws, check=0)  # keys[6]: ben accepted it last, but ana rejected it
    assert "double review: 1 image(s) held back" in r.stderr
    from gensets.shards import iter_shard

    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    got = {d["__key__"]: json.loads(d["json"])["review"] for sh in manifest["shards"]
           for d in iter_shard(ws / "dataset" / sh["path"])}
    assert set(got) == set(keys[:5])
    assert got[keys[0]]["reviewer"] == "ana & ben" and got[keys[4]]["reviewer"] == "cleo"
    background = manifest["funnel"]["background"]
    assert (background["accepted"], background["rejected"], background["pending"]) == (5, 4, 18 - 9)
    from gensets.curation import review_state

    rs = review_state.ReviewState(ws)  # without --double: the workspace stays in double review
    try:
        assert rs.double
    finally:
        rs.close()


def test_double_review_holds_rejections_and_needs_agreeing_adjudicators(reference, tmp_path):
    from gensets.curation import review, state
    from gensets.shards import iter_shard

    ws = _workspace(reference, tmp_path)
    con = state.connect(ws / "state.duckdb")
    try:
        review.set_double(con)
        k = [r["key"] for r in review.list_queue(con)][:3]
        review.decide(con, [k[0]], "rejected", reviewer="ana")  # one rejection: held, never published
        review.decide(con, [k[1]], "accepted", reviewer="ana")  # one acceptance: pending
        review.decide(con, [k[2]], "accepted", reviewer="ana")
        review.decide(con, [k[2]], "rejected", reviewer="ben")
        review.decide(con, [k[2]], "accepted", reviewer="carl")
        v = review.verdicts(con)
        assert (v[k[0]][0], v[k[1]][0]) == ("held", "pending")
        assert (v[k[2]][0], v[k[2]][2]) == ("accepted", "carl")
        review.decide(con, [k[2]], "rejected", reviewer="dave")  # the adjudicators disagree
        assert review.verdicts(con)[k[2]][0] == "disputed"
        review.decide(con, [k[2]], "accepted", reviewer="carl", note="several objects")  # carl writes last
        assert review.verdicts(con)[k[2]][0] == "disputed"
        kept = con.execute("SELECT count(*) FROM reviews").fetchone()[0]
    finally:
        con.close()
    run_cli("finalize", ws, "--include-pending", check=0)
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    published = {d["__key__"] for sh in manifest["shards"] for d in iter_shard(ws / "dataset" / sh["path"])}
    assert k[1] in published and k[0] not in published and k[2] not in published
    funnel = manifest["funnel"].values()
    assert sum(f["pending"] for f in funnel) == kept and sum(f["rejected"] for f in funnel) == 0


def test_failed_start_leaves_review_mode_alone(reference, tmp_path):
    import socket

    ws = _workspace(reference, tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = run_cli("review", "serve", ws, "--port", busy.getsockname()[1], "--double")
    assert r.returncode == 2 and "cannot listen" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert _scalar(ws, "SELECT count(*) FROM settings WHERE name = 'review_mode'") == 0


# ------------------------------------------------------------------------------ CSV and Label Studio
def _scalar(ws, sql: str):
    con = _db(ws)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def _count_log(ws) -> int:
    return _scalar(ws, "SELECT count(*) FROM review_log")


def test_csv_round_trip_and_bad_rows(reference, tmp_path):
    ws = _workspace(reference, tmp_path)
    f = tmp_path / "reviews.csv"
    run_cli("review", "export", ws, "--format", "csv", "--file", f, check=0)
    rows = list(csv.DictReader(f.open()))
    assert len(rows) == 42 and list(rows[0]) == ["key", "status", "label", "reviewer", "note"]
    rows[0].update(status="accepted", reviewer="ana")
    rows[1].update(status="relabeled", label="teapot", reviewer="ana", note="several objects")
    rows[2].update(status="reject")  # the short form, and no reviewer: --reviewer fills it in
    with f.open("w", newline="") as out:
        w = csv.DictWriter(out, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = run_cli("review", "import", ws, "--format", "csv", "--file", f, "--reviewer", "cleo", check=0)
    assert "3 decision(s) recorded, 39 unchanged" in r.stdout
    r = run_cli("review", "import", ws, "--format", "csv", "--file", f, "--reviewer", "cleo", check=0)
    assert "0 decision(s) recorded" in r.stdout  # importing again changes nothing
    again = tmp_path / "again.csv"
    run_cli("review", "export", ws, "--format", "csv", "--file", again, "--status", "relabeled", check=0)
    assert list(csv.DictReader(again.open())) == [
        {"key": rows[1]["key"], "status": "relabeled", "label": "teapot", "reviewer": "ana", "note": "several objects"}]
    assert _count_log(ws) == 3

    lines = f.read_text().splitlines()
    for i, bad, needle in ((6, lines[5].replace(",pending,", ",relabeled,", 1), "relabeled needs"),
                           (8, lines[7].replace(",pending,", ",maybe,", 1), "maybe"),
                           (10, "no_such_key,accepted,,,", "no_such_key"),
                           (12, lines[11].replace(",pending,,", ",relabeled,unicorn,", 1), "unicorn"),
                           (7, lines[6] + ",extra", "fields")):
        broken = tmp_path / f"bad{i}.csv"
        good = [line.replace(",pending,", ",accepted,", 1) for line in lines]  # every other row is fine
        good[i - 1] = bad
        broken.write_text("\n".join(good) + "\n")
        r = run_cli("review", "import", ws, "--format", "csv", "--file", broken, "--reviewer", "cleo")
        assert r.returncode == 2, r.stderr
        msg = r.stderr.strip()
        assert len(msg.splitlines()) == 1 and f"{broken}:{i}:" in msg and needle in msg, msg
        assert _count_log(ws) == 3  # nothing written
    hdr = tmp_path / "hdr.csv"
    hdr.write_text("key,verdict\nx,accepted\n")
    r = run_cli("review", "import", ws, "--format", "csv", "--file", hdr)
    assert r.returncode == 2 and f"{hdr}:1:" in r.stderr and "verdict" in r.stderr


def test_csv_formula_cells_round_trip(reference, tmp_path):
    """Cells a spreadsheet would run as formulas get a leading quote; import takes it off again."""
    ws = _workspace(reference, tmp_path)
    key = _first_key(ws)
    reviewer, note = "=HYPERLINK(\"http://x\")", "\t=1+1; @SUM(A1); 'quoted"
    run_cli("review", "accept", ws, key, "--reviewer", reviewer, "--note", note, check=0)
    f = tmp_path / "reviews.csv"
    run_cli("review", "export", ws, "--format", "csv", "--file", f, "--status", "accepted", check=0)
    assert list(csv.reader(f.open()))[1] == [key, "accepted", "", "'" + reviewer, "'" + note]
    from gensets.curation.interchange import csv_cell, csv_value

    assert csv_cell("\r=1") == "'\r=1" and csv_value(csv_cell("\r=1")) == "\r=1"
    r = run_cli("review", "import", ws, "--format", "csv", "--file", f, check=0)
    assert "0 decision(s) recorded, 1 unchanged" in r.stdout  # read back exactly as it was written
    fresh = tmp_path / "fresh"
    shutil.copytree(reference, fresh)
    run_cli("review", "import", fresh, "--format", "csv", "--file", f, check=0)
    con = _db(fresh)
    assert con.execute("SELECT key, status, reviewer, note FROM review_log").fetchall() == [
        (key, "accepted", reviewer, note)]
    con.close()


def test_decisions_are_written_all_or_none(reference, tmp_path):
    """review.record (every import's single write) rolls back every decision when one fails."""
    from gensets.curation import review, state

    ws = _workspace(reference, tmp_path)
    con = state.connect(ws / "state.duckdb")
    try:
        keys = [r["key"] for r in review.list_queue(con)][:3]
        bad = object()  # DuckDB cannot bind it: the third write fails after two succeeded
        with pytest.raises(Exception, match="object"):
            review.record(con, [(keys[0], "accepted", None, "ana", None), (keys[1], "rejected", None, "ana", None),
                                (keys[2], "accepted", None, bad, None)])
        assert con.execute("SELECT count(*) FROM review_log").fetchone()[0] == 0
        assert {r["status"] for r in review.list_queue(con, status=None) if r["key"] in keys} == {"pending"}
    finally:
        con.close()


def _first_key(ws) -> str:
    return _scalar(ws, "SELECT min(key) FROM reviews")


def test_label_studio_export_and_import(reference, tmp_path):
    import xml.etree.ElementTree as ET

    ws = _workspace(reference, tmp_path)
    f = tmp_path / "tasks.json"
    run_cli("review", "export", ws, "--format", "label-studio", "--file", f, "--status", "pending", check=0)
    tasks = json.loads(f.read_text())
    assert len(tasks) == 42
    t = tasks[0]
    head, data = t["data"]["image"].split(",", 1)
    assert head == "data:image/jpeg;base64"
    from gensets.shards import iter_shard

    con = _db(ws)
    shard = con.execute("SELECT shard FROM samples WHERE key = ?", [t["data"]["key"]]).fetchone()[0]
    con.close()
    original = next(d["jpg"] for d in iter_shard(ws / "candidates" / shard) if d["__key__"] == t["data"]["key"])
    assert base64.b64decode(data) == original
    assert [p["model_version"] for p in t["predictions"]] == ["tiny:clip", "tiny:resnet", "tiny:vit",
                                                               "gensets: all surrogates"]
    assert all(p["result"][0]["from_name"] == "surrogate_top1" for p in t["predictions"])
    config = ET.parse(f"{f}.label_config.xml").getroot()
    names = {c.get("name") for c in config.iter("Choices")}
    assert names == {"verdict", "class", "flags"}
    assert len([c for c in config.iter("Choice")]) == 3 + 113 + 1

    def ann(user, verdict, cls=None, flags=(), cancelled=False):
        result = [{"from_name": "verdict", "to_name": "image", "type": "choices", "value": {"choices": [verdict]}}]
        if cls:
            result.append({"from_name": "class", "to_name": "image", "type": "choices", "value": {"choices": [cls]}})
        if flags:
            result.append({"from_name": "flags", "to_name": "image", "type": "choices", "value": {"choices": list(flags)}})
        return {"id": 1, "completed_by": user, "result": result, "was_cancelled": cancelled}

    exported = [{**tk, "id": i, "annotations": []} for i, tk in enumerate(tasks[:5])]
    exported[0]["annotations"] = [ann({"id": 1, "email": "ana@example.org"}, "accept"), ann(2, "accept")]
    exported[1]["annotations"] = [ann({"id": 1, "email": "ana@example.org"}, "relabel", "teapot", ["several objects"])]
    exported[2]["annotations"] = [ann(2, "reject"), ann(3, "accept", cancelled=True)]
    src = tmp_path / "export.json"
    src.write_text(json.dumps(exported, indent=2))
    r = run_cli("review", "import", ws, "--format", "label-studio", "--file", src)
    assert r.returncode == 2 and "--double" in r.stderr  # two annotators of task 0: double review's rules
    r = run_cli("review", "import", ws, "--format", "label-studio", "--file", src, "--double", check=0)
    assert "4 decision(s) recorded" in r.stdout
    con = _db(ws)
    log = con.execute("SELECT key, status, label, reviewer, note FROM review_log ORDER BY rowid").fetchall()
    con.close()
    k = [tk["data"]["key"] for tk in exported]
    assert log == [(k[0], "accepted", tasks[0]["data"]["class"], "ana@example.org", None),
                   (k[0], "accepted", tasks[0]["data"]["class"], "label-studio:2", None),
                   (k[1], "relabeled", "teapot", "ana@example.org", "several objects"),
                   (k[2], "rejected", tasks[2]["data"]["class"], "label-studio:2", None)]
    # a bad annotation anywhere: its task (id and key) is named and nothing is written
    exported[3]["annotations"] = [ann(4, "accept")]
    exported[4]["annotations"] = [ann(4, "relabel", "unicorn")]
    src.write_text(json.dumps(exported, indent=2))
    r = run_cli("review", "import", ws, "--format", "label-studio", "--file", src)
    assert r.returncode == 2 and f"{src}: task 4 ({k[4]}):" in r.stderr and "unicorn" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and _count_log(ws) == 4
    src.write_text('[{"data": {"key": "k"}, "annotations": []}')  # read a task at a time: the list is not closed
    r = run_cli("review", "import", ws, "--format", "label-studio", "--file", src)
    assert r.returncode == 1 and f"{src}:1:" in r.stderr and "JSON" in r.stderr  # a corrupt file: a data error


def test_pages_and_filters_in_process(reference, tmp_path, monkeypatch):
    """The app without a server (Flask's test client): keyset pages forward and back, filters, the page's content."""
    from gensets.curation import review_state, routes

    ws = _workspace(reference, tmp_path)
    monkeypatch.setattr(review_state, "PAGE_SIZE", 10)
    con = _db(ws)
    order = [k for (k,) in con.execute("SELECT r.key FROM reviews r JOIN samples s USING (key) "
                                       "ORDER BY s.config, s.label, r.key").fetchall()]
    con.close()
    rs = review_state.ReviewState(ws, reviewer="ana")
    try:
        client = owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
        # every key once, in page order (config, class, key), over 5 pages of 10, 10, 10, 10, 2
        pages, cursor = [], ""
        while cursor is not None:
            p = client.get(f"/api/items?status=all{cursor}").get_json()
            pages.append(p)
            cursor = None if p["after"] is None else f"&after={p['after']}"
        assert [len(p["items"]) for p in pages] == [10, 10, 10, 10, 2] and pages[0]["before"] is None
        assert [it["key"] for p in pages for it in p["items"]] == order and {p["matching"] for p in pages} == {42}
        back = client.get(f"/api/items?status=all&before={pages[-1]['before']}").get_json()  # back from the last
        assert back["items"] == pages[-2]["items"] and back["after"] == pages[-2]["after"]
        assert back["before"] == pages[-2]["before"]
        first = client.get(f"/api/items?status=all&before={pages[1]['before']}").get_json()
        assert first["items"] == pages[0]["items"] and first["before"] is None
        p = client.get("/api/items?class=mug&config=texture").get_json()
        assert p["matching"] == 4 and {it["label"] for it in p["items"]} == {"mug"}
        assert [c for c, _ in p["classes"]] == ["backpack", "chair", "mug"]
        shown = client.get(f"/api/page?status=all&after={pages[0]['after']}").get_json()  # what the shell shows
        assert len(shown["items"]) == 10 and shown["before"] is not None and shown["after"] is not None
        assert shown["matching"] == 42 and shown["filters"]["status"] == "all" and shown["role"] == "owner"
        assert "teapot" in shown["class_names"]  # the relabel picker offers every class of the dataset
        shell = client.get("/?status=all").get_data(as_text=True)
        assert shown["items"][0]["key"] not in shell  # the shell holds nothing of the review
        r = client.post("/api/decide", json={"key": p["items"][0]["key"], "action": "accept"})
        assert r.status_code == 200 and r.get_json()["counts"]["accepted"] == 1
        assert client.get("/api/items?status=accepted").get_json()["matching"] == 1
        assert client.get("/api/items").get_json()["matching"] == 41  # still to review
        # a cursor survives decisions: the next page of "to review" neither skips nor repeats an image
        todo = client.get("/api/items").get_json()
        for it in todo["items"]:
            assert client.post("/api/decide", json={"key": it["key"], "action": "reject"}).status_code == 200
        nxt = client.get(f"/api/items?after={todo['after']}").get_json()
        assert [it["key"] for it in nxt["items"]] == [k for k in order if k not in
                                                      {p["items"][0]["key"], *(it["key"] for it in todo["items"])}][:10]
    finally:
        rs.close()
