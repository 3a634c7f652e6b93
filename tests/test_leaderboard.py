"""scripts/leaderboard.py: a list of models -> leaderboard markdown + CSV (+ Hub .eval_results)."""

import csv
import subprocess
import sys

import yaml

from .conftest import ROOT


def test_leaderboard_script(reference, tmp_path):
    cfg = tmp_path / "models.yaml"
    cfg.write_text(yaml.safe_dump({
        "dataset": str(reference), "db": str(tmp_path / "r.duckdb"), "split": "test",
        "dataset_hub_id": "gensets/imagenet-d-smoke",
        "models": [{"spec": "tiny:resnet", "hub_id": "me/tiny-resnet"}, {"spec": "tiny:clip"}]}))
    out = tmp_path / "lb"
    p = subprocess.run([sys.executable, "scripts/leaderboard.py", str(cfg), "--out", str(out),
                        "--eval-results", "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(open(out / "leaderboard.csv")))
    assert len(rows) == 2 * 3  # two models x three configs
    assert {r["model"] for r in rows} == {"tiny:resnet", "tiny:clip"}
    assert {r["protocol"] for r in rows if r["model"] == "tiny:clip"} == {"zero-shot"}
    md = (out / "leaderboard.md").read_text()
    assert md.count("\n| ") == 1 + 6  # header + rows
    entries = yaml.safe_load((out / "eval_results" / "me_tiny_resnet" / ".eval_results"
                              / "gensets_imagenet_d_smoke.yaml").read_text())
    assert {e["dataset"]["task_id"] for e in entries} == {"background/test", "texture/test", "material/test"}
    assert all(e["dataset"]["id"] == "gensets/imagenet-d-smoke" and 0 <= e["value"] <= 100 for e in entries)


def test_leaderboard_bad_config_one_line(tmp_path):
    cfg = tmp_path / "models.yaml"
    cfg.write_text("dataset: x\nmodels:\n  - spec: tiny:resnet\n    colour: red\n")
    p = subprocess.run([sys.executable, "scripts/leaderboard.py", str(cfg)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and ":4: models[0].colour: unknown key" in p.stderr
