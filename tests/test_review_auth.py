"""#46 item 3 and the roles of item 6: everything of ``gensets review serve`` but its empty shell needs a link, on
loopback too (the owner's, printed at start-up, or an invitation); inviting someone locks nobody out; invitations
expire, are listed and revoked; in double review only an adjudicator settles a disagreement."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

from .conftest import HTTP_WAIT, owner_session, run_cli
from .test_review_web import open_session

# what another user of the machine runs: the page, then a decision with whatever CSRF token the page gave, as the
# issue's attack did (curl /, take the token, POST /api/decide); prints each status and body
ATTACK = r"""
import json, re, sys, urllib.error, urllib.request
url, key = sys.argv[1], sys.argv[2]
def send(req):
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
code, page = send(url)
m = re.search(r'name="csrf-token" content="(\w+)"', page)
out = [code]
for path, body in (("api/decide", {"key": key, "action": "reject", "reviewer": "alice"}),
                   ("api/bulk", {"keys": [key], "action": "reject", "reviewer": "alice"}),
                   ("api/undo", {"reviewer": "ana"})):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "X-CSRF-Token": m.group(1) if m else "x"})
    out.append(send(req)[0])
for path in ("api/counts", "api/items", "?token=guess", "image/" + key):
    out.append(send(url + path)[0])
