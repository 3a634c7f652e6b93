"""Class names as prompts and label lists read them."""

from __future__ import annotations

from collections.abc import Sequence


def readable(name: str) -> str:
    """A class name as a prompt reads it: 'binder_(closed)' -> 'binder (closed)'."""
    return name.replace("_", " ").strip()


def same_names(a: Sequence[str], b: Sequence[str]) -> bool:
    """The same class names in the same order, read as prompts and case-folded."""
    return [readable(n).lower() for n in a] == [readable(n).lower() for n in b]
