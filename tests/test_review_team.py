"""A review a team shares: work handed out by leases, stale decisions refused (409) and overridden knowingly,
pages that learn of others' decisions (/api/changes); three real browsers on one queue."""

import random
import re
import threading
import time
from collections import Counter

import pytest

from gensets.curation import leases

from .conftest import owner_session, run_cli
from .test_review_web import _browser, _db, _playwright, _workspace, goto


def _client(rs, reviewer: str):
    from gensets.curation import routes

    # the owner's link (each client its own session), reviewing under the name the requests give
    return owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)


@pytest.fixture
def state(reference, tmp_path, monkeypatch):
    def make(*, double=False, page_size=5):
        from gensets.curation import review_state

        rs = review_state.ReviewState(_workspace(reference, tmp_path), double=double, page_size=page_size,
                                      hand_out=page_size)
        made.append(rs)
        rs.keep_mode()
        return rs

    made = []
    yield make
    for rs in made:
        rs.close()


def test_a_lease_ends_unless_renewed_and_a_decision_releases_it():
    import datetime as dt

    import duckdb

    from gensets.curation import state

    con = duckdb.connect()
    con.execute(state.SCHEMA)
    t0 = dt.datetime(2026, 1, 1)

    def at(s):
        return t0 + dt.timedelta(seconds=s)

    leases.take(con, "ana", ["a", "b"], at(0), seconds=10)
    leases.take(con, "ben", ["b"], at(0), seconds=10)
    assert leases.others(con, "cleo", at(1)) == {"a": 1, "b": 2} and leases.others(con, "ana", at(1)) == {"b": 1}
    assert leases.renew(con, "ana", at(8), seconds=10 + leases.RENEW_S) == 2  # due: renewed until 8 + 10 + RENEW_S
    assert leases.renew(con, "ana", at(9), seconds=10 + leases.RENEW_S) == 2  # not due yet: no write
    assert leases.held(con, at(9)) == {"ana": 2, "ben": 1}
    # ben's page stopped renewing: his lease ended; ana's goes on
    assert leases.others(con, "cleo", at(12)) == {"a": 1, "b": 1}
    leases.release(con, "ana", ["a"])
    assert leases.others(con, "cleo", at(12)) == {"b": 1}
    leases.take(con, "ana", ["c"], at(12))  # her next page: what she held before is handed back
    assert leases.others(con, "cleo", at(13)) == {"c": 1}
    assert con.execute("SELECT count(*) FROM review_leases").fetchone()[0] == 1  # ended leases dropped


def _todo(client, who):
    return client.get(f"/api/items?reviewer={who}").get_json()


def test_leases_hand_each_pending_image_to_one_reviewer(state):
    rs = state()
    names = ("ana", "ben", "cleo")
    clients = {n: _client(rs, n) for n in names}
    pages = {n: _todo(clients[n], n) for n in names}
    shown = [it["key"] for n in names for it in pages[n]["items"]]
    assert len(shown) == 15 and len(set(shown)) == 15  # three pages of five, no image on two of them
    # page order still applies within what is not leased: ben's page is the five after ana's
    order = [it["key"] for it in clients["ana"].get("/api/items?status=all&reviewer=x").get_json()["items"]]
    assert [it["key"] for it in pages["ana"]["items"]] == order[:5]
    assert [it["key"] for it in pages["ben"]["items"]] == order[5:10] or len(order) == 5
    # a decision releases the image; the reviewer's next page takes the next free ones, never another's
    for it in pages["ana"]["items"]:
        r = clients["ana"].post("/api/decide", json={"key": it["key"], "action": "accept", "reviewer": "ana",
                                                     "version": it["version"]})
        assert r.status_code == 200 and r.get_json()["version"] == it["version"] + 1
    again = [it["key"] for it in _todo(clients["ana"], "ana")["items"]]
    assert not set(again) & set(shown) and len(again) == 5
    # a page that stops renewing its leases (closed) hands its images back after LEASE_S: a lease that ended
    with rs._held() as con:  # every page stopped renewing: their leases ended LEASE_S ago
        con.execute("UPDATE review_leases SET until = until - INTERVAL (? || ' seconds')",
                       [str(int(leases.LEASE_S) + 1)])
    cleo = {it["key"] for it in _todo(clients["cleo"], "cleo")["items"]}
    assert cleo == {it["key"] for it in pages["ben"]["items"]} and not cleo & set(again)  # first in page order


