"""A cost model from figures measured in the same GPU run (issue #47, item 5): GPU-hours and USD per image and per
paper build, beside GenBench's Table 5.

It reads the files benchmarks/gpu.sh wrote in --results (nothing here is measured or assumed about the GPU):

    determinism.txt   images/s of `fast` and of `strict` at batch N (gensets' Generator.generate, 20 steps)
    compile.txt       the model FLOPs split (text encoder + VAE once, UNet per step) and torch.compile's images/s
    generate-*.txt    gensets build end to end (8 images, loading included: a small build's rate, a lower bound)

A measured rate at the measured steps (20) is scaled to a build's steps by the model FLOPs of an image
(fixed + steps x UNet step, from compile.txt's FlopCounterMode line): the UNet dominates, so the scaled time is an
estimate, printed as one. The builds' image counts come from the configs themselves (each builder's
planned_images): ImageNet-D = configs/imagenet_d.yaml (all its candidates, before the surrogate filter);
GenBench = configs/genbench.yaml (6 strategies x classes x 64 shots, as the authors' pipeline generates) for its
dataset, and for each of the 22 datasets; Table 2 scores 20 of each class's 64 (its count is printed too).

    python benchmarks/cost.py --results gpu-out [--price-per-hour 1.47]

The rates of the last such run are the package's cost model (gensets/cost.py, with their card and date), which
`gensets build CONFIG --plan` prices a build with: after a new GPU run, copy its rates there.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gensets.cost import TABLE5  # noqa: E402  (GenBench's Table 5; the package's cost model holds the last run's rates)


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def rates(results: Path) -> tuple[list[tuple[str, float]], tuple[float, float] | None, int]:
    """[(what, images/s at the measured steps)], (fixed FLOPs, UNet step FLOPs) or None, the measured steps."""
    out = []
    det = read(results / "determinism.txt")
    m = re.search(r"(\d+) steps", det)
    steps = int(m.group(1)) if m else 20
    for setting in ("fast", "strict"):
        m = re.search(rf"^\| {setting} \| [^|]+ \| ([\d.]+) \|", det, re.M)
        b = re.search(r"\| setting \(batch (\d+)\)", det)
        if m:
            out.append((f"gensets' pipeline calls, {setting}, batch {b.group(1) if b else '?'}", float(m.group(1))))
    comp = read(results / "compile.txt")
    for b, ips in re.findall(r"^\s+\w+, compile\s+batch\s+(\d+):.*?([\d.]+) images/s", comp, re.M):  # as it goes
        out.append((f"torch.compile, fast, batch {b}", float(ips)))
    for mode in ("fast", "strict"):
        gen = read(results / f"generate-{mode}.txt")
        for b, ips in re.findall(r"^\s*(\d+)\s+gensets build \(batching: \w[\w-]*\)\s+[\d.]+\s+([\d.]+)", gen, re.M):
            out.append((f"gensets build end to end (a small build, load included), {mode}, batch {b}", float(ips)))
    flops = None
    m = re.search(r"UNet step incl\. guidance ([\d.]+) GFLOP; text encoder \+ VAE decode ([\d.]+) GFLOP", comp)
    if m and float(m.group(1)) > 0:  # a tiny model's step rounds to 0 GFLOP: no scaling then
        flops = (float(m.group(2)) * 1e9, float(m.group(1)) * 1e9)
    return out, flops, steps


def builds() -> list[tuple[str, int, int]]:
    """(name, images, steps) of each paper build, counted by the builders from the configs."""
    from gensets.workspace import load_build_config

    def planned(config, overrides=()):
        b, c = load_build_config(ROOT / "configs" / config, list(overrides))
        return sum(math.prod(n for _, n in t) for t in b.planned_images(c)), c.generator.steps, c

    out = []
    n, steps, _ = planned("imagenet_d.yaml")
    out.append(("ImageNet-D (configs/imagenet_d.yaml, all candidates)", n, steps))
    n, steps, c = planned("genbench.yaml")
    out.append((f"GenBench, one dataset ({c.dataset}: {len(c.strategies)} strategies x classes x {c.shots} shots)",
                n, steps))
    out.append((f"GenBench, one dataset ({c.dataset}), Table 2's 20 shots", n * 20 // c.shots, steps))
    datasets = json.loads((ROOT / "gensets/data/genbench/datasets.json").read_text())["datasets"]
    total = sum(planned("genbench.yaml", [f"dataset={d}"])[0] for d in datasets)
    out.append((f"GenBench, all {len(datasets)} datasets ({c.shots} shots)", total, steps))
    out.append((f"GenBench, all {len(datasets)} datasets, Table 2's 20 shots", total * 20 // c.shots, steps))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("gpu-out"))
    ap.add_argument("--price-per-hour", type=float, default=TABLE5["price_per_hour"],
                    help="USD per GPU-hour (default 1.47: Table 5's A100 spot price, so the figures compare)")
    args = ap.parse_args()
    measured, flops, steps = rates(args.results)
    if not measured:
        raise SystemExit(f"no measured rates in {args.results} (determinism.txt, compile.txt, generate-*.txt)")
    price = args.price_per_hour
    device = read(args.results / "env.txt").strip().splitlines()
    print(f"cost model at {price:g} USD per GPU-hour, from the rates measured in this run ({args.results}; device: "
          f"{device[1] if len(device) > 1 else '?'})")

    def scale(ips: float, to_steps: int) -> float:
        if flops is None or to_steps == steps:
            return ips
        fixed, unet = flops
        return ips * (fixed + steps * unet) / (fixed + to_steps * unet)

    if flops:
        print(f"steps scaling by model FLOPs: text encoder + VAE {flops[0] / 1e12:.2f} TFLOP, UNet step "
              f"{flops[1] / 1e12:.2f} TFLOP (measured steps: {steps})")
    else:
        print("no FLOPs split in compile.txt (missing, or a model too small to count): rates are NOT scaled to a "
              "build's steps")
    table = builds()
    print(f"\nTable 5 (GenBench): {TABLE5['usd_per_image']:.2e} USD per generated image at {TABLE5['price_per_hour']} "
          f"USD/h, {TABLE5['hours_per_1k']} h per 1K images ({TABLE5['hardware']}); note 1.47 x 1.74 / 1000 = "
          f"{1.47 * 1.74 / 1000:.2e}, so the table's own columns disagree by 10x (2.54e-4 is 0.17 h per 1K images)")
    build_steps = sorted({st for _, _, st in table})
    print(f"\n| rate measured in this run | images/s at {steps} steps | "
          + " | ".join(f"images/s at {st} steps{' (scaled)' if st != steps and flops else ''}" for st in build_steps)
          + f" | GPU-h / image at {build_steps[-1]} | USD / image | vs Table 5 |")
    print("|---" * (5 + len(build_steps)) + "|")
    for what, ips in measured:
        r = scale(ips, build_steps[-1])
        print(f"| {what} | {ips:.3f} | " + " | ".join(f"{scale(ips, st):.3f}" for st in build_steps)
              + f" | {1 / r / 3600:.2e} | {price / r / 3600:.2e} | {price / r / 3600 / TABLE5['usd_per_image']:.2f}x |")
    print("\n| paper build | images | steps | " + " | ".join(w for w, _ in measured) + " |")
    print("|---" * (3 + len(measured)) + "|")
    for name, n, st in table:
        cells = [f"{n / scale(ips, st) / 3600:,.1f} GPU-h, {n / scale(ips, st) / 3600 * price:,.2f} USD"
                 for _, ips in measured]
        print(f"| {name} | {n:,} | {st} | " + " | ".join(cells) + " |")
    print("\nTable 5's rate for the same builds: " + "; ".join(
        f"{name.split(' (')[0]}{' (20 shots)' if '20 shots' in name and not name.endswith('shots') else ''}: {n * TABLE5['usd_per_image']:,.0f} USD"
        for name, n, _ in table))

if __name__ == "__main__":
    main()
