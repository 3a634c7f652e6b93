"""``gensets reproduce`` and ``gensets report imagenet-d``: a paper table end to end, gensets' numbers beside the
published ones. ImageNet-D's smoke run here (GenBench's Table 2 smoke run is in test_genbench.py, beside its
build); the numbers are checked against the predictions the database holds, the published ones against the
paper's text as typed here."""

from __future__ import annotations

import json
import shutil

import pytest

from gensets.evaluation.reports.imagenet_d import family

from .conftest import ROOT, run_cli
from .test_eval import query


@pytest.mark.parametrize(("model", "protocol", "expected"), [
    ("timm:hf-hub:timm/resnet50.a1_in1k", "imagenet", "ResNet"),
    ("torchvision:resnet152@IMAGENET1K_V1", "imagenet", "ResNet"),
    ("timm:hf-hub:timm/vit_large_patch16_224.augreg_in21k_ft_in1k", "imagenet", "ViT-L/16"),
    ("torchvision:vit_l_16@IMAGENET1K_V1", "imagenet", "ViT-L/16"),
    ("timm:hf-hub:timm/vit_large_patch14_clip_224.openai_ft_in1k", "imagenet", None),  # patch 14, not ViT-L/16
    ("timm:hf-hub:timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", "imagenet", None),
    ("open_clip:ViT-L-14/openai", "zero-shot (imagenet-d official)", "CLIP"),
    ("open_clip:ViT-L-14/openai", "imagenet", None),  # CLIP is compared under zero-shot only
    ("timm:hf-hub:timm/resnet50.a1_in1k", "zero-shot", None),
    ("hf:llava-hf/llava-1.5-13b-hf", "two-way (wrong_option=released-csv)", "LLaVa"),
    ("hf:llava-hf/llava-1.5-13b-hf", "vqa", None),
    ("hf:someone/MiniGPT-4", "two-way (wrong_option=clip open_clip:ViT-L-14/openai)", "MiniGPT-4"),
])
def test_a_run_is_compared_with_the_paper_family_of_its_protocol_and_spec(model, protocol, expected):
    assert family(model, protocol) == expected


@pytest.mark.slow
def test_imagenet_d_table_smoke_beside_the_published_accuracies(reference, tmp_path):
    """The smoke run (the build resumed from a copy of the session's smoke build: nothing left to generate)
    scores tiny:resnet (imagenet), tiny:clip (zero-shot) and tiny:vlm (two-way), and prints each paper family
    beside the gensets run of its protocol: the value is every image's top-1 pooled over the three nuisances,
    recomputed here from the stored predictions; the difference is gensets - published."""
    out = tmp_path / "idt"
    shutil.copytree(reference, out / "workspace")
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", "--json",
                check=0)
    res = json.loads(r.stdout)
    assert res["smoke"] is True and "meaningless" in res["smoke_note"]
    rows = {x["what"]: x for x in res["rows"]}
    # the paper's numbers, as the summary prints them ("ResNet (55.02%)", ...)
    assert {k: v["published"] for k, v in rows.items()} == {
        "ResNet": 0.5502, "ViT-L/16": 0.594, "CLIP": 0.4605, "LLaVa": 0.2967, "MiniGPT-4": 0.1681}
    db = out / "results.duckdb"
    for what, model in (("ResNet", "tiny:resnet"), ("CLIP", "tiny:clip")):
        preds = query(db, f"SELECT p.correct1, r.config FROM predictions p JOIN runs r USING (run_id) "
                          f"WHERE r.model = '{model}'")
        assert {p["config"] for p in preds} == {"background", "texture", "material"}
        pooled = sum(p["correct1"] for p in preds) / len(preds)
        assert rows[what]["model"] == model
        assert rows[what]["gensets"] == pytest.approx(pooled)
        assert rows[what]["difference"] == pytest.approx(pooled - rows[what]["published"])
    assert rows["CLIP"]["variant"] == "zero-shot (imagenet-d official)"
    # families no tiny model stands for are shown as not run, never estimated
    for what in ("ViT-L/16", "LLaVa", "MiniGPT-4"):
        assert rows[what]["model"] is None and rows[what]["gensets"] is None
    # the full report: per nuisance, and its JSON agrees with the table
    rep = json.loads((out / "report" / "report.json").read_text())
    resnet = next(m for m in rep["per_model"] if m["model"] == "tiny:resnet")
    assert resnet["complete"] and resnet["all"] == pytest.approx(rows["ResNet"]["gensets"])
    assert sum(c["n"] for c in resnet["configs"].values()) == resnet["n"] == len(preds)

    # a rerun resumes: nothing built, every evaluation skipped, the same table, as markdown
    again = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", check=0)
    assert "0 run now" in again.stderr and again.stderr.count("skipped ") >= 3, again.stderr
    assert "| row | protocol / metric | published | gensets | difference |" in again.stdout
    assert "| ResNet | imagenet | 55.02 |" in again.stdout and "smoke run" in again.stdout
    assert (out / "reproduce.md").read_text() == again.stdout


def test_reproduce_refuses_what_it_cannot_run_in_one_line(tmp_path):
    r = run_cli("reproduce", "genbench-table2", "--dataset", "cifar-11", "--out", tmp_path / "o",
                "--configs", ROOT / "configs")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        r.stderr.strip().splitlines()[0]] and "cifar-11" in r.stderr and "Table 2" in r.stderr
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", tmp_path / "o", "--configs", tmp_path)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "imagenet_d.smoke.yaml" in r.stderr


def test_list_tables_names_every_reproducible_table():
    rows = json.loads(run_cli("list", "tables", "--json", check=0).stdout)
    from gensets.reproduce import TABLES

    assert {r["name"] for r in rows if r["name"].startswith("reproduce:")} == {f"reproduce:{t}" for t in TABLES}
