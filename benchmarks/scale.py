"""Scale: wall time and peak memory of each step on workspaces of N images, and how they grow with N.

A smoke build of ImageNet-D (tiny models, 42 images in 12 candidate shards) is cloned under new keys into
workspaces of N images in the real format (candidate shards of the same size, manifest, config), then each
step runs in a child process of its own: its wall time is measured inside the child, its peak memory is
the child's ru_maxrss (which includes the interpreter and its imports: a constant). Between two sizes N1 < N2
the table prints the time ratio (linear time: about N2/N1, printed beside it) and the growth of peak memory
in MB (flat memory: a few MB whatever N).

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python benchmarks/scale.py --n 1000 10000
    # --source WS: an existing smoke build (else one is built, ~1 min); --workdir DIR keeps the workspaces

Steps: ``ingest`` (candidate shards -> state.duckdb), ``serve`` (the review page, from nothing to the first
page rendered), ``page`` and ``decide`` (median server time of a request, Flask's test client: pages walked
with their cursors, decisions on successive images), ``finalize --include-pending``, ``card``, ``publish``
(into a local folder), ``build`` with nothing to do (and whether it imported torch).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "imagenet_d.smoke.yaml"
STEPS = ("ingest", "serve", "page", "decide", "finalize", "card", "publish", "build")
REQUESTS = 20  # requests timed per page / decide measurement (the median is shown)

sys.path.insert(0, str(ROOT))  # run from a checkout without installing


@contextlib.contextmanager
def _no_fsync():
    """Cloning is set-up, not measured: skip write_shard's fsyncs (17 ms a shard here) while it runs."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


def clone_workspace(src: Path, dst: Path, n: int) -> int:
    """A workspace of ``n`` images from the committed candidate shards of ``src``: copy 0 is the source itself
    (its units are the config's: a build has nothing to do), copy c > 0 of each sample is keyed ``<key>_<c>``
    (unit ``<unit>-<c>``, provenance updated), in shards as large as the source's. Nothing is ingested.
    Returns the number of images."""
    from gensets.records import Sample
    from gensets.shards import Manifest, iter_shard, write_shard

    units = [(r, [Sample.from_wds(d) for d in iter_shard(src / "candidates" / r["shard"])])
             for r in Manifest(src / "candidates" / "manifest.jsonl").rows()]
    shutil.rmtree(dst, ignore_errors=True)
    (dst / "candidates").mkdir(parents=True)
    shutil.copy(src / "config.yaml", dst / "config.yaml")
    manifest = Manifest(dst / "candidates" / "manifest.jsonl")
    done, copy = 0, 0
    with _no_fsync():
        while done < n:
            for row, samples in units:
                unit = f"{row['unit']}-{copy:05d}" if copy else row["unit"]
                out = []
                for s in samples[: n - done]:
                    key = f"{s.key}_{copy:05d}" if copy else s.key
                    out.append(Sample(key, s.image, s.ext, s.cls, {**s.meta, "key": key, "unit": unit}))
                if not out:
                    break
                info = write_shard(dst / "candidates" / f"{unit}.tar", [s.to_wds() for s in out])
                manifest.append({"unit": unit, "shard": f"{unit}.tar", "sha256": info.sha256, "n": info.n,
                                 "nbytes": info.nbytes, "kept": sum(bool(s.meta.get("kept")) for s in out),
                                 "skipped": [], "rank": 0, "world": 1})
                done += len(out)
            copy += 1
    return done


