"""``gensets report genbench``: CLER per (dataset, strategy) against real test images, like GenBench's Table 2.

For every GenBench workspace and every strategy in it, with one CLIP model (``--clip``):
- CLER and its ensemble variant (:func:`gensets.metrics.cler`), CLIP zero-shot accuracy on
  the same test images (the dataset's templates) and the differences;
- a linear probe: scikit-learn logistic regression on the frozen CLIP features of the generated images,
  scored on the real test images with the dataset's metric (accuracy, mean per class, 11-point mAP,
  ROC AUC);
- quality: Fréchet distance, KID, precision / recall (k-NN manifolds) between the CLIP features of the
  generated and the real images, CLIP score of each generated image with its prompt, Inception Score of
  the CLIP zero-shot softmax on the generated images;
- cost: measured generator seconds per image x price per hour.
The real test set is a folder (one sub-folder of images per class, named like the class) or a Hugging Face
dataset (``hf:<repo or path>[@rev]``: its ClassLabel matched to the classes by position when it has as many
names, else by name; unmatched classes are named on stderr). Only test images of generated classes are
scored; test images are read, and generated ones decoded, batch by batch (never all at once). Writes
report.md (datasets x strategies, best CLER per dataset in bold), report.json and cler.png.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ...errors import GensetsError
from ...registry import REPORTS
from ...sources.images import Images, load_test_set, parse_tests
from .base import Report


# ------------------------------------------------------------------ inputs
def read_workspace(path: str | Path):
    """(config, {published config: [Sample]}) of a GenBench workspace, from its committed candidate shards.

    The samples are :class:`gensets.shards.StoredSample`: their images and provenance stay in the shards
    and are read when asked for, so a workspace of any size costs a few hundred bytes per image."""
    from ...shards import Manifest, stored_samples
    from ...workspace import Workspace

    ws = Workspace(path)
    builder, cfg = ws.load()
    if builder.name != "genbench":
        raise GensetsError(f"{ws.root}: a {builder.name} workspace, not a genbench one")
    rows = {r["unit"]: r for r in Manifest(ws.manifest_path).rows()} if ws.manifest_path.exists() else {}
    by_config: dict[str, list] = defaultdict(list)
    for row in sorted(rows.values(), key=lambda r: r["shard"]):
        for s in stored_samples(ws.candidates / row["shard"], keep_meta=False):
            by_config[s.meta["config"]].append(s)
    if not by_config:
        raise GensetsError(f"{ws.root}: no generated images yet; run `gensets build` first")
    for samples in by_config.values():
        samples.sort(key=lambda s: s.key)
    return ws, cfg, dict(by_config)


# ------------------------------------------------------------------ scoring
def dataset_metric(metric: str, scores, targets) -> float:
    """The dataset's own metric (GenBench Table 4) of class scores (N, C) against class ids (N,)."""
    from ... import metrics as M

    if metric == "accuracy":
        return M.top1(scores, targets)
    if metric == "mean-per-class":
        return M.mean_per_class_accuracy(M.topk_correct(scores, targets, 1), targets)
    if metric == "11-point-map":
        return M.mean_average_precision_11pt(scores, targets)
    if metric == "roc-auc":
        return M.roc_auc(scores, targets)
    raise GensetsError(f"unknown metric {metric!r}")


