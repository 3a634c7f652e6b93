"""What this CPU can run, for the tests that force a CPU capability (an OpenBLAS core type, torch's or MKL's kernels).

A forced capability the CPU lacks is not a simulation of another machine, it is an illegal instruction (SIGILL,
exit -4): ``OPENBLAS_CORETYPE=SkylakeX`` runs AVX-512 kernels whether or not the CPU has them. So every test that
forces one asks :func:`runnable` first and skips, with the reason, what this CPU cannot execute.

The CPU's features come from ``/proc/cpuinfo``'s flags (the kernel's names, lower case); where that file is not
there, from numpy's own CPU-feature table read in a fresh process without the suite's pins (strict's
``NPY_DISABLE_CPU_FEATURES`` would hide the very features asked about), its names lowered to the kernel's.
"""

import fnmatch
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

# What each OpenBLAS core type's kernels execute (OpenBLAS's kernel/x86_64 KERNEL.<TYPE> files and its cpuid checks:
# SKYLAKEX / COOPERLAKE use AVX-512F (Cooperlake adds AVX512-BF16), HASWELL / ZEN AVX2 and FMA3, SANDYBRIDGE AVX,
# PRESCOTT SSE3, whose /proc/cpuinfo flag is "pni").
CORE_TYPE_NEEDS = {
    "SkylakeX": ("avx512f",),
    "Cooperlake": ("avx512f", "avx512_bf16"),
    "Haswell": ("avx2", "fma"),
    "Zen": ("avx2", "fma"),
    "Sandybridge": ("avx",),
    "Prescott": ("pni",),
}
# Which kernel set a core type runs: Zen runs Haswell's kernels, Cooperlake SkylakeX's (plus its bf16 ones, which
# float64 never reaches): the distinct sets a test can expect to see among the types it runs.
KERNEL_SET = {"SkylakeX": "SkylakeX", "Cooperlake": "SkylakeX", "Haswell": "Haswell", "Zen": "Haswell",
              "Sandybridge": "Sandybridge", "Prescott": "Prescott"}
# numpy's names for the features above (numpy._core._multiarray_umath.__cpu_features__)
_NUMPY_NAMES = {"AVX512F": "avx512f", "AVX512_CPX": "avx512_bf16", "AVX2": "avx2", "FMA3": "fma", "AVX": "avx",
                "SSE3": "pni"}
# torch's ATEN_CPU_CAPABILITY values and what each needs (aten/src/ATen/native/DispatchStub.cpp: AVX512 needs
# AVX-512F/BW/VL/DQ, AVX2 needs AVX2 and FMA)
ATEN_NEEDS = {"avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"), "avx2": ("avx2", "fma"), "default": ()}


def cpuinfo_flags(text: str) -> frozenset[str]:
    """The flags of the first processor in a ``/proc/cpuinfo`` text."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


# features to act as if this CPU lacked (fnmatch patterns, space-separated): `TESTS_HIDE_CPU_FLAGS='avx512*' pytest
# tests/test_blas_core_types.py` runs the core-type test as on a CPU without AVX-512 (hiding, never adding: what
# is forced stays what this CPU runs)
HIDE = "TESTS_HIDE_CPU_FLAGS"


@cache
def cpu_flags() -> frozenset[str]:
    """This CPU's features, in ``/proc/cpuinfo``'s names (less those :data:`HIDE` names)."""
    hidden = os.environ.get(HIDE, "").split()
    return frozenset(f for f in _cpu_flags() if not any(fnmatch.fnmatchcase(f, h) for h in hidden))


def _cpu_flags() -> frozenset[str]:
    try:
        flags = cpuinfo_flags(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        flags = frozenset()
    if flags:
        return flags
    code = ("import json; from numpy._core._multiarray_umath import __cpu_features__ as f; "
            "print(json.dumps([k for k, v in f.items() if v]))")
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    names = json.loads(p.stdout) if p.returncode == 0 else []
    return frozenset(_NUMPY_NAMES.get(n, n.lower()) for n in names)


def runnable(needs: dict[str, tuple[str, ...]], flags: frozenset[str]) -> tuple[list[str], dict[str, str]]:
    """Which of ``needs``' names (a core type, a capability) a CPU with ``flags`` can run, in ``needs``' order, and
    for each other one why not (the features it lacks)."""
    run, skipped = [], {}
    for name, features in needs.items():
        missing = [f for f in features if f not in flags]
        if missing:
            skipped[name] = f"this CPU lacks {', '.join(missing)}"
        else:
            run.append(name)
    return run, skipped


def core_types(wanted: tuple[str, ...], flags: frozenset[str] | None = None) -> tuple[list[str], dict[str, str], int]:
    """The OpenBLAS core types of ``wanted`` this CPU can run, the skipped ones with their reasons, and how many
    distinct kernel sets the runnable ones must show (one per kernel set among them)."""
    run, skipped = runnable({t: CORE_TYPE_NEEDS[t] for t in wanted}, cpu_flags() if flags is None else flags)
    return run, skipped, len({KERNEL_SET[t] for t in run})


def lacks(features: tuple[str, ...], flags: frozenset[str] | None = None) -> list[str]:
    """The ones of ``features`` this CPU lacks."""
    have = cpu_flags() if flags is None else flags
    return [f for f in features if f not in have]
