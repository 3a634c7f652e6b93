"""GenBench's other data types, built, stored and scored like a generated set (GenBench Sec. 2.4, Fig. 3, Table 1):
two strategies of kind ``"data"`` (their images are not generated, so they combine with nothing):

``original``   K images per class of the dataset's own training split (``original:``: a folder of class folders or
               an ``hf:`` split; default the dataset itself), in a seeded random order of the class's images
               (:func:`original_order`): the K-shot set is the first K, so every smaller K is a prefix of it.
``retrieval``  K images per class from a pool the user provides (``retrieval.pool``: a folder of images each with a
               ``<stem>.txt`` caption, or an ``hf:`` image-text dataset), ranked by CLIP similarity between the
               class's queries (the dataset's templates filled with the class name) and each caption
               (``text-to-text``, the authors' ``t2t_sep_prompt_30nn`` in tools/prep_retrieval.py) or image
               (``text-to-image``): each query keeps its ``neighbours`` nearest items, an item's score is the mean
               similarity over the queries that found it (``avg_dist`` in tools/text_similarity.py), items are
               ranked by score (:func:`rank_pool`). Each image records its best query, score, caption and source;
               MTS (Sec. 3.3) is :func:`gensets.metrics.mean_text_similarity` of those scores.

Every image records where it came from in the ``data`` provenance field (type, item, sha256, caption, query,
score, draw seed). Images are stored like generated ones: ``resize`` (bicubic), then the config's image format.
"""

from __future__ import annotations

import hashlib
import random
import time
from functools import lru_cache
from pathlib import Path

from ...errors import DataError, GensetsError
from ...images import decode_image, encode_image, is_image_file
from ...models import load_classifier
from ...records import Sample, derive_seed
from ...registry import STRATEGIES
from ...shards import sha256_file
from ...sources.classes import class_folders, match_classes, report_match, source_name
from ...sources.images import hf_split
from ...timings import record_timing
from .fields import key_of, provenance
from .pool import hf_bytes, pool_entries, pool_identity, pool_images, pool_item
from .strategies import Strategy, fill


class DataStrategy(Strategy):
    """A data type that is not generated: ``images(unit, ctx)`` gives each shot's image bytes and provenance."""

    kind = "data"

    def shot(self, p, i, base, row, references=None):
        raise GensetsError(f"{self.name}: a data type, not a prompt strategy: it has no prompts")

    def images(self, unit, ctx) -> list[tuple[bytes, dict]]:
        raise NotImplementedError

    def run(self, unit, ctx, build_id: str) -> list[Sample]:
        p, cfg = unit.payload, ctx.cfg
        t0 = time.perf_counter()
        got = self.images(unit, ctx)
        samples = []
        for i, (data, meta) in zip(p["shots"], got, strict=True):
            img = decode_image(data)
            if cfg.resize:
                img = img.resize((cfg.resize, cfg.resize), resample=3)  # 3: bicubic, as generated images
            key = key_of(p, i)
            prov = provenance(
                key=key, build=build_id, unit=unit.id, config=p["config"], label=p["class"],
                label_index=p["label_index"], strategy=p["strategy"], data=meta, width=img.width, height=img.height,
                source=meta["item"], kept=True, review=None)
            samples.append(Sample(key=key, image=encode_image(img, cfg.image.format, cfg.image.quality),
                                  ext=cfg.image.format, cls=p["label_index"], meta=prov))
        seconds = self.seconds(unit, ctx, time.perf_counter() - t0)
        if seconds is not None:
            record_timing(build_id, unit.id, len(samples), seconds, 0.0)
        return samples

    def seconds(self, unit, ctx, elapsed: float) -> float | None:
        """The measured seconds this unit's images cost (None: not a time-priced data type)."""
        return None


def _data(type_: str, item: str, sha: str, *, caption=None, query=None, score=None, draw_seed=None) -> dict:
    return {"type": type_, "item": item, "sha256": sha, "caption": caption, "query": query, "score": score,
            "draw_seed": draw_seed}


