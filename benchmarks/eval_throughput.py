"""Evaluation throughput of ``gensets eval`` against baselines measured in the same run (CPU).

(a) timm resnet18 (random weights from its config, saved with save_for_hf, loaded as timm:local-dir:)
    at 224 px: gensets evaluate() end to end (decode, preprocess, model, scoring, DuckDB) with its default
    worker processes, and with --workers 0 (decoding in the main process), against a bare ``model(batch)``
    loop over tensors decoded and transformed beforehand. Target ratio >= 0.9.
(b) a small open_clip model (random, from a config, local-dir:) zero-shot: gensets evaluate() against
    clip_benchmark 1.6.2's own ``main_eval`` (what ``clip_benchmark eval`` runs) on the same shards,
    in its own environment (tests/clip_benchmark_env.py); both timed without interpreter start-up and
    imports, fp32 (--no_amp). Target ratio >= 1.0.
(c) four models (resnet18, a second resnet18, the small and the tiny open_clip) in ONE evaluate()
    pass (each image decoded once) against four separate passes.
(e) with --model SPEC (any classifier spec; e.g. random:clip-vit-l-14, random:resnet50: the real architecture
    with random weights): gensets evaluate() against a bare script that loads the model by its own library, reads
    the shards and decodes in its time (like with like; target >= 0.8 on a GPU), and against a bare loop of the same
    folder loaded by its own library
    (open_clip.create_model_and_transforms / timm.create_model) over tensors decoded, transformed and moved to the
    device beforehand (zero-shot: the class texts encoded once, then encode_image, normalise, matmul, argmax), at
    --precision. Printed beside the ratio (target >= 0.9): images/s, peak memory, and utilisation: the model FLOPs
    of one image (torch.utils.flop_counter.FlopCounterMode over the bare forward) times images over the measured
    time, divided by the device's matmul peak measured in the same run. `--only e` runs it alone.
(d) decoding alone (read + decode + resnet18's preprocessing, no model: what gensets' workers do) with
    0 (in this process), 1, 2, ... --max-workers worker processes: images/s, and 2 processes against 1
    (target >= 1.6 on 2 cores).

Every timing is the best of --repeats after one warm-up, torch threads = --threads (2). gensets runs
in-process and quiet (``gensets.evaluation.runner.evaluate``), with the CLI's defaults (--workers: the
machine's cores less one) unless --workers is given. Every figure is printed beside the machine's cores.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python benchmarks/eval_throughput.py
    ... --n 256 --batch-size 32 --repeats 3 --profile     (also: where gensets eval spends its time)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ.setdefault(_k, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import Load, PeakMemory, cores, count_flops, device_name, interleaved, peak_flops  # noqa: E402

from tests import clip_benchmark_env as cbe  # noqa: E402

CLASSES = ["tench", "goldfish", "church", "parachute"]
TEMPLATE = "a photo of a {c}."


def build(work: Path, n: int, size: int, shards: int, clip: str):
    import timm
    import torch

    images, labels = cbe.tinted_images(n, len(CLASSES), (size, size), seed=0)
    data = cbe.write_dataset(work / "data" / "bench", images, labels, CLASSES, templates=[TEMPLATE],
                             shards=shards, extra=[{"imagenet_ids": [lab]} for lab in labels])
    models = {}
    for seed in (0, 1):
        d = work / f"resnet18-{seed}"
        torch.manual_seed(seed)
        timm.models.save_for_hf(timm.create_model("resnet18", num_classes=1000), str(d), safe_serialization=True)
        models[f"resnet18-{seed}"] = d
    models["clip-small"] = cbe.make_open_clip(work / "clip-small", cbe.SMALL_CLIP)
    models["clip-tiny"] = cbe.make_open_clip(work / "clip-tiny", cbe.TINY_CLIP)
    models["clip"] = models[f"clip-{clip}"]
    return data, images, models


def gensets_eval(data: Path, specs: list[str], db: Path, batch_size: int, workers: int | None, n: int, **kw):
    """One gensets eval of ``specs`` per call, each into a FRESH database (``db`` with the call's number: eval
    resumes a finished run, so a reused database would time skipped work), then proven: every spec has a run
    in it that scored all ``n`` images (its ``n`` and its prediction rows), or the benchmark fails."""
    from gensets.evaluation.runner import EvalConfig, evaluate

    calls = iter(range(10**6))

    def run() -> float:  # its seconds: the check after it is not timed
        path = db.with_name(f"{db.stem}-{next(calls)}.duckdb")
        t = time.perf_counter()
        evaluate(EvalConfig(str(data), specs, str(path), batch_size=batch_size, workers=workers, quiet=True,
                            templates=[TEMPLATE], **kw))
        seconds = time.perf_counter() - t
        run.db = path
        assert_scored(path, len(specs), n)
        return seconds

    return run


def assert_scored(db: Path, models: int, n: int) -> None:
    """Fail loudly unless the database holds ``models`` runs, each with n = ``n`` and ``n`` predictions."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute("SELECT r.model, r.n, (SELECT count(*) FROM predictions p WHERE p.run_id = r.run_id) "
                          "FROM runs r").fetchall()
    finally:
        con.close()
    if len(got) != models or any(rn != n or preds != n for _, rn, preds in got):
        raise SystemExit(f"FAILED: a timed gensets side did not score all {n} images with each of {models} "
                         f"model(s): {got} in {db}")


