"""Where models run and which process this is: this process's device under ``accelerate launch`` /
``torchrun`` (process i of n on GPU i, or CPU), else "cuda" when a GPU is visible, else "cpu"; the rank and
world size of the processes (:func:`distributed`), the same code path for one process or many."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .. import notices
from ..errors import GensetsError


def world_size() -> int:
    """``WORLD_SIZE`` of ``accelerate launch`` / ``torchrun`` (1 when unset); GensetsError naming it when it is
    not a whole number of at least 1 (``WORLD_SIZE=two``)."""
    text = os.environ.get("WORLD_SIZE", "").strip() or "1"
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 1 << 20:
        raise GensetsError(f"environment variable WORLD_SIZE={text[:40]!r}: expected a whole number of at least 1 "
                           "(the number of processes; leave it unset for one)")
    return n


def rank() -> int:
    """This process's ``RANK`` under ``accelerate launch --multi_gpu`` / ``torchrun`` (0 when unset): who prints."""
    return int(os.environ.get("RANK", "").strip() or 0) if world_size() > 1 else 0


def one_of_many_asked() -> bool:
    """``accelerate launch --num_processes N`` (N > 1) without ``--multi_gpu`` on a machine without several GPUs
    starts this one process alone (its simple launcher: ACCELERATE_USE_CPU and MASTER_ADDR set, no WORLD_SIZE)."""
    env = os.environ
    return "ACCELERATE_USE_CPU" in env and "MASTER_ADDR" in env and "WORLD_SIZE" not in env


_warned = []


def default_device() -> str:
    import torch

    if world_size() > 1:
        from accelerate import PartialState

        return str(PartialState(cpu=not torch.cuda.is_available()).device)
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    _state: object = None

    def barrier(self) -> None:
        if self._state is not None:
            self._state.wait_for_everyone()

    def gather(self, items: list) -> list:
        """Every process's ``items``, concatenated in rank order, on every process (one process: ``items``)."""
        if self._state is None:
            return list(items)
        from accelerate.utils import gather_object

        return gather_object(list(items))


def distributed() -> Dist:
    """Rank and world size under ``accelerate launch`` / ``torchrun``; one process otherwise."""
    if world_size() <= 1:
        if one_of_many_asked() and not _warned:  # said once, and the run goes on: its results are right, only slower
            _warned.append(1)
            notices.warn("gensets: warning: accelerate launch started one process, not --num_processes: on CPU it "
                         "needs --multi_gpu (accelerate launch --multi_gpu --num_processes N -m gensets.cli ...); "
                         "running as one process")
        return Dist()
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    return Dist(state.process_index, state.num_processes, state)


def wait_for_peers() -> None:
    """Under ``accelerate launch``, wait until every process has finished its command: a process done early (a rank
    of the audit, whose process 0 still searches and writes) must not tear its gloo group down while another still
    talks to it. Only after a command succeeded: a process that failed exits, and the launcher ends the others."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.barrier()


def close_distributed() -> None:
    """End this process's part of the process group that ``accelerate launch`` made (torch.distributed), if any,
    before the interpreter exits: a gloo group left to the interpreter's teardown can abort the process after its
    work is done ("terminate called without an active exception", SIGABRT: seen once on CPU under two processes)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
