"""ImageNet-D's ``gensets reproduce`` table: ``imagenet-d-table`` (Zhang et al. 2024): the released ImageNet-D
(``hf:zcs15/ImageNet-D``) scored with the paper's model families under their protocols (``imagenet``,
``zero-shot``, ``two-way``); ``gensets report imagenet-d``. Smoke: the smoke build of
``configs/imagenet_d.smoke.yaml``. Every gensets number has its 95% interval over images (a bootstrap:
:data:`~gensets.papers.imagenet_d.report.INTERVAL`)."""

from __future__ import annotations

from pathlib import Path

from ...errors import GensetsError
from ..tables import Evaluation, Run, Table, build, evaluate, over_seeds, seeded
from . import report as imagenet_d
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
    if not run.smoke:  # the released images: no generation to vary (--seeds refused by Table.no_seeds)
        return imagenet_d_rows(run.db, run.out / "report", evaluate(table, run, released(run)))
    results = []
    for i, (ws, overrides) in enumerate(seeded(table, run, run.ws)):
        # the dataset this run scored: --out's database may hold another (an earlier run with --workspace)
        dataset = evaluate(table, run, str(build(table, run, ws, overrides)))
        results.append(imagenet_d_rows(run.db, run.out / ("report" if i == 0 else f"report-{ws.name}"), dataset,
                                       table.stand_ins))
    return over_seeds(results)


def _check(table: Table, run: Run) -> None:
    if not run.smoke:
        released(run)  # refused before --out is made


def _plan(table: Table, run: Run) -> list[str]:
    return [f"score {released(run)} with {', '.join(e.models)} (protocol {e.protocol})" for e in table.evaluations]


# the paper as the table's output cites it (the numbers: gensets/data/imagenet_d/published.json)
IMAGENET_D_PAPER = ("Zhang et al., \"ImageNet-D: Benchmarking Neural Network Robustness on Diffusion Synthetic "
                    "Object\", CVPR 2024 (arXiv:2403.18775): the per-family accuracies as a summary of its key results gives "
                    "them (the paper's tables were not available to check)")


def imagenet_d_rows(db: Path, report_dir: Path, dataset: str | None = None,
                    stand_ins: dict[str, str] | None = None) -> dict:
    """``gensets report imagenet-d`` on ``db`` (written to ``report_dir``; ``dataset``: the one of the database's
    ImageNet-D datasets, None: its only one; ``stand_ins``: tiny models beside families) as the table's rows: each
    family's top-1 under the report's default reading of overall (pooled over the subsets' images), named in the
    row, with its interval over images and the published number's verdict."""
    rep = imagenet_d.compute(db, dataset, stand_ins=stand_ins)
    report = imagenet_d.write(rep, report_dir)
    rows = [{"what": r["family"], "protocol": f"{r['protocol']}, top-1 {r['overall']}", "published": r["published"],
             "model": r["model"],
             "variant": None if r["model"] is None else r["variant"]
             + ("" if r["stand_in"] is None else f"; stand-in for {r['family']}")
             + ("" if r["gensets"] is not None else f"; {r['counted']} of {r['n']} answers name one option: no "
                                                    "TRUE / (TRUE + FALSE)"),
             "gensets": r["gensets"], "difference": r["difference"], "interval": r["interval"],
             "interval_kind": "images", "verdict": r["verdict"]}
            for r in rep["published"]["rows"]]
    overall = f"top-1 {rep['overall']}: {imagenet_d.OVERALL[rep['overall']]}"
    return {"rows": rows, "report": str(report), "source": IMAGENET_D_PAPER, "interval": rep["interval"],
            "note": f"{rep['published']['checked']} gensets' {overall} (the report has each subset and the mean of "
                    "subsets too; two-way counts TRUE / (TRUE + FALSE), as the authors' compute_accuracy.py)."}


# ImageNet-D's ResNet and ViT-L/16 as the authors load models: torchvision's ImageNet-1k weights (timm has no
# tv_in1k tag for vit_large_patch16_224); the paper does not say which ResNet, ResNet-50 is gensets' reading
RESNET50 = "torchvision:resnet50@IMAGENET1K_V1"
VIT_L16 = "torchvision:vit_l_16@IMAGENET1K_V1"

TABLE = Table(
    "imagenet-d-table", "ImageNet-D (Zhang et al. 2024)",
    "accuracy of ResNet, ViT-L/16, CLIP, LLaVA on the released ImageNet-D, beside the paper's",
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
                         "hf:zcs15/ImageNet-D"},
    check=_check, plan=_plan)
