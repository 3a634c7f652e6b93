"""Issue 48, the first hour as a user: a mistyped path is a usage error at once, `query` explains its schema,
empty answers and a running build say so, and the small things (a busy port, a dry run offline, `gensets list`,
a closed pipe, publish-results' help)."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, SMALL, SMOKE, run_cli
from .test_exit_codes import one_line

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _cli_in(cwd, *args, env=None):
    """gensets run from the folder ``cwd`` (relative paths are the user's), offline."""
    full = {**os.environ, **OFFLINE, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "gensets.cli", *map(str, args)], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=600)


def test_a_missing_local_path_is_exit_2_everywhere_never_a_hub_lookup(tmp_path):
    (tmp_path / "out").mkdir()
    db = "out/lb.duckdb"
    # out/ is a folder here, so out/nope is a mistyped path (before: read as a Hub id, exit 3 after retries)
    for args in (["eval", "out/nope", "--model", "tiny:resnet", "--db", db],
                 ["score", "out/nope", "--metric", "clip_score", "--db", db],
                 ["eval", "./out/nope", "--model", "tiny:resnet", "--db", db],
                 ["eval", "~/gensets-no-such-folder", "--model", "tiny:resnet", "--db", db]):
        r = _cli_in(tmp_path, *args)
        err = one_line(r, 2, "nope" if "nope" in args[1] else "gensets-no-such-folder")
        assert "Hub" not in err.replace("the Hub dataset of that name", ""), err
    assert "hf:out/nope" in _cli_in(tmp_path, "eval", "out/nope", "--model", "tiny:resnet", "--db", db).stderr
    for args in (["verify", "out/nope"], ["finalize", "out/nope"], ["card", "out/nope"],
                 ["review", "list", "out/nope"], ["publish", "out/nope", "--repo", "org/name", "--dry-run"],
                 ["leaderboard", "--db", "out/nope.duckdb"], ["query", "--db", "out/nope.duckdb", "SELECT 1"],
                 ["report", "imagenet-d", "--db", "out/nope.duckdb"], ["verify", "out/nope", "--rebuild", "1"]):
        one_line(_cli_in(tmp_path, *args), 2, "out/nope")
    # a name whose first part is no folder here is still a Hub id: offline, exit 3 (the environment)
    one_line(_cli_in(tmp_path, "eval", "someorg/nope", "--model", "tiny:resnet", "--db", db), 3, "someorg/nope")


@pytest.fixture
def results(tmp_path):
    from .test_card import make_results_db

    return make_results_db(tmp_path / "r.duckdb")


def test_query_has_json_a_schema_and_says_which_columns_exist(results, tmp_path):
    as_json = json.loads(run_cli("query", "--db", results, "SELECT model, n FROM runs ORDER BY ALL", "--json",
                                 check=0).stdout)
    assert as_json == json.loads(run_cli("query", "--db", results, "SELECT model, n FROM runs ORDER BY ALL",
                                         "--format", "json", check=0).stdout) and as_json
    # the first natural query: its error names the table's real columns, in one line
    err = one_line(run_cli("query", "--db", results, "SELECT model, config, metric, value FROM metrics"), 2,
                   "metrics: run_id, name, value, lo, hi", "--schema")
    assert "Binder Error" in err
    # ... and the results view answers it (a temporary view: the file is unchanged)
    before = results.read_bytes()
    rows = json.loads(run_cli("query", "--db", results, "SELECT model, config, metric, value FROM results "
                              "WHERE metric = 'top1' ORDER BY ALL", "--json", check=0).stdout)
    assert len(rows) == 6 and {r["metric"] for r in rows} == {"top1"} and results.read_bytes() == before
    for db in ([], ["--db", results]):  # the tables gensets creates, or the database's
        schema = json.loads(run_cli("query", *db, "--schema", "--json", check=0).stdout)
        tables = {t["name"]: t for t in schema["tables"]}
        assert {"runs", "predictions", "metrics", "results"} <= set(tables)
        assert {"name": "run_id", "type": "VARCHAR"} in tables["metrics"]["columns"]
        assert "run_id" in tables["predictions"]["about"] and len(schema["examples"]) == 2
        for sql in schema["examples"]:  # the examples run
            run_cli("query", "--db", results, sql, check=0)
    text = run_cli("query", "--schema", check=0).stdout
    assert "metrics: " in text and "name VARCHAR" in text and "examples:" in text
    assert "--schema" in run_cli("query", "--help", check=0).stdout


def test_leaderboard_of_a_dataset_it_does_not_hold_is_an_error(results):
    one_line(run_cli("leaderboard", "--db", results, "--dataset", "nope"), 2, "--dataset 'nope'",
             "gensets/imagenet-d-smoke")
    one_line(run_cli("leaderboard", "--db", results, "--config", "backgrnd"), 2, "did you mean 'background'")
    assert len(json.loads(run_cli("leaderboard", "--db", results, "--json", "--config", "texture",
                                  check=0).stdout)) == 2


def test_review_list_during_a_build_says_it_is_running(tmp_path):
    from gensets.workspace import Workspace, load_build_config

    ws = tmp_path / "ws"
    Workspace.create(ws, *load_build_config(SMOKE))  # config.yaml, nothing built yet
    one_line(run_cli("review", "list", ws), 2, "nothing built yet")
    with Workspace(ws).lock("build"):
        one_line(run_cli("review", "list", ws), 4, "build (pid", "is running", "run this again")
    helptext = run_cli("review", "list", "--help", check=0).stdout
    assert "pending" in helptext and "reviewer" in helptext and "note" in helptext


