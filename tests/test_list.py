"""`gensets list WHAT`: what gensets has, from its registries and packaged data (checked against them)."""

import json

import pytest

from gensets.catalog import LISTS
from gensets.models.tiny import built_kinds
from gensets.registry import BUILDERS, PROTOCOLS, QUALITY_METRICS, REPORTS

from .conftest import ROOT, run_cli

EXPECTED = {
    "builders": lambda: BUILDERS.names(),
    "protocols": lambda: PROTOCOLS.names(),
    "metrics": lambda: QUALITY_METRICS.names(),
    "reports": lambda: REPORTS.names(),
    "models": lambda: [f"tiny:{k}" for k in built_kinds("tiny")] + [f"random:{k}" for k in built_kinds("random")],
    "configs": lambda: [f"configs/{p.name}" for p in sorted((ROOT / "configs").glob("*.yaml"))],
    "tables": lambda: [f"genbench:table-{i}" for i in range(1, 6)] + ["borji:recognition", "borji:vqa",
                                                                       "imagenet-d:drops", "failure-modes:figure-5"]
    + [f"reproduce:{name}" for name in __import__("gensets.reproduce", fromlist=["tables"]).tables()],
}


@pytest.mark.parametrize("what", LISTS)
def test_list_matches_the_registries(what):
    rows = json.loads(run_cli("list", what, "--json", check=0).stdout)
    assert sorted(r["name"] for r in rows) == sorted(EXPECTED[what]())
    assert all(r["description"] for r in rows if what != "configs"), rows
    text = run_cli("list", what, check=0).stdout.splitlines()
    assert [line.split()[0] for line in text] == [r["name"] for r in rows]  # the same rows, as text


def test_list_refuses_an_unknown_kind():
    r = run_cli("list", "widgets")
    assert r.returncode == 2 and "invalid choice: 'widgets'" in r.stderr


def test_every_metric_a_protocol_reports_is_explained():
    """Each metric name a protocol can write is in METRICS, shown by `gensets eval --help` and the README."""
    import re

    from gensets.evaluation.runner import METRICS

    names = set()
    for f in (ROOT / "gensets" / "evaluation" / "protocols").glob("*.py"):
        names |= set(re.findall(r'"name": "([a-z_0-9]+)"', f.read_text()))
    names |= {"masked_top1", "masked_top5"}
    from gensets.evaluation.protocols.vqa import VQA

    # the vqa protocol's names are built (vqa_<k>): read them off its real metric rows
    vqa = VQA.metrics(VQA.__new__(VQA), [{"correct1": True}, {"correct1": False}],
                      {"said": ["yes", "yes"], "truth": ["yes", "no"]})
    names |= {m["name"] for m in vqa}
    assert {"vqa_accuracy", "vqa_n_yes", "top1"} <= names and "accuracy" not in METRICS
    assert names <= set(METRICS), names - set(METRICS)
    helptext = run_cli("eval", "--help", check=0).stdout
    readme = (ROOT / "README.md").read_text()
    for name in METRICS:
        assert f"  {name} " in helptext and f"| `{name}` |" in readme, name


def test_leaderboard_percent_prints_percentages_and_names_the_unit_json_keeps_fractions(tmp_path):
    """The card and reproduce print percent; the leaderboard's fractions (as --format json and golden keep them)
    print as percent with --percent, each such column named "NAME %"."""
    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb", configs=("background", "texture"), top1=(0.25, 0.5))
    plain = run_cli("leaderboard", "--db", db, check=0).stdout.splitlines()
    pct = run_cli("leaderboard", "--db", db, "--percent", check=0).stdout.splitlines()
    assert "top1 %" in pct[0] and "top1 %" not in plain[0] and "  n  " in pct[0]
    assert any("50.0000" in x for x in pct) and not any("50.0000" in x for x in plain)
    grid = run_cli("leaderboard", "--db", db, "--pivot", "--percent", "--format", "csv", check=0).stdout
    assert grid.splitlines()[0].endswith("mean top1 %") and grid.splitlines()[2].endswith(",25.0,25.0,25.0")
    r = run_cli("leaderboard", "--db", db, "--percent", "--format", "json")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "fractions" in r.stderr


