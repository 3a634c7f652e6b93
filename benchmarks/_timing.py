"""What every benchmark here shares: best-of-N timings with the sides alternating, and how busy the machine was."""

from __future__ import annotations

import os
import time
from pathlib import Path


def cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine_busy_seconds() -> float:
    """CPU seconds all processes on the machine have used so far (from /proc/stat; 0 elsewhere)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    except OSError:
        return 0.0
    user, nice, system, idle, iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds of this process and its finished children (worker processes included once joined)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Load:
    """How many cores other processes used while a benchmark ran: ``Load()`` at the start, ``others()`` at the end."""

    def __init__(self):
        self.busy0, self.own0, self.wall0 = machine_busy_seconds(), own_seconds(), time.perf_counter()

    def others(self) -> float:
        wall = time.perf_counter() - self.wall0
        return max((machine_busy_seconds() - self.busy0 - (own_seconds() - self.own0)) / wall, 0.0)

    def line(self) -> str:
        o = self.others()
        note = "  (numbers are noisy: rerun on an idle machine)" if o > 0.1 else ""
        return f"other processes used {o:.2f} of the machine's {cores()} cores on average during the run{note}"


def interleaved(fns: dict, repeats: int) -> dict[str, float]:
    """Best time of each fn over ``repeats`` rounds, the fns alternating within a round (after one
    warm-up each): a burst of load from another process hits both sides, not one. A fn may return its own
    seconds (a float) instead of being timed whole."""
    for fn in fns.values():
        if getattr(fn, "needs_warmup", True):
            fn()  # warm-up: lazy imports, allocator, thread pools
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            r = fn()
            times[k].append(r if isinstance(r, float) else time.perf_counter() - t)
    return {k: min(v) for k, v in times.items()}


# ---------------------------------------------------------------- the hardware's limit, and how close a run gets
def device_name(threads: int | None = None) -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu, {threads or torch.get_num_threads()} torch threads"


def peak_flops(dtype: str = "float32", n: int | None = None, repeats: int = 5) -> float:
    """The device's measured matmul FLOP/s in `dtype`, in this run: the best of `repeats` n x n x n products
    (n: 8192 on a GPU, 1024 on CPU) after a warm-up. On a GPU with float32 the TF32 tensor cores are not used
    (torch's default): the limit then is the float32 one. The denominator of every utilisation printed here."""
    import torch

    cuda = torch.cuda.is_available()
    n = n or (8192 if cuda else 1024)
    dev = "cuda" if cuda else "cpu"
    a = torch.randn(n, n, device=dev, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device=dev, dtype=getattr(torch, dtype))
    best = float("inf")
    for i in range(repeats + 1):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        a @ b
        if cuda:
            torch.cuda.synchronize()
        if i:
            best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def count_flops(fn) -> int:
    """The FLOPs of one call of `fn()`, counted by torch.utils.flop_counter.FlopCounterMode (matmuls and
    convolutions: the model FLOPs that utilisation is about)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


class PeakMemory:
    """Peak memory of what runs inside: the GPU's allocated bytes (reset at entry) or, on CPU, the process's
    peak resident set (ru_maxrss: only grows, so on CPU it is the process's peak so far)."""

    def __enter__(self):
        import torch

        self.cuda = torch.cuda.is_available()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc):
        import resource

        import torch

        if self.cuda:
            torch.cuda.synchronize()
            self.bytes = torch.cuda.max_memory_allocated()
        else:
            self.bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return False

    @property
    def gib(self) -> float:
        return self.bytes / 2**30
