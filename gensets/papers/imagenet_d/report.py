"""``gensets report imagenet-d``: top-1 of every model on an ImageNet-D (gensets-built or the released one) per
subset (nuisance: background, texture, material) and over the three, its ImageNet accuracy and drop where the same
database scored ImageNet's validation images (``imagenet-val:DIR``), beside the paper's published drops.

The paper (Zhang et al. 2024, CVPR; gensets/data/imagenet_d/published.json) gives one accuracy DROP per model
family, ImageNet accuracy minus ImageNet-D accuracy: ResNet 55.02 (protocol ``imagenet``), ViT-L/16 59.40
(``imagenet``), CLIP 46.05 (``zero-shot``), LLaVa 29.67 and MiniGPT-4 16.81 (``two-way``). A gensets run is set
beside a family when its protocol is the family's and its model spec is of it (:func:`family`: a ResNet, a ViT-L at
patch 16, OpenAI's CLIP, LLaVA, MiniGPT; ``stand_ins``: a tiny model a smoke run sets beside a family). Its drop is
its ImageNet accuracy (the runs of the dataset ``imagenet-val`` in the same database: the model under the same
protocol, :mod:`gensets.papers.imagenet_d.imagenet_val`) minus its ImageNet-D accuracy; without those runs the row
shows the ImageNet-D accuracy and says "drop: needs ImageNet accuracy". Each row's comparison is
:func:`gensets.compare.compare`'s: the paper names only model families, so a drop is shown and never judged.

What the paper leaves open, and gensets' reading: how the three subsets make one ImageNet-D accuracy (``pooled``,
gensets' reading, or ``mean``: :data:`OVERALL`, both printed per model); which ImageNet split and classes its
ImageNet accuracy is of (the validation images of the 113 classes, under the same protocol); which checkpoints.

Top-1 is one definition everywhere: a classifier's image counts once; a ``two-way`` answer naming both options
or neither is left out (the authors' TRUE / (TRUE + FALSE), :func:`gensets.labels.twoway.two_way_outcomes`, the
function the eval run's ``top1`` comes from). The authors' scripts print per-subset accuracies only
(chenshuang-zhang/imagenet_d: ``evaluate_imagenet_models.py``; ``LLaVA/compute_accuracy.py``).

Each reading has a 95% interval over images (:data:`INTERVAL`): gensets' own uncertainty, shown in the per-model
table; it decides nothing (the released images are the paper's: the same images, the difference only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...cards.markdown import code, table
from ...compare import Measured, compare, not_run
from ...errors import GensetsError
from ...evaluation import store
from ...evaluation.reports.base import Report, add_precision, random_weights_note, rows
from ...labels.twoway import two_way_outcomes
from ...output import files
from ...registry import REPORTS
from ...sources.packaged import imagenet_d_class_names, imagenet_d_published
from . import imagenet_val
from .released import RELEASED_REPO

NUISANCES = ("background", "texture", "material")
PROTOCOLS = ("imagenet", "zero-shot", "two-way")
OVERALL = {"pooled": "pooled over the images of the three subsets", "mean": "mean of the three subsets"}
AGGREGATION = {"pooled": "pooled-images", "mean": "mean-of-subsets"}  # gensets.compare.AGGREGATIONS
INTERVAL = ("95% percentile bootstrap over images (1000 resamples, seed 0): pooled resamples the counted images "
            "of the three subsets together; mean of subsets resamples each subset on its own")
RESAMPLES = 1000
PREDICTIONS = f"""
SELECT r.model, r.protocol AS variant, r.config, p.target, p.correct1, p.top5, {store.RANDOM_WEIGHTS} AS random_weights
FROM runs r JOIN predictions p USING (run_id)
WHERE r.dataset = ? AND r.dataset_revision IS NOT DISTINCT FROM ? AND {store.AUTOCAST} = ?
  AND list_contains(?, split_part(r.protocol, ' (', 1))
