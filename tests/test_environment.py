"""The environment record of a build (gensets.determinism.describe): what a rebuild's bytes depend on, so that
`gensets verify` can name why a rebuild differs; and what the card promises from it."""

import math
import platform
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from gensets import determinism
from gensets.cards.card import reproducibility_md


def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def test_the_sqrt_probe_counts_what_python_counts():
    """An independent count: Python's correctly rounded double sqrt, rounded to float32 by struct, element by
    element, against torch.sqrt of the same inputs."""
    x = np.random.default_rng(0).uniform(0.5, 2.0, 4096).astype(np.float32)
    got = torch.sqrt(torch.from_numpy(x)).tolist()
    misses = sum(g != _f32(math.sqrt(float(v))) for g, v in zip(got, x.tolist(), strict=True))
    assert determinism.sqrt_misses() == f"{misses} of 4096"
    # the same count on a smaller set: the probe looks at exactly the inputs it names
    small = sum(g != _f32(math.sqrt(float(v))) for g, v in zip(got[:100], x[:100].tolist(), strict=True))
    assert determinism.sqrt_misses(100) == f"{small} of 100"


def test_the_record_names_the_cpu_vendor_and_the_probe():
    env = determinism.describe("strict", "cpu", threads=1)
    vendors = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
               if line.startswith("vendor_id")] if platform.system() == "Linux" else []
    assert env["cpu"]["vendor"] == (vendors[0] if vendors else None)
    assert env["cpu"]["sqrt_misses"] == determinism.sqrt_misses()
    # two records that differ only there: verify's list of differences names both
    other = {**env, "cpu": {**env["cpu"], "vendor": "OtherVendor", "sqrt_misses": "4097 of 4096"}}
    assert determinism.differences(other, env) == [f"cpu.sqrt_misses: 4097 of 4096 -> {env['cpu']['sqrt_misses']}",
                                                   f"cpu.vendor: OtherVendor -> {env['cpu']['vendor']}"]


def test_the_card_promises_the_same_bytes_on_one_cpu_vendor_only():
    text = reproducibility_md(SimpleNamespace(reproducible="strict"), {"environments": []})
    assert "any x86-64 CPU of the same vendor" in text and "between Intel and AMD" in text
    # the environment table names the vendor and the probe; an older record without them still gets its row
    env = determinism.describe("strict", "cpu", threads=1)
    old = {**env, "cpu": {k: v for k, v in env["cpu"].items() if k not in ("vendor", "sqrt_misses")}}
    text = reproducibility_md(SimpleNamespace(reproducible="strict"),
                              {"environments": [{"units": 3, "environment": env}, {"units": 1, "environment": old}]})
    new_row, old_row = (line for line in text.splitlines() if line.startswith("| 3 ") or line.startswith("| 1 "))
    assert f"({env['cpu']['vendor'] + ', ' if env['cpu']['vendor'] else ''}{platform.machine()}, torch kernels " in new_row
    assert f"torch.sqrt rounds {env['cpu']['sqrt_misses']} probes wrongly" in new_row
    assert f"({platform.machine()}, torch kernels {env['cpu']['torch_capability']}), 1 thread(s)" in old_row
    assert "same machine" in reproducibility_md(SimpleNamespace(reproducible="fast"), {"environments": []})
