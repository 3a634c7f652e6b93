"""Issue 46 item 6: comments on images, an image's history, and double review switched off again."""

import json

from .conftest import run_cli
from .test_review_web import _db, _keys, _workspace


def _log(ws, key):
    con = _db(ws)
    try:
        return con.execute("SELECT reviewer, status, note FROM review_log WHERE key = ? ORDER BY rowid",
                           [key]).fetchall()
    finally:
        con.close()


def test_comments_and_history_on_the_page(reference, tmp_path, server_factory):
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    key, other = _keys(s)[:2]
    assert s.post({"key": key, "action": "accept"})[0] == 200
    assert s.post({"key": key, "action": "flag", "flagged": True})[0] == 200
    code, out = s.post({"key": key, "action": "comment", "comment": "  the mug's handle\nis cut off "})
    assert code == 200 and out["comment"] == "the mug's handle is cut off" and out["flagged"]
    assert out["status"] == "accepted"  # a comment decides nothing new
    code, out = s.post({"key": key, "action": "comment", "comment": "x" * 501})
    assert code == 400 and "500" in out["error"]
    code, _ = s.post({"key": key, "action": "comment", "comment": "no token"}, csrf=False)
    assert code == 403
    page = {it["key"]: it for it in s.get("/api/items?status=all")["items"]}
    assert page[key]["comment"] == "the mug's handle is cut off" and page[other]["comment"] == ""

    # ben overrides ana's acceptance, then takes it back
    assert s.post({"key": key, "action": "reject", "reviewer": "ben"})[0] == 200
    assert s.post({"n": 1, "reviewer": "ben"}, path="api/undo")[0] == 200
    h = s.get(f"/api/history?key={key}")
    assert h["key"] == key
    rows = [(d["reviewer"], d["status"], d["overrides"], d["undone"], d["undoes"] is not None) for d in h["history"]]
    assert rows == [("ana", "accepted", None, False, False), ("ana", "accepted", None, False, False),
                    ("ana", "accepted", None, False, False), ("ben", "rejected", "ana", True, False),
                    ("ben", "accepted", None, False, True)]
    assert h["history"][-1]["undoes"] == h["history"][3]["seq"] and h["history"][0]["time"][:2] == "20"
    assert s.get(f"/api/history?key={other}")["history"] == []
    try:
        s.get("/api/history?key=nope")
        raise AssertionError("an unknown key has no history")
    except Exception as e:  # urllib's HTTPError
        assert getattr(e, "code", None) == 400 and "not in the review queue" in e.read().decode()
    s.stop()
    assert _log(ws, key)[2] == ("ana", "accepted", "several objects; the mug's handle is cut off")

    # the CLI: text and JSON, and the comment in a Label Studio export
    r = run_cli("review", "list", ws, "--history", key, check=0)
    lines = r.stdout.strip().split("\n")
    assert len(lines) == 5 and "\tben\trejected\tundone; overrides ana\t" in lines[3]
    assert "undoes #" in lines[4] and lines[2].endswith("several objects; the mug's handle is cut off")
    assert [d["reviewer"] for d in json.loads(run_cli("review", "list", ws, "--history", key, "--json",
                                                      check=0).stdout)] == ["ana"] * 3 + ["ben"] * 2
    r = run_cli("review", "list", ws, "--history", "nope")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    f = tmp_path / "tasks.json"
    run_cli("review", "export", ws, "--format", "label-studio", "--file", f, "--images", "url", "--base-url",
            "http://127.0.0.1:1", check=0)
    comments = {t["data"]["key"]: t["data"]["comment"] for t in json.loads(f.read_text())}
    assert comments[key] == "the mug's handle is cut off" and comments[other] == ""  # ben's undo: ana's note back


def test_double_review_switched_off_and_on_keeps_every_decision(reference, tmp_path, server_factory):
    ws = _workspace(reference, tmp_path)
    assert run_cli("review", "mode", ws, check=0).stdout.strip() == "single review"
    s = server_factory(ws, "--double", "--reviewer", "ana")
    key = _keys(s)[0]
    code, out = s.post({"key": key, "action": "comment", "comment": "hm", "reviewer": "ben"})
    assert code == 400 and "then comment it" in out["error"]  # decide first
    assert s.post({"key": key, "action": "accept", "reviewer": "ana"})[0] == 200
    # blind: in double review each reviewer's history holds their own decisions only, until two decided
    assert [d["reviewer"] for d in s.get(f"/api/history?key={key}&reviewer=ben")["history"]] == []
    assert s.post({"key": key, "action": "reject", "reviewer": "ben"})[0] == 200
    # then an adjudicator (or the owner, as here) sees both: what a dispute is made of
    assert [d["reviewer"] for d in s.get(f"/api/history?key={key}&reviewer=ben")["history"]] == ["ana", "ben"]
    assert _counts_double(s)

    assert run_cli("review", "mode", ws, "single", check=0).stdout.startswith("single review")
    assert not _counts_double(s)  # the running page follows the workspace's mode
    assert [d["reviewer"] for d in s.get(f"/api/history?key={key}&reviewer=ben")["history"]] == ["ana", "ben"]
    code, out = s.post({"key": key, "action": "comment", "comment": "ben was last"})  # ana's is not the latest
    assert code == 400 and "then comment it" in out["error"]
    assert s.post({"key": key, "action": "comment", "comment": "over to single", "reviewer": "ben"})[0] == 200
    s.stop()
    assert len(_log(ws, key)) == 3
    r = run_cli("review", "list", ws, "--status", "all", "--json", check=0)
    row = next(x for x in json.loads(r.stdout) if x["key"] == key)
    assert (row["status"], row["reviewer"], row["note"]) == ("rejected", "ben", "over to single")  # the latest counts

    assert run_cli("review", "mode", ws, "double", check=0).stdout.startswith("double review")
    r = run_cli("review", "list", ws, "--status", "all", "--json", check=0)
    row = next(x for x in json.loads(r.stdout) if x["key"] == key)
    assert row["status"] == "disputed"  # ana accepted, ben rejected: every decision was kept
    r = run_cli("review", "mode", ws, "triple")
    assert r.returncode != 0 and "invalid choice" in r.stderr


def _counts_double(s) -> bool:
    """The page says it is in double review."""
    return s.get("/api/page?status=all")["double"]


def test_comment_and_history_in_chromium(reference, tmp_path, server_factory):
    from .test_review_web import _browser, _playwright, goto

    sync_api = _playwright()
    ws = _workspace(reference, tmp_path)
    s = server_factory(ws, "--reviewer", "ana")
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: d.accept("handle cut off"))  # the comment prompt
        goto(page, s.link("config=texture"))
        key = page.locator(".card").nth(0).get_attribute("data-key")
        page.locator(".card").nth(0).click()
        page.keyboard.press("a")
        page.wait_for_selector(f'.card[data-key="{key}"].status-accepted', timeout=10_000)
        page.keyboard.press("k")
        page.keyboard.press("c")
        page.locator("#d-comment", has_text="handle cut off").wait_for(timeout=10_000)
        page.locator("#d-history summary").click()
        page.locator("#d-history-list li", has_text="handle cut off").wait_for(timeout=10_000)
        assert page.locator("#d-history-list li").count() == 2
        assert errors == []
        browser.close()
    s.stop()
    assert _log(ws, key) == [("ana", "accepted", None), ("ana", "accepted", "handle cut off")]
