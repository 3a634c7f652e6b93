"""Many reviewers, one workspace (#27 item 1): the CLI, finalize and other servers beside a running review page;
reviewers known by their links (tokens), CSRF tokens on every POST; concurrent decisions all kept."""

import hashlib
import json
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest

from .conftest import HTTP_WAIT, run_cli
from .test_review_web import Server, _browser, _db, _playwright, goto


@pytest.fixture
def ws(small, tmp_path):
    out = tmp_path / "ws"
    shutil.copytree(small, out)
    return out


def _keys(ws) -> list[str]:
    from gensets.curation import state

    con = state.connect(ws / "state.duckdb", read_only=True)  # waits for a server's request, if one holds it
    try:
        return [k for (k,) in con.execute("SELECT key FROM reviews ORDER BY key").fetchall()]
    finally:
        con.close()


def _invite(ws, name: str) -> str:
    link = run_cli("review", "invite", ws, name, check=0).stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:8765/\?token=[\w-]{43}", link), link
    return link.split("?token=")[1]


def _no_raw_error(r) -> None:
    assert "IO Error" not in r.stderr and "Conflicting lock" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_commands_finalize_and_a_second_server_work_beside_a_running_server(ws, server_factory):
    s = server_factory(ws, "--reviewer", "ana")
    record = json.loads((ws / ".review-server.json").read_text())
    assert [r["pid"] for r in record] == [s.proc.pid] and record[0]["url"] == s.url
    assert (ws / ".review-server.json").stat().st_mode & 0o077 == 0  # its release key: the workspace's owner's
    for headers in ({}, {"X-Gensets-Release": "guess"}):  # only a gensets process that read the record asks
        req = urllib.request.Request(s.url + "internal/release", data=b"", headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=HTTP_WAIT)
        assert e.value.code == 403
    req = urllib.request.Request(s.url + "internal/release", data=b"", method="POST",
                                 headers={"X-Gensets-Release": record[0]["release"]})
    with urllib.request.urlopen(req, timeout=HTTP_WAIT) as r:
        assert r.status == 204
    keys = _keys(ws)
    listed = run_cli("review", "list", ws, "--json")
    _no_raw_error(listed)
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == len(keys)
    accepted = run_cli("review", "accept", ws, keys[0], "--reviewer", "cli")
    _no_raw_error(accepted)
    assert accepted.returncode == 0 and "1 sample(s) accepted" in accepted.stdout
    assert s.post({"key": keys[1], "action": "reject"})[0] == 200  # the page goes on meanwhile
    second = server_factory(ws, "--reviewer", "ben")  # a second reviewer's server on the same workspace
    assert second.post({"key": keys[2], "action": "accept"})[0] == 200
    assert s.get("/api/counts")["accepted"] == 2 and second.get("/api/counts")["rejected"] == 1
    assert {r["pid"] for r in json.loads((ws / ".review-server.json").read_text())} == {s.proc.pid, second.proc.pid}
    publishable = [r for r in json.loads(run_cli("review", "list", ws, "--status", "all", "--json", check=0).stdout)
                   if r["status"] in ("pending", "accepted", "relabeled")]
    assert keys[1] not in {r["key"] for r in publishable}  # rejected on the page
    done = run_cli("finalize", ws, "--include-pending")
    _no_raw_error(done)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    assert sum(manifest["counts"].values()) == len(publishable)
    assert not list(ws.glob(".state.snapshot*"))  # finalize's snapshot is gone
    assert s.post({"key": keys[3], "action": "accept"})[0] == 200  # and the page still saves
    s.stop()
    assert [r["pid"] for r in json.loads((ws / ".review-server.json").read_text())] == [second.proc.pid]
    second.stop()
    assert not (ws / ".review-server.json").exists()
    con = _db(ws)
    log = con.execute("SELECT key, status, reviewer FROM review_log ORDER BY rowid").fetchall()
    con.close()
    assert log == [(keys[0], "accepted", "cli"), (keys[1], "rejected", "ana"), (keys[2], "accepted", "ben"),
                   (keys[3], "accepted", "ana")]


