"""reproducible: strict gives the same bytes on another CPU; every build records its environment; `gensets verify
WORKSPACE --rebuild N` says identical, or what differs in the environment.

Another CPU is simulated on this one, layer by layer: torch's kernels (ATEN_CPU_CAPABILITY), MKL's
(MKL_ENABLE_INSTRUCTIONS), glibc's libm (GLIBC_TUNABLES hides AVX-512 from its dispatch) and OpenBLAS's
(OPENBLAS_CORETYPE): what an AVX2-only machine would pick. The same simulation with ``reproducible: fast`` must
give other bytes, or the simulation would prove nothing. The simulated machine's kernels must be ones this CPU can
execute (tests/cpu_features.py): on a CPU without AVX2 and FMA, forcing them is an illegal instruction, so the
comparison with it is skipped, with the reason.
"""

import json
import os
import subprocess
import sys

import pytest

from gensets import determinism

from . import cpu_features
from .conftest import ROOT, SMOKE

pytestmark = pytest.mark.slow  # `make test-slow` and CI: builds under several CPU kernel sets

SMALL = ["--set", "classes=[mug]", "--set", "nuisances={background: {limit: 2}, texture: {limit: 1}}"]
# an AVX2-only x86-64 machine, as far as each library can be told to behave like one
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
                "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F,-AVX512BW,-AVX512CD,-AVX512DQ,-AVX512VL"}
# what forcing those kernels needs of this CPU (torch's avx2 and OpenBLAS's Haswell both run AVX2 and FMA3)
AVX2_LACKS = cpu_features.lacks(cpu_features.ATEN_NEEDS["avx2"] + cpu_features.CORE_TYPE_NEEDS["Haswell"])
NO_AVX2 = f"this CPU lacks {', '.join(dict.fromkeys(AVX2_LACKS))}: it cannot run the AVX2 machine's kernels"


def _env(**extra):
    """The test's environment without the suite's CPU pins (a fresh shell), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in determinism.CPU_PINS}
    return {**env, **extra}


def _gensets(*args, env=None, check=True):
    r = subprocess.run([sys.executable, "-m", "gensets.cli", *map(str, args)], capture_output=True, text=True,
                       env=env or _env(), cwd=ROOT)
    if check:
        assert r.returncode == 0, r.stderr[-2000:]
    return r


def _shards(ws):
    return {p.name: p.read_bytes() for p in sorted((ws / "candidates").glob("*.tar"))}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    out = {}
    for name, env, mode in [("here", {}, "strict"), ("avx2", AVX2_MACHINE, "strict"),
                            ("fast-default", {"ATEN_CPU_CAPABILITY": "default"}, "fast")]:
        if name == "avx2" and AVX2_LACKS:
            continue
        out[name] = root / name
        _gensets("build", SMOKE, "--out", out[name], "--quiet", *SMALL, "--set", f"reproducible={mode}",
                 env=_env(**env))
    return out


def _images(ws):
    import tarfile

    out = []
    for p in sorted((ws / "candidates").glob("*.tar")):
        with tarfile.open(p) as tar:
            out += sorted(tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg"))
    return sorted(out)


def _native_capability():
    """This CPU's own torch kernels (a fresh process without the pins)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env()).stdout.strip()


def test_strict_gives_the_same_bytes_on_another_cpu_and_fast_does_not(builds):
    if AVX2_LACKS:
        pytest.skip(NO_AVX2)
    here = _shards(builds["here"])
    assert here and here == _shards(builds["avx2"])
    if _native_capability() == "DEFAULT":
        pytest.skip("this CPU has no vector kernels to compare with")
    # torch's scalar kernels unpinned (fast) make other images of the same prompts and seeds
    fast = _images(builds["fast-default"])
    assert len(fast) == len(_images(builds["here"])) and fast != _images(builds["here"])


def test_every_unit_names_the_environment_that_built_it(builds):
    import torch

    for name in builds:
        envs = {p.stem: json.loads(p.read_text()) for p in (builds[name] / "environments").glob("*.json")}
        rows = [json.loads(line) for line in (builds[name] / "candidates" / "manifest.jsonl").read_text().splitlines()]
        assert len(envs) == 1 and {r["env"] for r in rows} == set(envs)
        env = next(iter(envs.values()))
        assert env["libraries"]["torch"] == torch.__version__.split("+")[0]
        assert env["threads"] == 1 and env["device"] == "cpu" and env["gpu"] is None
        if name == "fast-default":
            assert env["reproducible"] == "fast" and env["deterministic_algorithms"] is False
            assert env["cpu"]["torch_capability"] == "DEFAULT"
        else:
            assert env["reproducible"] == "strict" and env["deterministic_algorithms"] is True
            assert env["cpu"]["pins"] == determinism.CPU_PINS and env["cpu"]["torch_capability"] == "DEFAULT"
    # the strict builds ran on one machine: their environments differ only where the simulation was told (where
    # this CPU could run the simulated one: else there is no second strict build)
    if not AVX2_LACKS:
        a, b = (next((builds[n] / "environments").glob("*.json")).read_text() for n in ("here", "avx2"))
        assert a == b


def test_rebuild_is_identical_and_names_an_edited_environment(builds, tmp_path):
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(builds["here"], ws)
    r = _gensets("verify", ws, "--rebuild", "2", "--seed", "3", "--quiet")
    assert "identical: 2 of 2 units give the recorded bytes" in r.stdout
    assert r.stdout.count("the environment is the one recorded") == 2
    # the recorded environment edited: still the same bytes (strict), and the difference named
    path = next((ws / "environments").glob("*.json"))
    env = json.loads(path.read_text())
    torch_version = env["libraries"]["torch"]
    env["libraries"]["torch"] = "0.0.1"
    env["cpu"]["model"] = "Another CPU"
    env["cpu"]["vendor"], env["cpu"]["sqrt_misses"] = "OtherVendor", "4097 of 4096"
    path.write_text(json.dumps(env))
    r = _gensets("verify", ws, "--rebuild", "2", "--seed", "3", "--quiet")
    assert r.returncode == 0
    assert f"libraries.torch: 0.0.1 -> {torch_version}" in r.stdout
    assert "cpu.model: Another CPU -> " in r.stdout and "identical: 2 of 2" in r.stdout
    assert "cpu.vendor: OtherVendor -> " in r.stdout and "cpu.sqrt_misses: 4097 of 4096 -> " in r.stdout


def test_rebuild_that_differs_names_the_kernels(builds, tmp_path):
    """A fast build made with torch's scalar kernels, rebuilt with this CPU's own: other bytes, and the line says
    which kernels each used."""
    r = _gensets("verify", builds["fast-default"], "--rebuild", "1", "--seed", "0", "--quiet", check=False)
    native = _native_capability()
    if native == "DEFAULT":
        pytest.skip("this CPU has no vector kernels to compare with")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "differs: 1 of 1 units, and the environment differs in: " in r.stdout
    assert f"cpu.torch_capability: DEFAULT -> {native}" in r.stdout and "cpu.pins.ATEN_CPU_CAPABILITY: default -> None" in r.stdout


def test_a_pin_too_late_is_one_line():
    code = ("import torch; torch.ones(8).exp().sum()\n"
            "from gensets import determinism\n"
            "from gensets.errors import GensetsError\n"
            "try:\n    determinism.pin('strict')\nexcept GensetsError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("reproducible: strict: ATEN_CPU_CAPABILITY, MKL_CBWR, ONEDNN_MAX_CPU_ISA")
    assert "came too late" in r.stdout and "ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE" in r.stdout
