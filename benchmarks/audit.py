"""The audit (gensets.audit) on planted duplicates and at scale, beside idealo's imagededup on the same files.

Accuracy: ``--bases`` distinct images (tests/planted.py: smooth random scenes) and, for each transform (JPEG
re-encode, crop 10-30%, left-right flip, colour jitter, resize, a small overlay; plus exact copies), ``--copies``
copies of different base images. A predicted pair is any two images within a method's threshold; precision is over
every predicted pair, recall per transform over its planted pairs, at each threshold. gensets: pHash and dHash with
its mirror rule (the default) and without it, and "any" (the audit's default rule: exact pixels, pHash or dHash);
imagededup 0.3: PHash and DHash (its ``find_duplicates`` on its own encodings, in its own venv:
tests/imagededup_env.py); its CNN needs torchvision's ImageNet weights, which cannot load offline (not run).

Speed: ``gensets.audit`` (decode, hash, search) of N = ``--sizes`` images against ``--refs`` references, each size in
a process of its own (its peak memory is its own), images ``--side`` pixels square; the ratios of time and of peak
memory between the largest and the smallest size against the size ratio. imagededup's PHash (encode +
find_duplicates, within the set only) at the smallest size. And the embedding search alone (random unit vectors,
``--dim``): gensets' exact chunked search and faiss's HNSW index (in the side venv, which has faiss-cpu).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/audit.py --bases 400 --copies 40 --sizes 10000,100000 --refs 10000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import Load, cores  # noqa: E402
from tests import imagededup_env  # noqa: E402
from tests.planted import TRANSFORMS, base_image, plant  # noqa: E402

THRESHOLDS = [0, 2, 4, 6, 8, 10, 12, 14]

THEIRS = """
import json, sys
from imagededup.methods import PHash, DHash
folder, thresholds = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name, method in (("PHash", PHash(verbose=False)), ("DHash", DHash(verbose=False))):
    enc = method.encode_images(image_dir=folder, recursive=True)
    out[name] = {t: sorted({tuple(sorted((a, b))) for a, bs in method.find_duplicates(encoding_map=enc,
                 max_distance_threshold=t, scores=False).items() for b in bs}) for t in thresholds}
print(json.dumps(out))
"""


def accuracy(args, python) -> dict:
    import numpy as np
    from PIL import Image

    from gensets.audit import hashes
    from gensets.audit.sources import image_folder

    folder = Path(tempfile.mkdtemp(prefix="audit-bench-"))
    planted = plant(folder, args.bases, {t: args.copies for t in TRANSFORMS}, categories=("all",))
    truth = {tuple(sorted((a, b))): t for a, b, t in planted}
    files = image_folder(folder, "self").keys
    fps = [hashes.fingerprints(Image.open(folder / f)) for f in files]
    h = {k: np.array([fp[k] for fp in fps], np.uint64) for k in ("phash", "dhash", "phash_mirror", "dhash_mirror")}
    exact = [fp["exact"] for fp in fps]

    def dist(method, mirror):
        d = np.bitwise_count(h[method][:, None] ^ h[method][None, :])
        if mirror:
            d = np.minimum(d, np.bitwise_count(h[f"{method}_mirror"][:, None] ^ h[method][None, :]))
            d = np.minimum(d, d.T)
        return d

    iu = np.triu_indices(len(files), 1)
    rows = {}
    dists = {(m, mir): dist(m, mir)[iu] for m in ("phash", "dhash") for mir in (True, False)}
    same = np.array([exact[i] == exact[j] for i, j in zip(*iu, strict=True)])

    def score(pred: set) -> dict:
        tp = pred & truth.keys()
        per = {t: sum(truth[p] == t for p in tp) / sum(v == t for v in truth.values()) for t in TRANSFORMS}
        return {"precision": len(tp) / len(pred) if pred else 1.0, "predicted": len(pred), **per}

    names = [(files[i], files[j]) for i, j in zip(*iu, strict=True)]
    for t in THRESHOLDS:
        for (m, mir), d in dists.items():
            rows[(f"gensets {m}{' +mirror' if mir else ''}", t)] = score({names[k] for k in np.nonzero(d <= t)[0]})
        anyhit = same | (dists[("phash", True)] <= t) | (dists[("dhash", True)] <= t)
        rows[("gensets any (exact|phash|dhash, mirror)", t)] = score({names[k] for k in np.nonzero(anyhit)[0]})
    if python:
        p = subprocess.run([str(python), "-c", THEIRS, str(folder), json.dumps(THRESHOLDS)], capture_output=True,
                           text=True, env=imagededup_env.env_vars(), timeout=3600)
        if p.returncode:
            raise RuntimeError(p.stderr[-2000:])
        for name, by_t in json.loads(p.stdout.strip().splitlines()[-1]).items():
            for t, pairs in by_t.items():
                pred = {tuple(sorted((os.path.relpath(a, folder) if os.path.isabs(a) else a,
                                      os.path.relpath(b, folder) if os.path.isabs(b) else b))) for a, b in pairs}
                rows[(f"imagededup {name}", int(t))] = score(pred)
    return {"images": len(files), "planted": len(truth), "rows": rows}


SPEED = """
import json, sys, time, resource, io
sys.path.insert(0, sys.argv[4])
from gensets.audit import check
from gensets.audit.features import Cache, extract
from gensets.audit.sources import ImageSet
from tests.planted import base_image
n, refs, side = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def encoded(seeds):
    out = []
    for s in seeds:
        b = io.BytesIO(); base_image(s, side).save(b, "PNG"); out.append(b.getvalue())
    return out