def _holder(ws, seconds: float, as_server: bool = False) -> subprocess.Popen:
    """Another process holding state.duckdb (as a review server's request or finalize's snapshot do, briefly);
    ``as_server``: its command line that of ``gensets review serve WS`` (what a record entry is checked against)."""
    code = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[-2]); print('held', flush=True); "
            "time.sleep(float(sys.argv[-1])); c.close()")
    pose = ["gensets.cli", "review", "serve", str(ws)] if as_server else []
    p = subprocess.Popen([sys.executable, "-c", code, *pose, str(ws / "state.duckdb"), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_command_waits_for_the_database_in_one_line_naming_the_server(ws):
    from gensets.curation import state
    from gensets.errors import Busy

    holder = _holder(ws, 2.0, as_server=True)
    url = "http://127.0.0.1:8999/"
    (ws / ".review-server.json").write_text(json.dumps([{"pid": holder.pid, "url": url, "started": 0}]))
    try:
        with pytest.raises(Busy) as e:  # too long a wait: one line naming the server, never DuckDB's message
            state.connect(ws / "state.duckdb", wait=0.2, notice=None)
        assert str(e.value).count("\n") == 0 and f"gensets review serve (pid {holder.pid}, {url})" in str(e.value)
        assert "IO Error" not in str(e.value) and e.value.exit_code == 4
        r = run_cli("review", "list", ws, "--status", "all")  # waits, says so once, then lists
    finally:
        holder.wait(30)
    _no_raw_error(r)
    waiting = [line for line in r.stderr.splitlines() if line.startswith("waiting")]
    assert r.returncode == 0 and len(waiting) == 1, r.stderr
    assert f"gensets review serve (pid {holder.pid}, {url}) is using it" in waiting[0]
    assert len(r.stdout.splitlines()) == 1 + len(_keys(ws))


def test_a_forged_server_record_gets_no_link_and_no_request(ws):
    """#46 item 4: .review-server.json travels with the workspace; an entry whose process is no review server of
    this workspace (pid 1: alive everywhere; a process that merely holds the database) is not believed."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))  # where a forged entry sends the release request
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    came: list = []
    done = threading.Event()

    def accept():
        while not done.is_set():
            try:
                came.append(listener.accept()[0].recv(1024))
            except TimeoutError:
                pass

    watcher = threading.Thread(target=accept)
    watcher.start()
    holder = _holder(ws, 1.5)  # invite finds state.duckdb held and asks the recorded server to give it up
    (ws / ".review-server.json").write_text(json.dumps([
        {"pid": 1, "url": "http://attacker.example:8765/", "started": 0, "release": "k"},
        {"pid": holder.pid, "url": f"http://127.0.0.1:{port}/", "started": 0, "release": "k"}]))
    try:
        r = run_cli("review", "invite", ws, "carol")
    finally:
        holder.wait(30)
        done.set()
        watcher.join()
        listener.close()
    _no_raw_error(r)
    assert r.returncode == 0 and "attacker" not in r.stdout and str(port) not in r.stdout, r.stdout
    assert r.stdout.startswith("http://127.0.0.1:8765/?token=")
    assert came == []  # no release request (and so no release key) went to the forged address
    notes = [line for line in r.stderr.splitlines() if line.startswith("note:") and ".review-server.json" in line]
    assert len(notes) == 2 and "pid 1 " in notes[0] and f"pid {holder.pid} " in notes[1], r.stderr


def test_links_and_csrf_tokens_guard_the_page(ws, server_factory):
    token = _invite(ws, "ana")
    con = _db(ws)
    stored = con.execute("SELECT token_sha256, reviewer, created IS NOT NULL, revoked FROM reviewer_tokens").fetchall()
    con.close()
    assert stored == [(hashlib.sha256(token.encode()).hexdigest(), "ana", True, None)]
    assert token.encode() not in b"".join(p.read_bytes() for p in ws.glob("state.duckdb*"))  # only its hash
    s = server_factory(ws, "--reviewer", "mallory", token=token)
    key = _keys(ws)[0]

    def status(path: str, headers=None, data=None) -> int:
        req = urllib.request.Request(s.url + path, headers=headers or {}, data=data)
        try:
            with urllib.request.urlopen(req, timeout=HTTP_WAIT) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    # no link, or a wrong one: nothing of the page (invited reviewers only, also on loopback)
    for path in ("api/items", "api/counts", f"image/{key}", "?token=not-a-token", "api/page"):
        assert status(path) == 401, path
    assert status("static/review.js") == 200 and status("") == 200  # the script, and the shell, which holds nothing
    assert status("api/decide", {"Content-Type": "application/json"}, json.dumps({"key": key, "action": "accept"})
                  .encode()) == 401
    assert status("api/counts", {"X-Gensets-Session": "forged.session"}) == 401
    # with ana's link: the page is hers, whatever a request says
    page = s.get("/api/page")
    assert page["reviewer"] == "ana" and page["signed_in"] and page["role"] == "reviewer"
    assert s.post({"key": key, "action": "accept", "reviewer": "ben"})[0] == 403  # a forged name
    with pytest.raises(urllib.error.HTTPError) as e:
        s.get("/api/items?reviewer=ben")
    assert e.value.code == 403
    assert s.post({"key": key, "action": "accept"}, csrf=False)[0] == 403  # no CSRF token
    s.csrf, good = "0" * 64, s.csrf
    assert s.post({"key": key, "action": "accept"})[0] == 403  # a wrong one
    s.csrf = good
    req = urllib.request.Request(s.url + "api/decide", data=json.dumps({"key": key, "action": "accept"}).encode(),
                                 headers={"Content-Type": "application/json", "X-CSRF-Token": good,
                                          "Origin": "http://evil.example"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        s.opener.open(req, timeout=HTTP_WAIT)
    assert e.value.code == 403  # another site's page
    code, out = s.post({"key": key, "action": "accept", "reviewer": "ana"})
    assert code == 200 and out["status"] == "accepted"
    revoked = run_cli("review", "revoke", ws, "ana", check=0)
    assert "1 link(s) revoked" in revoked.stdout
    # at once: the server gave the database up to the command, and reads the invitations when it opens it again
    assert s.post({"key": key, "action": "reject"})[0] == 401
    again = run_cli("review", "revoke", ws, "ana")
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1 and "ana" in again.stderr
    s.stop()
    con = _db(ws)
    assert con.execute("SELECT key, status, reviewer FROM review_log").fetchall() == [(key, "accepted", "ana")]
    con.close()


def test_two_invited_reviewers_on_two_servers_lose_no_decision(ws, server_factory):
    """ana on one server, ben on another, 20 decisions each at once on overlapping images, in double review:
    every decision is in the log, under the link's reviewer, and each image's verdict follows both."""
    tokens = {name: _invite(ws, name) for name in ("ana", "ben")}
    first = server_factory(ws, "--double", token=tokens["ana"])
    second = server_factory(ws, token=tokens["ben"])  # the workspace is in double review: so is this server
    keys = _keys(ws)[:12]
    results: dict[str, list] = {"ana": [], "ben": []}
    failures: list[str] = []

    def review(name: str, s: Server) -> None:
        for i in range(20):  # bounded: 20 decisions each, every request with a timeout
            key = keys[(i + (name == "ben") * 5) % len(keys)]
            action = "reject" if name == "ben" and i % 4 == 0 else "accept"
            try:
                code, out = s.post({"key": key, "action": action})
            except Exception as e:  # noqa: BLE001 - a request that failed in the client (timeout, reset) is a failure
                failures.append(f"{name}: decision {i}: {e!r}")
                continue
            if code != 200:
                failures.append(f"{name}: {code} {out}")
                continue
            results[name].append((key, name, out["status"], out["ms"]))

    threads = [threading.Thread(target=review, args=("ana", first)), threading.Thread(target=review, args=("ben", second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and failures == []
    assert sum(map(len, results.values())) == 40
    ms = sorted(r[3] for rs in results.values() for r in rs)
    print(f"40 decisions on two servers at once; saved in median {ms[20]:.0f} ms, max {ms[-1]:.0f} ms")
    first.stop()
    second.stop()
    con = _db(ws)
    log = con.execute("SELECT key, reviewer, status FROM review_log ORDER BY rowid").fetchall()
    con.close()
    assert len(log) == 40 and Counter(log) == Counter(r[:3] for rs in results.values() for r in rs)
    from gensets.curation import review, state

    con = state.connect(ws / "state.duckdb", read_only=True)
    verdicts = review.verdicts(con)
    con.close()
    last = {(k, who): st for k, who, st in log}  # each reviewer's latest decision (in log order)
    for key in keys:
        ana, ben = last.get((key, "ana")), last.get((key, "ben"))
        if ana is None or ben is None:  # one reviewer so far: a rejection is held, the rest waits
            want = "held" if "rejected" in (ana, ben) else "pending"
        else:
            want = ana if ana == ben else "disputed"
        assert verdicts[key][0] == want, (key, ana, ben, verdicts[key])


def test_invite_names_the_running_server_and_checks_its_input(ws, server_factory):
    s = server_factory(ws)
    link = run_cli("review", "invite", ws, "cleo", check=0)
    assert link.stdout.startswith(f"{s.url}?token=") and "cleo" in link.stderr
    bad = run_cli("review", "invite", ws, "cleo", "--url", "javascript:alert(1)")
    assert bad.returncode == 2 and "--url" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_cli("review", "invite", ws, " x\n")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_link_in_chromium_reviews_as_its_reviewer(ws, server_factory):
    """The page opened from a link: a session of the tab replaces the token in the address, the Reviewer field is
    the link's and read-only, and the page's script sends the CSRF token with its decision."""
    sync_api = _playwright()
    token = _invite(ws, "ana")
    s = server_factory(ws, "--reviewer", "mallory", token=token)
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        goto(page, f"{s.url}?token={token}&status=all")
        assert "token" not in page.url and "status=all" in page.url
        assert page.locator("#reviewer").input_value() == "ana" and page.locator("#reviewer").get_attribute("readonly") is not None
        key = page.locator(".card").nth(0).get_attribute("data-key")
        page.locator(".card").nth(0).click()
        page.keyboard.press("a")
        page.wait_for_selector(f'.card[data-key="{key}"].status-accepted', timeout=10_000)
        assert errors == []
        browser.close()
    s.stop()
    con = _db(ws)
    assert con.execute("SELECT key, status, reviewer FROM review_log").fetchall() == [(key, "accepted", "ana")]
    con.close()


def test_reviewer_names_are_chosen_never_the_login_name(ws, server_factory, monkeypatch):
    """#46 item 8: a decision without --reviewer recorded the OS login name, and finalize published it unsaid."""
    monkeypatch.delenv("GENSETS_REVIEWER", raising=False)
    keys = _keys(ws)
    r = run_cli("review", "accept", ws, "--all-pending")
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "--reviewer NAME" in err and "GENSETS_REVIEWER" in err
    assert json.loads(run_cli("review", "list", ws, "--json", check=0).stdout) != []  # nothing decided
    run_cli("review", "accept", ws, keys[0], env={"GENSETS_REVIEWER": "ana"}, check=0)  # a configured name
    run_cli("review", "reject", ws, keys[1], "--reviewer", "ben", env={"GENSETS_REVIEWER": "ana"}, check=0)
    s = server_factory(ws)  # no name given: each reviewer types theirs on the page
    code, out = s.post({"key": keys[2], "action": "accept"})
    assert code == 400 and "Reviewer" in out["error"], out
    assert s.post({"key": keys[2], "action": "accept", "reviewer": "cleo"})[0] == 200
    s.stop()
    rows = {r["key"]: r["reviewer"] for r in json.loads(run_cli("review", "list", ws, "--status", "all", "--json",
                                                                 check=0).stdout)}
    assert (rows[keys[0]], rows[keys[1]], rows[keys[2]]) == ("ana", "ben", "cleo")
    assert {v for v in rows.values() if v} == {"ana", "ben", "cleo"}
    done = run_cli("finalize", ws, "--include-pending", check=0)
    assert "reviewer names published in each sample's json.review.reviewer: ana, cleo" in done.stderr.splitlines()