def bare_loop(model_dir: Path, data: Path, batch_size: int, n: int):
    """The same timm model, loaded from its folder, over the same shards read and decoded in this process (no
    worker processes, no scoring, no database): what gensets eval does at the least, so the ratio compares like
    with like. Proves it predicted all ``n`` images."""
    import io
    import tarfile

    import timm
    import torch
    from PIL import Image
    from timm.data import create_transform, resolve_model_data_config

    def run():
        model = timm.create_model(f"local-dir:{model_dir}", pretrained=True).eval()
        tf = create_transform(**resolve_model_data_config(model), is_training=False)
        done = 0
        with torch.inference_mode():
            for tar in sorted(Path(data).rglob("*.tar")):
                with tarfile.open(tar) as t:
                    imgs = [t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(".webp")]
                for i in range(0, len(imgs), batch_size):
                    x = torch.stack([tf(Image.open(io.BytesIO(b)).convert("RGB")) for b in imgs[i:i + batch_size]])
                    done += len(model(x).argmax(1))
        if done != n:
            raise SystemExit(f"FAILED: the bare loop predicted {done} images, not {n}")

    return run


def _model_folder(spec: str):
    """(folder, the library that loads it) of `spec`: a model in a local folder (tiny:, random:, local-dir:)."""
    from gensets.models import loading
    from gensets.models.spec import parse_spec

    s = parse_spec(spec)
    folder = loading.resolve(s).path
    if folder is None:
        raise SystemExit(f"--model {spec}: (e) needs a model in a local folder (tiny:, random:, local-dir:)")
    return folder, s.kind if not s.is_built else next(k for k in ("open_clip", "timm") if k in _loaders(s))


def _bare_model(folder, kind: str, device: str, amp):
    """The model loaded from its folder by its own library (open_clip.create_model_and_transforms /
    timm.create_model), no gensets code: (its transform, forward(batch) -> predicted classes). Zero-shot: the
    class texts are encoded here, under ``amp``."""
    import torch

    if kind == "open_clip":
        import open_clip

        model, _, tf = open_clip.create_model_and_transforms(f"local-dir:{folder}", device=device)
        tok = open_clip.get_tokenizer(f"local-dir:{folder}")
        with torch.inference_mode(), torch.autocast(device, dtype=amp, enabled=amp is not None):
            text = model.encode_text(tok([TEMPLATE.format(c=c) for c in CLASSES]).to(device))
            text = text / text.norm(dim=-1, keepdim=True)

        def forward(b):
            f = model.encode_image(b)
            return ((f / f.norm(dim=-1, keepdim=True)) @ text.T).argmax(1)
    else:
        import timm
        from timm.data import create_transform, resolve_model_data_config

        model = timm.create_model(f"local-dir:{folder}", pretrained=True).to(device)
        tf = create_transform(**resolve_model_data_config(model), is_training=False)

        def forward(b):
            return model(b).argmax(1)
    model.eval()
    return tf, forward