def linear_probe(train_emb, train_labels, test_emb, test_labels, metric: str = "accuracy", c: float = 1.0):
    """Logistic regression on frozen features of the generated images, scored on the real ones with ``metric``.

    Returns None when the generated images hold a single class (nothing to separate). Class scores of the
    classes the probe never saw are -inf (never predicted).
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    seen = np.unique(train_labels)
    if seen.size < 2:
        return None
    clf = LogisticRegression(C=c, max_iter=2000)
    clf.fit(np.asarray(train_emb, dtype=np.float64), train_labels)
    n = int(max(seen.max(), test_labels.max())) + 1
    scores = np.full((len(test_labels), n), -np.inf)
    scores[:, clf.classes_] = clf.predict_log_proba(np.asarray(test_emb, dtype=np.float64))
    try:
        return dataset_metric(metric, np.maximum(scores, -1e300), test_labels)
    except ValueError:  # e.g. ROC AUC without both positives and negatives
        return None


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


def compute(workspaces: list[str], tests: list[str] | None = None, clip: str = "open_clip:ViT-B-32/openai",
            *, features: str | None = None, split: str = "test", batch_size: int = 32,
            price_per_hour: float | None = None, probe_c: float = 1.0, k: int = 3) -> dict:
    """Every number of the report, as plain data (also written as report.json).

    ``features``: the classifier spec whose image features (``embed``) FD, KID and precision / recall use
    and whose softmax the Inception Score uses (e.g. an Inception or DINOv2 timm model); default: the CLIP
    model (its zero-shot softmax over the generated classes for IS)."""
    import numpy as np

    from ... import metrics as M
    from ...images import decode_image
    from ...models import load_classifier
    from ...registry import STRATEGIES
    from ...sources.classes import plain_name
    from ...timings import cost_per_image, measured

    test_sources = parse_tests(tests)
    by_dataset: dict[str, list] = defaultdict(list)
    for w in workspaces:
        ws, cfg, by_config = read_workspace(w)
        by_dataset[cfg.dataset_name].append((ws, cfg, by_config))
    rows, datasets = [], {}
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
        zero_shot = M.top1(test_logits, test_y)
        datasets[name] = {"dataset": cfg.dataset, "metric": cfg.metric, "classes": len(generated),
                          "test_images": len(keep), "test_source": source, "test_class_match": info["match"],
                          "unmatched_test_classes": info["unmatched"],
                          "zero_shot": zero_shot, "clip": clip, "features": features or clip}
        for ws, wcfg, by_config in items:
            price = wcfg.cost.price_per_hour if price_per_hour is None else price_per_hour
            for config, samples in sorted(by_config.items(), key=lambda kv: STRATEGIES.names().index(kv[1][0].meta["strategy"])):
                gen_images = Images(samples, lambda batch: [decode_image(s.image) for s in batch])
                gen_y = np.array([local[s.cls] for s in samples])
                gen_emb, probs, *gen_feat = _passes(gen_images, batch_size, [(clf, "embed"), (feat, "logits")]
                                                    + ([(feat, "embed")] if features else []))
                gen_feat = gen_feat[0] if features else gen_emb
                prompt_emb = np.concatenate([clf.embed_text([s.meta["prompt"] for s in samples[i : i + batch_size]])
                                             .cpu().numpy() for i in range(0, len(samples), batch_size)])
                probs = np.exp(probs - probs.max(axis=1, keepdims=True))
                probs /= probs.sum(axis=1, keepdims=True)
                present = np.isin(test_y, gen_y)
                cler = M.cler(gen_emb, gen_y, test_emb[present], test_y[present])
                ens = M.cler(gen_emb, gen_y, test_emb[present], test_y[present], text_emb=text_emb)
                timing = measured(ws.fingerprint, {s.meta["unit"] for s in samples})
                spi = timing["seconds_per_image"] if timing else None
                rows.append({
                    "dataset": name, "strategy": samples[0].meta["strategy"], "config": config,
                    "workspace": str(ws.root), "build": ws.fingerprint, "generated": len(samples),
                    "test_images": int(present.sum()),
                    "cler": cler, "cler_ensemble": ens, "zero_shot": zero_shot,
                    "cler_minus_zero_shot": cler - zero_shot, "ensemble_minus_zero_shot": ens - zero_shot,
                    "linear_probe": linear_probe(gen_emb, gen_y, test_emb, test_y, cfg.metric, probe_c),
                    "metric": cfg.metric,
                    "fd": _safe(M.frechet_distance, test_feat, gen_feat),
                    "kid": _safe(M.kid, test_feat, gen_feat, subsets=100, subset_size=1000),
                    **dict(zip(("precision", "recall"), _safe(M.precision_recall, test_feat, gen_feat, k) or (None, None),
                               strict=True)),
                    "clip_score": M.clip_score(gen_emb, prompt_emb),
                    "inception_score": M.inception_score(probs),
                    "seconds_per_image": spi, "price_per_hour": price, "currency": wcfg.cost.currency,
                    "cost_per_image": cost_per_image(spi, price) if spi is not None else None,
                    "reference_costs": {k2: {"per_image": v.per_image, "source": v.source}
                                        for k2, v in wcfg.cost.reference.items()},
                })
    return {"clip": clip, "features": features or clip, "datasets": datasets, "rows": rows}


# ------------------------------------------------------------------ outputs
def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _num(v, fmt=".3f") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(rep: dict) -> str:
    from ...cards.markdown import table

    strategies = _strategies(rep)
    lines = ["# GenBench report", "",
             f"CLER (%) of the generated training images of each strategy against real test images, with "
             f"`{rep['clip']}` (GenBench, Li et al. 2023, Table 2); the best strategy per dataset in bold. "
             "Zero-shot: CLIP zero-shot accuracy (%) on the same test images with the dataset's templates. "
             f"FD, KID, precision / recall and IS on the features of `{rep['features']}`.", ""]
    best_rows = []
    for name, d in rep["datasets"].items():
        vals = {r["strategy"]: r["cler"] for r in rep["rows"] if r["dataset"] == name}
        best = max(vals.values()) if vals else None
        cells = [("**" + _pct(vals[s]) + "**" if vals[s] == best else _pct(vals[s])) if s in vals else "-"
                 for s in strategies]
        best_rows.append([name, *cells, _pct(d["zero_shot"])])
    lines += [table(["dataset", *strategies, "zero-shot"], best_rows),
              "", "## Per (dataset, strategy)", ""]
    rows = [[r["dataset"], r["strategy"], r["generated"], r["test_images"], _pct(r["cler"]), _pct(r["cler_ensemble"]),
             _pct(r["zero_shot"]), _pct(r["cler_minus_zero_shot"]), _pct(r["ensemble_minus_zero_shot"]),
             f"{_pct(r['linear_probe'])} ({r['metric']})", _num(r["fd"]), _num(r["kid"], ".4f"),
             _num(r["precision"], ".2f"), _num(r["recall"], ".2f"), _num(r["clip_score"], ".2f"),
             _num(r["inception_score"], ".2f"), _num(r["seconds_per_image"]),
             "-" if r["cost_per_image"] is None else f"{r['cost_per_image']:.6f} {r['currency']}"] for r in rep["rows"]]
    lines.append(table(["dataset", "strategy", "images", "test", "CLER", "CLER ens.", "zero-shot", "CLER - ZS",
                        "ens. - ZS", "linear probe (metric)", "FD", "KID", "precision", "recall", "CLIP score", "IS",
                        "s / image", "cost / image"], rows))
    refs = {k: v for r in rep["rows"] for k, v in r["reference_costs"].items()}
    if refs:
        lines += ["", "Other ways to get an image, for comparison with the cost per image:", "",
                  table(["way", "per image", "source"], [[k, f"{v['per_image']:g}", v["source"]] for k, v in refs.items()])]
    lines += ["", "Cost per image = measured generator seconds per image x price per hour / 3600 (timings are "
              "recorded while building, per unit, on the building machine).", "", "![CLER per strategy](cler.png)", ""]
    return "\n".join(lines)


def _strategies(rep: dict) -> list[str]:
    """The strategies of the report's rows, in the paper's order."""
    from ...registry import STRATEGIES

    return [s for s in STRATEGIES.names() if any(r["strategy"] == s for r in rep["rows"])]


def plot(rep: dict, path: Path) -> None:
    """Grouped bars: CLER per strategy for each dataset, the zero-shot accuracy as a dashed line."""
    from ...cards.figures import PALETTE, figure, save

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
        ax.hlines(100 * rep["datasets"][name]["zero_shot"], i - 0.45, i + 0.45, colors="black", linestyles="dashed",
                  label="zero-shot" if i == 0 else None)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylabel("CLER (%)")
    ax.set_ylim(0, 100)
    fig.legend(loc="lower center", ncol=len(strategies) + 1, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, path)


def write(rep: dict, out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(rep, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    plot(rep, out / "cler.png")
    (out / "report.md").write_text(markdown(rep), encoding="utf-8")
    return out / "report.md"


@REPORTS.register("genbench")
class GenBench(Report):
    help = "CLER of GenBench workspaces against real test images"
    description = ("Per (dataset, strategy): CLER and its text ensemble, CLIP zero-shot accuracy on the same test "
                   "images and the difference, a linear probe scored with the dataset's metric, FD / KID / precision "
                   "/ recall / CLIP score / IS, and the cost per image; a markdown table (datasets x strategies, best "
                   "in bold) and a plot.")

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
        parser.add_argument("--price-per-hour", type=float,
                            help="generator device price per hour (default: the config's)")
        parser.add_argument("--probe-c", type=float, default=1.0, help="inverse regularisation C of the linear probe")
        parser.add_argument("--batch-size", type=int, default=32)
        parser.add_argument("--out", default="out/report-genbench",
                            help="folder for report.md, report.json and cler.png")

    def run(self, args):
        rep = compute(args.workspace, args.test, args.clip, features=args.features, split=args.split,
                      batch_size=args.batch_size, price_per_hour=args.price_per_hour, probe_c=args.probe_c)
        path = write(rep, args.out)
        for r in rep["rows"]:
            print(f"{r['dataset']}  {r['strategy']}  CLER {100 * r['cler']:.1f}  ensemble "
                  f"{100 * r['cler_ensemble']:.1f}  zero-shot {100 * r['zero_shot']:.1f}")
        print(f"{path} (+ report.json, cler.png in {path.parent})")
        return 0