def test_a_busy_port_suggests_port_0_and_a_dry_run_offline_does_not_suggest_one(small, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        one_line(run_cli("review", "serve", ws, "--port", busy.getsockname()[1]), 2, "cannot listen", "--port 0")
    r = run_cli("publish", ws, "--repo", "org/name", "--dry-run", env=OFFLINE, check=0)
    assert "delete: cannot tell" in r.stdout and "--dry-run" not in r.stdout + r.stderr, r.stdout


@pytest.mark.parametrize("what", ["builders", "protocols", "metrics", "reports", "models", "configs", "tables"])
def test_list_json_has_whole_descriptions_without_internal_references(what):
    import re

    rows = json.loads(run_cli("list", what, "--json", check=0).stdout)
    for r in rows:
        d = r["description"]
        assert not d.endswith("...") and not re.search(r"#\d|\bissue \d|:\w+:`|@\w+\.register|gensets\.builders", d), r
    if what == "configs":  # the opening comment's first paragraph, not its first line
        d = {r["name"]: r["description"] for r in rows}["configs/genbench.baselines.smoke.yaml"]
        assert d.endswith("compares them at equal K with costs."), d


def test_a_closed_pipe_is_not_an_error():
    """`gensets list ... | head -1`: the reader goes away; no "Broken pipe", the exit of a SIGPIPE (141)."""
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "list", "tables", "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    p.stdout.close()  # before it writes anything
    err = p.stderr.read().decode()
    assert p.wait(600) == 141 and err == "", err


def test_publish_results_help_describes_each_option():
    from gensets.cli import parser

    sub = next(a for a in parser()._actions if a.dest == "command").choices["publish-results"]
    assert sub.description
    for action in sub._actions:
        assert action.help, action.option_strings


def test_a_rerun_prints_one_summary_and_no_empty_bar_and_a_log_gets_each_bar_once(tmp_path):
    ws = tmp_path / "ws"
    first = run_cli("build", SMOKE, "--out", ws, *SMALL, check=0)  # stderr is a pipe: a log, not a terminal
    assert "\r" not in first.stderr and first.stderr.count("imagenet-d: 1/1 unit in ") == 1, first.stderr
    again = run_cli("build", SMOKE, "--out", ws, *SMALL, check=0)  # a no-op
    assert "unit" not in again.stderr and "\r" not in again.stderr, again.stderr
    assert [line for line in again.stdout.splitlines() if " done before, " in line] == [
        f"{ws}: 1 unit (1 done before, 0 run here); 0 samples written, 0 added to state.duckdb"]
    assert json.loads(run_cli("build", SMOKE, "--out", ws, *SMALL, "--json", check=0).stdout)["units_run"] == 0


HUB_ONLY = ("--set", "generator.model=diffusers:someorg/not-cached-model")  # offline: fails before its first unit


def test_a_build_that_fails_before_its_first_unit_removes_the_workspace_it_made(tmp_path):
    ws = tmp_path / "out" / "ws"
    r = run_cli("build", SMOKE, "--out", ws, *SMALL, *HUB_ONLY, env=OFFLINE)
    one_line(r, 3, "someorg/not-cached-model")
    assert "unit" not in r.stderr and not ws.exists() and (tmp_path / "out").is_dir()
    ws.mkdir()  # a folder it did not make stays
    one_line(run_cli("build", SMOKE, "--out", ws, *SMALL, *HUB_ONLY, env=OFFLINE), 3, "someorg/not-cached-model")
    assert ws.is_dir()


# what `accelerate launch --num_processes 2` without --multi_gpu gives the one process it starts on CPU
SIMPLE_LAUNCHER = {"ACCELERATE_USE_CPU": "False", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_one_process_where_several_were_asked_says_so_once(small, tmp_path):
    args = ("eval", small, "--model", "tiny:resnet", "--limit", "2", "--db", tmp_path / "r.duckdb", "--quiet")
    r = run_cli(*args, env=SIMPLE_LAUNCHER, check=0)
    assert r.stderr.count("gensets: warning: accelerate launch started one process") == 1, r.stderr
    assert "--multi_gpu --num_processes N" in r.stderr and "running as one process" in r.stderr
    assert "--multi_gpu" not in run_cli(*args, "--force", check=0).stderr


@pytest.mark.slow
def test_accelerate_on_cpu_needs_multi_gpu_for_two_processes_and_process_0_alone_prints(small, tmp_path):
    from .test_eval import query

    accelerate = [str(Path(sys.executable).with_name("accelerate")), "launch", "--num_machines", "1",
                  "--mixed_precision", "no", "--dynamo_backend", "no", "--num_processes", "2"]
    env = {**os.environ, **OFFLINE, "PYTHONPATH": str(ROOT)}
    for flags, processes in (([], 1), (["--multi_gpu"], 2)):
        db = tmp_path / f"r{processes}.duckdb"
        p = subprocess.run([*accelerate, *flags, "-m", "gensets.cli", "eval", str(small), "--model", "tiny:resnet",
                            "--limit", "4", "--db", str(db), "--quiet"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        assert p.stderr.count("results in ") == 1 and len(p.stdout.splitlines()) == 1, (p.stdout, p.stderr)
        assert ("--multi_gpu" in p.stderr) == (processes == 1), p.stderr
        assert [json.loads(r["execution"])["processes"] for r in query(db, "SELECT execution FROM runs")] == [
            processes]
