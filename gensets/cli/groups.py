"""Which commands there are, and which group module declares each, read from the group modules' source without
importing them: so that ``gensets --help`` and the choice of a command import no group, and a command's run imports
its own group alone.

A command is declared once, where it is handled: ``sub.add_parser("NAME", help="...")`` inside its group's
``add_parser(sub)`` (or another function listed in :data:`GROUPS`). This module finds those calls in the
function's syntax tree. A function whose commands cannot all be read that way (a name or help that is not a
literal string, ``sub`` handed to another function) is imported and asked instead: slower, never wrong
(``tests/test_cli_package.py`` holds every group readable)."""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# the functions that declare the commands, as (module of gensets.cli, function), in the order `gensets --help`
# lists their commands; a new group module adds its line here
GROUPS = (("build", "add_parser"), ("audit", "add_parser"), ("review", "add_parser"), ("evaluate", "add_parser"), ("results", "add_parser"),
          ("publish", "add_card"), ("catalog", "add_parser"), ("publish", "add_parser"), ("reproduce", "add_parser"))


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    module: str  # the group module of gensets.cli that declares and handles it
    function: str  # the function of that module that declares it


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def read(source: str, function: str) -> list[tuple[str, str]] | None:
    """(name, help) of each ``SUB.add_parser("NAME", help="...")`` call in ``function`` of ``source`` (SUB its
    first parameter), in order; None when that is not all the function does with SUB."""
    tree = ast.parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if fn is None or not fn.args.args:
        return None
    sub = fn.args.args[0].arg
    found, calls = [], set()
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == sub):
            kw = {k.arg: k.value for k in node.keywords}
            name, text = _literal(node.args[0]) if node.args else None, _literal(kw.get("help"))
            if name is None or text is None or len(node.args) > 1 or "aliases" in kw or None in kw:
                return None
            found.append((node.lineno, node.col_offset, name, text))
            calls.add(id(node.func.value))
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == sub and id(n) not in calls]
    return None if uses else [(name, text) for *_, name, text in sorted(found)]


def _imported(module: str, function: str) -> list[tuple[str, str]]:
    """(name, help) of the commands ``function`` declares, by importing its module and calling it."""
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    getattr(importlib.import_module(f"{__package__}.{module}"), function)(sub)
    return [(a.dest, a.help or "") for a in sub._choices_actions]


@cache
def commands() -> tuple[Command, ...]:
    """Every command, in the order ``gensets --help`` lists them."""
    here = Path(__file__).parent
    out = []
    for module, function in GROUPS:
        try:
            found = read((here / f"{module}.py").read_text(encoding="utf-8"), function)
        except (OSError, SyntaxError, UnicodeDecodeError):  # no source beside it (a zipped install): ask it
            found = None
        for name, text in found if found is not None else _imported(module, function):
            out.append(Command(name, text, module, function))
    return tuple(out)
