"""What every smoke config's build, finalize, eval and report produce, as sha256 digests.

``python tests/golden.py --write`` records them in tests/data/golden.json; ``test_golden.py`` rebuilds
everything and compares, so a refactoring that changes a single byte of a shard, a card, an eval result or
a report is caught. ``--write-cpu`` records another CPU vendor's own entries; ``--write-shared`` takes a change
made on purpose (a card's text) for every vendor where the record shows it is the same on all
(:func:`write_shared`). Only what is measured (generator and evaluation seconds) is masked before hashing.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden.json"
SMOKE = ["imagenet_d", "genbench", "recognition", "vqa", "failure_modes", "imagenet_d.quality", "genbench.baselines"]

# measured seconds and what is computed from them: masked, everything else is hashed as written
_MEASURED = [
    re.compile(r"Measured while building: .*?per 1,000\)\.", re.S),
    re.compile(r'"(seconds[a-z_]*|[a-z_]*_seconds|seconds_per_image|cost_per_image|cost_per_1000|'
               r'images_per_second|cost_total)": [-0-9.e+]+'),
    re.compile(r"\| [0-9.]+ \| [0-9.]+ [A-Z]{3} \|$", re.M),  # GenBench report: s / image, cost / image
    re.compile(r"\| [0-9.]+ \| [0-9.]+ [A-Z]{3} \| [0-9.]+ [A-Z]{3} \|"),  # ... and the cost of the set
    re.compile(r"\| [0-9.e+-]+ [A-Z]{3} \| [0-9.e+-]+ [A-Z]{3} \|"),  # GenBench report at equal K: both costs
    re.compile(r"\| [0-9.]+ s(?= \|)"),  # GenBench report: evaluation seconds per metric
    # what the machine is, not what gensets did: the environment recorded with a build (versions, CPU model,
    # commit) differs between machines and checkouts; the bytes it made must not (reproducible: strict)
    re.compile(r'"env": ?"[0-9a-f]+"'),  # a unit's environment id (candidates/manifest.jsonl)
    re.compile(r"<!-- environment -->.*?<!-- /environment -->", re.S),  # the card's environment table
]
_MEASURED_FIGURES = ("shots.png",)  # GenBench report: score against the measured cost
_TMP: list[str] = []  # the temporary folder everything is built in: written into reports as <tmp>
_ROOT = [str(ROOT)]  # this checkout (configs, reference folders), wherever it is cloned: <root>


def _placeless(text: str) -> str:
    """``text`` with the temporary folder and this checkout's path written as <tmp> and <root>."""
    for tmp in _TMP:
        text = text.replace(tmp, "<tmp>")
    for root in _ROOT:
        text = text.replace(root, "<root>")
    return text


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in (".md", ".json", ".jsonl"):
        text = _placeless(data.decode("utf-8"))
        for pat in _MEASURED:
            text = pat.sub("<measured>", text)
        if path.name == "manifest.json":  # dataset/manifest.json: each environment's units kept, the rest masked
            obj = json.loads(text)
            obj["environments"] = [e["units"] for e in obj.get("environments", [])]
            text = json.dumps(obj, sort_keys=True)
        data = text.encode()
    return hashlib.sha256(data).hexdigest()


def _tree(root: Path, skip=()) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _digest(p) for p in sorted(root.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
            and p.name not in skip}


def _cli(*args) -> str:
    """``gensets ARGS`` in this process (as ``gensets.cli.main``; the libraries are imported once for all the
    calls); its stdout. A build pins torch to one thread, and the CLI may set variables: the thread count and the
    environment are restored after each call."""
    import torch

    from gensets.cli import main

    out, err = io.StringIO(), io.StringIO()
    threads, env = torch.get_num_threads(), dict(os.environ)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:  # what a command sets for itself (GENSETS_ANNOUNCE) ends with it, as with a process of its own
        torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(env)
    if code:
        raise RuntimeError(f"gensets {' '.join(map(str, args))}: exit {code}\n{err.getvalue()[-3000:]}")
    return out.getvalue()


