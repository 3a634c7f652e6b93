"""Model spec strings: `<kind>:<name>[@revision]`, parsed without touching the network or the disk.

    timm:<registry name | hf-hub:org/repo | local-dir:PATH>[@revision]
    open_clip:<arch>/<pretrained>[@revision] | open_clip:hf-hub:org/repo[@revision] | open_clip:local-dir:PATH
    hf:<org/repo | local path>[@revision]          (transformers; the task is read from the config)
    diffusers:<org/repo | local path>[@revision]
    torchvision:<architecture>@<WEIGHTS>            (torchvision.models, e.g. alexnet@IMAGENET1K_V1: the weights
                                                    enum's member is required, it names the weights file)
    tiny:<kind>                                     (small random models built offline: gensets.models.tiny)
    random:<kind>                                   (full-size architectures, random weights, built offline:
                                                    gensets.models.random; for timing only)

Each kind is a model family (gensets.models.family: one class per family, registered in
gensets.registry.FAMILIES, so a new family is one file); its `parse` checks the name.
The revision is the text after the last `@` when that text holds no `/` (a path may contain `@`)
or starts with `refs/` (e.g. `@refs/pr/1`).
parse_spec validates the grammar only: whether the name exists is found out when it is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from gensets.errors import ModelError, did_you_mean
from gensets.registry import FAMILIES


@dataclass(frozen=True)
class ModelSpec:
    kind: str
    name: str
    revision: str | None
    raw: str

    @property
    def family(self):
        """The class of its family (gensets.models.family.ModelFamily)."""
        return FAMILIES.get(self.kind)

    @property
    def is_tiny(self) -> bool:
        return self.kind == "tiny"

    @property
    def is_built(self) -> bool:
        """Built locally from configs (gensets.models.tiny): a tiny model or a random full-size one."""
        return self.family.built


def parse_spec(s: str) -> ModelSpec:
    """Parse a model spec string; raise ModelError naming the spec when the grammar is not met."""
    if not isinstance(s, str):
        raise ModelError(f"bad model spec {s!r}: not a string")
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        raise ModelError(f"bad model spec {s!r}: contains control characters")
    kind, sep, name = s.strip().partition(":")
    kinds = FAMILIES.names()
    if not sep:
        raise ModelError(
            f"bad model spec {s!r}: expected '<kind>:<name>' with kind one of {', '.join(kinds)}"
        )
    if kind not in kinds:
        raise ModelError(f"bad model spec {s!r}: unknown kind {kind!r}{did_you_mean(kind, kinds)} "
                         f"(expected one of {', '.join(kinds)})")
    name = name.strip()
    if not name:
        raise ModelError(f"bad model spec {s!r}: empty model name after '{kind}:'")
    name, revision = FAMILIES.get(kind).parse(s, name)
    return ModelSpec(kind=kind, name=name, revision=revision, raw=s)


def random_weights(spec: str | None) -> bool:
    """Whether the model ``spec`` names has random weights: one built locally from a config (``tiny:``, ``random:``,
    any family whose models are built). Its numbers are noise; every output that shows one says so. A spec that
    does not parse is not known to be random (False)."""
    if not isinstance(spec, str):
        return False
    try:
        return parse_spec(spec).is_built
    except ModelError:
        return False
