"""Borji (2022)'s ``gensets reproduce`` tables: ``borji-fig2`` (the recognition set with the paper's ten
classifiers, protocol ``wordset``) and ``borji-vqa`` (the VQA set, protocol ``vqa``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ...evaluation.reports.base import verdict
from ...workspace import load_build_config
from ..tables import Evaluation, Run, Table, build, evaluate
from . import recognition_report as recognition
from . import vqa_report as vqa


def _borji(kind: str) -> Callable[[Table, Run], dict]:
    """borji-fig2 (kind recognition, protocol wordset) and borji-vqa (kind vqa)."""

    def run_table(table: Table, run: Run) -> dict:
        ws = build(table, run, run.ws)
        evaluate(table, run, str(ws))
        module = recognition if kind == "recognition" else vqa
        rep = module.compute(run.db)
        report = module.write(rep, run.out / "report")
        return {**borji_rows(rep, image_sources(ws) if kind == "recognition" else None), "report": str(report)}

    return run_table


PAPER_IMAGES = ("dall-e-2", "midjourney")  # Borji (2022) scored DALL-E 2 and Midjourney images (Fig. 2)


def image_sources(ws: Path) -> tuple[str, ...]:
    """Who made a recognition workspace's images: each generate source's name, each import's source."""
    _, cfg = load_build_config(ws / "config.yaml", frozen=True)
    return (*(g.name or g.config_name for g in cfg.generate), *(i.source or i.config_name for i in cfg.imports))


def borji_rows(rep: dict, sources: tuple[str, ...] | None) -> dict:
    """A Borji report's best model per published number. ``sources``: the images' makers (recognition); unless
    they are the paper's (:data:`PAPER_IMAGES`) the row says so and has no difference: another generator's images
    are not the paper's measurement. Each row carries its model's 95% interval over images (the report's
    ``interval``) and the published number's verdict against it (none on images other than the paper's)."""
    other = sources is not None and not (sources and set(sources) <= set(PAPER_IMAGES))
    images = f"; images: {', '.join(sources)}, not the paper's DALL-E 2 / Midjourney" if other else ""
    rows = []
    for p in rep["published"]["numbers"]:
        metric = p["metric"]
        best = max(rep["per_model"], key=lambda r: r[metric] if r[metric] is not None else -1)
        value = best[metric]
        rows.append({"what": p["what"], "protocol": f"{rep['protocol']} {metric}"
                     + (" (approximate)" if p.get("approximate") else ""),
                     "published": p["value"], "model": best["model"], "variant": rep["protocol"] + images,
                     "gensets": value, "difference": None if value is None or other else value - p["value"],
                     "interval": (ci := best.get(f"{metric}_interval")), "interval_kind": "images" if ci else None,
                     "verdict": None if other else verdict(p["value"], ci)})
    note = rep["published"]["checked"]
    if other:
        note += (f" No difference is printed: these are {', '.join(sources)} images, the paper scored DALL-E 2 and "
                 "Midjourney images (bring them as configs/recognition.yaml's imports, sources dall-e-2 and "
                 "midjourney, and leave out its generate sources).")
    return {"rows": rows, "source": rep["published"]["source"], "note": note, "interval": rep["interval"]}


def _recognition_models(run: Run) -> tuple[str, ...]:
    """The paper's ten classifiers: configs/recognition.yaml's eval.models."""
    import yaml

    return tuple(yaml.safe_load((run.configs / "recognition.yaml").read_text())["eval"]["models"])


def _with_paper_models(table: Table, run: Run) -> Table:
    """borji-fig2's paper run scores with the ten classifiers its config (--configs) names."""
    if run.smoke:
        return table
    return replace(table, evaluations=(Evaluation("wordset", _recognition_models(run), allow_pickle=True),))


NO_SEEDS = "takes no seeds yet"

FIG2 = Table(
    "borji-fig2", "Borji (2022)",
    "top-1 / top-5 of the paper's ten ImageNet classifiers on generated images (word-set matching)",
    "the Hub (SD 2.1, SDXL, ten classifiers) and a GPU (~1 hour)", _borji("recognition"),
    config="recognition.yaml", smoke_config="recognition.smoke.yaml",
    smoke_evaluations=(Evaluation("wordset", ("tiny:resnet", "tiny:torchvision-googlenet"),
                                  allow_pickle=True),),
    no_seeds=NO_SEEDS, no_seeds_smoke=NO_SEEDS, prepare=_with_paper_models)
VQA = Table(
    "borji-vqa", "Borji (2022)", "binary VQA accuracy on generated images, beside OFA's",
    "the paper's 50 images and 241 questions under data/vqa/ (see configs/vqa.yaml), the Hub, a GPU",
    _borji("vqa"), config="vqa.yaml", smoke_config="vqa.smoke.yaml",
    evaluations=(Evaluation("vqa", ("hf:Salesforce/blip-vqa-base", "hf:dandelin/vilt-b32-finetuned-vqa",
                                    "hf:llava-hf/llava-1.5-7b-hf")),),
    smoke_evaluations=(Evaluation("vqa", ("tiny:blip-vqa",)),),
    no_seeds=NO_SEEDS, no_seeds_smoke=NO_SEEDS)
