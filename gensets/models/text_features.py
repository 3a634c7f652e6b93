"""A zero-shot model's text classifier, computed once and kept on disk.

A zero-shot CLIP classifier's text side (per class: every template embedded, normalised, averaged, normalised
again) depends only on the text tower's weights, the class names and the templates. ImageNet's 1000 classes x 80
templates are 80,000 prompts through the text tower: seconds on a GPU, minutes on a CPU core, paid again by every
process of every evaluation. :func:`text_classifier` keeps the result under the gensets cache
(``$GENSETS_CACHE/text-features/<key>.safetensors``), keyed by everything the numbers depend on:

- the model: its kind and id and the Hub commit loaded; where no commit is known (a local folder, a tiny model,
  unpinned weights), the sha256 of the text tower's weights themselves;
- every prompt, in order (the class names through the templates), and how they were batched;
- where they were computed: the device (a GPU's name, or the CPU's kernels, gensets.determinism.kernels), the
  dtype and torch's version, so a cached classifier is used only where computing it again gives the same bytes.

A hit returns exactly the tensor a miss computed (safetensors keeps float bits). The cache is written whole or not
at all, never through a symlink, and read back checked (a regular file, the expected shape); a damaged entry is
computed again and replaced. ``GENSETS_TEXT_CACHE=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import determinism
from ..cache import cache_root
from ..errors import DataError
from ..output import atomic_open
from ..safety import read_regular, writable_inside

if TYPE_CHECKING:
    import torch

FOLDER = "text-features"


def _where(device: str) -> str:
    import torch

    if str(device).startswith("cuda"):
        return f"cuda:{torch.cuda.get_device_name(torch.device(device))}"
    return f"{device}:{determinism.kernels()}"


def weights_digest(module, skip: tuple[str, ...] = ()) -> str:
    """sha256 of a module's parameters and buffers (names, dtypes, shapes, bytes), those named under ``skip``
    (e.g. ``"visual."``: the image tower) left out."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        if name.startswith(skip):
            continue
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        t = t.detach().to("cpu").contiguous().reshape(-1)
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def cache_key(*, kind: str, model_id: str, weights: str, prompts: list[list[str]], method: str, device: str,
              dtype: str) -> str:
    """The entry's name: sha256 of everything the text classifier's numbers depend on (see the module)."""
    import torch

    parts = {"kind": kind, "model": model_id, "weights": weights, "prompts": prompts, "method": method,
             "where": _where(device), "dtype": dtype, "torch": torch.__version__}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def text_classifier(key: str, compute: Callable[[], torch.Tensor], classes: int) -> torch.Tensor:
    """The cached text classifier of ``key`` ((D, ``classes``)), or ``compute()`` stored under it."""
    from safetensors.torch import load, save

    if os.environ.get("GENSETS_TEXT_CACHE", "1") == "0":
        return compute()
    path = writable_inside(cache_root(), f"{FOLDER}/{key}.safetensors")
    if path.exists():
        try:
            t = load(read_regular(path))["text_classifier"]
            if t.ndim == 2 and t.shape[1] == classes and t.shape[0] > 0:
                return t
        except DataError:
            raise  # not a regular file (a FIFO, a folder): refused, not replaced
        except Exception:  # noqa: BLE001 - a damaged entry (safetensors' own errors, a missing tensor): computed again
            pass
    t = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as f:
        f.write(save({"text_classifier": t.detach().to("cpu", copy=True).contiguous()}))
    return t


def weights_id(revision: str | None, module, skip: tuple[str, ...]) -> str:
    """What identifies a model's text weights: the Hub commit loaded, else their own digest."""
    if revision and len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return f"commit:{revision}"
    return f"sha256:{weights_digest(module, skip)}"
