"""What every report is: a class registered with ``@REPORTS.register(kind)`` that owns its ``gensets report
KIND`` sub-command (its help, description and arguments) and runs it."""

from __future__ import annotations

import argparse
from typing import ClassVar

from ...errors import GensetsError
from ..runner import PRECISIONS


class Report:
    name: ClassVar[str] = ""  # the KIND it is registered under
    help: ClassVar[str] = ""  # one line, in `gensets report --help`
    description: ClassVar[str] = ""  # in `gensets report KIND --help`

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def run(self, args: argparse.Namespace) -> int:
        """Compute the report from the parsed arguments, write it, print where; the exit code."""
        raise NotImplementedError


def verdict(published: float | None, interval: list[float] | tuple[float, float] | None) -> str | None:
    """Where a published number lies against gensets' interval beside it: ``within`` (the closed interval) or
    ``outside``; None without a number or an interval."""
    if published is None or interval is None:
        return None
    return "within" if interval[0] <= published <= interval[1] else "outside"


def add_precision(parser: argparse.ArgumentParser, what: str) -> None:
    """``--precision``: the runs a report counts, by ``gensets eval --precision`` (fp32 by default), so a model
    scored in fp32 and under autocast is never counted twice."""
    parser.add_argument("--precision", default="fp32", choices=tuple(PRECISIONS),
                        help=f"{what}, by `gensets eval --precision` (default: fp32)")


def rows(con, sql: str, args: list) -> list[dict]:
    """The rows of a query as dicts (column -> value)."""
    cur = con.execute(sql, args)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def pick_run_set(con, db, dataset: str | None, protocol: str, revision: str | None) -> tuple[str, str | None]:
    """The (dataset, dataset revision) a report covers: ``dataset`` (default: the only one scored with
    ``protocol``) at ``revision`` (default: the one of the latest finished run). GensetsError when there is none."""
    datasets = [r[0] for r in con.execute(
        "SELECT DISTINCT dataset FROM runs WHERE protocol = ? ORDER BY 1", [protocol]).fetchall()]
    if dataset is None:
        if len(datasets) != 1:
            raise GensetsError(f"{db}: {len(datasets)} datasets scored with protocol {protocol!r}; "
                               f"name one with --dataset ({', '.join(datasets) or 'none'})")
        dataset = datasets[0]
    elif dataset not in datasets:
        raise GensetsError(f"{db}: no runs of dataset {dataset!r} with protocol {protocol!r}")
    revisions = [r[0] for r in con.execute(
        "SELECT dataset_revision FROM runs WHERE dataset = ? AND protocol = ? GROUP BY 1 "
        "ORDER BY max(finished) DESC, 1", [dataset, protocol]).fetchall()]
    if revision is None:
        revision = revisions[0]
    elif revision not in revisions:
        raise GensetsError(f"{db}: no runs of dataset {dataset!r} at revision {revision!r} with protocol "
                           f"{protocol!r} (revisions: {', '.join(map(str, revisions))})")
    return dataset, revision
