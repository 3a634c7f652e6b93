"""What a build's bytes depend on, and the switches that make them the same on every machine.

A build's images are float computations (the UNet, the VAE, the surrogates' logits). On one machine with the
same library versions and thread count they are the same every time. Across machines they are not by default:
torch, MKL (torch's BLAS on x86), oneDNN (its convolutions) and numpy each pick vectorised kernels by the CPU's
instruction set (SSE, AVX2, AVX-512), and those kernels sum floats in different orders.

``reproducible: strict`` (every builder config; the default) pins each of them to its x86-64 baseline kernels
before torch or numpy first runs: the bytes are then the same on any x86-64 CPU of one vendor (measured: AVX-512
against AVX2-only MKL, glibc without FMA / AVX2, oneDNN and torch at their lowest ISA; ``tests/test_reproducible.py``).
Not between Intel and AMD: torch's elementwise sqrt / exp / log / tanh / erf go through MKL's VML, which honours
MKL_CBWR on Intel only and always runs its AVX2 kernels on AMD (measured on an AMD EPYC, Zen 4: torch.sqrt of
float32 rounds 587 of :func:`sqrt_misses`'s 4096 inputs wrongly, with or without the pins; the golden records of an
Intel and this AMD CPU differ in one image of a smoke build). No environment variable reaches it; a few images of
a build then differ between the vendors (README, "Reproducible").
On a GPU, strict turns on torch's deterministic algorithms (cuDNN deterministic, no autotuning, cuBLAS's fixed
workspace): the same GPU model, driver and library versions give the same bytes; another GPU model does not.
``reproducible: fast`` leaves every library's own choice: same bytes on the same machine only, and faster on
CPU (the smoke build in about 0.6 of strict's time; benchmarks/generate.py measures it).

:func:`describe` is the record of the environment a unit was built in (versions, CPU or GPU, the pins, the
thread count), stored once per workspace per environment and named by every manifest row, so that a rebuild
that differs says what differs (``gensets verify WORKSPACE --rebuild N``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from . import __version__
from .errors import GensetsError

MODES = ("strict", "fast")

# the x86-64 baseline of each library that picks kernels by instruction set; read when the library first runs
CPU_PINS = {
    "ATEN_CPU_CAPABILITY": "default",  # torch's own kernels: the build without AVX2 / AVX-512 variants
    "MKL_CBWR": "COMPATIBLE",  # MKL's conditional numerical reproducibility: the same code path on every x86 CPU
    "ONEDNN_MAX_CPU_ISA": "SSE41",  # oneDNN (convolutions): its lowest ISA
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",  # numpy 2.x: its x86-64-v2 baseline loops
}
GPU_PINS = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # cuBLAS's deterministic workspace (torch's docs)

# what the bytes depend on beyond the config: the libraries in the generation and filtering path
LIBRARIES = ("torch", "torchvision", "diffusers", "transformers", "tokenizers", "timm", "open_clip_torch",
             "accelerate", "safetensors", "numpy", "pillow", "scipy", "scikit-learn", "webdataset")


def mode_of(cfg) -> str:
    """A build config's ``reproducible`` mode: a plugin's Config that does not derive from BuildFields builds strict."""
    return getattr(cfg, "reproducible", "strict")


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def pin(mode: str) -> None:
    """Pin this process's CPU kernels for ``mode`` before its first model is built (torch need not be imported).

    strict (x86-64): the CPU pins go into the environment, where torch, MKL, oneDNN and numpy read them the
    first time they run. A pin that is too late (the library already ran with another setting in this process:
    a caller that used torch before gensets) is an error naming what to set, never a silently half-pinned build.
    """
    if mode not in MODES:
        raise GensetsError(f"reproducible: {mode!r} is not one of {', '.join(MODES)}")
    if mode != "strict":
        return
    if _x86():
        before = {k: os.environ.get(k) for k in CPU_PINS}
        os.environ.update(CPU_PINS)  # first: torch imported but not yet run still picks the pinned kernels
        late = [k for k, v in before.items() if v != CPU_PINS[k] and _loaded(k)]
        if late:
            need = " ".join(f"{k}={shlex.quote(CPU_PINS[k])}" for k in CPU_PINS)
            raise GensetsError(f"reproducible: strict: {', '.join(late)} came too late (torch or numpy was loaded in "
                               f"this process before gensets could pin its CPU kernels); start it with {need}, or "
                               "run the `gensets` command")
    os.environ.update(GPU_PINS)


def switch(mode: str) -> None:
    """torch's deterministic switches for ``mode`` (strict: deterministic algorithms, warning where an op has
    none; cuDNN deterministic and not autotuned), once torch is imported for the first model."""
    if mode != "strict":
        return
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def kernels() -> str:
    """The CPU kernels this process computes with: "pinned" (strict's pins in force) or torch's own capability
    ("avx512", "avx2", "default"). Anything computed from random draws (a tiny model's weights) depends on it."""
    if _x86() and all(os.environ.get(k) == v for k, v in CPU_PINS.items()) and _capability() == "DEFAULT":
        return "pinned"
    return (_capability() or "unknown").lower()


def _loaded(var: str) -> bool:
    """Whether the library that reads ``var`` may already have read it in this process."""
    if var == "NPY_DISABLE_CPU_FEATURES":
        if "numpy" not in sys.modules:
            return False
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

        return any(__cpu_features__.get(f) for f in __cpu_dispatch__)  # a dispatched target still on
    if var == "ATEN_CPU_CAPABILITY":
        return "torch" in sys.modules and _capability() != "DEFAULT"
    return "torch" in sys.modules  # MKL and oneDNN: no way to ask; torch imported means they may have run


def _capability() -> str | None:
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - an old torch: not recorded
        return None


def cpuinfo(field: str) -> str | None:
    """The first ``field`` of /proc/cpuinfo (``model name``, ``vendor_id``, ...); None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cores() -> int:
    """The cores this process may run on (its affinity): the most threads a rebuild starts, whatever thread count
    the environment it checks against recorded (a record of another machine's, or a forged one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _cpu_model() -> str:
    return cpuinfo("model name") or platform.processor() or platform.machine()


def sqrt_misses(n: int = 4096) -> str:
    """How many of ``n`` fixed float32 inputs (uniform in [0.5, 2), seed 0) torch.sqrt does not round correctly: a
    fingerprint of the elementwise kernels (MKL's VML) that the pins of ``strict`` do not reach. Measured under the
    pins: ``587 of 4096`` on an AMD EPYC (Zen 4), the same without them. Under ``qemu-x86_64 -cpu Skylake-Server``
    (an emulated Intel CPU): 463 with the pins, 0 without; no Intel machine was at hand to measure a real one, and
    qemu's arithmetic is no stand-in for it (tests/golden.py's ``write_shared``). The environment records the
    count, so that a rebuild on another vendor that differs says why (``cpu.sqrt_misses: 587 of 4096 -> ...``)."""
    import numpy as np
    import torch

    x = np.random.default_rng(0).uniform(0.5, 2.0, n).astype(np.float32)
    exact = np.sqrt(x.astype(np.float64)).astype(np.float32)  # double's sqrt, rounded once more: correctly rounded
    return f"{int((torch.sqrt(torch.from_numpy(x)).numpy() != exact).sum())} of {n}"


def _commit() -> str | None:
    """gensets' git commit when it runs from a checkout (``+dirty`` with uncommitted changes), else None."""
    here = Path(__file__).resolve().parent
    if not (here.parent / ".git").exists():
        return None
    try:
        run = {"cwd": here.parent, "capture_output": True, "text": True, "timeout": 10}
        head = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "gensets"],
                               **run).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def describe(mode: str, device: str, threads: int | None = None) -> dict:
    """The environment this process builds in: what a unit's bytes depend on besides its config."""
    from importlib import metadata

    import torch

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    env = {"gensets": __version__, "gensets_commit": _commit(), "python": platform.python_version(),
           "libraries": {name: version(name) for name in LIBRARIES}, "reproducible": mode,
           "device": "cuda" if str(device).startswith("cuda") else "cpu",
           "threads": threads if threads is not None else torch.get_num_threads(),
           "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
           "cpu": {"machine": platform.machine(), "vendor": cpuinfo("vendor_id"), "model": _cpu_model(),
                   "torch_capability": _capability(), "sqrt_misses": sqrt_misses(),
                   "pins": {k: os.environ.get(k) for k in CPU_PINS}},
           "gpu": None}
    if env["device"] == "cuda":
        props = torch.cuda.get_device_properties(torch.device(device))
        driver = None
        with contextlib.suppress(Exception):  # a private call: recorded where this torch has it
            driver = torch._C._cuda_getDriverVersion()
        env["gpu"] = {"name": props.name, "capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda,
                      "cudnn": torch.backends.cudnn.version(), "driver": driver,
                      "cublas_workspace": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
    return env


def env_id(env: dict) -> str:
    """A short name for an environment: the sha256 of its canonical JSON."""
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:12]


def differences(recorded: dict, now: dict, prefix: str = "") -> list[str]:
    """Where two environments differ, one ``key: recorded -> now`` each (nested keys dotted)."""
    out = []
    for k in sorted(set(recorded) | set(now)):
        a, b = recorded.get(k), now.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: {a} -> {b}")
    return out
