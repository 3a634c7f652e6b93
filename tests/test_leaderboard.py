"""scripts/leaderboard.py: a list of models -> leaderboard markdown + CSV (+ Hub .eval_results)."""

import csv
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from .conftest import ROOT, run_cli


@pytest.mark.slow
def test_leaderboard_script(reference, tmp_path):
    # the shared database already holds the same models on another dataset and under another protocol
    db = tmp_path / "r.duckdb"
    other = tmp_path / "other"
    shutil.copytree(reference / "dataset", other)
    run_cli("eval", other, "--model", "tiny:resnet", "--db", db, "--config", "material", "--quiet", check=0)
    run_cli("eval", reference, "--model", "tiny:clip", "--protocol", "imagenet", "--db", db, "--config", "material",
            "--quiet", check=0)
    # ... and an older revision of this dataset
    from gensets.evaluation import store

    from .test_eval import _a_run, _preds

    con = store.connect(db)
    store.write_run(con, _a_run(dataset=str(reference / "dataset"), dataset_revision="an-older-build",
                                config="material", model="tiny:resnet"),
                    _preds(["a", "b"]), [{"name": "top1", "value": 0.5, "lo": 0.4, "hi": 0.6}])
    con.close()
    cfg = tmp_path / "models.yaml"
    cfg.write_text(yaml.safe_dump({
        "dataset": str(reference), "db": str(db), "split": "test",
        "dataset_hub_id": "gensets/imagenet-d-smoke",
        "models": [{"spec": "tiny:resnet", "hub_id": "me/tiny-resnet"}, {"spec": "tiny:clip"},
                   {"spec": "tiny:resnet"}]}))  # listed twice: one model, the first entry's hub_id
    out = tmp_path / "lb"
    p = subprocess.run([sys.executable, "scripts/leaderboard.py", str(cfg), "--out", str(out),
                        "--eval-results", "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(open(out / "leaderboard.csv")))
    assert len(rows) == 2 * 3  # two models x three configs, on this dataset only
    assert {r["dataset"] for r in rows} == {str(reference / "dataset")}  # the id the runner records
    assert {r["model"] for r in rows} == {"tiny:resnet", "tiny:clip"}
    assert {r["protocol"] for r in rows if r["model"] == "tiny:clip"} == {"zero-shot (imagenet-d official)"}
    assert {r["protocol"] for r in rows if r["model"] == "tiny:resnet"} == {"imagenet"}
    assert len({r["revision"] for r in rows}) == 1 and "an-older-build" not in {r["revision"] for r in rows}
    assert {r["n"] for r in rows if r["config"] == "material"} == {"12"}
    md = (out / "leaderboard.md").read_text()
    board, _, published = md.partition("## Published numbers (Zhang et al. 2024)")
    assert board.count("\n| ") == 1 + 6  # header + rows
    # an ImageNet-D: the paper's drops beside this build's runs of their protocols whose models are of the paper's
    # families; tiny:resnet and tiny:clip are neither a ResNet nor OpenAI's CLIP (a smoke reproduce names them
    # stand-ins): each family is shown as not run, never set beside another model
    for family, protocol, value in (("ResNet", "imagenet", "55.02"), ("CLIP", "zero-shot", "46.05"),
                                    ("LLaVa", "two-way", "29.67")):
        assert f"| {family} | drop ({protocol}) | {value} | not run |" in published
    assert "not run: gensets ran no model of this kind" in published and "**Random weights**" in board
    assert "counted" in board and "random_weights" in board
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


@pytest.mark.slow
def test_leaderboard_models_from_a_build_config(reference, tmp_path):
    """`models_from:` adds the eval.models of a build config (as configs/leaderboard.recognition.yaml
    takes the ten classifiers of configs/recognition.yaml) to the models listed here."""
    build = yaml.safe_load((ROOT / "configs" / "recognition.smoke.yaml").read_text())
    build["eval"] = {"models": ["tiny:resnet"]}
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(build))
    cfg = tmp_path / "models.yaml"
    cfg.write_text(yaml.safe_dump({"dataset": str(reference), "db": str(tmp_path / "r.duckdb"), "config": "texture",
                                   "models": [{"spec": "tiny:clip"}], "models_from": "build.yaml"}))
    p = subprocess.run([sys.executable, "scripts/leaderboard.py", str(cfg), "--out", str(tmp_path / "lb"), "--quiet"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(open(tmp_path / "lb" / "leaderboard.csv")))
    assert sorted(r["model"] for r in rows) == ["tiny:clip", "tiny:resnet"]
    del build["eval"]
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(build))
    p = subprocess.run([sys.executable, "scripts/leaderboard.py", str(cfg)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "models_from: build.yaml lists no eval.models" in p.stderr


def test_eval_results_name_a_hub_dataset_never_a_local_path(tmp_path):
    cfg = tmp_path / "models.yaml"
    cfg.write_text(yaml.safe_dump({"dataset": str(tmp_path / "ws"), "models": [{"spec": "tiny:resnet"}]}))
    p = subprocess.run([sys.executable, "scripts/leaderboard.py", str(cfg), "--eval-results"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "needs dataset_hub_id:" in p.stderr


def test_output_writes_what_stdout_shows_and_never_over_the_database(tmp_path):
    """--output FILE holds exactly what stdout would (leaderboard, query; any --format); over the database read, a
    folder, a symlink or a workspace's own file it is one line and nothing is written; a report takes --output
    as --out."""
    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb")
    before = db.read_bytes()
    out = tmp_path / "out.txt"
    for cmd in (["leaderboard", "--db", db, "--format", "csv"], ["leaderboard", "--db", db, "--json", "--pivot"],
                ["query", "--db", db, "SELECT model, config, n FROM runs ORDER BY 1, 2", "--format", "markdown"]):
        shown = run_cli(*cmd, check=0).stdout
        assert shown.count("\n") >= 3, shown
        written = run_cli(*cmd, "--output", out, check=0)
        assert written.stdout == "" and out.read_text() == shown
        assert run_cli(*cmd, "--output", "-", check=0).stdout == shown
    (tmp_path / "link").symlink_to(out)
    ws = tmp_path / "ws"
    (ws / "candidates").mkdir(parents=True)
    (ws / "config.yaml").write_text("builder: imagenet-d\n")
    for target, why in ((db, "is the database read"), (tmp_path, "is a folder"), (tmp_path / "link", "symlink"),
                        (ws / "state.duckdb", "part of the gensets workspace")):
        r = run_cli("leaderboard", "--db", db, "--output", target)
        err = r.stderr.strip()
        assert r.returncode in (1, 2) and err.count("\n") == 0 and why in err and "Traceback" not in err, err
    assert db.read_bytes() == before and out.read_text() == shown and not (ws / "state.duckdb").exists()
    import argparse

    from gensets.registry import REPORTS

    for kind, report in REPORTS.items():  # every report's --out answers to --output too
        parser = argparse.ArgumentParser()
        report().add_arguments(parser)
        assert re.search(r"--out (\w+), --output \1", parser.format_help()), kind
