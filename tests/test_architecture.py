"""The house rules (ARCHITECTURE.md): the layers hold (import-linter), no package imports another's private
names, the packages import each other without cycles, and every extension point takes one new file."""

from __future__ import annotations

import ast
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
