"""``gensets reproduce`` and ``gensets report imagenet-d``: a paper table end to end, gensets' numbers beside the
published ones. ImageNet-D's smoke run here (GenBench's Table 2 smoke run is in test_genbench.py, beside its
build); the numbers are checked against the predictions the database holds, the published ones against the
paper's text as typed here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gensets.papers.imagenet_d.report import family

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
    ("hf:openai/clip-vit-base-patch16", "zero-shot", "CLIP"),
    ("open_clip:ViT-bigG-14/laion2b_s39b_b160k", "zero-shot", None),  # LAION's: not the paper's (OpenAI's) CLIP
    ("timm:hf-hub:timm/resnext101_32x8d.fb_wsl_ig1b_ft_in1k", "imagenet", None),
    ("open_clip:ViT-L-14/openai", "imagenet", None),  # CLIP is compared under zero-shot only
    ("timm:hf-hub:timm/resnet50.a1_in1k", "zero-shot", None),
    ("hf:llava-hf/llava-1.5-13b-hf", "two-way (wrong_option=released-csv)", "LLaVa"),
    ("hf:llava-hf/llava-1.5-13b-hf", "vqa", None),
    ("hf:someone/MiniGPT-4", "two-way (wrong_option=clip open_clip:ViT-L-14/openai)", "MiniGPT-4"),
])
def test_a_run_is_compared_with_the_paper_family_of_its_protocol_and_spec(model, protocol, expected):
    assert family(model, protocol) == expected


@pytest.mark.slow
def test_imagenet_d_table_smoke_beside_the_published_drops(reference, tmp_path):
    """The smoke run (the build resumed from a copy of the session's smoke build: nothing left to generate)
    scores the tiny stand-ins of the paper's families (tiny:resnet for ResNet, tiny:vit for ViT-L/16 under
    imagenet, tiny:clip for CLIP under zero-shot, tiny:vlm-chair for LLaVa under two-way) and prints each family's
    published DROP beside its stand-in: without ImageNet runs, its ImageNet-D top-1 pooled over the three nuisances
    (recomputed here from the stored predictions, with the written-out bootstrap of those outcomes as gensets' own
    interval) and "drop: needs ImageNet accuracy"; never a verdict (random weights, and no drop). MiniGPT-4 alone has
    no runnable model. A rerun resumes; --seeds 2 lists each build's number and decides nothing either."""
    from gensets.output import claim

    out = tmp_path / "idt"
    claim(out, "gensets reproduce imagenet-d-table")  # a folder an earlier reproduce made, its build copied in
    shutil.copytree(reference, out / "workspace")
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", "--json",
                check=0)
    res = json.loads(r.stdout)
    assert res["smoke"] is True and "meaningless" in res["smoke_note"]
    rows = {x["what"]: x for x in res["rows"]}
    # the paper's numbers, drops as the summary prints them ("ResNet (55.02%)", ...)
    assert {k: v["published"] for k, v in rows.items()} == {
        "ResNet": 0.5502, "ViT-L/16": 0.594, "CLIP": 0.4605, "LLaVa": 0.2967, "MiniGPT-4": 0.1681}
    assert all(v["quantity"].startswith("accuracy drop") for v in rows.values())
    import numpy as np

    from gensets.papers.imagenet_d.report import NUISANCES

    db = out / "results.duckdb"
    for what, model in (("ResNet", "tiny:resnet"), ("ViT-L/16", "tiny:vit"), ("CLIP", "tiny:clip")):
        preds = query(db, f"SELECT p.correct1, r.config FROM predictions p JOIN runs r USING (run_id) "
                          f"WHERE r.model = '{model}' ORDER BY r.config, p.rowid")
        assert {p["config"] for p in preds} == set(NUISANCES)
        right = np.array([p["correct1"] for c in NUISANCES for p in preds if p["config"] == c], float)
        ci = _loop_ci(len(right), lambda i, r=right: r[i].mean())
        row = rows[what]
        assert row["model"] == model and row["variant"].endswith(f"; stand-in for {what}")
        assert row["gensets"] is None and row["difference"] is None and row["random_weights"]
        assert row["gensets_note"] == f"ImageNet-D top-1 {100 * right.mean():.2f}; drop: needs ImageNet accuracy"
        assert row["interval"] == pytest.approx(ci, abs=1e-12) and row["interval_kind"] == "ImageNet-D, images"
        assert row["comparison"]["text"].startswith("not comparable: quantity (drop: needs ImageNet accuracy)")
        assert row["comparison"]["verdict"] is None
    assert rows["CLIP"]["variant"] == "zero-shot (imagenet-d official); stand-in for CLIP"
    llava = rows["LLaVa"]
    assert llava["model"] == "tiny:vlm-chair" and "stand-in for LLaVa" in llava["variant"]
    assert "fp32 on cpu, pad-square" in llava["variant"]  # not the authors' fp16 (CUDA only), named
    assert rows["MiniGPT-4"]["model"] is None and rows["MiniGPT-4"]["comparison"]["test"] == "not run"
    rep = json.loads((out / "report" / "report.json").read_text())
    resnet = next(m for m in rep["per_model"] if m["model"] == "tiny:resnet")
    assert resnet["complete"] and resnet["interval"] == rows["ResNet"]["interval"] and resnet["drop"] is None

    # a rerun resumes: nothing built, every evaluation skipped, the same table, as markdown
    again = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", check=0)
    assert "0 run now" in again.stderr and again.stderr.count("skipped ") >= 3, again.stderr
    assert "| row | quantity | published | gensets | gensets 95% interval | difference | comparison |" in again.stdout
    assert "| ResNet | accuracy drop (imagenet), ImageNet-D pooled | 55.02 | - (ImageNet-D top-1 " in again.stdout
    assert "smoke run" in again.stdout and "**Random weights**" in again.stdout
    assert (out / "reproduce.md").read_text() == again.stdout
    assert "shared/papers" not in again.stdout
    for text in (again.stdout, (out / "report" / "report.md").read_text()):
        assert not any(w in text for w in ("| consistent", "| differs", "within", "outside")), text

    # --seeds 2: a second build at the config's seed + 1 (workspace-seed1), scored the same way; each row lists its
    # number of each build (none here: no drop without ImageNet runs), and nothing is judged
    two = json.loads(run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--seeds", "2", "--json",
                             check=0).stdout)
    import yaml

    assert yaml.safe_load((out / "workspace-seed1" / "config.yaml").read_text())["seed"] == 1
    for row in two["rows"]:
        assert row["seeds"] == {"n": 2, "values": None} and row["comparison"]["verdict"] is None


