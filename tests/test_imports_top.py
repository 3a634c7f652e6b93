"""Honest imports (ARCHITECTURE.md): gensets' own imports stand at the top of each module, where a reader sees
what a module needs and an import circle cannot hide; a function-local one is allowed only with a
`# lazy: <reason>` on its line. The modules import each other without a circle, each one imports on its
own in any order, and `import gensets.cli` loads none of the heavy libraries (those stay inside functions)."""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gensets"
LAZY = re.compile(r"#\s*lazy:(.*)$")

# imported only inside functions, so that `gensets --help`, config validation and most tests start fast
HEAVY = ("torch", "torchvision", "timm", "open_clip", "transformers", "diffusers", "accelerate", "datasets",
         "huggingface_hub", "ray", "duckdb", "matplotlib", "sklearn", "scipy", "boto3", "botocore", "fsspec",
         "s3fs", "gcsfs", "webdataset", "pyarrow", "pandas", "torch_fidelity", "playwright")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def modules() -> dict[str, Path]:
    """Every module of gensets, by dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from X import ...`` names as X."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path):
    """(node, in a function) for every import statement of a module, but those under `if TYPE_CHECKING:`."""
    def walk(node: ast.AST, local: bool):
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):  # only its `else:` runs
                yield from walk(ast.Module(body=child.orelse, type_ignores=[]), local)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, local
            yield from walk(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    yield from walk(ast.parse(path.read_text(encoding="utf-8")), False)


def targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The gensets modules an import statement runs: ``from X import y`` names X.y when that is a module,
    else X; ``import X.y`` names X.y."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "gensets" or a.name.startswith("gensets.")]
    base = _resolve(module, path, node)
    if base != "gensets" and not base.startswith("gensets."):
        return []
    return sorted({f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names})


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def local_imports(paths: dict[str, Path] | None = None):
    """(offences, allowed): a function-local import of a gensets module is an offence unless its line carries
    `# lazy: <reason>` (allowed: "file:line import  -- reason"); an empty reason is an offence too."""
    paths = modules() if paths is None else paths
    known = set(modules())
    offences, allowed = [], []
    for module, path in paths.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node, local in _imports(path):
            text = lines[node.lineno - 1]
            where = f"{_shown(path)}:{node.lineno} {LAZY.sub('', text).strip()}"
            found = [LAZY.search(line) for line in lines[node.lineno - 1: node.end_lineno]]
            reason = next((m.group(1).strip() for m in found if m), None)
            if reason is not None and not reason:
                offences.append(f"{where}  (a `# lazy:` needs a reason)")
            elif local and targets(module, path, node, known):
                if reason is None:
                    offences.append(where)
                else:
                    allowed.append(f"{where}  -- {reason}")
    return offences, allowed


def graph(paths: dict[str, Path] | None = None, lazy: bool = False) -> dict[str, set[str]]:
    """The modules each module imports as it is imported (its top-level imports, `if TYPE_CHECKING:` left out);
    with ``lazy``, also those its functions import (the `# lazy:` ones)."""
    every = modules()
    paths = every if paths is None else paths
    known = set(every)
    edges: dict[str, set[str]] = {}
    for module, path in paths.items():
        edges[module] = set()
        for node, local in _imports(path):
            if lazy or not local:
                edges[module].update(targets(module, path, node, known))
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected part of the import graph (Tarjan), each as a closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    parts: list[list[str]] = []

    def connect(v: str):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in edges.get(v, ()):
                parts.append(sorted(part))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            connect(v)
    return [_circle(part, edges) for part in sorted(parts)]


def _circle(part: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest closed path through the first module of a strongly connected part."""
    start, inside = part[0], set(part)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, ())):
            if w == start:
                return [*paths[v], start]
            if w in inside and w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return part


def test_no_function_local_import_of_gensets_without_a_reason():
    offences, allowed = local_imports()
    print("function-local gensets imports allowed (`# lazy: <reason>`):\n  " + "\n  ".join(allowed or ["none"]))
    assert not offences, ("gensets' own imports go at module top (open a circle by moving the shared names down); "
                          "a truly lazy one says why with `# lazy: <reason>` on its line:\n  " + "\n  ".join(offences))


