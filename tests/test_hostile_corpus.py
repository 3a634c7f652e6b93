"""Issue 25: a corpus of hostile inputs run through every command that reads them.

``corpus`` makes, once per worker, workspaces, dataset folders, results databases, configs and review files that
are wrong in each of issue 25's ways (symlinks out of their folder, FIFOs and ``/dev/zero`` where a file is read,
files cut short or nested too deeply, garbage where a database is, control characters, absurd numbers), beside a
sentinel tree that no command may touch. ``test_every_command_over_every_item`` runs each command on each item it
reads and checks what the issue asks of every one: no traceback; either success, or a non-zero exit with one
``gensets: error:`` line; the sentinel tree (and the item's own link targets) unchanged byte for byte; done within
a bound (no hang on a FIFO or ``/dev/zero``). The targeted tests of each class, with the exact messages, are in
test_hostile.py, test_hostile2.py and test_hostile3.py; this one is the sweep across commands."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from .conftest import ROOT, run_cli

BOUND_S = 120  # a command that reads a FIFO or /dev/zero would never end: the bound only catches that


def _snapshot(root: Path) -> dict:
    """Every entry under ``root`` (links not followed): its kind, and a file's sha256 or a link's target."""
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(base) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir",)
            elif p.is_file():
                out[rel] = ("file", hashlib.sha256(p.read_bytes()).hexdigest())
            else:
                out[rel] = ("special",)
    return out


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _first(folder: Path, pattern: str) -> Path:
    return sorted(folder.rglob(pattern))[0]


@pytest.fixture(scope="module")
def corpus(small, tmp_path_factory):
    """{kind: {name: path}}: hostile workspaces, dataset folders, databases, configs and review files; and the
    sentinel tree beside them."""
    root = tmp_path_factory.mktemp("corpus")
    sentinel = root / "sentinel"
    (sentinel / "sub").mkdir(parents=True)
    (sentinel / "secret.txt").write_text("not yours\n")
    (sentinel / "sub" / "a.tar").write_bytes(b"\0" * 1024)
    (sentinel / "sub" / "state.duckdb").write_bytes(b"not a database")
    items: dict[str, dict[str, Path]] = {"workspace": {}, "dataset": {}, "db": {}, "config": {}, "review": {}}

    def ws(name: str) -> Path:
        items["workspace"][name] = _copy(small, root / "ws" / name)
        return items["workspace"][name]

    def ds(name: str) -> Path:
        items["dataset"][name] = _copy(small / "dataset", root / "ds" / name)
        return items["dataset"][name]

    # workspaces
    w = ws("candidate-symlink-out")
    shard = _first(w / "candidates", "*.tar")
    shard.unlink()
    shard.symlink_to(sentinel / "sub" / "a.tar")
    w = ws("state-garbage")
    (w / "state.duckdb").write_bytes(os.urandom(4096))
    w = ws("state-symlink-out")
    (w / "state.duckdb").unlink()
    (w / "state.duckdb").symlink_to(sentinel / "sub" / "state.duckdb")
    w = ws("config-cut")
    text = (w / "config.yaml").read_text()
    (w / "config.yaml").write_text(text[: len(text) // 2] + "\n  - [unclosed: {\n")
    w = ws("dataset-dir-symlink-out")
    shutil.rmtree(w / "dataset")
    (w / "dataset").symlink_to(sentinel, target_is_directory=True)
    w = ws("candidates-fifo")
    shard = _first(w / "candidates", "*.tar")
    shard.unlink()
    os.mkfifo(shard)
    # dataset folders
    d = ds("manifest-deep")
    (d / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    d = ds("manifest-cut")
    text = (d / "manifest.json").read_text()
    (d / "manifest.json").write_text(text[: len(text) // 2])
    d = ds("shard-fifo")
    shard = _first(d, "*.tar")
    shard.unlink()
    os.mkfifo(shard)
    d = ds("shard-dev-zero")
    shard = _first(d, "*.tar")
    shard.unlink()
    shard.symlink_to("/dev/zero")
    d = ds("card-data-files-out")
    card = (d / "README.md").read_text()
    (d / "README.md").write_text(card.replace("path: background/", "path: ../../sentinel/sub/"))
    d = ds("shard-symlink-out")
    shard = _first(d, "*.tar")
    shard.unlink()
    shard.symlink_to(sentinel / "sub" / "a.tar")
    items["dataset"]["folder-symlink-out"] = root / "ds" / "folder-symlink-out"
    items["dataset"]["folder-symlink-out"].symlink_to(sentinel, target_is_directory=True)
    # results databases
    db = root / "db"
    db.mkdir()
    (db / "garbage.duckdb").write_bytes(os.urandom(8192))
    os.mkfifo(db / "fifo.duckdb")
    (db / "empty.duckdb").write_bytes(b"")
    (db / "zero.duckdb").symlink_to("/dev/zero")
    items["db"] = {p.stem: p for p in sorted(db.iterdir())}
    # build configs
    cfgs = root / "cfg"
    cfgs.mkdir()
    smoke = (ROOT / "configs" / "imagenet_d.smoke.yaml").read_text()
    bad = {"control-chars": smoke.replace("classes: [", "classes: [\"mu\\x1b[31mg\", "),
           "absurd-count": smoke + "\nunit_size: 1000000000000000000000\n",
           "deep": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
           "not-a-mapping": "- just\n- a list\n",
           "binary": None}
    for name, text in bad.items():
        if text is None:
            (cfgs / f"{name}.yaml").write_bytes(os.urandom(512))
        else:
            (cfgs / f"{name}.yaml").write_text(text)
    os.mkfifo(cfgs / "fifo.yaml")
    items["config"] = {p.stem: p for p in sorted(cfgs.iterdir())}
    # review import files
    rv = root / "review"
    rv.mkdir()
    (rv / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (rv / "cut.json").write_text('[{"id": 1, "data": {"image": "x"}, "annotations": [{"result": [{"from_name": ')
    (rv / "from-name-list.json").write_text('[{"id": 1, "data": {"gensets_key": "k"}, "annotations": [{"completed_by": 1,'
                                            ' "result": [{"from_name": ["decision"], "value": {"choices": ["accept"]}}]}]}]')
    (rv / "rows.csv").write_text("key,status,label,reviewer,note\n../../etc,accept,mug,a,\n=cmd(),reject,,a,\n")
    os.mkfifo(rv / "fifo.json")
    (rv / "link.csv").symlink_to(sentinel / "secret.txt")
    items["review"] = {p.name: p for p in sorted(rv.iterdir())}
    return {"root": root, "sentinel": sentinel, "items": items}


# (command name, the kind of item it reads, argv from (item, a fresh folder of its own))
COMMANDS = [
    ("finalize", "workspace", lambda p, t: ["finalize", p]),
    ("verify", "workspace", lambda p, t: ["verify", p]),
    ("review list", "workspace", lambda p, t: ["review", "list", p]),
    ("review accept", "workspace", lambda p, t: ["review", "accept", p, "nosuchkey"]),
    ("review agreement", "workspace", lambda p, t: ["review", "agreement", p]),
    ("review export", "workspace", lambda p, t: ["review", "export", p, "--format", "csv", "--file", t / "o.csv"]),
    ("card", "workspace", lambda p, t: ["card", p]),
    ("report failure-modes", "workspace", lambda p, t: ["report", "failure-modes", p, "--out", t / "r"]),
    ("report genbench", "workspace", lambda p, t: ["report", "genbench", p, "--clip", "tiny:clip", "--out", t / "r"]),
    ("verify", "dataset", lambda p, t: ["verify", p]),
    ("eval", "dataset", lambda p, t: ["eval", p, "--model", "tiny:resnet", "--db", t / "r.duckdb", "--quiet"]),
    ("score", "dataset", lambda p, t: ["score", p, "--metric", "clip_score", "--model", "clip_score=tiny:clip",
                                       "--db", t / "r.duckdb", "--quiet"]),
    ("publish --dry-run", "dataset", lambda p, t: ["publish", p, "--repo", f"file://{t / 'repo'}", "--dry-run"]),
    ("publish", "dataset", lambda p, t: ["publish", p, "--repo", f"file://{t / 'repo'}"]),
    ("query", "db", lambda p, t: ["query", "--db", p, "SELECT count(*) FROM runs"]),
    ("leaderboard", "db", lambda p, t: ["leaderboard", "--db", p]),
    ("report vqa", "db", lambda p, t: ["report", "vqa", "--db", p, "--out", t / "r"]),
    ("report recognition", "db", lambda p, t: ["report", "recognition", "--db", p, "--out", t / "r"]),
    ("report imagenet-d", "db", lambda p, t: ["report", "imagenet-d", "--db", p, "--out", t / "r"]),
    ("report quality", "db", lambda p, t: ["report", "quality", "--db", p, "--out", t / "r"]),
    ("review relabel", "workspace", lambda p, t: ["review", "relabel", p, "nosuchkey", "--to", "mug"]),
    ("review reject", "workspace", lambda p, t: ["review", "reject", p, "nosuchkey"]),
    ("review revoke", "workspace", lambda p, t: ["review", "revoke", p, "ann"]),
    ("reproduce --workspace", "workspace", lambda p, t: ["reproduce", "imagenet-d-table", "--smoke", "--workspace", p,
                                                         "--out", t / "r"]),
    ("review invite", "workspace", lambda p, t: ["review", "invite", p, "ann"]),
    ("publish-results --dry-run", "db", lambda p, t: ["publish-results", "--db", p, "--repo", "org/x", "--dry-run"]),
    ("build", "config", lambda p, t: ["build", p, "--out", t / "ws", "--quiet"]),
    ("review import", "review", None),  # on a copy of a good workspace: see below
]


def _cases():
    kinds = {"workspace": ["candidate-symlink-out", "state-garbage", "state-symlink-out", "config-cut",
                           "dataset-dir-symlink-out", "candidates-fifo"],
             "dataset": ["manifest-deep", "manifest-cut", "shard-fifo", "shard-dev-zero", "card-data-files-out",
                         "shard-symlink-out", "folder-symlink-out"],
             "db": ["empty", "fifo", "garbage", "zero"],
             "config": ["absurd-count", "binary", "control-chars", "deep", "fifo", "not-a-mapping"],
             "review": ["cut.json", "deep.json", "fifo.json", "from-name-list.json", "link.csv", "rows.csv"]}
    return [pytest.param(name, kind, item, id=f"{name}-{item}") for name, kind, _ in COMMANDS for item in kinds[kind]]


@pytest.mark.parametrize(("command", "kind", "item"), _cases())
def test_every_command_over_every_item(corpus, small, tmp_path, command, kind, item):
    argv_of = {(n, k): f for n, k, f in COMMANDS}[(command, kind)]
    path = corpus["items"][kind][item]
    if command == "review import":
        ws = _copy(small, tmp_path / "ws")
        fmt = "csv" if item.endswith(".csv") else "label-studio"
        argv = ["review", "import", ws, "--format", fmt, "--file", path]
    else:
        argv = argv_of(path, tmp_path)
    before = _snapshot(corpus["sentinel"])
    start = time.monotonic()
    r = run_cli(*argv, timeout=BOUND_S)
    took = time.monotonic() - start
    assert "Traceback" not in r.stderr, r.stderr
    if r.returncode != 0 and command == "verify":  # a checker: one line per problem, naming its file, a count
        assert r.returncode == 1 and r.stderr.strip().endswith("problem(s)"), r.stderr
        assert r.stdout.strip() and all(x.startswith(str(path)) for x in r.stdout.strip().splitlines()), r.stdout
    elif r.returncode != 0:
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("loading ", "waiting "))]
        errors = [x for x in lines if x.startswith("gensets: error:")]
        assert len(errors) == 1, r.stderr
        assert r.returncode in (1, 2, 3, 4), r.returncode
    assert _snapshot(corpus["sentinel"]) == before, "a file outside the target was created, changed or deleted"
    assert took < BOUND_S


@pytest.mark.parametrize("item", ["candidate-symlink-out", "state-garbage", "state-symlink-out", "config-cut",
                                  "dataset-dir-symlink-out", "candidates-fifo"])
def test_review_serve_over_every_hostile_workspace(corpus, item):
    """`gensets review serve` on each hostile workspace: refused in one line, or it serves its page (which then
    answers without a traceback) and stops on Ctrl-C; nothing outside the workspace is touched either way."""
    import re
    import signal
    import subprocess
    import sys
    import urllib.error
    import urllib.request

    path = corpus["items"]["workspace"][item]
    before = _snapshot(corpus["sentinel"])
    proc = subprocess.Popen([sys.executable, "-m", "gensets.cli", "review", "serve", str(path), "--port", "0"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # the page's address, or "" when it refused and ended
        m = re.search(r"review page: (http://[^/]+/\?token=[\w-]+)", first)  # the owner's link
        if m:
            try:
                opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # its cookie kept
                with opener.open(m.group(1), timeout=60) as page:
                    assert page.status == 200
            except urllib.error.HTTPError as e:  # refused by the page: its own short answer, not a crash
                assert e.code < 500 or b"Traceback" not in e.read()
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err
    if not m:
        errors = [x for x in err.splitlines() if x.startswith("gensets: error:")]
        assert len(errors) == 1 and proc.returncode in (1, 2, 3, 4), (proc.returncode, err)
    assert _snapshot(corpus["sentinel"]) == before, "a file outside the target was created, changed or deleted"