def snapshot(tmp: Path) -> dict:
    """Build, finalize, evaluate and report every smoke config under ``tmp``; the digests of it all."""
    out: dict = {}
    _TMP[:] = [str(tmp)]
    ws = {}
    for name in SMOKE:
        w = tmp / name
        _cli("build", ROOT / "configs" / f"{name}.smoke.yaml", "--out", w, "--quiet")
        _cli("finalize", w, "--include-pending")
        ws[name] = w
        out[f"{name}/candidates"] = _tree(w / "candidates")
        out[f"{name}/dataset"] = _tree(w / "dataset")
    out["failure_modes/modes.json"] = _digest(ws["failure_modes"] / "modes.json")
    db = tmp / "results.duckdb"
    evals = {
        "imagenet_d": ["--model", "tiny:resnet", "--model", "tiny:clip", "--model", "tiny:vit"],
        "imagenet_d/dataset": ["--model", "tiny:hf-clip"],
        "recognition": ["--model", "tiny:resnet", "--model", "tiny:vit", "--protocol", "wordset"],
        "recognition#default": ["--model", "tiny:clip"],
        "vqa": ["--model", "tiny:vilt-vqa", "--protocol", "vqa"],
        "failure_modes": ["--model", "tiny:vit"],
        "imagenet_d#two-way": ["--model", "tiny:vilt-vqa", "--protocol", "two-way", "--clip", "tiny:clip",
                               "--config", "texture"],
        "imagenet_d#two-way-shuffled": ["--model", "tiny:vilt-vqa", "--protocol", "two-way-shuffled", "--clip",
                                        "tiny:clip", "--config", "texture"],
    }
    for what, args in evals.items():
        target = tmp / what.split("#")[0]
        where = tmp / "recognition.duckdb" if what.startswith("recognition") else db
        out[f"eval {what}"] = json.loads(_cli("eval", target, "--db", where, "--json", "--quiet", *args))
    out.update(reports(tmp, report_args(tmp, ws, db)))
    for what in ("leaderboard", "query"):
        args = (["leaderboard", "--db", db, "--format", "json"] if what == "leaderboard" else
                ["query", "--db", db, "--format", "json", "SELECT model, protocol, config, n FROM runs "
                 "ORDER BY ALL"])
        out[what] = json.loads(_cli(*args))
    for name, where in (("results", db), ("recognition", tmp / "recognition.duckdb")):  # every prediction
        rows = _cli("query", "--db", where, "--format", "json",
                    "SELECT r.model, r.protocol, r.config, p.* EXCLUDE (run_id) FROM predictions p "
                    "JOIN runs r USING (run_id) ORDER BY ALL")
        out[f"predictions {name}"] = hashlib.sha256(rows.encode()).hexdigest()
    out["blas"] = blas()
    return out


def report_args(tmp: Path, ws: dict, db: Path) -> dict[str, list]:
    """The smoke reports of the snapshot: {name: arguments of ``gensets report``}. The GenBench ones need only their
    workspaces (``ws``); the others the snapshot's evaluation databases."""
    return {
        "recognition": ["recognition", "--db", tmp / "recognition.duckdb"],
        "failure_modes": ["failure-modes", ws.get("failure_modes"), "--db", db],
        "genbench": ["genbench", ws.get("genbench"), "--test", ROOT / "configs" / "genbench.smoke-refs",
                     "--clip", "tiny:clip", "--features", "tiny:resnet"],
        "genbench.baselines": ["genbench", ws.get("genbench.baselines"), "--test", ROOT / "configs" / "genbench.smoke-refs",
                               "--clip", "tiny:clip", "--selection-clip", "same", "--shots", "2,4"],
    }


