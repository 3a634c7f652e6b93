"""gensets audit: duplicates within a dataset and copies of reference images (test sets, training galleries); the
audit options finalize shares (its audit stage)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from ..audit import check
from ..audit.run import audit
from ..errors import GensetsError
from ..evaluation import store
from .common import log, print_rows


def add_options(p, *, finalize: bool = False) -> None:
    """The audit's checks and thresholds (gensets audit, gensets finalize)."""
    g = p.add_argument_group("audit (duplicates and contamination)")
    g.add_argument("--against", action="append", default=[], metavar="[NAME=]SOURCE",
                   help="a reference set to check for copies: a folder of images (a real test set), a dataset folder, "
                   "a workspace or hf:<dataset> (its test split); repeatable. A workspace's builder adds its own "
                   "(GenBench: its real test set, as `test`)")
    g.add_argument("--embedding", nargs="?", const=check.DEFAULT_EMBEDDING, metavar="SPEC",
                   help=f"also compare image embeddings by cosine similarity (default model {check.DEFAULT_EMBEDDING}; "
                   "sscd:PATH: SSCD's TorchScript file, Somepalli et al.'s replica detector; any classifier spec)")
    g.add_argument("--cosine-threshold", type=float, metavar="X",
                   help=f"a pair when the embeddings' cosine similarity >= X (default {check.SSCD_COSINE} for sscd:, "
                   f"Somepalli et al. 2023; else {check.COSINE}, imagededup's CNN default)")
    g.add_argument("--phash-threshold", type=int, default=check.HAMMING, metavar="BITS",
                   help=f"a pair when the pHashes differ in at most BITS of 64 (default {check.HAMMING}: imagededup's "
                   "max_distance_threshold)")
    g.add_argument("--dhash-threshold", type=int, default=check.HAMMING, metavar="BITS",
                   help=f"the same for dHash (default {check.HAMMING})")
    g.add_argument("--no-mirror", action="store_true",
                   help="a left-right flipped copy is not a copy (by default the hashes of each image's mirror count)")
    g.add_argument("--allow-pickle", action="store_true", help="load the embedding model's pickle weights (sscd:, "
                   "torchvision:)")
    if finalize:
        g.add_argument("--no-audit", action="store_true", help="publish without the audit (no json.audit, no section)")
        g.add_argument("--drop", metavar="near-duplicates[=THRESHOLD]", type=drop_value,
                       help="leave out near-duplicates within the set: of each group keep the image reviewed first, "
                       "else the first by key (recorded in the manifest and the card); THRESHOLD: the pHash / dHash "
                       "distance in bits (an integer) or the embedding's cosine (a number with a point)")


def drop_value(text: str):
    what, sep, value = text.partition("=")
    if what != "near-duplicates":
        raise argparse.ArgumentTypeError(f"{text!r}: the only thing to drop is near-duplicates[=THRESHOLD]")
    if not sep:
        return ("near-duplicates", None)
    try:
        return ("near-duplicates", float(value) if "." in value else int(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: THRESHOLD is a number of bits or a cosine") from None


def options_of(a) -> check.Options:
    phash, dhash, cosine = a.phash_threshold, a.dhash_threshold, a.cosine_threshold
    drop = getattr(a, "drop", None)
    if drop and drop[1] is not None:
        if isinstance(drop[1], float):
            if not a.embedding:
                raise GensetsError(f"--drop near-duplicates={drop[1]}: a cosine needs --embedding")
            cosine = drop[1]
        else:
            phash = dhash = drop[1]
    return check.check_options(check.Options(phash=phash, dhash=dhash, mirror=not a.no_mirror, model=a.embedding,
                                             cosine=cosine, allow_pickle=a.allow_pickle))


def add_parser(sub) -> None:
    p = sub.add_parser("audit", help="find near-duplicates in a dataset and copies of reference images",
                       description="For every image of TARGET (a workspace: its dataset/, else its candidates; a "
                       "dataset folder; a folder of images) its nearest neighbour within the set and in each "
                       "reference, by exact pixels, perceptual hashes (pHash, dHash) and, with --embedding, an image "
                       "embedding. Features are cached per image: an audit run again re-reads nothing it has seen.")
    p.add_argument("target")
    add_options(p)
    p.add_argument("--db", help="write every image's nearest neighbours into this results database (table audit)")
    p.add_argument("--pairs", type=int, default=20, metavar="N", help="list the N closest pairs (default 20)")
    p.add_argument("--json", action="store_true", help="print the summary (and every pair) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_audit)


def _audit(a) -> int:
    o = options_of(a)
    done = audit(a.target, a.against, o, log=log(a.quiet or a.json))
    s, result = done.summary, done.result
    if a.db:
        con = store.connect(a.db)
        try:
            store.write_audit(con, a.target, db_rows(done))
        finally:
            con.close()
    if a.json:
        print(json.dumps({**s, "pairs": {**s["pairs"], "all": result.pairs}, "features": result.counts},
                         indent=1, default=str))
        return 0
    methods = s["methods"]
    print_rows(["config", "reference", "images", "flagged", *methods],
               [[c["config"], c["reference"], c["images"], c["flagged"], *[c[m] for m in methods]] for c in s["counts"]],
               "table")
    shown = result.pairs[:a.pairs]
    if shown:
        print(f"\n{len(result.pairs)} pair(s) within the thresholds; the closest {len(shown)}:")
        print_rows(["image", "reference", "neighbour", "within"],
                   [[p["key"], p["reference"], p["neighbour"], ", ".join(f"{m} {v}" for m, v in p["methods"].items())]
                    for p in shown], "table")
    else:
        print("\nno pair within the thresholds")
    for sk in s.get("skipped", []):
        print(f"not checked: {sk['name']} ({sk['source']}): {sk['why']}")
    c = result.counts
    print(f"features: {c.get('images', 0)} images, {c.get('hashed', 0)} hashed, {c.get('embedded', 0)} embedded, "
          f"{c.get('cached', 0)} from the cache")
    return 0


def db_rows(done) -> list[dict]:
    """Every image's nearest neighbours as rows of the results database's ``audit`` table."""
    r, o = done.result, done.options
    sources = {x["name"]: x["source"] for x in r.references}
    when = datetime.now(UTC).replace(tzinfo=None)
    thresholds = {"exact": 0.0, "phash": float(o.phash), "dhash": float(o.dhash), "embedding": o.cosine_threshold}
    return [{"config": r.configs[i], "key": k, "reference": e["reference"], "reference_source": sources.get(e["reference"]),
             "method": e["method"], "neighbour": e["key"], "hamming": e["hamming"], "cosine": e["cosine"],
             "duplicate": e["duplicate"], "threshold": thresholds[e["method"]],
             "model": o.model if e["method"] == "embedding" else None, "audited": when}
            for i, k in enumerate(r.keys) for e in r.neighbours[i]]