def _imagenet_val(folder: Path, per_class: int = 2) -> Path:
    """A smoke ImageNet validation folder: tiny noise images in the WordNet-id folders of ImageNet-D's backpack, chair
    (three ImageNet classes) and mug, and of one class ImageNet-D does not map (left out)."""
    import numpy as np
    from PIL import Image

    from gensets.papers.imagenet_d.imagenet_val import class_of_wnid

    rng = np.random.default_rng(0)
    wnids = [w for w, c in class_of_wnid().items() if c["name"] in ("backpack", "chair", "mug")] + ["n01440764"]
    for w in wnids:
        (folder / w).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / w / f"val_{i}.png")
    return folder


def test_imagenet_d_table_smoke_computes_drops_with_an_imagenet_val_folder(reference, tmp_path):
    """`reproduce imagenet-d-table --smoke`: without --imagenet-val each row says "drop" and "drop: needs ImageNet
    accuracy", with no verdict; with a smoke ImageNet validation folder the same models under the same protocols
    score its images of the 113 classes (the unmapped class left out) and each row is gensets' drop, ImageNet top-1
    minus ImageNet-D top-1, recomputed here from the stored predictions; still never judged (random weights)."""
    from gensets.output import claim

    out = tmp_path / "idt"
    claim(out, "gensets reproduce imagenet-d-table")
    shutil.copytree(reference, out / "workspace")
    first = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", check=0)
    assert first.stdout.count("drop: needs ImageNet accuracy") >= 4 and "| accuracy drop (imagenet)" in first.stdout
    val = _imagenet_val(tmp_path / "val")
    res = json.loads(run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs",
                             "--imagenet-val", val, "--json", check=0).stdout)
    db = out / "results.duckdb"
    from gensets.papers.imagenet_d.report import outcomes

    ran = query(db, "SELECT DISTINCT dataset, config FROM runs WHERE dataset = 'imagenet-val'")
    assert ran == [{"dataset": "imagenet-val", "config": "imagenet-val"}]
    n_val = query(db, "SELECT count(*) AS n FROM predictions JOIN runs USING (run_id) WHERE model = 'tiny:resnet' "
                      "AND dataset = 'imagenet-val'")[0]["n"]
    assert n_val == 2 * 5  # backpack, mug and chair's three ImageNet classes; the tench folder left out
    rows = {r["what"]: r for r in res["rows"]}
    for what, model in (("ResNet", "tiny:resnet"), ("CLIP", "tiny:clip"), ("LLaVa", "tiny:vlm-chair")):
        acc = {}
        for dataset in ("imagenet-val", "<d>"):
            where = "r.dataset = 'imagenet-val'" if dataset == "imagenet-val" else "r.dataset <> 'imagenet-val'"
            preds = query(db, "SELECT p.correct1, p.top5, r.protocol FROM predictions p JOIN runs r USING (run_id) "
                              f"WHERE r.model = '{model}' AND {where}")
            counted = outcomes(preds[0]["protocol"], preds)
            acc[dataset] = sum(counted) / len(counted) if counted else None
        row = rows[what]
        if None in acc.values():  # two-way's chair-only answers: no counted answer on a side
            assert row["gensets"] is None
            continue
        assert row["gensets"] == pytest.approx(acc["imagenet-val"] - acc["<d>"])
        assert row["gensets_note"].startswith("ImageNet ") and row["random_weights"]
        assert row["comparison"]["test"] == "not comparable" and "random weights" in row["comparison"]["text"]
        assert row["comparison"]["verdict"] is None and row["difference"] is None
    md = (out / "reproduce.md").read_text()
    report = (out / "report" / "report.md").read_text()
    assert "**Random weights**" in md and "**Random weights**" in report and "| ImageNet | drop |" in report
    for text in (md, report):
        assert not any(w in text for w in ("| consistent", "| differs", "within", "outside"))
    bad = run_cli("reproduce", "borji-vqa", "--smoke", "--imagenet-val", val, "--out", tmp_path / "o", "--dry-run")
    assert bad.returncode == 2 and "--imagenet-val" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


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
    from gensets.reproduce import tables

    TABLES = tables()
    assert {r["name"] for r in rows if r["name"].startswith("reproduce:")} == {f"reproduce:{t}" for t in TABLES}


