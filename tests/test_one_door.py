"""Issue 45, item 1: one door for writes. Every file gensets writes goes through gensets/output.py; no other module
opens a file for writing, calls write_text / write_bytes, shutil's copies and moves, os.replace / os.rename, or
os.open with a write flag, except the few named below with the reason. Read from the source with ``ast``."""

import ast
from pathlib import Path

import gensets

ROOT = Path(gensets.__file__).parent
DOOR = "gensets/output.py"

# (module, what it calls) -> why it may
ALLOWED = {
    ("gensets/curation/state.py", "shutil.copyfile"): "a snapshot of state.duckdb (and its WAL) into a private "
        "temporary folder for read-only queries; DuckDB's own files",
    ("gensets/publish.py", "shutil.copyfile"): "the publish target's own staged copy protocol (LocalTarget: each "
        "file into .tmp then renamed; checked inside the target by publish's containment) - a move is item 8's",
    ("gensets/publish.py", "os.replace"): "LocalTarget's rename of its staged file (as above)",
    ("gensets/publish.py", "write_text"): "the card rewritten for the repo, inside a private temporary folder",
    ("gensets/publish.py", "os.open"): "the LocalTarget's append-only log, O_NOFOLLOW",
    ("gensets/publish.py", "open"): "the LocalTarget's append-only log, on the descriptor above (os.fdopen)",
    ("gensets/stores/local.py", "os.open"): "the workspace lock file (fcntl), O_NOFOLLOW, checked regular",
    ("gensets/curation/shared.py", "os.open"): ".review-server.json, updated under fcntl, O_NOFOLLOW",
    ("gensets/shards/manifest.py", "os.open"): "manifest.jsonl, append-only (a row is one write), O_NOFOLLOW",
    ("gensets/store.py", "os.replace"): "an object store's file fetched into the local cache (temp + rename)",
    ("gensets/models/tiny/__init__.py", "write_text"): "tiny models built into a private temporary folder of the "
        "cache, renamed into place whole",
    ("gensets/models/tiny/__init__.py", "os.rename"): "that folder renamed into place",
    ("gensets/models/tiny/classifiers.py", "write_text"): "a tiny model's files, in that private folder",
    ("gensets/models/tiny/quality.py", "write_text"): "a tiny model's files, in that private folder",
    ("gensets/models/random/__init__.py", "write_text"): "a random-weight model's files, in a private folder as above",
    ("gensets/cli.py", "os.open"): "/dev/null over stdout once its reader went away (a broken pipe)",
    ("gensets/builders/faults.py", "write_text"): "the tests' fault hooks (GENSETS_TEST_*): injected only by a test",
    ("gensets/builders/faults.py", "write_bytes"): "the tests' fault hooks (GENSETS_TEST_*): injected only by a test",
    ("gensets/builders/faults.py", "open"): "the tests' fault hooks (GENSETS_TEST_*): injected only by a test",
}

SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj_to"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _name(node) -> str:
    """``a.b.c`` of a call's function (the last two parts), or its bare name."""
    if isinstance(node, ast.Attribute):
        base = node.value.id if isinstance(node.value, ast.Name) else ""
        return f"{base}.{node.attr}" if base else node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _mode(call: ast.Call, position: int) -> str | None:
    args = [*call.args[position:position + 1], *(k.value for k in call.keywords if k.arg == "mode")]
    for a in args:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            return a.value
        return "?"  # a mode that is not a literal: counted as a write
    return None


def writes(tree: ast.AST) -> list[tuple[str, int]]:
    """(what, line) of every write call in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, attr = _name(node.func), getattr(node.func, "attr", None)
        what = None
        if attr in ("write_text", "write_bytes"):
            what = attr
        elif name.startswith("shutil.") and name.split(".")[1] in SHUTIL_WRITES:
            what = name
        elif name in ("os.replace", "os.rename"):
            what = name
        elif name == "os.open" and any(isinstance(n, ast.Attribute) and n.attr in WRITE_FLAGS
                                       for a in node.args[1:2] for n in ast.walk(a)):
            what = name
        elif name in ("open", "os.fdopen") or attr == "open" and not name.startswith(("os.", "tarfile.", "Image.")):
            # open(path, mode), gzip.open(path, mode); path.open(mode)
            mode = _mode(node, 1 if name in ("open", "os.fdopen") or len(node.args) > 1 else 0)
            if mode is not None and set(mode) & set("wax+?"):
                what = "open"
        if what:
            found.append((what, node.lineno))
    return found


def test_no_module_but_the_door_writes_a_file():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel == DOOR:
            continue
        for what, line in writes(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, what) not in ALLOWED:
                bad.append(f"{rel}:{line}: {what}")
    assert not bad, "writes outside gensets/output.py (route them through it, or allow-list with a reason):\n" + \
        "\n".join(bad)


def test_the_allow_list_has_no_stale_entry():
    used = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        used |= {(rel, what) for what, _ in writes(ast.parse(path.read_text(encoding="utf-8")))}
    assert set(ALLOWED) <= used, f"allowed but no longer there: {sorted(set(ALLOWED) - used)}"


def test_the_checker_sees_each_kind_of_write():
    src = """
open(p, "w"); open(p, mode="ab"); p.open("x"); open(p, m)
p.write_text("x"); p.write_bytes(b"x")
shutil.copyfile(a, b); shutil.move(a, b); shutil.copytree(a, b)
os.replace(a, b); os.rename(a, b); os.open(p, os.O_WRONLY | os.O_CREAT)
open(p); open(p, "rb"); os.open(p, os.O_RDONLY); tarfile.open(p, "r"); gzip.open(f(), "rt"); p.open()
"""
    assert [w for w, _ in writes(ast.parse(src))] == [
        "open", "open", "open", "open", "write_text", "write_bytes", "shutil.copyfile", "shutil.move",
        "shutil.copytree", "os.replace", "os.rename", "os.open"]
