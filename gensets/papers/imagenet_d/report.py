"""``gensets report imagenet-d``: top-1 of every model on an ImageNet-D (gensets-built or the released one) per
subset (nuisance: background, texture, material) and over the three, beside the paper's published accuracies.

The paper (Zhang et al. 2024, CVPR; gensets/data/imagenet_d/published.json) gives one accuracy per model FAMILY on
ImageNet-D: ResNet (protocol ``imagenet``), ViT-L/16 (``imagenet``), CLIP (``zero-shot``), LLaVa and MiniGPT-4
(``two-way``). A gensets run is set beside a family when its protocol is the family's and its model spec names
it (:func:`family`): ``resnet`` for ResNet, a ViT-L at patch 16 for ViT-L/16, any CLIP for CLIP, ``llava`` /
``minigpt`` for the VQA models; each row names the gensets model, the protocol variant and the reading of
"overall" behind its number, and the difference is gensets' minus the paper's, in points.

Top-1 is one definition everywhere: a classifier's image counts once; a ``two-way`` answer naming both options
or neither is left out (the authors' TRUE / (TRUE + FALSE), :func:`gensets.labels.twoway.two_way_outcomes`, the
function the eval run's ``top1`` comes from).

Overall, two readings (:data:`OVERALL`), both printed per model: ``pooled`` (every counted image of the three
subsets at once) and ``mean`` (the mean of the three subsets' accuracies, which differ in size). The authors'
scripts print per-subset accuracies only (chenshuang-zhang/imagenet_d: ``evaluate_imagenet_models.py`` loops over
background / texture / material and prints one accuracy each; ``LLaVA/compute_accuracy.py`` prints one per
results folder), and the paper's text as gensets has it (a summary, shared/papers/004) gives one number per
family without saying how it was formed; so neither reading is known to be the paper's. ``pooled`` (gensets'
reading, the default) is set beside the published numbers unless ``--overall mean`` is given.

Each reading has a 95% interval over images (:data:`INTERVAL`), and each published number is called ``within`` or
``outside`` the interval of the gensets number beside it. ``stand_ins`` ({model spec: family}) sets a model
beside a family its spec does not name: ``reproduce --smoke``'s tiny models, each row saying so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ...cards.markdown import code, table
from ...errors import GensetsError
from ...evaluation import store
from ...evaluation.reports.base import Report, add_precision, rows, verdict
from ...labels.twoway import two_way_outcomes
from ...output import files
from ...registry import REPORTS
from ...sources.packaged import imagenet_d_published

NUISANCES = ("background", "texture", "material")
PROTOCOLS = ("imagenet", "zero-shot", "two-way")
OVERALL = {"pooled": "pooled over the images of the three subsets", "mean": "mean of the three subsets"}
INTERVAL = ("95% percentile bootstrap over images (1000 resamples, seed 0): pooled resamples the counted images "
            "of the three subsets together; mean of subsets resamples each subset on its own")
RESAMPLES = 1000
PREDICTIONS = """
SELECT r.model, r.protocol AS variant, r.config, p.correct1, p.top5
FROM runs r JOIN predictions p USING (run_id)
WHERE r.dataset = ? AND r.dataset_revision IS NOT DISTINCT FROM ? AND coalesce(r.precision, 'fp32') = ?
  AND list_contains(?, split_part(r.protocol, ' (', 1))
ORDER BY r.model, r.protocol, r.config
"""
_FAMILIES = (  # (paper family, protocol, a pattern of the gensets model spec)
    ("ResNet", "imagenet", r"resnet"),
    ("ViT-L/16", "imagenet", r"vit[_-]?l(arge)?[_-]?(patch)?16|vit-l/16"),
    ("CLIP", "zero-shot", r"clip"),
    ("LLaVa", "two-way", r"llava"),
    ("MiniGPT-4", "two-way", r"minigpt"),
)


def family(model: str, protocol: str, stand_ins: dict[str, str] | None = None) -> str | None:
    """The paper's model family a gensets run is compared with: its protocol (the part before any variant) must be
    the family's and its spec must name it, or ``stand_ins`` map the spec to it; None otherwise."""
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
    revision = con.execute("SELECT dataset_revision FROM runs WHERE dataset = ? ORDER BY finished DESC NULLS LAST LIMIT 1",
                           [dataset]).fetchone()[0]
    return dataset, revision


def outcomes(protocol: str, predictions: list[dict]) -> list[bool]:
    """The correct / wrong outcomes a run's top-1 averages: two-way's counted answers
    (:func:`gensets.labels.twoway.two_way_outcomes`, as the run's own ``top1``), else every prediction."""
    base = protocol.split(" (", 1)[0]
    if base in ("two-way", "two-way-shuffled"):
        return two_way_outcomes(predictions, "official" if base == "two-way" else "shuffled")
    return [bool(p["correct1"]) for p in predictions]


