"""Label Studio, safe across projects and servers (issue 46, item 7), on real exports of two Label Studio 1.23.2
servers that both have a project 2 (tests/data/label_studio, README there): an export is bound to the project and
server it came from; URL-mode images are served to Label Studio's editor on another origin; the published reviewer is
the resolved identity, an email a pseudonym unless finalize --publish-emails; storage-Sync tasks are skipped."""

import json
import shutil
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest

from .conftest import HTTP_WAIT, run_cli

DATA = Path(__file__).parent / "data" / "label_studio"
A, B = DATA / "server-a", DATA / "server-b"  # two servers, each with a project 2
TABLES = ("review_log", "reviews", "reviewer_aliases", "label_studio_annotations", "label_studio_exports",
          "label_studio_tasks", "settings")


@pytest.fixture
def ws(reference, tmp_path):
    out = tmp_path / "ws"
    shutil.copytree(reference, out)
    return out


def _db(ws):
    return duckdb.connect(str(ws / "state.duckdb"), read_only=True)


def _state(ws) -> dict:
    """Every row of the tables an import writes, in order."""
    con = _db(ws)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}
    finally:
        con.close()


def _import(ws, path, *args, check=None):
    return run_cli("review", "import", ws, "--format", "label-studio", "--file", path, *args, check=check)


def _refused(r, *words):
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (r.returncode, err)
    assert "refused, nothing changed" in err and all(w in err for w in words), err
    return err


def test_another_project_of_the_same_server_changes_nothing(ws):
    """Before: project 1's export merged into what project 2's had decided (exit 0)."""
    r = _import(ws, A / "p2-phase1-json.json", "--users", A / "users-api.json", "--double", check=0)
    assert "recorded" in r.stdout
    before = _state(ws)
    assert [(e, p) for e, _, _, _, p, _ in before["label_studio_exports"]] == [("", "2")]  # bound at the first import
    _refused(_import(ws, A / "p1-url-project-json.json"), "project 2", "project 1's")
    assert _state(ws) == before
    assert "0 decision(s) recorded" in _import(ws, A / "p2-phase1-json.json", check=0).stdout  # its own: as before


def test_the_same_projects_next_export_is_imported(ws):
    """Server A's project 2 after phase 2 (annotations deleted and edited, a new task): its own next export goes
    through the binding (the tasks read before are the same tasks), deletions withdrawn, edits new decisions."""
    _import(ws, A / "p2-phase1-json.json", "--users", A / "users-api.json", "--double", check=0)
    r = _import(ws, A / "p2-phase2-json.json", check=0)
    assert "withdrawn" in r.stdout and "decision(s) recorded" in r.stdout and "0 decision(s)" not in r.stdout
    con = _db(ws)
    tasks = con.execute("SELECT count(*), count(DISTINCT task) FROM label_studio_tasks").fetchone()
    con.close()
    assert tasks == (16, 16)  # 15 tasks, then one new one


def test_another_servers_project_of_the_same_id_changes_nothing(ws):
    """Before: server B's project 2 (other tasks under the same ids) withdrew every decision server A's project 2
    had made, and the dataset lost its images."""
    _import(ws, A / "p2-phase1-json.json", "--users", A / "users-api.json", "--double", check=0)
    before = _state(ws)
    assert before["review_log"] and not any(row[5] and "withdrawn" in row[5] for row in before["review_log"])
    err = _refused(_import(ws, B / "one-annotator-json.json"), "another Label Studio server", "task 43")
    assert "withdrawn" not in err
    assert _state(ws) == before


def test_another_servers_plain_export_is_not_credited_to_this_servers_users(ws):
    """Before: server B's Export -> JSON (user ids 1 and 3) was credited, through the aliases server A's import
    learned (1 = a@x.org), to server A's users."""
    _import(ws, A / "p2-phase1-json.json", "--users", A / "users-api.json", "--double", check=0)
    before = _state(ws)
    assert ("label-studio:1", "a@x.org") in {row[:2] for row in before["reviewer_aliases"]}
    _refused(_import(ws, B / "two-annotators-json.json", "--double"), "project 2", "project 1's")
    assert _state(ws) == before


def _as_label_studio(tasks: list[dict], project: int, first_id: int = 1000) -> list[dict]:
    """Tasks gensets exported as Label Studio exports them from ``project``: ids, created_at, one accept each."""
    return [{**t, "id": first_id + i, "project": project, "created_at": f"2026-11-28T08:00:{i:02d}.000001Z",
             "annotations": [{"id": 5000 + first_id + i, "completed_by": 1, "was_cancelled": False,
                              "updated_at": "2026-11-28T09:00:00Z", "result": [
                                  {"type": "choices", "from_name": "verdict", "to_name": "image",
                                   "value": {"choices": ["accept"]}}]}]} for i, t in enumerate(tasks)]


