"""``gensets eval``: every model on every batch, each image decoded once, results into DuckDB.

One loop for every protocol (gensets.evaluation.protocols): per (config, split) of the dataset, the first
record is read, each model is loaded and bound to its protocol (given, or chosen from the loaded model and
the data), then every batch is decoded and prepared for each model in worker processes while the models
score the batches before (:mod:`gensets.evaluation.loader`: the same batches, in the same order, for any number
of workers); at the end of the split each model's run (run row, prediction rows, metric rows) replaces the
same run in the results database (:func:`gensets.evaluation.store.write_run`).

Under ``accelerate launch`` (several GPUs, or ``--multi_gpu`` CPU processes) process r of n scores batches
r, r + n, ...; every process's rows are gathered in batch order and process 0 writes one run, equal row for
row to a one-process run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path

from .. import notices
from ..config import control_char
from ..errors import GensetsError
from ..models.device import default_device, distributed
from ..models.spec import random_weights
from ..progress import bar as progress
from ..records import content_id, library_versions
from ..registry import IDENTIFIERS, PROTOCOLS
from . import store
from .data import Source, Split, open_source
from .loader import SplitBatches, default_workers
from .protocols.base import ClassifierProtocol, Models, Protocol, automatic

# every metric a protocol reports, explained once (gensets eval --help, the README's "Evaluating models")
METRICS = {
    "top1": "fraction of images whose first prediction is (one of) the true class's ids / names; with an interval "
            "(a seeded percentile bootstrap 95%) where the protocol gives one (vqa: the fraction of questions "
            "answered right, vqa_accuracy with its interval)",
    "top5": "fraction whose top 5 hold the true class (imagenet-top5-per-id: the authors' per-id count)",
    "masked_top1": "top-1 with the logits restricted to the classes the dataset uses (ImageNet-D's mapped ids)",
    "masked_top5": "top-5 likewise, counted once per image",
    "mean_per_class": "top-1 averaged over classes (balanced accuracy), each class weighing the same",
    "vqa_accuracy": "vqa: fraction of questions answered right (yes / no, normalised)",
    "vqa_yes_accuracy": "vqa: vqa_accuracy on the questions whose answer is yes",
    "vqa_no_accuracy": "vqa: vqa_accuracy on the questions whose answer is no",
    "vqa_n_yes": "vqa: questions whose answer is yes (a count)",
    "vqa_n_no": "vqa: questions whose answer is no (a count)",
    "two_way_all": "two-way: accuracy counting answers that name both options or neither as wrong",
    "two_way_parsed": "two-way-shuffled: accuracy over the answers that could be parsed",
    "unparseable": "two-way: fraction of answers naming both options or neither",
}

PRECISIONS = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}  # --precision -> torch.autocast dtype


@dataclass(frozen=True)
class EvalConfig:
    """What ``gensets eval`` scores, and how.

    ``protocol``: a registered protocol (gensets.evaluation.protocols), or None to choose one per model and
    split. With ``two-way`` (and ``two-way-shuffled``) the models are VQA / image-text-to-text models and ``clip``
    names the zero-shot CLIP model that picks each image's top wrong class; ``seed`` orders the two options of
    ``two-way-shuffled`` (``two-way`` puts the true class first, as the ImageNet-D authors do). ``templates``:
    zero-shot prompt templates instead of the dataset's. ``workers``: processes that decode and prepare the
    batches (None: :func:`loader.default_workers`, from the machine's cores; 0: this process); the results do
    not depend on it. ``limit``: only the first N images of each split. ``device``: None, the loaders'
    default (gensets.models.device.default_device). ``precision``: ``fp32`` (default: comparable results), or
    ``bf16`` / ``fp16``: the models run under ``torch.autocast`` to that dtype; the run row records it, and a
    run at another precision is another run. ``pin_memory``: batches in pinned memory for non-blocking copies
    (None: when the models run on CUDA). A spec given twice is one model.
    """

    dataset: str
    models: tuple[str, ...]
    db: str | Path
    config: str | None = None
    split: str | None = None
    protocol: str | None = None
    batch_size: int = 32
    workers: int | None = None
    limit: int | None = None
    force: bool = False  # re-score runs that the database holds complete already (else they are skipped)
    quiet: bool = False
    allow_pickle: bool = False
    trust_remote_code: bool = False
    clip: str | None = None
    seed: int = 0
    decoding: str = "authors"  # two-way: how a VLM answers (gensets.labels.twoway.DECODING)
    templates: tuple[str, ...] | None = None
    device: str | None = None
    precision: str = "fp32"
    pin_memory: bool | None = None
    vlm_dtype: str | None = None  # a LLaVA model's weights: fp16 or fp32 (None: fp16 on CUDA, else fp32)
    vlm_aspect: str | None = None  # a LLaVA model's images: pad-square (the authors') or crop (None: pad-square)

    def __post_init__(self):
        object.__setattr__(self, "models", tuple(dict.fromkeys(self.models)))
        if self.templates is not None:
            object.__setattr__(self, "templates", tuple(self.templates))


def _cut(limit: int | None, images: int, size: int | None = None) -> int | None:
    """The --limit that cut a run short, else None: the run saw every sample. A run that stopped at the
    limit was cut short unless the split's ``size`` (when known) is no more than the limit."""
    return limit if limit and images >= limit and (not size or size > limit) else None


def evaluate(cfg: EvalConfig) -> list[dict]:
    """Score every model on every (config, split) of ``cfg.dataset``; returns one summary per run (on every
    process but process 0 of an ``accelerate launch``: nothing)."""
    if cfg.protocol is not None and cfg.protocol not in PROTOCOLS:
        raise GensetsError(f"unknown protocol '{cfg.protocol}' (known: {', '.join(PROTOCOLS)})")
    if cfg.precision not in PRECISIONS:
        raise GensetsError(f"unknown precision '{cfg.precision}' (known: {', '.join(PRECISIONS)})")
    if cfg.workers is not None and cfg.workers < 0:
        raise GensetsError(f"--workers {cfg.workers}: must be 0 (decode in this process) or more")
    if cfg.batch_size < 1:
        raise GensetsError(f"--batch-size {cfg.batch_size}: must be at least 1")
    if cfg.limit is not None and cfg.limit < 1:
        raise GensetsError(f"--limit {cfg.limit}: must be at least 1 (leave it out for every image)")
    for t in cfg.templates or ():
        try:
            ok = t.format("x", c="x") != t.format("y", c="y") and not control_char(t)
        except (ValueError, IndexError, KeyError, AttributeError):  # another {field} or a lone brace
            ok = False
        if not ok:
            raise GensetsError(f"--template {t[:80]!r}: must contain {{}} (or {{c}}) where the class name "
                               "goes, no other braces and no control character")
    (PROTOCOLS.get(cfg.protocol) if cfg.protocol else ClassifierProtocol).check(cfg)
    source = open_source(cfg.dataset, cfg.config, cfg.split)
    if cfg.templates:
        for sp in source.splits:
            sp.templates = list(cfg.templates)
    dist = distributed()
    device = cfg.device or default_device()
    models = Models(allow_pickle=cfg.allow_pickle, trust_remote_code=cfg.trust_remote_code, device=device,
                    vlm={k: v for k, v in (("dtype", cfg.vlm_dtype), ("aspect", cfg.vlm_aspect)) if v})
    versions = library_versions()
    con = store.connect(cfg.db) if dist.rank == 0 else None  # one writer: process 0
    results = []
    try:
        for sp in source.splits:
            results += _evaluate_split(cfg, source, sp, models, con, versions, dist, device)
    finally:
        if con is not None:
            con.close()
    return results


def _identified(sp: Split) -> str | None:
    """The dataset a split is, told from what it is when its samples name no builder: the builder the first
    registered identifier (registry.IDENTIFIERS, declared by the papers) names for it, which may also set its
    class names (e.g. ImageNet-D's folder names -> its authors' names), so its paper's protocols apply."""
    return next((b for _, identify in IDENTIFIERS.items() if (b := identify(sp)) is not None), None)


def _rid(source: Source, sp: Split, spec: str, p: Protocol, cfg: EvalConfig) -> str:
    return store.run_id(source.id, source.revision, sp.config, sp.split, spec, p.run_protocol, cfg.precision)


def _settings(sp: Split, p: Protocol, cfg: EvalConfig) -> str:
    """What changes a run's results besides its identity (run_id): the zero-shot templates, the model's
    revision, its label space and classes, two-way's CLIP, seed and decoding, a LLaVA model's dtype and image aspect
    (gensets.models.vlm). A complete run with other settings is scored again."""
    return content_id([list(getattr(sp, "templates", None) or []), p.model.revision, p.label_space, p.class_names,
                       cfg.clip, cfg.seed, *([cfg.decoding] if p.name.startswith("two-way") else []),
                       *([v] if (v := getattr(p.model, "variant", "")) else [])])  # a LLaVA model's dtype, aspect


def computed_in(model, autocast: str) -> str:
    """The dtype a run's model computed in: its weights' (a LLaVA model loaded in fp16), else the autocast
    dtype (``gensets eval --precision``), else fp32."""
    dtype = str(getattr(getattr(model, "model", None), "dtype", "")).removeprefix("torch.")
    named = {"float16": "fp16", "bfloat16": "bf16"}.get(dtype)
    return named or autocast


def noise(spec: str, p: Protocol, cfg: EvalConfig, first: dict) -> bool:
    """Whether a run's numbers are noise: its model, the CLIP model that picks two-way's wrong options, or the
    generator of its images (the first sample's provenance) has random weights."""
    generator = (first.get("meta") or {}).get("generator") or {}
    return (random_weights(spec) or (p.name.startswith("two-way") and random_weights(cfg.clip))
            or random_weights(generator.get("spec") if isinstance(generator, dict) else None))


def _bind(cfg: EvalConfig, models: Models, spec: str, sp: Split, first: dict) -> Protocol:
    if cfg.protocol is None:
        protocol, model = automatic(models, spec, sp, first)
    else:
        protocol = PROTOCOLS.get(cfg.protocol)
        model = protocol.load(models, spec, sp)
    return protocol(model, sp, first=first, cfg=cfg, models=models)


def _autocast(precision: str, device_type: str):
    if PRECISIONS[precision] is None:
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device_type, dtype=getattr(torch, PRECISIONS[precision]))