def test_a_stale_decision_gets_409_then_an_override_is_logged(state):
    rs = state()
    ana, ben = _client(rs, "ana"), _client(rs, "ben")
    it = _todo(ana, "ana")["items"][0]
    key, v = it["key"], it["version"]
    since = ben.get("/api/changes?reviewer=ben").get_json()["cursor"]
    assert ana.post("/api/decide", json={"key": key, "action": "accept", "reviewer": "ana",
                                         "version": v}).status_code == 200
    # ben's page learns of it by polling
    ch = ben.get(f"/api/changes?since={since}&reviewer=ben").get_json()
    assert [(c["key"], c["status"], c["by"], c["version"]) for c in ch["items"]] == [(key, "accepted", "ana", v + 1)]
    assert ch["counts"]["accepted"] == 1 and ch["cursor"] > since
    # ben decides on the version he saw: 409, nothing saved, the newer decision and who made it
    r = ben.post("/api/decide", json={"key": key, "action": "reject", "reviewer": "ben", "version": v})
    assert r.status_code == 409
    body = r.get_json()
    assert body["newest"][0]["by"] == "ana" and body["newest"][0]["status"] == "accepted"
    assert "ana decided this image meanwhile" in body["error"]
    # the same for a range
    r = ben.post("/api/bulk", json={"keys": [key], "action": "reject", "reviewer": "ben", "versions": {key: v}})
    assert r.status_code == 409
    # an explicit override, on the version the 409 showed
    r = ben.post("/api/decide", json={"key": key, "action": "reject", "reviewer": "ben", "version": v + 1,
                                      "override": True})
    assert r.status_code == 200 and r.get_json()["override"] is True and r.get_json()["version"] == v + 2
    rs.release()  # the server gives state.duckdb up, as to any other process asking
    con = _db(rs.ws.root)
    log = con.execute("SELECT reviewer, status, note FROM review_log WHERE key = ? ORDER BY rowid", [key]).fetchall()
    con.close()
    assert log == [("ana", "accepted", None), ("ben", "rejected", "override of ana: accepted")]
    hist = ana.get(f"/api/history?key={key}&reviewer=ana").get_json()["history"]
    assert hist[-1]["overrides"] == "ana" and hist[-1]["note"] == "override of ana: accepted"
    # no version (a script, an old page): as before, the latest decision counts
    assert ana.post("/api/decide", json={"key": key, "action": "accept", "reviewer": "ana"}).status_code == 200
    # a comment cannot pose as an override mark
    r = ana.post("/api/decide", json={"key": key, "action": "comment", "reviewer": "ana", "comment": "override of x"})
    assert r.status_code == 400


def _work(client, who, decided, failures, rng):
    """One reviewer over HTTP: their "to review" page, every image on it decided, until nothing is left."""
    for _ in range(200):
        items = _todo(client, who)["items"]
        if not items:
            counts = client.get(f"/api/changes?reviewer={who}").get_json()["counts"]
            if counts["todo"] == 0:
                return
            time.sleep(0.05)  # others hold what is left: wait for their decisions
            continue
        for it in items:
            time.sleep(rng.uniform(0, 0.02))
            r = client.post("/api/decide", json={"key": it["key"], "action": rng.choice(["accept", "reject"]),
                                                 "reviewer": who, "version": it["version"]})
            if r.status_code == 200:
                decided.append((it["key"], who))
            else:
                failures.append((who, r.status_code, r.get_json()))
    failures.append((who, "did not finish"))


