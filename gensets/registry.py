"""Registries of every extension point: builders, prompt strategies, evaluation protocols, reports, tiny
and random models, image-quality metrics. Entries register themselves where they are defined, with a decorator (the way timm's
``@register_model`` does), e.g.::

    @BUILDERS.register("imagenet-d")
    class ImageNetDBuilder(Builder): ...

A registry imports the modules that define its entries the first time it is asked for one (``packages``:
every module of those packages; ``also``: the modules a function names, asked again each time, e.g. every
registered paper's :attr:`~gensets.papers.base.Paper.modules`), so ``gensets --help`` stays fast and a new entry
is one new file with one decorator; an entry registered anywhere else (a plugin, a test file) is found as soon as
its module is imported. An entry may also be a ``"module:attr"`` target, imported when first asked for:
:data:`PAPERS` holds the papers so (gensets/papers/__init__.py lists gensets' own, the entry-point group
``gensets.papers`` an installed package's).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterator
from typing import Any


class _Target(str):
    """A ``"module:attr"`` entry not imported yet."""


class Registry:
    def __init__(self, kind: str, *packages: str, walk: bool = True,
                 also: Callable[[], list[str]] | None = None):
        self.kind = kind
        self._packages = packages
        self._walk = walk  # every module of the packages, else the packages alone
        self._also = also
        self._entries: dict[str, Any] = {}
        self._discovered = not packages

    def register(self, name: str, obj: Any = None) -> Callable[[Any], Any] | Any:
        """``@REG.register("name")`` above a class or function, ``REG.register("name", obj)``, or
        ``REG.register("name", "module:attr")``: the target, imported when the entry is first asked for."""

        def add(o: Any) -> Any:
            if isinstance(o, str):
                o = _Target(o)
            if name in self._entries and self._entries[name] is not o and self._entries[name] != o:
                raise KeyError(f"{self.kind} '{name}' is registered twice")
            if isinstance(o, type) and not vars(o).get("name"):
                o.name = name  # a registered class knows its name, a subclass of one too (builders, protocols, strategies, reports)
            self._entries[name] = o
            return o

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def _discover(self) -> None:
        if not self._discovered:
            self._discovered = True
            for package in self._packages:
                mod = importlib.import_module(package)
                for info in pkgutil.walk_packages(getattr(mod, "__path__", ()) if self._walk else (),
                                                  prefix=f"{package}."):
                    importlib.import_module(info.name)
        for module in self._also() if self._also else ():  # asked each time: a paper registered since
            if module not in sys.modules:
                importlib.import_module(module)

    def _resolve(self, name: str) -> Any:
        o = self._entries[name]
        if isinstance(o, _Target):
            module, _, attr = o.partition(":")
            self._entries[name] = o = getattr(importlib.import_module(module), attr)
            if isinstance(o, type) and not vars(o).get("name"):
                o.name = name
        return o

    def get(self, name: str) -> Any:
        self._discover()
        if name not in self._entries:
            raise KeyError(f"unknown {self.kind} '{name}' (known: {', '.join(self)})")
        return self._resolve(name)

    def names(self) -> list[str]:
        """Every registered name, in registration order (for strategies: the paper's table order)."""
        self._discover()
        return list(self._entries)

    def items(self) -> list[tuple[str, Any]]:
        self._discover()
        return [(n, self._resolve(n)) for n in list(self._entries)]

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.names()))


# the papers (gensets.papers.base.Paper): gensets/papers/__init__.py registers each as a "module:attr" target
PAPERS = Registry("paper", "gensets.papers", walk=False)


def paper_modules() -> list[str]:
    """The modules every registered paper names (its builders, reports, prompt strategies)."""
    return [m for _, paper in PAPERS.items() for m in paper.modules]


BUILDERS = Registry("builder", "gensets.builders", also=paper_modules)
STRATEGIES = Registry("prompt strategy", also=paper_modules)
PROTOCOLS = Registry("protocol", "gensets.evaluation.protocols")
REPORTS = Registry("report", "gensets.evaluation.reports", also=paper_modules)
# split -> the builder whose dataset it is (or None), for a split whose samples name none (the evaluation runner)
IDENTIFIERS = Registry("dataset identifier", also=paper_modules)
TINY_MODELS = Registry("tiny model", "gensets.models.tiny")
RANDOM_MODELS = Registry("random model", "gensets.models.random")
QUALITY_METRICS = Registry("quality metric", "gensets.quality")