def _evaluate_split(cfg: EvalConfig, source: Source, sp: Split, models: Models, con, versions, dist,
                    device: str) -> list[dict]:
    import torch

    data = SplitBatches(sp, cfg.batch_size, cfg.limit)
    first = data.first()  # read before the models are bound: it tells the protocol
    if first is None:
        return []
    sp.builder = sp.builder or first["meta"].get("builder") or _identified(sp)  # a protocol may follow its paper
    bound = {spec: _bind(cfg, models, spec, sp, first) for spec in cfg.models}
    out = []
    if not cfg.force:  # resume: a complete run with the same identity and settings is not scored again
        done = {}
        for spec, p in bound.items():
            old = store.finished_run(con, _rid(source, sp, spec, p, cfg), _settings(sp, p, cfg)) if con else None
            if old is not None:
                done[spec] = {"model": spec, "dataset": source.id, "revision": source.revision, "config": sp.config,
                              "split": sp.split, "protocol": p.name, "variant": p.run_protocol,
                              "precision": cfg.precision, "skipped": True, **old}
        done = dict(x for part in dist.gather([list(done.items())]) for x in part)  # process 0's, everywhere
        for spec in done:
            del bound[spec]
            if dist.rank == 0:  # a note, not progress: printed under --quiet too
                notices.notice(f"skipped {spec} on {sp.config}/{sp.split} [{done[spec]['variant']}]: complete in "
                               f"{cfg.db} (--force to score it again)")
        out = list(done.values()) if dist.rank == 0 else []
        if not bound:
            return out
    device_type = torch.device(device).type
    workers = default_workers(dist.world) if cfg.workers is None else cfg.workers
    pin = device_type == "cuda" if cfg.pin_memory is None else cfg.pin_memory
    seconds = {spec: 0.0 for spec in bound}
    scored_batches = []  # (batch index, images, {spec: (rows, extra)}) of this process
    started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    bar = progress(total=data.total if dist.world == 1 else None, desc=f"{sp.config}/{sp.split}", unit="img",
                   disable=cfg.quiet or dist.rank != 0)
    batches = data.prepared([p.prepare for p in bound.values()], rank=dist.rank, world=dist.world,
                            workers=workers, pin_memory=pin)
    for b, records, inputs in batches:
        per_model = {}
        for (spec, p), x in zip(bound.items(), inputs, strict=True):
            t = time.perf_counter()
            with _autocast(cfg.precision, device_type):
                scored = p.score(x, records)
            seconds[spec] += time.perf_counter() - t
            per_model[spec] = (scored.rows, scored.extra)
        scored_batches.append((b, len(records), per_model))
        bar.update(len(records))
    bar.close()
    finished = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    scored_batches = sorted(dist.gather(scored_batches), key=lambda x: x[0])  # every process's, in batch order
    all_seconds = dist.gather([seconds])
    if dist.rank != 0:
        return []
    rows = {spec: [] for spec in bound}
    extra = {spec: {} for spec in bound}
    for _, _, per_model in scored_batches:
        for spec, (r, ex) in per_model.items():
            rows[spec] += r
            for name, values in ex.items():
                extra[spec].setdefault(name, []).extend(values)
    images = sum(n for _, n, _ in scored_batches)
    execution = {"device": device_type, "processes": dist.world, "workers": workers, "pin_memory": pin,
                 "batch_size": cfg.batch_size}
    for spec, p in bound.items():
        mets = p.metrics(rows[spec], extra[spec])
        n, s = len(rows[spec]), sum(x[spec] for x in all_seconds)
        run = {"dataset": source.id, "dataset_revision": source.revision, "config": sp.config,
               "split": sp.split, "model": spec, "model_id": p.model.model_id, "model_revision": p.model.revision,
               "protocol": p.run_protocol, "label_space": p.label_space, "n": n, "started": started,
               "finished": finished, "seconds": s, "images_per_second": n / s if s and p.row_per_image else None,
               "versions": versions, "class_names": p.class_names, "sample_limit": _cut(cfg.limit, images, data.n),
               "precision": computed_in(p.model, cfg.precision), "autocast": cfg.precision,
               "random_weights": noise(spec, p, cfg, first), "execution": execution, "settings": _settings(sp, p, cfg)}
        store.write_run(con, run, rows[spec], mets, p.answers(rows[spec], extra[spec]))
        out.append({"model": spec, "dataset": source.id, "revision": source.revision, "config": sp.config,
                    "split": sp.split, "protocol": p.name, "variant": p.run_protocol, "n": n, "precision": cfg.precision,
                    "metrics": {m["name"]: m["value"] for m in mets},
                    "intervals": {m["name"]: [m["lo"], m["hi"]] for m in mets if m["lo"] is not None}})
    return out
