"""Issue 45, item 2: one door for records. Every JSON record gensets reads goes through gensets/recordio.py and its
pydantic schema (gensets/schemas.py): a malformed record is one line naming the file, the field and the problem
(exit 1, no traceback, nothing written), a symlink out, a FIFO or a folder is refused without reading, and no
control character of a record reaches the terminal. Each defect class is tried on every command that reads the
record: environment records (``verify --rebuild``, ``finalize``, ``card``), ``.review-server.json`` (``review
serve``, ``review list``), a commit marker forged beside its true shard (``finalize``, ``verify``, ``publish`` of
an s3:// workspace: test_records_door_s3.py)."""

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

import gensets
from gensets import recordio

from .conftest import run_cli

SECRET = "aws_secret_access_key = NOTASECRETBUTSECRETLOOKING"
ESC = "\x1b]0;owned\x07\x1b[2J"


def _env_file(ws: Path) -> Path:
    (path,) = sorted((ws / "environments").glob("*.json"))
    return path


def _deep(n: int = 100):
    v = 1
    for _ in range(n):
        v = [v]
    return v


# content variants of an environment record: (name, change, the field the line names)
CONTENT = [
    ("wrong type", lambda e: e.update(threads="2"), "threads"),
    ("missing field", lambda e: e.pop("cpu"), "cpu"),
    ("huge number", lambda e: e.update(threads=10**30), "threads"),
    ("thread count out of bounds", lambda e: e.update(threads=256000), "threads"),
    ("control characters", lambda e: e["cpu"].update(model=f"Intel{ESC}"), "cpu.model"),
    ("wrong nested type", lambda e: e.update(libraries=["torch"]), "libraries"),
    ("unknown field", lambda e: e.update(note="hello"), "note"),
    ("too deep", lambda e: e.update(gpu=_deep()), None),
]


def _write_content(path: Path, change) -> None:
    env = json.loads(path.read_text())
    change(env)
    path.unlink()
    path.write_text(json.dumps(env))


# file variants: (name, how the file is replaced, what the line says)
def _symlink_out(path: Path) -> None:
    secret = path.parent.parent.parent / "credentials.json"
    secret.write_text(json.dumps({"threads": SECRET}))
    path.unlink()
    path.symlink_to(secret)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _huge(path: Path) -> None:
    path.write_text(json.dumps({"pad": "x" * (2 << 20)}))


def _not_json(path: Path) -> None:
    path.write_text('{"threads": 2,')


FILES = [("symlink out", _symlink_out, "leads out of"), ("FIFO", _fifo, "a FIFO, not a regular file"),
         ("folder", _folder, "a folder, not a regular file"), ("over-large", _huge, "over 1048576 bytes"),
         ("not JSON", _not_json, "not valid JSON")]


def _one_line(r, *names: str) -> str:
    """The single stderr line of a refused command (exit 1), naming each of ``names``; no control character of the
    record on stdout or stderr, no traceback, no secret."""
    out = r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, (r.returncode, r.stdout, r.stderr)
    for n in names:
        assert n in lines[0], (n, lines[0])
    assert "\x1b" not in out and "\x07" not in out and "Traceback" not in out and SECRET not in out, out
    return lines[0]


@pytest.fixture
def ws(small, tmp_path):
    """A copy of the small finalized smoke build (symlinks as they are), inside a folder of its own."""
    dest = tmp_path / "box" / "ws"
    shutil.copytree(small, dest, symlinks=True)
    return dest


ENV_COMMANDS = {"verify --rebuild": lambda ws: ("verify", ws, "--rebuild", "1", "--seed", "0", "--quiet"),
                "finalize": lambda ws: ("finalize", ws, "--include-pending")}


@pytest.mark.parametrize("command", sorted(ENV_COMMANDS))
@pytest.mark.parametrize("name, change, field", CONTENT, ids=[c[0] for c in CONTENT])
def test_a_malformed_environment_record_is_one_line(ws, command, name, change, field):
    path = _env_file(ws)
    _write_content(path, change)
    before = (ws / "dataset" / "manifest.json").read_bytes()
    line = _one_line(run_cli(*ENV_COMMANDS[command](ws)), str(path), *([f": {field}:"] if field else ["deeper"]))
    assert "environment record" in line or "nested" in line
    assert (ws / "dataset" / "manifest.json").read_bytes() == before  # nothing written
    assert not list(ws.glob(".dataset.tmp-*"))


@pytest.mark.parametrize("command", sorted(ENV_COMMANDS))
@pytest.mark.parametrize("name, spoil, says", FILES, ids=[f[0] for f in FILES])
def test_an_environment_file_that_is_no_record_is_one_line(ws, command, name, spoil, says):
    path = _env_file(ws)
    spoil(path)
    before = (ws / "dataset" / "manifest.json").read_bytes()
    _one_line(run_cli(*ENV_COMMANDS[command](ws)), str(path), says)
    assert (ws / "dataset" / "manifest.json").read_bytes() == before


def _manifest_env(ws: Path, change) -> None:
    path = ws / "dataset" / "manifest.json"
    m = json.loads(path.read_text())
    change(m["environments"][0]["environment"])
    path.unlink()
    path.write_text(json.dumps(m))


