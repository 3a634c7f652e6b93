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
from pathlib import Path

import pytest

from .conftest import HANG, ROOT, run_cli


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


@pytest.mark.slow
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


def _wordset_folder(tmp_path, classes, meta=None):
    """A small Hub-style folder: one config, random images, a card declaring the class names; ``meta(i)`` is
    sample i's json (default: empty)."""
    import numpy as np
    from PIL import Image

    from gensets.images import encode_image
    from gensets.shards import write_shard

    folder = tmp_path / "words"
    (folder / "default").mkdir(parents=True)
    rng = np.random.default_rng(0)
    samples = [{"__key__": f"s{i:03d}", "png": encode_image(Image.fromarray(
        rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)), "png"), "cls": i % len(classes),
        "json": meta(i) if meta else {}} for i in range(2 * len(classes))]
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


def test_imagenet_top5_counted_once_and_the_authors_per_id_count(tmp_path):
    """By hand. Class "alarm clock" maps to two ImageNet ids (ImageNet-D: 409 analog clock, 530 digital clock),
    "wall clock" to one (892); 2 images each; the model's top 5 is always 409, 530, 0, 1, 2.

    - imagenet (default, counted once): alarm clock hits top-1 and top-5, wall clock neither: top1 0.5, top5 0.5.
    - imagenet-top5-per-id (the authors' evaluate_imagenet_models.py: correct[:5].sum() added once per mapped
      id): each alarm-clock image adds 2 (both ids in its top 5): top5 = (2 + 2 + 0 + 0) / 4 = 1.0; top1 0.5.
    The run rows name the variant."""
    ids = {0: [409, 530], 1: [892]}
    folder = _wordset_folder(tmp_path, ["alarm clock", "wall clock"], meta=lambda i: {"imagenet_ids": ids[i % 2]})
    spec = fixed_classifier(tmp_path / "m", [409, 530, 0, 1, 2])
    db = tmp_path / "r.duckdb"
    got = {}
    for protocol in ("imagenet", "imagenet-top5-per-id"):
        (row,) = json.loads(run_cli("eval", folder, "--model", spec, "--db", db, "--protocol", protocol, "--json",
                                    "--quiet", check=0).stdout)
        got[row["variant"]] = (row["metrics"]["top1"], row["metrics"]["top5"])
    assert got == {"imagenet": (0.5, 0.5), "imagenet-top5-per-id": (0.5, 1.0)}
    assert query(db, "SELECT protocol FROM runs ORDER BY 1") == [{"protocol": "imagenet"},
                                                                 {"protocol": "imagenet-top5-per-id"}]


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


def _a_run(**kw) -> dict:
    return {"dataset": "d", "dataset_revision": None, "config": "c", "split": "test", "model": "m",
            "model_id": "m", "model_revision": None, "protocol": "imagenet", "label_space": "x", "n": 2, **kw}


def _preds(keys) -> list[dict]:
    return [{"key": k, "target": 0, "target_ids": [0], "top5": [0, 1, 2, 3, 4], "scores": [0.2] * 5,
             "correct1": True, "correct5": True} for k in keys]


def _stored(con) -> tuple:
    return (con.execute("SELECT run_id, n, model_id FROM runs ORDER BY ALL").fetchall(),
            con.execute("SELECT run_id, key FROM predictions ORDER BY ALL").fetchall(),
            con.execute("SELECT run_id, name, value FROM metrics ORDER BY ALL").fetchall())


