"""Issue 25, what was left open: a runaway `gensets query` (class 6: a time limit, Ctrl-C), files written and read
by timings, GenBench's TI stage and the review export (class 1: no symlink followed or replaced; class 4: a
malformed file in one line), a config that asks for absurdly many images in all (class 5), and finalize's decode
error naming the candidate shard and key (class 3). Each test failed on the code before its fix."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, run_cli
from .test_card import make_results_db
from .test_exit_codes import _ctrl_c_reaches_it
from .test_hardening import one_line_error

RUNAWAY = "SELECT count(*) FROM range(1000000000000)"  # a trillion rows: hours of work
RECURSIVE = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"  # never ends


# ------------------------------------------------------------------------------- 6. a runaway query
@pytest.mark.parametrize("sql", [RUNAWAY, RECURSIVE], ids=["range", "recursive"])
def test_a_runaway_query_stops_at_its_timeout_in_one_line(tmp_path, sql):
    db = make_results_db(tmp_path / "r.duckdb")
    t = time.monotonic()
    r = run_cli("query", "--db", db, "--timeout", "1", sql, timeout=120)
    one_line_error(r, "--timeout 1 s", "stopped", code=1)
    assert time.monotonic() - t < 60 and r.stdout == ""
    r = run_cli("query", "--db", db, "--timeout", "1", "SELECT count(*) AS n FROM runs", "--format", "csv", check=0)
    assert r.stdout.split() == ["n", "6"]  # a quick query under the same limit: its answer


def test_query_timeout_is_checked_and_defaults_to_five_minutes(capsys):
    from gensets.cli import parser

    assert parser().parse_args(["query", "--db", "r", "SELECT 1"]).timeout == 300
    assert parser().parse_args(["query", "--db", "r", "SELECT 1", "--timeout", "0"]).timeout == 0
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit) as e:
            parser().parse_args(["query", "--db", "r", "SELECT 1", "--timeout", bad])
        assert e.value.code == 2 and "argument --timeout" in capsys.readouterr().err


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:  # it ended
        return float("inf")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # it ended, or a descriptor closed meanwhile
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sends SIGINT")
def test_ctrl_c_stops_a_running_query(tmp_path):
    """SIGINT while DuckDB runs the query (the database is open and the process burns CPU): one line, exit 130,
    at once. Before, DuckDB ran on and Python saw the signal only when the query ended (hours here)."""
    db = make_results_db(tmp_path / "r.duckdb").resolve()
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "query", "--db", str(db), RUNAWAY],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         preexec_fn=_ctrl_c_reaches_it)
    try:
        deadline = time.monotonic() + 120
        while p.poll() is None and not _has_open(p.pid, db) and time.monotonic() < deadline:
            time.sleep(0.01)  # the database opened: the query starts next
        start = _cpu_seconds(p.pid)
        while p.poll() is None and _cpu_seconds(p.pid) < start + 0.5 and time.monotonic() < deadline:
            time.sleep(0.01)  # half a CPU second spent since: the query runs
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        t = time.monotonic()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert time.monotonic() - t < 30
    assert p.returncode == 130, err
    assert err.strip() == ("gensets: interrupted; the query was stopped (the database is opened read-only: nothing "
                           "changed)"), err
    assert out == ""


# ----------------------------------------------------------------- 5. a config asking for absurdly many images
def _edited(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    text = (ROOT / "configs" / name).read_text()
    for old, new in edits:
        assert text.count(old) == 1
        text = text.replace(old, new)
    (tmp_path / name).write_text(text)
    return tmp_path / name


def test_the_paper_configs_are_under_the_total_image_cap():
    """The cap comfortably exceeds every config of the papers; failure_modes.yaml, the largest, counted by hand:
    20 labels x 31,250 baseline images + 20 labels x at most max_k 8 modes x 31,250 regenerated."""
    import math

    from gensets.config import MAX_IMAGES
    from gensets.workspace import load_build_config

    def total(name):
        builder, cfg = load_build_config(ROOT / "configs" / name)
        return sum(math.prod(n for _, n in t) for t in builder.planned_images(cfg))

    assert total("failure_modes.yaml") == 20 * 31_250 + 20 * 8 * 31_250 == 5_625_000
    assert total("imagenet_d.smoke.yaml") == 3 * (3 + 2 + 2) * 2  # classes x (3 + 2 + 2 nuisances) x 2 per pair
    assert total("vqa.smoke.yaml") == 1 + 1 + 2
    assert total("genbench.yaml") == 6 * 10 * 64  # strategies x CIFAR-10's classes x shots
    for name in ("failure_modes.yaml", "imagenet_d.yaml", "genbench.yaml", "recognition.yaml"):
        assert total(name) <= MAX_IMAGES / 1.5, name


BIG_IMAGENET_D = [("classes: [backpack, chair, mug]", "classes: all"), ("images_per_pair: 2", "images_per_pair: 100000")]


def test_a_config_asking_for_too_many_images_in_all_is_refused_before_planning(tmp_path):
    """Each count within its own bound (100,000), but 113 classes x (3 + 2 + 2) nuisances x 100,000 per pair =
    79,100,000 images in all: refused when the config is read, naming the file, line, key and value. Before, the
    build planned it and started generating (years of it)."""
    from gensets.errors import ConfigError
    from gensets.workspace import load_build_config

    config = _edited(tmp_path, "imagenet_d.smoke.yaml", *BIG_IMAGENET_D)
    with pytest.raises(ConfigError) as e:
        load_build_config(config)
    assert str(e.value) == (
        f"{config}:8: images_per_pair: 100,000 makes 79,100,000 images in all (classes 113 x nuisances.background 3 "
        "x images_per_pair 100,000, and 2 more), more than the 10,000,000 one build may plan; a typo? (a larger set: "
        "several builds)")
    with pytest.raises(ConfigError, match=r"^--set: images_per_pair: 100,000 makes 33,900,000 images in all"):
        load_build_config(ROOT / "configs" / "imagenet_d.smoke.yaml",
                          ["classes=all", "images_per_pair=100000", "nuisances={background: {limit: 3}}"])


def test_build_refuses_too_many_images_in_one_line_and_creates_nothing(tmp_path):
    config = _edited(tmp_path, "imagenet_d.smoke.yaml", *BIG_IMAGENET_D)
    t = time.monotonic()
    r = run_cli("build", config, "--out", tmp_path / "ws", "--quiet", timeout=120)
    one_line_error(r, f"{config}:8: images_per_pair: 100,000 makes 79,100,000 images in all")
    assert time.monotonic() - t < 60 and not (tmp_path / "ws").exists()


def test_a_vqa_prompt_asking_for_too_many_images_is_refused_without_listing_them(tmp_path):
    """`images: 1000000000` of one prompt: refused by its own bound, before its keys are listed (they were, all of
    them, in memory: gigabytes); an image_folder file named like a generated image is still refused."""
    from gensets.errors import ConfigError
    from gensets.workspace import load_build_config

    config = _edited(tmp_path, "vqa.smoke.yaml", ("images: 2}", "images: 1000000000}"))
    with pytest.raises(ConfigError, match=rf"^{config}:10: prompts\[2\]\.images: must be between 1 and 100,000, "
                                          "got 1,000,000,000$"):
        load_build_config(config)
    from gensets.papers.borji.vqa import PromptSpec, generated_key, image_keys

    prompts = [PromptSpec("a dog", ("dog",)), PromptSpec("a cat", ("cat",), images=120)]
    assert [generated_key(prompts, k) for k in ("p0000_00", "p0000_01", "p0001_119", "p0001_120", "p1_00",
                                                 "p0002_00", "x")] == [True, False, True, False, False, False, False]
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "p0001_07.png").write_bytes(b"x")
    with pytest.raises(ConfigError, match="a generated image and p0001_07.png have the same image key"):
        image_keys(prompts, tmp_path / "imgs")


# ------------------------------------------------------------------- 3. finalize: a decode error named
def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_a_decode_error_in_finalize_names_the_candidate_shard_and_key(small, tmp_path):
    """Every image of one candidate shard zeroed, its manifest sha256 updated to agree (so the bytes reach the
    decoder): finalize names that candidate shard (not the temporary folder of the dataset being written, gone
    once it fails) and the sample's key, in one line; dataset/ is unchanged."""
    import duckdb

    from .test_card import digest
    from .test_hostile import zero_candidate_images

    ws = _copy(small, tmp_path / "ws")
    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    shards = dict(con.execute("SELECT key, shard FROM images").fetchall())
    con.close()
    zero_candidate_images(ws)
    before = digest(ws / "dataset")
    r = run_cli("finalize", ws, "--include-pending")
    err = one_line_error(r, "cannot decode image", code=1)
    named = err.split(": ")[3].rpartition(".")[0]  # gensets: error: SHARD: KEY.EXT: cannot decode image (...)
    assert err.startswith(f"gensets: error: {ws / 'candidates' / shards[named]}: {named}."), err
    assert ".dataset.tmp" not in err and digest(ws / "dataset") == before
    assert not list(ws.glob(".dataset.tmp-*"))


