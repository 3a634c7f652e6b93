"""``gensets eval``: every model on every batch, each image decoded once, results into DuckDB.

One loop for every protocol (gensets.evaluation.protocols): per (config, split) of the dataset, the first
batch is read, each model is loaded and bound to its protocol (given, or chosen from the loaded model and
the data), then every batch is decoded and prepared for each model in the background while the models
score the one before; at the end of the split each model's run (run row, prediction rows, metric rows)
replaces the same run in the results database (:func:`gensets.evaluation.store.write_run`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import queue
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import GensetsError
from ..registry import PROTOCOLS
from . import store
from .data import Source, Split, open_source
from .protocols.base import ClassifierProtocol, Models, Protocol, automatic


@dataclass(frozen=True)
class EvalConfig:
    """What ``gensets eval`` scores, and how.

    ``protocol``: a registered protocol (gensets.evaluation.protocols), or None to choose one per model and
    split. With ``two-way`` (and ``two-way-shuffled``) the models are VQA / image-text-to-text models and ``clip``
    names the zero-shot CLIP model that picks each image's top wrong class; ``seed`` orders the two options of
    ``two-way-shuffled`` (``two-way`` puts the true class first, as the ImageNet-D authors do). ``templates``:
    zero-shot prompt templates instead of the dataset's. ``workers``: batches decoded ahead in the
    background (0: none). ``limit``: only the first N images of each split. ``device``: None, the loaders'
    default (gensets.models.device.default_device). A spec given twice is one model.
    """

    dataset: str
    models: tuple[str, ...]
    db: str | Path
    config: str | None = None
    split: str | None = None
    protocol: str | None = None
    batch_size: int = 32
    workers: int = 1
    limit: int | None = None
    quiet: bool = False
    allow_pickle: bool = False
    trust_remote_code: bool = False
    clip: str | None = None
    seed: int = 0
    templates: tuple[str, ...] | None = None
    device: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "models", tuple(dict.fromkeys(self.models)))
        if self.templates is not None:
            object.__setattr__(self, "templates", tuple(self.templates))


def _batches(records: Iterator[dict], size: int, limit: int | None) -> Iterator[list[dict]]:
    it = itertools.islice(records, limit) if limit else records
    while batch := list(itertools.islice(it, size)):
        yield batch


def _prefetch(gen: Iterator, depth: int) -> Iterator:
    """Read, decode and preprocess the next batches in a background thread while the models run."""
    if depth <= 0:
        yield from gen
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def worker():
        try:
            for item in gen:
                q.put(item)
            q.put(done)
        except BaseException as e:  # hand the error to the consumer
            q.put(e)

    threading.Thread(target=worker, daemon=True).start()
    while (item := q.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


def _cut(limit: int | None, images: int, size: int | None = None) -> int | None:
    """The --limit that cut a run short, else None: the run saw every sample. A run that stopped at the
    limit was cut short unless the split's ``size`` (when known) is no more than the limit."""
    return limit if limit and images >= limit and (not size or size > limit) else None


def evaluate(cfg: EvalConfig) -> list[dict]:
    """Score every model on every (config, split) of ``cfg.dataset``; returns one summary per run."""
    from tqdm.auto import tqdm

    from ..records import library_versions

    if cfg.protocol is not None and cfg.protocol not in PROTOCOLS:
        raise GensetsError(f"unknown protocol '{cfg.protocol}' (known: {', '.join(PROTOCOLS)})")
    (PROTOCOLS.get(cfg.protocol) if cfg.protocol else ClassifierProtocol).check(cfg)
    source = open_source(cfg.dataset, cfg.config, cfg.split)
    if cfg.templates:
        for sp in source.splits:
            sp.templates = list(cfg.templates)
    models = Models(allow_pickle=cfg.allow_pickle, trust_remote_code=cfg.trust_remote_code, device=cfg.device)
    versions = library_versions()
    con = store.connect(cfg.db)
    results = []
    try:
        for sp in source.splits:
            results += _evaluate_split(cfg, source, sp, models, con, versions, tqdm)
    finally:
        con.close()
    return results


def _bind(cfg: EvalConfig, models: Models, spec: str, sp: Split, first: dict) -> Protocol:
    if cfg.protocol is None:
        protocol, model = automatic(models, spec, sp, first)
    else:
        protocol = PROTOCOLS.get(cfg.protocol)
        model = protocol.load(models, spec, sp)
    return protocol(model, sp, first=first, cfg=cfg, models=models)


def _evaluate_split(cfg: EvalConfig, source: Source, sp: Split, models: Models, con, versions, tqdm) -> list[dict]:
    batches = _batches(sp.records(), cfg.batch_size, cfg.limit)
    first = next(batches, None)  # read before the models are bound: it tells the protocol
    if first is None:
        return []
    sp.builder = sp.builder or first[0]["meta"].get("builder")  # a protocol may follow its builder's paper
    bound = {spec: _bind(cfg, models, spec, sp, first[0]) for spec in cfg.models}
    rows = {spec: [] for spec in bound}
    extra = {spec: {} for spec in bound}
    seconds = {spec: 0.0 for spec in bound}
    images = 0
    started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    total = min(sp.n, cfg.limit) if sp.n and cfg.limit else (sp.n or cfg.limit)
    bar = tqdm(total=total, desc=f"{sp.config}/{sp.split}", unit="img", disable=cfg.quiet, file=sys.stderr)

    def prepared(stream):  # decode (in records) and each model's own preprocessing, off the main thread
        for batch in stream:
            decoded = [r["image"] for r in batch]
            yield batch, [p.prepare(decoded) for p in bound.values()]

    for batch, inputs in itertools.chain(prepared([first]), _prefetch(prepared(batches), cfg.workers)):
        for (spec, p), x in zip(bound.items(), inputs, strict=True):
            t = time.perf_counter()
            scored = p.score(x, batch)
            seconds[spec] += time.perf_counter() - t
            rows[spec] += scored.rows
            for name, values in scored.extra.items():
                extra[spec].setdefault(name, []).extend(values)
        images += len(batch)
        bar.update(len(batch))
    bar.close()
    finished = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    out = []
    for spec, p in bound.items():
        mets = p.metrics(rows[spec], extra[spec])
        n, s = len(rows[spec]), seconds[spec]
        run = {"dataset": source.id, "dataset_revision": source.revision, "config": sp.config,
               "split": sp.split, "model": spec, "model_id": p.model.model_id, "model_revision": p.model.revision,
               "protocol": p.run_protocol, "label_space": p.label_space, "n": n, "started": started,
               "finished": finished, "seconds": s, "images_per_second": n / s if s and p.row_per_image else None,
               "versions": versions, "class_names": p.class_names, "sample_limit": _cut(cfg.limit, images, sp.n)}
        store.write_run(con, run, rows[spec], mets)
        out.append({"model": spec, "dataset": source.id, "revision": source.revision, "config": sp.config,
                    "split": sp.split, "protocol": p.name, "variant": p.run_protocol, "n": n,
                    "metrics": {m["name"]: m["value"] for m in mets},
                    "intervals": {m["name"]: [m["lo"], m["hi"]] for m in mets if m["lo"] is not None}})
    return out