@pytest.mark.parametrize("bad", ["null key in predictions", "wrong type in runs"])
def test_a_failed_write_keeps_the_previous_run_whole(tmp_path, bad):
    """An INSERT that fails inside write_run's transaction (after the DELETEs) rolls everything back."""
    import duckdb

    from gensets.evaluation import store

    db = tmp_path / "r.duckdb"
    con = duckdb.connect(str(db))  # a stricter predictions table: store.connect keeps an existing one
    con.execute("""CREATE TABLE predictions (run_id VARCHAR, key VARCHAR NOT NULL, target INTEGER,
                   target_ids INTEGER[], top5 INTEGER[], scores DOUBLE[], correct1 BOOLEAN, correct5 BOOLEAN)""")
    con.close()
    con = store.connect(db)
    mets = [{"name": "top1", "value": 1.0, "lo": 1.0, "hi": 1.0}]
    store.write_run(con, _a_run(model_id="old"), _preds(["a", "b"]), mets)
    before = _stored(con)
    if bad == "null key in predictions":  # fails at the predictions INSERT, after the runs row went in
        args = (_a_run(model_id="new", n=3), _preds(["a", "b", None]))
    else:  # fails at the runs INSERT, after the old rows were deleted
        args = (_a_run(model_id="new", n="three"), _preds(["a", "b", "c"]))
    with pytest.raises(duckdb.Error):
        store.write_run(con, *args, [{"name": "top1", "value": 0.5, "lo": 0.0, "hi": 1.0}])
    assert _stored(con) == before and before[0][0][1:] == (2, "old")
    store.write_run(con, _a_run(model_id="new", n=3), _preds(["a", "b", "c"]), mets)  # the connection still works
    assert _stored(con)[0][0][1:] == (3, "new")
    con.close()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_killed_eval_leaves_only_complete_runs(reference, tmp_path, workers):
    """SIGKILL while the second split is scored (decoding in this process, or in 2 worker processes): the first
    split's runs were committed and are whole."""
    db = tmp_path / "r.duckdb"
    err = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "gensets.cli", "eval", str(reference), "--model", "tiny:resnet",
           "--model", "tiny:vit", "--db", str(db), "--batch-size", "1", "--workers", workers]
    with open(err, "w") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f)
    # the configs run in card order (background, texture, material); the runs of a split are written
    # before the next split's progress bar starts
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None and "texture/test" not in err.read_text(errors="replace"):
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, f"eval ended before the kill: {err.read_text()[-500:]}"
    runs = query(db, "SELECT run_id, config, n FROM runs")
    assert {(r["config"], r["n"]) for r in runs} >= {("background", 18)}
    assert 2 <= len(runs) < 6, runs  # the first split's two runs, not every run
    for r in runs:
        n = query(db, f"SELECT count(*) AS n FROM predictions WHERE run_id = '{r['run_id']}'")[0]["n"]
        assert n == r["n"], r
        names = {m["name"] for m in query(db, f"SELECT name FROM metrics WHERE run_id = '{r['run_id']}'")}
        assert {"top1", "top5"} <= names, r
    orphans = query(db, """SELECT count(*) AS n FROM predictions WHERE run_id NOT IN (SELECT run_id FROM runs)""")
    assert orphans == [{"n": 0}]


@pytest.mark.slow
def test_a_limited_run_never_replaces_a_complete_one(reference, tmp_path):
    def base(db):
        return ("eval", reference, "--model", "tiny:resnet", "--config", "material", "--db", db, "--quiet")

    db = tmp_path / "r.duckdb"
    run_cli(*base(db), check=0)
    skipped = run_cli(*base(db), "--limit", 4, check=0)  # a complete run is there: nothing to do
    assert skipped.stderr.startswith("skipped tiny:resnet on material/test [imagenet]: complete in"), skipped.stderr
    r = run_cli(*base(db), "--limit", 4, "--force")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "--limit 4" in line and "complete run of 12" in line, line
    assert query(db, "SELECT n, sample_limit FROM runs") == [{"n": 12, "sample_limit": None}]
    assert query(db, "SELECT count(*) AS n FROM predictions") == [{"n": 12}]
    # a limit the split does not reach is a complete run; a complete run replaces a limited one
    run_cli(*base(db), "--limit", 100, check=0)
    assert query(db, "SELECT n, sample_limit FROM runs") == [{"n": 12, "sample_limit": None}]
    db2 = tmp_path / "r2.duckdb"
    run_cli(*base(db2), "--limit", 4, check=0)
    assert query(db2, "SELECT n, sample_limit FROM runs") == [{"n": 4, "sample_limit": 4}]
    run_cli(*base(db2), check=0)
    assert query(db2, "SELECT n, sample_limit FROM runs") == [{"n": 12, "sample_limit": None}]
    # a limit equal to the split's size saw every sample: complete, so a smaller limit cannot replace it
    db3 = tmp_path / "r3.duckdb"
    run_cli(*base(db3), "--limit", 12, check=0)
    assert query(db3, "SELECT n, sample_limit FROM runs") == [{"n": 12, "sample_limit": None}]
    r = run_cli(*base(db3), "--limit", 2)  # the complete run is kept: skipped
    assert r.returncode == 0 and "skipped tiny:resnet on material/test" in r.stderr and "--force" in r.stderr
    assert query(db3, "SELECT n, sample_limit FROM runs") == [{"n": 12, "sample_limit": None}]
    r = run_cli(*base(db3), "--limit", 2, "--force")
    assert r.returncode == 2 and "complete run of 12" in r.stderr, r.stderr


