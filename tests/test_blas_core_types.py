"""The golden record holds on every OpenBLAS core type a machine of this kind may set.

numpy's and scipy's OpenBLAS picks its kernels by CPU, and the platform sets ``OPENBLAS_CORETYPE`` (and
``OPENBLAS_L2_SIZE``) on some processors (ENVIRONMENT.md): the same features then go through other kernels. The
reports whose numbers pass through BLAS (GenBench's: FD, KID, precision / recall, CLER, the linear probes, the
correlations) are run here in a process of their own under each core type, on the golden smoke builds, and compared
with tests/data/golden.json as test_golden compares them: report.md byte for byte, report.json's shape exactly and
its floats within golden.BLAS_TOLERANCES (each named with the computation it covers). The builds and features are
torch's (MKL, not OpenBLAS): the same under every core type.

Only the core types this CPU can execute are forced (tests/cpu_features.py): SkylakeX's AVX-512 kernels on a CPU
without AVX-512 are an illegal instruction, not another machine. The test prints which it ran and which it skipped,
and why. The runs must show one distinct kernel set per kernel set among the types run (Zen runs Haswell's
kernels), and at least two, so the test cannot pass by OpenBLAS ignoring the variable. As on a CPU without
AVX-512: `TESTS_HIDE_CPU_FLAGS='avx512*' pytest tests/test_blas_core_types.py`.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest

from . import cpu_features, golden
from .conftest import HANG, ROOT

pytestmark = pytest.mark.slow  # `make test-slow` and CI: two smoke builds, then five processes of two reports each

CORE_TYPES = ("Haswell", "SkylakeX", "Zen", "Sandybridge", "Prescott")
NAMES = ("genbench", "genbench.baselines")

# a process of its own (OpenBLAS reads the variable when it loads): strict's pins (inherited from the suite's
# environment, as golden.main sets them), the two reports into the folder the snapshot writes them to
_REPORTS = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from gensets import determinism
determinism.pin("strict")
from tests import golden
tmp = Path({tmp!r})
golden._TMP[:] = [str(tmp)]
ws = {{n: tmp / n for n in {names!r}}}
args = {{n: a for n, a in golden.report_args(tmp, ws, tmp / "results.duckdb").items() if n in ws}}
print(json.dumps({{"blas": golden.blas(), **golden.reports(tmp, args)}}))
"""


def _reports_under(core_type: str, tmp) -> dict:
    for name in NAMES:
        shutil.rmtree(tmp / f"report-{name}", ignore_errors=True)
    env = {**os.environ, "OPENBLAS_CORETYPE": core_type, "OPENBLAS_L2_SIZE": "512"}
    p = subprocess.run([sys.executable, "-c", _REPORTS.format(root=str(ROOT), tmp=str(tmp), names=NAMES)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=HANG)
    assert p.returncode == 0, f"{core_type}: exit {p.returncode}\n{p.stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_reports_give_the_recorded_numbers_under_every_openblas_core_type(tmp_path):
    record = json.loads(golden.GOLDEN.read_text(encoding="utf-8"))
    want = golden.expected(record, golden.vendor())
    run, skipped, distinct = cpu_features.core_types(CORE_TYPES)
    ran = f"OpenBLAS core types run: {', '.join(run) or 'none'}; skipped: " + (
        "; ".join(f"{t} ({why})" for t, why in skipped.items()) or "none")
    print(ran)
    if skipped:
        warnings.warn(ran, stacklevel=1)  # shown in pytest's summary, under pytest-xdist too
    if distinct < 2:
        pytest.skip(f"{ran}: fewer than two distinct kernel sets to compare")
    golden._TMP[:] = [str(tmp_path)]
    for name in NAMES:
        golden._cli("build", ROOT / "configs" / f"{name}.smoke.yaml", "--out", tmp_path / name, "--quiet")
    kernels, failed = set(), {}
    for core_type in run:
        got = golden.scrub(_reports_under(core_type, tmp_path), tmp_path)
        kernels.add(tuple(got["blas"]))
        keys = [k for k in want if k.startswith(tuple(f"report {n}" for n in NAMES))]
        assert keys and set(keys) == {k for k in got if k != "blas"}, (core_type, sorted(got))
        changed = golden.compare({**{k: want[k] for k in keys}, "blas": want["blas"]}, got)
        if changed:
            failed[f"{core_type} ({', '.join(got['blas'])})"] = changed
    assert len(kernels) >= distinct, (f"OPENBLAS_CORETYPE had no effect: {len(kernels)} kernel sets "
                                      f"{sorted(kernels)} where {run} give {distinct}")
    assert not failed, json.dumps(failed, indent=1, default=str)[:6000]
