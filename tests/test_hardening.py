"""Issue 15: what an attacker or a careless user can do. Each test reproduces one hole (it failed before the
fix) and checks the answer: one line naming what and where, a non-zero exit, no traceback, and nothing outside
the workspace / database touched, nothing lost."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tracemalloc
from pathlib import Path

import pytest
from PIL import Image

from .conftest import HTTP_WAIT, ROOT, SMOKE, owner_session, run_cli, stop_server
from .test_card import digest, make_results_db
from .test_review_web import open_session


def one_line_error(r, *needles, code=2):
    """The CLI refused in one line on stderr, without a traceback, naming every needle."""
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert str(n) in err, (n, err)
    return err


# ------------------------------------------------------------------------------------------- 1. query
def test_query_reaches_nothing_outside_its_database(tmp_path):
    import duckdb

    db = make_results_db(tmp_path / "r.duckdb")
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t AS SELECT 42 AS x")
    con.close()
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t\n")
    written = tmp_path / "pwn.csv"
    attacks = [
        (f"COPY (SELECT 1) TO '{written}'", written),
        (f"COPY (SELECT 'x') TO '{db}' (FORMAT csv)", None),  # would overwrite the database itself
        (f"ATTACH '{other}' AS o (READ_ONLY false); DROP TABLE o.t", None),
        (f"SELECT * FROM read_text('{secret}')", None),
        (f"SELECT * FROM read_csv('{secret}')", None),
        (f"SELECT * FROM glob('{tmp_path}/*')", None),
        ("INSTALL httpfs", None),
        ("SET enable_external_access = true", None),
    ]
    for sql, path in attacks:
        r = run_cli("query", "--db", db, sql, timeout=120)
        one_line_error(r, "query failed")
        assert "s3cr3t" not in r.stdout + r.stderr and str(other) not in r.stdout
        if path is not None:
            assert not path.exists()
    ok = run_cli("query", "--db", db, "SELECT count(*) AS n FROM runs", "--format", "json", check=0)
    assert json.loads(ok.stdout) == [{"n": 6}]  # the database is whole and still answers
    con = duckdb.connect(str(other), read_only=True)
    assert con.execute("SELECT x FROM t").fetchall() == [(42,)]  # the other database is untouched
    con.close()
    # not a DuckDB file, for query and leaderboard: one line
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database\n")
    one_line_error(run_cli("query", "--db", junk, "SELECT 1"), junk, "not a valid DuckDB")
    one_line_error(run_cli("leaderboard", "--db", junk), junk)
    # another process writes it (e.g. the review server on state.duckdb): one line
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                               "print('ready', flush=True); sys.stdin.read()", str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        one_line_error(run_cli("query", "--db", db, "SELECT 1"), db, "in use by another process")
    finally:
        holder.communicate("", timeout=30)


# ----------------------------------------------------------------------------------------- 2. publish
def test_publish_deletes_only_the_shards_an_earlier_publish_listed(reference, tmp_path):
    from gensets.publish import LocalTarget, publish

    repo = tmp_path / "repo"
    foreign = [repo / "backups" / "2024" / "home-backup.tar", repo / "background" / "mine.tar", repo / "x.tar"]
    for f in foreign:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"somebody else's tar")
    lines = []
    publish(reference, f"file://{repo}", target=LocalTarget(repo), out=lines.append)
    assert all(f.read_bytes() == b"somebody else's tar" for f in foreign)  # not ours: never deleted
    # an earlier version had one shard more (its manifest.json lists it): that one goes, in the last commit
    manifest = json.loads((repo / "manifest.json").read_text())
    manifest["shards"].append({**manifest["shards"][0], "path": "background/test-00007.tar"})
    (repo / "manifest.json").write_text(json.dumps(manifest))
    stale = repo / "background" / "test-00007.tar"
    shutil.copy(repo / "background" / "test-00000.tar", stale)
    dry = run_cli("publish", reference, "--repo", f"file://{repo}", "--dry-run", check=0)
    deletes = [line.strip() for line in dry.stdout.splitlines() if line.strip().startswith("delete")]
    assert deletes == ["delete background/test-00007.tar"] and stale.exists()  # listed, nothing done
    target = LocalTarget(repo)
    publish(reference, f"file://{repo}", target=target, out=lines.append)
    assert target.commits[-1]["deleted"] == ["background/test-00007.tar"] and not stale.exists()
    assert all(f.exists() for f in foreign)
    # a manifest.json that gensets did not write deletes nothing, even a path out of the repo
    (repo / "manifest.json").write_text(json.dumps({"shards": [{"path": "../outside.tar"}, {"path": "x.tar"}]}))
    (tmp_path / "outside.tar").write_bytes(b"outside")
    target = LocalTarget(repo)
    publish(reference, f"file://{repo}", target=target, out=lines.append)
    assert target.commits[-1]["deleted"] == [] and (tmp_path / "outside.tar").exists() and foreign[2].exists()
    # file:// alone would have been the current folder
    one_line_error(run_cli("publish", reference, "--repo", "file://", "--dry-run"), "file:///")


def test_publish_checks_every_byte_it_uploads(reference, tmp_path):
    from gensets.publish import LocalTarget, publish

    ds = tmp_path / "ds"
    shutil.copytree(reference / "dataset", ds)
    shard = ds / "texture" / "test-00000.tar"
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))
    r = run_cli("publish", ds, "--repo", f"file://{tmp_path / 'repo'}")
    one_line_error(r, shard, "sha256")
    assert not (tmp_path / "repo").exists()
    shutil.copy(reference / "dataset" / "texture" / "test-00000.tar", shard)
    outside = tmp_path / "private.png"
    outside.write_bytes(b"\x89PNG private")
    (ds / "figures" / "leak.png").symlink_to(outside)
    one_line_error(run_cli("publish", ds, "--repo", f"file://{tmp_path / 'repo'}"), "leak.png", "symlink")
    (ds / "figures" / "leak.png").unlink()
    target = LocalTarget(tmp_path / "repo")
    publish(ds, f"file://{tmp_path / 'repo'}", target=target, out=lambda line: None)
    assert not any("private" in p.read_bytes().decode("latin-1") for p in (tmp_path / "repo").rglob("*.png"))


# ---------------------------------------------------------------------------------------- 3. finalize
def _foreign_shard(reference, path: Path) -> None:
    """A shard outside the workspace whose samples are like the workspace's, under new keys."""
    from gensets.shards import iter_shard, write_shard

    first = sorted((reference / "candidates").glob("*.tar"))[0]
    samples = [{**d, "__key__": "foreign_" + d["__key__"]} for d in iter_shard(first)]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_shard(path, samples)