def reports(tmp: Path, args: dict[str, list]) -> dict:
    """``gensets report`` of each of ``args`` into ``tmp``/report-NAME: its files' digests, and report.json's shape
    and floats (compared within :func:`tolerance`)."""
    out = {}
    for name, a in args.items():
        rep = tmp / f"report-{name}"
        _cli("report", *a, "--out", rep)
        out[f"report {name}"] = _tree(rep, skip=_MEASURED_FIGURES)
        if (rep / "report.json").is_file():
            obj = json.loads(_placeless((rep / "report.json").read_text(encoding="utf-8")))
            out[f"report {name} / shape"] = hashlib.sha256(json.dumps(_shape(obj), sort_keys=True).encode()).hexdigest()
            out[f"report {name} / numbers"] = _numbers(obj)
    return out


# The one thing the suite cannot pin: numpy's and scipy's OpenBLAS picks its kernels by CPU (its core type: SkylakeX,
# Haswell, Zen, ...), and OPENBLAS_CORETYPE is the platform's to set, not the tests' (ENVIRONMENT.md). So a report's
# report.json is compared by its shape (every key, string, int and length) exactly and its floats each within the
# tolerance of the computation that made it (BLAS_TOLERANCES), on every machine; its figures (drawn from those
# floats) byte for byte only where the OpenBLAS kernels are the recorded ones. Everything else (shards, cards,
# report.md, eval results and predictions) is compared byte for byte everywhere.
#
# Each tolerance covers one computation that goes through OpenBLAS and says why it is that size. gensets computes
# what goes through BLAS in float64 (gensets/quality/functional.py), so the rest move by float64 rounding only: every
# float is held within FLOAT64_TOLERANCE relative, and the ones named below within their own (absolute) bound.
# tests/test_blas_core_types.py runs the reports under the core types a machine of this kind may set (Haswell,
# SkylakeX, Zen, Sandybridge, Prescott) against the record.
EPS = 2.0 ** -52  # float64's unit roundoff (x2)
# Any float64 value downstream of a BLAS product (CLER's similarities, the probes' logits, a correlation of them): a
# dot product or sum of n terms in another order differs by at most n eps sum|terms|; these reports' products are of
# <= 96-wide features (1e-14 relative at most, well-conditioned). Measured: 1.1e-16 absolute (Pearson of CLIP score).
FLOAT64_TOLERANCE = 1e-12
FEATURES = 96  # the widest features of the smoke reports (tiny:resnet's 96; tiny:clip's embeddings 32)
COVARIANCE = 0.01  # a bound on |S1 S2| (2-norm) of those features: at most 0.0022 measured
FD_SPREAD = 0.004  # a bound below the spread (std) of the FDs of a report's rows: 0.0045 at least in the record
SUBSET = 12  # the largest KID subset of the smoke reports (min(1000, N, M) images)
KID_TOLERANCE = 3 * SUBSET ** 2 * EPS * 8  # ~7.7e-13 absolute
FD_TOLERANCE = 2 * FEATURES * (FEATURES * EPS * COVARIANCE) ** 0.5  # ~2.8e-6 absolute
CORRELATION_TOLERANCE = 2 * 2 * FD_TOLERANCE / FD_SPREAD  # ~2.8e-3 absolute
BLAS_TOLERANCES = [
    # KID (torch-fidelity: the unbiased MMD^2 of the cubic kernel (a.b / D + 1)^3 over subsets of m images): three
    # sums of about m^2 kernel values, each <= 8 here (|a.b / D| <= 1; 1.1 at most measured), whose difference is KID,
    # so float64 rounding in another order moves it by at most 3 m^2 eps 8 absolute however small KID is (the
    # cancellation that made float32 KID move by 1e-4 relative). Measured: 8e-17.
    (r"\.kid", "KID: a difference of kernel sums", KID_TOLERANCE),
    # Frechet distance (torch-fidelity: |mu1 - mu2|^2 + tr S1 + tr S2 - 2 tr sqrt(S1 S2), the last from the D
    # eigenvalues of the non-symmetric S1 S2 by LAPACK's dgeev). A K-shot set has N < D images, so S1 S2 has rank < N
    # and most of its eigenvalues are rounding noise of size ~D eps |S1 S2| around 0, which another kernel rounds
    # otherwise; sqrt turns a noise of d into one of sqrt(d). With |S1 S2| <= COVARIANCE, the D roots move the
    # trace by at most D sqrt(D eps COVARIANCE), and FD by twice that: FD_TOLERANCE, absolute. Measured: 6e-10 at
    # most across the five core types (float64 features; float32 ones moved it by 3e-8, and KID by 1e-4 relative).
    (r"\.fd", "Frechet distance: roots of near-zero eigenvalues", FD_TOLERANCE),
    # A correlation over the rows' FDs (GenBench's Fig. 4 check: Pearson / Spearman of FD with the linear probe, and
    # their p-values): each FD within FD_TOLERANCE, and the rows' FDs spread by >= FD_SPREAD (their std), so Pearson's
    # r moves by at most 2 FD_TOLERANCE / FD_SPREAD; a p-value of n >= 4 points by at most 2x that (|dp/dr| <= 2
    # there). Spearman's moves only if two FDs lie within FD_TOLERANCE of each other (none do in the record).
    # Measured: 1.4e-8 at most.
    (r"\.correlations\..*\.fd\.(pearson|spearman)(_p)?", "a correlation of FD", CORRELATION_TOLERANCE),
]


