"""gensets eval: protocols, results in DuckDB, leaderboard and query, on real model files built here.

A "fixed" classifier is a real timm model (timm's test_resnet, 1000 classes) whose last layer is
set so that it always ranks chosen ImageNet classes first; it is saved with timm's own
``save_for_hf`` and loaded through ``timm:local-dir:`` like any other model.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import ROOT, run_cli


def fixed_classifier(folder, ranked_ids: list[int]):
    """A real timm model that ranks ``ranked_ids`` first, in that order, for any image."""
    import timm
    import torch

    torch.manual_seed(0)
    m = timm.create_model("test_resnet", num_classes=1000)
    head = m.get_classifier()
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        for rank, i in enumerate(ranked_ids):
            head.bias[i] = 10.0 - rank
    timm.models.save_for_hf(m, str(folder), safe_serialization=True)
    return f"timm:local-dir:{folder}"


def query(db, sql):
    r = run_cli("query", "--db", db, sql, "--format", "json", check=0)
    return json.loads(r.stdout)


def test_a_class_mapped_to_three_ids_hits_on_each(reference, tmp_path):
    db = tmp_path / "r.duckdb"
    chair = [423, 559, 765]
    specs = [fixed_classifier(tmp_path / f"m{i}", [i]) for i in chair]
    r = run_cli("eval", reference, *[a for s in specs for a in ("--model", s)], "--db", db,
                "--config", "background", "--json", check=0)
    results = json.loads(r.stdout)
    assert len(results) == 3
    for res in results:
        assert res["protocol"] == "imagenet" and res["n"] == 18
        assert res["metrics"]["top1"] == pytest.approx(6 / 18)  # the 6 chair images, nothing else
        assert "masked_top1" in res["metrics"] and "masked_top5" in res["metrics"]
    rows = query(db, """SELECT r.model, p.key, p.correct1 FROM predictions p JOIN runs r USING (run_id)
                        ORDER BY ALL""")
    for row in rows:
        assert row["correct1"] == ("_chair_" in row["key"]), row


def test_masked_variant_is_reported_separately(reference, tmp_path):
    db = tmp_path / "r.duckdb"
    # ranks tench (0, in no class's map) first and mug (504) second: wrong unmasked, right when masked
    spec = fixed_classifier(tmp_path / "m", [0, 504])
    res = json.loads(run_cli("eval", reference, "--model", spec, "--db", db, "--config", "texture",
                             "--json", check=0).stdout)[0]
    n_mug = 4
    assert res["metrics"]["top1"] == 0.0
    assert res["metrics"]["top5"] == pytest.approx(n_mug / 12)
    assert res["metrics"]["masked_top1"] == pytest.approx(n_mug / 12)
    names = {r["name"] for r in query(db, "SELECT DISTINCT name FROM metrics")}
    assert {"top1", "top5", "masked_top1", "masked_top5", "mean_per_class"} <= names


def _wordset_folder(tmp_path, classes):
    """A small Hub-style folder: one config, random images, a card declaring the class names."""
    import numpy as np
    from PIL import Image

    from gensets.shards import encode_image, write_shard

    folder = tmp_path / "words"
    (folder / "default").mkdir(parents=True)
    rng = np.random.default_rng(0)
    samples = [{"__key__": f"s{i:03d}", "png": encode_image(Image.fromarray(
        rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)), "png"), "cls": i % len(classes), "json": {}}
        for i in range(2 * len(classes))]
    write_shard(folder / "default" / "test-00000.tar", samples)
    names = {str(i): c for i, c in enumerate(classes)}
    header = {"configs": [{"config_name": "default", "data_files": [{"split": "test", "path": "default/test-*.tar"}]}],
              "dataset_info": [{"config_name": "default", "features": [
                  {"name": "png", "dtype": "image"}, {"name": "cls", "dtype": {"class_label": {"names": names}}}]}]}
    import yaml

    (folder / "README.md").write_text("---\n" + yaml.safe_dump(header) + "---\n# words\n")
    return folder


def test_wordset_rules_hold_through_eval(tmp_path):
    from gensets.labels.imagenet import imagenet_names

    names = imagenet_names()
    idx = {n: i for i, n in enumerate(names)}
    folder = _wordset_folder(tmp_path, ["clock", "toilet seat", "rabbit"])
    db = tmp_path / "r.duckdb"
    # top-1 "wall clock", then "toilet tissue, toilet paper, ..." and "seat belt", then "hare"
    spec = fixed_classifier(tmp_path / "m", [idx["wall clock"], idx["toilet paper"], idx["seat belt"], idx["hare"]])
    run_cli("eval", folder, "--model", spec, "--db", db, "--protocol", "wordset", "--json", check=0)
    rows = query(db, "SELECT target, correct1, correct5 FROM predictions ORDER BY key")
    by_target = {}
    for r in rows:
        by_target.setdefault(r["target"], set()).add((r["correct1"], r["correct5"]))
    assert by_target[0] == {(True, True)}  # clock: "wall clock" at rank 1
    assert by_target[1] == {(False, False)}  # toilet seat: in neither "toilet tissue, ..." nor "seat belt"
    assert by_target[2] == {(False, True)}  # rabbit: "hare" at rank 4, through the synonym set


def test_hostile_model_spec_is_plain_data(tmp_path):
    from gensets.evaluation import store

    db = tmp_path / "r.duckdb"
    hostile = "timm:x'; DROP TABLE runs; --"
    con = store.connect(db)
    run = {"dataset": "d", "dataset_revision": None, "config": "c", "split": "test", "model": hostile,
           "model_id": hostile, "model_revision": None, "protocol": "imagenet", "label_space": "x", "n": 1}
    store.write_run(con, run, [{"key": "k'; --", "target": 0, "target_ids": [0], "top5": [0, 1, 2, 3, 4],
                                "scores": [0.5] * 5, "correct1": True, "correct5": True}],
                    [{"name": "top1", "value": 1.0, "lo": 1.0, "hi": 1.0}])
    con.close()
    rows = query(db, "SELECT model FROM runs")
    assert rows == [{"model": hostile}]
    lb = json.loads(run_cli("leaderboard", "--db", db, "--format", "json", check=0).stdout)
    assert lb[0]["model"] == hostile and lb[0]["top1"] == 1.0
    # the same spec given to eval is refused in one line, and the database is untouched
    r = run_cli("eval", tmp_path, "--model", hostile, "--db", db)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert query(db, "SELECT count(*) AS n FROM runs") == [{"n": 1}]
    # query is read-only
    r = run_cli("query", "--db", db, "DROP TABLE runs")
    assert r.returncode == 2 and "read-only" in r.stderr.lower()


def test_rerun_replaces_the_run(reference, tmp_path):
    db = tmp_path / "r.duckdb"
    for _ in range(2):
        run_cli("eval", reference, "--model", "tiny:resnet", "--db", db, "--config", "material", "--quiet", check=0)
    assert query(db, "SELECT count(*) AS n FROM runs") == [{"n": 1}]
    assert query(db, "SELECT count(*) AS n FROM predictions") == [{"n": 12}]


def test_killed_eval_leaves_no_half_written_run(reference, tmp_path):
    db = tmp_path / "r.duckdb"
    cmd = [sys.executable, "-m", "gensets.cli", "eval", str(reference), "--model", "tiny:resnet",
           "--model", "tiny:vit", "--db", str(db), "--batch-size", "1"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # kill while the first split is being scored (after its progress bar has started)
    buf = ""
    deadline = time.time() + 120
    while time.time() < deadline and "background/test:" not in buf and p.poll() is None:
        buf += p.stderr.read(1)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    if db.exists():
        runs = query(db, "SELECT run_id, n FROM runs")
        for r in runs:
            n = query(db, f"SELECT count(*) AS n FROM predictions WHERE run_id = '{r['run_id']}'")[0]["n"]
            assert n == r["n"]
        orphans = query(db, "SELECT count(*) AS n FROM predictions WHERE run_id NOT IN (SELECT run_id FROM runs)")
        assert orphans == [{"n": 0}]


def test_two_way_protocol_through_eval(reference, tmp_path):
    """VLMs choose between the true class and CLIP's top wrong class; every image gets a row."""
    db = tmp_path / "r.duckdb"
    res = json.loads(run_cli("eval", reference, "--model", "tiny:vlm", "--protocol", "two-way", "--clip",
                             "tiny:clip", "--config", "texture", "--db", db, "--json", check=0).stdout)[0]
    assert res["protocol"] == "two-way" and res["n"] == 12
    m = res["metrics"]
    parsed = query(db, "SELECT count(*) AS n FROM predictions WHERE len(top5) = 1")[0]["n"]
    assert m["unparseable"] == pytest.approx(1 - parsed / 12)
    correct = query(db, "SELECT count(*) AS n FROM predictions WHERE correct1")[0]["n"]
    assert m["top1"] == pytest.approx(correct / 12)
    assert m["two_way_parsed"] == (pytest.approx(correct / parsed) if parsed else None)
    assert run_cli("eval", reference, "--model", "tiny:vlm", "--protocol", "two-way", "--db", db).returncode == 2
