"""The ``gensets`` command: parses arguments, calls the library, prints. Nothing else lives here.

One module per command group, each with ``add_parser(sub)`` registering its commands beside their handlers:
build (build, finalize, verify), audit, review (review ...), evaluate (eval, score), results (leaderboard, report,
query), publish (card, publish, publish-results), catalog (list), reproduce; common holds what they share.

Only the group of the command being run is imported: ``gensets --help`` lists every command from the names and
helps that :mod:`gensets.cli.groups` reads in the group modules' source, and ``gensets COMMAND ...`` imports
COMMAND's group alone and lets it declare its arguments (the others stay a name and a help line)."""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from .. import __version__, notices
from ..errors import EXIT_CODES, GensetsError, did_you_mean
from ..registry import load_plugins
from .groups import commands


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose invalid-choice error also says "did you mean" (sub-commands' parsers are of the
    same class: ``add_subparsers`` makes them with ``type(self)``)."""

    def error(self, message):
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:
            message += did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        super().error(message)


def named(argv: list[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (gensets' own options take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of ``gensets``: every command listed; the group of the command ``argv`` names declared in full
    (imported), or every group when ``argv`` is None."""
    p = Parser(
        prog="gensets", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Generate, curate, publish and evaluate benchmark datasets of generated images.",
        epilog="exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items()))
    p.add_argument("--version", action="version", version=f"gensets {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    every = commands()
    command = None if argv is None else named(argv)
    full = {(c.module, c.function) for c in every if argv is None or c.name == command}
    done = set()
    for c in every:
        group = (c.module, c.function)
        if group not in full:
            sub.add_parser(c.name, help=c.help)  # listed only: its group is not imported
        elif group not in done:
            done.add(group)
            getattr(importlib.import_module(f"{__name__}.{c.module}"), c.function)(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    notices.to_stderr()  # the library's notices (gensets.notices), each its bare line on stderr
    if named(argv) in {c.name for c in commands()}:  # plugins' packages load for a command, not for --help
        try:
            load_plugins()  # installed packages' builders, model families, storage schemes, reports (gensets.plugins)
        except GensetsError as e:
            print(f"gensets: error: {e}", file=sys.stderr)
            return e.exit_code
    args = parser(argv).parse_args(argv)
    from .common import run  # lazy: the commands' shared imports, not --help's

    return run(args)
