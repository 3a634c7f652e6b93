"""gensets audit: duplicates within a dataset and copies of reference images (test sets, training galleries). Its
options, which finalize's audit stage shares, are declared in options.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ..audit.run import audit
from ..builders.backends import embedding_pool
from ..config import nonneg_int
from ..evaluation import store
from .common import log, print_rows
from .options import add_audit_options, audit_options, backend_of


def add_parser(sub) -> None:
    p = sub.add_parser("audit", help="find near-duplicates in a dataset and copies of reference images",
                       description="For every image of TARGET (a workspace: its dataset/, else its candidates; a "
                       "dataset folder; a folder of images) its nearest neighbour within the set and in each "
                       "reference, by exact pixels, perceptual hashes (pHash, dHash) and, with --embedding, an image "
                       "embedding. Features are cached per image: an audit run again re-reads nothing it has seen. What the "
                       "cache lacks is computed here, on Ray workers (--backend ray), or by each process of "
                       "`accelerate launch --multi_gpu --num_processes N -m gensets.cli audit ...` for its share.")
    p.add_argument("target")
    add_audit_options(p)
    p.add_argument("--db", help="write every image's nearest neighbours into this results database (table audit)")
    p.add_argument("--pairs", type=nonneg_int, default=20, metavar="N", help="list the N closest pairs (default 20)")
    p.add_argument("--json", action="store_true", help="print the summary (and every pair) as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_audit)


def _audit(a) -> int:
    o = audit_options(a)
    pool = embedding_pool(o.model, o.allow_pickle, quiet=a.quiet or a.json, **backend_of(a))
    try:
        done = audit(a.target, a.against, o, log=log(a.quiet or a.json), pool=pool)
    finally:
        if pool is not None:
            pool.close()
    if done is None:  # a process of accelerate launch other than the first: it computed its share
        return 0
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
        print_rows(["image", "reference", "neighbour", "distances"],
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