ORDER BY r.model, r.protocol, r.config
"""
_FAMILIES = (  # (paper family, protocol, a pattern of the gensets model spec)
    ("ResNet", "imagenet", r"(?<![a-z])resnet[-_]?\d"),
    ("ViT-L/16", "imagenet", r"vit[_-]?l(arge)?[_-]?(patch)?16|vit-l/16"),
    ("CLIP", "zero-shot", r"^open_clip:[^/]+/openai$|openai/clip-vit"),  # OpenAI's CLIP, not another CLIP-like
    ("LLaVa", "two-way", r"llava"),
    ("MiniGPT-4", "two-way", r"minigpt"),
)


def family(model: str, protocol: str, stand_ins: dict[str, str] | None = None) -> str | None:
    """The paper's model family a gensets run is set beside: its protocol (the part before any variant) must be
    the family's and its spec must be of it (OpenAI's CLIP for CLIP: a LAION or other CLIP-like model is another
    model), or ``stand_ins`` map the spec to it; None otherwise."""
    base = protocol.split(" (", 1)[0]
    for name, proto, pattern in _FAMILIES:
        if base == proto and ((stand_ins or {}).get(model) == name or re.search(pattern, model, re.IGNORECASE)):
            return name
    return None


def intervals(by_config: dict[str, list[bool]]) -> dict[str, list[float] | None]:
    """The :data:`INTERVAL` of each reading of overall: ``pooled`` (:func:`gensets.metrics.bootstrap_ci` of every
    counted outcome) and ``mean`` (the three subsets resampled apart, scipy's multi-sample percentile bootstrap;
    None unless every subset has two or more counted images)."""
    import numpy as np
    from scipy.stats import bootstrap

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    pooled = [x for c in NUISANCES for x in by_config.get(c, ())]
    out: dict[str, list[float] | None] = {
        "pooled": list(M.bootstrap_ci(np.array(pooled, float), n_resamples=RESAMPLES)) if pooled else None,
        "mean": None}
    groups = [np.array(by_config.get(c, ()), float) for c in NUISANCES]
    if all(len(g) >= 2 for g in groups):
        ci = bootstrap(groups, lambda *g: np.mean([x.mean() for x in g]), n_resamples=RESAMPLES,
                       method="percentile", vectorized=False, rng=np.random.default_rng(0)).confidence_interval
        out["mean"] = [float(ci.low), float(ci.high)]
    return out


def _dataset(con, db, dataset: str | None) -> tuple[str, str | None]:
    """The ImageNet-D dataset of the database (the one scored with these protocols, or ``dataset``) and its latest
    revision."""
    names = [r[0] for r in con.execute(
        "SELECT DISTINCT dataset FROM runs WHERE list_contains(?, split_part(protocol, ' (', 1)) "
        "AND list_contains(?, config) ORDER BY 1", [list(PROTOCOLS), list(NUISANCES)]).fetchall()]
    if dataset is None:
        if len(names) != 1:
            raise GensetsError(f"{db}: {len(names)} ImageNet-D datasets (configs background / texture / material) "
                               f"scored; name one with --dataset ({', '.join(names) or 'none'})")
        dataset = names[0]
    elif dataset not in names:
        raise GensetsError(f"{db}: no ImageNet-D runs (configs background / texture / material) of dataset "
                           f"{dataset!r} ({', '.join(names) or 'none'})")
    return dataset, _latest(con, dataset)


def _latest(con, dataset: str) -> str | None:
    row = con.execute("SELECT dataset_revision FROM runs WHERE dataset = ? ORDER BY finished DESC NULLS LAST LIMIT 1",
                      [dataset]).fetchone()
    return row[0] if row else None


def outcomes(protocol: str, predictions: list[dict]) -> list[bool]:
    """The correct / wrong outcomes a run's top-1 averages: two-way's counted answers
    (:func:`gensets.labels.twoway.two_way_outcomes`, as the run's own ``top1``), else every prediction."""
    base = protocol.split(" (", 1)[0]
    if base in ("two-way", "two-way-shuffled"):
        return two_way_outcomes(predictions, "official" if base == "two-way" else "shuffled")
    return [bool(p["correct1"]) for p in predictions]


def _imagenet(con, precision: str) -> dict[tuple[str, str], dict]:
    """Each (model, protocol) scored on ImageNet's validation images (the dataset ``imagenet-val``, its latest
    revision): its top-1 over the counted images, as an ImageNet-D run's is counted."""
    revision = _latest(con, imagenet_val.DATASET)
    if revision is None:
        return {}
    grouped: dict[tuple[str, str], list[dict]] = {}
    for r in rows(con, PREDICTIONS, [imagenet_val.DATASET, revision, precision, list(PROTOCOLS)]):
        grouped.setdefault((r["model"], r["variant"].split(" (", 1)[0]), []).append(r)
    out = {}
    for (model, base), ps in grouped.items():
        counted = outcomes(ps[0]["variant"], ps)
        out[(model, base)] = {"top1": sum(counted) / len(counted) if counted else None, "n": len(ps),
                              "counted": len(counted), "variant": ps[0]["variant"], "revision": revision,
                              "classes": sorted({p["target"] for p in ps}),
                              "random_weights": any(p["random_weights"] for p in ps)}
    return out


def compute(db: str | Path, dataset: str | None = None, precision: str = "fp32", overall: str = "pooled",
            stand_ins: dict[str, str] | None = None) -> dict:
    """Per (model, protocol variant): top-1 per subset, pooled and mean of subsets, each reading's interval, and
    (where the database has the model's runs on ``imagenet-val``) its ImageNet top-1 and drop; the published drops
    beside (``overall``: the reading of ImageNet-D accuracy a drop is taken from, :data:`OVERALL`; ``stand_ins``:
    see the module)."""
    if overall not in OVERALL:
        raise GensetsError(f"--overall {overall!r}: one of {', '.join(OVERALL)}")
    con = store.connect(db, read_only=True)
    try:
        dataset, revision = _dataset(con, db, dataset)
        preds = rows(con, PREDICTIONS, [dataset, revision, precision, list(PROTOCOLS)])
        on_imagenet = _imagenet(con, precision)
    finally:
        con.close()
    if not preds:
        raise GensetsError(f"{db}: no {precision} runs of {dataset!r} with protocol imagenet, zero-shot or two-way "
                           "(another --precision?)")
    grouped: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in preds:
        grouped.setdefault((r["model"], r["variant"]), {}).setdefault(r["config"], []).append(r)
    per_model = []
    for (model, variant), configs in grouped.items():
        m = {"model": model, "variant": variant, "family": family(model, variant, stand_ins), "configs": {},
             "n": 0, "counted": 0, "stand_in": (stand_ins or {}).get(model),
             "random_weights": any(p["random_weights"] for ps in configs.values() for p in ps),
             "classes": sorted({p["target"] for ps in configs.values() for p in ps})}
        correct = 0
        counted = {}
        for config, ps in configs.items():
            out = counted[config] = outcomes(variant, ps)
            m["configs"][config] = {"n": len(ps), "counted": len(out), "top1": sum(out) / len(out) if out else None}
            m["n"] += len(ps)
            m["counted"] += len(out)
            correct += sum(out)
        m["complete"] = all(c in m["configs"] for c in NUISANCES)
        m["pooled"] = correct / m["counted"] if m["counted"] else None
        subsets = [m["configs"][c]["top1"] for c in NUISANCES if c in m["configs"]]
        m["mean"] = (sum(subsets) / len(subsets)
                     if m["complete"] and None not in subsets else None)
        m["all"] = m[overall]
        m["intervals"] = intervals(counted)
        m["interval"] = m["intervals"][overall] if m[overall] is not None else None
        m["imagenet"] = on_imagenet.get((model, variant.split(" (", 1)[0]))
        top1 = (m["imagenet"] or {}).get("top1")
        m["drop"] = None if top1 is None or m["all"] is None else top1 - m["all"]
        per_model.append(m)
    per_model.sort(key=lambda m: (-(m["all"] or 0), m["model"]))
    population = "paper-images" if dataset == RELEASED_REPO else "rebuild"
    return {"dataset": dataset, "revision": revision, "precision": precision, "overall": overall,
            "interval": INTERVAL, "per_model": per_model, "population": population,
            "random_weights": sorted({m["model"] for m in per_model if m["random_weights"]}),
            "published": published(per_model, overall, population)}


def measured(m: dict, overall: str, population: str) -> Measured:
    """A model's row of the report as :func:`gensets.compare.compare` reads gensets' side: its drop where its
    ImageNet accuracy is known, else its ImageNet-D accuracy (top-1: not a drop); all classes only where both
    sides cover the 113."""
    everything = len(imagenet_d_class_names())
    imagenet = m.get("imagenet") or {}
    covered = set(m["classes"]) & set(imagenet.get("classes") or m["classes"])
    classes = "all" if len(covered) == everything else tuple(imagenet_d_class_names()[i] for i in sorted(covered))
    return Measured(m["drop"] if m["drop"] is not None else m["all"],
                    "accuracy-drop" if m["drop"] is not None else "top1", AGGREGATION[overall], population,
                    classes=classes, protocol=m["variant"].split(" (", 1)[0], model=m["model"], family=m["family"],
                    random_weights=m["random_weights"] or bool(imagenet.get("random_weights")), n=m["counted"])


def published(per_model: list[dict], overall: str, population: str) -> dict:
    """Each published drop beside every gensets run of its family (:func:`family`), compared by
    :func:`gensets.compare.compare`; a family gensets ran no model of is one row, not run."""
    pub = imagenet_d_published()
    compared = []
    for p in pub["numbers"]:
        ours = [m for m in per_model if m["family"] == p["what"]]
        base = {"family": p["what"], "protocol": p["protocol"], "quantity": p["quantity"], "published": p["value"],
                "overall": overall}
        if not ours:
            compared.append({**base, "model": None, "variant": None, "imagenet_d": None, "imagenet": None,
                             "drop": None, "gensets": None, "difference": None, "stand_in": None,
                             "random_weights": False, "comparison": not_run().as_dict()})
        for m in ours:
            c = compare(p, measured(m, overall, population))
            compared.append({**base, "model": m["model"], "variant": m["variant"], "imagenet_d": m["all"],
                             "imagenet": (m["imagenet"] or {}).get("top1"), "drop": m["drop"],
                             "gensets": m["drop"] if m["drop"] is not None else m["all"],
                             "difference": c.difference, "complete": m["complete"], "stand_in": m["stand_in"],
                             "random_weights": m["random_weights"], "n": m["n"], "counted": m["counted"],
                             "comparison": c.as_dict()})
    return {"paper": pub["paper"], "checked": pub["checked"], "rows": compared}


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def _diff(v) -> str:
    return "-" if v is None else f"{100 * v:+.2f}"


def interval_cell(ci) -> str:
    """An interval of fractions in points: ``[45.10, 60.20]``; ``-`` for none."""
    return "-" if ci is None else f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"


def published_markdown(rep: dict) -> list[str]:
    """The report's "Published numbers" section."""
    pub = rep["published"]
    side = [[r["family"], f"drop ({r['protocol']})", _pct(r["published"]),
             "not run" if r["model"] is None else code(r["model"], True)
             + (f" (stand-in for {r['family']})" if r.get("stand_in") else "")
             + (" (random weights)" if r.get("random_weights") else ""),
             "-" if r["variant"] is None else code(r["variant"], True), _pct(r["imagenet_d"]), _pct(r["imagenet"]),
             "drop: needs ImageNet accuracy" if r["model"] is not None and r["drop"] is None else _pct(r["drop"]),
             _diff(r["difference"]), r["comparison"]["text"]]
            for r in pub["rows"]]
    return ["## Published numbers (Zhang et al. 2024)", "",
            "The paper's numbers are accuracy drops, ImageNet accuracy minus ImageNet-D accuracy (ImageNet-D: "
            f"{OVERALL[rep['overall']]}, `--overall {rep['overall']}`; ImageNet: the model's runs on `imagenet-val:DIR`, "
            "the validation images of the 113 classes). Each family beside the gensets runs of its protocol whose "
            "model is of it; difference = gensets - published, in points; comparison: gensets.compare (README, "
            "\"How gensets compares with a paper\").", "",
            table(["family", "quantity (protocol)", "published", "gensets model", "gensets variant", "ImageNet-D",
                   "ImageNet", "gensets drop", "difference", "comparison"], side), "",
            f"Source: {pub['paper']}. {pub['checked']}", ""]


def _images(m: dict) -> str:
    return str(m["n"]) if m["counted"] == m["n"] else f"{m['n']} ({m['counted']} counted)"


def markdown(rep: dict) -> str:
    per = [[code(m["model"], True), code(m["variant"], True),
            *(_pct(m["configs"].get(c, {}).get("top1")) for c in NUISANCES),
            _pct(m["pooled"]) + ("" if m["complete"] else " (not all subsets)"),
            interval_cell(m["intervals"]["pooled"]), _pct(m["mean"]), interval_cell(m["intervals"]["mean"]),
            _images(m), _pct((m.get("imagenet") or {}).get("top1")), _pct(m.get("drop"))]
           for m in rep["per_model"]]
    return "\n".join([
        f"# ImageNet-D report: {rep['dataset']}", "",
        *random_weights_note(rep.get("random_weights") or ()),
        f"Revision `{rep['revision']}`, runs at `{rep['precision']}`. Top-1 (%) per subset, pooled over the images "
        "of the three subsets and the mean of the three subsets, per model and protocol variant; two-way counts "
        "TRUE / (TRUE + FALSE), leaving out answers that name both options or neither (the authors' "
        "compute_accuracy.py). The authors' scripts print the per-subset accuracies only. ImageNet: the same model "
        "and protocol on ImageNet's validation images of the 113 classes (`imagenet-val:DIR`), where this database "
        "has them; drop: ImageNet minus ImageNet-D (the `--overall` reading).", "",
        table(["model", "protocol (variant)", *NUISANCES, "pooled", "95% interval", "mean of subsets",
               "95% interval", "images", "ImageNet", "drop"], per), "", f"Intervals: {rep['interval']}.", "",
        *published_markdown(rep)])


def write(rep: dict, out: str | Path) -> Path:
    with files(out, "gensets report imagenet-d") as staged:
        staged.write("report.json", json.dumps(rep, indent=1, sort_keys=True) + "\n")
        return staged.write("report.md", markdown(rep))


@REPORTS.register("imagenet-d")
class ImageNetD(Report):
    help = "ImageNet-D: top-1 per subset, pooled and mean of subsets, and drops beside the paper's published drops"
    description = ("Per model and protocol variant (imagenet, zero-shot, two-way): top-1 on background, texture and "
                   "material, pooled over their images and the mean of the three; where the database also holds "
                   "the model's runs on ImageNet's validation images (gensets eval imagenet-val:DIR), its ImageNet "
                   "top-1 and drop; the paper's published drop per model family beside it, compared as gensets "
                   "compares (gensets.compare), as markdown and JSON. Works on a gensets-built ImageNet-D and on the "
                   "released one.")

    def add_arguments(self, parser):
        parser.add_argument("--db", required=True, help="the results database of `gensets eval`")
        parser.add_argument("--dataset", help="the dataset as recorded in runs (default: the only ImageNet-D one)")
        add_precision(parser, "which runs")
        parser.add_argument("--overall", choices=tuple(OVERALL), default="pooled",
                            help="the reading of ImageNet-D accuracy a drop is taken from: pooled (default: "
                                 "gensets' reading) or mean (of the three subsets); both are in the report, the "
                                 "paper does not say")
        parser.add_argument("--out", "--output", default="out/report-imagenet-d", help="folder for report.md and report.json")
        parser.add_argument("--json", action="store_true", help="print report.json's content instead of the path")

    def run(self, args):
        rep = compute(args.db, args.dataset, args.precision, args.overall)
        path = write(rep, args.out)
        if args.json:
            print(json.dumps(rep, indent=1, sort_keys=True))
        else:
            print(f"{path} (+ report.json in {path.parent})")
        return 0
