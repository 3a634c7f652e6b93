"""``gensets report genbench``: CLER per (dataset, strategy) against real test images, like GenBench's Table 2.

For every GenBench workspace and every strategy in it, with one CLIP model (``--clip``):
- CLER and its text ensemble (:func:`gensets.metrics.cler`), CLIP zero-shot on the same test images (the
  dataset's templates) and the differences, all with the dataset's own metric (GenBench's code:
  :func:`gensets.metrics.genbench_metric`) or, with ``--metric accuracy``, top-1;
- a linear probe on the frozen CLIP features of the generated images, scored on the real test images with the
  same metric (:func:`gensets.metrics.linear_probe`: the CLIP paper's L2 sweep by default, ``elevater``
  the paper's tuned probe, ``fixed-c`` logistic regression at one C);
- quality: Fréchet distance, KID, precision / recall (k-NN manifolds) between the CLIP features of the
  generated and the real images, CLIP score of each generated image with its prompt, Inception Score of
  the CLIP zero-shot softmax on the generated images (FD, KID, precision / recall and IS: :func:`quality`, the
  torch-fidelity functions of `gensets score`, each row naming its settings in ``quality_variant``);
- cost: measured generator seconds per image x price per hour.
Each row is a set at K shots per class (default 20, Table 2's), chosen as the authors pack them: a generated set's
K of highest CLIP score against "a photo of a {class}" (``--selection clip``, with ``--selection-clip``, default
the authors' ViT-B/16), a retrieval or original set's first K; ``--selection first`` takes the first K shots.
Every number names the variant behind it: the report's ``variants`` and each row's ``metric``,
``cler_centres``, ``cler_ensemble_variant``, ``probe`` and ``probe_params`` (the chosen C, or Elevater's
learning rate and weight decay), ``selection`` and ``selected_by``.
The real test set is a folder (one sub-folder of images per class, named like the class) or a Hugging Face
dataset (``hf:<repo or path>[@rev]``: its ClassLabel matched to the classes by position when it has as many
names, else by name; unmatched classes are named on stderr). Only test images of generated classes are
scored; test images are read, and generated ones decoded, batch by batch (never all at once). Writes
report.md (datasets x strategies, best CLER per dataset in bold; the data types at equal K with costs; the
correlations of Fig. 4 and Fig. 6; evaluation time per metric: genbench_analysis.py), report.json, cler.png,
correlations.png and shots.png (score against shots and against cost).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from ...cards.figures import PALETTE, figure, save
from ...cards.markdown import table
from ...compare import Measured, checkpoint_id, compare, not_run
from ...config import nonneg_float, positive_float, positive_int
from ...errors import GensetsError
from ...evaluation.reports.base import Report, random_weights_note
from ...images import decode_image
from ...models import load_classifier
from ...models.spec import random_weights
from ...output import files
from ...quality import functional as F
from ...quality.functional import TORCH_FIDELITY_SEED
from ...registry import REPORTS
from ...shards import stored_samples
from ...sources.classes import plain_name
from ...sources.images import Images, load_test_set, parse_tests
from ...sources.packaged import genbench_datasets, genbench_published
from ...timings import cost_per_image, measured
from ...workspace import Workspace
from .analysis import (
    chosen_cell,
    correlations,
    markdown_sections,
    plot_correlations,
    plot_shots,
    strategy_order,
)
from .fields import shot_of


# ------------------------------------------------------------------ inputs
def read_workspace(path: str | Path):
    """(config, {published config: [Sample]}) of a GenBench workspace, from its committed candidate shards.

    The samples are :class:`gensets.shards.StoredSample`: their images and provenance stay in the shards
    and are read when asked for, so a workspace of any size costs a few hundred bytes per image."""
    ws = Workspace(path)
    builder, cfg = ws.load()
    if builder.name != "genbench":
        raise GensetsError(f"{ws.root}: a {builder.name} workspace, not a genbench one")
    rows = {r["unit"]: r for r in ws.manifest().rows()} if ws.manifest_path.exists() else {}
    by_config: dict[str, list] = defaultdict(list)
    for row in sorted(rows.values(), key=lambda r: r["shard"]):
        for s in stored_samples(ws.candidate(row["shard"]), keep_meta=False):
            by_config[s.meta["config"]].append(s)
    if not by_config:
        raise GensetsError(f"{ws.root}: no generated images yet; run `gensets build` first")
    for samples in by_config.values():
        samples.sort(key=lambda s: s.key)
    return ws, cfg, dict(by_config)


# ------------------------------------------------------------------ scoring
def _passes(images, batch_size: int, models: list) -> list:
    """For each ``(model, "embed" or "logits")`` of ``models``, that output over all ``images`` (N, D), computed
    batch by batch: each image is read (decoded) once, and only one batch of images is in memory at a time."""
    import torch

    outs: list[list] = [[] for _ in models]
    for i in range(0, len(images), batch_size):
        batch = images[i : i + batch_size]
        for out, (m, what) in zip(outs, models, strict=True):
            out.append(getattr(m, what)(m.preprocess(batch)).float().cpu())
    return [torch.cat(out).numpy() for out in outs]


def _safe(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ValueError:  # too few images for this metric
        return None


# What each variant means, written into report.json and report.md beside the numbers it produced.
VARIANTS = {
    "cler_centres": {
        "normalised": "class centres = mean of the normalised CLIP image features, re-normalised (the authors' code: "
                      "Luodian/GenBench evaluation_utils.py, zeroshot_metric)",
        "mean": "class centres = mean of the normalised CLIP image features, not re-normalised (the paper's "
                "Eq. 1 and Algorithm 1: arXiv:2307.13697, Sec. 3)"},
    "cler_ensemble": {
        "code": "ensemble centre = normalise(centre + text embedding) (the authors' code, zeroshot_metric)",
        "paper": "ensemble = argmax of (test . centre + test . text embedding) / 2, plain dot products (the paper, "
                 "arXiv:2307.13697: Sec. 3 below Eq. 1 and Algorithm 1; with centres mean, "
                 "Algorithm 1 exactly)",
        "softmax-mean": "ensemble = mean of the CLER and CLIP zero-shot (logit scale 100) probability matrices "
                        "(gensets' earlier reading; neither the paper nor the code says it)"},
    "metric": {
        "dataset": "each dataset's own metric, as GenBench's code scores it (its Elevater dataset configs' "
                   "TEST.METRIC: mean per class for Caltech-101, FGVC Aircraft, Oxford Flowers, Oxford Pets; "
                   "11-point mAP for VOC 2007; ROC AUC for Hateful Memes; else top-1 accuracy)",
        "accuracy": "top-1 accuracy for every dataset"},
    "probe": {
        "clip": "the CLIP paper's protocol (appendix A.3): logistic regression, L2 strength swept on a class-"
                "balanced 20% held out of the generated images, refitted on all of them with the chosen C",
        "elevater": "the paper's probe (Elevater via the authors' run_elevator): SGD, learning rate x weight decay "
                    "swept on the same 20%, then 50 epochs; the value is the best TEST epoch (test-set selection, "
                    "optimistic: kept to compare with the paper's numbers)",
        "fixed-c": "logistic regression at one C (gensets' earlier probe), no search"},
    "selection": {
        "clip": "K shots per class: a generated set keeps the K images of highest CLIP score (cosine of the "
                "selection model's image and text embeddings) against \"a photo of a {class}\" (the authors' "
                "packing_utils.py, packing_generated_images --clip_selection K, with CLIP ViT-B/16; ties: the "
                "smaller key); retrieval and original sets keep their first K (the retrieval's ranking, as "
                "packing_retrieval_images; original: the seeded draw)",
        "first": "K shots per class: the first K shots of each class, in shot order, for every data type "
                 "(gensets' earlier draw)"},
}

# Table 2 of the paper scores 20 generated shots per class (shared/papers/001_f04b4de81b95e690.txt, Table 2
# caption), chosen by CLIP score (the authors' --clip_selection 20).
DEFAULT_SHOTS = 20
# The authors' selection model: packing_utils.py, clip.load("ViT-B/16") (OpenAI's weights).
SELECTION_CLIP = "open_clip:ViT-B-16/openai"
SELECTION_PROMPT = "a photo of a {}"


def compute(workspaces: list[str], tests: list[str] | None = None, clip: str = "open_clip:ViT-B-32/openai",
            *, features: str | None = None, split: str = "test", batch_size: int = 32,
            price_per_hour: float | None = None, centres: str = "normalised", ensemble: str = "code",
            metric: str = "dataset", probe: str = "clip", probe_c: float = 1.0, k: int = 3,
            shots: list[int] | None = None, delta_base: str = "ST", selection: str = "clip",
            selection_clip: str | None = SELECTION_CLIP, intervals: bool = False) -> dict:
    """Every number of the report, as plain data (also written as report.json).

    ``features``: the classifier spec whose image features (``embed``) FD, KID and precision / recall use
    and whose softmax the Inception Score uses (e.g. an Inception or DINOv2 timm model); default: the CLIP
    model (its zero-shot softmax over the generated classes for IS). ``centres``, ``ensemble``, ``metric``
    (``"dataset"``: each dataset's own; ``"accuracy"``), ``probe`` and ``probe_c`` (the C of ``fixed-c``) choose
    the variants of :data:`VARIANTS`; the defaults are the authors' code (CLER, metric) and the CLIP paper's
    probe (see :func:`gensets.metrics.linear_probe` for why not the paper's test-selected one).

    ``shots``: the K shots per class of each row (default: ``DEFAULT_SHOTS``, Table 2's 20, or every shot of a
    build that has fewer); a K above what a build holds gives it no row. ``selection`` (:data:`VARIANTS`) picks
    the K: ``clip`` (default, the authors' packing) ranks a generated set's images by their CLIP score with
    ``selection_clip`` (default the authors' ViT-B/16; ``None``: the ``clip`` model), ``first`` takes the first K.
    Every metric of a row (CLER, linear probe, quality, cost) is computed on its K shots.

    ``intervals``: each row's ``cler_interval`` too (:data:`CLER_INTERVAL`: gensets' own uncertainty, shown beside
    Table 2's rows; ``--intervals``; off by default). Table 2's numbers are compared by :func:`published_table2`."""
    for key, value in (("cler_centres", centres), ("cler_ensemble", ensemble), ("metric", metric), ("probe", probe),
                       ("selection", selection)):
        if value not in VARIANTS[key]:
            raise GensetsError(f"{key}: {value!r} is not one of {', '.join(VARIANTS[key])}")
    import numpy as np

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    test_sources = parse_tests(tests)
    by_dataset: dict[str, list] = defaultdict(list)
    for w in workspaces:
        ws, cfg, by_config = read_workspace(w)
        by_dataset[cfg.dataset_name].append((ws, cfg, by_config))
    rows, datasets = [], {}
    own_chooser = None  # --selection-clip's model (its embeddings only), loaded when a set first needs it
    for name, items in by_dataset.items():
        cfg = items[0][1]
        if any(c.class_names != cfg.class_names for _, c, _ in items):
            raise GensetsError(f"workspaces of dataset {name!r} list different classes")
        source = test_sources.get(name) or test_sources.get("")
        if not source:
            raise GensetsError(f"no real test set for dataset {name!r}: pass --test {name}=<folder or hf:dataset>")
        generated = sorted({s.cls for _, _, bc in items for ss in bc.values() for s in ss})
        local = {c: i for i, c in enumerate(generated)}  # the label space: the generated classes
        images, labels, info = load_test_set(source, list(cfg.class_names), split)
        keep = [i for i, y in enumerate(labels) if y in local]
        if not keep:
            raise GensetsError(f"test set {source}: no images of the generated classes of {name!r}")
        test_images, test_y = images.subset(keep), np.array([local[labels[i]] for i in keep])
        names = [plain_name(cfg.class_names[c]) for c in generated]
        clf = load_classifier(clip, labels=names, templates=list(cfg.templates))
        text_emb = clf.text_classifier.T.float().cpu().numpy()
        feat = load_classifier(features, labels=names, templates=list(cfg.templates)) if features else clf
        test_emb, test_logits, *test_feat = _passes(test_images, batch_size, [(clf, "embed"), (clf, "logits")]
                                                    + ([(feat, "embed")] if features else []))
        test_feat = test_feat[0] if features else test_emb
        scored_with = cfg.metric if metric == "dataset" else "accuracy"
        zero_shot = _safe(M.genbench_metric, scored_with, _softmax(test_logits), test_y)
        datasets[name] = {"dataset": cfg.dataset, "metric": scored_with, "dataset_metric": cfg.metric,
                          "metric_source": _metric_source(cfg), "classes": len(generated),
                          "class_subset": "all" if len(generated) == len(cfg.class_names) else names,
                          "test_images": len(keep), "test_source": source, "test_class_match": info["match"],
                          "unmatched_test_classes": info["unmatched"],
                          "zero_shot": zero_shot, "clip": clip, "features": features or clip}
        for ws, wcfg, by_config in items:
            price = wcfg.cost.price_per_hour if price_per_hour is None else price_per_hour
            for config, every in sorted(by_config.items(), key=lambda kv: strategy_order(kv[1][0].meta["strategy"])):
                built = 1 + max(shot_of(x.key) for x in every)
                ks = [min(DEFAULT_SHOTS, built)] if shots is None else [k for k in shots if k <= built]
                generated_set = not every[0].meta.get("data")
                scores = None
                if selection == "clip" and generated_set and any(k < built for k in ks):
                    if selection_clip and selection_clip != clip and own_chooser is None:
                        own_chooser = load_classifier(selection_clip, labels=names, templates=[SELECTION_PROMPT])
                    scores = selection_scores(every, own_chooser or clf, names, local, batch_size)
                for n_shots in ks:
                    samples, selected_by = choose_shots(every, n_shots, scores, local)
                    row = _row(samples, n_shots, name, config, ws, wcfg, price, test_emb, test_y, test_feat,
                               text_emb, zero_shot, clf, feat, features, batch_size, local, centres, ensemble,
                               scored_with, probe, probe_c, k, intervals)
                    row.update({"generator": wcfg.generator.model,
                                "selection": selection, "selected_by": selected_by, "shots_built": built,
                                "selection_clip": (selection_clip or clip) if selection == "clip" else None})
                    rows.append(row)
    chosen = {"cler_centres": centres, "cler_ensemble": ensemble, "metric": metric, "probe": probe,
              "selection": selection}
    specs = {clip, features or clip, *((selection_clip or clip,) if selection == "clip" else ()),
             *(r.get("generator") or "" for r in rows)}
    return {"clip": clip, "features": features or clip,
            "random_weights": sorted(m for m in specs if random_weights(m)),
            "selection_clip": (selection_clip or clip) if selection == "clip" else None,
            "variants": {key: {"name": v, "means": VARIANTS[key][v]} for key, v in chosen.items()},
            "datasets": datasets, "rows": rows, "correlations": correlations(rows, delta_base),
            "published": published_table2(rows, datasets, clip)}


CLER_INTERVAL = ("95% percentile bootstrap of CLER over the real test images (1000 resamples, seed 0; the K shots "
                 "and their class centres fixed): gensets.metrics.cler_bootstrap_ci")


def paper_generator(spec: str) -> str:
    """Table 2's generator row a gensets generator spec is compared with: GLIDE when the spec names it, else
    Stable Diffusion (gensets' generators are diffusers pipelines; the tiny ones are Stable Diffusion too)."""
    return "GLIDE" if "glide" in spec.lower() else "Stable Diffusion"


# the paper's evaluator: CLER with CLIP ViT-B/32 (Sec. 3: "we primarily use CLIP ViT-B/32"), OpenAI's weights
PAPER_CLIP = ("open_clip:vit-b-32/openai", "openai/clip-vit-base-patch32")


def table2_pairs(rows: list[dict], datasets: dict, clip: str | None = None):
    """Each generated row of the report with Table 2's number beside it: ``(row, paper row or None, published
    entry or None, Measured)``. The entry is Table 2's :class:`~gensets.schemas.Definition` with the paper row's
    model and the column's value (a fraction); gensets' side carries what its build and report make of it: the
    classes generated (all, or a ``classes:`` subset), K, the CLER variant, the metric, the K shots' selection and
    the CLIP model (each, where it is not Table 2's, a field that differs)."""
    pub = genbench_published()
    t2 = pub["tables"]["2"]
    for r in rows:
        if r["data_type"] != "generated":
            continue
        model = paper_generator(r.get("generator", ""))
        paper = next((p for p in t2["rows"] if p["model"] == model and p["strategy"] == r["strategy"]), None)
        value = paper["cler"].get(datasets[r["dataset"]]["dataset"]) if paper else None
        entry = None if value is None else {
            **t2["definition"], "what": f"{r['dataset']} {r['strategy']} ({paper['paper_strategy']})",
            "model": t2["models"][model], "value": value / 100, "unit": "fraction", "source": t2["source"]}
        d = datasets[r["dataset"]]
        differs = [*([f"shots (K={r['shots']} vs {t2['shots']})"] if r["shots"] != t2["shots"] else []),
                   *([f"CLER variant ({r['cler_centres']} / {r['cler_ensemble_variant']} vs the authors' "
                      "normalised / code)"] if (r["cler_centres"], r["cler_ensemble_variant"]) != ("normalised", "code")
                     else []),
                   *([f"K shots ({r['selection']} vs the authors' clip selection)"] if r["selection"] != "clip" else []),
                   *([f"evaluator ({clip} vs CLIP ViT-B/32)"] if clip and checkpoint_id(clip) not in PAPER_CLIP
                     else [])]
        subset = d.get("class_subset", "all")
        ours = Measured(r["cler"], "cler", "dataset-metric" if d["metric"] == d["dataset_metric"] else "pooled-images",
                        "rebuild", classes=subset if subset == "all" else tuple(subset), model=r.get("generator"),
                        random_weights=random_weights(r.get("generator")) or random_weights(clip),
                        differs=tuple(differs))
        yield r, paper, entry, ours


def published_table2(rows: list[dict], datasets: dict, clip: str | None = None) -> dict:
    """Table 2's CLER (20-shot; gensets/data/genbench/published.json) beside each generated row of the report:
    the paper's row of the same generator and strategy, the column of the same packaged dataset (fractions, as
    every CLER of the report), compared by :func:`gensets.compare.compare` (:func:`table2_pairs`: a ``classes:``
    subset, another K, CLER variant, selection or CLIP model is not Table 2's quantity); a strategy or dataset Table
    2 has no number for gets ``published: None``, not run."""
    pub = genbench_published()
    t2 = pub["tables"]["2"]
    out = []
    for r, paper, entry, ours in table2_pairs(rows, datasets, clip):
        c = compare(entry, ours) if entry is not None else not_run("Table 2 has no number for it")
        out.append({"dataset": r["dataset"], "strategy": r["strategy"], "shots": r["shots"],
                    "generator": paper_generator(r.get("generator", "")), "generator_spec": r.get("generator"),
                    "paper_strategy": paper["paper_strategy"] if paper else None,
                    "published": None if entry is None else entry["value"], "gensets": r["cler"],
                    "difference": c.difference, "random_weights": ours.random_weights, "comparison": c.as_dict(),
                    **({"interval": r["cler_interval"]} if "cler_interval" in r else {})})
    return {"table": "Table 2", "paper": pub["paper"], "cite": f"arXiv:{t2['source']['arxiv']}, {t2['source']['where']}",
            "shots": t2["shots"], "strategy_note": t2["strategy_note"], "rows": out}


def selection_scores(samples, chooser, names: list[str], local: dict, batch_size: int):
    """Each sample's CLIP score for the authors' K-shot selection: the cosine of its image embedding with the text
    embedding of "a photo of a {class}" (``chooser``: the selection CLIP model; ``names``: the classes' plain
    names by local id). The authors' score, 100 x cosine (``logits_per_image``), ranks the same."""
    import numpy as np

    images = Images(samples, lambda batch: [decode_image(s.image) for s in batch])
    (emb,) = _passes(images, batch_size, [(chooser, "embed")])
    text = chooser.embed_text([SELECTION_PROMPT.format(n) for n in names]).float().cpu().numpy()
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ids = np.array([local[s.cls] for s in samples])
    return (emb * text[ids]).sum(axis=1)


def choose_shots(every: list, n_shots: int, scores, local: dict) -> tuple[list, str]:
    """(the K = ``n_shots`` samples per class of a set, how they were chosen). With ``scores`` (one per sample of
    ``every``: :func:`selection_scores`), the K of highest score per class (:func:`gensets.metrics.top_k_per_class`,
    ties to the smaller key), kept in key order; without, the first K shots of each class (nested: every smaller K
    is a subset)."""
    import numpy as np

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    if all(shot_of(x.key) < n_shots for x in every):
        return list(every), "every shot built"
    if scores is None:
        kind = (every[0].meta.get("data") or {}).get("type")
        how = {"retrieval": "first K: the retrieval's ranking", "original": "first K: the seeded draw"}
        return ([x for x in every if shot_of(x.key) < n_shots],
                how.get(kind, "first K shots (shot order)"))
    keep = M.top_k_per_class(scores, np.array([local[x.cls] for x in every]), [x.key for x in every], n_shots)
    return [every[i] for i in keep], "top K by CLIP score against 'a photo of a {class}'"


def _row(samples, n_shots, name, config, ws, wcfg, price, test_emb, test_y, test_feat, text_emb, zero_shot, clf, feat,
         features, batch_size, local, centres, ensemble, scored_with, probe, probe_c, k, intervals=False) -> dict:
    """One report row: a (dataset, config) at K shots per class, whatever its data type."""
    import numpy as np

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    gen_images = Images(samples, lambda batch: [decode_image(s.image) for s in batch])
    data = samples[0].meta.get("data")
    data_type = data["type"] if data else "generated"
    gen_y = np.array([local[s.cls] for s in samples])
    clock = Clock()
    with clock("embed"):  # decoding and embedding the set's images: shared by every metric
        gen_emb, gen_logits, *gen_feat = _passes(gen_images, batch_size, [(clf, "embed"), (feat, "logits")]
                                                 + ([(feat, "embed")] if features else []))
    gen_feat = gen_feat[0] if features else gen_emb
    present = np.isin(test_y, gen_y)
    how = {"centres": centres, "ensemble": ensemble, "metric": scored_with}
    with clock("cler"):  # CLER and its text ensemble
        cler = _safe(M.cler, gen_emb, gen_y, test_emb[present], test_y[present], **how)
        ens = _safe(M.cler, gen_emb, gen_y, test_emb[present], test_y[present], text_emb=text_emb, **how)
        ci = (_safe(M.cler_bootstrap_ci, gen_emb, gen_y, test_emb[present], test_y[present], **how)
              if intervals and cler is not None else None)
    with clock("linear_probe"):
        lp = M.linear_probe(gen_emb, gen_y, test_emb, test_y, probe=probe, metric=scored_with,
                            text_emb=text_emb, c=probe_c) or {}
    scores = quality(gen_feat, test_feat, gen_logits, k, clock)
    with clock("clip_score"):  # its own part: embedding the prompts, then the score (none for data types)
        clip_score = None if data else M.clip_score(gen_emb, np.concatenate(
            [clf.embed_text([s.meta["prompt"] for s in samples[i : i + batch_size]]).cpu().numpy()
             for i in range(0, len(samples), batch_size)]))
    timing = measured(ws.fingerprint, {s.meta["unit"] for s in samples})
    spi = timing["seconds_per_image"] if timing else None
    if data_type == "original":  # a labelled image's price, as configured (cost.labelling), with its source
        per_image, cost_source = wcfg.cost.labelling_price.per_image, wcfg.cost.labelling_price.source
    else:  # measured seconds (generator, or retrieval queries) x price per hour
        per_image = cost_per_image(spi, price) if spi is not None else None
        cost_source = ("measured " + ("retrieval query" if data_type == "retrieval" else "generator")
                       + f" seconds x {price:g} {wcfg.cost.currency}/hour")
    mts = None
    if data_type == "retrieval":
        by_class: dict[str, list[float]] = defaultdict(list)
        for s in samples:
            by_class[s.meta["label"]].append(s.meta["data"]["score"])
        mts = M.mean_text_similarity(by_class, wcfg.retrieval.mts_shot)
    return {
        "dataset": name, "strategy": samples[0].meta["strategy"], "config": config, "data_type": data_type,
        "shots": n_shots,
        "workspace": str(ws.root), "build": ws.fingerprint, "generated": len(samples),
        "test_images": int(present.sum()),
        "metric": scored_with, "cler_centres": centres, "cler_ensemble_variant": ensemble,
        "cler": cler, "cler_ensemble": ens, "zero_shot": zero_shot,
        **({"cler_interval": None if ci is None else list(ci)} if intervals else {}),
        "cler_minus_zero_shot": _minus(cler, zero_shot), "ensemble_minus_zero_shot": _minus(ens, zero_shot),
        "linear_probe": lp.get("value"), "probe": probe,
        "probe_params": {key: v for key, v in lp.items() if key not in ("value", "probe")},
        **scores,
        "clip_score": clip_score,
        "seconds_per_image": spi, "price_per_hour": price, "currency": wcfg.cost.currency,
        "cost_per_image": per_image, "cost_source": cost_source,
        "cost_total": None if per_image is None else per_image * len(samples),
        "mts": mts[1] if mts else None, "mts_per_class": mts[0] if mts else None,
        "reference_costs": {k2: {"per_image": v.per_image, "source": v.source}
                            for k2, v in wcfg.cost.reference.items()},
        **{f"{what}_seconds": v for what, v in clock.seconds.items()},
        **({"clip_score_seconds": None} if data else {}),  # not computed: no prompts
    }


class Clock:
    """Wall-clock seconds per named step (GenBench Fig. 5: evaluation time per metric): ``with clock("cler"): ...``."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, what: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - t0


# The report's settings of its quality numbers. KID: torch-fidelity's defaults, as `gensets score --metric kid`. IS:
# one split (a K-shot set is small; `gensets score` takes torch-fidelity's 10). GenBench itself reports FID only
# (shared/papers/001_f04b4de81b95e690.txt, Fig. 4); KID, precision / recall and IS are gensets' additions.
KID_SUBSETS, KID_SUBSET_SIZE, IS_SPLITS = 100, 1000, 1


def quality_variant(k: int) -> str:
    """What the report's FD, KID, precision / recall and IS are: each row's ``quality_variant``."""
    return (f"torch-fidelity through gensets.quality.functional, as `gensets score`: FD = fid; KID = kid, "
            f"{KID_SUBSETS} subsets of min({KID_SUBSET_SIZE}, N, M), seed {TORCH_FIDELITY_SEED}; precision / recall "
            f"k = {k}; IS = inception_score of the features model's logits, {IS_SPLITS} split")


def quality(gen_feat, test_feat, gen_logits, k: int, clock: Clock | None = None) -> dict:
    """A row's FD, KID, precision / recall (generated ``gen_feat`` (N, D) against real ``test_feat`` (M, D)) and
    Inception Score (``gen_logits`` (N, C)), by the functions of :mod:`gensets.quality.functional` that
    `gensets score` calls: the report's FD is `gensets score --metric fid`'s on the same features. None where a set
    is too small for a metric; ``clock`` times the FD (Fig. 5's evaluation time)."""
    with (clock or Clock())("fd"):
        fd = _safe(F.fid, gen_feat, test_feat)
    kid = _safe(F.kid, gen_feat, test_feat, subsets=KID_SUBSETS, subset_size=KID_SUBSET_SIZE) or (None, None, None)
    precision, recall = _safe(F.precision_recall, gen_feat, test_feat, k) or (None, None)
    return {"fd": fd, "kid": kid[0], "kid_subset_size": kid[2], "precision": precision, "recall": recall,
            "inception_score": F.inception_score(gen_logits, splits=IS_SPLITS)[0], "quality_variant": quality_variant(k)}


def _softmax(logits):
    from scipy.special import softmax

    return softmax(logits, axis=1)


def _minus(a, b):
    return None if a is None or b is None else a - b


def _metric_source(cfg) -> str:
    """Where the dataset's metric comes from: the packaged GenBench table (with its source) or the config."""
    packaged = genbench_datasets().get(cfg.dataset, {})
    if packaged.get("metric") == cfg.metric:
        return packaged.get("metric_source", "gensets/data/genbench/datasets.json")
    return "the build config (metric:)"


# ------------------------------------------------------------------ outputs
def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _num(v, fmt=".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _probe_cell(r: dict) -> str:
    """The probe's value with its variant and what it chose, e.g. ``62.5 (clip, C=0.316)``."""
    p = r["probe_params"]
    if r["probe"] == "elevater":
        how = (f"elevater: best test epoch, last {_pct(p.get('last_epoch'))}; lr {p.get('lr', 0):g}, "
               f"wd {p.get('weight_decay', 0):g}") if p else "elevater"
    else:
        how = f"{r['probe']}, C={p['C']:.3g}" if p else r["probe"]
    return f"{_pct(r['linear_probe'])} ({how})"


def markdown(rep: dict) -> str:
    strategies = _strategies(rep)
    v = rep["variants"]
    lines = ["# GenBench report", "", *random_weights_note(rep.get("random_weights") or ()),
             f"CLER (%) of the generated training images of each strategy against real test images, with "
             f"`{rep['clip']}` (GenBench, Li et al. 2023, Table 2); the best strategy per dataset in bold. "
             "Zero-shot: CLIP zero-shot (%) on the same test images with the dataset's templates. CLER, zero-shot and "
             f"the linear probe are scored with each dataset's `metric` column. FD, KID, precision / recall and IS on "
             f"the features of `{rep['features']}`"
             + (f": {rep['rows'][0]['quality_variant']}." if rep["rows"] else "."), "",
             "Variants behind the numbers:", "",
             table(["what", "variant", "meaning"],
                   [["CLER centres", f"`{v['cler_centres']['name']}`", v["cler_centres"]["means"]],
                    ["CLER ensemble", f"`{v['cler_ensemble']['name']}`", v["cler_ensemble"]["means"]],
                    ["metric", f"`{v['metric']['name']}`", v["metric"]["means"]],
                    ["linear probe", f"`{v['probe']['name']}`", v["probe"]["means"]],
                    ["K shots", f"`{v['selection']['name']}`"
                     + (f" (`{rep['selection_clip']}`)" if rep.get("selection_clip") else ""),
                     v["selection"]["means"]]]), ""]
    best_rows = []
    for name, d in rep["datasets"].items():
        vals = {r["strategy"]: r["cler"] for r in rep["rows"] if r["dataset"] == name}  # at the largest K
        best = max((x for x in vals.values() if x is not None), default=None)
        cells = [("**" + _pct(vals[s]) + "**" if vals[s] is not None and vals[s] == best else _pct(vals[s]))
                 if s in vals else "-" for s in strategies]
        best_rows.append([name, d["metric"], *cells, _pct(d["zero_shot"])])
    lines += [table(["dataset", "metric", *strategies, "zero-shot"], best_rows),
              "", "## Per (dataset, strategy)", ""]
    rows = [[r["dataset"], r["strategy"], r["data_type"], r["shots"], chosen_cell(r), r["metric"], r["generated"],
             r["test_images"],
             _pct(r["cler"]),
             _pct(r["cler_ensemble"]), _pct(r["zero_shot"]), _pct(r["cler_minus_zero_shot"]),
             _pct(r["ensemble_minus_zero_shot"]), _probe_cell(r), _num(r["fd"]), _num(r["kid"], ".4f"),
             _num(r["precision"], ".2f"), _num(r["recall"], ".2f"), _num(r["clip_score"], ".2f"),
             _num(r["inception_score"], ".2f"), _num(r["seconds_per_image"]),
             "-" if r["cost_per_image"] is None else f"{r['cost_per_image']:.6f} {r['currency']}",
             "-" if r["cost_total"] is None else f"{r['cost_total']:.4f} {r['currency']}", _num(r["mts"])]
            for r in rep["rows"]]
    lines.append(table(["dataset", "strategy", "data", "K", "K chosen", "metric", "images", "test", "CLER", "CLER ens.",
                        "zero-shot", "CLER - ZS", "ens. - ZS", "linear probe (variant)", "FD", "KID", "precision", "recall",
                        "CLIP score", "IS", "s / image", "cost / image", "cost", "MTS"], rows))
    refs = {k: v for r in rep["rows"] for k, v in r["reference_costs"].items()}
    if refs:
        lines += ["", "Other ways to get an image, for comparison with the cost per image:", "",
                  table(["way", "per image", "source"], [[k, f"{v['per_image']:g}", v["source"]] for k, v in refs.items()])]
    lines += ["", "Data: generated (a prompt strategy), original (the dataset's own training images, a seeded draw) or "
              "retrieval (from a pool, ranked by CLIP similarity with the class's queries; MTS: the authors' mean text "
              "similarity, tools/text_similarity.py). K: shots per class, chosen from its build as the `K shots` variant "
              "above says (report.json: each row's `selection` and `selected_by`; nested: every smaller K is a "
              "subset). Cost per image = measured generator (or "
              "retrieval query) seconds per image x price per hour / 3600 (timings are recorded while building, per "
              "unit, on the building machine); original: the configured labelling price (cost.labelling, its source "
              "in report.json); cost = cost per image x images.", "", "![CLER per strategy](cler.png)", ""]
    lines += markdown_sections(rep, _pct, _probe_cell)
    lines += published_section(rep)
    return "\n".join(lines)


def published_section(rep: dict) -> list[str]:
    """The report.md section of GenBench's Table 2 beside this report's CLER, each row compared as gensets compares
    (gensets.compare)."""
    pub = rep.get("published")
    if not pub or not pub["rows"]:
        return []
    ci = any("interval" in r for r in pub["rows"])  # --intervals: gensets' own interval
    rows = [[r["dataset"], r["strategy"], r["paper_strategy"] or "-", r["shots"], r["generator"],
             _pct(r["published"]), _pct(r["gensets"]) + (" (random weights)" if r.get("random_weights") else ""),
             "-" if r["difference"] is None else f"{100 * r['difference']:+.1f}",
             *([_interval(r.get("interval"))] if ci else []), r["comparison"]["text"]]
            for r in pub["rows"]]
    return ["", f"## Published numbers (GenBench {pub['table']})", "",
            f"CLER (%) of {pub['shots']}-shot generated sets as the paper prints it, beside this report's; difference "
            f"= gensets - published, in points. {pub['strategy_note']}. Comparison: the test that fits (README, "
            "\"How gensets compares with a paper\"): one build of a generation is the difference only; "
            "`gensets reproduce genbench-table2 --seeds N` compares over N builds."
            + (f" gensets' interval: {CLER_INTERVAL} (its own uncertainty, which decides nothing)." if ci else ""), "",
            table(["dataset", "strategy", "paper row", "K", "generator", "published", "gensets", "difference",
                   *(["gensets 95% interval (test images)"] if ci else []), "comparison"], rows), "",
            f"Source: {pub['paper']} ({pub['cite']}).", ""]


def _interval(ci) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _strategies(rep: dict) -> list[str]:
    """The strategies of the report's rows, in the paper's order (NP, then NP+RD)."""
    return sorted({r["strategy"] for r in rep["rows"]}, key=strategy_order)


def plot(rep: dict, path: Path) -> None:
    """Grouped bars: CLER per strategy for each dataset, the zero-shot accuracy as a dashed line."""
    names = list(rep["datasets"])
    strategies = _strategies(rep)
    fig = figure(max(4.0, 1.2 + 1.4 * len(names) * max(1, len(strategies)) / 3), 3.6)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(strategies))
    colors = PALETTE[:6]
    for j, s in enumerate(strategies):
        xs, ys = [], []
        for i, name in enumerate(names):
            v = next((r["cler"] for r in rep["rows"] if r["dataset"] == name and r["strategy"] == s), None)
            if v is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(100 * v)
        ax.bar(xs, ys, width, label=s, color=colors[j % len(colors)])
    for i, name in enumerate(names):
        if rep["datasets"][name]["zero_shot"] is not None:
            ax.hlines(100 * rep["datasets"][name]["zero_shot"], i - 0.45, i + 0.45, colors="black",
                      linestyles="dashed", label="zero-shot" if i == 0 else None)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("CLER (%)")
    ax.set_ylim(0, 100)
    fig.legend(loc="lower center", ncol=len(strategies) + 1, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, path)


def write(rep: dict, out: str | Path) -> Path:
    with files(out, "gensets report genbench") as staged:
        staged.write("report.json", json.dumps(rep, indent=1, allow_nan=True) + "\n")
        plot(rep, staged.path("cler.png"))
        plot_correlations(rep, staged.path("correlations.png"))
        plot_shots(rep, staged.path("shots.png"))
        return staged.write("report.md", markdown(rep))


def _shots(text: str) -> list[int]:
    import argparse

    try:
        ks = sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected shots per class like 10,20,50, got {text!r}") from None
    if ks[0] < 1:
        raise argparse.ArgumentTypeError("shots must be at least 1")
    return ks


@REPORTS.register("genbench")
class GenBench(Report):
    help = "CLER of GenBench workspaces against real test images"
    description = ("Per (dataset, strategy): CLER and its text ensemble, CLIP zero-shot on the same test images and "
                   "the difference, and a linear probe, all scored with the dataset's metric; FD / KID / precision "
                   "/ recall / CLIP score / IS, and the cost per image; a markdown table (datasets x strategies, best "
                   "in bold) and a plot. Every number names its variant (report.json: variants, and per row).")

    def add_arguments(self, parser):
        parser.add_argument("workspace", nargs="+", metavar="WORKSPACE", help="genbench workspaces (gensets build)")
        parser.add_argument("--test", action="append", metavar="[DATASET=]SOURCE",
                            help="real test images: a folder of class sub-folders or hf:<dataset>[@rev] (repeatable; "
                            "DATASET= gives one dataset its own)")
        parser.add_argument("--split", default="test", help="hf: test sets: the split (default test)")
        parser.add_argument("--clip", default="open_clip:ViT-B-32/openai", metavar="SPEC",
                            help="the CLIP model for the embeddings (default: open_clip:ViT-B-32/openai, as the paper)")
        parser.add_argument("--features", metavar="SPEC", help="classifier whose image features FD / KID / "
                            "precision-recall use and whose softmax IS uses, e.g. an Inception or DINOv2 timm model "
                            "(default: --clip)")
        parser.add_argument("--price-per-hour", type=nonneg_float,
                            help="generator device price per hour (default: the config's)")
        parser.add_argument("--cler-centres", choices=list(VARIANTS["cler_centres"]), default="normalised",
                            help="CLER class centres: normalised (default, the authors' code) or mean (the paper's "
                            "Algorithm 1)")
        parser.add_argument("--cler-ensemble", choices=list(VARIANTS["cler_ensemble"]), default="code",
                            help="CLER text ensemble: code (default, the authors' normalise(centre + text)), paper "
                            "(Algorithm 1: (test . centre + test . text) / 2) or softmax-mean (gensets' earlier mean "
                            "of the CLER and CLIP zero-shot probabilities)")
        parser.add_argument("--metric", choices=list(VARIANTS["metric"]), default="dataset",
                            help="dataset (default: each dataset's own metric, as GenBench's code) or accuracy")
        parser.add_argument("--probe", choices=list(VARIANTS["probe"]), default="clip",
                            help="linear probe: clip (default: the CLIP paper's L2 sweep on a held-out 20%% of the "
                            "generated images), elevater (the paper's tuned probe; reports the best test epoch), "
                            "fixed-c (logistic regression at --probe-c)")
        parser.add_argument("--probe-c", type=positive_float, default=1.0, help="C of the fixed-c probe (default 1)")
        parser.add_argument("--shots", type=_shots, metavar="K,K,...",
                            help=f"K shots per class, a row per K, e.g. 10,20,50,100,500 (default: "
                            f"{DEFAULT_SHOTS}, Table 2's, or every shot of a smaller build)")
        parser.add_argument("--selection", choices=list(VARIANTS["selection"]), default="clip",
                            help="which K shots: clip (default, the authors' packing: a generated set's K of highest "
                            "CLIP score against 'a photo of a {class}'; retrieval / original: their first K) or "
                            "first (the first K shots of every set)")
        parser.add_argument("--selection-clip", default=SELECTION_CLIP, metavar="SPEC",
                            help=f"the CLIP model of --selection clip (default: {SELECTION_CLIP}, the authors' "
                            "ViT-B/16; 'same': the --clip model)")
        parser.add_argument("--cler-delta-base", default="ST", metavar="STRATEGY",
                            help="the generated strategy the retrieval's CLER change is taken against in the CLER "
                            "change vs MTS correlation (Fig. 6; default ST)")
        parser.add_argument("--intervals", action="store_true",
                            help="each CLER's 95%% bootstrap interval over the test images (gensets' own "
                            "uncertainty; the comparison with Table 2 does not use it)")
        parser.add_argument("--batch-size", type=positive_int, default=32)
        parser.add_argument("--out", "--output", default="out/report-genbench",
                            help="folder for report.md, report.json and cler.png")

    def run(self, args):
        rep = compute(args.workspace, args.test, args.clip, features=args.features, split=args.split,
                      batch_size=args.batch_size, price_per_hour=args.price_per_hour, centres=args.cler_centres,
                      ensemble=args.cler_ensemble, metric=args.metric, probe=args.probe, probe_c=args.probe_c,
                      shots=args.shots, delta_base=args.cler_delta_base, selection=args.selection,
                      selection_clip=None if args.selection_clip == "same" else args.selection_clip,
                      intervals=args.intervals)
        path = write(rep, args.out)
        print("variants: " + ", ".join(f"{k} {v['name']}" for k, v in rep["variants"].items()))
        for r in rep["rows"]:
            print(f"{r['dataset']}  {r['strategy']} ({r['data_type']}, K={r['shots']})  ({r['metric']})  CLER {_pct(r['cler'])}  ensemble "
                  f"{_pct(r['cler_ensemble'])}  zero-shot {_pct(r['zero_shot'])}  linear probe {_probe_cell(r)}")
        print(f"{path} (+ report.json, cler.png, correlations.png, shots.png in {path.parent})")
        return 0
