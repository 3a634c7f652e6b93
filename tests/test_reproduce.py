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
    scores the tiny stand-ins of the paper's families (tiny:resnet for ResNet, tiny:vit for ViT-L/16 under
    imagenet, tiny:clip for CLIP under zero-shot, tiny:vlm-chair for LLaVa under two-way) and prints each family beside
    its stand-in: the value is every image's top-1 pooled over the three nuisances, recomputed here from the stored
    predictions, with the written-out bootstrap of those outcomes as its interval and the published number
    within or outside it; the difference is gensets - published. MiniGPT-4 alone has no runnable model."""
    from gensets.output import claim

    out = tmp_path / "idt"
    claim(out, "gensets reproduce imagenet-d-table")  # a folder an earlier reproduce made, its build copied in
    shutil.copytree(reference, out / "workspace")
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", "--json",
                check=0)
    res = json.loads(r.stdout)
    assert res["smoke"] is True and "meaningless" in res["smoke_note"]
    rows = {x["what"]: x for x in res["rows"]}
    # the paper's numbers, as the summary prints them ("ResNet (55.02%)", ...)
    assert {k: v["published"] for k, v in rows.items()} == {
        "ResNet": 0.5502, "ViT-L/16": 0.594, "CLIP": 0.4605, "LLaVa": 0.2967, "MiniGPT-4": 0.1681}
    import numpy as np

    from gensets.papers.imagenet_d.report import NUISANCES, outcomes

    db = out / "results.duckdb"
    for what, model in (("ResNet", "tiny:resnet"), ("ViT-L/16", "tiny:vit"), ("CLIP", "tiny:clip")):
        preds = query(db, f"SELECT p.correct1, r.config FROM predictions p JOIN runs r USING (run_id) "
                          f"WHERE r.model = '{model}' ORDER BY r.config, p.rowid")
        assert {p["config"] for p in preds} == set(NUISANCES)
        right = np.array([p["correct1"] for c in NUISANCES for p in preds if p["config"] == c], float)
        ci = _loop_ci(len(right), lambda i, r=right: r[i].mean())
        row = rows[what]
        assert row["model"] == model and row["variant"].endswith(f"; stand-in for {what}")
        assert row["gensets"] == pytest.approx(right.mean())
        assert row["difference"] == pytest.approx(right.mean() - row["published"])
        assert row["interval"] == pytest.approx(ci, abs=1e-12) and row["interval_kind"] == "images"
        assert row["verdict"] == ("within" if ci[0] <= row["published"] <= ci[1] else "outside")
    assert rows["CLIP"]["variant"] == "zero-shot (imagenet-d official); stand-in for CLIP"
    # LLaVa: tiny:vlm-chair under two-way answers "chair" to every question: TRUE on each chair image (the true
    # class is an option), FALSE where CLIP offered chair as the wrong class, left out otherwise; the row is the
    # authors' TRUE / (TRUE + FALSE), counted here by hand
    llava = rows["LLaVa"]
    assert llava["model"] == "tiny:vlm-chair" and "stand-in for LLaVa" in llava["variant"]
    assert "fp32 on cpu, pad-square" in llava["variant"]  # not the authors' fp16 (CUDA only), named
    answers = query(db, "SELECT p.*, r.class_names FROM predictions p JOIN runs r USING (run_id) "
                        "WHERE r.model = 'tiny:vlm-chair'")
    chair = json.loads(answers[0]["class_names"]).index("chair")
    assert all(list(a["top5"] or []) in ([], [chair]) for a in answers)  # it only ever names chair
    n_true = sum(a["target"] == chair for a in answers)
    n_false = sum(list(a["top5"] or []) == [chair] and a["target"] != chair for a in answers)
    assert n_true > 0 and n_true + n_false < len(answers)  # some answers name neither option: left out
    assert llava["gensets"] == pytest.approx(n_true / (n_true + n_false))
    assert llava["gensets"] == pytest.approx(np.mean(outcomes("two-way", answers)))
    assert llava["verdict"] in ("within", "outside") and len(llava["interval"]) == 2
    # the family no gensets model runs is shown as not run, never estimated
    assert rows["MiniGPT-4"]["model"] is None and rows["MiniGPT-4"]["gensets"] is None
    # the full report: per nuisance, and its JSON agrees with the table
    rep = json.loads((out / "report" / "report.json").read_text())
    resnet = next(m for m in rep["per_model"] if m["model"] == "tiny:resnet")
    assert resnet["complete"] and resnet["all"] == pytest.approx(rows["ResNet"]["gensets"])
    assert resnet["interval"] == rows["ResNet"]["interval"]
    assert sum(c["n"] for c in resnet["configs"].values()) == resnet["n"]

    # a rerun resumes: nothing built, every evaluation skipped, the same table, as markdown
    again = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--configs", ROOT / "configs", check=0)
    assert "0 run now" in again.stderr and again.stderr.count("skipped ") >= 3, again.stderr
    assert "| row | protocol / metric | published | gensets | difference | 95% interval | published is |" \
        in again.stdout
    assert "| ResNet | imagenet, top-1 pooled | 55.02 |" in again.stdout and "smoke run" in again.stdout
    assert (out / "reproduce.md").read_text() == again.stdout
    assert "shared/papers" not in again.stdout

    # the README's line: a workspace of its own (`--workspace`), scored into the same --out; a plain run after it
    # reports the dataset it scored, not "2 ImageNet-D datasets ... name one with --dataset"
    shutil.copytree(reference, tmp_path / "demo")
    run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--workspace", tmp_path / "demo", check=0)
    plain = run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, check=0)
    assert "| ResNet | imagenet, top-1 pooled | 55.02 |" in plain.stdout

    # --seeds 2: a second build at the config's seed + 1 (workspace-seed1), scored the same way; each row's
    # range over seeds is its number's min and max over the two builds' reports
    two = json.loads(run_cli("reproduce", "imagenet-d-table", "--smoke", "--out", out, "--seeds", "2", "--json",
                             check=0).stdout)
    import yaml

    assert yaml.safe_load((out / "workspace-seed1" / "config.yaml").read_text())["seed"] == 1
    second = json.loads((out / "report-workspace-seed1" / "report.json").read_text())["published"]["rows"]
    for row in two["rows"]:
        other = next(x["gensets"] for x in second if x["family"] == row["what"] and x["model"] == row["model"])
        values = [rows[row["what"]]["gensets"], other]
        if None in values:
            assert row["seeds"]["range"] is None
        else:
            assert row["seeds"]["range"] == [min(values), max(values)] and row["seeds"]["n"] == 2
            assert row["seeds"]["verdict"] == ("within" if min(values) <= row["published"] <= max(values)
                                               else "outside")


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
    assert row["gensets"] == pytest.approx(0.5) and row["overall"] == "pooled"
    # the interval of each reading: pooled, the written-out bootstrap of the six counted outcomes (subset order)
    import numpy as np

    counted = np.array([1, 1, 0, 1, 0, 0], float)
    pooled_ci = _loop_ci(6, lambda i: counted[i].mean())
    assert llava["intervals"]["pooled"] == pytest.approx(pooled_ci, abs=1e-12)
    assert llava["intervals"]["mean"] is None  # texture has one counted answer: no per-subset resampling
    assert (f"| 50.00 | [{100 * pooled_ci[0]:.2f}, {100 * pooled_ci[1]:.2f}] | 55.56 | - | 10 (6 counted) |"
            in (tmp_path / "rep" / "report.md").read_text())
    mean = json.loads(run_cli("report", "imagenet-d", "--db", db, "--out", tmp_path / "rep2", "--json",
                              "--overall", "mean", check=0).stdout)
    assert next(x for x in mean["published"]["rows"] if x["family"] == "LLaVa")["gensets"] == pytest.approx(5 / 9)

    # a second ImageNet-D scored into the same database (`--workspace` runs sharing one --out): the table is
    # the dataset the run scored, named by the run, not a refusal
    con = store.connect(db)
    store.write_run(con, {"dataset": "elsewhere", "dataset_revision": "r1", "config": "background", "split": "test",
                          "model": spec, "model_id": spec, "model_revision": None, "protocol": p.run_protocol,
                          "label_space": "dataset", "n": len(keys), "precision": "fp32", "settings": "s",
                          "class_names": names}, scored.rows, mets)
    con.close()
    res = imagenet_d_rows(db, tmp_path / "reproduce-report", cfg.dataset)
    assert "shared/papers" not in res["source"] and "arXiv:2403.18775" in res["source"]
    llava_row = next(x for x in res["rows"] if x["what"] == "LLaVa")
    assert llava_row["gensets"] == pytest.approx(0.5) and llava_row["protocol"] == "two-way, top-1 pooled"
    assert llava_row["difference"] == pytest.approx(0.5 - 0.2967)
    assert llava_row["interval"] == pytest.approx(pooled_ci, abs=1e-12) and llava_row["interval_kind"] == "images"
    assert llava_row["verdict"] == ("within" if pooled_ci[0] <= 0.2967 <= pooled_ci[1] else "outside")
    md = markdown({"table": "imagenet-d-table", "paper": "p", "what": "w", "smoke": False, **res})
    assert "| LLaVa | two-way, top-1 pooled | 29.67 | 50.00 | +20.33 | [" in md
    assert f"{100 * pooled_ci[1]:.2f}] (images) | {llava_row['verdict']} |" in md


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


def test_borji_fig2_prints_no_difference_on_images_other_than_the_papers(tmp_path):
    """Borji (2022) scored DALL-E 2 and Midjourney images: the paper config's SD 2.1 / SDXL images are labelled as
    such and get no difference; imports of the paper's two sources do."""
    from gensets.papers.borji.tables import borji_rows, image_sources
    from gensets.workspace import load_build_config

    _, cfg = load_build_config(ROOT / "configs" / "recognition.yaml")
    (tmp_path / "config.yaml").write_text((ROOT / "configs" / "recognition.yaml").read_text())
    sources = image_sources(tmp_path)
    assert sources == tuple(g.name for g in cfg.generate) == ("stable-diffusion-2-1", "sdxl")
    rep = {"protocol": "wordset", "per_model": [{"model": "m", "top1": 0.5, "top5": 0.7, "top1_interval": [0.4, 0.55]}],
           "published": {"numbers": [{"what": "top-1", "metric": "top1", "value": 0.6, "approximate": True}],
                         "source": "Borji (2022)", "checked": "From the abstract."}, "interval": "over images"}
    ours = borji_rows(rep, sources)
    assert ours["rows"][0]["difference"] is None and ours["rows"][0]["gensets"] == 0.5
    assert "not the paper's DALL-E 2 / Midjourney" in ours["rows"][0]["variant"] and "imports" in ours["note"]
    assert ours["rows"][0]["interval"] == [0.4, 0.55] and ours["rows"][0]["verdict"] is None  # not the paper's images
    paper = borji_rows(rep, ("dall-e-2", "midjourney"))
    assert paper["rows"][0]["difference"] == pytest.approx(-0.1) and paper["rows"][0]["variant"] == "wordset"
    assert paper["rows"][0]["verdict"] == "outside" and paper["rows"][0]["interval_kind"] == "images"
    assert paper["interval"] == "over images"


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


