"""Publishing: shards first and the card last, into a local folder that load_dataset reads; the token
never shows up in any output; offline fails fast in one line."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import run_cli
from .test_card import make_results_db

TOKEN = "hf_gensetsFAKEtoken0123456789abcdef"  # recognisable: must never be printed


def _check_no_token(*outputs):
    for out in outputs:
        text = out if isinstance(out, str) else out.stdout + out.stderr
        assert TOKEN not in text and TOKEN[3:] not in text, text


def test_publish_into_a_local_target_then_load_it(reference, tmp_path):
    import datasets

    from gensets.publish import LocalTarget, publish

    target = LocalTarget(tmp_path / "repo")
    lines = []
    url = publish(reference, "file://" + str(tmp_path / "repo"), target=target, tag="v1", out=lines.append)
    commits = target.commits
    assert len(commits) == 4  # one per config's shards, then the card
    assert all(f.endswith(".tar") for c in commits[:-1] for f in c["files"])
    assert commits[-1]["files"][-1] == "README.md" and "manifest.json" in commits[-1]["files"]
    assert "figures/samples.png" in commits[-1]["files"]
    assert target.tags == {"v1": 4} and url.endswith("#commit-4") and url in lines[-2]
    assert lines[-1] == "tagged v1"
    manifest = json.loads((reference / "dataset" / "manifest.json").read_text())
    for config, n in manifest["counts"].items():
        ds = datasets.load_dataset(str(tmp_path / "repo"), config, split="test")
        assert len(ds) == n and isinstance(ds.features["cls"], datasets.ClassLabel)

    # a later version with fewer shards: the last commit deletes the old ones (those the earlier version's
    # manifest.json lists), so the card's sizes hold
    stale = tmp_path / "repo" / "background" / "test-00007.tar"
    shutil.copy(tmp_path / "repo" / "background" / "test-00000.tar", stale)
    earlier = json.loads((tmp_path / "repo" / "manifest.json").read_text())
    earlier["shards"].append({**earlier["shards"][0], "path": "background/test-00007.tar"})
    (tmp_path / "repo" / "manifest.json").write_text(json.dumps(earlier))
    target = LocalTarget(tmp_path / "repo")
    publish(reference / "dataset", "file://" + str(tmp_path / "repo"), target=target, out=lines.append)
    assert target.commits[-1]["deleted"] == ["background/test-00007.tar"] and not stale.exists()
    assert len(datasets.load_dataset(str(tmp_path / "repo"), "background", split="test")) == 18
    log = [json.loads(x) for x in (tmp_path / "repo" / ".publish-log.jsonl").read_text().splitlines()]
    assert [e.get("tag") for e in log if "tag" in e] == ["v1"] and len(log) == 4 + 1 + 4


def test_publish_cli_dry_run_local_and_token(reference, tmp_path):
    env = {"HF_TOKEN": TOKEN}
    dry = run_cli("publish", reference, "--repo", "org/name", "--tag", "v1", "--revision", "v1-branch",
                  "--dry-run", env=env, check=0)
    lines = dry.stdout.strip().splitlines()
    uploads = [line.strip() for line in lines if line.strip().startswith("upload ")]
    assert uploads[-1] == "upload README.md"  # the card last
    assert uploads[:4] == ["upload background/test-00000.tar", "upload background/test-00001.tar",
                           "upload texture/test-00000.tar", "upload material/test-00000.tar"]
    assert lines[0] == "token: found" and "branch v1-branch" in dry.stdout and lines[-1] == "tag v1 on the last commit"
    # offline (the test environment): a real repo fails fast, in one line, before any network call
    off = run_cli("publish", reference, "--repo", "org/name", env=env, timeout=60)
    assert off.returncode == 3 and len(off.stderr.strip().splitlines()) == 1 and "offline" in off.stderr  # environment
    # online but nothing answers (a closed loopback port): one line, no traceback
    down = run_cli("publish", reference, "--repo", "org/name", timeout=120,
                   env={**env, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert down.returncode == 3 and len(down.stderr.strip().splitlines()) == 1 and "Traceback" not in down.stderr
    no_token = run_cli("publish", reference, "--repo", "org/name", env={"HF_HUB_OFFLINE": "0", "HF_TOKEN": ""})
    assert no_token.returncode == 3 and "HF_TOKEN" in no_token.stderr
    bad = run_cli("publish", reference, "--repo", "not a repo", env=env)
    assert bad.returncode == 2 and "org/name" in bad.stderr
    local = run_cli("publish", reference, "--repo", f"file://{tmp_path / 'repo'}", "--tag", "v1", env=env, check=0)
    assert f"published: file://{tmp_path / 'repo'}" in local.stdout and "tagged v1" in local.stdout
    db = make_results_db(tmp_path / "r.duckdb")
    res_dry = run_cli("publish-results", "--db", db, "--repo", "org/name", "--dry-run", env=env, check=0)
    assert "upload results/leaderboard.parquet" in res_dry.stdout
    res_off = run_cli("publish-results", "--db", db, "--repo", "org/name", env=env)
    assert res_off.returncode == 3 and "offline" in res_off.stderr
    _check_no_token(dry, off, down, no_token, bad, local, res_dry, res_off)


def test_hub_errors_are_scrubbed_of_the_token(reference, monkeypatch):
    from gensets.errors import GensetsError
    from gensets.publish import publish

    monkeypatch.setenv("HF_TOKEN", TOKEN)

    class Leaky:
        url = "https://example.invalid"

        def create_repo(self, **kw):
            raise RuntimeError(f"401 Unauthorized for token {TOKEN} (Authorization: Bearer {TOKEN})")

    with pytest.raises(GensetsError) as e:
        publish(reference, "org/name", target=Leaky(), out=lambda line: None)
    _check_no_token(str(e.value))
    assert "creating the repo org/name failed: 401 Unauthorized" in str(e.value)


def test_hub_target_calls_huggingface_hub_in_order(reference, tmp_path):
    """HubTarget drives HfApi: repo + branch, the earlier version's manifest.json read, one create_commit per
    planned commit with exactly the planned files (the card last, the shard that manifest lists and this version
    lacks deleted there), then the tag."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    from gensets.errors import GensetsError
    from gensets.publish import HubTarget, plan, publish

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw))

        def create_branch(self, repo_id, **kw):
            calls.append(("create_branch", repo_id, kw))

        def hf_hub_download(self, repo_id, filename, **kw):  # the earlier version's manifest.json
            calls.append(("hf_hub_download", filename, kw))
            path = tmp_path / "earlier-manifest.json"
            path.write_text(json.dumps({"builder": "imagenet-d", "build": build,
                                        "shards": [{"path": "background/test-00009.tar"}]}))
            return str(path)

        def create_commit(self, **kw):
            calls.append(("create_commit", kw["operations"], kw,  # the bytes as uploaded (staged files go away)
                          {op.path_in_repo: Path(op.path_or_fileobj).read_bytes() for op in kw["operations"]
                           if isinstance(op, CommitOperationAdd) and "README" in op.path_in_repo}))

            class Info:
                commit_url = f"https://huggingface.co/datasets/{kw['repo_id']}/commit/{len(calls)}"
            return Info()

        def create_tag(self, repo_id, **kw):
            calls.append(("create_tag", repo_id, kw))

    build = json.loads((reference / "dataset" / "manifest.json").read_text())["build"]  # an earlier publish of it
    target = HubTarget.__new__(HubTarget)
    target.repo_id, target.api, target.url = "org/name", FakeApi(), "https://huggingface.co/datasets/org/name"
    url = publish(reference, "org/name", target=target, private=True, revision="dev", tag="v1",
                  out=lambda line: None)
    assert calls[0] == ("create_repo", "org/name", {"repo_type": "dataset", "private": True, "exist_ok": True})
    assert calls[1] == ("hf_hub_download", "manifest.json", {"repo_type": "dataset", "revision": "dev"})
    assert calls[2][0] == "create_repo" and calls[3][0] == "create_branch" and calls[3][2]["branch"] == "dev"
    commits = [c for c in calls if c[0] == "create_commit"]
    planned = plan(reference / "dataset")
    added = [[op.path_in_repo for op in c[1] if isinstance(op, CommitOperationAdd)] for c in commits]
    assert added == [p.files for p in planned] and added[-1][-1] == "README.md"
    assert all(str(op.path_or_fileobj) == str(reference / "dataset" / op.path_in_repo)
               for c in commits[:-1] for op in c[1] if isinstance(op, CommitOperationAdd))
    # the card's commit comes from a staged copy: the card as published names the repo and the tag
    staged = [op for op in commits[-1][1] if isinstance(op, CommitOperationAdd)]
    assert all(Path(op.path_or_fileobj).parts[-len(Path(op.path_in_repo).parts) - 1].startswith("gensets-card-")
               for op in staged)
    from gensets.cards.card import for_repo

    card = for_repo((reference / "dataset" / "README.md").read_text(), "org/name", "v1").encode()
    assert commits[-1][3]["README.md"] == card and b'REPO, REVISION = "org/name", "v1"' in card
    deleted = [[op.path_in_repo for op in c[1] if isinstance(op, CommitOperationDelete)] for c in commits]
    assert deleted == [[]] * (len(commits) - 1) + [["background/test-00009.tar"]]
    assert all(c[2]["repo_type"] == "dataset" and c[2]["revision"] == "dev" for c in commits)
    assert [c[2]["commit_message"] for c in commits] == [p.message for p in planned]
    assert calls[-1] == ("create_tag", "org/name", {"tag": "v1", "revision": "dev", "repo_type": "dataset"})
    assert url.endswith(f"/commit/{len(calls) - 1}")
    # another build in the repo (here: of the same builder): refused before anything is made or written
    build, calls[:] = "0123456789abcdef", []  # read by FakeApi's hf_hub_download
    with pytest.raises(GensetsError, match=r"^org/name holds another gensets dataset \(builder 'imagenet-d', build "
                       r"'0123456789abcdef'\), not this one .*--replace"):
        publish(reference, "org/name", target=target, revision="dev", out=lambda line: None)
    assert [c[0] for c in calls] == ["create_repo", "hf_hub_download"]  # the repo existed: no branch, no commit


