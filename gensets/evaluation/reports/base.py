"""What every report is: a class registered with ``@REPORTS.register(kind)`` that owns its ``gensets report
KIND`` sub-command (its help, description and arguments) and runs it."""

from __future__ import annotations

import argparse
from typing import ClassVar


class Report:
    name: ClassVar[str] = ""  # the KIND it is registered under
    help: ClassVar[str] = ""  # one line, in `gensets report --help`
    description: ClassVar[str] = ""  # in `gensets report KIND --help`

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        raise NotImplementedError

    def run(self, args: argparse.Namespace) -> int:
        """Compute the report from the parsed arguments, write it, print where; the exit code."""
        raise NotImplementedError
