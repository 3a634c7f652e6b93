"""Registries of every extension point: builders, prompt strategies, evaluation protocols, reports, tiny
and random models, image-quality metrics. Entries register themselves where they are defined, with a decorator (the way timm's
``@register_model`` does), e.g.::

    @BUILDERS.register("imagenet-d")
    class ImageNetDBuilder(Builder): ...

A registry imports the modules that define its entries the first time it is asked for one (``packages``:
every module of those packages), so ``gensets --help`` stays fast and a new entry is one new file with one
decorator; an entry registered anywhere else (a plugin, a test file) is found as soon as its module is
imported.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any


class Registry:
    def __init__(self, kind: str, *packages: str):
        self.kind = kind
        self._packages = packages
        self._entries: dict[str, Any] = {}
        self._discovered = not packages

    def register(self, name: str, obj: Any = None) -> Callable[[Any], Any] | Any:
        """``@REG.register("name")`` above a class or function, or ``REG.register("name", obj)``."""

        def add(o: Any) -> Any:
            if name in self._entries and self._entries[name] is not o:
                raise KeyError(f"{self.kind} '{name}' is registered twice")
            if isinstance(o, type) and not vars(o).get("name"):
                o.name = name  # a registered class knows its name, a subclass of one too (builders, protocols, strategies, reports)
            self._entries[name] = o
            return o

        return add if obj is None else add(obj)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        for package in self._packages:
            mod = importlib.import_module(package)
            for info in pkgutil.walk_packages(getattr(mod, "__path__", ()), prefix=f"{package}."):
                importlib.import_module(info.name)

    def get(self, name: str) -> Any:
        self._discover()
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"unknown {self.kind} '{name}' (known: {', '.join(self)})") from None

    def names(self) -> list[str]:
        """Every registered name, in registration order (for strategies: the paper's table order)."""
        self._discover()
        return list(self._entries)

    def items(self) -> list[tuple[str, Any]]:
        self._discover()
        return list(self._entries.items())

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.names()))


BUILDERS = Registry("builder", "gensets.builders", "gensets.papers")
STRATEGIES = Registry("prompt strategy", "gensets.papers.genbench")
PROTOCOLS = Registry("protocol", "gensets.evaluation.protocols")
REPORTS = Registry("report", "gensets.evaluation.reports", "gensets.papers")
TINY_MODELS = Registry("tiny model", "gensets.models.tiny")
RANDOM_MODELS = Registry("random model", "gensets.models.random")
QUALITY_METRICS = Registry("quality metric", "gensets.quality")
