"""The audit: for every image of a set, its nearest neighbour within the set and in each reference set, by exact
pixels, perceptual hashes and (when a model is named) an embedding; the pairs within the thresholds; the groups of
near-duplicates and which image of each a dataset keeps.

Thresholds (:class:`Options`, each a named option of ``gensets audit`` and ``gensets finalize``; :data:`SOURCES`
says where each default comes from):

- ``exact``: the same decoded pixels (:func:`gensets.audit.hashes.pixel_digest`);
- ``phash`` / ``dhash``: Hamming distance <= 10 of 64 bits, imagededup's default ``max_distance_threshold``;
  with ``mirror`` (default on) a left-right flipped copy counts too (the smaller distance of the image and of its
  mirror image);
- ``embedding``: cosine similarity >= 0.5 for SSCD (``sscd:``; Somepalli et al., CVPR 2023, their replica
  threshold), else >= 0.9, imagededup's CNN default ``min_similarity_threshold``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import GensetsError
from . import search
from .features import Features

if TYPE_CHECKING:
    from .sources import ImageSet

METHODS = ("exact", "phash", "dhash", "embedding")
HAMMING = 10
SSCD_COSINE = 0.5
COSINE = 0.9
DEFAULT_EMBEDDING = "timm:mobilenetv3_small_100.lamb_in1k"  # imagededup's CNN is a MobileNetV3-small (torchvision's)
SOURCES = {
    "exact": "identical decoded RGB pixels (sha256 of the pixel bytes and size)",
    "phash": "imagededup 0.3's PHash and its default max_distance_threshold (10 of 64 bits)",
    "dhash": "imagededup 0.3's DHash and its default max_distance_threshold (10 of 64 bits)",
    "mirror": "gensets: a left-right flipped copy is a copy (imagededup's hashes miss flips)",
    "sscd": "Somepalli et al., CVPR 2023 (\"Diffusion Art or Digital Forgery?\"): SSCD cosine similarity > 0.5 is a "
            "replica",
    "embedding": "imagededup 0.3's CNN default min_similarity_threshold (0.9 cosine on MobileNetV3-small features)",
}


@dataclass(frozen=True)
class Options:
    """What an audit checks and its thresholds."""

    phash: int = HAMMING
    dhash: int = HAMMING
    mirror: bool = True
    model: str | None = None  # the embedding's model spec; None: no embedding
    cosine: float | None = None  # None: SSCD_COSINE for sscd:, else COSINE
    allow_pickle: bool = False

    @property
    def methods(self) -> tuple[str, ...]:
        return ("exact", "phash", "dhash") + (("embedding",) if self.model else ())

    @property
    def cosine_threshold(self) -> float | None:
        if not self.model:
            return None
        if self.cosine is not None:
            return self.cosine
        return SSCD_COSINE if self.model.startswith("sscd:") else COSINE

    def thresholds(self) -> dict:
        """The thresholds as the manifest and the card record them, each with its source."""
        out = {"exact": {"source": SOURCES["exact"]},
               "phash": {"hamming_at_most": self.phash, "source": SOURCES["phash"] if self.phash == HAMMING
                         else "set by the build (--phash-threshold)"},
               "dhash": {"hamming_at_most": self.dhash, "source": SOURCES["dhash"] if self.dhash == HAMMING
                         else "set by the build (--dhash-threshold)"},
               "mirror": {"on": self.mirror, "source": SOURCES["mirror"]}}
        if self.model:
            default = SSCD_COSINE if self.model.startswith("sscd:") else COSINE
            out["embedding"] = {"cosine_at_least": self.cosine_threshold, "model": self.model,
                                "source": (SOURCES["sscd"] if self.model.startswith("sscd:") else SOURCES["embedding"])
                                if self.cosine_threshold == default else "set by the build (--cosine-threshold)"}
        return out


def check_options(o: Options) -> Options:
    for name in ("phash", "dhash"):
        v = getattr(o, name)
        if not isinstance(v, int) or not 0 <= v <= 64:
            raise GensetsError(f"--{name}-threshold: a Hamming distance between 0 and 64 bits, got {v!r}")
    if o.cosine is not None and not -1.0 <= o.cosine <= 1.0:
        raise GensetsError(f"--cosine-threshold: a cosine similarity between -1 and 1, got {o.cosine!r}")
    return o


@dataclass
class Result:
    """An audit's answer for the set (``keys``, ``configs`` in its order): per image its neighbours (``json.audit``
    of a dataset's samples), the pairs within the thresholds, and the counts per config and reference."""

    keys: list[str]
    configs: list[str | None]
    neighbours: list[list[dict]]
    pairs: list[dict]
    references: list[dict]
    index: str = "exact"  # which embedding search ran: exact, or hnsw
    counts: dict = field(default_factory=dict)

    def field(self, i: int) -> dict:
        """``json.audit`` of image ``i``."""
        return {"flagged": any(n["duplicate"] for n in self.neighbours[i]), "neighbours": self.neighbours[i]}

    def by_key(self) -> dict[str, dict]:
        return {k: self.field(i) for i, k in enumerate(self.keys)}