# ------------------------------------------------------------------------------ in the child process
def _client(ws: Path):
    from gensets.curation.review_state import ReviewState
    from gensets.curation.routes import create_app

    rs = ReviewState(ws, reviewer="bench")
    client = create_app(rs, allowed_hosts={"localhost"}).test_client()
    # the owner's link (what `review serve` prints) exchanged for a session, as the page's script does: the session
    # and its CSRF token on every request
    got = client.post("/api/session", json={"token": rs.owner_token}).get_json()
    client.environ_base["HTTP_X_GENSETS_SESSION"] = got["session"]
    client.environ_base["HTTP_X_CSRF_TOKEN"] = got["csrf"]
    return rs, client


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(step: str, ws: Path, work: Path) -> dict:
    """Run one step on workspace ``ws``; its seconds (and what else it reports)."""
    t0 = time.perf_counter()
    if step == "ingest":
        from gensets.builders.ingest import ingest
        from gensets.workspace import Workspace

        return {"seconds": _timed(lambda: ingest(Workspace(ws))), "images": None}
    if step == "serve":  # from nothing (imports included) to the first page shown (the shell's data)
        rs, client = _client(ws)
        assert client.get("/api/page").status_code == 200
        seconds = time.perf_counter() - t0
        rs.close()
        return {"seconds": seconds}
    if step == "page":
        rs, client = _client(ws)
        times, cursor = [], ""
        for _ in range(REQUESTS + 1):  # the first is a warm-up
            t = time.perf_counter()
            p = client.get(f"/api/items?status=all{cursor}").get_json()
            times.append(time.perf_counter() - t)
            cursor = f"&after={p['after']}" if p["after"] is not None else ""
        rs.close()
        return {"seconds": statistics.median(times[1:])}
    if step == "decide":
        rs, client = _client(ws)
        keys = [it["key"] for it in client.get("/api/items?status=pending").get_json()["items"]][: REQUESTS + 1]
        times = []
        for key in keys:
            t = time.perf_counter()
            assert client.post("/api/decide", json={"key": key, "action": "accept"}).status_code == 200
            times.append(time.perf_counter() - t)
        rs.close()
        return {"seconds": statistics.median(times[1:])}
    if step == "finalize":
        from gensets.builders.finalize import finalize

        return {"seconds": _timed(lambda: finalize(ws, include_pending=True))}
    if step == "card":
        from gensets.cards.card import rerender

        return {"seconds": _timed(lambda: rerender(ws))}
    if step == "publish":
        from gensets.publish import LocalTarget, publish

        repo = work / f"repo-{ws.name}"
        shutil.rmtree(repo, ignore_errors=True)
        return {"seconds": _timed(lambda: publish(ws, f"file://{repo}", target=LocalTarget(repo),
                                                  out=lambda line: None))}
    if step == "build":
        from gensets.cli import main

        with contextlib.redirect_stdout(sys.stderr):
            seconds = _timed(lambda: main(["build", str(SMOKE), "--out", str(ws), "--quiet"]))
        return {"seconds": seconds, "torch": "torch" in sys.modules}
    raise SystemExit(f"unknown step {step}")


# ------------------------------------------------------------------------------ in the parent
def run_child(step: str, ws: Path, work: Path) -> dict:
    """``measure(step)`` in a new process; its result and its peak resident memory (MB)."""
    p = subprocess.Popen([sys.executable, __file__, "--child", step, str(ws), str(work)], stdout=subprocess.PIPE,
                         text=True, cwd=ROOT)
    out = p.stdout.read()
    p.stdout.close()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{step} on {ws}: exit {p.returncode}")
    return {**json.loads(out.strip().splitlines()[-1]), "mb": usage.ru_maxrss / 1024}


def _fmt_s(x: float) -> str:
    return f"{1000 * x:.1f} ms" if x < 1 else f"{x:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 10000], help="workspace sizes (default 1000 10000)")
    ap.add_argument("--source", type=Path, help="a smoke build of configs/imagenet_d.smoke.yaml (default: built)")
    ap.add_argument("--workdir", type=Path, help="where the workspaces go (default: a temp dir, removed after)")
    ap.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    ap.add_argument("--child", nargs=3, metavar=("STEP", "WS", "WORK"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        step, ws, work = args.child
        print(json.dumps(measure(step, Path(ws), Path(work))))
        return

    print(f"load average at start: {os.getloadavg()[0]:.2f} (trust a run that started near 0)")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="gensets-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        source = args.source
        if source is None:
            source = work / "source"
            if not (source / "state.duckdb").exists():
                print("building the smoke workspace ...", flush=True)
                subprocess.run([sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(source),
                                "--quiet"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        results: dict[int, dict] = {}
        sizes = sorted(args.n)
        for n in sizes:
            ws = work / f"ws-{n}"
            t = time.perf_counter()
            got = clone_workspace(source, ws, n)
            print(f"N={got}: cloned in {time.perf_counter() - t:.1f} s; measuring ...", flush=True)
            results[n] = {}
            for step in ["ingest"] + [s for s in args.steps if s != "ingest"]:  # everything else needs state
                r = run_child(step, ws, work)
                results[n][step] = r
                extra = f", torch imported: {r['torch']}" if "torch" in r else ""
                print(f"  {step:<9} {_fmt_s(r['seconds']):>10}  {r['mb']:7.0f} MB{extra}", flush=True)
            if args.workdir is None:
                shutil.rmtree(ws)
        head = ["step"] + [f"N={n}" for n in sizes] + [f"{b}/{a}" for a, b in zip(sizes, sizes[1:], strict=False)]
        print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for step in [s for s in STEPS if s in results[sizes[0]]]:
            cells = [f"{_fmt_s(results[n][step]['seconds'])}, {results[n][step]['mb']:.0f} MB" for n in sizes]
            for a, b in zip(sizes, sizes[1:], strict=False):
                ra, rb = results[a][step], results[b][step]
                cells.append(f"time x{rb['seconds'] / ra['seconds']:.2f} (N x{b / a:g}), "
                             f"memory {rb['mb'] - ra['mb']:+.0f} MB")
            print(f"| {step} | " + " | ".join(cells) + " |")
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
