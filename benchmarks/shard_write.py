"""Shard writing throughput: raw webdataset.ShardWriter vs gensets' write_shard.

Both get the same pre-encoded 256x256 webp bytes. Ours also validates and sorts, hashes while writing,
fsyncs each shard and its folder and renames atomically. Best of --repeats runs each.

    .venv/bin/python benchmarks/shard_write.py --n 2000 --shard-size 500
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image, ImageFilter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from gensets.images import encode_image  # noqa: E402
from gensets.shards import write_shard  # noqa: E402


def make_bytes(n: int, size: int) -> list[bytes]:
    """Smooth random colour fields plus grain: compresses like a photo, not like pure noise."""
    rng = random.Random(0)
    out = []
    for _ in range(n):
        small = Image.frombytes("RGB", (8, 8), bytes(rng.randrange(256) for _ in range(8 * 8 * 3)))
        img = small.resize((size, size), Image.BICUBIC)
        noise = Image.effect_noise((size, size), 24).convert("RGB")
        img = Image.blend(img, noise, 0.15).filter(ImageFilter.SMOOTH)
        out.append(encode_image(img, "webp", 95))
    return out


def samples(images: list[bytes]) -> list[dict]:
    """Every field already bytes, so both writers get exactly the same input."""
    return [
        {"__key__": f"{i:08d}", "webp": b, "cls": b"%d" % (i % 10), "json": b'{"i":%d}' % i}
        for i, b in enumerate(images)
    ]


def run_raw(rows: list[dict], out: Path, shard_size: int) -> None:
    import webdataset as wds

    with wds.ShardWriter(
        str(out / "raw-%05d.tar"), maxcount=shard_size, encoder=False, mtime=0, verbose=0
    ) as w:
        for r in rows:
            w.write(r)


def run_ours(rows: list[dict], out: Path, shard_size: int) -> None:
    for s, i in enumerate(range(0, len(rows), shard_size)):
        write_shard(out / f"ours-{s:05d}.tar", rows[i : i + shard_size])


def best_of(fn, rows, out: Path, shard_size: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        for p in out.glob("*.tar"):
            p.unlink()
        t = time.perf_counter()
        fn(rows, out, shard_size)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="images (default 2000)")
    ap.add_argument("--shard-size", type=int, default=500, help="samples per shard (default 500)")
    ap.add_argument("--size", type=int, default=256, help="image side in pixels (default 256)")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs (default 3)")
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default: a temp dir, removed after)"
    )
    args = ap.parse_args()

    import webdataset  # noqa: F401  (import once, outside the timings: it pulls in torch)

    t = time.perf_counter()
    images = make_bytes(args.n, args.size)
    mb = sum(map(len, images)) / 1e6
    print(f"encoded {args.n} {args.size}x{args.size} webp ({mb:.1f} MB) in {time.perf_counter() - t:.1f} s")
    rows = samples(images)

    out = args.out or Path(tempfile.mkdtemp(prefix="shard_write-"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        raw = best_of(run_raw, rows, out, args.shard_size, args.repeats)
        ours = best_of(run_ours, rows, out, args.shard_size, args.repeats)
    finally:
        if args.out is None:
            shutil.rmtree(out)
    print(f"{'writer':<28}{'best s':>8}{'images/s':>12}{'MB/s':>9}")
    for name, s in [("webdataset.ShardWriter (raw)", raw), ("gensets write_shard", ours)]:
        print(f"{name:<28}{s:>8.3f}{args.n / s:>12.0f}{mb / s:>9.0f}")
    print(f"ratio ours/raw (images/s): {raw / ours:.2f}")


if __name__ == "__main__":
    main()
