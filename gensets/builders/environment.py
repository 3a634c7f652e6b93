"""How a build's processes compute: its ``reproducible`` mode and torch's CPU thread count, decided once as the build
(or a rebuild) starts and handed to every process that runs units (:class:`gensets.builders.backends.UnitWorker`,
here or on Ray), which pins its kernels and records its environment from it (:mod:`gensets.determinism`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import determinism
from ..models.device import default_device


@dataclass(frozen=True)
class BuildEnvironment:
    """``mode``: the config's ``reproducible`` (``strict`` or ``fast``); ``threads``: torch's CPU threads in each
    process (on CPU: the bytes depend on it, so one process or N use the same count)."""

    mode: str = "strict"
    threads: int = 1

    @classmethod
    def of(cls, cfg, threads: int = 1) -> BuildEnvironment:
        """The build's environment for ``cfg`` (:func:`gensets.determinism.mode_of`: a plugin's Config that does not
        derive from BuildFields builds strict)."""
        return cls(determinism.mode_of(cfg), threads)

    def with_threads(self, threads: int) -> BuildEnvironment:
        """The same, with ``threads`` (a rebuild's: the recorded count, known once its units are chosen)."""
        return dataclasses.replace(self, threads=threads)

    def pin(self) -> None:
        """The CPU kernels' pins of the mode, in this process, before torch first runs (:func:`determinism.pin`)."""
        determinism.pin(self.mode)

    def pins(self) -> dict[str, str]:
        """The variables that pin a process started elsewhere (a Ray worker): strict's, else none."""
        return {**determinism.CPU_PINS, **determinism.GPU_PINS} if self.mode == "strict" else {}

    def start(self) -> None:
        """This process ready for its first model: pinned, ``threads`` torch threads on CPU, the deterministic
        switches of the mode (:func:`determinism.switch`)."""
        self.pin()
        import torch

        if not torch.cuda.is_available():
            torch.set_num_threads(self.threads)
        determinism.switch(self.mode)

    def record(self) -> dict:
        """The environment this process builds in, as each unit's manifest row names it (:func:`determinism.describe`
        on this process's device)."""
        return determinism.describe(self.mode, default_device())