@pytest.mark.parametrize(("published", "interval", "expected"), [
    (0.5, [0.4, 0.6], "within"), (0.4, [0.4, 0.6], "within"), (0.6, [0.4, 0.6], "within"),
    (0.3999, [0.4, 0.6], "outside"), (0.61, [0.4, 0.6], "outside"), (0.5, None, None), (None, [0.4, 0.6], None)])
def test_a_published_number_is_within_or_outside_the_closed_interval(published, interval, expected):
    from gensets.evaluation.reports.base import verdict

    assert verdict(published, interval) == expected


def test_over_seeds_is_the_range_of_each_rows_number_over_the_builds():
    from gensets.papers.tables import over_seeds
    from gensets.reproduce import markdown

    def res(a, b):
        common = {"protocol": "imagenet", "variant": "v", "difference": None}
        return {"rows": [{"what": "ResNet", "model": "tiny:resnet", "published": 0.55, "gensets": a, **common},
                         {"what": "CLIP", "model": "tiny:clip", "published": 0.46, "gensets": b, **common}],
                "report": "r", "source": "s", "note": "n", "interval": "i"}

    out = over_seeds([res(0.5, 0.1), res(0.6, 0.2), res(0.52, None)])
    resnet, clip = out["rows"]
    assert resnet["gensets"] == 0.5  # the config's seed
    assert resnet["seeds"] == {"n": 3, "values": [0.5, 0.6, 0.52], "range": [0.5, 0.6], "verdict": "within"}
    assert clip["seeds"] == {"n": 3, "values": None, "range": None, "verdict": None}  # a seed without a number
    md = markdown({"table": "t", "paper": "p", "what": "w", "smoke": False, **out})
    assert "| over seeds | published is (seeds) |" in md and "[50.00, 60.00] (3 seeds) | within |" in md
    assert over_seeds([res(0.5, 0.1)]) == res(0.5, 0.1)  # one build: no seeds column


def test_seeds_are_refused_where_nothing_is_generated(tmp_path):
    r = run_cli("reproduce", "imagenet-d-table", "--seeds", "3", "--dry-run", "--out", tmp_path / "o")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "released images" in r.stderr
    r = run_cli("reproduce", "borji-vqa", "--smoke", "--seeds", "2", "--dry-run", "--out", tmp_path / "o")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--seeds" in r.stderr
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--seeds", "3", "--dry-run", "--out", tmp_path / "o",
                check=0)
    assert "2 more build(s)" in r.stdout and not (tmp_path / "o").exists()
