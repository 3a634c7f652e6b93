"""Where the time of an ImageNet-D build goes: one unit of configs/imagenet_d.yaml, profiled, split by stage.

The paper-scale config (Stable Diffusion 2.1, four full-size surrogates) with its models swapped for `random:` specs
(the same architectures, random weights: the same compute, nothing downloaded) and a reduced size (--size px,
--steps steps, one class, one background, --images images in one unit) is built in this process under cProfile;
the time is split into the stages below by the cumulative time of each stage's entry point (each counted once;
a stage nested in another is not), and what is left is gensets' own work around the models:

    loading           DiffusionPipeline.from_pretrained, load_classifier (once per build, not per unit; a zero-shot
                      CLIP surrogate encodes its 1000 class prompts here)
    text encoding     the pipeline's encode_prompt (and gensets' token counting: Generator.measure)
    UNet steps        UNet2DConditionModel.forward (both halves of classifier-free guidance), scheduler.step
    VAE decode        AutoencoderKL.decode, and the pipeline's postprocessing to PIL
    image encode      gensets.images.encode_image (JPEG 95, as the config), decode_image
    surrogates        each surrogate's preprocess and forward (Classifier.preprocess, Classifier.logits)
    shard write       gensets.shards.writer.write_shard (tar, sha256, fsync, rename), the manifest row
    state ingest      state.duckdb: ingest, queue tables

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/profile_unit.py --size 256 --steps 2 --images 2

cProfile adds its own cost to every Python call (a few percent here, where the time is in torch's kernels).

``--calls`` (issue #47: at one image per call a build spent 1.33x the bare loop's time inside its pipeline calls on
an H200) profiles the per-image path instead: the generator loaded by gensets' loader, then (1) the bare
``pipe(...)`` call and gensets' ``Generator.generate`` call of one image, alternating, --repeats each: seconds per
call and their ratio; (2) one GenBench unit of --images images built with ``batching: per-image`` (its loading
included) under torch.profiler (CPU and CUDA activities): the top ops by self CPU time, the synchronising calls, and
the build's time outside its pipeline calls.

    python benchmarks/profile_unit.py --calls --model random:sd2.1 --size 512 --steps 20 --images 4 --dtype float16
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_k, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import Load, device_name  # noqa: E402

SURROGATES = ["random:clip-vit-l-14", "random:resnet50", "random:vit-b-16", "random:convnext-tiny"]

# stage -> entry points: (path suffix of the defining file, function name)
STAGES = {
    "loading": [("diffusers/pipelines/pipeline_utils.py", "from_pretrained"),
                ("gensets/models/classifier.py", "load_classifier")],
    "text encoding": [("pipeline_stable_diffusion.py", "encode_prompt"), ("gensets/models/generator.py", "measure")],
    "UNet steps": [("diffusers/models/unets/unet_2d_condition.py", "forward"),
                   ("diffusers/schedulers/scheduling_dpmsolver_multistep.py", "step")],
    "VAE decode": [("diffusers/models/autoencoders/autoencoder_kl.py", "decode"),
                   ("diffusers/image_processor.py", "postprocess")],
    "image encode": [("gensets/images.py", "encode_image"), ("gensets/images.py", "decode_image")],
    "surrogates": [("gensets/models/classifier.py", "preprocess"), ("gensets/models/classifier.py", "logits")],
    "shard write": [("gensets/shards/writer.py", "write_shard"), ("gensets/shards/manifest.py", "append")],
    "state ingest": [("gensets/curation/state.py", "ingest"), ("gensets/curation/queue.py", "rebuild")],
}
MODEL = ("text encoding", "UNet steps", "VAE decode", "surrogates")


def stage_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Each stage's seconds: the cumulative time of its entry points (a function counted once however often it
    recurses; an entry point called inside another of the same stage would count twice: none here is)."""
    out = dict.fromkeys(STAGES, 0.0)
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        for stage, points in STAGES.items():
            if any(path.endswith(suffix) and name == fn for suffix, fn in points):
                out[stage] += ct
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="random:sd2.1", help="the generator (default random:sd2.1)")
    ap.add_argument("--surrogates", default=",".join(SURROGATES))
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--images", type=int, default=2, help="images in the one unit (default 2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reproducible", default="fast", choices=["strict", "fast"],
                    help="fast (default here: strict's pinned CPU kernels make every model stage ~3x slower on "
                    "CPU and the split the same)")
    ap.add_argument("--top", type=int, default=0, help="also print cProfile's top N functions by own time")
    ap.add_argument("--calls", action="store_true", help="profile the per-image path under torch.profiler instead")
    ap.add_argument("--dtype", default="float32", help="--calls: the generator's dtype (default float32)")
    ap.add_argument("--repeats", type=int, default=4, help="--calls: calls of each side (default 4)")
    args = ap.parse_args()
    if args.calls:
        return profile_calls(args)

    from gensets.builders.runner import build

    # the libraries are imported before the profile starts: imports are a cost per process (tens of seconds on a
    # loaded 2-core machine), not per unit, and would otherwise land in "gensets' other work"
    t = time.perf_counter()
    import diffusers  # noqa: F401
    import open_clip  # noqa: F401
    import timm  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from diffusers import DPMSolverMultistepScheduler, StableDiffusionPipeline  # noqa: F401
    from transformers import CLIPTextModel, CLIPTokenizer  # noqa: F401

    import gensets.curation.state  # noqa: F401
    import gensets.models.classifier  # noqa: F401
    import gensets.papers.imagenet_d.builder  # noqa: F401
    imports = time.perf_counter() - t

    overrides = [f"generator.model={args.model}", f"generator.width={args.size}", f"generator.height={args.size}",
                 f"generator.steps={args.steps}", f"generator.batch_size={args.images}", "generator.dtype=float32",
                 f"filter.models=[{args.surrogates}]", "classes=[backpack]", "nuisances={background: {limit: 1}}",
                 f"images_per_pair={args.images}", f"unit_size={args.images}", f"reproducible={args.reproducible}"]
    load = Load()
    with tempfile.TemporaryDirectory(prefix="profile-unit-") as work:
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        build(ROOT / "configs" / "imagenet_d.yaml", Path(work) / "ws", quiet=True, threads=args.threads,
              overrides=overrides)
        prof.disable()
        total = time.perf_counter() - t
    stats = pstats.Stats(prof)
    seconds = stage_seconds(stats)
    rest = total - sum(seconds.values())
    after_load = total - seconds["loading"]
    model = sum(seconds[s] for s in MODEL)
    print(f"\n(imports before the profile: {imports:.1f} s, once per process)")
    print(f"one unit of configs/imagenet_d.yaml: {args.images} images, {args.model} at {args.size}px, "
          f"{args.steps} steps, surrogates {args.surrogates}; reproducible: {args.reproducible}; on "
          f"{device_name(args.threads)}")
    print("\n| stage | seconds | share of the build | share after loading |\n|---|---|---|---|")
    for stage, s in [*seconds.items(), ("gensets' other work (planning, provenance, files, locks...)", rest)]:
        after = "" if stage == "loading" else f"{s / after_load:.1%}"
        print(f"| {stage} | {s:.2f} | {s / total:.1%} | {after} |")
    print(f"| total | {total:.2f} | 100% | |")
    print(f"\nmodel compute (text encoder, UNet, VAE, surrogates): {model / after_load:.1%} of the time after loading; "
          f"gensets' own work (image encode, shard write, state, the rest): "
          f"{(after_load - model) / after_load:.1%}")
    print(load.line())
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)


