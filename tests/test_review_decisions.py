"""#54 items 3, 5, 9 and 10 without a browser: over-long cursors are 400; a decision's note is its reviewer's own,
never another's; the comment after "several objects", undo, relabel is saved; re-importing the same Label Studio
export changes no byte of state.duckdb. And the sessions a link opens (item 1) and the leases that outlive a
restart (item 7), through the routes."""

import os
import shutil
from pathlib import Path

import pytest

from .conftest import owner_session, run_cli
from .test_review_web import _db, _workspace

EXPORTS = Path(os.environ.get("GENSETS_LS_EXPORTS", "/work/shared/data/label_studio"))


@pytest.fixture
def page(reference, tmp_path):
    """The review page's routes over a copy of the reference workspace, as its owner (reviewing as ana)."""
    from gensets.curation import review_state, routes

    ws = _workspace(reference, tmp_path)
    rs = review_state.ReviewState(ws, reviewer="ana", keep_open=True)
    client = owner_session(routes.create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
    yield rs, client
    rs.close()


def _log(rs, key):
    with rs._held() as con:
        return con.execute("SELECT reviewer, status, label, note FROM review_log WHERE key = ? ORDER BY rowid",
                           [key]).fetchall()


def test_over_long_cursors_are_refused_not_parsed(page):
    """Item 3: a 5000-digit cursor was int()'s digit limit: HTTP 500 and a traceback in the server's log."""
    rs, client = page
    for path in ("/api/items?after=", "/api/items?status=all&before=", "/api/changes?since=", "/api/page?after="):
        for value in ("9" * 5000, "1" * 19):
            r = client.get(path + value)
            assert r.status_code == 400 and "at most 18 digits" in r.get_json()["error"], (path, r.status_code)
            assert "9" * 30 not in r.get_json()["error"]  # not echoed
        assert client.get(path + "1" * 18).status_code == 200


def test_no_note_is_copied_from_another_reviewer(page):
    """Item 5: after `review accept WS KEY --reviewer ops --note x`, an override on the page was logged with note
    `x; override of ops: accepted`; comments were copied the same way."""
    rs, client = page
    keys = [it["key"] for it in client.get("/api/items?status=all").get_json()["items"]][:3]
    rs.release()
    run_cli("review", "accept", rs.ws.root, keys[0], "--reviewer", "ops", "--note", "x", check=0)
    version = client.get("/api/items?status=all").get_json()["items"][0]["version"]
    r = client.post("/api/decide", json={"key": keys[0], "action": "reject", "version": version, "override": True})
    assert r.status_code == 200 and r.get_json()["override"]
    assert _log(rs, keys[0])[-1] == ("ana", "rejected", keys[0].split("_")[1], "override of ops: accepted")
    # a comment of ana's stays hers: ben's decision, flag and range decision carry none of it
    assert client.post("/api/decide", json={"key": keys[1], "action": "accept"}).status_code == 200
    assert client.post("/api/decide", json={"key": keys[1], "action": "comment", "comment": "c1"}).status_code == 200
    assert client.post("/api/decide", json={"key": keys[1], "action": "reject", "reviewer": "ben"}).status_code == 200
    assert client.post("/api/decide", json={"key": keys[1], "action": "flag", "flagged": True,
                                            "reviewer": "cleo"}).status_code == 200
    assert client.post("/api/bulk", json={"keys": [keys[1]], "action": "accept", "reviewer": "dan"}).status_code == 200
    assert [n for *_, n in _log(rs, keys[1])] == [None, "c1", None, "several objects", None]
    # one's own note goes on with one's next decisions (ana's comment, kept by her later accept)
    assert client.post("/api/decide", json={"key": keys[1], "action": "accept"}).status_code == 200
    assert _log(rs, keys[1])[-1][3] == "c1"


def test_the_comment_after_flag_undo_relabel_is_saved(page):
    """Item 10, as a new user did it: `s` (several objects), `z` (undo), relabel, back, `c`: the page said "decide
    on this image first" and saved nothing (a latest decision without a note took an older one's)."""
    rs, client = page
    it = client.get("/api/items").get_json()["items"][0]
    key = it["key"]
    assert client.post("/api/decide", json={"key": key, "action": "flag", "flagged": True,
                                            "version": it["version"]}).status_code == 200
    undone = client.post("/api/undo", json={"n": 1}).get_json()["items"][0]
    r = client.post("/api/decide", json={"key": key, "action": "relabel", "label": "teapot",
                                         "version": undone["version"]})
    assert r.status_code == 200 and not r.get_json()["flagged"]
    r = client.post("/api/decide", json={"key": key, "action": "comment", "comment": "the handle is cut off",
                                         "version": r.get_json()["version"]})
    assert r.status_code == 200, r.get_json()
    assert _log(rs, key)[-1] == ("ana", "relabeled", "teapot", "the handle is cut off")
    with rs._held() as con:  # the page's tables say the same as the log
        assert con.execute("SELECT status, label, note FROM review_latest WHERE key = ?", [key]).fetchall() == [
            ("relabeled", "teapot", "the handle is cut off")]


@pytest.mark.skipif(not (EXPORTS / "round3" / "p2-phase1-snapshot-with-emails.json").exists(),
                    reason="no Label Studio exports")
def test_reimporting_the_same_label_studio_export_changes_no_byte(reference, tmp_path):
    """Item 9: "0 recorded, 29 unchanged", yet the review table's bytes changed. Two annotators, double review, and
    decisions made on the page between the imports: the second import of each export leaves state.duckdb (every
    table) byte for byte as it was."""
    from gensets.curation import state

    ws = _workspace(reference, tmp_path)
    first = EXPORTS / "round3" / "p2-phase1-snapshot-with-emails.json"
    second = EXPORTS / "round3" / "p2-phase2-snapshot-with-emails.json"

    def tables():
        con = _db(ws)
        try:
            names = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
            return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in names}
        finally:
            con.close()

    def snapshot():
        con = state.connect(ws / "state.duckdb")
        con.execute("CHECKPOINT")
        con.close()
        return (ws / "state.duckdb").read_bytes(), tables()

    run_cli("review", "import", ws, "--format", "label-studio", "--file", first, "--double", check=0)
    run_cli("review", "accept", ws, "texture_chair_blotchy_000", "--reviewer", "ana", check=0)
    for export in (first, second):
        run_cli("review", "import", ws, "--format", "label-studio", "--file", export, check=0)
        before = snapshot()
        r = run_cli("review", "import", ws, "--format", "label-studio", "--file", export, check=0)
        assert " 0 decision(s) recorded" in r.stdout and "withdrawn" not in r.stdout, r.stdout
        after = snapshot()
        assert after[1] == before[1]  # every table's rows
        assert after[0] == before[0]  # and the file, byte for byte
    shutil.rmtree(ws)