print(json.dumps({"codes": out, "page": page}))
"""


def _workspace(reference, tmp_path):
    return shutil.copytree(reference, tmp_path / "ws")


def _outcomes(ws) -> dict[str, tuple[str, str]]:
    """key -> (status, reviewer) from ``gensets review list --status all``."""
    rows = run_cli("review", "list", ws, "--status", "all", check=0).stdout.splitlines()[1:]
    return {r.split("\t")[0]: (r.split("\t")[1], r.split("\t")[4]) for r in rows}


def _as_another_user() -> list[str]:
    """The command prefix that runs as another OS user (nobody) with the system's Python, where this process may
    switch users (root); else this user, without any secret: the same requests either way."""
    if os.geteuid() == 0 and shutil.which("runuser") and os.path.exists("/usr/bin/python3"):
        return ["runuser", "-u", "nobody", "--", "/usr/bin/python3"]
    return [sys.executable]


def test_another_local_user_without_a_link_decides_nothing(reference, tmp_path, server_factory):
    """The issue's attack: as user nobody, on loopback, with nobody invited. Before: 200, and K rejected. Now the
    page is a shell that holds nothing of the review (no CSRF token, no image, no key), and everything else 401."""
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    key = s.get("/api/items")["items"][0]["key"]
    r = subprocess.run([*_as_another_user(), "-c", ATTACK, s.url, key], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # the shell, three POSTs (refused before their CSRF token is looked at), the API, a guessed link, an image
    assert out["codes"] == [200, 401, 401, 401, 401, 401, 401, 401], out["codes"]
    assert "csrf-token" not in out["page"] and "gensets review invite" in out["page"]  # how to get a link
    assert key not in out["page"] and s.owner_token not in out["page"]
    assert {status for status, _ in _outcomes(ws).values()} == {"pending"}  # nothing decided
    assert s.post({"key": key, "action": "accept"})[0] == 200  # the owner's page works


def test_refusals_say_how_to_get_a_link(reference, tmp_path, server_factory):
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws)
    with urllib.request.urlopen(s.url, timeout=HTTP_WAIT) as r:  # the shell: how to get a link, nothing else
        shell = r.read().decode()
    assert "<h1>This review page needs a link</h1>" in shell and "gensets review serve" in shell
    try:
        urllib.request.urlopen(s.url + "api/counts", timeout=HTTP_WAIT)
        raise AssertionError("served without a link")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        assert e.code == 401 and e.headers["Content-Type"].startswith("application/json"), e.code
    assert "gensets review invite" in body["error"] and body["reason"] == "link"
    try:
        urllib.request.urlopen(s.url + "?token=guess", timeout=HTTP_WAIT)
        raise AssertionError("a guessed link was taken")
    except urllib.error.HTTPError as e:
        assert e.code == 401 and e.headers["Content-Type"].startswith("text/html") and "unknown" in e.read().decode()
    page = urllib.request.urlopen(s.url + "static/review.js", timeout=HTTP_WAIT)  # the script needs none
    assert page.status == 200


def test_inviting_a_reviewer_leaves_the_open_page_working_and_roles_settle_double_review(reference, tmp_path,
                                                                                         server_factory):
    """Before: right after ``review invite WS ben`` the owner's next decision was refused and a reload gave 401.
    Then double review: two reviewers disagree, a third reviewer is refused (403), an adjudicator settles it."""
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--double", "--reviewer", "ana")
    keys = [it["key"] for it in s.get("/api/items?status=all")["items"]]
    assert s.post({"key": keys[0], "action": "accept"})[0] == 200
    links = {}
    for name, *role in (("ben",), ("cara",), ("eve",), ("dan", "--role", "adjudicator")):
        r = run_cli("review", "invite", ws, name, *role, check=0)
        links[name] = r.stdout.strip()
        assert links[name].startswith(f"{s.url}?token=") and "unaffected" in r.stderr
    # the owner's open page: its next decision, and a reload, as before the invitations
    code, out = s.post({"key": keys[1], "action": "reject"})
    assert code == 200 and out["status"] == "rejected"
    s.csrf = s.session()
    assert s.post({"key": keys[2], "action": "accept"})[0] == 200
    assert s.get("/api/page")["role"] == "owner"

    def session(name):
        got = open_session(s.url, links[name].split("?token=")[1])
        role, csrf, sid = got["role"], got["csrf"], got["session"]

        def post(path, body):
            req = urllib.request.Request(s.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", "X-CSRF-Token": csrf,
                                                  "X-Gensets-Session": sid})
            try:
                with urllib.request.urlopen(req, timeout=HTTP_WAIT) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())
        return role, post

    sessions = {name: session(name) for name in links}
    assert {name: role for name, (role, _) in sessions.items()} == \
        {"ben": "reviewer", "cara": "reviewer", "eve": "reviewer", "dan": "adjudicator"}
    disputed = keys[3]
    assert sessions["ben"][1]("api/decide", {"key": disputed, "action": "accept"})[0] == 200
    assert sessions["cara"][1]("api/decide", {"key": disputed, "action": "reject"})[0] == 200
    for path, body in (("api/decide", {"key": disputed, "action": "reject"}),
                       ("api/bulk", {"keys": [keys[4], disputed], "action": "reject"})):
        code, out = sessions["eve"][1](path, body)
        assert code == 403 and "adjudicator" in out["error"] and disputed in out["error"], out
    assert sessions["eve"][1]("api/decide", {"key": keys[4], "action": "reject"})[0] == 200  # a first decision
    assert sessions["ben"][1]("api/decide", {"key": disputed, "action": "accept"})[0] == 200  # one of the two
    assert sessions["dan"][1]("api/decide", {"key": disputed, "action": "accept"})[0] == 200
    outcomes = _outcomes(ws)
    assert outcomes[disputed] == ("accepted", "dan")  # the adjudicator settled it; eve's refusals left no trace
    log = run_cli("review", "list", ws, "--history", disputed, check=0).stdout
    assert "eve" not in log and "dan" in log


def test_invitations_expire_and_are_listed_and_revoked(reference, tmp_path):
    from gensets.curation.review_state import ReviewState
    from gensets.curation.routes import create_app

    ws = _workspace(reference, tmp_path)
    short = run_cli("review", "invite", ws, "ben", "--expires", "1s", check=0).stdout.strip().split("?token=")[1]
    long = run_cli("review", "invite", ws, "cara", "--role", "adjudicator", "--expires", "2d",
                   check=0).stdout.strip().split("?token=")[1]
    plain = run_cli("review", "invite", ws, "dan", check=0).stdout.strip().split("?token=")[1]
    time.sleep(1.5)  # ben's link was valid for one second (its expiry is a time; nothing races it)
    rs = ReviewState(ws)
    try:
        client = create_app(rs).test_client()
        r = client.get(f"/?token={short}")
        assert r.status_code == 401 and "expired" in r.get_data(as_text=True) and r.mimetype == "text/html"
        r = client.post("/api/session", json={"token": short})
        assert r.status_code == 401 and r.get_json()["reason"] == "expired"
        assert client.get(f"/?token={long}").status_code == 200  # the shell, which exchanges the link
        owner_session(client, rs, long)
        assert client.get("/api/counts").status_code == 200
    finally:
        rs.close()
    listed = run_cli("review", "invite", ws, "--list", check=0).stdout
    rows = [line.split("\t") for line in listed.splitlines()]
    assert rows[0] == ["reviewer", "role", "created", "expires", "state"]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["ben"][1] == "reviewer" and by_name["ben"][4] == "expired"
    assert by_name["cara"][1] == "adjudicator" and by_name["cara"][4] == "valid" and by_name["cara"][3] != "never"
    assert by_name["dan"][3] == "never" and by_name["dan"][4] == "valid"
    assert not any(t in listed for t in (short, long, plain))  # never a secret

    from gensets.curation.reviewers import digest

    assert not any(digest(t) in listed for t in (short, long, plain))
    r = run_cli("review", "invite", ws, "--revoke", "cara", check=0)
    assert "cara: 1 link(s) revoked" in r.stdout
    listed = run_cli("review", "invite", ws, "--list", check=0).stdout
    assert re.search(r"^cara\tadjudicator\t.*\trevoked \d{4}-", listed, re.M), listed
    r = run_cli("review", "invite", ws, "--revoke", "ben")  # expired: nothing left to revoke
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "dan" in r.stderr
    for bad in (("ana", "--expires", "soon"), ("ana", "--expires", "0h"), ("ana", "--list"), ()):
        r = run_cli("review", "invite", ws, *bad)
        assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, bad
    rs = ReviewState(ws)
    try:
        client = create_app(rs).test_client()
        assert client.get(f"/?token={long}").status_code == 401  # revoked
        assert client.post("/api/session", json={"token": long}).get_json()["reason"] == "revoked"
        assert client.get(f"/?token={plain}").status_code == 200
        assert client.get(f"/?token={rs.owner_token}").status_code == 200  # the owner's, for this run
    finally:
        rs.close()


def test_the_owners_open_page_in_chromium_keeps_deciding_after_an_invitation(reference, tmp_path, server_factory):
    """The issue's scenario in a browser: ana's page is open; right after ``review invite WS ben`` her next key press
    was refused and a reload gave 401. Now both save, and the page shows her role."""
    from .test_review_web import _browser, _playwright, goto

    sync_api = _playwright()
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        goto(page, s.link("config=texture"))
        assert "token" not in page.url and page.locator("#role").inner_text() == "owner"
        cards = page.locator(".card")
        keys = [cards.nth(i).get_attribute("data-key") for i in range(2)]
        cards.nth(0).click()
        page.keyboard.press("a")
        page.wait_for_selector(f'.card[data-key="{keys[0]}"].status-accepted', timeout=10_000)
        run_cli("review", "invite", ws, "ben", check=0)
        page.keyboard.press("r")  # the next image, right after the invitation
        page.wait_for_selector(f'.card[data-key="{keys[1]}"].status-rejected', timeout=10_000)
        assert page.reload().status == 200
        page.locator("body[data-ready]").wait_for(state="attached")
        assert page.locator("#role").inner_text() == "owner"
        other = browser.new_page()  # another browser session without the link: nothing, told how to get one
        other.goto(s.url)
        other.locator("#signin").wait_for()
        assert "gensets review invite" in other.locator("#signin").inner_text() and other.locator(".card").count() == 0
        browser.close()
    outcomes = _outcomes(ws)
    assert outcomes[keys[0]] == ("accepted", "ana") and outcomes[keys[1]] == ("rejected", "ana")