def _subset(f: Features, idx: list[int]) -> Features:
    return Features([f.exact[i] for i in idx], {k: v[idx] for k, v in f.hashes.items()},
                    None if f.embeddings is None else f.embeddings[idx], f.counts)


def find(keys: list[str], configs: list, feats: Features, refs: list[tuple[ImageSet, Features]],
         o: Options) -> Result:
    """Every image's nearest neighbours (within the set: ``self``; in each reference) by each method."""
    n = len(keys)
    neighbours: list[list[dict]] = [[] for _ in range(n)]
    sets = [("self", keys, feats, True)] + [(r.name, r.keys, f, False) for r, f in refs]
    index = "exact"
    for name, rkeys, rf, same in sets:
        # exact pixels: the first other image (in the set's order) with the same digest
        first: dict[str, list[int]] = {}
        for j, d in enumerate(rf.exact):
            first.setdefault(d, []).append(j)
        for i, d in enumerate(feats.exact):
            j = next((j for j in first.get(d, ()) if not (same and j == i)), None)
            if j is not None:
                neighbours[i].append(_entry(name, "exact", rkeys[j], hamming=0, duplicate=True))
        for method, radius in (("phash", o.phash), ("dhash", o.dhash)):
            qs = [feats.hashes[method]] + ([feats.hashes[f"{method}_mirror"]] if o.mirror else [])
            idx, dist = search.nearest_hamming(qs, rf.hashes[method], radius, same=same)
            for i in range(n):
                if idx[i] >= 0:
                    neighbours[i].append(_entry(name, method, rkeys[idx[i]], hamming=int(dist[i]), duplicate=True))
        if o.model and feats.embeddings is not None and rf.embeddings is not None:
            idx, sims, how = search.nearest_cosine(feats.embeddings, rf.embeddings, same=same)
            index = how if how != "exact" else index
            for i in range(n):
                if idx[i] >= 0:
                    c = round(float(sims[i]), 6)
                    neighbours[i].append(_entry(name, "embedding", rkeys[idx[i]], cosine=c,
                                                duplicate=c >= o.cosine_threshold))
    pairs = _pairs(keys, configs, neighbours)
    references = [{"name": "self", "source": "the set itself", "images": n}] + [
        {"name": r.name, "source": r.source, "images": len(r)} for r, _ in refs]
    return Result(list(keys), list(configs), neighbours, pairs, references, index, dict(feats.counts))


def _entry(reference: str, method: str, key: str, *, hamming: int | None = None, cosine: float | None = None,
           duplicate: bool) -> dict:
    return {"reference": reference, "method": method, "key": key, "hamming": hamming, "cosine": cosine,
            "duplicate": duplicate}