def test_an_export_is_bound_to_the_project_it_names_or_its_first_import(ws, tmp_path):
    """gensets' export id in every task (data.gensets_export), recorded with --project's server and id: the same
    tasks from another project are refused naming both; tasks of no export of this workspace are refused; without
    --project, the first import binds them."""
    f = tmp_path / "tasks.json"
    run_cli("review", "export", ws, "--format", "label-studio", "--file", f, "--images", "url", "--base-url",
            "http://127.0.0.1:8765", "--project", "http://LS.example:8080/projects/5/data?tab=1", check=0)
    tasks = json.loads(f.read_text())
    ids = {t["data"]["gensets_export"] for t in tasks}
    assert len(ids) == 1
    con = _db(ws)
    rows = con.execute("SELECT export, tasks, images, project, server FROM label_studio_exports").fetchall()
    con.close()
    assert rows == [(ids.pop(), 42, "url", "5", "http://ls.example:8080")]
    src = tmp_path / "export.json"
    src.write_text(json.dumps(_as_label_studio(tasks[:3], 6)))
    before = _state(ws)
    _refused(_import(ws, src), "project 5 of http://ls.example:8080", "project 6's")
    assert _state(ws) == before
    src.write_text(json.dumps(_as_label_studio(tasks[:3], 5)))
    assert "3 decision(s) recorded" in _import(ws, src, check=0).stdout
    forged = [{**t, "data": {**t["data"], "gensets_export": "0123456789abcdef"}} for t in tasks[3:5]]
    src.write_text(json.dumps(_as_label_studio(forged, 5, first_id=2000)))
    before = _state(ws)
    _refused(_import(ws, src), "another workspace's export", "0123456789abcdef")
    assert _state(ws) == before
    # without --project: bound to the project of the first import
    run_cli("review", "export", ws, "--format", "label-studio", "--file", f, "--status", "pending", check=0)
    tasks = json.loads(f.read_text())
    src.write_text(json.dumps(_as_label_studio(tasks[:2], 7, first_id=3000)))
    assert "2 decision(s) recorded" in _import(ws, src, check=0).stdout
    src.write_text(json.dumps(_as_label_studio(tasks[2:4], 8, first_id=4000)))
    before = _state(ws)
    _refused(_import(ws, src), "project 7,", "project 8's")
    assert _state(ws) == before
    r = run_cli("review", "export", ws, "--format", "label-studio", "--file", f, "--project", "ls.example/5")
    assert r.returncode == 2 and "--project" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_storage_sync_tasks_are_skipped_with_a_note(ws):
    """The README's local storage, synced, adds one image-only task per image; one was annotated. Before: every
    import of the project failed ("no data.key")."""
    r = _import(ws, A / "p2-after-storage-sync-json.json", "--users", A / "users-api.json", "--double", check=0)
    assert "1 task(s) without data.key skipped (1 annotated)" in r.stderr and "Sync" in r.stderr
    con = _db(ws)
    keys = {k for (k,) in con.execute("SELECT DISTINCT key FROM review_log").fetchall()}
    con.close()
    assert "background_backpack_bedroom_s_000" in keys and len(keys) == 16


def test_a_relabel_to_the_images_own_class_agrees_with_accept(ws):
    """background_chair_street_s_001: user 1 'relabelled' it to chair (its class), user 2 accepted. Before: a
    disagreement (held back); now both accepted it."""
    from gensets.curation import review

    r = _import(ws, A / "p2-phase1-json.json", "--users", A / "users-api.json", "--double", check=0)
    assert "relabel(s) to the image's own class taken as accept" in r.stderr
    assert "background_chair_street_s_001" in r.stderr
    con = _db(ws)
    verdicts = review.verdicts(con)
    con.close()
    assert verdicts["background_chair_street_s_001"][:3] == ("accepted", "chair", "a@x.org & bee@x.org")


def test_a_corrupt_export_is_a_data_error(ws, tmp_path):
    """The README's exit table: 1 for a data error (a truncated file), 2 for usage (a JSON_MIN export)."""
    cut = tmp_path / "cut.json"
    cut.write_bytes((A / "p2-phase1-json.json").read_bytes()[:5000])
    r = _import(ws, cut)
    assert r.returncode == 1 and "not valid JSON" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"key,status\nk\xe9,accepted\n")
    r = run_cli("review", "import", ws, "--format", "csv", "--file", bad)
    assert r.returncode == 1 and "UTF-8" in r.stderr


def _published(ws) -> dict:
    from gensets.shards import iter_shard

    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    return {d["__key__"]: json.loads(d["json"])["review"]["reviewer"] for s in manifest["shards"]
            for d in iter_shard(ws / "dataset" / s["path"])}