# ------------------------------------------ 1 and 4. files written and read by timings, TI and the review export
def _outside(tmp_path: Path) -> tuple[Path, dict]:
    """A folder outside every root, with sentinel files; and its contents, to compare after."""
    out = tmp_path / "outside"
    out.mkdir()
    for name in ("u1.json", "airplane.safetensors", "airplane.json", "sentinel"):
        (out / name).write_text(f"the user's {name}\n")
    return out, _tree(out)


def _tree(folder: Path) -> dict:
    return {p.name: (p.read_bytes(), p.is_symlink()) for p in sorted(folder.iterdir())}


def test_timings_are_neither_written_nor_read_through_a_symlink(tmp_path, monkeypatch):
    from gensets.errors import DataError
    from gensets.timings import measured, record_timing

    outside, before = _outside(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("GENSETS_CACHE", str(cache))
    (cache / "timings").mkdir(parents=True)
    (cache / "timings" / "b1").symlink_to(outside)  # the build's folder: a symlink out of the cache
    with pytest.raises(DataError, match=r"timings/b1: a symlink inside .*; refusing to write"):
        record_timing("b1", "u1", 3, 1.5, 0.0)
    with pytest.raises(DataError, match=r"timings/b1: a symlink along the way leads out"):
        measured("b1")
    (cache / "timings" / "b1").unlink()
    (cache / "timings" / "b1").mkdir()
    tmp = cache / "timings" / "b1" / f".u1.json.tmp-{os.getpid()}"
    tmp.symlink_to(outside / "u1.json")  # its temporary name: a symlink to the user's file
    with pytest.raises(DataError, match=rf"{tmp}: cannot write it .*a symlink or FIFO there is refused"):
        record_timing("b1", "u1", 3, 1.5, 0.0)
    assert tmp.is_symlink()  # not removed either: it is not gensets'
    tmp.unlink()
    (cache / "timings" / "b1" / "u1.json").symlink_to(outside / "u1.json")  # the file itself
    with pytest.raises(DataError, match="u1.json: a symlink inside"):
        record_timing("b1", "u1", 3, 1.5, 0.0)
    with pytest.raises(DataError, match="u1.json: a symlink along the way leads out"):
        measured("b1")
    assert _tree(outside) == before
    (cache / "timings" / "b1" / "u1.json").unlink()
    record_timing("b1", "u1", 3, 1.5, 0.0)  # a clean folder: written, and read back
    assert measured("b1") == {"units": 1, "images": 3, "generator_seconds": 1.5, "seconds_per_image": 0.5,
                              "devices": ["cpu"]}


@pytest.mark.parametrize("text, want", [
    ('{"unit": "u2", "images": 3,', r"u2.json:1:28: not valid JSON"),
    ('{"unit": "u2", "images": "3", "generator_seconds": 1, "device": "cpu"}', r"u2.json: images: Input should be a "
     "valid integer"),
    ('{"unit": "u2", "images": 3, "generator_seconds": -1, "device": "cpu"}', r"u2.json: generator_seconds: "),
    ('[1, 2]', r"u2.json: \(the record\): .*not a timings record"),
], ids=["cut", "text", "negative", "list"])
def test_a_malformed_timings_file_is_named_in_one_line(tmp_path, monkeypatch, text, want):
    from gensets.errors import DataError
    from gensets.timings import measured

    monkeypatch.setenv("GENSETS_CACHE", str(tmp_path))
    (tmp_path / "timings" / "b1").mkdir(parents=True)
    (tmp_path / "timings" / "b1" / "u2.json").write_text(text)
    with pytest.raises(DataError, match=want) as e:
        measured("b1")
    assert "\n" not in str(e.value)


def test_ti_files_are_not_written_through_a_symlink_in_the_workspace(tmp_path):
    """A workspace's ti/ a symlink to a folder outside: the build refuses in one line before training into it."""
    from gensets.workspace import Workspace, load_build_config

    config = ROOT / "configs" / "genbench.ti.smoke.yaml"
    outside, before = _outside(tmp_path)
    ws = tmp_path / "ws"
    Workspace.create(ws, *load_build_config(config))  # a workspace of this build, nothing built yet
    (ws / "ti").symlink_to(outside)
    r = run_cli("build", config, "--out", ws, "--quiet")
    one_line_error(r, f"{ws / 'ti'}: a symlink inside {ws}; refusing to write through or over it", code=1)
    assert _tree(outside) == before


def test_ti_embeddings_are_not_read_through_a_symlink_or_from_a_fifo(tmp_path):
    """The generation stage hashes each class's committed embedding: one that is a symlink out of the workspace
    (a file of the user's) or a FIFO is refused in one line, not hashed (nor read forever)."""
    from gensets.errors import DataError
    from gensets.papers.genbench.ti import embeddings, plan_training
    from gensets.workspace import Workspace, load_build_config

    _, cfg = load_build_config(ROOT / "configs" / "genbench.ti.smoke.yaml")
    ws = Workspace(tmp_path / "ws")
    ws.candidates.mkdir(parents=True)
    ws.manifest_path.write_text("".join(json.dumps({"unit": u.id, "shard": f"{u.id}.tar", "sha256": "0" * 64,
                                                    "n": 0}) + "\n" for u in plan_training(cfg)))
    (ws.root / "ti").mkdir()
    (ws.root / "ti" / "cat.safetensors").write_bytes(b"an embedding")
    outside, before = _outside(tmp_path)
    (ws.root / "ti" / "airplane.safetensors").symlink_to(outside / "airplane.safetensors")
    with pytest.raises(DataError, match=r"ti/airplane.safetensors: a symlink along the way leads out"):
        embeddings(cfg, ws)
    (ws.root / "ti" / "airplane.safetensors").unlink()
    os.mkfifo(ws.root / "ti" / "airplane.safetensors")
    with pytest.raises(DataError, match=r"ti/airplane.safetensors: a FIFO, not a regular file"):
        embeddings(cfg, ws)
    (ws.root / "ti" / "airplane.safetensors").unlink()
    (ws.root / "ti" / "airplane.safetensors").write_bytes(b"another")
    import hashlib

    got = embeddings(cfg, ws)  # regular files inside: hashed as before
    assert got["cat"]["embedding_sha256"] == hashlib.sha256(b"an embedding").hexdigest()
    assert _tree(outside) == before


def test_a_ti_file_is_not_written_through_a_planted_temporary_name(tmp_path):
    import torch

    from gensets.errors import DataError
    from gensets.models.textual_inversion import save_embedding

    outside, before = _outside(tmp_path)
    path = tmp_path / "cat.safetensors"
    tmp = tmp_path / f".cat.safetensors.tmp-{os.getpid()}"
    tmp.symlink_to(outside / "sentinel")
    with pytest.raises(DataError, match="a symlink or FIFO there is refused"):
        save_embedding(path, "<cat>", torch.ones(1, 4))
    assert tmp.is_symlink() and not path.exists()
    tmp.unlink()
    path.symlink_to(outside / "sentinel")
    with pytest.raises(DataError, match="cat.safetensors: a TI file is a symlink"):
        save_embedding(path, "<cat>", torch.ones(1, 4))
    assert _tree(outside) == before
    path.unlink()
    save_embedding(path, "<cat>", torch.ones(1, 4))  # and written where nothing was planted
    import safetensors.torch

    assert safetensors.torch.load_file(str(path))["<cat>"].tolist() == [[1.0] * 4]


@pytest.mark.parametrize("content", ["garbage", "bad-state", "fifo"])
def test_a_malformed_ti_checkpoint_is_named_in_one_line(tmp_path, content):
    """A checkpoint that is not safetensors, whose state is not a training's, or a FIFO: one line naming it, before
    any training step (a cut or foreign file was a safetensors traceback; a FIFO blocked)."""
    import safetensors.torch
    import torch
    from PIL import Image

    from gensets.errors import DataError

    from .test_genbench_ti import train

    ckpt = tmp_path / "cat.ckpt.safetensors"
    if content == "garbage":
        ckpt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}" + b"\0" * 64)
        want = "not a readable TI checkpoint"
    elif content == "bad-state":
        state = json.dumps({"key": "k", "step": 3, "losses": "many"})
        safetensors.torch.save_file({k: torch.zeros(32) for k in ("embedding", "exp_avg", "exp_avg_sq")}, str(ckpt),
                                    metadata={"state": state})
        want = "state: losses: Input should be a valid list .*remove it"
    else:
        os.mkfifo(ckpt)
        want = "a FIFO, not a regular file"
    images = [Image.new("RGB", (40, 40), c) for c in ("red", "blue")]
    with pytest.raises(DataError, match=f"{ckpt}: {want}") as e:
        train(images, tmp_path)
    assert "\n" not in str(e.value)


