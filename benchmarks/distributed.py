"""Scale-out: units/s of ``--backend ray`` with 1 and N workers against the one-process build (the embedded
default, what ``accelerate launch`` runs in each process), in the same run, on the same machine.

The build is a GenBench config (strategy ST, ``--classes`` classes of CIFAR-10, ``--shots`` images each, units of
``--unit-size`` images; ``--model`` as the generator at ``--size`` px and ``--steps`` steps), so a unit's length is
set by its images and steps (>= 2 s on the CPU defaults). Every side runs the library's own pools
(``gensets.builders.backends``: ``LocalPool``, ``RayPool``) over the builder's planned units, each into its own
fresh workspace:

- start-up: the local cluster's ``ray.init`` and every worker answering (``RayPool``'s start), timed apart;
- warm-up: one unit per worker (each loads its models), not timed;
- steady state: the remaining units, timed; units/s, and the ratio to the one-process baseline;
- scheduling overhead per unit: (1-worker Ray seconds per unit - local seconds per unit), and the round trip of
  an empty call to a worker (the floor of what Ray adds to a unit).

The shards of every side are checked to be the bytes of the baseline's (same units, same sha256).

``--out s3://BUCKET/PREFIX`` runs every side twice, into a local folder and into a fresh prefix under that URL (the
shard uploaded, then its commit marker, as ``gensets build --out s3://...`` does), and prints units/s on S3 against
the folder with the same workers. Without ``AWS_ENDPOINT_URL`` in the environment it starts a moto S3 server on
127.0.0.1 (dummy credentials, the bucket created) for the run: loopback, no network; with it, the bucket must exist.

    HF_HUB_OFFLINE=1 /path/to/venv-with-ray/bin/python benchmarks/distributed.py           # CPU, tiny:sd, ~3 min
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/distributed.py --out s3://bench/dist     # + the same on moto's S3
    python benchmarks/distributed.py --model random:sd2.1 --size 512 --steps 20 --unit-size 8 --shots 32 \\
        --classes 2 --dtype float16 --workers 1,2 --gpus-per-worker 0.5                  # one GPU, two workers
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

for _k in ("HF_HUB_DISABLE_TELEMETRY", "RAY_USAGE_STATS_ENABLED"):
    os.environ.setdefault(_k, "1" if _k.startswith("HF") else "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import Load, cores, device_name  # noqa: E402

CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def write_config(path: Path, a) -> Path:
    import yaml

    cfg = {"builder": "genbench", "name": "distributed-bench", "seed": 0, "dataset": "cifar-10",
           "classes": CIFAR10[:a.classes], "shots": a.shots, "strategies": ["ST"], "unit_size": a.unit_size,
           "generator": {"model": a.model, "steps": a.steps, "width": a.size, "height": a.size,
                         "batch_size": a.unit_size, "dtype": a.dtype},
           "reproducible": a.reproducible, "image": {"format": "jpg", "quality": 95}, "shard_size": 1000}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def moto_server(url: str):
    """A moto S3 server on 127.0.0.1 with dummy credentials in this process's environment (Ray's local workers
    inherit it) and the URL's bucket created; None when AWS_ENDPOINT_URL names a store already."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        return None
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=f"http://{host}:{port}")
    boto3.client("s3").create_bucket(Bucket=url.split("://", 1)[1].split("/", 1)[0])
    return server