def _amp(precision: str):
    import torch

    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def spec_loop(spec: str, images: list[bytes], batch_size: int, precision: str):
    """`spec`'s model, loaded from its folder by its own library (no gensets code in the loop), over tensors
    decoded, transformed and on the device already. Returns (run, flops of one image)."""
    import io

    import torch
    from PIL import Image

    folder, kind = _model_folder(spec)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    amp = _amp(precision)
    tf, forward = _bare_model(folder, kind, device, None)  # the class texts in fp32, as this side always did
    x = torch.stack([tf(Image.open(io.BytesIO(b)).convert("RGB")) for b in images]).to(device)
    batches = list(x.split(batch_size))

    def run():
        with torch.inference_mode(), torch.autocast(device, dtype=amp, enabled=amp is not None):
            for b in batches:
                forward(b)
            if device == "cuda":
                torch.cuda.synchronize()

    with torch.inference_mode():
        flops = count_flops(lambda: forward(x[:1]))
    return run, flops


def spec_e2e(spec: str, data: Path, batch_size: int, precision: str, n: int):
    """`spec`'s model as a user's own script would run it end to end, with no gensets code in the timed loop: load
    the model from its folder by its own library, read the shards, decode, transform, move to the device, forward
    (zero-shot: encode the class texts first). The like-with-like side of (e): gensets also loads and reads inside
    its time. Proves it predicted all ``n`` images."""
    import io
    import tarfile

    import torch
    from PIL import Image

    folder, kind = _model_folder(spec)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    amp = _amp(precision)

    def run():
        tf, forward = _bare_model(folder, kind, device, amp)
        done = 0
        with torch.inference_mode(), torch.autocast(device, dtype=amp, enabled=amp is not None):
            for tar in sorted(Path(data).rglob("*.tar")):
                with tarfile.open(tar) as t:
                    imgs = [t.extractfile(m).read() for m in t.getmembers() if m.name.endswith(".webp")]
                for i in range(0, len(imgs), batch_size):
                    x = torch.stack([tf(Image.open(io.BytesIO(b)).convert("RGB")) for b in imgs[i:i + batch_size]])
                    done += len(forward(x.to(device, non_blocking=True)).cpu())
        if device == "cuda":
            torch.cuda.synchronize()
        if done != n:
            raise SystemExit(f"FAILED: the bare end-to-end loop predicted {done} images, not {n}")

    return run


def _loaders(s) -> tuple[str, ...]:
    from gensets.models.tiny import built_model

    return built_model(s.kind, s.name).loaders


def with_peak(fn):
    def run():
        with PeakMemory() as m:
            r = fn()
        run.peak = max(getattr(run, "peak", 0.0), m.gib)
        return r

    run.needs_warmup = getattr(fn, "needs_warmup", True)
    return run


def decode_only(data: Path, model_dir: Path, batch_size: int, workers: int):
    """gensets' batches of the dataset, read, decoded and preprocessed for resnet18 in ``workers`` processes (0:
    in this process), handed to this process and dropped: the loader of an eval without its models."""
    from gensets.evaluation.data import open_source
    from gensets.models import load_classifier

    (split,) = open_source(str(data)).splits
    prepare = load_classifier(f"timm:local-dir:{model_dir}").preprocess

    def run():
        from gensets.evaluation.loader import SplitBatches

        for _ in SplitBatches(split, batch_size, None).prepared([prepare], workers=workers):
            pass

    return run


def clip_benchmark_run(py: Path, work: Path, data: Path, model: Path, args):
    """One timed run of clip_benchmark's main_eval (after a warm-up run in the same driver process);
    returns its seconds, which exclude the driver's start-up, imports and warm-up."""
    workers = min(2 if args.workers is None else args.workers, args.shards)  # theirs must not exceed the shards
    argv = ["eval", "--task", "zeroshot_classification", "--model", f"local-dir:{model}", "--pretrained", "none",
            "--dataset", "wds/bench", "--dataset_root", str(data), "--no_amp", "--batch_size", str(args.batch_size),
            "--num_workers", str(workers), "--output", str(work / "cb.json"), "--quiet"]
    req = {"mode": "cli", "argv": argv, "threads": args.threads, "warmup": 1, "repeats": 1}

    def run() -> float:
        (work / "cb.json").unlink(missing_ok=True)
        seconds = float(cbe.run_driver(py, req, work)["seconds"][0])
        if not (work / "cb.json").is_file():  # its proof of work: the results file of this run
            raise SystemExit("FAILED: clip_benchmark wrote no results (cb.json)")
        return seconds

    run.needs_warmup = False  # each driver process warms itself up
    return run


