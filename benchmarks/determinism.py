"""What each of ``reproducible: strict``'s switches costs on this device, and what it buys (issue #47, item 1).

strict (gensets.determinism) is: the CPU pins (CPU_PINS: env vars read when torch / MKL / oneDNN / numpy first
run), cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG: read when cuBLAS starts), torch's deterministic
algorithms (``use_deterministic_algorithms(True, warn_only=True)``) and cuDNN deterministic without autotuning.
The env-var switches need a fresh process each, so every setting runs in a child process of its own (the
in-process switches share the plain process): the pipeline is loaded once per process through gensets' loader
and called as a build calls it (gensets.models.generator.Generator.generate: one CPU ``torch.Generator`` per
image), --images prompts and seeds in one call of --images (batch N), a warm-up call first, then a timed one.

    process   settings (each: a warm-up call = run 1, a timed call = run 2)
    plain     fast (nothing); deterministic algorithms alone; cuDNN deterministic + no benchmark alone;
              then fast at batch 1 (--images calls of one image; one timed run, after the batch-N calls)
    pins      fast under the CPU pins alone
    cublas    fast under the cuBLAS workspace alone
    strict    strict (all four); then strict at batch 1
    plain2    fast again, strict2: strict again: two more processes, run side by side (for their bytes only:
              their images/s are not timings)

Printed: images/s of the timed call (and against fast, measured in the same run), the sha256 of the images' uint8
pixels, and whether the bytes are identical across two runs in one process, across two processes, batch 1 against
batch N, and fast against strict.

    python benchmarks/determinism.py --model random:sd2.1 --size 512 --steps 20 --images 8 --dtype float16   # GPU
    python benchmarks/determinism.py --model tiny:sd --size 64 --steps 2 --images 2                           # CPU
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

SWITCHES = {  # in-process switches: (use_deterministic_algorithms, cudnn.deterministic, cudnn.benchmark)
    "fast": (False, False, False),
    "det-algorithms": (True, False, False),
    "cudnn-det": (False, True, False),
    "strict": (True, True, False),
}
PROCESSES = [  # (name, env vars, settings at batch N, setting also run at batch 1)
    ("plain", "", ["fast", "det-algorithms", "cudnn-det"], "fast"),
    ("pins", "cpu", ["fast"], None),
    ("cublas", "gpu", ["fast"], None),
    ("strict", "cpu,gpu", ["strict"], "strict"),
    ("plain2", "", ["fast"], None),
    ("strict2", "cpu,gpu", ["strict"], None),
]
CONCURRENT = ("plain2", "strict2")  # identity only: started together


def digest(images) -> list[str]:
    import numpy as np

    return [hashlib.sha256(np.asarray(im.convert("RGB"), dtype=np.uint8).tobytes()).hexdigest() for im in images]


def child(args) -> None:
    """One process: load, then each setting: a warm-up call (run 1) and a timed call (run 2); JSON lines out."""
    import torch

    from gensets.models.generator import load_generator

    t = time.perf_counter()
    g = load_generator(args.model, torch_dtype=args.dtype)
    load_s = time.perf_counter() - t
    prompts = [f"a photo of a {CIFAR10[i % 10]}" for i in range(args.images)]
    seeds = list(range(args.images))

    def call(one_per_call=False):
        t = time.perf_counter()
        ims = g.generate(prompts, seeds, steps=args.steps, guidance=7.5, width=args.size, height=args.size,
                         one_per_call=one_per_call)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter() - t, digest(ims)

    def emit(**rec):
        rec.update(process=args.child, env=args.env, load_s=round(load_s, 2))
        print("RESULT " + json.dumps(rec), flush=True)

    settings = [(s, False) for s in args.settings.split(",") if s] + ([(args.batch1, True)] if args.batch1 else [])
    for name, one in settings:
        algos, cudnn_det, bench = SWITCHES[name]
        torch.use_deterministic_algorithms(algos, warn_only=True)
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn_det, bench
        first_s, run1 = call(one) if not one else (float("nan"), None)  # batch 1: after batch N's warm-up
        s, run2 = call(one)
        run1 = run1 or run2
        emit(setting=name, batch=1 if one else args.images, first_s=round(first_s, 3), seconds=round(s, 3),
             images_per_s=round(args.images / s, 3), run1=run1, run2=run2)


def env_for(which: str) -> dict:
    from gensets.determinism import CPU_PINS, GPU_PINS

    env = {k: v for k, v in os.environ.items() if k not in CPU_PINS and k not in GPU_PINS}
    if "cpu" in which.split(","):
        env.update(CPU_PINS)
    if "gpu" in which.split(","):
        env.update(GPU_PINS)
    return env


def short(h: list[str]) -> str:
    return hashlib.sha256("".join(h).encode()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="random:sd2.1")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--images", type=int, default=8, help="prompts/seeds, one call of them (batch N); default 8")
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--timeout", type=float, default=90, help="seconds per child process (default 90)")
    ap.add_argument("--only", default="", help="child process names to run (default: all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--env", default="", help=argparse.SUPPRESS)
    ap.add_argument("--settings", default="", help=argparse.SUPPRESS)
    ap.add_argument("--batch1", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    common = ["--model", args.model, "--size", str(args.size), "--steps", str(args.steps), "--images",
              str(args.images), "--dtype", args.dtype]
    print(f"{args.model}, {args.size}x{args.size}, {args.steps} steps, {args.dtype}, {args.images} prompts/seeds; "
          "one child process per row group", flush=True)
    results: dict[tuple[str, str, int], dict] = {}
    todo = [p for p in PROCESSES if not args.only or p[0] in args.only.split(",")]
    groups = [[p] for p in todo if p[0] not in CONCURRENT] + [[p for p in todo if p[0] in CONCURRENT]]
    for group in [g for g in groups if g]:
        t = time.perf_counter()
        procs = []
        for name, which, settings, b1 in group:
            cmd = [sys.executable, __file__, *common, "--child", name, "--env", which, "--settings",
                   ",".join(settings), "--batch1", b1 or ""]
            procs.append((name, which, subprocess.Popen(cmd, env=env_for(which), stdout=subprocess.PIPE,
                                                        stderr=subprocess.PIPE, text=True)))
        for name, which, p in procs:
            try:
                out, err = p.communicate(timeout=max(args.timeout - (time.perf_counter() - t), 1))
                rc = p.returncode
            except subprocess.TimeoutExpired:  # what it printed before: its finished settings still count
                p.kill()
                out, err = p.communicate()
                rc = f"killed after {args.timeout:g} s"
            for line in out.splitlines():
                if line.startswith("RESULT "):
                    r = json.loads(line[7:])
                    results[(name, r["setting"], r["batch"])] = r
                    note = "  (side by side with another process: not a timing)" if len(procs) > 1 else ""
                    print(f"  [{name:<7} env {which or '-':<8}] {r['setting']:<15} batch {r['batch']:>2}: "
                          f"{r['images_per_s']:8.3f} images/s (timed call {r['seconds']:.3f} s, warm-up "
                          f"{r['first_s']:.3f} s, load {r['load_s']:.1f} s); images {short(r['run2'])}; "
                          f"run1 == run2: {r['run1'] == r['run2']}{note}", flush=True)
            print(f"  process {name}: exit {rc}, {time.perf_counter() - t:.1f} s since its start", flush=True)
            if rc != 0:
                print("    " + "\n    ".join(err.strip().splitlines()[-8:]), flush=True)
    report(results, args.images)


def report(results: dict, n: int) -> None:
    def get(proc, setting, batch=n):
        return results.get((proc, setting, batch))

    fast = get("plain", "fast")
    print(f"\n| setting (batch {n}) | process env | images/s | vs fast | images sha256 | same bytes run 1 / run 2 |")
    print("|---|---|---|---|---|---|")
    for (proc, setting, batch), r in results.items():
        if batch != n or proc in ("plain2", "strict2"):
            continue
        label = {"pins": "CPU pins alone", "cublas": "cuBLAS workspace alone"}.get(proc, setting)
        rel = f"{r['images_per_s'] / fast['images_per_s']:.3f}" if fast else "?"
        print(f"| {label} | {r['env'] or '-'} | {r['images_per_s']:.3f} | {rel} | {short(r['run2'])} | "
              f"{'yes' if r['run1'] == r['run2'] else 'NO'} |")

    def same(a, b, what):
        if a is None or b is None:
            print(f"- {what}: not measured (a process not run, or failed)")
            return
        k = sum(x == y for x, y in zip(a["run2"], b["run2"], strict=True))
        print(f"- {what}: {'identical' if k == len(a['run2']) else 'DIFFERENT'} ({k} of {len(a['run2'])} images "
              "byte-identical)")

    print("\nbytes identical?")
    for s, p1, p2 in (("fast", "plain", "plain2"), ("strict", "strict", "strict2")):
        r = get(p1, s)
        if r:
            print(f"- {s}, two runs in one process (batch {n}): "
                  f"{'identical' if r['run1'] == r['run2'] else 'DIFFERENT'}")
        same(get(p1, s), get(p2, s), f"{s}, two processes")
        same(get(p1, s, 1), get(p1, s), f"{s}, batch 1 vs batch {n}")
    same(get("plain", "fast"), get("strict", "strict"), f"fast vs strict (batch {n})")
    same(get("plain", "fast", 1), get("strict", "strict", 1), "fast vs strict (batch 1)")
    for proc, s in (("plain", "det-algorithms"), ("plain", "cudnn-det"), ("pins", "fast"), ("cublas", "fast")):
        same(get("plain", "fast"), get(proc, s), f"fast vs {proc}/{s}")
    for s, p in (("fast", "plain"), ("strict", "strict")):
        r1, rn = get(p, s, 1), get(p, s)
        if r1 and rn:
            print(f"{s}: batch 1 {r1['images_per_s']:.3f} images/s, batch {n} {rn['images_per_s']:.3f} images/s")
    st = get("strict", "strict")
    if fast and st:
        print(f"strict / fast time per image at batch {n}: {fast['images_per_s'] / st['images_per_s']:.3f}x")


if __name__ == "__main__":
    main()
