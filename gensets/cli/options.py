"""Arguments that more than one command group declares, so that a group never imports another: the audit's checks
and thresholds (gensets audit, and finalize's audit stage), and where work runs (--backend and its Ray options: gensets
build's units, the audit's embedding)."""

from __future__ import annotations

import argparse

from ..audit import check
from ..config import bits, nonneg_float, positive_int
from ..config import cosine as cosine_similarity
from ..errors import GensetsError


def add_backend_options(g, backend_help: str, run: str) -> None:
    """--backend local|ray, and Ray's --workers, --address, --gpus-per-worker (``run``: what a local cluster is
    started for)."""
    g.add_argument("--backend", choices=("local", "ray"), default="local", help=backend_help)
    g.add_argument("--workers", type=positive_int, metavar="N",
                   help="with --backend ray: N workers, one CPU each (default: every CPU of the cluster)")
    g.add_argument("--address", metavar="ADDR",
                   help="with --backend ray: join the Ray cluster at ADDR (e.g. auto, or HOST:6379 of `ray start "
                   f"--head`); default: a local cluster on 127.0.0.1, started for the {run} and stopped after it")
    g.add_argument("--gpus-per-worker", type=nonneg_float, metavar="G",
                   help="with --backend ray: GPUs each worker reserves (default 0: CPU workers; 1: one worker per GPU; "
                   "0.5: two workers share a GPU)")


def backend_of(a) -> dict:
    """What add_backend_options declared, as the library takes it."""
    return {"backend": a.backend, "workers": a.workers, "address": a.address, "gpus_per_worker": a.gpus_per_worker}


def add_audit_options(p, *, finalize: bool = False) -> None:
    """The audit's checks and thresholds (gensets audit, gensets finalize)."""
    g = p.add_argument_group("audit (duplicates and contamination)")
    g.add_argument("--against", action="append", default=[], metavar="[NAME=]SOURCE",
                   help="a reference set to check for copies: a folder of images (a real test set), a dataset folder, "
                   "a workspace or hf:<dataset> (its test split); repeatable. A workspace's builder adds its own "
                   "(GenBench: its real test set, as `test`)")
    g.add_argument("--embedding", nargs="?", const=check.DEFAULT_EMBEDDING, metavar="SPEC",
                   help=f"also compare image embeddings by cosine similarity (default model {check.DEFAULT_EMBEDDING}; "
                   "sscd:PATH: SSCD's TorchScript file, Somepalli et al.'s replica detector; any classifier spec)")
    g.add_argument("--cosine-threshold", type=cosine_similarity, metavar="X",
                   help=f"a pair when the embeddings' cosine similarity >= X (default {check.SSCD_COSINE} for sscd:, "
                   f"Somepalli et al. 2023; else {check.COSINE}, imagededup's CNN default)")
    g.add_argument("--phash-threshold", type=bits, default=check.HAMMING, metavar="BITS",
                   help=f"a pair when the pHashes differ in at most BITS of 64 (default {check.HAMMING}: imagededup's "
                   "max_distance_threshold)")
    g.add_argument("--dhash-threshold", type=bits, default=check.HAMMING, metavar="BITS",
                   help=f"the same for dHash (default {check.HAMMING})")
    g.add_argument("--no-mirror", action="store_true",
                   help="a left-right flipped copy is not a copy (by default the hashes of each image's mirror count)")
    g.add_argument("--allow-pickle", action="store_true", help="load the embedding model's pickle weights (sscd:, "
                   "torchvision:)")
    add_backend_options(g, "where the images the feature cache lacks are decoded, hashed and embedded: local (this "
                        "process, or each process its share under accelerate launch; the default) or ray (Ray workers "
                        "take chunks of images; needs pip install 'gensets[distributed]')", "audit")
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
        return ("near-duplicates", cosine_similarity(value) if "." in value else bits(value))
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: THRESHOLD is a number of bits or a cosine ({e})") from None


def audit_options(a) -> check.Options:
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