def tolerance(path: str, recorded: float) -> tuple[float, str]:
    """The absolute tolerance of the report.json float at ``path`` (recorded as ``recorded``) and the computation it
    covers: its own bound from BLAS_TOLERANCES, else float64 rounding (FLOAT64_TOLERANCE relative)."""
    for pattern, what, tol in BLAS_TOLERANCES:
        if re.search(pattern + "$", path):
            return tol, what
    return FLOAT64_TOLERANCE * abs(recorded), "float64 rounding"


# The other thing the pins cannot reach: torch's elementwise sqrt, exp, log, tanh, erf, ... call MKL's VML, which
# honours MKL_CBWR on Intel CPUs but on AMD ones always runs its AVX2 kernels (measured on an AMD EPYC (Zen 4):
# mkl_vml_kernel_sSqrt_EXHA whatever MKL_CBWR or MKL_ENABLE_INSTRUCTIONS say; torch.sqrt of float32 rounds 587 of
# determinism.sqrt_misses's 4096 inputs wrongly there, whatever the pins). So a few entries differ between the CPU
# vendors (the recognition smoke build: one image in 24, 96 pixels by one level): golden.json
# records them again, whole, under "by_cpu" for each other vendor (``python tests/golden.py --write-cpu`` on such a
# machine); everything else is compared with the one record on every x86-64 CPU.


def vendor() -> str:
    """This CPU's vendor (``GenuineIntel``, ``AuthenticAMD``, ...; the machine name where /proc/cpuinfo has none)."""
    import platform

    from gensets.determinism import cpuinfo

    return cpuinfo("vendor_id") or platform.machine()


def expected(record: dict, cpu: str) -> dict:
    """What a snapshot on a CPU of vendor ``cpu`` must be: the record, with that vendor's entries in place of
    the record's where it has its own (``by_cpu``)."""
    base = {k: v for k, v in record.items() if k not in ("by_cpu", "cpu", "stale")}
    return {**base, **record.get("by_cpu", {}).get(cpu, {})}


# A change made on purpose (a new field in every shard) to an entry one vendor records differently from another can
# only be recorded on a CPU of the vendor at hand (write_shared): the other vendor's value is then the one from
# before the change, not a value any build of this code gives there. The record names those entries per vendor
# (``stale``: "key: file", or "key"), until a --write or --write-cpu on that vendor's CPU records them again; a
# snapshot on that vendor leaves them out of the comparison and says so (test_golden), every other entry held.
def stale(record: dict, cpu: str) -> list[str]:
    """The entries of ``record`` that were last recorded for vendor ``cpu`` before a change recorded elsewhere."""
    return list(record.get("stale", {}).get(cpu, []))


