"""Markdown tables, for cards, reports and ``--format markdown``: one renderer everywhere."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any


def text(value: Any) -> str:
    """Text from a config or data (a class name, a source, a template) as Markdown text: one line, HTML shown as
    text, no table-cell break, no link. Plain names (letters, digits, spaces, _ - . , ' { }) come out unchanged."""
    s = html.escape(" ".join(str(value).split()), quote=False)
    return s.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


def code(value: Any, in_table: bool = False) -> str:
    """Text from a config or data as an inline code span: one line, a backtick in it cannot end the span (it
    becomes '), and in a table cell a pipe is escaped (GFM reads it as ``|`` there)."""
    s = "`" + " ".join(str(value).split()).replace("`", "'") + "`"
    return s.replace("|", "\\|") if in_table else s


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cell: Callable[[Any], str] = str) -> str:
    """A GitHub-flavoured Markdown table; ``cell`` turns each value into its text (default ``str``)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)
