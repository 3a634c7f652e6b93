"""One small generic registry: name -> lazily imported ``"module:object"``."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._targets: dict[str, str] = {}

    def register(self, name: str, target: str) -> None:
        if name in self._targets:
            raise KeyError(f"{self.kind} '{name}' is registered twice")
        if ":" not in target:
            raise ValueError(f"{self.kind} '{name}': target must be 'module:object', got {target!r}")
        self._targets[name] = target

    def get(self, name: str) -> Any:
        try:
            target = self._targets[name]
        except KeyError:
            known = ", ".join(sorted(self._targets))
            raise KeyError(f"unknown {self.kind} '{name}' (known: {known})") from None
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def __contains__(self, name: str) -> bool:
        return name in self._targets

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._targets))


BUILDERS = Registry("builder")
BUILDERS.register("imagenet-d", "gensets.builders.imagenet_d:BUILDER")
BUILDERS.register("recognition", "gensets.builders.recognition:BUILDER")
BUILDERS.register("genbench", "gensets.builders.genbench:BUILDER")
BUILDERS.register("vqa", "gensets.builders.vqa:BUILDER")
BUILDERS.register("failure-modes", "gensets.builders.failure_modes:BUILDER")