@pytest.mark.parametrize("name, change, field", CONTENT, ids=[c[0] for c in CONTENT])
def test_card_refuses_a_malformed_environment_in_the_manifest(ws, name, change, field):
    """`gensets card` reads the environments from dataset/manifest.json (finalize copied them there)."""
    _manifest_env(ws, change)
    readme = (ws / "dataset" / "README.md").read_bytes()
    wanted = [f": environments[0].environment.{field}:"] if field else ["deeper"]
    _one_line(run_cli("card", ws), str(ws / "dataset" / "manifest.json"), *wanted)
    assert (ws / "dataset" / "README.md").read_bytes() == readme


@pytest.mark.parametrize("name, spoil, says", [f for f in FILES if f[0] != "over-large"],
                         ids=[f[0] for f in FILES if f[0] != "over-large"])
def test_card_refuses_a_manifest_that_is_no_record(ws, name, spoil, says):
    path = ws / "dataset" / "manifest.json"
    spoil(path)
    _one_line(run_cli("card", ws), str(path), says if name != "symlink out" else "")


def test_a_rebuild_starts_no_more_threads_than_the_machine_has_cores(ws):
    """A recorded thread count of 256 (in bounds: another machine's) is capped at this machine's cores; the line
    says that the thread count differs."""
    from gensets.determinism import cores

    path = _env_file(ws)
    _write_content(path, lambda e: e.update(threads=256))
    r = run_cli("verify", ws, "--rebuild", "1", "--seed", "0", "--quiet")
    assert f"threads: 256 -> {min(256, cores())}" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------------ .review-server.json
def _record(ws: Path, spoil) -> Path:
    path = ws / ".review-server.json"
    if spoil == "fifo":
        os.mkfifo(path)
    elif spoil == "folder":
        path.mkdir()
    else:
        path.write_text(json.dumps(spoil))
    return path


RECORDS = [("FIFO", "fifo", "not a regular file"), ("folder", "folder", "cannot open the review-server record"),
           ("control characters", [{"pid": os.getpid(), "url": f"http://127.0.0.1:1/{ESC}", "started": 1,
                                    "release": "k"}], "[0].url"),
           ("wrong type", [{"pid": str(os.getpid()), "url": "http://127.0.0.1:1/", "started": 1, "release": "k"}],
            "[0].pid"),
           ("not a list", {"pid": 1}, "(the record)")]


@pytest.mark.parametrize("name, spoil, says", RECORDS, ids=[r[0] for r in RECORDS])
def test_review_serve_names_a_review_server_record_that_is_no_record(ws, name, spoil, says):
    path = _record(ws, spoil)
    r = run_cli("review", "serve", ws, "--port", "0", timeout=120)
    _one_line(r, str(path), says)


@pytest.mark.parametrize("name, spoil, says", RECORDS, ids=[r[0] for r in RECORDS])
def test_review_list_is_not_stopped_by_a_review_server_record(ws, name, spoil, says):
    """`review list` asks the record only when state.duckdb is held: with nobody holding it, a bad record is not
    read, and the listing is the one without it (no bare errno, no control character)."""
    want = run_cli("review", "list", ws, check=0).stdout
    _record(ws, spoil)
    r = run_cli("review", "list", ws, check=0)
    assert r.stdout == want and "Errno" not in r.stderr and "\x1b" not in r.stdout + r.stderr


# ------------------------------------------------------------------------------------ the reader itself
def test_the_reader_names_file_field_and_problem(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"unit": "u", "images": -1, "generator_seconds": 1.0, "device": "cpu"}))
    with pytest.raises(recordio.RecordError, match=r"t\.json: images: Input should be greater than or equal to 0"):
        recordio.read(p, "Timing")
    p.write_text(json.dumps({"unit": "u", "images": 1, "generator_seconds": float("inf"), "device": "cpu"}))
    with pytest.raises(recordio.RecordError, match="generator_seconds"):
        recordio.read(p, "Timing")
    p.write_text(json.dumps({"unit": "u\x1b[2J", "images": 1, "generator_seconds": 1.0, "device": "cpu"}))
    with pytest.raises(recordio.RecordError, match=r"unit: a control character \(U\+001B\)") as e:
        recordio.read(p, "Timing")
    assert "\x1b" not in str(e.value)
    out = tmp_path / "out.json"
    out.write_text("{}")
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "x.json").symlink_to(out)
    with pytest.raises(gensets.errors.DataError, match="leads out of"):
        recordio.read("x.json", "AnyRecord", tmp_path / "root")


def test_validating_returns_the_record_as_read():
    """What gensets writes from a record it read is byte-identical: the value returned is the parsed JSON itself."""
    data = b'{"unit": "u", "images": 3, "generator_seconds": 2, "device": "cpu"}'
    got = recordio.parse(data, "Timing", "t")
    assert json.dumps(got).encode() == data and type(got["generator_seconds"]) is int