def test_leaderboard_pivot_is_the_long_table_as_a_grid(tmp_path):
    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb", configs=("background", "texture"), top1=(0.25, 0.5))
    long = json.loads(run_cli("leaderboard", "--db", db, "--json", check=0).stdout)
    grid = json.loads(run_cli("leaderboard", "--db", db, "--pivot", "--json", check=0).stdout)
    assert [list(r) for r in grid][0] == ["model", "protocol", "background/test", "texture/test", "mean top1"]
    assert [r["model"] for r in grid] == ["open_clip:ViT-B-32/openai", "timm:resnet50.a1_in1k"]  # best mean first
    for r in grid:
        for col in ("background/test", "texture/test"):
            (cell,) = [x["top1"] for x in long if x["model"] == r["model"] and f"{x['config']}/{x['split']}" == col]
            assert r[col] == cell
        assert r["mean top1"] == (r["background/test"] + r["texture/test"]) / 2
    top5 = json.loads(run_cli("leaderboard", "--db", db, "--pivot", "--metric", "top5", "--json", check=0).stdout)
    assert all(r["background/test"] == 0.9 for r in top5)
    bad = run_cli("leaderboard", "--db", db, "--pivot", "--metric", "nope")
    assert bad.returncode == 2 and "--metric 'nope'" in bad.stderr


def test_json_of_build_finalize_and_verify_carries_the_text_numbers(small, tmp_path):
    import re
    import shutil

    from .conftest import SMALL, SMOKE

    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    text = run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL, check=0).stdout  # nothing left to do
    js = json.loads(run_cli("build", SMOKE, "--out", ws, *SMALL, "--json", check=0).stdout)
    units, before = map(int, re.search(r": (\d+) units? \((\d+) done before", text).groups())
    assert (js["units"], js["done_before"], js["units_run"]) == (units, before, 0)
    text = run_cli("finalize", ws, "--include-pending", check=0).stdout
    js = json.loads(run_cli("finalize", ws, "--include-pending", "--json", check=0).stdout)
    shards = int(re.search(r": (\d+) shards?;", text).group(1))
    assert js["shards"] == shards and all(f"{k} {v}" in text for k, v in js["counts"].items())
    for config, f in js["funnel"].items():
        assert f"{config}: generated {f['generated']} -> kept by the filters {f['kept']}" in text
    ok = json.loads(run_cli("verify", ws / "dataset", "--json", check=0).stdout)
    assert ok == {"dir": str(ws / "dataset"), "ok": True, "problems": []}
    (sorted((ws / "dataset").rglob("*.tar"))[0]).write_bytes(b"not a tar")
    r = run_cli("verify", ws / "dataset", "--json")
    bad = json.loads(r.stdout)
    assert r.returncode == 1 and not bad["ok"] and bad["problems"]
    assert {"file", "member", "problem"} == set(bad["problems"][0])


def test_json_of_card_and_publish_carries_the_text(small, tmp_path):
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    text = run_cli("card", ws, check=0).stdout
    js = json.loads(run_cli("card", ws, "--json", check=0).stdout)
    assert js["dir"] == str(ws / "dataset") and "README.md" in js["files"]
    assert text.strip() == "wrote " + ", ".join(js["files"]) + f" in {js['dir']}"
    dry = run_cli("publish", ws, "--repo", "org/name", "--tag", "v1", "--dry-run", check=0).stdout.splitlines()
    js = json.loads(run_cli("publish", ws, "--repo", "org/name", "--tag", "v1", "--dry-run", "--json", check=0).stdout)
    assert js["steps"] == dry and js["url"] is None and (js["repo"], js["tag"], js["dry_run"]) == ("org/name", "v1", True)
    repo = tmp_path / "repo"
    js = json.loads(run_cli("publish", ws, "--repo", f"file://{repo}", "--tag", "v1", "--json", check=0).stdout)
    assert js["url"] and js["steps"][-1] == "tagged v1" and (repo / "README.md").is_file()