def test_the_checker_sees_local_imports_and_empty_reasons(tmp_path):
    """The check is not vacuous: it names a bare function-local import and an empty `# lazy:`, and accepts one
    with a reason, a top-level one, and one under `if TYPE_CHECKING:` (which the graph leaves out, not its `else:`)."""
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nfrom . import errors\nif TYPE_CHECKING:\n"
                     "    from . import config\nelse:\n    from . import cache\ndef f():\n    from . import records\n"
                     "    from .errors import DataError  # lazy:\n    from gensets import images  # lazy: a plugin's path\n"
                     "    import json\n")
    offences, allowed = local_imports({"gensets.probe": probe})
    edges = graph({"gensets.probe": probe})
    assert [o.split(" ", 1)[0] for o in offences] == ["probe.py:8", "probe.py:9"]
    assert "needs a reason" in offences[1]
    assert len(allowed) == 1 and allowed[0].endswith("-- a plugin's path")
    assert edges == {"gensets.probe": {"gensets.errors", "gensets.cache"}}


@pytest.mark.parametrize("lazy", [False, True], ids=["top-level", "with-lazy"])
def test_no_import_circle(lazy):
    """None among the imports that run as a module is imported, nor behind a `# lazy:` one (a circle hidden in a
    function is still a circle)."""
    found = cycles(graph(lazy=lazy))
    assert not found, "import circles (open one by moving the shared names down into a lower module):\n  " + \
        "\n  ".join(" -> ".join(c) for c in found)


def test_cycles_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    edges = graph()  # the results database importing the scores back: the circle this rule opened
    edges["gensets.evaluation.store"].add("gensets.evaluation.scoring")
    assert ["gensets.evaluation.scoring", "gensets.evaluation.store", "gensets.evaluation.scoring"] in cycles(edges)


_IMPORT_ALL = """
import importlib, json, sys
order = json.loads(sys.argv[1])
for name in order:
    importlib.import_module(name)
print(json.dumps([h for h in json.loads(sys.argv[2]) if h in sys.modules]))
"""


def _import_in_fresh_process(order: list[str]) -> list[str]:
    r = subprocess.run([sys.executable, "-c", _IMPORT_ALL, json.dumps(order), json.dumps(HEAVY)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"importing {order} in this order failed:\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_module_imports_on_its_own_in_any_order():
    """One fresh interpreter per top-level part of gensets (a package, or the bottom modules together), its
    modules imported in a shuffled order: each imports whatever it needs itself, and none loads a heavy library."""
    groups: dict[str, list[str]] = {}
    for name in modules():
        if name.endswith(".__main__"):
            continue  # a script (python -m): importing it runs the command
        parts = name.split(".")
        top = parts[1] if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir() else "(modules)"
        groups.setdefault(top, []).append(name)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    heavy = {}
    for top, names in sorted(groups.items()):
        rng.shuffle(names)
        loaded = _import_in_fresh_process(names)
        if loaded:
            heavy[top] = (loaded, names)
    assert not heavy, f"(seed {seed}) imports that load heavy libraries: {heavy}"


_BEFORE_A_BUILD = """
import json, sys
from gensets.cli import common, parser  # common: run(), every command's
from gensets.workspace import load_build_config
for command in ("build", "verify", "reproduce"):  # the groups of the commands that build
    parser([command])
for config in json.loads(sys.argv[1]):  # the builders registry, discovered as a build finds its builder
    load_build_config(config)
print(json.dumps([h for h in json.loads(sys.argv[2]) if h in sys.modules]))
"""


def test_the_cli_loads_no_heavy_library_nor_numpy():
    """Nor numpy: ``reproducible: strict`` pins numpy's CPU kernels (NPY_DISABLE_CPU_FEATURES) as a build starts,
    which only works before numpy is first loaded; a command module importing numpy at its top made every strict
    build of the ``gensets`` command refuse to start. What a command that builds has loaded when its build pins:
    gensets.cli, the command's group module (``gensets build``, ``verify --rebuild``: build; ``reproduce``),
    common (every group's), and the builders registry with every module it discovers (all of gensets.builders,
    finalize included, and the papers' builders) as the config's builder is looked up."""
    configs = [str(ROOT / "configs" / c) for c in ("imagenet_d.smoke.yaml", "genbench.smoke.yaml",
                                                   "recognition.smoke.yaml", "vqa.smoke.yaml",
                                                   "failure_modes.smoke.yaml")]
    r = subprocess.run([sys.executable, "-c", _BEFORE_A_BUILD, json.dumps(configs), json.dumps([*HEAVY, "numpy"])],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