# ------------------------------------------------------------------ original data
def original_order(ids: list, seed: int) -> list:
    """A class's images in a seeded random order (``random.Random(seed).shuffle``): the K-shot draw is the first K."""
    order = list(ids)
    random.Random(seed).shuffle(order)
    return order


@lru_cache(maxsize=8)
def _original_candidates(source: str, split: str, hf_config, label_column, base_dir: Path,
                         class_names: tuple[str, ...]) -> dict[str, list]:
    """Every image of each class in the original source: folder: paths inside the folder (sorted); hf: row indices."""
    if source.startswith("folder:"):
        root = base_dir / source[len("folder:"):]
        if not root.is_dir():
            raise GensetsError(f"original: folder not found: {root}")
        folders = class_folders(root)
        matched, _ = match_classes([f.name for f in folders], class_names, by_index=False)
        out: dict[str, list] = {n: [] for n in class_names}
        for j, i in sorted(matched.items()):
            out[class_names[i]] += sorted(f.relative_to(root).as_posix() for f in folders[j].iterdir()
                                          if f.is_file() and is_image_file(f))
        return out
    ds, column, label, _ = hf_split(source[len("hf:"):], split, what=f"original {source}", hf_config=hf_config,
                                    label_column=label_column)
    matched, how = match_classes(label.names, class_names)
    report_match(f"original {source}", label.names, class_names, matched, how)
    out = {n: [] for n in class_names}
    for row, y in enumerate(ds[column]):  # the label column only: no image is read
        if y in matched:
            out[class_names[matched[y]]].append(row)
    return out


@STRATEGIES.register("original")
class OriginalData(DataStrategy):
    description = "original data: K images per class of the dataset's own training split, seeded draw"

    def pool(self, cfg, name, files=None):
        o = cfg.original
        src = o.source or cfg.dataset
        ids = _original_candidates(src, o.split, o.hf_config, o.label_column, cfg.base_dir, cfg.class_names)[name]
        if len(ids) < cfg.shots:
            raise GensetsError(f"original {src}: class {name!r} has {len(ids)} images, shots: {cfg.shots}")
        seed = derive_seed(cfg.seed, source_name(cfg.dataset), "original", name)
        drawn = original_order(ids, seed)[: cfg.shots]
        if src.startswith("folder:"):
            root = cfg.base_dir / src[len("folder:"):]
            drawn = [[f, sha256_file(root / f)] for f in drawn]
        else:
            drawn = [[r, None] for r in drawn]
        return {"original": {"source": source_name(src), "split": o.split if src.startswith("hf:") else None,
                             "draw_seed": seed, "items": drawn}}

    def images(self, unit, ctx):
        p, o = unit.payload, ctx.cfg.original
        src = o.source or ctx.cfg.dataset
        orig = p["original"]
        picked = [orig["items"][i] for i in p["shots"]]
        if src.startswith("folder:"):
            root = ctx.cfg.base_dir / src[len("folder:"):]
            blobs = [(root / f).read_bytes() for f, _ in picked]
            ids = [f"{orig['source']}/{f}" for f, _ in picked]
        else:
            blobs = hf_bytes(src, o.split, o.hf_config, [r for r, _ in picked])
            ids = [f"{orig['source']}/{o.split}#{r}" for r, _ in picked]
        out = []
        for (_, sha), item, data in zip(picked, ids, blobs, strict=True):
            got = hashlib.sha256(data).hexdigest()
            if sha is not None and got != sha:
                raise DataError(f"original {src}: {item} changed since the build was planned; run it again")
            out.append((data, _data("original", item, got, draw_seed=orig["draw_seed"])))
        return out

    def details(self, cfg) -> str:
        return (f"- original: {cfg.shots} images per class of `{cfg.original.source or cfg.dataset}` "
                f"({cfg.original.split}), a seeded random draw (each image records it).")


