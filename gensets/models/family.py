"""A model family: the kind before the colon of a model spec (``timm:``, ``hf:``, ``tiny:``, ...), one class each,
registered in :data:`gensets.registry.FAMILIES` (the built-in ones declared in gensets/models/families/__init__.py,
one file each; a plugin's or a test's with ``@FAMILIES.register("toy")`` above its class).

A family says how its specs' names are checked (:meth:`ModelFamily.parse`, without touching the network or the
disk) and which loaders read its models (:attr:`ModelFamily.loaders`: a role -> a ``"module:function"`` target or
a function). The roles are those of gensets' loaders: ``classifier`` (load_classifier, called with the spec and
``labels, templates, allow_pickle, trust_remote_code, device`` as keywords, returning a
:class:`gensets.models.classifier.Classifier`) and ``generator`` (load_generator: the spec and ``torch_dtype,
attention, scheduler, compile, channels_last, allow_pickle, device``, returning a
:class:`gensets.models.generator.Generator`), ``vqa`` (load_vqa) and ``caption`` (load_captioner): the spec and
``allow_pickle, trust_remote_code, device``, returning what gensets.models.vlm / captioner's classes offer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import ClassVar

from gensets.errors import ModelError


class ModelFamily:
    name: str = ""  # the spec's kind (set by the registry)
    built: ClassVar[bool] = False  # models built locally from configs (tiny:, random:), not downloaded
    loaders: ClassVar[dict[str, str | Callable]] = {}  # role -> "module:function" (or the function)
    grammar: ClassVar[str] = ""  # the spec's form, for messages: "<org/repo | path>[@revision]"

    @classmethod
    def parse(cls, raw: str, name: str) -> tuple[str, str | None]:
        """``(name, revision)`` of spec ``raw`` whose text after the colon is ``name`` (stripped, not empty);
        ModelError naming ``raw`` when its grammar is not met. By default: ``name[@revision]``."""
        return split_revision(raw, name)

    @classmethod
    def loader(cls, role: str) -> Callable | None:
        """The function that loads this family's models as ``role`` ("classifier", "generator"), or None."""
        target = cls.loaders.get(role)
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            target = getattr(importlib.import_module(module), attr)
        return target


def split_revision(spec: str, name: str) -> tuple[str, str | None]:
    """The revision is the text after the last `@` when that text holds no `/` (a path may contain `@`) or starts
    with `refs/` (e.g. `@refs/pr/1`)."""
    base, sep, rev = name.rpartition("@")
    if not sep or ("/" in rev and not rev.startswith("refs/")):
        return name, None
    if not base or not rev:
        raise ModelError(f"bad model spec {spec!r}: empty name or revision around '@'")
    return base, rev
