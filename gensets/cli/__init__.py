"""The ``gensets`` command: parses arguments, calls the library, prints. Nothing else lives here.

One module per command group, each with ``add_parser(sub)`` registering its commands beside their handlers:
build (build, finalize, verify), audit, review (review ...), evaluate (eval, score), results (leaderboard, report,
query), publish (card, publish, publish-results), catalog (list), reproduce; common holds what they share."""

from __future__ import annotations

import argparse
import sys

from .. import __version__, notices
from ..errors import EXIT_CODES, GensetsError
from ..registry import load_plugins
from . import audit, build, catalog, evaluate, publish, reproduce, results, review
from .common import Parser, run

# the commands, in the order `gensets --help` lists them
GROUPS = (build.add_parser, audit.add_parser, review.add_parser, evaluate.add_parser, results.add_parser, publish.add_card,
          catalog.add_parser, publish.add_parser, reproduce.add_parser)


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="gensets", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Generate, curate, publish and evaluate benchmark datasets of generated images.",
        epilog="exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items()))
    p.add_argument("--version", action="version", version=f"gensets {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in GROUPS:
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    notices.to_stderr()  # the library's notices (gensets.notices), each its bare line on stderr
    try:
        load_plugins()  # installed packages' builders, model families, storage schemes, reports (gensets.plugins)
    except GensetsError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return e.exit_code
    return run(parser().parse_args(argv))
