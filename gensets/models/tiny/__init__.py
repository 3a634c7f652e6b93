"""Tiny random models, built offline from configs, identical on every build (seed 0), saved with safetensors
(a torchvision stand-in as the torch hub checkpoint of the weights it stands for: torchvision's own format).

Every kind is a class in one module of this package (classifiers.py, diffusion.py, vqa.py, caption.py,
text.py, quality.py, spelled.py), registered where it is defined::

    @TINY_MODELS.register("resnet")
    class TinyResnet(TinyModel):
        loaders = ("timm",)

        @staticmethod
        def build(folder: Path) -> None:  # writes the model into the empty `folder`
            ...

so a new tiny model is one new file here (the registry imports every module of this package on first use;
torch and the model libraries are imported inside the build functions). `tiny:<kind>` names it, and
`loaders` says which loaders read its folder: "timm", "hf" (transformers), "open_clip" and "torchvision"
(load_classifier, as the spec kinds of those names), "diffusers" (load_generator), "vqa" (load_vqa), "caption"
(load_captioner), "text" (load_text2text). Each model is saved in its library's own format and loaded back
through the same code path as a real model. transformer_config / vision_config give every tiny transformer
its size.

The full-size architectures with random weights (`random:<kind>`, gensets.models.random: for timing, memory
and scaling) are the same kind of class in their own registry, built and loaded the same way (built_path).

A kind is built once, on first use, under $GENSETS_CACHE/<tiny|random>/<kind>-v1-<kernels> (default ~/.cache/gensets/...;
<kernels> is "pinned" under reproducible: strict, else torch's CPU capability, since random draws differ between
kernel sets: gensets.determinism.kernels), in a temp folder renamed into place, so concurrent builders are safe: the
first rename wins. It is built under ``torch.manual_seed(0)`` in a forked RNG (the caller's RNG is left as it
was), one build at a time per process.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

from gensets import determinism
from gensets.cache import cache_root
from gensets.errors import ModelError
from gensets.models.hub import quiet_progress
from gensets.registry import RANDOM_MODELS, TINY_MODELS

VERSION = "v2"
_DONE = ".complete"
_BUILD_LOCK = threading.Lock()


class TinyModel:
    """A tiny model kind: `build(folder)` writes it; `loaders` read it (see the module docstring)."""

    name: str = ""  # the kind it is registered under (set by the registry)
    loaders: tuple[str, ...] = ()
    quiet: tuple[str, ...] = ()  # libraries whose progress bars are off while it is built ("transformers")

    @staticmethod
    def build(folder: Path) -> None:
        raise NotImplementedError


def transformer_config(**kw) -> dict:
    """The size of every tiny transformer: width 32 (MLP 37), 2 layers of 2 heads; plus `kw` (a config's
    arguments)."""
    return dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, **kw)


def vision_config(**kw) -> dict:
    """A tiny vision transformer's config arguments: 32 px images in 8 px patches; plus `kw`."""
    return transformer_config(image_size=32, patch_size=8, **kw)


def _family(family: str):
    return {"tiny": TINY_MODELS, "random": RANDOM_MODELS}[family]


def built_kinds(family: str, loader: str | None = None) -> list[str]:
    """The registered kinds of `family` ("tiny" or "random": gensets.models.random), sorted; with `loader`,
    those it reads."""
    return sorted(k for k, model in _family(family).items() if loader is None or loader in model.loaders)


def built_model(family: str, kind: str) -> type[TinyModel]:
    """The class of model `family:kind` (a registered kind)."""
    return _family(family).get(kind)


def tiny_kinds(loader: str | None = None) -> list[str]:
    """The registered tiny kinds, sorted; with `loader`, those it reads."""
    return built_kinds("tiny", loader)


def tiny_loaders(kind: str) -> tuple[str, ...]:
    """The loaders that read tiny model `kind` (a registered kind)."""
    return TINY_MODELS.get(kind).loaders


def tiny_path(kind: str) -> Path:
    """The folder of tiny model `kind`, built on first use."""
    return built_path("tiny", kind)


def built_path(family: str, kind: str) -> Path:
    """The folder of model `family:kind` ("tiny" or "random"), built on first use."""
    registry = _family(family)
    if kind not in registry:
        known = ", ".join(built_kinds(family))
        raise ModelError(f"model '{family}:{kind}': unknown {family} model (expected one of {known})")
    # its weights are random draws, which torch's CPU kernels compute differently (AVX-512, AVX2, scalar): one
    # folder per kernel set, so a strict (pinned) build never reads weights drawn by an unpinned process
    final = cache_root() / family / f"{kind}-{VERSION}-{determinism.kernels()}"
    if (final / _DONE).is_file():
        return final
    with _BUILD_LOCK:  # the global torch RNG is seeded while building: one build at a time per process
        if (final / _DONE).is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{VERSION}-", dir=final.parent))
        try:
            _build(registry.get(kind), tmp)
            (tmp / _DONE).write_text(f"{family}:{kind} {VERSION}\n")
            if final.exists() and not (final / _DONE).is_file():
                shutil.rmtree(final, ignore_errors=True)  # left over from an interrupted, non-atomic copy
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / _DONE).is_file():  # lost the race to a builder that failed: a real error
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _build(model: type[TinyModel], folder: Path) -> None:
    import torch

    with torch.random.fork_rng(devices=[]), quiet_progress(*model.quiet):
        torch.manual_seed(0)
        model.build(folder)