def test_a_model_given_twice_is_one_run(reference, tmp_path):
    db = tmp_path / "r.duckdb"
    r = run_cli("eval", reference, "--model", "tiny:resnet", "--model", "tiny:resnet", "--config", "material",
                "--db", db, "--json", check=0)
    assert [(x["model"], x["n"]) for x in json.loads(r.stdout)] == [("tiny:resnet", 12)]
    assert query(db, "SELECT n FROM runs") == [{"n": 12}]
    assert query(db, "SELECT count(*) AS n, count(DISTINCT key) AS keys FROM predictions") == [{"n": 12, "keys": 12}]


def test_leaderboard_keeps_runs_of_two_revisions_apart(tmp_path):
    from gensets.evaluation import store

    con = store.connect(tmp_path / "r.duckdb")
    for rev, top1 in [("build-1", 1.0), ("build-2", 0.0)]:
        store.write_run(con, _a_run(dataset_revision=rev), _preds(["a", "b"]),
                        [{"name": "top1", "value": top1, "lo": top1, "hi": top1}])
    cols, rows = store.leaderboard(con)
    con.close()
    got = sorted((r[cols.index("revision")], r[cols.index("top1")], r[cols.index("top1_lo")]) for r in rows)
    assert got == [("build-1", 1.0, 1.0), ("build-2", 0.0, 0.0)]  # not one row mixing the max of each


@pytest.mark.parametrize("member, value, where", [
    ("json", "{not json", "s001.json: not valid JSON"),
    ("json", "[1, 2]", "s001.json: expected a JSON object, got list"),
    ("cls", "seven", "s001.cls: not an integer class index"),
])
def test_bad_json_or_cls_member_is_one_line(tmp_path, member, value, where):
    import numpy as np
    from PIL import Image

    from gensets.images import encode_image
    from gensets.shards import write_shard

    png = encode_image(Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)), "png")
    samples = [{"__key__": f"s{i:03d}", "png": png, "cls": 0, "json": {}} for i in range(3)]
    samples[1][member] = value
    shard = tmp_path / "data" / "test-00000.tar"
    shard.parent.mkdir()
    write_shard(shard, samples)
    r = run_cli("eval", tmp_path / "data", "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb")
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{shard}: {where}" in line and "Traceback" not in r.stderr, line


def test_a_bad_image_read_by_a_worker_process_is_one_line(tmp_path):
    """The third of three images is not an image: batch 2 (batches of 1) fails in a worker process; the error
    reaches the user as the one line the main process would print, no worker traceback."""
    import numpy as np
    from PIL import Image

    from gensets.images import encode_image
    from gensets.shards import write_shard

    png = encode_image(Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)), "png")
    samples = [{"__key__": f"s{i:03d}", "png": png, "cls": 0, "json": {"imagenet_ids": [0]}} for i in range(3)]
    samples[2]["png"] = b"not a png"
    shard = tmp_path / "data" / "test-00000.tar"
    shard.parent.mkdir()
    write_shard(shard, samples)
    r = run_cli("eval", shard, "--model", "tiny:resnet", "--protocol", "imagenet", "--db", tmp_path / "r.duckdb",
                "--batch-size", "1", "--workers", "2", "--quiet")
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{shard}: s002.png: cannot decode image" in line and "worker" not in line, line


@pytest.mark.slow
def test_protocol_follows_the_loaded_classifier_not_its_name(reference, tmp_path):
    """An image classifier named like SigLIP is not zero-shot; a CLIP without "clip" in its name is."""
    from gensets.models import tiny_path

    from .test_models import _fake_hub_repo

    home = tmp_path / "hf"
    commit = "0123456789abcdef0123456789abcdef01234567"
    _fake_hub_repo(home, "gensets/tiny-siglip-vit", tiny_path("vit"), commit)  # ViT, 1000 ImageNet labels
    _fake_hub_repo(home, "gensets/tiny-contrastive", tiny_path("hf-clip"), commit)  # model_type clip
    specs = ["hf:gensets/tiny-siglip-vit", "hf:gensets/tiny-contrastive"]
    r = run_cli("eval", reference, *[a for s in specs for a in ("--model", s)], "--config", "material",
                "--db", tmp_path / "r.duckdb", "--json", env={"HF_HOME": str(home)}, check=0)
    got = {x["model"]: x["protocol"] for x in json.loads(r.stdout)}
    assert got == {"hf:gensets/tiny-siglip-vit": "imagenet", "hf:gensets/tiny-contrastive": "zero-shot"}


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def test_vqa_json_prints_null_for_undefined_metrics(tmp_path):
    """Only "yes" questions: no_accuracy is undefined, printed as null (never NaN) and stored as NULL."""
    import numpy as np
    from PIL import Image

    from gensets.images import encode_image
    from gensets.shards import write_shard

    png = encode_image(Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)), "png")
    q = {"questions": [{"question": "Is there a cat in the image?", "answer": "yes"}]}
    (tmp_path / "data").mkdir()
    write_shard(tmp_path / "data" / "test-00000.tar", [{"__key__": f"s{i}", "png": png, "json": q} for i in range(2)])
    db = tmp_path / "r.duckdb"
    r = run_cli("eval", tmp_path / "data", "--model", "tiny:vilt-vqa", "--protocol", "vqa", "--db", db, "--json",
                check=0)
    assert "NaN" not in r.stdout
    (res,) = json.loads(r.stdout, parse_constant=_reject_constant)
    assert res["metrics"]["vqa_no_accuracy"] is None and res["metrics"]["vqa_n_no"] == 0
    assert res["metrics"]["vqa_yes_accuracy"] is not None
    assert query(db, "SELECT value FROM metrics WHERE name = 'vqa_no_accuracy'") == [{"value": None}]