def compute(db: str | Path, dataset: str | None = None, precision: str = "fp32", overall: str = "pooled",
            stand_ins: dict[str, str] | None = None) -> dict:
    """Per (model, protocol variant): top-1 per subset, pooled and mean of subsets, each reading's interval; the
    published families beside (``overall``: the reading set beside them, :data:`OVERALL`; ``stand_ins``: see the
    module)."""
    if overall not in OVERALL:
        raise GensetsError(f"--overall {overall!r}: one of {', '.join(OVERALL)}")
    con = store.connect(db, read_only=True)
    try:
        dataset, revision = _dataset(con, db, dataset)
        preds = rows(con, PREDICTIONS, [dataset, revision, precision, list(PROTOCOLS)])
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
             "n": 0, "counted": 0, "stand_in": (stand_ins or {}).get(model)}
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
        per_model.append(m)
    per_model.sort(key=lambda m: (-(m["all"] or 0), m["model"]))
    pub = imagenet_d_published()
    compared = []
    for p in pub["top1"]:
        ours = [m for m in per_model if m["family"] == p["model"]]
        if not ours:
            compared.append({"family": p["model"], "protocol": p["protocol"], "published": p["value"],
                             "model": None, "variant": None, "overall": overall, "gensets": None,
                             "difference": None, "complete": None, "interval": None, "verdict": None,
                             "stand_in": None})
        for m in ours:
            compared.append({"family": p["model"], "protocol": p["protocol"], "published": p["value"],
                             "model": m["model"], "variant": m["variant"], "overall": overall, "gensets": m["all"],
                             "difference": None if m["all"] is None else m["all"] - p["value"],
                             "complete": m["complete"], "interval": m["interval"],
                             "verdict": verdict(p["value"], m["interval"]), "stand_in": m["stand_in"],
                             "n": m["n"], "counted": m["counted"]})
    return {"dataset": dataset, "revision": revision, "precision": precision, "overall": overall,
            "interval": INTERVAL, "per_model": per_model,
            "published": {"paper": pub["paper"], "cite": pub["cite"], "checked": pub["checked"], "rows": compared}}


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
    side = [[r["family"], r["protocol"], _pct(r["published"]),
             "not run" if r["model"] is None else code(r["model"], True)
             + (f" (stand-in for {r['family']})" if r.get("stand_in") else ""),
             "-" if r["variant"] is None else code(r["variant"], True), _pct(r["gensets"]), _diff(r["difference"]),
             interval_cell(r.get("interval")), r.get("verdict") or "-"]
            for r in pub["rows"]]
    return ["## Published numbers (Zhang et al. 2024)", "",
            "Each paper family beside the gensets runs of its protocol whose model names it (top-1, "
            f"{OVERALL[rep['overall']]}: `--overall {rep['overall']}`); difference = gensets - published, in points; "
            f"interval: {INTERVAL}; published: within or outside it.",
            "",
            table(["family", "protocol", "published", "gensets model", "gensets variant", "gensets", "difference",
                   "95% interval (images)", "published is"], side), "", f"Source: {pub['paper']} ({pub['cite']}). {pub['checked']}", ""]


def _images(m: dict) -> str:
    return str(m["n"]) if m["counted"] == m["n"] else f"{m['n']} ({m['counted']} counted)"


def markdown(rep: dict) -> str:
    per = [[code(m["model"], True), code(m["variant"], True),
            *(_pct(m["configs"].get(c, {}).get("top1")) for c in NUISANCES),
            _pct(m["pooled"]) + ("" if m["complete"] else " (not all subsets)"),
            interval_cell(m["intervals"]["pooled"]), _pct(m["mean"]), interval_cell(m["intervals"]["mean"]),
            _images(m)]
           for m in rep["per_model"]]
    return "\n".join([
        f"# ImageNet-D report: {rep['dataset']}", "",
        f"Revision `{rep['revision']}`, runs at `{rep['precision']}`. Top-1 (%) per subset, pooled over the images "
        "of the three subsets and the mean of the three subsets, per model and protocol variant; two-way counts "
        "TRUE / (TRUE + FALSE), leaving out answers that name both options or neither (the authors' "
        "compute_accuracy.py). The authors' scripts print the per-subset accuracies only.", "",
        table(["model", "protocol (variant)", *NUISANCES, "pooled", "95% interval", "mean of subsets",
               "95% interval", "images"], per), "", f"Intervals: {rep['interval']}.", "",
        *published_markdown(rep)])


def write(rep: dict, out: str | Path) -> Path:
    with files(out, "gensets report imagenet-d") as staged:
        staged.write("report.json", json.dumps(rep, indent=1, sort_keys=True) + "\n")
        return staged.write("report.md", markdown(rep))


@REPORTS.register("imagenet-d")
class ImageNetD(Report):
    help = "ImageNet-D: top-1 per subset, pooled and mean of subsets, beside the paper's published accuracies"
    description = ("Per model and protocol variant (imagenet, zero-shot, two-way): top-1 on background, texture and "
                   "material, pooled over their images and the mean of the three, and the paper's published accuracy per model family beside it with "
                   "the difference, as markdown and JSON. Works on a gensets-built ImageNet-D and on the released one.")

    def add_arguments(self, parser):
        parser.add_argument("--db", required=True, help="the results database of `gensets eval`")
        parser.add_argument("--dataset", help="the dataset as recorded in runs (default: the only ImageNet-D one)")
        add_precision(parser, "which runs")
        parser.add_argument("--overall", choices=tuple(OVERALL), default="pooled",
                            help="the reading of overall accuracy set beside the paper's numbers: pooled (default: "
                                 "gensets' reading) or mean (of the three subsets); both are in the report, the "
                                 "authors' scripts print per-subset accuracies only")
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
