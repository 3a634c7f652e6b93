"""The house rules (ARCHITECTURE.md): the layers hold (import-linter), no package imports another's private
names, the packages import each other without cycles, and every extension point takes one new file."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gensets"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": str(exe.parent), "PYTHONPATH": str(root)})


def test_the_layers_hold():
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Contracts: 1 kept, 0 broken." in r.stdout


def test_an_evaluation_to_builders_import_breaks_the_layers(tmp_path):
    """The contract is not vacuous: the same check on a copy with one evaluation -> builders import fails."""
    shutil.copytree(PACKAGE, tmp_path / "gensets", ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    runner = tmp_path / "gensets" / "evaluation" / "runner.py"
    runner.write_text(runner.read_text() + "\n\ndef _reintroduced():\n    from ..builders import base  # noqa\n")
    r = lint_imports(tmp_path)
    assert r.returncode != 0
    assert "gensets layers BROKEN" in r.stdout and "gensets.evaluation.runner -> gensets.builders.base" in r.stdout


def _imports(path: Path):
    """(importing module, imported module, names) of every ``from X import names`` in a module of gensets."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("gensets"):
                yield module, target, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gensets"):
                    yield module, a.name, []


def _package(module: str) -> str:
    """The top-level part of gensets a module belongs to: gensets.papers.genbench.card -> gensets.papers."""
    return ".".join(module.split(".")[:2])


def _all_imports():
    return [imp for path in sorted(PACKAGE.rglob("*.py")) for imp in _imports(path)]


def test_no_module_imports_a_private_name_of_another_package():
    bad = [f"{src} imports {name} from {dst}" for src, dst, names in _all_imports() for name in names
           if name.startswith("_") and not name.startswith("__") and _package(src) != _package(dst)]
    assert not bad, "\n".join(bad)


def test_packages_import_each_other_without_cycles():
    edges: dict[str, set[str]] = {}
    for src, dst, _ in _all_imports():
        a, b = _package(src), _package(dst)
        if a != b and b != "gensets":
            edges.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


# the engine: what every paper runs on, which never names one (a paper's knowledge lives in gensets/papers/<paper>/,
# behind the registries the engine asks: PAPERS, BUILDERS, REPORTS, IDENTIFIERS, RELEASED_DATASETS, LABEL_SPACES)
ENGINE = ("builders", "evaluation", "registry.py", "reproduce.py", "catalog.py", "workspace.py", "store.py", "stores",
          "shards")
PAPER_NAME = re.compile(r"imagenet[_-]d|genbench|borji|wiles", re.I)
# user-facing text that may name a paper, each with its reason: (module, the string's start)
NAMES_A_PAPER = {
    ("gensets/evaluation/runner.py", "top-1 with the logits restricted"): "a metric's description, for the reader",
    ("gensets/evaluation/protocols/two_way.py", " needs --clip SPEC"): "an error's hint: which dataset gives the option",
}


def _names_in_code(path: Path):
    """(line, text) of every name, attribute, imported module and string constant (docstrings excepted) of a module."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
                  and isinstance(node.body[0].value.value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield from ((node.lineno, f"{node.module or ''} {a.name}") for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def _paper_names(root: Path) -> list[str]:
    files = [f for part in ENGINE for f in ([root / "gensets" / part] if part.endswith(".py")
                                            else sorted((root / "gensets" / part).rglob("*.py")))]
    found = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        for line, text in _names_in_code(f):
            if PAPER_NAME.search(text) and not any(rel == m and text.startswith(s) for m, s in NAMES_A_PAPER):
                found.append(f"{rel}:{line}: {text[:100]!r}")
    return found


def test_the_engine_names_no_paper():
    """No module of the engine names a paper in its code (names, attributes, imports, strings that are not
    docstrings): a paper's facts are registered by its folder (the released dataset it reads, its label space's
    class map and prompt, its shipped files) and the engine asks the registries."""
    assert _paper_names(ROOT) == []


def test_a_paper_named_in_the_engine_is_found(tmp_path):
    """The check is not vacuous: a copy of the engine where a protocol compares with a paper's builder fails it."""
    shutil.copytree(PACKAGE, tmp_path / "gensets", ignore=shutil.ignore_patterns("__pycache__", "data"))
    zero_shot = tmp_path / "gensets" / "evaluation" / "protocols" / "zero_shot.py"
    zero_shot.write_text(zero_shot.read_text() + '\n\ndef _reintroduced(split):\n    return split.builder == "imagenet-d"\n')
    assert _paper_names(tmp_path) == ["gensets/evaluation/protocols/zero_shot.py:"
                                      f"{len(zero_shot.read_text().splitlines())}: 'imagenet-d'"]
