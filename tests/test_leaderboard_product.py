"""`gensets leaderboard --models LIST --dataset D ... --out DIR`: a model list scored on datasets, resumable, written
as markdown, a self-contained HTML page, Parquet and CSV with no local path; surrogates marked apart."""

import csv
import os

import pytest

from .conftest import ROOT, run_cli


@pytest.fixture(scope="module")
def two_datasets(small, tmp_path_factory):
    rec = tmp_path_factory.mktemp("rec") / "recognition-ws"
    run_cli("build", ROOT / "configs" / "recognition.smoke.yaml", "--out", rec, "--quiet",
            "--set", "categories=[clock,rabbit]", check=0)
    run_cli("finalize", rec, "--include-pending", check=0)
    return small, rec


@pytest.mark.slow
def test_leaderboard_of_three_tiny_models_on_two_datasets(two_datasets, tmp_path):
    import pyarrow.parquet as pq

    from gensets.evaluation import leaderboard

    imagenet_d, rec = two_datasets
    db, out = tmp_path / "r.duckdb", tmp_path / "lb"
    args = ("leaderboard", "--models", "smoke", "--dataset", f"imagenet-d-small={imagenet_d}", "--dataset", rec,
            "--db", db, "--out", out, "--quiet")
    first = run_cli(*args, check=0)
    assert "9 run(s) scored, 0 already" in first.stderr
    rows = pq.read_table(out / "leaderboard.parquet").to_pylist()
    # three models x (the small ImageNet-D's one config + recognition's two, one per generator), each a row
    assert len(rows) == 3 * (1 + 2)
    assert {(r["dataset"], r["config"]) for r in rows} == {("imagenet-d-small", "background"),
                                                          ("recognition-ws", "sd_2_steps"),
                                                          ("recognition-ws", "sd_4_steps")}
    assert {r["dataset"] for r in rows} == {"imagenet-d-small", "recognition-ws"}
    assert {r["model"] for r in rows} == {"tiny:resnet", "tiny:vit", "tiny:clip"}
    assert all(r["top1_lo"] is not None and r["top1_lo"] <= r["top1"] <= r["top1_hi"] for r in rows)
    # the smoke ImageNet-D was selected by these three models (filter.models): biased, marked; recognition: held out
    assert {r["dataset"] for r in rows if r["surrogate"]} == {"imagenet-d-small"}
    assert all(r["surrogate"] for r in rows if r["dataset"] == "imagenet-d-small")
    assert list(csv.DictReader(open(out / "leaderboard.csv")))[0].keys() == set(leaderboard.COLUMNS)
    md, html = (out / "leaderboard.md").read_text(), (out / "leaderboard.html").read_text()
    assert md.count("| tiny:") == 9 and md.count(" † ‡ |") == 3 and leaderboard.FOOTNOTE in md
    assert all(r["random_weights"] for r in rows) and leaderboard.RANDOM in md and leaderboard.RANDOM in html
    assert html.count('<tr class="surrogate">') == 3 and "<script>" in html
    assert "http" not in html  # self-contained: no CDN, no external file
    for f in out.iterdir():  # no local path in any file
        data = f.read_bytes()
        for local in (str(tmp_path.parent), str(imagenet_d), str(rec), os.path.expanduser("~")):
            assert local.encode() not in data, (f.name, local)
    # a second run scores nothing: every run is resumed, and the files are the same
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    again = run_cli(*args, check=0)
    assert "0 run(s) scored, 9 already" in again.stderr
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before
    # the plain leaderboard of the same database is unchanged in form (the golden digests record it)
    plain = run_cli("leaderboard", "--db", db, "--format", "json", check=0)
    assert str(imagenet_d) in plain.stdout
    # publish-results: the same rows, with no local path, in the plan and in what it uploads
    refused = run_cli("publish-results", "--db", db, "--repo", "org/name", "--dry-run")
    assert refused.returncode == 2 and "--allow-random-weights" in refused.stderr
    dry = run_cli("publish-results", "--db", db, "--repo", "org/name", "--dry-run", "--allow-random-weights", check=0)
    assert "upload results/leaderboard.parquet" in dry.stdout and str(tmp_path.parent) not in dry.stdout
    run_cli("publish-results", "--db", db, "--repo", f"file://{tmp_path / 'repo'}", "--allow-random-weights", check=0)
    published = pq.read_table(tmp_path / "repo" / "results" / "leaderboard.parquet").to_pylist()
    assert published == rows
    assert str(tmp_path.parent).encode() not in (tmp_path / "repo" / "results" / "leaderboard.html").read_bytes()


def test_model_lists_and_errors(tmp_path):
    from gensets.evaluation import leaderboard

    assert [m.spec for m in leaderboard.load_models("smoke")] == ["tiny:resnet", "tiny:vit", "tiny:clip"]
    paper = leaderboard.load_models("imagenet-d")
    assert {m.family for m in paper} == {"ResNet", "ViT-L/16", "CLIP", "LLaVa"}
    from gensets.papers.imagenet_d.tables import RESNET50, VIT_L16

    assert {RESNET50, VIT_L16} <= {m.spec for m in paper}  # the specs reproduce imagenet-d-table runs
    assert [m.spec for m in leaderboard.load_models("tiny:resnet, tiny:clip,tiny:resnet")] == ["tiny:resnet",
                                                                                                "tiny:clip"]
    assert leaderboard.dataset_arg("name=org/set") == ("name", "org/set")
    assert leaderboard.public_name(str(tmp_path / "ws" / "dataset")) == "ws"
    assert leaderboard.public_name("org/set") == "org/set"
    r = run_cli("leaderboard", "--db", tmp_path / "r.duckdb", "--models", "smoke", "--out", tmp_path / "lb")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--dataset" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("leaderboard", "--db", tmp_path / "r.duckdb", "--models", tmp_path / "none.yaml", "--dataset", "x",
                "--out", tmp_path / "lb")
    assert r.returncode == 2 and "none.yaml: no such file" in r.stderr