def test_double_review_gives_each_image_exactly_two_reviewers(state):
    rs = state(double=True, page_size=4)
    names = ("ana", "ben", "cleo")
    clients = {n: _client(rs, n) for n in names}
    decided, failures = [], []
    threads = [threading.Thread(target=_work, args=(clients[n], n, decided, failures, random.Random(i)))
               for i, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads) and failures == []
    rs.close()
    con = _db(rs.ws.root)
    per = con.execute("SELECT key, count(DISTINCT reviewer), count(*) FROM review_log GROUP BY key").fetchall()
    total = con.execute("SELECT count(*) FROM reviews WHERE status <> 'below-quality'").fetchall()[0][0]
    con.close()
    assert len(per) == total == 42
    assert {(n, m) for _, n, m in per} == {(2, 2)}  # every image: two decisions, by two different reviewers
    assert Counter(k for k, _ in decided) == Counter({k: 2 for k, *_ in per})
    assert len({w for _, w in decided}) == 3  # the work was shared


def test_three_reviewers_in_chromium_never_decide_the_same_image(reference, tmp_path, server_factory):
    """Three invited reviewers, each in their own browser session, work through one queue at once with random
    think times: no image decided twice, every 200 answer in review_log; a stale decision gets 409 on the page,
    which shows who decided, and a second key press overrides it, logged as an override."""
    sync_api = _playwright()
    ws = _workspace(reference, tmp_path)
    links = {n: run_cli("review", "invite", ws, n, check=0).stdout.strip() for n in ("ana", "ben", "cleo")}
    s = server_factory(ws, "--page-size", "4", token=links["ana"].split("?token=")[1])
    rng = random.Random(46)
    answers: list[tuple] = []
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        pages, errors = {}, []
        for name, link in links.items():
            page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("response", lambda r, n=name: answers.append((n, r.status, r.request.post_data_json))
                    if r.url.endswith("/api/decide") else None)
            goto(page, s.url.rstrip("/") + "/?" + link.split("?", 1)[1])
            pages[name] = page
        done = set()
        for _ in range(400):  # round robin over the three sessions, each with its think time
            if len(done) == 3:
                break
            for name, page in pages.items():
                if name in done:
                    continue
                page.wait_for_timeout(rng.uniform(0, 200))
                pending = page.locator(".card.status-pending")
                if pending.count():
                    key = pending.first.get_attribute("data-key")
                    pending.first.click()
                    page.keyboard.press(rng.choice("ar"))
                    page.locator(f'.card[data-key="{key}"]:not(.status-pending)').wait_for(timeout=10_000)
                elif page.locator("#n-pending").inner_text() == "0":
                    done.add(name)
                else:
                    goto(page, s.url + "?status=todo")  # the next images (what others hold stays theirs)
        assert len(done) == 3
        # a forced stale decision: ana's page shows an image; ben decides it on his page meanwhile, and ana's polls
        # do not learn of it (they ask from the start of the log, so their cursor passes ben's decision by)
        ana, ben = pages["ana"], pages["ben"]
        goto(ana, s.url + "?status=all")
        goto(ben, s.url + "?status=all")
        ana.route("**/api/changes?*", lambda route: route.continue_(url=re.sub(r"&?since=\d+", "", route.request.url)))
        key = ana.locator(".card").first.get_attribute("data-key")
        ana.locator(".card").first.click()
        ben.locator(f'.card[data-key="{key}"]').click()
        before = ana.locator(f'.card[data-key="{key}"]').get_attribute("class")
        ben.keyboard.press("l")
        ben.locator("#relabel-input").fill("teapot")
        ben.keyboard.press("Enter")
        ben.locator(f'.card[data-key="{key}"].status-relabeled').wait_for(timeout=10_000)
        # ana's page still shows the version she saw
        ana.keyboard.press("r" if "status-accepted" in before else "a")
        ana.locator("#d-conflict", has_text="ben").wait_for(timeout=10_000)  # 409: who decided, what
        ana.locator(f'.card[data-key="{key}"].status-relabeled').wait_for(timeout=10_000)
        ana.unroute("**/api/changes?*")
        ana.locator(".card").first.click()
        ana.keyboard.press("r")  # again: an explicit override
        ana.locator(f'.card[data-key="{key}"].status-rejected').wait_for(timeout=10_000)
        # ben's page learns of it within seconds (polling)
        ben.locator(f'.card[data-key="{key}"].status-rejected').wait_for(timeout=15_000)
        assert errors == []
        browser.close()
    s.stop()
    con = _db(ws)
    log = con.execute("SELECT key, reviewer, status, note FROM review_log ORDER BY rowid").fetchall()
    con.close()
    *work, stale_ben, override = log
    assert len(work) == 42 and len({k for k, *_ in work}) == 42  # no image decided by two reviewers
    assert len({r for _, r, *_ in work}) >= 2  # the work was shared
    assert stale_ben[:3] == (key, "ben", "relabeled") and override[:3] == (key, "ana", "rejected")
    assert override[3] == "override of ben: relabeled"
    ok = [(n, a["key"]) for n, code, a in answers if code == 200]
    assert Counter(ok) == Counter((r, k) for k, r, *_ in log)  # every 200 answer is in the log, nothing else
    assert [code for _, code, _ in answers if code != 200] == [409]  # the stale one, refused


