"""The generator and the surrogate filter on one GPU at real size: settings swept in one process, in one short run.

The generator is loaded through gensets' own loader (gensets.models.generator.load_generator: the real
diffusers from_pretrained, with its dtype / attention / channels_last / torch.compile settings) and called as a
build calls it (a batch of prompts, one seeded generator per image). For every setting and batch size: seconds
per call (best of --repeats after a warm-up call), images/s, peak GPU memory, and utilisation: the model FLOPs of
an image (torch.utils.flop_counter.FlopCounterMode over calls of 1 and 2 steps: text encoder and VAE once, the
UNet per step, both halves of classifier-free guidance) times images over the time, divided by the matmul peak
measured in the same run in the setting's dtype (8192^3). Then the ImageNet-D surrogate filter (four full-size
surrogates of configs/imagenet_d.yaml, random weights) on the last generated batch: images/s.

Models are `random:` specs (real architectures, random weights, built offline), so it runs where nothing can be
downloaded; the figures are those of the real models. benchmarks/gpu.sh runs this and the two ratio benchmarks
(generate.py, eval_throughput.py) as ONE script on a lent GPU.

    python benchmarks/gpu.py --model random:sd2.1 --size 512 --steps 20 --batches 1,4,8,16
    python benchmarks/gpu.py --model tiny:sd --size 64 --steps 2 --batches 1,2 --surrogates tiny:resnet,tiny:clip   # CPU check
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_k, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import PeakMemory, count_flops, device_name, peak_flops  # noqa: E402

SURROGATES = "random:clip-vit-l-14,random:resnet50,random:vit-b-16,random:convnext-tiny"
PROMPT = "a photo of a backpack on the moon"


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def caller(pipe, batch: int, steps: int, size: int, guidance: float):
    import torch

    def call():
        out = pipe(prompt=[PROMPT] * batch, num_inference_steps=steps, guidance_scale=guidance, width=size,
                   height=size, generator=[torch.Generator("cpu").manual_seed(i) for i in range(batch)],
                   output_type="pil")
        sync()
        return out.images

    return call


def timed(fn, repeats: int) -> tuple[float, float, object]:
    """(seconds of the first call: warm-up, compilation; best of `repeats` more; the last result)."""
    t = time.perf_counter()
    r = fn()
    first = time.perf_counter() - t
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        r = fn()
        best = min(best, time.perf_counter() - t)
    return first, best, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="random:sd2.1")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--guidance", type=float, default=7.5)
    ap.add_argument("--batches", default="1,4,8,16", help="batch sizes of the fp16 SDPA sweep")
    ap.add_argument("--batch", default="8", help="the batch size(s) of the other settings, e.g. 8,16 (default 8)")
    ap.add_argument("--settings", default="bf16,eager,channels_last",
                    help="settings besides fp16 + SDPA, at --batch: bf16, eager, channels_last, compile")
    ap.add_argument("--surrogates", default=SURROGATES, help="the filter's models ('' to skip)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    import torch

    from gensets.models.generator import load_generator

    cuda = torch.cuda.is_available()
    dtype = "float16" if cuda else "float32"
    print(f"device: {device_name()}; torch {torch.__version__}; {args.model}, {args.size}x{args.size}, "
          f"{args.steps} steps, guidance {args.guidance:g}", flush=True)
    t = time.perf_counter()
    g = load_generator(args.model, torch_dtype=dtype)
    print(f"loaded in {time.perf_counter() - t:.1f} s (built on first use)", flush=True)
    f1 = count_flops(caller(g.pipe, 1, 1, args.size, args.guidance))
    f2 = count_flops(caller(g.pipe, 1, 2, args.size, args.guidance))
    per_image = f1 + (args.steps - 1) * (f2 - f1)
    peaks = {d: peak_flops(d) for d in ({"float16", "bfloat16"} if cuda else {"float32"})}
    print(f"model FLOPs per image: {per_image / 1e12:.3f} TFLOP (UNet step incl. guidance {(f2 - f1) / 1e9:.0f} "
          f"GFLOP; text encoder + VAE decode {(2 * f1 - f2) / 1e9:.0f} GFLOP); matmul peak: "
          + ", ".join(f"{d} {p / 1e12:.2f} TFLOP/s" for d, p in sorted(peaks.items())), flush=True)

    rows = []

    def run(label: str, gen, batch: int, dt: str):
        with PeakMemory() as mem:
            first, best, images = timed(caller(gen.pipe, batch, args.steps, args.size, args.guidance), args.repeats)
        util = per_image * batch / best / peaks.get(dt, peaks[max(peaks)])
        rows.append((label, batch, first, best, batch / best, util, mem.gib))
        print(f"  {label:<28} batch {batch:>3}: first call {first:7.2f} s, best {best:7.3f} s, "
              f"{batch / best:7.2f} images/s, utilisation {util:6.1%}, peak {mem.gib:5.1f} GiB", flush=True)
        return images

    images = None
    for b in [int(x) for x in args.batches.split(",") if x]:
        images = run(f"{dtype}, sdpa", g, b, dtype)
    del g
    for setting in [s for s in args.settings.split(",") if s]:
        kw = dict(torch_dtype=dtype)
        if setting == "bf16":
            kw["torch_dtype"] = "bfloat16"
        elif setting == "eager":
            kw["attention"] = "eager"
        elif setting == "channels_last":
            kw["channels_last"] = True
        elif setting == "compile":
            kw["compile"] = True
            import torch._dynamo

            torch._dynamo.config.automatic_dynamic_shapes = False  # each batch size its own static graph
        else:
            raise SystemExit(f"unknown setting {setting!r}")
        try:
            gen = load_generator(args.model, **kw)
            for b in [int(x) for x in str(args.batch).split(",") if x]:
                run(f"{kw['torch_dtype']}, {setting}", gen, b, kw["torch_dtype"])
                if setting == "compile":
                    first, best = rows[-1][2], rows[-1][3]
                    print(f"  compile at batch {b}: {first - best:.1f} s to compile (first call less a compiled "
                          f"call); {rows[-1][4]:.2f} images/s = {rows[-1][5]:.1%} of the measured "
                          f"{kw['torch_dtype']} matmul peak", flush=True)
            del gen
        except Exception as e:  # one setting failing (e.g. compile on an old driver) does not lose the others
            print(f"  {setting}: FAILED: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
        if cuda:
            torch.cuda.empty_cache()

    if args.surrogates and images:
        from gensets.curation.surrogates import SurrogateFilter

        specs = args.surrogates.split(",")
        f = SurrogateFilter(specs, batch_size=len(images))
        t = time.perf_counter()
        f.models  # noqa: B018 (loads them)
        load_s = time.perf_counter() - t
        targets = [[414]] * len(images)  # backpack
        with PeakMemory() as mem:
            first, best, _ = timed(lambda: (f.score(images, targets), sync()), args.repeats)
        print(f"surrogate filter ({len(specs)} models: {', '.join(specs)}) on {len(images)} generated "
              f"{args.size}px images: loaded in {load_s:.1f} s; first {first:.2f} s, best {best:.3f} s = "
              f"{len(images) / best:.1f} images/s; peak {mem.gib:.1f} GiB", flush=True)
        gen_best = min(r[3] / r[1] for r in rows)
        print(f"filter time per image / generation time per image (fastest setting): "
              f"{best / len(images) / gen_best:.3f}", flush=True)

    print("\n| setting | batch | first call s | best s | images/s | utilisation | peak GiB |\n|---|---|---|---|---|---|---|")
    for label, b, first, best, ips, util, gib in rows:
        print(f"| {label} | {b} | {first:.2f} | {best:.3f} | {ips:.2f} | {util:.1%} | {gib:.1f} |")


if __name__ == "__main__":
    main()
