"""The paper folders import honestly: gensets' own imports at module top (a function-local one only with a
``# lazy: <reason>`` comment), and no import circle among a folder's modules (a lazy import hides none)."""

from __future__ import annotations

import ast
from pathlib import Path

PAPERS = Path(__file__).resolve().parents[1] / "gensets" / "papers"


def _module(path: Path) -> str:
    parts = path.relative_to(PAPERS.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(path: Path):
    """(line, imported gensets module or module.name, inside a function) of every gensets import of ``path``."""
    mod, is_pkg = _module(path), path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom):
                target = _target(mod, child, is_pkg)
                if target == "gensets" or target.startswith("gensets."):
                    out.extend((child.lineno, f"{target}.{a.name}", in_function) for a in child.names)
            elif isinstance(child, ast.Import):
                out.extend((child.lineno, a.name, in_function) for a in child.names if a.name.startswith("gensets"))
            walk(child, inner)

    walk(tree, False)
    return out


def test_no_function_local_gensets_import_without_a_reason():
    bad = []
    for path in sorted(PAPERS.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        bad += [f"{path.relative_to(PAPERS)}:{n}: {lines[n - 1].strip()}" for n, _, local in _imports(path)
                if local and "# lazy:" not in lines[n - 1]]
    assert not bad, "gensets imports inside functions (hoist them, or say why with '# lazy: <reason>'):\n" + \
        "\n".join(bad)


def test_no_import_circle_in_the_paper_folders():
    modules = {_module(p): p for p in PAPERS.rglob("*.py")}
    graph = {}
    for mod, path in modules.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        targets = set()
        for n, name, local in _imports(path):
            if not local or "# lazy:" not in lines[n - 1]:  # a module, or a name in one: the module it names
                targets.add(name if name in modules else name.rsplit(".", 1)[0])
        graph[mod] = {t for t in targets if t in modules and t != mod}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
