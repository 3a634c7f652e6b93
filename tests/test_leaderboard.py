"""`gensets leaderboard`: the one leaderboard (issue 55: scripts/leaderboard.py was a second one). Its output folder
may hold its own results database (the README's `--db out/leaderboard/results.duckdb --out out/leaderboard`), and a
rerun over the folder it made resumes; a model list names Hub repos for `--eval-results` and takes a build config's
eval.models (`models_from`); `--output` writes what stdout shows."""

import json
import re

import pyarrow.parquet as pq
import yaml

from .conftest import ROOT, run_cli


def test_the_folder_that_holds_its_database_is_the_leaderboards(small, tmp_path):
    """The README's form, --db inside --out: the database is made inside the folder before the files are written,
    and the folder is the leaderboard's (made with gensets' marker); a rerun resumes there. A folder that holds only
    the database a `gensets eval` wrote is taken too; a folder with anything else is refused before any scoring."""
    out = tmp_path / "leaderboard"
    args = ("leaderboard", "--models", "tiny:resnet", "--dataset", small, "--db", out / "results.duckdb", "--out", out,
            "--quiet")
    first = run_cli(*args, check=0)
    assert "1 run(s) scored, 0 already" in first.stderr
    assert sorted(p.name for p in out.iterdir()) == [".gensets-output", "leaderboard.csv", "leaderboard.html",
                                                    "leaderboard.md", "leaderboard.parquet", "results.duckdb"]
    assert "0 run(s) scored, 1 already" in run_cli(*args, check=0).stderr
    held = tmp_path / "held"  # a folder a gensets command wrote only its results database into
    run_cli("eval", small, "--model", "tiny:resnet", "--db", held / "results.duckdb", "--quiet", check=0)
    r = run_cli("leaderboard", "--models", "tiny:resnet", "--dataset", small, "--db", held / "results.duckdb",
                "--out", held, "--quiet", check=0)
    assert "0 run(s) scored, 1 already" in r.stderr and (held / "leaderboard.md").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file\n")
    r = run_cli("leaderboard", "--models", "tiny:resnet", "--dataset", small, "--db", mine / "results.duckdb",
                "--out", mine, "--quiet")
    assert r.returncode == 1 and "a non-empty folder gensets did not make" in r.stderr
    assert r.stderr.count("\n") == 1 and sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # nothing scored


def test_eval_results_and_models_from_a_build_config(small, tmp_path):
    """A model list with a Hub repo per model and, from a build config, its eval.models (as
    configs/leaderboard.recognition.yaml takes the ten classifiers of configs/recognition.yaml): --eval-results writes
    each model's Hub .eval_results entries, top-1 in percent per config and split, naming the dataset by the Hub id
    --dataset gave it, never a local path."""
    build = yaml.safe_load((ROOT / "configs" / "recognition.smoke.yaml").read_text())
    build["eval"] = {"models": ["tiny:clip"]}
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(build))
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump({"models": [{"spec": "tiny:resnet", "hub_id": "me/tiny-resnet"}],
                                      "models_from": {"config": "build.yaml", "protocol": "imagenet"}}))
    out = tmp_path / "lb"
    run_cli("leaderboard", "--models", models, "--dataset", f"gensets/imagenet-d-small={small}", "--db",
            tmp_path / "r.duckdb", "--out", out, "--eval-results", "--quiet", check=0)
    rows = {r["model"]: r for r in pq.read_table(out / "leaderboard.parquet").to_pylist()}
    assert set(rows) == {"tiny:resnet", "tiny:clip"} and rows["tiny:clip"]["protocol"] == "imagenet"
    for folder, model in (("me_tiny_resnet", "tiny:resnet"), ("tiny_clip", "tiny:clip")):
        (entry,) = yaml.safe_load((out / "eval_results" / folder / ".eval_results" / "gensets_imagenet_d_small.yaml")
                                  .read_text())
        assert entry["dataset"] == {"id": "gensets/imagenet-d-small", "task_id": "background/test"}
        assert entry["value"] == round(100 * rows[model]["top1"], 2)
        assert str(tmp_path) not in json.dumps(entry)


def test_leaderboard_lists_refuse_in_one_line(tmp_path):
    """A bad key names its file and line; models_from naming a config without eval.models, and --eval-results
    without a dataset named by a Hub id, are refused before anything is scored or written."""
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  - spec: tiny:resnet\n    colour: red\n")
    r = run_cli("leaderboard", "--models", bad, "--dataset", "x", "--db", tmp_path / "r.duckdb", "--out",
                tmp_path / "lb")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and re.search(r"models.yaml:3: models\[0\].colour", r.stderr)
    (tmp_path / "build.yaml").write_text((ROOT / "configs" / "recognition.smoke.yaml").read_text())
    bad.write_text("models_from: {config: build.yaml}\n")
    r = run_cli("leaderboard", "--models", bad, "--dataset", "x", "--db", tmp_path / "r.duckdb", "--out",
                tmp_path / "lb")
    assert r.returncode == 2 and "models_from: build.yaml lists no eval.models" in r.stderr
    r = run_cli("leaderboard", "--models", "tiny:resnet", "--dataset", tmp_path / "ws", "--db", tmp_path / "r.duckdb",
                "--out", tmp_path / "lb", "--eval-results")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--dataset ORG/NAME=PATH" in r.stderr
    assert not (tmp_path / "lb").exists() and not (tmp_path / "r.duckdb").exists()


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
