"""ImageNet-D's ``gensets reproduce`` table: ``imagenet-d-table`` (Zhang et al. 2024): the released ImageNet-D
(``hf:zcs15/ImageNet-D``) scored with the paper's model families under their protocols (``imagenet``,
``zero-shot``, ``two-way``); ``gensets report imagenet-d``. Smoke: the smoke build of
``configs/imagenet_d.smoke.yaml``.

The paper's five numbers are accuracy drops (ImageNet minus ImageNet-D). ``--imagenet-val DIR`` (a local ImageNet
validation folder of class folders named by WordNet id: :mod:`gensets.papers.imagenet_d.imagenet_val`) scores the
same models under the same protocols on its images of the 113 classes, and each row is then gensets' drop; without
it a row shows the ImageNet-D accuracy and "drop: needs ImageNet accuracy", never a verdict. The paper leaves open
how the subsets combine (gensets: pooled over their images) and which ImageNet split and classes (gensets: the
validation images of the 113 classes); the comparison is :func:`gensets.compare.compare`'s (the paper names model
families only: shown, never judged)."""

from __future__ import annotations

from pathlib import Path

from ...errors import GensetsError
from ..tables import Evaluation, Run, Table, build, compared, evaluate, seeded
from . import report as imagenet_d
from .imagenet_val import PREFIX
from .released import looks_released

RELEASED = "hf:zcs15/ImageNet-D"


def released(run: Run) -> str:
    """The released ImageNet-D the paper run scores: --source PATH (a local copy in the authors' layout), else the
    Hub's."""
    if not run.sources:
        return RELEASED
    if len(run.sources) > 1 or not looks_released(Path(run.sources[0])):
        raise GensetsError(f"--source {run.sources[-1]}: not a copy of the released ImageNet-D in its authors' layout "
                           "(background/, texture/, material/ holding its class folders); give one folder")
    return run.sources[0]


def _imagenet_d(table: Table, run: Run) -> dict:
    if run.imagenet_val:
        _score_imagenet_val(table, run)
    if not run.smoke:  # the released images: no generation to vary (--seeds refused by Table.no_seeds)
        return imagenet_d_rows(run.db, run.out / "report", evaluate(table, run, released(run)))
    results = []
    for i, (ws, overrides) in enumerate(seeded(table, run, run.ws)):
        # the dataset this run scored: --out's database may hold another (an earlier run with --workspace)
        dataset = evaluate(table, run, str(build(table, run, ws, overrides)))
        results.append(imagenet_d_rows(run.db, run.out / ("report" if i == 0 else f"report-{ws.name}"), dataset,
                                       table.stand_ins))
    return compared(results)


# two-way on ImageNet's images: no released questions there, so CLIP picks each wrong option (the table's CLIP)
IMAGENET_VAL_CLIP = "open_clip:ViT-B-16/openai"


def _score_imagenet_val(table: Table, run: Run) -> None:
    """The table's models under the same protocols on ``imagenet-val:DIR`` (two-way's wrong options from the
    table's CLIP), into the same database: the ImageNet side of each drop."""
    from dataclasses import replace

    clip = "tiny:clip" if run.smoke else IMAGENET_VAL_CLIP
    evs = tuple(replace(e, clip=e.clip or clip) if e.protocol.startswith("two-way") else e
                for e in (table.smoke_evaluations if run.smoke else table.evaluations))
    evaluate(replace(table, evaluations=evs, smoke_evaluations=evs), run, f"{PREFIX}{run.imagenet_val}")


def _check(table: Table, run: Run) -> None:
    if not run.smoke:
        released(run)  # refused before --out is made


def _plan(table: Table, run: Run) -> list[str]:
    val = ([f"score {PREFIX}{run.imagenet_val} with {', '.join(e.models)} (protocol {e.protocol}): the ImageNet side "
            "of each drop" for e in table.evaluations] if run.imagenet_val else [])
    return val + [f"score {released(run)} with {', '.join(e.models)} (protocol {e.protocol})" for e in table.evaluations]


# the paper as the table's output cites it (the numbers: gensets/data/imagenet_d/published.json)
IMAGENET_D_PAPER = ("Zhang et al., \"ImageNet-D: Benchmarking Neural Network Robustness on Diffusion Synthetic "
                    "Object\", CVPR 2024 (arXiv:2403.18775): the per-family accuracy drops as a summary of its key "
                    "results gives them (the paper's tables were not available to check)")


