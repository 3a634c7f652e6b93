"""Issue 25: hostile workspaces and slips of the hand. Each test reproduces one hole (it failed before the fix) and
checks the answer: one line naming what and where, a non-zero exit, no traceback, nothing outside changed and
nothing already written lost."""

import datetime as dt
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from .conftest import SMALL, SMOKE, run_cli
from .test_card import digest
from .test_hardening import one_line_error


def _copy(small, tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(small, ws, symlinks=True)
    return ws


def _first_shard(ds: Path) -> dict:
    return json.loads((ds / "manifest.json").read_text())["shards"][0]


def _sentinel(tmp_path) -> tuple[Path, dict]:
    """A folder outside everything a command was given, with a file in it, and its digest."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the user's own file\n")
    return outside, digest(outside)


# ------------------------------------------------------------- 1. paths from data stay inside their root
def test_publish_to_a_folder_with_a_symlinked_sub_folder_writes_and_deletes_nothing_outside(small, tmp_path):
    config = _first_shard(small / "dataset")["config"]
    outside, _ = _sentinel(tmp_path)
    earlier = outside / "test-00009.tar"  # an "earlier" shard the repo's manifest lists, reached through the link
    earlier.write_bytes(b"the user's tar")
    before = digest(outside)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / config).symlink_to(outside)
    manifest = json.loads((small / "dataset" / "manifest.json").read_text())
    manifest["shards"].append({**manifest["shards"][0], "path": f"{config}/test-00009.tar"})
    (repo / "manifest.json").write_text(json.dumps(manifest))
    r = run_cli("publish", small, "--repo", f"file://{repo}")
    one_line_error(r, "symlink", config, code=1)
    assert digest(outside) == before and earlier.exists()


@pytest.mark.parametrize("pattern", ["../elsewhere/*.tar", "/ABS/*.tar", "link/*.tar"])
def test_eval_reads_no_shard_outside_the_dataset_folder(small, tmp_path, pattern):
    from gensets.errors import DataError
    from gensets.evaluation.data import open_source

    ds = tmp_path / "ds"
    shutil.copytree(small / "dataset", ds)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(ds / _first_shard(ds)["path"], elsewhere / "foreign.tar")
    (ds / "link").symlink_to(elsewhere)
    pattern = pattern.replace("/ABS", str(elsewhere))
    readme = ds / "README.md"
    text = readme.read_text()
    header = text.split("---", 2)[1]
    lines = [f"    path: {pattern}" if line.strip().startswith("path:") else line for line in header.splitlines()]
    readme.write_text("---" + "\n".join(lines) + "\n---" + text.split("---", 2)[2])
    with pytest.raises(DataError, match="out of"):
        src = open_source(str(ds))
        raise AssertionError(f"read {[s.shards for s in src.splits]}")  # only reached before the fix
    if pattern.startswith(".."):  # the command says it in one line
        r = run_cli("eval", ds, "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet")
        one_line_error(r, "README.md", pattern, code=1)


def _pair_shard(tmp_path, init_image: str) -> Path:
    import io

    from PIL import Image

    from gensets.shards import write_shard

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buf, format="PNG")
    meta = {"label": "mug", "prompting": {"init_image": init_image}}
    shard = tmp_path / "shards" / "s.tar"
    shard.parent.mkdir(exist_ok=True)
    write_shard(shard, [{"__key__": "k0", "png": buf.getvalue(), "json": json.dumps(meta).encode(), "cls": b"0"}])
    return shard


@pytest.mark.parametrize("how", ["dotdot", "absolute"])
def test_score_pairs_reads_no_init_image_outside_the_pairs_folder(tmp_path, how):
    from PIL import Image

    pairs = tmp_path / "pairs"
    pairs.mkdir()
    secret = tmp_path / "secret.png"
    Image.new("RGB", (16, 16), (10, 20, 30)).save(secret)
    name = "../secret.png" if how == "dotdot" else str(secret)
    shard = _pair_shard(tmp_path, name)
    r = run_cli("score", shard, "--metric", "psnr", "--pairs", pairs, "--db", tmp_path / "s.duckdb", "--quiet")
    one_line_error(r, "k0", "init_image", "out of", code=1)


def test_a_workspace_lock_symlinked_out_truncates_nothing(small, tmp_path):
    ws = _copy(small, tmp_path)
    outside, before = _sentinel(tmp_path)
    (ws / ".gensets.lock").unlink(missing_ok=True)
    (ws / ".gensets.lock").symlink_to(outside / "keep.txt")
    r = run_cli("finalize", ws, "--include-pending")
    one_line_error(r, ".gensets.lock", "symlink", code=1)
    assert digest(outside) == before


def test_a_workspace_dataset_folder_symlinked_out_is_not_published(small, tmp_path):
    ws = _copy(small, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(ws / "dataset", elsewhere)
    (ws / "dataset").symlink_to(elsewhere)
    before = digest(elsewhere)
    one_line_error(run_cli("publish", ws, "--repo", f"file://{tmp_path / 'repo'}", "--dry-run"), "dataset",
                   "symlink", code=1)
    r = run_cli("finalize", ws, "--include-pending")
    one_line_error(r, "dataset", "symlink", code=1)
    assert digest(elsewhere) == before and (ws / "dataset").is_symlink()


def test_a_candidate_manifest_symlinked_out_is_never_appended_to(small, tmp_path):
    ws = _copy(small, tmp_path)
    outside, _ = _sentinel(tmp_path)
    shutil.move(ws / "candidates" / "manifest.jsonl", outside / "manifest.jsonl")
    (ws / "candidates" / "manifest.jsonl").symlink_to(outside / "manifest.jsonl")
    before = digest(outside)
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL)
    one_line_error(r, "manifest.jsonl", "symlink", code=1)
    assert digest(outside) == before


# -------------------------------------------------------------------- 2. a slip of the hand loses nothing
def test_build_into_a_folder_that_is_not_a_workspace_is_refused(tmp_path):
    home = tmp_path / "home"
    (home / "dataset").mkdir(parents=True)
    (home / "dataset" / "thesis.txt").write_text("years of work\n")
    (home / ".notes.tmp-1").write_text("looks like a temp file, is not\n")
    before = digest(home)
    r = run_cli("build", SMOKE, "--out", home, "--quiet", *SMALL)
    one_line_error(r, home, "not a gensets workspace")
    assert digest(home) == before and sorted(p.name for p in home.iterdir()) == [".notes.tmp-1", "dataset"]


def test_outputs_never_write_over_a_workspace_own_files(small, tmp_path):
    ws = _copy(small, tmp_path)
    before = digest(ws)
    for target in (ws / "state.duckdb", ws / "config.yaml", ws / "candidates" / "manifest.jsonl"):
        r = run_cli("review", "export", ws, "--format", "csv", "--file", target)
        one_line_error(r, target, "--file", "workspace")
    r = run_cli("eval", ws, "--model", "tiny:resnet", "--db", ws / "state.duckdb", "--quiet")
    one_line_error(r, "--db", "state.duckdb")
    r = run_cli("report", "quality", "--db", tmp_path / "none.duckdb", "--out", ws / "dataset")
    one_line_error(r, "--out", "dataset")
    assert digest(ws) == before


# ------------------------------------------------------------------ 3. integrity checked where it is cheap
def test_finalize_refuses_a_candidate_shard_changed_after_the_build(small, tmp_path):
    import duckdb

    from gensets.shards import verify

    ws = _copy(small, tmp_path)
    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    name, off, size = con.execute("SELECT i.shard, i.byte_offset, i.nbytes FROM images i JOIN reviews r USING (key) "
                                  "WHERE r.status = 'pending' ORDER BY key LIMIT 1").fetchone()
    con.close()
    shard = ws / "candidates" / name  # a shard that finalize reads (one of its images is published)
    data = bytearray(shard.read_bytes())
    data[off + size // 2] ^= 0x01  # one bit in the middle of an image: same size, same headers, other bytes
    shard.write_bytes(bytes(data))
    before = digest(ws / "dataset")
    r = run_cli("finalize", ws, "--include-pending")
    one_line_error(r, name, "sha256", code=1)
    assert digest(ws / "dataset") == before and verify(ws / "dataset") == []


def test_finalize_refuses_a_workspace_with_units_of_its_plan_missing(small, tmp_path):
    """A unit's manifest row gone (its shard and samples still there): finalize names how many and which, and
    publishes nothing (the dataset before it stays)."""
    from gensets.shards import Manifest

    ws = _copy(small, tmp_path)
    mpath = ws / "candidates" / "manifest.jsonl"
    rows = Manifest(mpath).rows()
    mpath.write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))
    before = digest(ws / "dataset")
    r = run_cli("finalize", ws, "--include-pending")
    one_line_error(r, f"1 of {len(rows)} units", rows[0]["unit"], code=1)
    assert digest(ws / "dataset") == before


def zero_candidate_images(ws: Path) -> None:
    """Every image of every candidate shard of ``ws`` zeroed, and candidates/manifest.jsonl's sha256 updated to
    agree, so the bytes pass the integrity check and reach the decoder."""
    from gensets.shards import Manifest, index_shard, sha256_file

    mpath = ws / "candidates" / "manifest.jsonl"
    rows = Manifest(mpath).rows()
    for row in rows:
        shard = ws / "candidates" / row["shard"]
        data = bytearray(shard.read_bytes())
        for entry in index_shard(shard):
            for ext in ("jpg", "png", "webp"):
                if ext in entry:
                    off, size = entry[ext]
                    data[off:off + size] = b"\0" * size
        shard.write_bytes(bytes(data))
        row["sha256"] = sha256_file(shard)
    mpath.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_decode_error_in_finalize_names_the_shard_and_key(small, tmp_path):
    ws = _copy(small, tmp_path)
    zero_candidate_images(ws)
    r = run_cli("finalize", ws, "--include-pending")
    err = one_line_error(r, "cannot decode", code=1)
    assert any(k in err for k in _keys(ws)), err


def _keys(ws: Path) -> list[str]:
    import duckdb

    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    try:
        return [k for (k,) in con.execute("SELECT key FROM samples").fetchall()]
    finally:
        con.close()


# --------------------------------------------------- 6. verify never reads a FIFO or a device forever
def test_verify_refuses_a_fifo_and_a_link_to_dev_zero(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    os.mkfifo(folder / "pipe.tar")
    (folder / "zero.tar").symlink_to("/dev/zero")
    r = run_cli("verify", folder, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "pipe.tar: a FIFO, not a regular file" in r.stdout and "zero.tar" in r.stdout, r.stdout
    one_line_error(run_cli("verify", folder / "pipe.tar", timeout=60), "pipe.tar", "FIFO")
    one_line_error(run_cli("verify", folder / "zero.tar", timeout=60), "zero.tar", "not a regular file")


# ---------------------------------------------------------------------------- 7. formula injection
def test_query_and_leaderboard_csv_cells_never_start_a_formula(tmp_path):
    import csv
    import io

    from gensets.evaluation import store

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    now = dt.datetime(2026, 1, 1)
    model = '=HYPERLINK("http://evil/", "x")'
    run = {"dataset": "@dataset", "dataset_revision": None, "config": "+config", "split": "-split", "model": model,
           "model_id": model, "model_revision": None, "protocol": "imagenet", "label_space": "model (1000)", "n": 1,
           "started": now, "finished": now, "seconds": 1.0, "images_per_second": 1.0, "versions": {}}
    store.write_run(con, run, [], [{"name": "top1", "value": -0.5, "lo": None, "hi": None}])
    con.close()
    outs = [run_cli("leaderboard", "--db", db, "--format", "csv", check=0).stdout,
            run_cli("query", "--db", db, "SELECT model, config, '=1+2' AS \"=x\", -0.5 AS n FROM runs",
                    "--format", "csv", check=0).stdout]
    for out in outs:
        cells = [c for row in csv.reader(io.StringIO(out)) for c in row]
        assert model in "".join(cells)  # still there, guarded
        assert not [c for c in cells if c[:1] in ("=", "+", "@") or (c[:1] == "-" and not _number(c))], cells


def _number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def test_safety_helpers(tmp_path):
    from gensets.errors import DataError
    from gensets.safety import check_regular, inside, writable_inside

    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("x")
    (root / "in").symlink_to(root / "a")
    (root / "out").symlink_to(tmp_path)
    assert inside(root, "a/f.txt") == root / "a" / "f.txt" and inside(root, "in/f.txt") == root / "in" / "f.txt"
    for bad in ("../x", "/etc/passwd", "a/../../x", "out/x", "", "C:/x"):
        with pytest.raises(DataError):
            inside(root, bad, where="somewhere")
    with pytest.raises(DataError, match="symlink"):
        writable_inside(root, "in/f.txt")
    assert writable_inside(root, "a/new.txt") == root / "a" / "new.txt"
    with pytest.raises(DataError, match="character device"):
        check_regular("/dev/null")
    assert hashlib.sha256(check_regular(root / "a" / "f.txt").read_bytes()).hexdigest()