def test_the_label_studio_export_writes_through_no_symlink(small, tmp_path):
    """--images local-files: --root's gensets-images/ a symlink out: refused in one line, nothing written there.
    The labeling config beside --file a symlink to a user's file: refused before anything is written. The
    export's temporary name a symlink: refused, the user's file unchanged."""
    from gensets.curation.interchange import write_json_list
    from gensets.errors import DataError

    outside, before = _outside(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    (root / "gensets-images").symlink_to(outside)
    out = tmp_path / "tasks.json"
    r = run_cli("review", "export", small, "--format", "label-studio", "--file", out, "--images", "local-files",
                "--root", root)
    one_line_error(r, f"{root / 'gensets-images'}: a symlink inside {root}; refusing to write", code=1)
    assert not out.exists()

    (tmp_path / "tasks.json.label_config.xml").symlink_to(outside / "sentinel")
    r = run_cli("review", "export", small, "--format", "label-studio", "--file", out)
    one_line_error(r, "tasks.json.label_config.xml: the labeling config is a symlink", code=1)
    assert not out.exists()

    tmp = tmp_path / f".tasks.json.tmp-{os.getpid()}"
    tmp.symlink_to(outside / "sentinel")
    with pytest.raises(DataError, match="a symlink or FIFO there is refused"):
        write_json_list(out, [{"a": 1}])
    assert tmp.is_symlink() and not out.exists() and _tree(outside) == before
    tmp.unlink()
    assert write_json_list(out, [{"a": 1}, {"b": "x"}], indent=None) == 2
    assert json.loads(out.read_text()) == [{"a": 1}, {"b": "x"}]


def test_the_csv_export_replaces_no_symlink(small, tmp_path):
    outside, before = _outside(tmp_path)
    out = tmp_path / "decisions.csv"
    out.symlink_to(outside / "sentinel")
    r = run_cli("review", "export", small, "--format", "csv", "--file", out)
    one_line_error(r, f"{out}: the export file is a symlink", code=1)
    assert out.is_symlink() and _tree(outside) == before
    out.unlink()
    run_cli("review", "export", small, "--format", "csv", "--file", out, check=0)
    assert out.read_text().splitlines()[0] == "key,status,label,reviewer,note"
    assert not list(tmp_path.glob(".decisions.csv.tmp-*"))
