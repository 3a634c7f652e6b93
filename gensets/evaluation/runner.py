"""``gensets eval``: every model on every batch, each image decoded once, results into DuckDB."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import queue
import sys
import threading
import time
from collections.abc import Iterator

from ..errors import GensetsError
from ..labels import protocols as P
from ..sources.packaged import imagenet_d_class_map
from . import store
from .data import Split, open_source


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


def summarize(preds: list[dict], extra: dict[str, list[bool]], seed: int = 0) -> list[dict]:
    """Metric rows of one run: top-1 (with a seeded bootstrap 95% interval), top-5, mean per class."""
    import numpy as np

    from .. import metrics as M

    c1 = np.array([p["correct1"] for p in preds], dtype=bool)
    c5 = np.array([p["correct5"] for p in preds], dtype=bool)
    out = []
    for name, correct in [("top1", c1), ("top5", c5), *((k, np.array(v, dtype=bool)) for k, v in extra.items())]:
        lo, hi = M.bootstrap_ci(correct.astype(float), seed=seed)
        out.append({"name": name, "value": M.accuracy(correct), "lo": lo, "hi": hi})
    targets = np.array([-1 if p["target"] is None else p["target"] for p in preds])
    if (targets >= 0).all():
        out.append({"name": "mean_per_class", "value": M.mean_per_class_accuracy(c1, targets),
                    "lo": None, "hi": None})
    return out


def evaluate(dataset: str, models: list[str], db: str, *, config: str | None = None,
             split: str | None = None, protocol: str | None = None, batch_size: int = 32,
             workers: int = 1, limit: int | None = None, quiet: bool = False,
             allow_pickle: bool = False, trust_remote_code: bool = False,
             clip: str | None = None, seed: int = 0, templates: list[str] | None = None,
             device: str | None = None) -> list[dict]:
    """Score every model on every (config, split) of ``dataset``; returns one summary per run.

    With ``protocol="two-way"`` the models are VQA / image-text-to-text models and ``clip`` names the
    zero-shot CLIP model that picks each image's top wrong class. ``device``: None, the loaders' default
    (gensets.models.device.default_device).
    """
    from tqdm.auto import tqdm

    from ..models import load_classifier, parse_spec
    from ..records import library_versions

    models = list(dict.fromkeys(models))  # a spec given twice is one run, not doubled predictions
    if protocol is not None and protocol not in (*P.PROTOCOLS, "two-way", "vqa"):
        raise GensetsError(f"unknown protocol '{protocol}' (known: {', '.join(P.PROTOCOLS)}, two-way, vqa)")
    if protocol == "vqa":
        return evaluate_vqa(dataset, models, db, config=config, split=split, batch_size=batch_size, limit=limit,
                            quiet=quiet, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code,
                            device=device)
    if protocol == "two-way":
        return evaluate_two_way(dataset, models, db, clip=clip, config=config, split=split, seed=seed,
                                batch_size=batch_size, limit=limit, quiet=quiet, allow_pickle=allow_pickle,
                                trust_remote_code=trust_remote_code, device=device)
    for spec in models:
        parse_spec(spec)
    source = open_source(dataset, config, split)
    if templates:
        for sp in source.splits:
            sp.templates = list(templates)
    con = store.connect(db)
    results = []
    loaded: dict = {}
    try:
        for sp in source.splits:
            results += _evaluate_split(source, sp, models, con, loaded, protocol=protocol,
                                       batch_size=batch_size, workers=workers, limit=limit, quiet=quiet,
                                       load=lambda spec, kw: load_classifier(
                                           spec, allow_pickle=allow_pickle,
                                           trust_remote_code=trust_remote_code, device=device, **kw),
                                       versions=library_versions(), tqdm=tqdm)
    finally:
        con.close()
    return results


def _evaluate_split(source, sp: Split, models, con, loaded, *, protocol, batch_size, workers, limit,
                    quiet, load, versions, tqdm) -> list[dict]:
    batches = _batches(sp.records(), batch_size, limit)
    first = next(batches, None)  # read before the models are bound: it tells the protocol
    if first is None:
        return []
    # The label space a zero-shot (CLIP) model gets: the dataset's class names under the default or the
    # zero-shot protocol, ImageNet-1k under any other. Other loaders ignore it, and the protocol follows
    # the loaded classifier's kind, not its name.
    if protocol == "zero-shot" or (protocol is None and sp.class_names):
        kw = P.model_kwargs("zero-shot", sp.class_names, sp.templates)
    elif protocol is not None:
        from ..labels.imagenet import imagenet_names

        kw = {"labels": imagenet_names()}
    else:
        kw = {}
    bound = []
    for spec in models:
        key = (spec, tuple(kw.get("labels") or ()))
        model = loaded.get((spec, ())) or loaded.get(key)
        if model is None:
            model = load(spec, kw)
            loaded[key if model.kind in P.ZERO_SHOT_KINDS else (spec, ())] = model
        proto = protocol or P.choose(model.kind, model.label_names, sp.class_names, first[0]["meta"])
        class_map = imagenet_d_class_map() if (
            proto == "imagenet" and first[0]["meta"].get("builder") == "imagenet-d") else None
        synonyms = None
        if proto == "wordset":
            from ..labels.wordset import SYNONYMS as synonyms
        bound.append((spec, model, P.Bound(proto, model, sp.class_names, class_map, synonyms)))
    preds = {spec: [] for spec in models}
    extra = {spec: {} for spec in models}
    seconds = {spec: 0.0 for spec in models}
    started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    total = min(sp.n, limit) if sp.n and limit else (sp.n or limit)
    bar = tqdm(total=total, desc=f"{sp.config}/{sp.split}", unit="img", disable=quiet, file=sys.stderr)
    def prepared(stream):  # decode (in records) and each model's own preprocessing, off the main thread
        for batch in stream:
            images = [r["image"] for r in batch]
            yield batch, [model.preprocess(images) for _, model, _ in bound]

    for batch, inputs in itertools.chain(prepared([first]), _prefetch(prepared(batches), workers)):
        for (spec, model, b), x in zip(bound, inputs, strict=True):
            t = time.perf_counter()
            scored = b.score(model.logits(x), batch)
            seconds[spec] += time.perf_counter() - t
            for r, top, sc, tg in zip(batch, scored.top5, scored.scores, scored.targets, strict=True):
                preds[spec].append({"key": r["key"], "target": r["target"], "target_ids": tg, "top5": top,
                                    "scores": sc, "correct1": P.hit(top, tg, 1), "correct5": P.hit(top, tg, 5)})
            for name, hits in scored.extra.items():
                extra[spec].setdefault(name, []).extend(hits)
        bar.update(len(batch))
    bar.close()
    finished = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    out = []
    for spec, model, b in bound:
        rows = preds[spec]
        mets = summarize(rows, extra[spec])
        run = {"dataset": source.id, "dataset_revision": source.revision, "config": sp.config,
               "split": sp.split, "model": spec, "model_id": model.model_id,
               "model_revision": model.revision, "protocol": b.name,
               "label_space": "dataset" if b.name in ("zero-shot", "native") else f"model ({len(model.label_names)})",
               "n": len(rows), "started": started, "finished": finished, "seconds": seconds[spec],
               "images_per_second": len(rows) / seconds[spec] if seconds[spec] else None,
               "versions": versions, "class_names": sp.class_names,
               "sample_limit": _cut(limit, len(rows), sp.n)}
        store.write_run(con, run, rows, mets)
        out.append({"model": spec, "dataset": source.id, "revision": source.revision, "config": sp.config,
                    "split": sp.split, "protocol": b.name, "n": len(rows),
                    "metrics": {m["name"]: m["value"] for m in mets},
                    "intervals": {m["name"]: [m["lo"], m["hi"]] for m in mets if m["lo"] is not None}})
    return out


def evaluate_two_way(dataset: str, models: list[str], db: str, *, clip: str | None, config=None,
                     split=None, seed: int = 0, batch_size: int = 16, limit=None, quiet=False,
                     allow_pickle=False, trust_remote_code=False, device: str | None = None) -> list[dict]:
    """ImageNet-D's protocol for VLMs: choose between the true class and CLIP's top wrong class.

    ``top1`` counts unparseable answers as wrong; ``two_way_parsed`` is the paper's variant that
    drops them from the denominator; ``unparseable`` is their fraction.
    """
    from tqdm.auto import tqdm

    from ..labels.twoway import score_two_way
    from ..models import load_classifier, load_vqa
    from ..records import library_versions

    if not clip:
        raise GensetsError("protocol two-way needs --clip SPEC: the CLIP model that picks the wrong class")
    source = open_source(dataset, config, split)
    vlms = {spec: load_vqa(spec, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, device=device)
            for spec in models}
    con = store.connect(db)
    out = []
    try:
        for sp in source.splits:
            if not sp.class_names:
                raise GensetsError(f"protocol two-way needs the class names of {sp.config}/{sp.split}")
            names = [P.readable(n) for n in sp.class_names]
            clf = load_classifier(clip, labels=names, device=device)
            rows = {spec: [] for spec in models}
            seconds = {spec: 0.0 for spec in models}
            started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            bar = tqdm(total=sp.n, desc=f"{sp.config}/{sp.split}", unit="img", disable=quiet, file=sys.stderr)
            for batch in _batches(sp.records(), batch_size, limit):
                images = [r["image"] for r in batch]
                targets = [int(r["target"]) for r in batch]
                keys = [r["key"] for r in batch]
                for spec, vlm in vlms.items():
                    t = time.perf_counter()
                    res = score_two_way(vlm, clf, images, targets, names, seed, batch_size=batch_size, keys=keys)
                    seconds[spec] += time.perf_counter() - t
                    for key, item in zip(keys, res["items"], strict=True):
                        chosen = None if item["choice"] is None else names.index(item["options"][item["choice"]])
                        ok = item["choice"] == item["correct"]
                        rows[spec].append({"key": key, "target": item["target"], "target_ids": [item["target"]],
                                           "top5": [] if chosen is None else [chosen], "scores": [],
                                           "correct1": ok, "correct5": ok})
                bar.update(len(batch))
            bar.close()
            finished = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            for spec, vlm in vlms.items():
                preds = rows[spec]
                parsed = [p for p in preds if p["top5"]]
                mets = summarize(preds, {})
                mets = [m for m in mets if m["name"] == "top1"]
                mets.append({"name": "two_way_parsed", "lo": None, "hi": None,
                             "value": sum(p["correct1"] for p in parsed) / len(parsed) if parsed else None})
                mets.append({"name": "unparseable", "lo": None, "hi": None,
                             "value": 1 - len(parsed) / len(preds) if preds else None})
                run = {"dataset": source.id, "dataset_revision": source.revision, "config": sp.config,
                       "split": sp.split, "model": spec, "model_id": vlm.model_id, "model_revision": vlm.revision,
                       "protocol": f"two-way ({clip})", "label_space": "dataset", "n": len(preds),
                       "started": started, "finished": finished, "seconds": seconds[spec],
                       "images_per_second": len(preds) / seconds[spec] if seconds[spec] else None,
                       "versions": library_versions(), "class_names": sp.class_names,
                       "sample_limit": _cut(limit, len(preds), sp.n)}
                store.write_run(con, run, preds, mets)
                out.append({"model": spec, "dataset": source.id, "revision": source.revision,
                            "config": sp.config, "split": sp.split,
                            "protocol": "two-way", "n": len(preds),
                            "metrics": {m["name"]: m["value"] for m in mets},
                            "intervals": {m["name"]: [m["lo"], m["hi"]] for m in mets if m["lo"] is not None}})
    finally:
        con.close()
    return out


def evaluate_vqa(dataset: str, models: list[str], db: str, *, config=None, split=None, batch_size: int = 16,
                 limit=None, quiet=False, allow_pickle=False, trust_remote_code=False,
                 device: str | None = None) -> list[dict]:
    """Binary VQA (Borji 2022): every question of every image (``json.questions``), answers normalised
    to yes / no; accuracy overall, on yes and on no questions; one prediction row per question, keyed
    ``<image key>/q<i>`` so per-image accuracy is a GROUP BY away."""
    from tqdm.auto import tqdm

    from .. import metrics as M
    from ..models import load_vqa
    from ..records import library_versions

    source = open_source(dataset, config, split)
    vlms = {spec: load_vqa(spec, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, device=device)
            for spec in models}
    con = store.connect(db)
    out = []
    try:
        for sp in source.splits:
            rows = {spec: [] for spec in models}
            seconds = {spec: 0.0 for spec in models}
            started = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            bar = tqdm(total=sp.n, desc=f"{sp.config}/{sp.split}", unit="img", disable=quiet, file=sys.stderr)
            images = 0
            for batch in _batches(sp.records(), batch_size, limit):
                images += len(batch)
                pairs = [(r, i, q) for r in batch for i, q in enumerate(r["meta"].get("questions") or [])]
                for spec, vlm in vlms.items():
                    t = time.perf_counter()
                    answers = vlm.answer([r["image"] for r, _, _ in pairs], [q["question"] for _, _, q in pairs])
                    seconds[spec] += time.perf_counter() - t
                    for (r, i, q), a in zip(pairs, answers, strict=True):
                        said = M.normalize_yes_no(a)
                        truth = q["answer"]
                        rows[spec].append({"key": f"{r['key']}/q{i}", "target": int(truth == "yes"),
                                           "target_ids": [int(truth == "yes")],
                                           "top5": [] if said is None else [int(said == "yes")], "scores": [],
                                           "correct1": said == truth, "correct5": said == truth,
                                           "_said": said or "", "_truth": truth})
                bar.update(len(batch))
            bar.close()
            finished = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            for spec, vlm in vlms.items():
                preds = rows[spec]
                if not preds:
                    raise GensetsError(f"{sp.config}/{sp.split}: no questions (json.questions) to score")
                acc = M.vqa_binary_accuracy([p.pop("_said") for p in preds], [p.pop("_truth") for p in preds])
                lo, hi = M.bootstrap_ci([float(p["correct1"]) for p in preds])
                mets = [{"name": "top1", "value": acc["accuracy"], "lo": lo, "hi": hi}]
                # yes/no accuracy is undefined (NaN) without yes/no questions: stored and printed as null
                mets += [{"name": f"vqa_{k}", "value": None if math.isnan(acc[k]) else acc[k], "lo": None, "hi": None}
                         for k in ("accuracy", "yes_accuracy", "no_accuracy", "n_yes", "n_no")]
                run = {"dataset": source.id, "dataset_revision": source.revision, "config": sp.config,
                       "split": sp.split, "model": spec, "model_id": vlm.model_id, "model_revision": vlm.revision,
                       "protocol": "vqa", "label_space": "yes/no", "n": len(preds), "started": started,
                       "finished": finished, "seconds": seconds[spec],
                       "images_per_second": None, "versions": library_versions(), "class_names": ["no", "yes"],
                       "sample_limit": _cut(limit, images, sp.n)}
                store.write_run(con, run, preds, mets)
                out.append({"model": spec, "dataset": source.id, "revision": source.revision,
                            "config": sp.config, "split": sp.split,
                            "protocol": "vqa", "n": len(preds),
                            "metrics": {m["name"]: m["value"] for m in mets},
                            "intervals": {"top1": [lo, hi]}})
    finally:
        con.close()
    return out