# ------------------------------------------------------------------ retrieval
def rank_pool(sims, neighbours: int) -> list[tuple[int, float, int]]:
    """Pool items ranked for one class from ``sims`` (queries x pool items, cosine similarities): each query keeps
    its ``neighbours`` most similar items; an item's score is the mean similarity over the queries that kept it
    (the authors' ``avg_dist``); ``(item, score, its most similar query)`` by score, ties by pool order."""
    import numpy as np

    sims = np.asarray(sims, dtype=np.float64)
    found: dict[int, list[tuple[float, int]]] = {}
    for q in range(sims.shape[0]):
        for j in np.argsort(-sims[q], kind="stable")[:neighbours]:
            found.setdefault(int(j), []).append((float(sims[q, j]), q))
    scored = [(j, float(np.mean([s for s, _ in hits])), max(hits, key=lambda h: (h[0], -h[1]))[1])
              for j, hits in found.items()]
    return sorted(scored, key=lambda t: (-t[1], t[0]))


def retrieve(cfg, names: list[str]) -> dict[str, dict]:
    """For each class of ``names``: its ranked hits ``[(pool index, score, query)]`` and the measured query seconds
    (its queries embedded, compared with the pool, ranked; embedding the pool is an index built once, not counted)."""
    import torch

    r = cfg.retrieval
    entries = pool_entries(cfg)
    clf = load_classifier(r.clip, labels=list(names), templates=list(cfg.templates))
    with torch.no_grad():
        if r.mode == "text-to-text":
            pool = torch.cat([clf.embed_text([c for _, _, c in entries[i:i + 64]]) for i in range(0, len(entries), 64)])
        else:
            pool = torch.cat([clf.embed(clf.preprocess([decode_image(b) for b in pool_images(cfg, range(i, min(i + 32,
                              len(entries))))])) for i in range(0, len(entries), 32)])
        pool = torch.nn.functional.normalize(pool.float(), dim=-1)
        out = {}
        for name in names:
            t0 = time.perf_counter()
            queries = [fill(t, name) for t in cfg.templates]
            q = torch.nn.functional.normalize(clf.embed_text(queries).float(), dim=-1)
            ranked = rank_pool((q @ pool.T).cpu().numpy(), r.neighbours)
            out[name] = {"hits": [(j, s, queries[b]) for j, s, b in ranked], "seconds": time.perf_counter() - t0}
    return out


@STRATEGIES.register("retrieval")
class RetrievedData(DataStrategy):
    description = "retrieved data: K images per class from a pool, ranked by CLIP similarity with the class's queries"
    needs = ("retrieval",)

    def pool(self, cfg, name, files=None):
        return {"retrieval": {**pool_identity(cfg), "queries": [fill(t, name) for t in cfg.templates]}}

    def images(self, unit, ctx):
        p = unit.payload
        got = ctx.retrieval[p["class"]]["hits"]
        if len(got) < max(p["shots"]) + 1:
            raise DataError(f"retrieval {ctx.cfg.retrieval.pool}: {len(got)} images retrieved for class "
                            f"{p['class']!r}, shots: {ctx.cfg.shots} (raise retrieval.neighbours or the pool)")
        entries = pool_entries(ctx.cfg)
        hits = [got[i] for i in p["shots"]]
        blobs = pool_images(ctx.cfg, [j for j, _, _ in hits])
        return [(data, _data("retrieval", pool_item(ctx.cfg, j), hashlib.sha256(data).hexdigest(),
                             caption=entries[j][2], query=q, score=s))
                for (j, s, q), data in zip(hits, blobs, strict=True)]

    def seconds(self, unit, ctx, elapsed):
        """The class's measured query time, shared by its K images."""
        return ctx.retrieval[unit.payload["class"]]["seconds"] * len(unit.payload["shots"]) / ctx.cfg.shots

    def details(self, cfg) -> str:
        r = cfg.retrieval
        return (f"- retrieval: {cfg.shots} images per class from `{r.pool}`, ranked by `{r.clip}` {r.mode} "
                f"similarity with the dataset's templates filled with the class name ({r.neighbours} nearest per "
                "query; score = mean over the queries that found an image); each image records query, score, caption.")