def model_seconds(db: Path) -> float:
    """gensets' own per-run time: preprocess + forward + scoring, without decoding and the database."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return float(con.execute("SELECT sum(seconds) FROM runs").fetchone()[0])
    finally:
        con.close()


def profile_gensets(run, top: int = 25) -> None:
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    run()
    pr.disable()
    print("\ncProfile of one gensets eval pass (main process; decoding runs in the worker processes):")
    pstats.Stats(pr).sort_stats("tottime").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=256, help="images (default 256)")
    ap.add_argument("--size", type=int, default=224, help="image side in pixels (default 224)")
    ap.add_argument("--shards", type=int, default=4, help="tar shards (default 4)")
    ap.add_argument("--batch-size", type=int, default=32, help="both sides (default 32)")
    ap.add_argument("--workers", type=int, default=None,
                    help="gensets: decoding processes (default: gensets' default, the cores less one); "
                    "clip_benchmark: DataLoader workers (default 2, at most --shards)")
    ap.add_argument("--max-workers", type=int, default=None, help="(d): up to this many processes (default: cores)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs, after a warm-up (default 3)")
    ap.add_argument("--clip", choices=["small", "tiny"], default="small", help="open_clip model of (b)")
    ap.add_argument("--only", default="abcd", help="which benchmarks, e.g. 'ad' (default abcd)")
    ap.add_argument("--profile", action="store_true", help="cProfile one gensets pass of (a)")
    ap.add_argument("--workdir", type=Path, help="keep data and models here (default: a temp dir, removed)")
    ap.add_argument("--model", help="(e): a classifier spec to time against its bare loop, e.g. random:clip-vit-l-14")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"], help="(e): both sides")
    args = ap.parse_args()
    if args.model and args.only == "abcd":
        args.only = "e"

    import torch

    from gensets.evaluation.loader import default_workers

    torch.set_num_threads(args.threads)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="eval_throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple] = []
    n = args.n
    ratios: list[str] = []
    workers = default_workers() if args.workers is None else args.workers
    load = Load()
    try:
        t = time.perf_counter()
        data, images, models = build(work, args.n, args.size, args.shards, args.clip)
        print(f"built {args.n} {args.size}x{args.size} webp images in {args.shards} shards and the models in "
              f"{time.perf_counter() - t:.1f} s ({work}); threads {args.threads}, batch {args.batch_size}, "
              f"gensets workers {workers}, machine cores {cores()}")
        timm_spec = f"timm:local-dir:{models['resnet18-0']}"
        clip_spec = f"open_clip:local-dir:{models['clip']}"

        if "a" in args.only:
            run = gensets_eval(data, [timm_spec], work / "a.duckdb", args.batch_size, workers, n)
            t = interleaved({"bare": bare_loop(models["resnet18-0"], data, args.batch_size, n), "ours": run,
                             "one": gensets_eval(data, [timm_spec], work / "a0.duckdb", args.batch_size, 0, n)},
                            args.repeats)
            bare, ours, one = t["bare"], t["ours"], t["one"]
            inner = model_seconds(run.db)
            rows += [("(a) resnet18 224px", "bare loop: load + read + decode + model", n, bare),
                     ("", f"gensets eval --workers {workers} (processes)", n, ours),
                     ("", " of which preprocess+model+scoring (last run)", n, inner),
                     ("", "gensets eval --workers 0 (one process)", n, one)]
            ratios.append(f"(a) gensets / bare loop images/s: {bare / ours:.2f} with {workers} worker process(es), "
                          f"{bare / one:.2f} decoding in the main process  (target >= 0.9)")
            if args.profile:
                profile_gensets(run)

        if "b" in args.only:
            try:
                py = cbe.ensure_env()
            except cbe.Unavailable as e:
                print(f"(b) skipped: {e}")
            else:
                t = interleaved({"theirs": clip_benchmark_run(py, work, data, models["clip"], args),
                                 "ours": gensets_eval(data, [clip_spec], work / "b.duckdb", args.batch_size,
                                                      workers, n)}, args.repeats)
                theirs, ours = t["theirs"], t["ours"]
                cb_workers = min(2 if args.workers is None else args.workers, args.shards)
                rows += [(f"(b) open_clip {args.clip} zero-shot", f"clip_benchmark eval ({cb_workers} workers)", n,
                          theirs),
                         ("", f"gensets eval ({workers} workers)", n, ours)]
                ratios.append(f"(b) gensets / clip_benchmark images/s: {theirs / ours:.2f}  (target >= 1.0)")

        if "c" in args.only:
            specs = [timm_spec, f"timm:local-dir:{models['resnet18-1']}",
                     f"open_clip:local-dir:{models['clip-small']}", f"open_clip:local-dir:{models['clip-tiny']}"]
            sep_runs = [gensets_eval(data, [s], work / f"c4-{i}.duckdb", args.batch_size, workers, n)
                        for i, s in enumerate(specs)]
            t = interleaved({"four": lambda: sum(r() for r in sep_runs),
                             "one": gensets_eval(data, specs, work / "c1.duckdb", args.batch_size, workers, n)},
                            args.repeats)
            four, one = t["four"], t["one"]
            rows += [("(c) 4 models (model-images)", "four separate gensets passes", 4 * n, four),
                     ("", "one gensets pass, four models", 4 * n, one)]
            ratios.append(f"(c) one pass / four passes speed-up: {four / one:.2f}x")

        if "e" in args.only:
            if not args.model:
                raise SystemExit("(e) needs --model SPEC")
            bare, flops = spec_loop(args.model, images, args.batch_size, args.precision)
            bare = with_peak(bare)
            ours_run = gensets_eval(data, [args.model], work / "e.duckdb", args.batch_size, workers, n,
                                    precision=args.precision)
            ours = with_peak(ours_run)
            e2e = spec_e2e(args.model, data, args.batch_size, args.precision, n)
            t = interleaved({"bare": bare, "ours": ours, "e2e": e2e}, args.repeats)
            peak = peak_flops("bfloat16" if args.precision == "bf16" else "float16" if args.precision == "fp16"
                              else "float32")
            util = {k: flops * n / t[k] / peak for k in ("bare", "ours")}
            inner = model_seconds(ours_run.db)
            rows += [(f"(e) {args.model}", f"bare loop on ready tensors ({args.precision})", n, t["bare"]),
                     ("", "bare script: load + read + decode + model", n, t["e2e"]),
                     ("", f"gensets eval --workers {workers} (load + read + model)", n, t["ours"]),
                     ("", " of which preprocess+model+scoring (last run)", n, inner)]
            ratios.append(f"(e) gensets / bare script images/s: {t['e2e'] / t['ours']:.2f} end to end, like with like "
                          f"(both load the model and read the shards in their time)  (target >= 0.8 on a GPU)")
            ratios.append(f"(e) gensets / bare loop on ready tensors: {t['bare'] / inner:.2f} in the model loop, "
                          f"{t['bare'] / t['ours']:.2f} end to end (the bare loop neither loads nor reads in its time)")
            ratios.append(f"(e) on {device_name()}: model FLOPs per image {flops / 1e9:.1f} GFLOP (FlopCounterMode), "
                          f"measured matmul peak {peak / 1e12:.2f} TFLOP/s; utilisation: bare {util['bare']:.1%}, "
                          f"gensets {util['ours']:.1%}; peak memory: bare {bare.peak:.1f} GiB, gensets "
                          f"{ours.peak:.1f} GiB (GPU allocated; on CPU the process's peak resident set so far)")

        if "d" in args.only:
            counts = list(range(0, (args.max_workers or cores()) + 1))
            t = interleaved({k: decode_only(data, models["resnet18-0"], args.batch_size, k) for k in counts},
                            args.repeats)
            rows += [("(d) decode+preprocess only" if k == 0 else "",
                      "in the main process (--workers 0)" if k == 0 else f"{k} worker process(es)", n, t[k])
                     for k in counts]
            if 2 in t:
                ratios.append(f"(d) decoding with 2 processes / 1 process: {t[1] / t[2]:.2f}x  "
                              f"(target >= 1.6 on 2 cores)")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\nmachine: {cores()} cores; torch threads {args.threads}")
    print(f"{'benchmark':<30}{'what':<46}{'images':>7}{'best s':>9}{'images/s':>10}")
    for name, what, imgs, s in rows:
        print(f"{name:<30}{what:<46}{imgs:>7}{s:>9.2f}{imgs / s:>10.1f}")
    print()
    for r in ratios:
        print(r)
    print(load.line())
    print("\nre-run: HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 "
          f".venv/bin/python benchmarks/eval_throughput.py --n {args.n} --batch-size {args.batch_size} "
          f"--threads {args.threads} --repeats {args.repeats} --only {args.only}"
          + (f" --model {args.model} --precision {args.precision}" if args.model else ""))


if __name__ == "__main__":
    main()
