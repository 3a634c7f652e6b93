"""Issue 45, item 4: the CLI is a package of small modules, one per command group, each registering its commands
beside their handlers; gensets' own imports at the top of each (none hidden in a function unless marked
``# lazy: <reason>``); importing it drags in no heavy library, and ``python -m gensets.cli`` is the command."""

import argparse
import subprocess
import sys
from pathlib import Path

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
