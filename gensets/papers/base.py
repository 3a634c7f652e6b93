"""What a paper folder declares: :class:`Paper`, registered in :data:`gensets.registry.PAPERS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .tables import Table


def no_published() -> list[dict]:
    return []


@dataclass(frozen=True)
class Paper:
    """One paper gensets builds and reproduces, declared in its folder (``gensets/papers/<paper>/paper.py``) and
    registered as a ``"module:attr"`` target in :data:`~gensets.registry.PAPERS`.

    ``modules``: the modules that register its builders, reports and prompt strategies (imported when a registry
    of them is first asked); ``tables``: its ``gensets reproduce`` tables; ``published``: its published numbers
    as ``gensets list tables`` rows ({"name", "description"})."""

    name: str
    title: str
    modules: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()
    published: Callable[[], list[dict]] = no_published
