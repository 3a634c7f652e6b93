"""Where models run: this process's device under ``accelerate launch`` / ``torchrun`` (process i of n on
GPU i, or CPU), else "cuda" when a GPU is visible, else "cpu"."""

from __future__ import annotations

import os


def default_device() -> str:
    import torch

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState

        return str(PartialState(cpu=not torch.cuda.is_available()).device)
    return "cuda" if torch.cuda.is_available() else "cpu"