def without(entries: dict, names: list[str]) -> dict:
    """``entries`` (a snapshot or an expectation) without the entries ``names`` ("key: file", or "key") name."""
    out = copy.deepcopy(entries)
    for name in names:
        key, sep, part = name.partition(": ")
        if not sep:
            out.pop(key, None)
        elif isinstance(out.get(key), dict):
            out[key].pop(part, None)
    return out


def write_shared(record: dict, snap: dict, cpu: str) -> tuple[dict, str]:
    """The record updated from a snapshot on one vendor's CPU, for every vendor where that is known: a change (a
    card's text) must be recorded for both vendors, and this machine is only one of them. A file (or an eval's
    field) that the record holds the same for every vendor was the same on both, so its new value is taken for all;
    one the vendors record differently is updated for ``cpu`` only, and named: rerun ``--write`` or ``--write-cpu``
    on the other vendor's CPU; until then the record names it stale for the others (:func:`stale`), and every entry
    of ``cpu`` is this snapshot's (none stale for it). (An emulated CPU is no stand-in: a snapshot under ``qemu-x86_64 -cpu Skylake-Server``
    differed from the real Intel record in most shards.) Returns the record and what was done."""
    vendors = [record["cpu"], *record.get("by_cpu", {})]
    if cpu not in vendors:
        sys.exit(f"{GOLDEN} has no entries for {cpu}: record them first with --write-cpu")
    views = {v: expected(record, v) for v in vendors}
    new = copy.deepcopy(record)
    behind = new.get("stale", {}).pop(cpu, [])  # every entry of this vendor is this snapshot's from now on
    holders = {v: new if v == record["cpu"] else new["by_cpu"][v] for v in vendors}
    shared, own = 0, []
    for key, got in snap.items():
        mine = views[cpu].get(key)
        if key == "blas" or mine == got:
            continue
        olds = [views[v].get(key) for v in vendors]
        if not all(isinstance(o, dict) for o in olds) or not isinstance(got, dict):
            parts = {None: got}  # a single digest: taken whole
        else:
            parts = {f: got.get(f) for f in got.keys() | mine.keys() if got.get(f) != mine.get(f)}
        for part, value in parts.items():
            at = [o if part is None else o.get(part) for o in olds]  # each vendor's value now
            same = all(a == at[0] for a in at)
            for v in (vendors if same else [cpu]):
                holder = holders[v]
                if key not in holder and v != record["cpu"]:
                    if same:
                        continue  # this vendor reads the entry from the record's own, updated above
                    holder[key] = copy.deepcopy(views[v].get(key))  # the vendor's own copy from now on
                if part is None:
                    holder[key] = value
                elif value is None:
                    holder[key].pop(part, None)
                else:
                    holder.setdefault(key, {})[part] = value
            shared += same
            if not same:
                own.append(f"{key}: {part}" if part else key)
                for v in vendors if own[-1] not in behind else ():  # (an entry catching up changes no other's)
                    if v != cpu and own[-1] not in new.setdefault("stale", {}).setdefault(v, []):
                        new["stale"][v].append(own[-1])
    if not new.get("stale", True):
        del new["stale"]
    what = f"{shared} changes taken for every vendor ({', '.join(vendors)})"
    if own:
        what += f"; {len(own)} for {cpu} only, rerun on the others: " + "; ".join(own)
    return new, what


def blas() -> list[str]:
    """The BLAS libraries loaded (numpy's, scipy's) with the kernels each chose."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    import threadpoolctl

    return sorted(f"{i['internal_api']} {i['version']} {i.get('architecture')}" for i in threadpoolctl.threadpool_info()
                  if i["internal_api"] == "openblas")


_MEASURED_KEY = re.compile(r"seconds[a-z_]*|[a-z_]*_seconds|seconds_per_image|cost_per_image|cost_per_1000|"
                           r"images_per_second|cost_total")


def _shape(obj):
    """``obj`` with every float replaced by None (ints, strings, keys and lengths kept)."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shape(v) for v in obj]
    return None if isinstance(obj, float) else obj