def imagenet_d_rows(db: Path, report_dir: Path, dataset: str | None = None,
                    stand_ins: dict[str, str] | None = None) -> dict:
    """``gensets report imagenet-d`` on ``db`` (written to ``report_dir``; ``dataset``: the one of the database's
    ImageNet-D datasets, None: its only one; ``stand_ins``: tiny models beside families) as the table's rows: each
    family's drop (or, without ImageNet runs, its ImageNet-D accuracy, pooled over the subsets' images), named in
    the row, with gensets' own interval over images and the comparison (:func:`gensets.compare.compare`)."""
    rep = imagenet_d.compute(db, dataset, stand_ins=stand_ins)
    report = imagenet_d.write(rep, report_dir)
    per = {(m["model"], m["variant"]): m for m in rep["per_model"]}
    entries = {p["what"]: p for p in imagenet_d.imagenet_d_published()["numbers"]}
    rows = []
    for r in rep["published"]["rows"]:
        m = per.get((r["model"], r["variant"]))
        note = None
        if m is not None and m["drop"] is None:
            note = f"ImageNet-D top-1 {100 * m['all']:.2f}; drop: needs ImageNet accuracy" if m["all"] is not None \
                else f"{m['counted']} of {m['n']} answers name one option: no TRUE / (TRUE + FALSE)"
        elif m is not None:
            note = f"ImageNet {100 * m['imagenet']['top1']:.2f} - ImageNet-D {100 * m['all']:.2f}"
        rows.append({
            "what": r["family"], "quantity": f"accuracy drop ({r['protocol']}), ImageNet-D {rep['overall']}",
            "published": r["published"], "model": r["model"],
            "variant": None if r["model"] is None else r["variant"]
            + ("" if r["stand_in"] is None else f"; stand-in for {r['family']}"),
            "gensets": None if m is None else m["drop"], "gensets_note": note,
            "interval": None if m is None else m["interval"], "interval_kind": None if m is None else "ImageNet-D, images",
            "difference": r["difference"], "comparison": r["comparison"], "random_weights": r["random_weights"],
            "published_entry": entries[r["family"]],
            "measured": None if m is None else imagenet_d.measured(m, rep["overall"], rep["population"])})
    overall = f"ImageNet-D {rep['overall']}: {imagenet_d.OVERALL[rep['overall']]}"
    return {"rows": rows, "report": str(report), "source": IMAGENET_D_PAPER, "interval": rep["interval"],
            "random_weights": rep["random_weights"],
            "note": f"{rep['published']['checked']} gensets' drop: its ImageNet top-1 (--imagenet-val) minus its "
                    f"{overall} (the report has each subset and the mean of subsets too; two-way counts TRUE / "
                    "(TRUE + FALSE), as the authors' compute_accuracy.py)."}


# ImageNet-D's ResNet and ViT-L/16 as the authors load models: torchvision's ImageNet-1k weights (timm has no
# tv_in1k tag for vit_large_patch16_224); the paper does not say which ResNet, ResNet-50 is gensets' reading
RESNET50 = "torchvision:resnet50@IMAGENET1K_V1"
VIT_L16 = "torchvision:vit_l_16@IMAGENET1K_V1"

TABLE = Table(
    "imagenet-d-table", "ImageNet-D (Zhang et al. 2024)",
    "accuracy drops (ImageNet minus ImageNet-D) of ResNet, ViT-L/16, CLIP, LLaVA on the released ImageNet-D, beside "
    "the paper's",
    "the Hub (the released dataset, ~4,800 images; the models) and a GPU for LLaVA-1.5-13B (~1 hour on one "
    "A100; the rest minutes)", _imagenet_d,
    smoke_config="imagenet_d.smoke.yaml",
    # the authors' loader (chenshuang-zhang/imagenet_d, utils/models.py): a torchvision model with its
    # ImageNet-1k weights and weights.transforms(); pinned by the weights' file (its sha256 prefix, checked)
    evaluations=(Evaluation("imagenet", (RESNET50, VIT_L16), allow_pickle=True),
                 Evaluation("zero-shot", ("open_clip:ViT-B-16/openai",)),
                 Evaluation("two-way", ("hf:llava-hf/llava-1.5-13b-hf",))),
    smoke_evaluations=(Evaluation("imagenet", ("tiny:resnet", "tiny:vit")),
                       Evaluation("zero-shot", ("tiny:clip",)),
                       # tiny:vlm-chair answers "chair" to every question (gensets.models.tiny.spelled):
                       # TRUE on a chair, FALSE where chair is the wrong option, else left out. Greedy: the
                       # authors' decoding (512 sampled tokens) is tested in tests/test_vlm.py
                       Evaluation("two-way", ("tiny:vlm-chair",), clip="tiny:clip", decoding="greedy")),
    variants={"vit-l16-augreg-in21k": (
        "ViT-L/16 pretrained on ImageNet-21k (AugReg) and fine-tuned on 1k: gensets' earlier choice",
        {VIT_L16: "timm:hf-hub:timm/vit_large_patch16_224.augreg_in21k_ft_in1k"}),
              "resnet50-timm": ("ResNet-50 with torchvision's weights through timm (its preprocessing)",
                                {RESNET50: "timm:hf-hub:timm/resnet50.tv_in1k"})},
    # every family with a runnable model (MiniGPT-4 has none in gensets) has a tiny stand-in
    stand_ins={"tiny:resnet": "ResNet", "tiny:vit": "ViT-L/16", "tiny:clip": "CLIP", "tiny:vlm-chair": "LLaVa"},
    no_seeds="scores the released images, no generation or selection to vary", sources=True,
    options={"--source": "PATH, a local copy of the released ImageNet-D (its authors' layout) instead of "
                         "hf:zcs15/ImageNet-D",
             "--imagenet-val": "the same models and protocols on its images of ImageNet-D's 113 classes: each row "
                               "becomes gensets' accuracy drop (without it: the ImageNet-D accuracy, no drop)"},
    imagenet_val=True,
    check=_check, plan=_plan)
