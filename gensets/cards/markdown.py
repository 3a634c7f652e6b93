"""Markdown tables, for cards, reports and ``--format markdown``: one renderer everywhere."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cell: Callable[[Any], str] = str) -> str:
    """A GitHub-flavoured Markdown table; ``cell`` turns each value into its text (default ``str``)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)
