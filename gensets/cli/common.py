"""What every command shares: argument types from the library, output (a table, markdown, CSV
or JSON; stdout or a file written whole), and how a command's end becomes an exit code and at most one line."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

from ..cards.markdown import table
from ..errors import GensetsError
from ..models.device import close_distributed, wait_for_peers
from ..output import write_file
from ..safety import csv_cell  # the guard against spreadsheet formulas (the review export's too)
from ..workspace import Workspace, refuse_own_file


def argument(check):
    """A library check of a value (returning it, or raising GensetsError) as an argparse type: its message is
    argparse's usage error (exit 2)."""
    def parse(text: str):
        try:
            return check(text)
        except GensetsError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = check.__name__
    return parse


def log(quiet: bool):
    """A library's progress lines: on stderr, or nowhere (``--quiet``, ``--json``)."""
    return (lambda line: None) if quiet else (lambda line: print(line, file=sys.stderr))


def number(name: str, v: float) -> str:
    """A metric as printed: a count (n_..., ..._n_...) as a whole number, a rate to 4 decimals."""
    count = name.startswith("n_") or "_n_" in name or name.endswith("_n")
    return str(int(v)) if count and float(v).is_integer() else f"{v:.4f}"


def print_rows(cols: list[str], rows: list, fmt: str, output: str | None = None, db: str | None = None) -> None:
    """The rows as a table, markdown, CSV or JSON: on stdout, or written whole to ``output`` (``--output``)."""
    def cell(v):
        return f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))

    out = io.StringIO()
    if fmt == "json":
        print(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str, indent=1), file=out)
    elif fmt == "csv":
        def safe(v):
            return csv_cell(v) if isinstance(v, str) else v

        w = csv.writer(out)
        w.writerow([safe(c) for c in cols])
        w.writerows([safe(v) for v in r] for r in rows)
    elif fmt == "markdown":
        print(table(cols, rows, lambda v: cell(v).replace("|", "\\|")), file=out)
    else:
        cells = [[cell(v) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)), file=out)
        for r in cells:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)), file=out)
    emit(out.getvalue(), output, db)


def emit(text: str, output: str | None, db: str | None = None) -> None:
    """``text`` on stdout (no ``--output``, or ``-``), else written to the file ``output``: whole or not at all
    (replaced atomically), never through a symlink, over the database being read or a workspace's own files."""
    if not output or output == "-":
        sys.stdout.write(text)
        return
    path = Path(output)
    if db and path.exists() and Path(db).exists() and path.resolve() == Path(db).resolve():
        raise GensetsError(f"{output}: --output is the database read (--db {db}); choose another file")
    if path.is_dir():
        raise GensetsError(f"{output}: --output is a folder; name a file")
    refuse_own_file(path, "--output")
    write_file(path, text, "--output")


def interrupted(a) -> str:
    """What an interrupted command kept, and how to go on (after "gensets: interrupted")."""
    if a.command == "build":
        try:
            with open(Workspace(a.out).manifest_path, "rb") as f:
                units = sum(1 for line in f if line.strip())
        except (OSError, GensetsError):
            units = 0
        return (f"; {units} unit{'s' * (units != 1)} committed in {a.out} are kept: run the same command to resume"
                " (a unit cut short is redone)")
    if a.command == "eval":
        return "; runs already written to the database are kept: run the same command to go on (finished runs are skipped)"
    if a.command == "finalize":
        return "; the previous dataset/ (if any) is unchanged: run it again"
    if a.command == "query":
        return "; the query was stopped (the database is opened read-only: nothing changed)"
    return ""


def run(args) -> int:
    """Run a parsed command: its exit code; a GensetsError or OSError as one line on stderr, Ctrl-C as what was
    kept, a reader gone away (``| head``) quietly."""
    if not (getattr(args, "quiet", False) or getattr(args, "json", False)):
        os.environ.setdefault("GENSETS_ANNOUNCE", "1")  # a line per model loaded, on a terminal
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, so that a reader gone away (| head) is a BrokenPipeError below
        wait_for_peers()  # every process of an accelerate launch ends together (a no-op in one process)
        return code
    except BrokenPipeError:  # the reader of stdout stopped reading: quietly, as a process killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush then writes nowhere
        return 141
    except GensetsError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"gensets: interrupted{interrupted(args)}", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return 1
    finally:
        close_distributed()