@pytest.mark.parametrize("how", ["path", "symlink"])
def test_finalize_reads_no_shard_outside_the_workspace(reference, tmp_path, how):
    from gensets.shards import Manifest, sha256_file

    ws = tmp_path / "a" / "b" / "ws"
    shutil.copytree(reference, ws)
    foreign = tmp_path / "a" / "b" / "elsewhere" / "foreign.tar"  # where ws/candidates/../../elsewhere leads
    _foreign_shard(reference, foreign)
    name = "../../elsewhere/foreign.tar"
    if how == "symlink":
        name = "evil.tar"
        (ws / "candidates" / name).symlink_to(foreign)
    Manifest(ws / "candidates" / "manifest.jsonl").append(
        {"unit": "evil", "shard": name, "sha256": sha256_file(foreign), "n": 3, "kept": 3})
    before = digest(ws / "dataset")
    r = run_cli("finalize", ws, "--include-pending")
    one_line_error(r, name, "candidates", code=1)
    assert digest(ws / "dataset") == before  # the published folder is as it was
    import duckdb

    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM samples WHERE key LIKE 'foreign%'").fetchone()[0] == 0
    con.close()


# -------------------------------------------------------------------------------------------- 4. YAML
BOMB = """builder: imagenet-d
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""  # billion laughs: 9**9 strings from 460 bytes (expanding it never ends; the timeout below only guards)


def test_yaml_alias_bombs_loops_and_tags_are_refused(tmp_path):
    cases = [
        (BOMB, 6, "alias bomb"),  # refused at the alias that passes 10,000 nodes (line 6)
        ("builder: imagenet-d\nclasses: &a [tench, *a]\n", 2, "alias loop"),
        ("builder: imagenet-d\nclasses: !!python/object/apply:os.system [echo pwned]\n", 2, "tag"),
        ("builder: imagenet-d\nclasses: " + "[" * 3000 + "]" * 3000 + "\n", None, "nested too deeply"),
    ]
    for i, (text, line, needle) in enumerate(cases):
        f = tmp_path / f"c{i}.yaml"
        f.write_text(text)
        r = run_cli("build", f, "--out", tmp_path / "ws", timeout=120)
        one_line_error(r, f"{f}:{line}:" if line else f, needle)
    for value, needle in (("&a [tench, *a]", "alias loop"),
                          ("[" + ", ".join(["&a [x, x, x, x, x, x, x, x, x, x]"] + ["*a"] * 1200) + "]", "alias bomb"),
                          ("!!python/object/apply:os.system [echo pwned]", "tag")):
        r = run_cli("build", SMOKE, "--out", tmp_path / "ws", "--set", f"labels={value}", timeout=120)
        one_line_error(r, "--set labels", needle)
    assert not (tmp_path / "ws").exists()


def test_yaml_aliases_within_bounds_still_work(tmp_path):
    from gensets.workspace import load_build_config

    text = SMOKE.read_text()
    f = tmp_path / "aliased.yaml"
    f.write_text(text.replace("  texture: {limit: 2}", "  texture: &two {limit: 2}")
                 .replace("  material: {limit: 2}", "  material: *two"))
    assert "*two" in f.read_text()
    assert load_build_config(f)[1] == load_build_config(SMOKE)[1]


# ------------------------------------------------------------------------------------------- 5. lock
def test_a_second_build_on_a_locked_workspace_is_refused(tmp_path):
    from gensets.workspace import Workspace

    ws = tmp_path / "ws"
    with Workspace(ws).lock("build"):  # a build holds the workspace
        r = run_cli("build", SMOKE, "--out", ws, "--quiet", timeout=300)
        one_line_error(r, ws, f"build (pid {os.getpid()})", "running", code=4)  # busy: retry later
        assert not list(ws.glob("candidates/*.tar")) and not (ws / "state.duckdb").exists()
        with pytest.raises(Exception, match=f"pid {os.getpid()}"):  # in-process too: the lock is per open
            with Workspace(ws).lock("build"):
                pass
    with Workspace(ws).lock("build"):  # released when the holder ends
        pass


def test_finalize_waits_for_no_build(reference, tmp_path):
    """finalize takes the workspace's lock too: while a build holds it, finalize is one line and the published
    dataset/ is left as it was; a mistyped workspace is an error, not a new folder."""
    from gensets.workspace import Workspace

    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    before = {p.relative_to(ws): p.read_bytes() for p in (ws / "dataset").rglob("*") if p.is_file()}
    with Workspace(ws).lock("build"):
        one_line_error(run_cli("finalize", ws, "--include-pending"), ws, f"build (pid {os.getpid()})", "running",
                       code=4)
    assert {p.relative_to(ws): p.read_bytes() for p in (ws / "dataset").rglob("*") if p.is_file()} == before
    run_cli("finalize", ws, "--include-pending", check=0)  # and runs once the build is over
    r = run_cli("finalize", tmp_path / "typo")
    assert r.returncode != 0 and not (tmp_path / "typo").exists()


# ------------------------------------------------------------------------------------------ 6. verify
def _peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar makes the sparse member")
def test_verify_streams_members_and_refuses_sparse_ones(tmp_path):
    from gensets.shards import verify

    (tmp_path / "src").mkdir()
    big = tmp_path / "src" / "s00000.txt"
    with open(big, "wb") as f:
        f.truncate(256 << 20)  # a hole: 256 MB of zeros stored in no block
    sparse = tmp_path / "sparse.tar"
    subprocess.run(["tar", "--sparse", "-cf", str(sparse), "-C", str(tmp_path / "src"), big.name], check=True)
    assert sparse.stat().st_size < 1 << 20
    found = []
    peak = _peak_mb(lambda: found.extend(verify(sparse)))
    assert [p.what.split(" (")[0] for p in found] == ["sparse member"] and peak < 32, (found, peak)
    # a plain member of 48 MB: checked chunk by chunk, never held whole (the old code read it into memory)
    plain = tmp_path / "plain.tar"
    big.unlink()
    with open(big, "wb") as f:
        f.write(b"caption " * (6 << 20))
    with tarfile.open(plain, "w") as tf:
        tf.add(big, arcname=big.name)
    found = []
    peak = _peak_mb(lambda: found.extend(verify(plain)))
    assert found == [] and peak < 32, (found, peak)


def test_verify_finds_a_key_twice_and_a_class_outside_the_card(reference, tmp_path):
    from gensets.shards import iter_shard, sha256_file, verify, write_shard

    assert verify(reference) == []  # a real workspace: candidates and dataset, no false alarm
    ds = tmp_path / "ds"
    shutil.copytree(reference / "dataset", ds)
    manifest = json.loads((ds / "manifest.json").read_text())
    # background has two shards: its first sample again in the second one
    a, b = [ds / s["path"] for s in manifest["shards"] if s["config"] == "background"]
    first = next(iter_shard(a))
    write_shard(b, [*iter_shard(b), first])
    # texture: a cls past the 113 classes the card declares (names 0..112)
    t = ds / "texture" / "test-00000.tar"
    samples = list(iter_shard(t))
    samples[0]["cls"] = b"113"
    write_shard(t, samples)
    for s in manifest["shards"]:
        p = ds / s["path"]
        s.update(sha256=sha256_file(p), n=len(list(iter_shard(p))), nbytes=p.stat().st_size)
    (ds / "manifest.json").write_text(json.dumps(manifest))
    found = [str(p) for p in verify(ds)]
    assert found == [f"{b}: {first['__key__']}: key also in {a} (the same sample twice)",
                     f"{t}: {samples[0]['__key__']}.cls: class 113 is not one of the 113 classes the dataset "
                     "card declares"], found
    r = run_cli("verify", ds)
    assert r.returncode == 1 and "Traceback" not in r.stderr


# -------------------------------------------------------------------------------------------- 7. eval
def test_eval_refuses_an_image_over_the_pixel_limit(tmp_path):
    from gensets.shards import write_shard

    big = tmp_path / "big.png"
    Image.new("1", (9500, 9500)).save(big)  # 90.25 M pixels, over PIL's 89.5 M: 20 KB on disk, 270 MB as RGB
    assert 9500 * 9500 > Image.MAX_IMAGE_PIXELS
    shard = tmp_path / "bomb.tar"
    write_shard(shard, [{"__key__": "bomb", "png": big.read_bytes(), "cls": 0, "json": {"imagenet_ids": [0]}}])
    r = run_cli("eval", shard, "--model", "tiny:resnet", "--protocol", "imagenet", "--db", tmp_path / "r.duckdb",
                "--quiet", "--workers", "0", timeout=300)
    one_line_error(r, f"{shard}: bomb.png", "9500x9500", "pixels", code=1)


# ------------------------------------------------------------------------------------------- 8. timm
def test_timm_local_dir_with_a_pickle_and_an_unrelated_safetensors(tmp_path):
    import safetensors.torch
    import torch

    from gensets.errors import ModelError
    from gensets.models.classifier import load_classifier
    from gensets.models.tiny import tiny_path

    folder = tmp_path / "model"
    shutil.copytree(tiny_path("resnet"), folder)
    weights = safetensors.torch.load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")  # timm prefers this name to any other *.safetensors
    safetensors.torch.save_file({"unrelated": torch.zeros(2)}, folder / "unrelated.safetensors")
    with pytest.raises(ModelError, match="pytorch_model.bin"):
        load_classifier(f"timm:local-dir:{folder}")
    r = run_cli("eval", "nothing.tar", "--model", f"timm:local-dir:{folder}", "--db", tmp_path / "r.duckdb")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    model = load_classifier(f"timm:local-dir:{folder}", allow_pickle=True)  # asked for: loads
    got = dict(model.model.named_parameters())["fc.weight"].detach()
    assert torch.equal(got, weights["fc.weight"])


# -------------------------------------------------------------------------------------------- 9. VQA
def _vqa_questions(tmp_path, lines: list[bytes]) -> Path:
    q = tmp_path / "questions.jsonl"
    q.write_bytes(b"\n".join(lines) + b"\n")
    return q


def test_vqa_questions_contradictions_and_bad_lines_name_file_and_line(tmp_path):
    vqa = ROOT / "configs" / "vqa.smoke.yaml"
    good = b'{"image": "p0000_00", "question": "Is there a car?", "answer": "yes"}'
    for bad, needle in ((b'{"image": "p0000_00", "question": "is there a  car?", "answer": "no"}',
                         "contradicts line 1"),
                        (b'{"image": "p0000_00", "question": "\xff\xfe?", "answer": "no"}', "not UTF-8"),
                        (b'{"image": "p0000_00", "question": "big?", "answer": "no", "n": ' + b"9" * 5000 + b"}",
                         "not valid JSON")):
        q = _vqa_questions(tmp_path, [good, b"", bad])
        r = run_cli("build", vqa, "--out", tmp_path / "ws", "--set", f"questions={q}",
                    "--set", "generate_questions=false")
        one_line_error(r, f"{q}:3:", needle)
    q = _vqa_questions(tmp_path, [good, good])  # the same answer twice is the source's own repeat: kept
    from gensets.papers.borji.vqa import read_questions

    assert [x["line"] for x in read_questions(q)] == [1, 2]


# ------------------------------------------------------------------------------------- 11. review page
def _app(reference, tmp_path):
    from gensets.curation.review_state import ReviewState
    from gensets.curation.routes import create_app

    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    rs = ReviewState(ws, reviewer="ana", keep_open=True)
    # the owner's link: the session cookie and CSRF token, sent with every request
    client = owner_session(create_app(rs, allowed_hosts={"localhost"}).test_client(), rs)
    return rs, client


def _log(rs):
    with rs.lock:
        return rs.con.execute("SELECT reviewer FROM review_log").fetchall()


def test_review_page_bounds_requests_and_sends_security_headers(reference, tmp_path):
    rs, client = _app(reference, tmp_path)
    try:
        key = rs.con.execute("SELECT min(key) FROM reviews").fetchone()[0]
        r = client.post("/api/decide", data=b'{"key": "' + b"k" * 300_000 + b'"}', content_type="application/json")
        assert r.status_code == 413 and len(r.data) < 2000  # refused unread, nothing echoed
        r = client.post("/api/decide", json={"key": "x" * 10_000, "action": "accept"})
        assert r.status_code == 400 and "xxxxxxxxxx" not in r.get_data(as_text=True)
        r = client.post("/api/decide", data="[" * 8000 + "]" * 8000, content_type="application/json")
        assert r.status_code == 400 and "JSON object" in r.get_json()["error"]  # not a 500 with a traceback
        for reviewer in (["ana"], {"n": 1}, 7, "ana\nbob", "ana\u202e", "x" * 65):
            r = client.post("/api/decide", json={"key": key, "action": "accept", "reviewer": reviewer})
            assert r.status_code == 400 and "reviewer" in r.get_json()["error"], (reviewer, r.get_json())
        assert _log(rs) == []
        r = client.post("/api/decide", json={"key": key, "action": "accept"}, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and _log(rs) == []
        r = client.post("/api/decide", json={"key": key, "action": "accept", "reviewer": "Ana María (QA)"},
                        headers={"Origin": "http://localhost"})
        assert r.status_code == 200 and _log(rs) == [("Ana María (QA)",)]
        page = client.get("/")
        csp = page.headers["Content-Security-Policy"]
        assert page.status_code == 200 and "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
        assert page.headers["X-Frame-Options"] == "DENY"
    finally:
        rs.close()


def test_review_page_on_a_given_address_checks_the_host(reference, tmp_path):
    import urllib.error
    import urllib.request

    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    token = run_cli("review", "invite", ws, "ana", check=0).stdout.strip().split("?token=")[1]
    proc = subprocess.Popen([sys.executable, "-m", "gensets.cli", "review", "serve", str(ws), "--port", "0",
                             "--host", "0.0.0.0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+)/", proc.stdout.readline()).group(1)
        sid = open_session(f"http://127.0.0.1:{port}/", token)["session"]

        def status(host: str) -> int:
            req = urllib.request.Request(f"http://127.0.0.1:{port}/api/counts",
                                         headers={"Host": host, "X-Gensets-Session": sid})
            try:
                with urllib.request.urlopen(req, timeout=HTTP_WAIT) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        assert status(f"evil.example:{port}") == 403  # a name that resolves here: DNS rebinding
        assert status(f"192.168.1.7:{port}") == 200 and status(f"localhost:{port}") == 200
    finally:
        stop_server(proc)


# -------------------------------------------------------------------------- 12. one line, not a traceback
def test_review_imports_of_broken_files_name_file_and_line(reference, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    csv_bad = tmp_path / "bad.csv"
    csv_bad.write_bytes(b"key,status\nk1,accepted\nk\xe9,accepted\n")
    one_line_error(run_cli("review", "import", ws, "--format", "csv", "--file", csv_bad), f"{csv_bad}:3:", "UTF-8",
                   code=1)  # a corrupt file: a data error
    csv_big = tmp_path / "big.csv"
    csv_big.write_text("key,status,note\nk1,accepted,\"" + "n" * 140_000 + "\"\n")
    one_line_error(run_cli("review", "import", ws, "--format", "csv", "--file", csv_big), f"{csv_big}:2:", "CSV",
                   code=1)
    ls = tmp_path / "ls.json"
    ls.write_text(json.dumps([{"id": 5, "data": {"key": "k1"}, "annotations": 5}]))
    one_line_error(run_cli("review", "import", ws, "--format", "label-studio", "--file", ls), "task 5 (k1)",
                   "annotations", code=1)  # a task not of the shape gensets writes (its schema): a data error
    ls.write_text(json.dumps([{"id": 6, "data": {"key": "k1"}, "annotations": [{"result": [
        {"type": "choices", "from_name": "verdict", "value": {"choices": "accept"}}]}]}]))
    one_line_error(run_cli("review", "import", ws, "--format", "label-studio", "--file", ls), "task 6 (k1)", "choices")
    ls.write_text("[" * 100_000 + "]" * 100_000)
    one_line_error(run_cli("review", "import", ws, "--format", "label-studio", "--file", ls), ls, "JSON", code=1)
    from gensets.sources.imports import list_items

    jl = tmp_path / "list.jsonl"
    jl.write_bytes(b'{"path": "a.jpg", "category": "clock"}\n{"path": "b\xff.jpg", "category": "clock"}\n')
    with pytest.raises(Exception, match=rf"{jl}:2: not UTF-8"):
        list_items(jl, None)
    jl.write_bytes(b'{"path": "a.jpg", "category": "clock", "n": ' + b"1" * 5000 + b"}\n")
    with pytest.raises(Exception, match=rf"{jl}:1: not valid JSON"):
        list_items(jl, None)


# ------------------------------------------------------------------------------------------ 13. configs
@pytest.mark.parametrize("config, override, needle", [
    ("recognition.smoke.yaml", "unit_size=0", "unit_size: must be at least 1"),
    ("recognition.smoke.yaml", "unit_size=-5", "unit_size: must be at least 1"),
    ("vqa.smoke.yaml", "shard_size=0", "shard_size: must be at least 1"),
    ("imagenet_d.smoke.yaml", "generator.width=100000", "generator.width: must be a multiple of 8 in 8..4096"),
    ("imagenet_d.smoke.yaml", "generator.steps=100000000000000000000000", "steps: must be in 1..1000"),
])
def test_config_values_past_what_a_build_can_do(tmp_path, config, override, needle):
    r = run_cli("build", ROOT / "configs" / config, "--out", tmp_path / "ws", "--set", override, timeout=120)
    one_line_error(r, "--set", needle)
    assert not (tmp_path / "ws").exists()


# ---------------------------------------------------------------------------------- 14. imports, card
def test_an_import_folder_symlink_out_of_the_folder_is_skipped(tmp_path):
    from gensets.sources.imports import list_items

    root = tmp_path / "collected"
    (root / "clock").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "clock" / "mine.jpg")
    private = tmp_path / "home" / "private.jpg"
    private.parent.mkdir()
    Image.new("RGB", (8, 8), "red").save(private)
    (root / "clock" / "link.jpg").symlink_to(private)
    (root / "clock" / "inside.jpg").symlink_to(root / "clock" / "mine.jpg")  # a link within is fine
    items = {Path(i.rel).name: i.skip for i in list_items(root, None)}
    assert items == {"inside.jpg": None, "link.jpg": "a symlink out of the import folder", "mine.jpg": None}


def test_config_text_in_the_card_is_text_not_markup(reference):
    """Rendered by an independent CommonMark implementation (markdown-it-py): no tag of the hostile name
    survives, neither from the title nor from the build config's code block (a line of backticks closed it)."""
    markdown_it = pytest.importorskip("markdown_it")
    from gensets.cards.card import render
    from gensets.workspace import Workspace

    builder, cfg = Workspace(reference).load()
    manifest = json.loads((reference / "dataset" / "manifest.json").read_text())
    name = 'Set <img src=x onerror="alert(1)">\n```\n<script>x()</script>'
    body = render(builder, dataclasses.replace(cfg, pretty_name=name), manifest, [], "b").split("\n---\n", 1)[1]
    html = markdown_it.MarkdownIt("commonmark").render(body)
    assert "<img" not in html and "<script" not in html, html
    assert "<h1>Set &lt;img src=x onerror=&quot;alert(1)&quot;&gt; ``` &lt;script&gt;x()&lt;/script&gt;</h1>" in html