def side(config: Path, root, backend: str, workers: int | None, gpus: float | None, threads: int,
         cpus: int | None = None) -> dict:
    """One side: a fresh workspace (a folder, or a URL), its pool started and warmed up (one unit per worker), the
    rest timed."""
    from gensets.builders import backends
    from gensets.builders.environment import BuildEnvironment
    from gensets.workspace import Workspace, load_build_config

    builder, cfg = load_build_config(str(config), ())
    ws = Workspace.create(root if isinstance(root, str) else Path(root), builder, cfg)
    units = builder.plan(cfg)
    pool = backends.pool(backend, (builder, cfg, ws.where, BuildEnvironment.of(cfg, threads), 0, 1, str(config)), workers=workers,
                         quiet=True, gpus_per_worker=gpus, cpus_per_worker=cpus)
    probe = Load()  # how busy the machine is before this side (Ray's workers are other processes: not during it)
    time.sleep(1.0)
    out = {"backend": backend, "workers": workers or 1, "cpus": cpus, "asked": cpus, "units": len(units),
           "others_cores": probe.others(), "store": "s3" if ws.store else "folder"}
    rows = []
    try:
        t = time.perf_counter()
        if backend == "ray":
            pool._start()
            out["cpus"] = pool.cpus  # what gensets chose (cpu_share) when not given
            pool.ray.get([w.ping.remote() for w in pool.actors])
            out["startup_s"] = time.perf_counter() - t
            t = time.perf_counter()
            pool.ray.get([w.ping.remote() for w in pool.actors for _ in range(20)])  # warm the call path
            rt = time.perf_counter()
            for _ in range(50):
                pool.ray.get(pool.actors[0].ping.remote())
            out["roundtrip_ms"] = (time.perf_counter() - rt) / 50 * 1e3
        n_warm = out["workers"]
        warm, timed = units[:n_warm], units[n_warm:]
        t = time.perf_counter()
        rows += [r["row"] for r in pool.run(warm)]
        out["warmup_s"] = time.perf_counter() - t
        t = time.perf_counter()
        rows += [r["row"] for r in pool.run(timed)]
        out["timed_s"] = time.perf_counter() - t
        out["timed_units"] = len(timed)
    finally:
        pool.close()
        if ws.store:  # the URL's local cache folder (state, manifest, shard copies)
            import shutil

            shutil.rmtree(ws.root, ignore_errors=True)
    out["units_per_s"] = out["timed_units"] / out["timed_s"]
    out["s_per_unit"] = out["timed_s"] / out["timed_units"] * out["workers"]  # one worker's seconds per unit
    out["shards"] = {r["unit"]: r["sha256"] for r in rows}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny:sd")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--steps", type=int, default=70)  # tiny:sd v2 (a 4-block VAE): ~2.9 s units of 4 images on 2 cores
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--shots", type=int, default=24)
    p.add_argument("--unit-size", type=int, default=4, help="images per unit (one pipeline call)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--reproducible", default="strict")
    p.add_argument("--workers", default="1,2", help="Ray worker counts to measure (comma-separated)")
    p.add_argument("--gpus-per-worker", type=float, default=None,
                   help="each Ray worker's share of a GPU (default: CPU workers; on one GPU, 1/N for N workers)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process on CPU")
    p.add_argument("--cpus-per-worker", default="auto",
                   help="each Ray worker's CPUs, comma-separated to measure several (auto: gensets' default, a GPU "
                        "worker's share of its node's cores, 1 on CPU; Ray sets a worker's torch threads to it)")
    p.add_argument("--out", default=None, metavar="s3://BUCKET/PREFIX",
                   help="also run every side into a fresh prefix under this URL (a moto server on 127.0.0.1 unless "
                        "AWS_ENDPOINT_URL is set)")
    a = p.parse_args()
    if a.out:
        from gensets.errors import GensetsError
        from gensets.store import normalize

        try:
            a.out = normalize(a.out)
        except GensetsError as e:
            p.error(str(e))
        if not a.out.startswith(("s3://", "s3a://")):
            p.error(f"--out {a.out}: an s3:// URL")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gensets import determinism

    determinism.pin(a.reproducible)  # before torch is loaded: the build's CPU kernels, here and in the workers
    import torch

    counts = [int(x) for x in a.workers.split(",") if x]
    print(f"machine: {cores()} cores, {device_name()}; torch {torch.__version__}; "
          f"model {a.model} {a.size} px, {a.steps} steps, {a.unit_size} images a unit")
    results = []
    server = moto_server(a.out) if a.out else None
    run = f"{a.out}/{os.getpid()}-{int(time.time())}" if a.out else None  # a fresh prefix for this run's sides
    with tempfile.TemporaryDirectory(prefix="gensets-dist-bench-") as tmp:
        config = write_config(Path(tmp) / "bench.yaml", a)
        base = side(config, Path(tmp) / "local", "local", None, None, a.threads)
        results.append(base)
        if run:
            results.append(side(config, f"{run}/local", "local", None, None, a.threads))
        if importlib.util.find_spec("ray") is None:  # not imported here: RayPool sets Ray's settings first
            print("ray is not installed (pip install 'gensets[distributed]'): only the one-process baseline")
            counts = []
        for n in counts:
            gpus = a.gpus_per_worker
            if gpus is None and torch.cuda.is_available():
                gpus = 1.0 / n  # n workers share the one GPU
            for c in a.cpus_per_worker.split(","):
                cpus = None if c == "auto" else int(c)
                for root in (Path(tmp) / f"ray{n}-{c}", *([f"{run}/ray{n}-{c}"] if run else [])):
                    results.append(side(config, root, "ray", n, gpus, a.threads, cpus))
    if server:
        server.stop()
    print(f"{base['units']} units ({base['timed_units']} timed after one warm-up unit per worker)\n")
    print(f"{'side':<35} {'units/s':>8} {'vs local':>9} {'s/unit/worker':>14} {'start-up s':>11} "
          f"{'round trip ms':>14} {'others':>7} same bytes")
    for r in results:
        name = "local (one process)" if r["backend"] == "local" else \
            f"ray, {r['workers']} worker{'s' * (r['workers'] > 1)}, {r['cpus']} CPU{'s' * (r['cpus'] > 1)}" + \
            (" (auto)" if r["asked"] is None else "")
        name += ", S3" if r["store"] == "s3" else ""
        same = r["shards"] == base["shards"]  # every unit, each with the baseline's sha256
        print(f"{name:<35} {r['units_per_s']:>8.3f} {r['units_per_s'] / base['units_per_s']:>8.2f}x "
              f"{r['s_per_unit']:>14.2f} {r.get('startup_s', 0):>11.2f} {r.get('roundtrip_ms', float('nan')):>14.2f} "
              f"{r['others_cores']:>7.2f} {'yes' if same else 'NO'}")
    for r in results:
        if r["store"] == "s3":  # the same pool into a folder: what the store costs
            f = next(x for x in results if x["store"] == "folder" and (x["backend"], x["workers"], x["cpus"]) ==
                     (r["backend"], r["workers"], r["cpus"]))
            print(f"S3 / folder, {r['backend']} {r['workers']} worker(s): {r['units_per_s'] / f['units_per_s']:.2f}x "
                  f"units/s ({(r['s_per_unit'] - f['s_per_unit']) * 1e3:+.0f} ms a unit per worker)")
    ones = [r for r in results if r["backend"] == "ray" and r["workers"] == 1 and r["store"] == "folder"]
    for r in ones:
        print(f"\nper-unit overhead (ray 1 worker with {r['cpus']} CPU(s) - local): "
              f"{(r['s_per_unit'] - base['s_per_unit']) * 1e3:.0f} ms; an empty call's round trip "
              f"{r['roundtrip_ms']:.2f} ms")
    one = ones[-1] if ones else None
    for r in results:
        if one and r["backend"] == "ray" and r["workers"] > 1 and r["store"] == "folder":
            print(f"ray {r['workers']} workers / ray 1 worker: {r['units_per_s'] / one['units_per_s']:.2f}x")
    print("others: cores other processes used in the second before each side (a busy machine explains a low ratio)")
    return 0 if all(r["shards"] == base["shards"] for r in results) else 1  # a side with other bytes fails


if __name__ == "__main__":
    raise SystemExit(main())
