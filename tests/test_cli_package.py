"""Issue 45, item 4: the CLI is a package of small modules, one per command group, each registering its commands
beside their handlers; gensets' own imports at the top of each (none hidden in a function unless marked
``# lazy: <reason>``); importing it drags in no heavy library, and ``python -m gensets.cli`` is the command."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

from gensets.cli.groups import GROUPS

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "gensets" / "cli"
HEAVY = ("torch", "transformers", "duckdb", "ray", "matplotlib", "scipy", "sklearn", "datasets", "timm")


def test_no_cli_module_is_over_300_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in CLI.glob("*.py")}
    assert sizes and all(n <= 300 for n in sizes.values()), sizes


def test_every_command_is_handled_in_the_cli_module_that_registers_it():
    """Each command's handler is a function of gensets.cli (never of the library), and the commands keep their
    order in --help."""
    from gensets.cli import parser

    def commands(p, prefix=()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sp in action.choices.items():
                    yield (*prefix, name), sp
                    yield from commands(sp, (*prefix, name))

    found = dict(commands(parser()))
    assert [c[0] for c in found if len(c) == 1] == [
        "build", "finalize", "verify", "audit", "review", "eval", "score", "leaderboard", "report", "query", "card", "list",
        "publish", "publish-results", "reproduce"]
    for command, sp in found.items():
        func = sp.get_default("func")
        if func is not None:
            assert func.__module__.startswith("gensets.cli."), (command, func.__module__)


def test_python_m_gensets_cli_is_the_command():
    r = subprocess.run([sys.executable, "-m", "gensets.cli", "--version"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    from gensets import __version__

    assert r.returncode == 0 and r.stdout.strip() == f"gensets {__version__}"
    r = subprocess.run([sys.executable, "-m", "gensets.cli", "bulid"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "did you mean 'build'" in r.stderr and "Traceback" not in r.stderr


def test_the_command_list_read_from_the_source_is_the_parsers():
    """``gensets --help`` lists the commands from the names and helps read in the group modules' source
    (gensets.cli.groups), never importing them: every group is readable that way (none falls back to an
    import), and what is read is exactly what the groups declare when imported."""
    from gensets.cli import groups as reading
    from gensets.cli import parser

    for module, function in reading.GROUPS:
        found = reading.read((CLI / f"{module}.py").read_text(), function)
        assert found, f"gensets/cli/{module}.py: {function}'s commands are not all `sub.add_parser(\"NAME\", help=\"...\")`"
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert [(c.name, c.help) for c in reading.commands()] == [(a.dest, a.help) for a in sub._choices_actions]


def test_reading_the_source_refuses_what_it_cannot_see():
    """The reader is no guess: a computed name or help, or ``sub`` handed on, makes it ask the module instead."""
    from gensets.cli.groups import read

    plain = 'def add_parser(sub):\n    b = sub.add_parser("a", help="x" "y")\n    sub.add_parser("b", help="z")\n'
    assert read(plain, "add_parser") == [("a", "xy"), ("b", "z")]
    for body in ('sub.add_parser(NAME, help="x")', 'sub.add_parser("a", help=f"{x}")', '_more(sub)',
                 'sub.add_parser("a")', 'for n in N:\n        sub.add_parser(n, help="x")'):
        assert read(f"def add_parser(sub):\n    {body}\n", "add_parser") is None, body
    assert read(plain, "add_card") is None


_LOADED = """
import json, sys
from gensets.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("gensets."))), file=sys.stderr)
"""


def _loaded(*args: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def test_help_imports_no_command_group_and_a_command_only_its_own():
    """``gensets --help`` (and a mistyped command) imports none of the group modules, nor the library behind
    them; ``gensets build --help`` imports the build group alone."""
    modules = {f"gensets.cli.{p.stem}" for p in CLI.glob("*.py")} - {"gensets.cli.__init__", "gensets.cli.__main__",
                                                                    "gensets.cli.groups"}
    groups = {f"gensets.cli.{m}" for m, _ in GROUPS}  # the modules that declare commands (common, options: shared)
    assert groups < modules
    for args in (["--help"], ["bulid"], ["--version"]):
        loaded = _loaded(*args)
        assert not loaded & (modules | {"gensets.workspace", "gensets.config"}), (args, loaded)
    loaded = _loaded("build", "--help")
    assert loaded & groups == {"gensets.cli.build"}, loaded & groups