def _pairs(keys, configs, neighbours) -> list[dict]:
    """The pairs within a threshold, one per (image, reference, neighbour) (a pair within the set once), with the
    methods that flag it; closest first (exact, then the smallest Hamming distance, then the largest cosine)."""
    found: dict[tuple, dict] = {}
    where = {k: i for i, k in enumerate(keys)}
    for i, entries in enumerate(neighbours):
        for e in entries:
            if not e["duplicate"]:
                continue
            a, b = keys[i], e["key"]
            ident = (e["reference"], *sorted((a, b))) if e["reference"] == "self" else (e["reference"], a, b)
            p = found.setdefault(ident, {"key": ident[1], "config": configs[where[ident[1]]] if e["reference"]
                                         == "self" else configs[i], "reference": e["reference"],
                                         "neighbour": ident[2], "methods": {}})
            value = e["hamming"] if e["method"] != "embedding" else e["cosine"]
            old = p["methods"].get(e["method"])
            if old is None or (value < old if e["method"] != "embedding" else value > old):
                p["methods"][e["method"]] = value
    out = [{**p, "methods": dict(sorted(p["methods"].items()))} for p in found.values()]
    return sorted(out, key=_closeness)


def _closeness(p: dict) -> tuple:
    m = p["methods"]
    return ("exact" not in m, min(m.get("phash", 65), m.get("dhash", 65)), -(m.get("embedding") or -2),
            p["reference"], p["key"], p["neighbour"])


def groups(result: Result) -> list[list[str]]:
    """The groups of near-duplicates within the set (the connected pairs of ``self``), each sorted by key, the
    groups by their first key."""
    parent = {k: k for k in result.keys}

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for p in result.pairs:
        if p["reference"] == "self":
            a, b = root(p["key"]), root(p["neighbour"])
            if a != b:
                parent[max(a, b)] = min(a, b)
    out: dict[str, list[str]] = {}
    for k in result.keys:
        out.setdefault(root(k), []).append(k)
    return sorted((sorted(g) for g in out.values() if len(g) > 1), key=lambda g: g[0])


def keepers(group_list: list[list[str]], reviewed: dict[str, object]) -> list[dict]:
    """Which image of each group stays: the one a reviewer decided first (``reviewed``: key -> decision time),
    else the first by key (the dataset's order); ``[{"kept": key, "dropped": [keys]}]``."""
    out = []
    for g in group_list:
        decided = sorted((reviewed[k], k) for k in g if reviewed.get(k) is not None)
        kept = decided[0][1] if decided else g[0]
        out.append({"kept": kept, "why": "reviewed first" if decided else "first by key",
                    "dropped": [k for k in g if k != kept]})
    return out


def without(result_inputs: tuple, dropped: set[str], o: Options, refs) -> Result:
    """The audit again over the images that stay (their features already computed): their neighbours among the
    images that stay."""
    keys, configs, feats = result_inputs
    idx = [i for i, k in enumerate(keys) if k not in dropped]
    return find([keys[i] for i in idx], [configs[i] for i in idx], _subset(feats, idx), refs, o)


def summary(result: Result, o: Options, embedder=None, *, skipped: list[dict] = (), dropped=None,
            shown: int = 8) -> dict:
    """What the manifest records and the card shows: the methods, thresholds and references checked, the counts per
    config and reference (images flagged, by method), the closest pairs (``shown``), the images dropped."""
    rows: dict[tuple, dict] = {}
    for i, entries in enumerate(result.neighbours):
        config = result.configs[i]
        for ref in result.references:
            r = rows.setdefault((config, ref["name"]), {"config": config, "reference": ref["name"],
                                                        "images": 0, "flagged": 0, **{m: 0 for m in o.methods}})
            r["images"] += 1
            hits = {e["method"] for e in entries if e["duplicate"] and e["reference"] == ref["name"]}
            r["flagged"] += bool(hits)
            for m in hits:
                r[m] += 1
    out = {"methods": list(o.methods), "thresholds": o.thresholds(), "references": result.references,
           "counts": list(rows.values()),
           "pairs": {"total": len(result.pairs),
                     "by_reference": {ref["name"]: sum(p["reference"] == ref["name"] for p in result.pairs)
                                      for ref in result.references},
                     "closest": result.pairs[:shown]}}
    if embedder is not None:
        out["embedding"] = {"spec": embedder.spec, "id": embedder.model_id, "search": result.index}
    if skipped:
        out["skipped"] = list(skipped)
    if dropped is not None:
        out["dropped"] = dropped
    return out