data, ref = encoded(range(n)), encoded(range(10**7, 10**7 + refs))
mine = ImageSet("self", "bench", [f"s{i}" for i in range(n)], [None] * n, data.__getitem__)
theirs = ImageSet("ref", "bench", [f"r{i}" for i in range(refs)], [None] * refs, ref.__getitem__)
t0 = time.perf_counter()
cache = Cache(); cache.off = True
f0, f1 = extract(mine, cache), extract(theirs, cache)
t1 = time.perf_counter()
r = check.find(mine.keys, mine.configs, f0, [(theirs, f1)], check.Options())
t2 = time.perf_counter()
print(json.dumps({"n": n, "refs": refs, "features_s": t1 - t0, "search_s": t2 - t1, "total_s": t2 - t0,
                  "pairs": len(r.pairs), "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

EMBED = """
import json, sys, time, resource
sys.path.insert(0, sys.argv[4])
import numpy as np
from gensets.audit import search
n, refs, dim, how = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[5]
rng = np.random.default_rng(0)
def unit(k):
    x = rng.normal(size=(k, dim)).astype(np.float32); return x / np.linalg.norm(x, axis=1, keepdims=True)
q, r = unit(n), unit(refs)
search.INDEX_PAIRS = 0 if how == "hnsw" else 10**18
t = time.perf_counter()
a = search.nearest_cosine(q, q, same=True)
b = search.nearest_cosine(q, r)
print(json.dumps({"n": n, "refs": refs, "how": a[2], "seconds": time.perf_counter() - t,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(python, script, *argv) -> dict:
    p = subprocess.run([str(python), "-c", script, *map(str, argv)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=7200, cwd=ROOT)
    if p.returncode:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def imagededup_speed(python, n: int, side: int) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="audit-bench-speed-"))
    for i in range(n):
        base_image(i, side).save(folder / f"s{i:06d}.png")
    script = ("import sys, time, json, resource\nfrom imagededup.methods import PHash\nt = time.perf_counter()\n"
              "m = PHash(verbose=False)\nenc = m.encode_images(image_dir=sys.argv[1])\nt1 = time.perf_counter()\n"
              "d = m.find_duplicates(encoding_map=enc, max_distance_threshold=10)\n"
              "print(json.dumps({'n': len(enc), 'features_s': t1 - t, 'search_s': time.perf_counter() - t1, "
              "'peak_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")
    return run(python, script, folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bases", type=int, default=400)
    ap.add_argument("--copies", type=int, default=40, help="copies per transform")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--refs", type=int, default=10000)
    ap.add_argument("--side", type=int, default=32, help="the speed run's image side in pixels")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--skip-accuracy", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    args = ap.parse_args()
    load = Load()
    try:
        python = imagededup_env.ensure_env()
        print(f"imagededup environment: {python}")
    except imagededup_env.Unavailable as e:
        python = None
        print(f"imagededup not installed, its rows are left out: {e}")
    if not args.skip_accuracy:
        acc = accuracy(args, python)
        print(f"\naccuracy: {acc['images']} images, {acc['planted']} planted pairs ({args.copies} per transform)")
        head = ["method", "threshold", "precision", "predicted", *TRANSFORMS]
        print(" | ".join(head))
        for (name, t), r in sorted(acc["rows"].items()):
            print(" | ".join([name, str(t), f"{r['precision']:.3f}", str(r["predicted"]),
                              *[f"{r[k]:.2f}" for k in TRANSFORMS]]))
    if not args.skip_speed:
        sizes = [int(s) for s in args.sizes.split(",")]
        print(f"\nspeed: gensets audit (hashes: decode, hash, search) of N images ({args.side}x{args.side} PNG) "
              f"against {args.refs} references, each size in its own process")
        got = [run(sys.executable, SPEED, n, args.refs, args.side, ROOT) for n in sizes]
        for g in got:
            print(f"  N={g['n']}: {g['total_s']:.1f} s ({(g['n'] + g['refs']) / g['total_s']:.0f} images/s; features "
                  f"{g['features_s']:.1f} s, search {g['search_s']:.1f} s), peak {g['peak_mib']:.0f} MiB, "
                  f"{g['pairs']} pairs")
        if len(got) > 1:
            a, b = got[0], got[-1]
            print(f"  growth {b['n'] / a['n']:.0f}x images: time x{b['total_s'] / a['total_s']:.1f} (search "
                  f"x{b['search_s'] / a['search_s']:.1f}), peak memory x{b['peak_mib'] / a['peak_mib']:.2f}")
        if python:
            t = imagededup_speed(python, sizes[0], args.side)
            print(f"  imagededup PHash, N={t['n']} within the set: {t['features_s'] + t['search_s']:.1f} s (encode "
                  f"{t['features_s']:.1f} s, find_duplicates {t['search_s']:.1f} s), peak {t['peak_mib']:.0f} MiB")
            print(f"\nembedding search alone ({args.dim}-d unit vectors; within the set and against {args.refs}):")
            for how in ("exact", "hnsw"):
                rows = [run(python, EMBED, n, args.refs, args.dim, ROOT, how) for n in sizes]
                for r in rows:
                    print(f"  {r['how']}: N={r['n']}: {r['seconds']:.1f} s, peak {r['peak_mib']:.0f} MiB")
                if len(rows) > 1:
                    print(f"  {rows[-1]['how']}: growth {rows[-1]['n'] / rows[0]['n']:.0f}x: time "
                          f"x{rows[-1]['seconds'] / rows[0]['seconds']:.1f}, memory x"
                          f"{rows[-1]['peak_mib'] / rows[0]['peak_mib']:.2f}")
    print(f"\n{cores()} cores; other processes used {load.others():.2f} cores on average during the run")


if __name__ == "__main__":
    main()