class _Answers:
    """A stand-in VLM: each image's answer is given by its key (as tests/test_vlm.py's _Scripted)."""

    def __init__(self, by_key: dict):
        self.by_key, self.model_id, self.revision = by_key, "scripted", None

    def answer(self, images, questions, max_new_tokens=10, **decoding):
        return [self.by_key[im.info["key"]] for im in images]


# per subset: (answer kind, ...): TRUE names the true class, FALSE the wrong one, both / neither are left out
_MIX = {"background": ("TRUE", "TRUE", "FALSE", "both", "neither"), "texture": ("TRUE", "neither"),
        "material": ("FALSE", "FALSE", "both")}
_SAY = {"TRUE": "It is a backpack.", "FALSE": "This is a mug.", "both": "a backpack or a mug", "neither": "no idea"}


def test_llava_row_is_the_authors_true_over_true_plus_false_in_run_report_and_reproduce(tmp_path):
    """Two-way runs (the real protocol, its real metrics, written by the real store) with a known mix of TRUE /
    FALSE / both / neither answers: the run's top1, `gensets report imagenet-d` and `reproduce imagenet-d-table`'s
    row give the authors' TRUE / (TRUE + FALSE) (compute_accuracy.py), per subset and pooled, the same numbers."""
    from PIL import Image

    from gensets.evaluation import store
    from gensets.evaluation.data import Split
    from gensets.evaluation.protocols.base import Models
    from gensets.evaluation.runner import EvalConfig
    from gensets.papers.imagenet_d.tables import imagenet_d_rows
    from gensets.registry import PROTOCOLS
    from gensets.reproduce import markdown

    spec, db = "hf:llava-hf/llava-1.5-13b-hf", tmp_path / "results.duckdb"
    names = ["backpack", "mug"]
    cfg = EvalConfig("hf:zcs15/ImageNet-D", (spec,), db, protocol="two-way", decoding="greedy")
    con = store.connect(db)
    run_top1 = {}
    for config, kinds in _MIX.items():
        keys = [f"{config}-{i}" for i in range(len(kinds))]
        split = Split(config, "test", names, records=lambda: iter(()), wrong_options=dict.fromkeys(keys, 1))
        p = PROTOCOLS.get("two-way")(_Answers({k: _SAY[x] for k, x in zip(keys, kinds, strict=True)}), split,
                                     first={}, cfg=cfg, models=Models())
        images = []
        for k in keys:
            im = Image.new("RGB", (8, 8))
            im.info["key"] = k
            images.append(im)
        scored = p.score(images, [{"key": k, "target": 0} for k in keys])
        mets = p.metrics(scored.rows, scored.extra)
        run_top1[config] = next(m["value"] for m in mets if m["name"] == "top1")
        store.write_run(con, {"dataset": cfg.dataset, "dataset_revision": "r1", "config": config, "split": "test",
                              "model": spec, "model_id": spec, "model_revision": None, "protocol": p.run_protocol,
                              "label_space": "dataset", "n": len(keys), "precision": "fp32",
                              "settings": "s", "class_names": names}, scored.rows, mets)
    con.close()
    # the authors' count: background 2 / (2 + 1), texture 1 / 1, material 0 / 2; pooled 3 / 6
    assert run_top1 == pytest.approx({"background": 2 / 3, "texture": 1.0, "material": 0.0})

    r = run_cli("report", "imagenet-d", "--db", db, "--out", tmp_path / "rep", "--json", check=0)
    rep = json.loads(r.stdout)
    llava = next(m for m in rep["per_model"] if m["model"] == spec)
    assert {c: v["top1"] for c, v in llava["configs"].items()} == pytest.approx(run_top1)
    assert llava["pooled"] == pytest.approx(3 / 6) and llava["counted"] == 6 and llava["n"] == 10
    assert llava["mean"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    row = next(x for x in rep["published"]["rows"] if x["family"] == "LLaVa")
    assert row["imagenet_d"] == pytest.approx(0.5) and row["overall"] == "pooled" and row["drop"] is None
    assert row["comparison"]["text"].startswith("not comparable: quantity (drop: needs ImageNet accuracy)")
    # the interval of each reading: pooled, the written-out bootstrap of the six counted outcomes (subset order)
    import numpy as np

    counted = np.array([1, 1, 0, 1, 0, 0], float)
    pooled_ci = _loop_ci(6, lambda i: counted[i].mean())
    assert llava["intervals"]["pooled"] == pytest.approx(pooled_ci, abs=1e-12)
    assert llava["intervals"]["mean"] is None  # texture has one counted answer: no per-subset resampling
    assert (f"| 50.00 | [{100 * pooled_ci[0]:.2f}, {100 * pooled_ci[1]:.2f}] | 55.56 | - | 10 (6 counted) | - | - |"
            in (tmp_path / "rep" / "report.md").read_text())
    mean = json.loads(run_cli("report", "imagenet-d", "--db", db, "--out", tmp_path / "rep2", "--json",
                              "--overall", "mean", check=0).stdout)
    assert next(x for x in mean["published"]["rows"] if x["family"] == "LLaVa")["imagenet_d"] == pytest.approx(5 / 9)

    # the same model on ImageNet's validation images (the dataset imagenet-val): 3 TRUE, 1 FALSE, 1 left out ->
    # ImageNet 3 / 4, the drop 0.75 - 0.5; every image here is a backpack, one of the 113 classes: another quantity
    # than the paper's all-class drop, so not compared (the family-only comparison: tests/test_compare.py)
    con = store.connect(db)
    keys = [f"n0000000{i}/v.png" for i in range(5)]
    split = Split("imagenet-val", "test", names, records=lambda: iter(()), wrong_options=dict.fromkeys(keys, 1))
    p = PROTOCOLS.get("two-way")(_Answers(dict(zip(keys, [_SAY[x] for x in ("TRUE", "TRUE", "TRUE", "FALSE", "both")],
                                                   strict=True))), split, first={}, cfg=cfg, models=Models())
    images = []
    for k in keys:
        im = Image.new("RGB", (8, 8))
        im.info["key"] = k
        images.append(im)
    val = p.score(images, [{"key": k, "target": 0} for k in keys])
    store.write_run(con, {"dataset": "imagenet-val", "dataset_revision": "v1", "config": "imagenet-val",
                          "split": "test", "model": spec, "model_id": spec, "model_revision": None,
                          "protocol": p.run_protocol, "label_space": "dataset", "n": 5, "settings": "s",
                          "class_names": names}, val.rows, p.metrics(val.rows, val.extra))
    # a second ImageNet-D scored into the same database (`--workspace` runs sharing one --out): the table is
    # the dataset the run scored, named by the run, not a refusal
    store.write_run(con, {"dataset": "elsewhere", "dataset_revision": "r1", "config": "background", "split": "test",
                          "model": spec, "model_id": spec, "model_revision": None, "protocol": p.run_protocol,
                          "label_space": "dataset", "n": len(keys), "precision": "fp32", "settings": "s",
                          "class_names": names}, scored.rows, mets)
    con.close()
    res = imagenet_d_rows(db, tmp_path / "reproduce-report", cfg.dataset)
    assert "shared/papers" not in res["source"] and "arXiv:2403.18775" in res["source"]
    llava_row = next(x for x in res["rows"] if x["what"] == "LLaVa")
    assert llava_row["gensets"] == pytest.approx(0.75 - 0.5)
    assert llava_row["quantity"] == "accuracy drop (two-way), ImageNet-D pooled"
    assert llava_row["gensets_note"] == "ImageNet 75.00 - ImageNet-D 50.00"
    assert llava_row["difference"] is None and llava_row["interval"] == pytest.approx(pooled_ci, abs=1e-12)
    assert llava_row["comparison"]["test"] == "not comparable" and llava_row["comparison"]["verdict"] is None
    md = markdown({"table": "imagenet-d-table", "paper": "p", "what": "w", "smoke": False, **res})
    assert ("| LLaVa | accuracy drop (two-way), ImageNet-D pooled | 29.67 | 25.00 (ImageNet 75.00 - ImageNet-D 50.00) "
            f"| [{100 * pooled_ci[0]:.2f}, {100 * pooled_ci[1]:.2f}] (ImageNet-D, images) | - | not comparable: "
            "classes (all vs 1 of them) |") in md


def test_imagenet_d_vit_l16_is_the_authors_torchvision_checkpoint_and_augreg_a_named_variant(tmp_path):
    """The authors load torchvision models with their ImageNet-1k weights and weights.transforms()
    (chenshuang-zhang/imagenet_d, utils/models.py): ViT-L/16 is torchvision's vit_l_16, pinned by its weights'
    file; the 21k-pretrained AugReg checkpoint runs only as --variant vit-l16-augreg-in21k."""
    from torchvision.models import get_model_weights

    from gensets.reproduce import tables, with_variants

    table = tables()["imagenet-d-table"]
    models = {m: e for e in table.evaluations for m in e.models}
    vit = next(m for m in models if family(m, "imagenet") == "ViT-L/16")
    assert vit == "torchvision:vit_l_16@IMAGENET1K_V1" and models[vit].allow_pickle
    assert get_model_weights("vit_l_16").IMAGENET1K_V1.url.endswith("vit_l_16-852ce7e3.pth")  # sha256-pinned file
    augreg = with_variants(table, ("vit-l16-augreg-in21k",))
    specs = [m for e in augreg.evaluations for m in e.models]
    assert "timm:hf-hub:timm/vit_large_patch16_224.augreg_in21k_ft_in1k" in specs and vit not in specs
    r = run_cli("reproduce", "imagenet-d-table", "--variant", "nope", "--out", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "vit-l16-augreg-in21k" in r.stderr and not (tmp_path / "o").exists()


def test_borji_pools_two_imported_sources_into_one_row_and_compares_the_papers_images_only(tmp_path):
    """A recognition set of the paper's two sources, imported (dall-e-2 and midjourney, two categories, tiny images):
    its population is the paper's (images_of), and each published number has ONE row per model, its number over
    both sources' images together (mean over categories, counted here from the stored predictions), not the best of
    (model x source); a tiny model is random weights: not compared, no difference, no verdict in any output. The
    paper config's SD 2.1 / SDXL sources are other images."""
    import numpy as np
    from PIL import Image

    from gensets.papers.borji import recognition_report as recognition
    from gensets.papers.borji.tables import borji_rows, images_of

    rng = np.random.default_rng(0)
    for source in ("dall-e-2", "midjourney"):
        for cat in ("clock", "rabbit"):
            (tmp_path / source / cat).mkdir(parents=True)
            for i in range(2):
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(tmp_path / source / cat / f"{i}.png")
    (tmp_path / "rec.yaml").write_text("builder: recognition\nname: rec\ncategories: [clock, rabbit]\nimports:\n"
                                       "  - {path: dall-e-2, source: dall-e-2}\n  - {path: midjourney, source: midjourney}\n")
    ws, db = tmp_path / "ws", tmp_path / "r.duckdb"
    run_cli("build", tmp_path / "rec.yaml", "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, "--include-pending", check=0)
    run_cli("eval", ws, "--model", "tiny:resnet", "--protocol", "wordset", "--db", db, "--quiet", check=0)
    assert images_of(ws, "recognition") == "paper-images"
    (tmp_path / "paper.yaml").write_text((ROOT / "configs" / "recognition.yaml").read_text())
    shutil.copy(tmp_path / "paper.yaml", tmp_path / "config.yaml")
    assert images_of(tmp_path, "recognition") == "other"  # SD 2.1 and SDXL: not the paper's images
    rep = recognition.compute(db)  # configs named by the paper's sources: its population
    assert rep["population"] == "paper-images" and rep["configs"] == ["dall_e_2", "midjourney"]
    res = borji_rows(rep, "recognition", {"tiny:resnet": "resnext101_32x8d_wsl"})
    assert [(r["what"][:5], r["model"]) for r in res["rows"]] == [("top-1", "tiny:resnet"), ("top-5", "tiny:resnet")]
    preds = query(db, "SELECT p.target, p.correct1, p.correct5 FROM predictions p")
    assert len(preds) == 8
    for r, k in zip(res["rows"], ("correct1", "correct5"), strict=True):
        by_cat = {t: np.mean([p[k] for p in preds if p["target"] == t]) for t in {p["target"] for p in preds}}
        assert r["gensets"] == pytest.approx(np.mean(list(by_cat.values())))  # both sources, pooled
        assert "dall_e_2, midjourney pooled" in r["variant"] and "stand-in for resnext101_32x8d_wsl" in r["variant"]
        assert r["difference"] is None and r["comparison"]["verdict"] is None and r["random_weights"]
        assert "model (random weights)" in r["comparison"]["text"] and "population" not in r["comparison"]["text"]
    run_cli("report", "recognition", "--db", db, "--out", tmp_path / "rep", check=0)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "**Random weights**" in md and "configs `dall_e_2`, `midjourney` pooled" in md
    assert not any(w in md for w in ("| consistent", "| differs", "within", "outside"))


@pytest.mark.parametrize("name", ["borji-fig2", "borji-vqa"])
def test_borji_smoke_tables_print_no_verdict_anywhere(name, tmp_path):
    """`reproduce borji-fig2 / borji-vqa --smoke` from an empty folder: tiny generated images (not the paper's) and
    tiny models (random weights): every row is not comparable, with no difference, and no verdict appears in
    reproduce.md or the report it links to; a recognition row is one model over both smoke sources, pooled."""
    out = tmp_path / "out"
    res = json.loads(run_cli("reproduce", name, "--smoke", "--out", out, "--configs", ROOT / "configs", "--json",
                             check=0).stdout)
    assert res["rows"] and res["random_weights"]
    for r in res["rows"]:
        assert r["comparison"]["test"] == "not comparable" and "population" in r["comparison"]["text"]
        assert r["difference"] is None and r["comparison"]["verdict"] is None and r["random_weights"]
    if name == "borji-fig2":
        assert len(res["rows"]) == 2 * 2  # two published numbers x two models, each over both sources
        assert all("sd_2_steps, sd_4_steps pooled" in r["variant"] for r in res["rows"])
    for f in (out / "reproduce.md", out / "report" / "report.md"):
        text = f.read_text()
        assert "**Random weights**" in text
        assert not any(w in text for w in ("| consistent", "| differs", "within", "outside")), f


PACKAGED = ROOT / "gensets" / "data" / "configs"


def test_the_packaged_paper_configs_are_the_checkouts_configs_byte_for_byte():
    """configs/ is the source of truth (make and the golden builds read it); gensets/data/configs/ ships the
    configs `reproduce` reads (and the folders they name) with the package, byte for byte the same, and
    pyproject.toml's package data takes every one of them into an installed gensets."""
    import tomllib

    from gensets.reproduce import tables

    TABLES = tables()
    files = sorted(p.relative_to(PACKAGED) for p in PACKAGED.rglob("*") if p.is_file())
    for rel in files:
        assert (PACKAGED / rel).read_bytes() == (ROOT / "configs" / rel).read_bytes(), \
            f"gensets/data/configs/{rel} differs from configs/{rel}: copy configs/{rel} over it"
    needed = {c for t in TABLES.values() for c in (t.config, t.smoke_config) if c}
    assert needed <= {str(r) for r in files}
    refs = ROOT / "configs" / "genbench.smoke-refs"
    assert {p.relative_to(ROOT / "configs") for p in refs.rglob("*") if p.is_file()} <= set(files)
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gensets.data"]
    shipped = {p for g in globs for p in (ROOT / "gensets" / "data").glob(g)}
    assert {PACKAGED / r for r in files} <= shipped


@pytest.mark.slow
@pytest.mark.parametrize("table", ["genbench-table2", "borji-vqa"])
def test_reproduce_smoke_runs_from_an_empty_folder_outside_a_checkout(table, tmp_path):
    """As a user who installed gensets: no configs/ around, no --configs; the packaged configs are read."""
    import os
    import subprocess
    import sys

    import gensets

    env = {**os.environ, "PYTHONPATH": str(Path(gensets.__file__).parents[1])}
    r = subprocess.run([sys.executable, "-m", "gensets.cli", "reproduce", table, "--smoke", "--quiet"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "reproduce" / f"{table}-smoke" / "reproduce.md").read_text() == r.stdout
    assert "shared/papers" not in r.stdout


def test_genbench_table2_without_dataset_plans_the_datasets_it_can_and_names_the_others(tmp_path):
    """No --dataset: the Table 2 datasets with real test images (a known Hub copy, or --source) are planned, every
    other one is named in one line; an explicitly named one without test images is refused in one line."""
    from gensets.sources.packaged import genbench_hub_copies, genbench_published

    columns = genbench_published()["tables"]["2"]["columns"]
    copies = genbench_hub_copies()
    r = run_cli("reproduce", "genbench-table2", "--dry-run", "--out", tmp_path / "o",
                "--source", f"imagenet-1k={tmp_path / 'in1k-test'}", check=0)
    lines = r.stdout.strip().splitlines()
    for d in columns:
        mine = [x for x in lines if x.startswith(f"{d}: ")]
        assert len(mine) == 1, (d, lines)
        if d in copies:
            assert f"hf:{copies[d][0]}" in mine[0] and "not run" not in mine[0]
        elif d == "imagenet-1k":
            assert str(tmp_path / "in1k-test") in mine[0] and "not run" not in mine[0]
        else:
            assert "not run" in mine[0] and "--source" in mine[0]
    assert not (tmp_path / "o").exists()  # a plan builds nothing
    r = run_cli("reproduce", "genbench-table2", "--dataset", "caltech-101", "--out", tmp_path / "o")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--source caltech-101=" in r.stderr


def test_imagenet_d_table_takes_a_local_copy_of_the_released_set(tmp_path):
    """--source PATH: a folder in the authors' layout (background/<class folder>/...) instead of the Hub's copy;
    a folder that is not one is refused in one line."""
    (tmp_path / "rel" / "background" / "backpack").mkdir(parents=True)
    r = run_cli("reproduce", "imagenet-d-table", "--source", tmp_path / "rel", "--dry-run", check=0)
    assert f"score {tmp_path / 'rel'} with" in r.stdout and "zcs15" not in r.stdout
    r = run_cli("reproduce", "imagenet-d-table", "--source", tmp_path, "--dry-run")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "layout" in r.stderr
    r = run_cli("reproduce", "borji-vqa", "--source", tmp_path, "--dry-run")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--source" in r.stderr


# ------------------------------------------------------------------ variance: intervals, verdicts, seeds
def _loop_ci(n: int, statistic, n_resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap written out: ``n_resamples`` draws of n indices with replacement
    (``rng.integers(0, n, n)`` in turn, numpy's seeded generator), the 2.5% and 97.5% linear quantiles."""
    import numpy as np

    rng = np.random.default_rng(seed)
    stats = [statistic(rng.integers(0, n, size=n)) for _ in range(n_resamples)]
    return float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975))


def test_cler_interval_resamples_the_test_images_against_fixed_centres():
    """Two classes, centres on the axes: a test image is right when it lies nearer its own class's axis. The
    interval is the written-out bootstrap of that accuracy over the test images; the mean-per-class metric
    resamples the same images and scores each draw per class."""
    import numpy as np

    from gensets import metrics as M

    gen = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    gen_y = np.array([0, 0, 1, 1])
    test = np.array([[1, 0.2], [0.9, 0.3], [0.2, 1], [1, 0.1], [0.3, 1], [0.1, 1], [1, 0.9], [0.2, 0.8]])
    test_y = np.array([0, 0, 1, 1, 1, 0, 0, 1])
    right = np.array([1, 1, 1, 0, 1, 0, 1, 1], bool)  # by hand: nearer the own axis ([1, 0.9]: axis 0, class 0)
    assert M.cler(gen, gen_y, test, test_y) == pytest.approx(right.mean())
    assert M.cler_bootstrap_ci(gen, gen_y, test, test_y) == pytest.approx(
        _loop_ci(8, lambda i: right[i].mean()), abs=1e-12)

    def per_class(i):
        return np.mean([right[i][test_y[i] == c].mean() for c in np.unique(test_y[i])])

    assert M.cler_bootstrap_ci(gen, gen_y, test, test_y, metric="mean-per-class") == pytest.approx(
        _loop_ci(8, per_class), abs=1e-12)


def test_imagenet_d_intervals_pooled_over_images_and_per_subset_for_the_mean():
    """Pooled: the written-out bootstrap of every counted outcome. Mean of subsets: each subset resampled on its
    own, so subsets that are all right or all wrong give every resample the same mean (2/3), where the pooled
    resampling varies; one subset under two images has no mean interval."""
    import numpy as np

    from gensets.papers.imagenet_d.report import intervals

    by = {"background": [True] * 4, "texture": [False] * 3, "material": [True] * 2}
    pooled = np.array(by["background"] + by["texture"] + by["material"], float)
    got = intervals(by)
    assert got["pooled"] == pytest.approx(_loop_ci(9, lambda i: pooled[i].mean()), abs=1e-12)
    assert got["pooled"][0] < 6 / 9 < got["pooled"][1]
    assert got["mean"] == pytest.approx([2 / 3, 2 / 3])
    assert intervals({**by, "material": [True]})["mean"] is None


def test_seeds_are_compared_by_a_prediction_interval_over_the_builds_never_their_range():
    """Three builds' numbers of a row whose published number is of the paper's generation: the comparison is the
    95% prediction interval for one more build (mean +- t(0.975, 2) s sqrt(1 + 1/3), written out here), and a row
    some build lacks has no comparison over seeds."""
    import numpy as np
    from scipy.stats import t

    from gensets.compare import Measured
    from gensets.papers.tables import compared
    from gensets.reproduce import markdown

    entry = {"what": "x", "quantity": "cler", "aggregation": "dataset-metric", "population": "paper-generation",
             "classes": "all", "model": {"name": "SD", "level": "checkpoint", "checkpoints": ["org/sd"]},
             "precision": {"kind": "exact", "digits": 2}, "value": 0.55,
             "source": {"arxiv": "2307.13697", "where": "Table 2", "quote": "55.00"}}

    def res(a, b):
        common = {"quantity": "CLER", "variant": "v", "difference": None, "comparison": {"text": "one build"}}
        return {"rows": [{"what": "cifar-10 ST", "model": "diffusers:org/sd", "published": 0.55, "gensets": a,
                          "published_entry": entry, **common,
                          "measured": Measured(a, "cler", "dataset-metric", "rebuild", model="diffusers:org/sd")},
                         {"what": "cifar-10 CE", "model": "diffusers:org/sd", "published": 0.46, "gensets": b,
                          "published_entry": entry, "measured": None, **common}],
                "report": "r", "source": "s", "note": "n", "interval": "i"}

    out = compared([res(0.5, 0.1), res(0.6, 0.2), res(0.52, None)])
    st, ce = out["rows"]
    assert "measured" not in st and "published_entry" not in st and st["gensets"] == 0.5  # the config's seed
    v = [0.5, 0.6, 0.52]
    half = t.ppf(0.975, 2) * float(np.std(v, ddof=1)) * (1 + 1 / 3) ** 0.5
    lo, hi = sum(v) / 3 - half, sum(v) / 3 + half
    assert st["seeds"] == {"n": 3, "values": v} and st["comparison"]["interval"] == pytest.approx([lo, hi])
    assert st["comparison"]["verdict"] == ("consistent" if lo <= 0.55 <= hi else "differs")
    assert st["comparison"]["test"] == "prediction interval over seeds"
    assert ce["seeds"] == {"n": 3, "values": None} and ce["comparison"] == {"text": "one build"}  # a build lacks it
    md = markdown({"table": "t", "paper": "p", "what": "w", "smoke": False, **out})
    assert "| over seeds | comparison |" in md and "50.00, 60.00, 52.00" in md and "prediction interval" in md
    assert compared([res(0.5, 0.1)])["rows"][0]["comparison"] == {"text": "one build"}  # one build: as it was


def test_seeds_are_refused_where_nothing_is_generated(tmp_path):
    r = run_cli("reproduce", "imagenet-d-table", "--seeds", "3", "--dry-run", "--out", tmp_path / "o")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "released images" in r.stderr
    r = run_cli("reproduce", "borji-vqa", "--smoke", "--seeds", "2", "--dry-run", "--out", tmp_path / "o")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--seeds" in r.stderr
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--seeds", "3", "--dry-run", "--out", tmp_path / "o",
                check=0)
    assert "2 more build(s)" in r.stdout and not (tmp_path / "o").exists()