@pytest.mark.slow
def test_two_way_protocol_through_eval(reference, tmp_path):
    """VLMs choose between the true class and CLIP's top wrong class; every image gets a row. The default is
    the authors' form (top1 leaves out answers naming both or neither); two-way-shuffled is gensets' own."""
    for protocol in ("two-way", "two-way-shuffled"):
        db = tmp_path / f"{protocol}.duckdb"
        res = json.loads(run_cli("eval", reference, "--model", "tiny:vlm", "--protocol", protocol, "--clip",
                                 "tiny:clip", "--config", "texture", "--db", db, "--json", check=0).stdout)[0]
        assert res["protocol"] == protocol and res["n"] == 12
        # tiny:vlm is a LLaVA: how it ran (fp32 on this CPU, images padded to a square) is part of the protocol
        assert query(db, "SELECT protocol FROM runs") == [{"protocol": f"{protocol} (tiny:clip; fp32 on cpu, pad-square)"}]
        m = res["metrics"]
        parsed = query(db, "SELECT count(*) AS n FROM predictions WHERE len(top5) = 1")[0]["n"]
        assert m["unparseable"] == pytest.approx(1 - parsed / 12)
        correct = query(db, "SELECT count(*) AS n FROM predictions WHERE correct1")[0]["n"]
        if protocol == "two-way":
            assert m["top1"] == (pytest.approx(correct / parsed) if parsed else None)
            assert m["two_way_all"] == pytest.approx(correct / 12)
        else:
            assert m["top1"] == pytest.approx(correct / 12)
            assert m["two_way_parsed"] == (pytest.approx(correct / parsed) if parsed else None)
    assert run_cli("eval", reference, "--model", "tiny:vlm", "--protocol", "two-way", "--db", db).returncode == 2


# ---------------------------------------------------------------- worker processes, precision, processes
ALL_PREDICTIONS = ("SELECT r.model, r.protocol, r.config, r.n, p.* EXCLUDE (run_id) FROM predictions p "
                   "JOIN runs r USING (run_id) ORDER BY r.model, r.config, p.key")
ALL_METRICS = "SELECT r.model, r.config, m.name, m.value, m.lo, m.hi FROM metrics m JOIN runs r USING (run_id) ORDER BY ALL"


def _eval_rows(reference, db, *args, env=None):
    """Batches of 5 over the background config (18 images in 2 shards): batch 3 crosses the shard boundary and
    batch 4 is short."""
    run_cli("eval", reference, "--model", "tiny:resnet", "--model", "tiny:clip", "--model", "tiny:vit",
            "--config", "background", "--db", db, "--batch-size", "5", "--quiet", *args, env=env, check=0)
    return query(db, ALL_PREDICTIONS), query(db, ALL_METRICS)


def test_worker_processes_give_the_predictions_of_one_process(reference, tmp_path):
    """--workers 2 (two decoding processes) and --workers 0 (decoding in the main process): the same batches,
    so every prediction row (top-5 and its scores) and every metric is identical."""
    one = _eval_rows(reference, tmp_path / "w0.duckdb", "--workers", "0")
    two = _eval_rows(reference, tmp_path / "w2.duckdb", "--workers", "2")
    assert len(one[0]) == 3 * 18 and one == two
    assert {json.loads(r["execution"])["workers"] for r in query(tmp_path / "w2.duckdb", "SELECT execution FROM runs")} == {2}