def profile_calls(args) -> None:
    """--calls: where the time of gensets' per-image path goes, against the bare pipeline call."""
    import argparse as _argparse

    from gensets import determinism

    determinism.pin(args.reproducible)
    import torch
    from generate import write_config

    from gensets.builders.runner import build
    from gensets.models.generator import Generator, load_generator

    cuda = torch.cuda.is_available()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    determinism.switch(args.reproducible)
    g = load_generator(args.model, torch_dtype=args.dtype)
    kw = dict(num_inference_steps=args.steps, guidance_scale=7.5, width=args.size, height=args.size)

    def bare():
        g.pipe(prompt=["a photo of a cat"], negative_prompt=None, generator=[torch.Generator("cpu").manual_seed(0)],
               output_type="pil", **kw)
        sync()

    def ours():
        g.generate(["a photo of a cat"], [0], steps=args.steps, guidance=7.5, width=args.size, height=args.size)
        sync()

    times: dict[str, list[float]] = {"bare pipe() call": [], "gensets Generator.generate": []}
    bare(), ours()  # warm-up
    for _ in range(args.repeats):
        for name, fn in zip(times, (bare, ours), strict=True):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    print(f"\n{args.model}, {args.size}px, {args.steps} steps, {args.dtype}, batch 1, reproducible: {args.reproducible}"
          f", on {device_name(args.threads)}")
    for name, v in times.items():
        print(f"  {name:<28} best {min(v):.4f} s, mean {sum(v) / len(v):.4f} s per call ({len(v)} calls)")
    b, o = (min(v) for v in times.values())
    print(f"  gensets / bare seconds per call: {o / b:.3f} (best); {o - b:+.4f} s per call", flush=True)
    g = None  # the build loads its own
    if cuda:
        torch.cuda.empty_cache()

    # one unit of a per-image build, warm, under torch.profiler; time in pipeline calls recorded by a wrapper
    in_calls: list[float] = []
    original = Generator.generate

    def timed_generate(self, *a, **k):
        with torch.profiler.record_function("gensets.Generator.generate"):
            t = time.perf_counter()
            try:
                return original(self, *a, **k)
            finally:
                sync()
                in_calls.append(time.perf_counter() - t)

    Generator.generate = timed_generate
    ns = _argparse.Namespace(classes=1, shots=args.images, model=args.model, steps=args.steps, guidance=7.5,
                             size=args.size, batch_size=1, dtype=args.dtype, reproducible=args.reproducible,
                             price_per_hour=1.10)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with tempfile.TemporaryDirectory(prefix="profile-calls-") as work:
        cfg = write_config(Path(work) / "per-image.yaml", ns, "per-image")
        with torch.profiler.profile(activities=acts) as prof:
            t = time.perf_counter()
            build(cfg, Path(work) / "ws", quiet=True, threads=args.threads)
            sync()
            total = time.perf_counter() - t
    Generator.generate = original
    calls = sum(in_calls)
    print(f"\none unit of {args.images} images at one per call (gensets build, batching: per-image), under "
          f"torch.profiler: {total:.2f} s end to end, {calls:.2f} s in {len(in_calls)} pipeline calls "
          f"({calls / max(len(in_calls), 1):.3f} s per call), {total - calls:.2f} s outside them (loading included)",
          flush=True)
    avg = prof.key_averages()
    print(avg.table(sort_by="self_cpu_time_total", row_limit=args.top or 25, max_name_column_width=60))
    syncs = [e for e in avg if any(w in e.key for w in ("Synchronize", "synchronize", "Memcpy DtoH", "item",
                                                        "_local_scalar_dense", "nonzero"))]
    print("synchronising ops (the CPU waits for the GPU):")
    for e in syncs:
        print(f"  {e.key:<50} calls {e.count:>7}  self CPU {e.self_cpu_time_total / 1e3:10.1f} ms")


if __name__ == "__main__":
    main()