def test_the_published_reviewer_is_the_person_and_an_email_a_pseudonym(ws, tmp_path):
    """Single review: decisions imported under a bare Label Studio id, then the id named (an alias): finalize
    publishes the person (before: `label-studio:1`), as a pseudonym by default (the card says no email is
    published); with --publish-emails the email, and the card says so."""
    from gensets.curation import review

    r = _import(ws, B / "one-annotator-json.json", check=0)
    assert "label-studio:1" in r.stderr  # known only by its id so far
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"1": "a@x.org"}))
    assert "0 decision(s) recorded" in _import(ws, B / "one-annotator-json.json", "--users", users, check=0).stdout
    r = run_cli("finalize", ws, check=0)
    published = set(_published(ws).values())
    con = _db(ws)
    key = con.execute("SELECT value FROM settings WHERE name = ?", [review.PSEUDONYM_KEY]).fetchone()[0]
    con.close()
    alias = review.published_reviewer("a@x.org", key)
    assert published == {alias} and alias.startswith("reviewer-") and len(alias) == len("reviewer-") + 10
    assert f"json.review.reviewer: {alias} (emails as pseudonyms" in r.stderr
    card = (ws / "dataset" / "README.md").read_text()
    assert "a@x.org" not in card and "no personal data is published" in card
    assert b"a@x.org" not in b"".join(p.read_bytes() for p in (ws / "dataset").rglob("*") if p.is_file())
    run_cli("finalize", ws, check=0)
    assert set(_published(ws).values()) == {alias}  # the same pseudonym every time
    r = run_cli("finalize", ws, "--publish-emails", check=0)
    assert set(_published(ws).values()) == {"a@x.org"}
    assert "emails published" in r.stderr
    assert "--publish-emails" in (ws / "dataset" / "README.md").read_text()


class _Origin(BaseHTTPRequestHandler):
    """Label Studio's page, on another origin than the review server."""

    def do_GET(self):  # noqa: N802
        body = b"<!doctype html><title>Label Studio</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_url_mode_images_are_served_to_another_origin(reference, tmp_path, server_factory):
    """A browser on Label Studio's origin loads a URL-mode task's image by XHR (before: blocked, no
    Access-Control-Allow-Origin); the preflight is answered; no other route answers another origin. The image's
    address carries the export's images-only link (the server asks every request for one, and Label Studio's
    editor sends no cookie): without it the image is 401, and that link opens no page."""
    from gensets.shards import iter_shard

    from .test_review_web import _browser, _playwright

    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    s = server_factory(ws, "--reviewer", "ana")
    f = tmp_path / "tasks.json"
    run_cli("review", "export", ws, "--format", "label-studio", "--file", f, "--images", "url", "--base-url",
            s.url, check=0)
    task = json.loads(f.read_text())[0]
    url = task["data"]["image"]
    bare, _, token = url.partition("?token=")
    assert token and "/image/" in bare
    for refused_url, code in ((bare, 401), (s.url.split("?")[0] + "?token=" + token, 403)):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(refused_url, headers={"Origin": "http://ls.example"}),
                                   timeout=HTTP_WAIT)
        assert e.value.code == code, refused_url
    original = next(d["jpg"] for sh in (ws / "candidates").glob("*.tar") for d in iter_shard(sh)
                    if d["__key__"] == task["data"]["key"])
    origin = ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    ls = f"http://127.0.0.1:{origin.server_port}"
    try:
        pre = urllib.request.Request(url, method="OPTIONS", headers={
            "Origin": ls, "Access-Control-Request-Method": "GET"})
        with urllib.request.urlopen(pre, timeout=HTTP_WAIT) as r:
            assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == "*"
            assert r.headers["Access-Control-Allow-Methods"] == "GET"
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Origin": ls}), timeout=HTTP_WAIT) as r:
            assert r.read() == original and r.headers["Access-Control-Allow-Origin"] == "*"
        with pytest.raises(urllib.error.HTTPError) as e:  # no link: refused, and no CORS header either
            urllib.request.urlopen(urllib.request.Request(s.url.split("?")[0] + "api/counts", headers={"Origin": ls}),
                                   timeout=HTTP_WAIT)
        assert e.value.code == 401 and e.value.headers.get("Access-Control-Allow-Origin") is None
        sync_api = _playwright()
        with sync_api.sync_playwright() as p:
            browser = _browser(p)
            try:
                page = browser.new_page()
                page.goto(ls + "/")
                got = page.evaluate("""async url => {
                    const r = await fetch(url);
                    return Array.from(new Uint8Array(await r.arrayBuffer()));
                }""", url)
                assert bytes(got) == original
                # the page's own API stays closed to another origin: the browser refuses to read it
                refused = page.evaluate("""async url => {
                    try { await fetch(url); return false; } catch (e) { return true; }
                }""", s.url + "api/counts")
                assert refused
            finally:
                browser.close()
    finally:
        origin.shutdown()
        origin.server_close()