def test_a_ti_checkpoint_whose_state_is_no_record_is_one_line(tmp_path):
    import safetensors.torch
    import torch

    from gensets.errors import DataError
    from gensets.models.textual_inversion import _resume

    path = tmp_path / "c.ckpt.safetensors"
    for state, field in ((json.dumps({"key": "k", "step": 10**12, "losses": []}), "step"),
                         (json.dumps({"key": f"k{ESC}", "step": 0, "losses": []}), "key"),
                         (json.dumps({"key": "k", "step": "1", "losses": [1.0]}), "step")):
        safetensors.torch.save_file({"embedding": torch.zeros(2)}, str(path), metadata={"state": state})
        with pytest.raises(DataError, match=f"state: {field}:") as e:
            _resume(path, "k", 10)
        assert "\x1b" not in str(e.value)


# ------------------------------------------------------------------------------------ the door, in the source
DOOR = {"gensets/recordio.py"}
PARSERS = {"json.load", "json.loads", "yaml.load", "yaml.safe_load", "yaml.compose", "yaml.safe_load_all",
           "yaml.load_all", "raw_decode"}
# (module, call) -> why it may parse JSON or YAML outside the door
ALLOWED = {
    ("gensets/config.py", "yaml.load"): "configs: YAML through config.BoundedLoader, validated into frozen "
        "dataclasses with file:line: key errors (the config door)",
    ("gensets/config.py", "yaml.compose"): "the config door, as above (line numbers)",
    ("gensets/config.py", "yaml.safe_load"): "the config door: a composed node's value, already bounded",
    ("gensets/papers/tables.py", "yaml.safe_load"): "gensets' own packaged paper configs (gensets/data/configs)",
    ("gensets/papers/borji/tables.py", "yaml.safe_load"): "gensets' own packaged paper configs, as above",
    ("gensets/cli/evaluate.py", "json.loads"): "JSON columns of the results database gensets wrote (gensets score "
        "--json)",
    ("gensets/sources/packaged.py", "json.loads"): "packaged data (gensets/data): ours, shipped in the wheel",
    ("gensets/models/tiny/text.py", "json.loads"): "packaged data (gensets/data)",
    ("gensets/models/random/__init__.py", "json.loads"): "packaged architectures (gensets/data/random)",
    ("gensets/models/scorers.py", "json.loads"): "a scorer model's own config.json in a model folder (a model, "
        "loaded by the model loader's rules, not a record)",
    ("gensets/records.py", "json.loads"): "a sample's json member (provenance; the builder's fields), read from "
        "a shard whose sha256 is checked",
    ("gensets/shards/reader.py", "json.loads"): "a sample's json member, as above",
    ("gensets/shards/verify.py", "json.loads"): "verify only checks that a json member parses (a finding)",
    ("gensets/evaluation/data.py", "json.loads"): "a sample's json member, as above",
    ("gensets/curation/state.py", "json.loads"): "a sample's json member at ingest, as above",
    ("gensets/curation/review_state.py", "json.loads"): "provenance from state.duckdb (ingested)",
    ("gensets/curation/routes.py", "json.loads"): "a POST body under the server's size limit",
    ("gensets/curation/sessions.py", "json.loads"): "a POST body under the server's size limit (kept for its route)",
    ("gensets/builders/finalize.py", "json.loads"): "provenance from state.duckdb (ingested from checked shards "
        "or commit markers checked against their shard)",
    ("gensets/papers/wiles/analysis.py", "json.loads"): "provenance from state.duckdb, as above",
    ("gensets/evaluation/leaderboard.py", "json.loads"): "JSON columns of the results database gensets wrote",
    ("gensets/evaluation/reports/quality.py", "json.loads"): "JSON columns of the results database gensets wrote",
    ("gensets/papers/borji/recognition_report.py", "json.loads"): "JSON columns of the results database",
    ("gensets/papers/borji/vqa.py", "json.loads"): "a user's input (VQA questions .jsonl), checked as a config "
        "input (ConfigError naming file:line)",
    ("gensets/sources/imports.py", "json.loads"): "a user's import list (.jsonl), checked as a config input",
    ("gensets/curation/interchange.py", "raw_decode"): "a Label Studio export streamed item by item (100k "
        "tasks with images do not fit in memory); each task is checked by recordio.check against its schema",
}


def _parser(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Attribute):
        base = f.value.id if isinstance(f.value, ast.Name) else ""
        name = f"{base}.{f.attr}" if base else f.attr
        if name in PARSERS or f.attr == "raw_decode":
            return name if name in PARSERS else "raw_decode"
    return None


def test_no_module_outside_the_door_parses_a_record():
    root = Path(gensets.__file__).parent
    found, used = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = f"gensets/{path.relative_to(root).as_posix()}"
        if rel in DOOR:
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Call) and (what := _parser(node)):
                if (rel, what) in ALLOWED:
                    used.add((rel, what))
                else:
                    found.append(f"{rel}:{node.lineno}: {what}")
    assert not found, "parse records through gensets.recordio (read / parse / check):\n" + "\n".join(found)
    assert not set(ALLOWED) - used, f"allow-list entries no longer needed: {sorted(set(ALLOWED) - used)}"