def test_batches_are_prepared_in_worker_processes_in_order(reference):
    """The loader itself: with 2 workers each batch's prepare runs in another process than this one, and the
    batches come back in order, each holding the records of a one-process read."""
    from gensets.evaluation.data import open_source
    from gensets.evaluation.loader import SplitBatches

    (split,) = open_source(str(reference), "background").splits

    def pid(images):
        return os.getpid()

    def keys(batches):
        return [(b, [r["key"] for r in records]) for b, records, _ in batches]

    data = SplitBatches(split, 4, None)
    here = list(data.prepared([pid], workers=0))
    there = list(data.prepared([pid], workers=2))
    assert [x[2] for x in here] == [[os.getpid()]] * 5  # 18 images in batches of 4: 4 + 4 + 4 + 4 + 2
    assert len({x[2][0] for x in there}) == 2 and os.getpid() not in {x[2][0] for x in there}
    assert keys(here) == keys(there) and [len(k) for _, k in keys(here)] == [4, 4, 4, 4, 2]
    assert [k for _, ks in keys(here) for k in ks] == [r["key"] for r in split.records()]  # the streamed order
    # process 1 of 2 takes batches 1, 3 (the loop of an accelerate launch, here in one process)
    assert keys(data.prepared([pid], rank=1, world=2, workers=2)) == [keys(here)[1], keys(here)[3]]
    # a split without shards (a Hub dataset, streamed): read in this process, the same batches
    import dataclasses

    streamed = SplitBatches(dataclasses.replace(split, shards=None), 4, None)
    assert streamed.first()["key"] == data.first()["key"]
    assert keys(streamed.prepared([pid], workers=2)) == keys(here)
    assert keys(SplitBatches(dataclasses.replace(split, shards=None), 4, None).prepared([pid], rank=1, world=2)) == [
        keys(here)[1], keys(here)[3]]


def test_precision_is_recorded_and_named(reference, tmp_path):
    """--precision bf16 (torch.autocast; on CPU too): its own run beside the fp32 one, recorded in the run row,
    named by the leaderboard; fp32 keeps the run id it always had."""
    from gensets.evaluation import store

    db = tmp_path / "r.duckdb"
    for precision in ("fp32", "bf16"):
        run_cli("eval", reference, "--model", "tiny:resnet", "--config", "material", "--db", db, "--quiet",
                "--precision", precision, check=0)
    runs = query(db, "SELECT run_id, dataset, dataset_revision, protocol, precision, n FROM runs ORDER BY precision")
    assert [(r["precision"], r["protocol"], r["n"]) for r in runs] == [("bf16", "imagenet", 12),
                                                                      ("fp32", "imagenet", 12)]
    fp32 = runs[1]
    assert fp32["run_id"] == store.run_id(fp32["dataset"], fp32["dataset_revision"], "material", "test",
                                          "tiny:resnet", "imagenet")
    board = json.loads(run_cli("leaderboard", "--db", db, "--format", "json", check=0).stdout)
    assert sorted(r["protocol"] for r in board) == ["imagenet", "imagenet [bf16]"]
    bad = run_cli("eval", reference, "--model", "tiny:resnet", "--db", db, "--precision", "fp8")
    assert bad.returncode == 2 and "invalid choice: 'fp8'" in bad.stderr


@pytest.mark.slow
def test_two_processes_under_accelerate_write_the_one_process_run(reference, tmp_path):
    """accelerate launch --multi_gpu with 2 CPU processes (gloo): process r scores batches r, r+2, ...; process 0
    gathers them and writes one run per model, equal row for row to a one-process run."""
    # on CPU a float reduction depends on torch's thread count; accelerate gives each process one thread
    # (OMP_NUM_THREADS=1), so the one-process run has one too
    one = _eval_rows(reference, tmp_path / "one.duckdb", "--workers", "0", env={"OMP_NUM_THREADS": "1"})
    accelerate = Path(sys.executable).with_name("accelerate")
    db = tmp_path / "two.duckdb"
    p = subprocess.run(
        [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no",
         "-m", "gensets.cli", "eval", str(reference), "--model", "tiny:resnet", "--model", "tiny:clip",
         "--model", "tiny:vit", "--config", "background", "--db", str(db), "--batch-size", "5", "--quiet",
         "--workers", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (query(db, ALL_PREDICTIONS), query(db, ALL_METRICS)) == one
    executions = [json.loads(r["execution"]) for r in query(db, "SELECT execution FROM runs")]
    assert len(executions) == 3 and {e["processes"] for e in executions} == {2}