def test_publish_results_as_parquet(tmp_path):
    import pyarrow.parquet as pq

    from gensets.evaluation import leaderboard
    from gensets.publish import LocalTarget, publish_results

    db = make_results_db(tmp_path / "r.duckdb")
    target = LocalTarget(tmp_path / "repo")
    publish_results(db, "file://" + str(tmp_path / "repo"), target=target, out=lambda line: None)
    table = pq.read_table(tmp_path / "repo" / "results" / "leaderboard.parquet")
    rows = leaderboard.public_rows(db)  # the leaderboard's rows, datasets named without local paths
    assert table.column_names == leaderboard.COLUMNS and table.num_rows == len(rows) == 6
    assert table.to_pylist() == rows and rows[0]["dataset"] == "gensets/imagenet-d-smoke"
    assert target.commits[0]["files"] == [f"results/leaderboard.{e}" for e in ("parquet", "csv", "html", "md")]
    r = run_cli("publish-results", "--db", tmp_path / "none.duckdb", "--repo", "org/name", "--dry-run")
    assert r.returncode == 2 and "none.duckdb" in r.stderr


def test_no_token_in_a_verbose_hub_log(reference, tmp_path):
    """huggingface_hub's own debug logging stays free of the token too (it is sent as a header only)."""
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from gensets.cli import main; sys.exit(main(sys.argv[1:]))",
         "publish", str(reference), "--repo", "org/name"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0",
             "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_VERBOSITY": "debug"})
    assert p.returncode == 3
    _check_no_token(p.stdout + p.stderr)