def _pages(url: str, tokens: dict) -> dict:
    """Each reviewer's "to review" page, as their browser asks for it once their link opened a session."""
    import json
    import urllib.request

    from .conftest import HTTP_WAIT
    from .test_review_web import open_session

    out = {}
    for name, token in tokens.items():
        sid = open_session(url, token)["session"]
        req = urllib.request.Request(url + "api/page", headers={"X-Gensets-Session": sid})
        with urllib.request.urlopen(req, timeout=HTTP_WAIT) as r:
            out[name] = [it["key"] for it in json.loads(r.read())["items"]]
    return out


def test_a_restart_or_a_second_server_hands_out_no_image_twice(reference, tmp_path):
    """Item 7: leases lived in the server's memory: after a restart the owner's new page was handed images still
    shown on other reviewers' open pages, and two servers on one workspace did not share them. Now they live in
    state.duckdb: three pages open, the server restarted, the owner's new page and a second server's page get other
    images, and each reviewer who opens their link again gets their own images back."""
    from .test_review_web import Server

    ws = _workspace(reference, tmp_path)
    tokens = {n: run_cli("review", "invite", ws, n, check=0).stdout.strip().split("?token=")[1]
              for n in ("ana", "ben", "cleo", "eve")}
    first = Server(ws, "--hand-out", "4")
    try:
        open_pages = _pages(first.url, {n: tokens[n] for n in ("ana", "ben", "cleo")})
    finally:
        first.stop()
    shown = [k for keys in open_pages.values() for k in keys]
    assert len(shown) == 12 and len(set(shown)) == 12
    again = Server(ws, "--hand-out", "4", "--reviewer", "dora")  # restarted: a new owner's link
    second = Server(ws, "--hand-out", "4")  # and a second server on the same workspace
    try:
        dora = _pages(again.url, {"dora": again.owner_token})["dora"]
        eve = _pages(second.url, {"eve": tokens["eve"]})["eve"]
        assert len(dora) == len(eve) == 4 and not (set(dora) | set(eve)) & set(shown) and not set(dora) & set(eve)
        back = _pages(again.url, {n: tokens[n] for n in ("ana", "ben")})
        assert back == {n: open_pages[n] for n in ("ana", "ben")}  # their own images, as their pages show them
        from gensets.curation import state

        con = state.connect(ws / "state.duckdb", read_only=True)  # the servers give it up when asked
        held = dict(con.execute("SELECT reviewer, count(*) FROM review_leases GROUP BY reviewer").fetchall())
        con.close()
        assert held == {"ana": 4, "ben": 4, "cleo": 4, "dora": 4, "eve": 4}
    finally:
        again.stop()
        second.stop()
