"""How fast the `gensets` command starts: this checkout against a baseline commit (default cfa8515, before the
commands were registered lightly), both run by the same interpreter in the same run, the sides alternating.

The baseline is `git archive BASE` unpacked in a temporary folder; each side runs as `python -m gensets.cli ARGS`
in its tree with PYTHONPATH its tree (so its own gensets is imported, not the venv's), its bytecode cached in a temporary
folder of its own (warmed by one run first, as an installed package's is), offline. Printed per command: the best
and median wall time and CPU time (user + system, of the child) of each side, and baseline / this checkout; then
this checkout's `gensets build CONFIG --plan` of the two paper-scale configs (the baseline has no --plan).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/cli_startup.py [--base cfa8515] [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import Load

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = (("--help",), ("--version",), ("build", "--help"), ("list", "configs"), ("query", "--schema"))
# this checkout alone (the baseline has no --plan): the paper-scale plans, which must take well under a second
OWN = (("build", "configs/imagenet_d.yaml", "--plan"), ("build", "configs/genbench.yaml", "--plan"))


def run(tree: Path, args: tuple[str, ...], env: dict) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one `python -m gensets.cli ARGS` run of ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gensets.cli", *args], cwd=tree, env=env, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{tree}: gensets {' '.join(args)} exited {p.returncode}: {p.stderr.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="cfa8515", help="the baseline commit (default cfa8515)")
    ap.add_argument("--repeats", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli_startup-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "archive", a.base], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        sides = {f"{a.base}": base, "this checkout": ROOT}
        envs = {name: {**env, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(Path(tmp) / f"pyc-{i}")}
                for i, (name, tree) in enumerate(sides.items())}
        print(f"python {sys.version.split()[0]} ({sys.executable}); {a.repeats} runs a side, alternating, after one "
              "warm-up run each (bytecode cached)")
        load = Load()
        for args in COMMANDS:
            for name, tree in sides.items():
                run(tree, args, envs[name])  # warm-up: bytecode written, files in the page cache
            walls: dict[str, list[float]] = {n: [] for n in sides}
            cpus: dict[str, list[float]] = {n: [] for n in sides}
            for _ in range(a.repeats):
                for name, tree in sides.items():
                    w, c = run(tree, args, envs[name])
                    walls[name].append(w)
                    cpus[name].append(c)
            cells = [f"{n} best {min(walls[n]):.3f} s, median {statistics.median(walls[n]):.3f} s, cpu median "
                     f"{statistics.median(cpus[n]):.3f} s" for n in sides]
            old, new = sides
            ratio = statistics.median(walls[old]) / statistics.median(walls[new])
            cpu = statistics.median(cpus[old]) / statistics.median(cpus[new])
            print(f"gensets {' '.join(args)}: " + "; ".join(cells)
                  + f"; {old} / this checkout: {ratio:.2f}x wall (median), {cpu:.2f}x cpu")
        for args in OWN:
            run(ROOT, args, envs["this checkout"])
            took = [run(ROOT, args, envs["this checkout"]) for _ in range(a.repeats)]
            print(f"gensets {' '.join(args)} (this checkout): best {min(w for w, _ in took):.3f} s, median "
                  f"{statistics.median(w for w, _ in took):.3f} s, cpu median {statistics.median(c for _, c in took):.3f} s")
        floor = []
        for _ in range(a.repeats):  # the interpreter alone (site and the venv's path hooks): no command starts faster
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            floor.append(time.perf_counter() - t)
        print(f"python -c pass: median {statistics.median(floor):.3f} s (the floor)")
        print(load.line())


if __name__ == "__main__":
    main()