def test_publish_refuses_another_build_of_the_same_builder(reference, tmp_path):
    """A folder target holding another build of the same builder (another fingerprint) is another dataset, not an
    earlier version of this one: one line naming both, exit 2, not a byte of the target changed; --replace does it."""
    from .test_card import digest

    repo = tmp_path / "repo"
    run_cli("publish", reference, "--repo", f"file://{repo}", check=0)
    other = tmp_path / "other"
    shutil.copytree(reference / "dataset", other)
    manifest = json.loads((other / "manifest.json").read_text())
    theirs, manifest["build"] = manifest["build"], "0123456789abcdef"  # the same builder, another config
    (other / "manifest.json").write_text(json.dumps(manifest))
    before = digest(repo)
    r = run_cli("publish", other, "--repo", f"file://{repo}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert (f"holds another gensets dataset (builder 'imagenet-d', build {theirs!r}), not this one (builder "
            "'imagenet-d', build '0123456789abcdef')") in lines[0] and "--replace" in lines[0], lines
    assert digest(repo) == before
    run_cli("publish", other, "--repo", f"file://{repo}", "--replace", check=0)
    assert json.loads((repo / "manifest.json").read_text())["build"] == "0123456789abcdef"
    run_cli("publish", other, "--repo", f"file://{repo}", check=0)  # the same dataset again: no --replace needed


def test_publish_results_publishes_no_local_path_or_login(tmp_path):
    """Runs whose dataset and model are paths under the home folder: the dry run and the files published name them
    by their last folder (`my-ws`, `clf`), never by a path, the home folder or the login name."""
    import datetime as dt

    import pyarrow.parquet as pq

    from gensets.evaluation import store

    login = "zedlogin7"
    home = tmp_path / "home" / login
    db = make_results_db(tmp_path / "r.duckdb", configs=("background",), dataset=str(home / "out" / "my-ws"))
    con = store.connect(db)
    now = dt.datetime(2026, 1, 1)
    store.write_run(con, {"dataset": f"{home}/out/my-ws/dataset", "dataset_revision": None, "config": "background",
                          "split": "test", "model": f"hf:{home}/models/clf", "model_id": "x", "model_revision": None,
                          "protocol": "imagenet", "label_space": "model (1000)", "n": 12, "started": now,
                          "finished": now, "seconds": 1.0, "images_per_second": 12.0, "versions": {}},
                    [], [{"name": "top1", "value": 0.5, "lo": 0.4, "hi": 0.6}])
    con.close()
    env = {"HOME": str(home), "USER": login, "LOGNAME": login}
    dry = run_cli("publish-results", "--db", db, "--repo", "org/name", "--dry-run", env=env, check=0)
    assert "upload results/leaderboard.parquet: my-ws" in dry.stdout, dry.stdout
    repo = tmp_path / "published"
    run_cli("publish-results", "--db", db, "--repo", f"file://{repo}", env=env, check=0)
    rows = pq.read_table(repo / "results" / "leaderboard.parquet").to_pylist()
    assert {r["dataset"] for r in rows} == {"my-ws"} and {r["model"] for r in rows} >= {"hf:clf"}, rows
    published = [dry.stdout + dry.stderr, json.dumps(rows, default=str)]
    published += [p.read_bytes().decode("latin-1") for p in repo.rglob("*") if p.is_file()]
    for text in published:
        assert str(tmp_path) not in text and login not in text and "/home" not in text, text


def test_publish_results_refuses_random_weights_and_every_file_says_so(tmp_path):
    """A database with a tiny model's run (random weights: noise) and a real model's two-way run where 3 of 12
    answers named both options or neither: publish-results refuses it in one line (dry run too) unless
    --allow-random-weights; then the md and html say so above the table and mark the row, the csv and parquet
    carry random_weights; the two-way row shows counted / n (9 / 12) and two_way_all beside top-1."""
    import csv
    import datetime as dt
    from html import escape

    import pyarrow.parquet as pq

    from gensets.evaluation import leaderboard, store

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    now = dt.datetime(2026, 1, 1)
    for model, protocol, mets in (
            ("tiny:resnet", "imagenet", [{"name": "top1", "value": 0.25, "lo": 0.1, "hi": 0.4}]),
            ("hf:llava-hf/llava-1.5-7b-hf", "two-way (wrong_option=released-csv)",
             [{"name": "top1", "value": 6 / 9, "lo": 0.3, "hi": 0.9}, {"name": "two_way_all", "value": 0.5, "lo": None,
                                                                       "hi": None},
              {"name": "unparseable", "value": 0.25, "lo": None, "hi": None}])):
        store.write_run(con, {"dataset": "zcs15/ImageNet-D", "dataset_revision": "r", "config": "background",
                              "split": "test", "model": model, "model_id": model, "model_revision": None,
                              "protocol": protocol, "label_space": "dataset", "n": 12, "started": now, "finished": now,
                              "versions": {}}, [], mets)
    con.close()
    for args in ((), ("--dry-run",)):
        r = run_cli("publish-results", "--db", db, "--repo", "org/name", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert "tiny:resnet" in r.stderr and "--allow-random-weights" in r.stderr and "llava" not in r.stderr
    repo = tmp_path / "repo"
    run_cli("publish-results", "--db", db, "--repo", f"file://{repo}", "--allow-random-weights", check=0)
    out = repo / "results"
    md, html = (out / "leaderboard.md").read_text(), (out / "leaderboard.html").read_text()
    assert md.index(leaderboard.RANDOM) < md.index("| dataset |") and "tiny:resnet ‡ |" in md
    assert html.index(escape(leaderboard.RANDOM)) < html.index("<table>") and "tiny:resnet ‡</td>" in html
    rows = {r["model"]: r for r in csv.DictReader(open(out / "leaderboard.csv"))}
    assert rows["tiny:resnet"]["random_weights"] == "True" and rows["hf:llava-hf/llava-1.5-7b-hf"]["random_weights"] == "False"
    table = {r["model"]: r for r in pq.read_table(out / "leaderboard.parquet").to_pylist()}
    assert table["tiny:resnet"]["random_weights"] and not table["hf:llava-hf/llava-1.5-7b-hf"]["random_weights"]
    llava = table["hf:llava-hf/llava-1.5-7b-hf"]
    assert (llava["n"], llava["counted"], llava["two_way_all"]) == (12, 9, 0.5) and table["tiny:resnet"]["counted"] == 12
    assert "| 9 / 12 | 66.67 | 30.00–90.00 | 50.00 |" in md and leaderboard.TWO_WAY in md


def test_publish_results_keeps_the_login_name_outside_paths_and_the_dry_run_shows_the_values(tmp_path):
    """With the login `test`, the split `test` and the dataset `test-bench` are published as they are (only local
    paths are cleaned: a path under the home folder is still cut to its last folder); the dry run prints the values
    the CSV will hold, the ones then really published."""
    import csv

    login = "test"
    home = tmp_path / "home" / login
    db = make_results_db(tmp_path / "r.duckdb", configs=("background",), dataset="test-bench")
    make_results_db(db, configs=("texture",), dataset=str(home / "out" / "my-ws"))
    env = {"HOME": str(home), "USER": login, "LOGNAME": login}
    dry = run_cli("publish-results", "--db", db, "--repo", "org/name", "--dry-run", env=env, check=0)
    repo = tmp_path / "published"
    run_cli("publish-results", "--db", db, "--repo", f"file://{repo}", env=env, check=0)
    published = (repo / "results" / "leaderboard.csv").read_text()
    rows = list(csv.DictReader(published.splitlines()))
    assert {r["split"] for r in rows} == {"test"} and {r["dataset"] for r in rows} == {"test-bench", "my-ws"}, rows
    assert "user" not in published and str(home) not in published
    shown = dry.stdout.split("the values it publishes (results/leaderboard.csv):\n", 1)[1]
    assert [line.strip() for line in shown.splitlines()] == published.splitlines(), dry.stdout
