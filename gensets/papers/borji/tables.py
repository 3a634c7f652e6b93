"""Borji (2022)'s ``gensets reproduce`` tables: ``borji-fig2`` (the recognition set with the paper's ten
classifiers, protocol ``wordset``) and ``borji-vqa`` (the VQA set, protocol ``vqa``).

Each row is one published number beside one model's number over every image of the set (the sources pooled, as the
paper pooled its DALL-E 2 and Midjourney images), compared by :func:`gensets.compare.compare`: images that are not
the paper's are never compared (a generate source, an import of another source), the paper's resnext101_32x8d_wsl
and OFA only with themselves, and the recognition numbers are approximate: shown, never judged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ...workspace import load_build_config
from ..tables import Evaluation, Run, Table, build, evaluate
from . import recognition_report as recognition
from . import vqa_report as vqa


def _borji(kind: str) -> Callable[[Table, Run], dict]:
    """borji-fig2 (kind recognition, protocol wordset) and borji-vqa (kind vqa)."""

    def run_table(table: Table, run: Run) -> dict:
        ws = build(table, run, run.ws)
        evaluate(table, run, str(ws))
        population = images_of(ws, kind)
        if kind == "recognition":
            rep = recognition.compute(run.db, population=population)
        else:
            rep = vqa.compute(run.db, paper_images=population == "paper-images")
        report = (recognition if kind == "recognition" else vqa).write(rep, run.out / "report")
        return {**borji_rows(rep, kind, table.stand_ins), "report": str(report)}

    return run_table


PAPER_IMAGES = recognition.PAPER_IMAGES  # Borji (2022) scored DALL-E 2 and Midjourney images (Fig. 2), pooled


def image_sources(ws: Path) -> tuple[str, ...]:
    """Who made a recognition workspace's images: each generate source's name, each import's source."""
    _, cfg = load_build_config(ws / "config.yaml", frozen=True)
    return (*(g.name or g.config_name for g in cfg.generate), *(i.source or i.config_name for i in cfg.imports))


def images_of(ws: Path, kind: str) -> str:
    """Whose images a Borji workspace holds (:data:`gensets.compare.OUR_POPULATIONS`): ``paper-images`` for a
    recognition set of imports only, each of the paper's sources (:data:`PAPER_IMAGES`), or a VQA set of imported
    images with the paper config's questions (no prompts to generate from); else ``other``."""
    _, cfg = load_build_config(ws / "config.yaml", frozen=True)
    if kind == "recognition":
        ours = not cfg.generate and cfg.imports and all(i.source in PAPER_IMAGES for i in cfg.imports)
    else:
        ours = bool(cfg.image_folder) and not cfg.prompts
    return "paper-images" if ours else "other"


def borji_rows(rep: dict, kind: str, stand_ins: dict[str, str] | None = None) -> dict:
    """A Borji report's published rows as the table's rows: each published number beside each model's number over
    the whole set (pooled over its sources), with the comparison the report made."""
    rows = []
    for r in rep["published"]["rows"]:
        quantity = (f"{rep['protocol']} {r['metric']}, mean over categories" if kind == "recognition"
                    else "vqa accuracy, questions")
        rows.append({"what": r["what"], "quantity": quantity + (" (approximate)" if r.get("approximate") else ""),
                     "published": r["published"], "model": r["model"],
                     "variant": rep["protocol"] + (f"; stand-in for {stand_ins[r['model']]}"
                                                   if r["model"] in (stand_ins or {}) else "")
                     + (f"; {', '.join(r['configs'])} pooled" if kind == "recognition" else f"; {r['config']}"),
                     "gensets": r["gensets"], "difference": r["difference"], "interval": r["interval"],
                     "interval_kind": "images" if r["interval"] else None, "comparison": r["comparison"],
                     "random_weights": r["random_weights"]})
    note = rep["published"]["checked"]
    if rep["population"] != "paper-images":
        note += (" These are not the paper's images (it scored its DALL-E 2 and Midjourney images, pooled): no row "
                 "is compared; bring them as configs/recognition.yaml's imports, sources dall-e-2 and midjourney, "
                 "and leave out its generate sources." if kind == "recognition" else
                 " These are not the paper's images (its 50 images and 241 questions, configs/vqa.yaml): no row is "
                 "compared.")
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
    stand_ins={"tiny:resnet": "resnext101_32x8d_wsl", "tiny:torchvision-googlenet": "GoogleNet"},
    no_seeds=NO_SEEDS, no_seeds_smoke=NO_SEEDS, prepare=_with_paper_models)
VQA = Table(
    "borji-vqa", "Borji (2022)", "binary VQA accuracy on generated images, beside OFA's (compared with OFA only)",
    "the paper's 50 images and 241 questions under data/vqa/ (see configs/vqa.yaml), the Hub, a GPU",
    _borji("vqa"), config="vqa.yaml", smoke_config="vqa.smoke.yaml",
    evaluations=(Evaluation("vqa", ("hf:Salesforce/blip-vqa-base", "hf:dandelin/vilt-b32-finetuned-vqa",
                                    "hf:llava-hf/llava-1.5-7b-hf")),),
    smoke_evaluations=(Evaluation("vqa", ("tiny:blip-vqa",)),),
    stand_ins={"tiny:blip-vqa": "BLIP"},
    no_seeds=NO_SEEDS, no_seeds_smoke=NO_SEEDS)