def _numbers(obj, path: str = "") -> dict[str, float]:
    """Every float of ``obj`` by its path, measured seconds and costs left out."""
    if isinstance(obj, dict):
        return {p: v for k, x in obj.items() if not _MEASURED_KEY.fullmatch(k) for p, v in _numbers(x, f"{path}.{k}").items()}
    if isinstance(obj, list):
        return {p: v for i, x in enumerate(obj) for p, v in _numbers(x, f"{path}[{i}]").items()}
    return {path: obj} if isinstance(obj, float) else {}


def compare(want: dict, got: dict) -> dict:
    """What differs between two snapshots: {key: detail}. Exact, but for report.json (its shape exactly, its floats
    within :func:`tolerance`), and for a report's figures under another OpenBLAS (not compared: drawn from those
    floats)."""
    other_blas = want.get("blas") != got.get("blas")
    changed = {}
    for k in sorted(want.keys() | got.keys()):
        a, b = want.get(k), got.get(k)
        if k == "blas" or a == b:
            continue
        if k.endswith(" / numbers") and isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
            far = {p: (a[p], b[p], tolerance(p, a[p])[1]) for p in a if abs(a[p] - b[p]) > tolerance(p, a[p])[0]}
            if far:
                changed[k] = far
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            files = {f: (a.get(f), b.get(f)) for f in a.keys() | b.keys() if a.get(f) != b.get(f)
                     and not (k.startswith("report ") and (f == "report.json" or (other_blas and f.endswith(".png"))))}
            if files:
                changed[k] = files
            continue
        changed[k] = (a, b)
    return changed


def scrub(obj, tmp: Path):
    """Workspace paths written into eval output and results are the temp folder's: made relative."""
    text = json.dumps(obj, sort_keys=True).replace(str(tmp), "<tmp>")
    return json.loads(text)


def main() -> None:
    import tempfile

    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    os.environ.update(env)
    cache = tempfile.mkdtemp(prefix="golden-cache-")  # tiny models built afresh, as the suite builds them
    os.environ.update({"GENSETS_CACHE": f"{cache}/gensets", "HF_HOME": f"{cache}/hf"})
    sys.path.insert(0, str(ROOT))
    from gensets import determinism

    determinism.pin("strict")  # the suite's kernels (tests/conftest.py), before torch first runs
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    record = json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.is_file() else {}
    cpu = vendor()
    if "--write-cpu" in sys.argv and cpu == record.get("cpu", cpu):
        sys.exit(f"{GOLDEN} was recorded on {cpu}: --write records it, --write-cpu is for another vendor's CPU")
    with tempfile.TemporaryDirectory() as d:
        d = keep or d
        snap = scrub(snapshot(Path(d)), Path(d))
    if "--write-shared" in sys.argv:
        snap, what = write_shared(record, snap, cpu)
    elif "--write-cpu" in sys.argv:  # this vendor's own entries: those that differ from the record
        base = expected(record, "")
        own = {k: v for k, v in snap.items() if k != "blas" and base.get(k) != v}
        record.setdefault("by_cpu", {})[cpu] = own
        record.get("stale", {}).pop(cpu, None)  # recorded here now
        snap, what = record, f"{len(own)} entries of their own for {cpu}"
    else:
        others = sorted(record.get("by_cpu", {}))
        left = {v: names for v, names in record.get("stale", {}).items() if v != cpu}
        snap = {**snap, "cpu": cpu, **({"by_cpu": record["by_cpu"]} if others else {}), **({"stale": left} if left else {})}
        what = f"recorded on {cpu}" + (f"; by_cpu kept for {', '.join(others)}: rerun --write-cpu there" if others else "")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{GOLDEN}: {sum(len(v) if isinstance(v, dict) else 1 for v in snap.values())} digests, {what}")


if __name__ == "__main__" and ({"--write", "--write-cpu", "--write-shared"} & set(sys.argv)):
    main()
