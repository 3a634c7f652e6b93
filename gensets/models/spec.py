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

The revision is the text after the last `@` when that text holds no `/` (a path may contain `@`)
or starts with `refs/` (e.g. `@refs/pr/1`).
parse_spec validates the grammar only: whether the name exists is found out when it is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gensets.errors import ModelError, did_you_mean
from gensets.registry import RANDOM_MODELS, TINY_MODELS

KINDS = ("timm", "open_clip", "hf", "diffusers", "torchvision", "tiny", "random")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelSpec:
    kind: str
    name: str
    revision: str | None
    raw: str

    @property
    def is_tiny(self) -> bool:
        return self.kind == "tiny"

    @property
    def is_built(self) -> bool:
        """Built locally from configs (gensets.models.tiny): a tiny model or a random full-size one."""
        return self.kind in ("tiny", "random")


def _split_revision(spec: str, name: str) -> tuple[str, str | None]:
    base, sep, rev = name.rpartition("@")
    if not sep or ("/" in rev and not rev.startswith("refs/")):
        return name, None
    if not base or not rev:
        raise ModelError(f"bad model spec {spec!r}: empty name or revision around '@'")
    return base, rev


def parse_spec(s: str) -> ModelSpec:
    """Parse a model spec string; raise ModelError naming the spec when the grammar is not met."""
    if not isinstance(s, str):
        raise ModelError(f"bad model spec {s!r}: not a string")
    if any(ord(c) < 32 or ord(c) == 127 for c in s):
        raise ModelError(f"bad model spec {s!r}: contains control characters")
    kind, sep, name = s.strip().partition(":")
    if not sep:
        raise ModelError(
            f"bad model spec {s!r}: expected '<kind>:<name>' with kind one of {', '.join(KINDS)}"
        )
    if kind not in KINDS:
        raise ModelError(f"bad model spec {s!r}: unknown kind {kind!r}{did_you_mean(kind, KINDS)} "
                         f"(expected one of {', '.join(KINDS)})")
    name = name.strip()
    if not name:
        raise ModelError(f"bad model spec {s!r}: empty model name after '{kind}:'")
    revision = None

    if kind == "tiny":
        if name not in TINY_MODELS:
            known = ", ".join(TINY_MODELS)
            raise ModelError(f"bad model spec {s!r}: unknown tiny model {name!r}{did_you_mean(name, TINY_MODELS)} "
                             f"(expected one of {known})")
    elif kind == "random":
        if name not in RANDOM_MODELS:
            known = ", ".join(RANDOM_MODELS)
            raise ModelError(f"bad model spec {s!r}: unknown random model {name!r}{did_you_mean(name, RANDOM_MODELS)} "
                             f"(expected one of {known})")
    elif kind == "open_clip":
        if not name.startswith("local-dir:"):
            name, revision = _split_revision(s, name)
        if name.startswith(("hf-hub:", "local-dir:")):
            if not name.partition(":")[2].strip():
                raise ModelError(f"bad model spec {s!r}: empty repo or path after {name.partition(':')[0]!r}")
        else:
            arch, slash, pretrained = name.partition("/")
            if not slash or not arch or not pretrained:
                raise ModelError(
                    f"bad model spec {s!r}: expected open_clip:<arch>/<pretrained>, open_clip:hf-hub:org/repo"
                    " or open_clip:local-dir:PATH"
                )
    elif kind == "timm":
        if name.startswith("local-dir:"):
            if not name[len("local-dir:") :].strip():
                raise ModelError(f"bad model spec {s!r}: empty path after 'local-dir:'")
        else:
            name, revision = _split_revision(s, name)
            if name.startswith("hf-hub:") and not name[len("hf-hub:") :].strip():
                raise ModelError(f"bad model spec {s!r}: empty repo after 'hf-hub:'")
    elif kind == "torchvision":
        name, sep, revision = name.partition("@")
        if not (sep and _IDENTIFIER.match(name) and _IDENTIFIER.match(revision)):
            raise ModelError(f"bad model spec {s!r}: expected torchvision:<architecture>@<WEIGHTS>, "
                             "e.g. torchvision:alexnet@IMAGENET1K_V1 (a torchvision.models weights enum member)")
    else:  # hf, diffusers
        name, revision = _split_revision(s, name)
    return ModelSpec(kind=kind, name=name, revision=revision, raw=s)
