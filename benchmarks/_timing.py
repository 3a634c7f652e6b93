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
