"""Recognition sets (Borji 2022): import with corrupt-file skipping, generate, score, report."""


import json

import numpy as np
import pytest
import yaml
from PIL import Image

from .conftest import ROOT, run_cli
from .test_eval import fixed_classifier, query


def _photo(seed: int, size=(48, 40)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


@pytest.fixture()
def import_folder(tmp_path):
    """clock/ and rabbit/ images people collected, with three bad files among them."""
    root = tmp_path / "collected"
    for cat in ("clock", "rabbit"):
        (root / cat).mkdir(parents=True)
        for i in range(3):
            _photo(hash((cat, i)) % 1000).save(root / cat / f"{i}.jpg", quality=90)
    _photo(7).save(root / "rabbit" / "3.png")
    good = (root / "clock" / "0.jpg").read_bytes()
    (root / "clock" / "truncated.jpg").write_bytes(good[: len(good) // 2])
    Image.new("1", (20000, 20000)).save(root / "rabbit" / "huge.png")
    (root / "clock" / "notes.jpg").write_text("these are my notes, not a picture\n")
    return root


@pytest.mark.slow
def test_import_skips_exactly_the_bad_files(import_folder, tmp_path):
    cfg = tmp_path / "rec.yaml"
    cfg.write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock", "rabbit"],
                                   "imports": [{"path": str(import_folder), "source": "people"}]}))
    ws = tmp_path / "ws"
    r = run_cli("build", cfg, "--out", ws, "--quiet", check=0)
    skipped = sorted(line for line in r.stderr.splitlines() if line.startswith("skipped "))
    assert len(skipped) == 3, r.stderr
    notes, truncated, huge = skipped  # clock/notes.jpg, clock/truncated.jpg, rabbit/huge.png
    assert "truncated.jpg: corrupt image" in truncated and "truncated" in truncated.split(": corrupt image")[1]
    assert "notes.jpg: not an image" in notes
    assert "huge.png: decompression bomb: " in huge and "400000000 pixels" in huge  # PIL's own guard
    run_cli("finalize", ws, check=0)
    import datasets

    ds = datasets.load_dataset(str(ws / "dataset"), "people", split="test")
    assert len(ds) == 7
    metas = [r["json"] for r in ds]
    assert {m["original_path"] for m in metas} == {  # relative to the import: no local folder names
        "clock/0.jpg", "clock/1.jpg", "clock/2.jpg", "rabbit/0.jpg", "rabbit/1.jpg", "rabbit/2.jpg", "rabbit/3.png"}
    for row, m in zip(ds, metas, strict=True):
        assert m["source"] == "people" and m["builder"] == "recognition" and len(m["original_sha256"]) == 64
        assert ds.features["cls"].int2str(row["cls"]) == m["label"]
        # the paper's rule on the label names: 332 "Angora" (lemmas "Angora, Angora rabbit") is no rabbit by name
        assert m["imagenet_ids"] == ([409, 530, 892] if m["label"] == "clock" else [330, 331])
    # an imported JPEG keeps its original bytes
    clock0 = next(r for r in ds if r["json"]["original_path"] == "clock/0.jpg")
    import hashlib

    from gensets.shards import iter_shard

    stored = [d for p in sorted((ws / "dataset" / "people").glob("*.tar")) for d in iter_shard(p)
              if d["__key__"] == clock0["__key__"]][0]["jpg"]
    assert hashlib.sha256(stored).hexdigest() == clock0["json"]["original_sha256"]
    skipped_db = query(ws / "state.duckdb", "SELECT count(*) AS n FROM skipped")
    assert skipped_db == [{"n": 3}]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """configs/recognition.smoke.yaml built and finalized once: 4 categories x 3 images x 2 configs."""
    ws = tmp_path_factory.mktemp("smoke") / "ws"
    run_cli("build", ROOT / "configs" / "recognition.smoke.yaml", "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, check=0)
    return ws


@pytest.mark.slow
def test_report_equals_sql_over_predictions(smoke, tmp_path):
    ws = smoke
    db = tmp_path / "r.duckdb"
    wall_clock, hare, pizza = 892, 331, 963
    models = ["tiny:resnet", fixed_classifier(tmp_path / "clock", [wall_clock, pizza]),
              fixed_classifier(tmp_path / "hare", [hare, wall_clock])]
    run_cli("eval", ws, *[a for m in models for a in ("--model", m)], "--db", db, "--protocol", "wordset",
            "--quiet", check=0)
    out = tmp_path / "report"
    run_cli("report", "recognition", "--db", db, "--out", out, check=0)
    md = (out / "report.md").read_text()
    for png in ("per_model.png", "best_per_category.png", "all_fail_all_succeed.png", "images_per_category.png",
                "per_model_category.png"):
        assert (out / png).stat().st_size > 1000 and png in md

    from gensets.papers.borji.recognition_report import compute

    rep = compute(db)
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(rep))
    # per model, over images: the same numbers from a differently written query
    rows = query(db, """SELECT r.model, r.config, sum(CASE WHEN correct1 THEN 1 ELSE 0 END) / count(*) AS top1,
                               sum(CASE WHEN correct5 THEN 1 ELSE 0 END) / count(*) AS top5
                        FROM predictions JOIN runs r USING (run_id) GROUP BY 1, 2""")
    got = {(r["model"], r["config"]): (r["top1_images"], r["top5_images"]) for r in rep["per_model"]}
    assert got == {(r["model"], r["config"]): (pytest.approx(r["top1"]), pytest.approx(r["top5"])) for r in rows}
    # per model, over categories (the default): the runner's mean_per_class metric (numpy, gensets.metrics)
    mpc = query(db, """SELECT r.model, r.config, m.value FROM metrics m JOIN runs r USING (run_id)
                       WHERE m.name = 'mean_per_class'""")
    got = {(r["model"], r["config"]): r["top1"] for r in rep["per_model"]}
    assert got == {(r["model"], r["config"]): pytest.approx(r["value"]) for r in mpc}
    by_cat = {r["category"]: r for r in rep["per_category"]}
    # the fixed models: clock images hit by the "wall clock" model only at top-1; rabbit by the "hare" model
    assert by_cat["clock"]["best_top1"] == 1.0 and by_cat["rabbit"]["best_top1"] == 1.0
    assert by_cat["pizza"]["best_top1"] == 0.0 and by_cat["umbrella"]["best_top1"] == 0.0
    for cat in ("clock", "rabbit", "pizza", "umbrella"):
        assert by_cat[cat]["images"] == 6 and by_cat[cat]["models"] == 3
    # all-fail / all-succeed from per-image counts of correct models, at top-1 and top-5
    counts = query(db, """SELECT p.target, p.key, sum(p.correct1::INT) AS ok1, sum(p.correct5::INT) AS ok5,
                                 count(*) AS m FROM predictions p GROUP BY ALL""")
    names = ["clock", "rabbit", "pizza", "umbrella"]
    for cat_index, cat in enumerate(names):
        mine = [c for c in counts if c["target"] == cat_index]
        for k in (1, 5):
            assert by_cat[cat][f"all_fail_top{k}"] == pytest.approx(sum(c[f"ok{k}"] == 0 for c in mine) / len(mine))
            assert by_cat[cat][f"all_succeed_top{k}"] == pytest.approx(
                sum(c[f"ok{k}"] == c["m"] for c in mine) / len(mine))
    # pizza is the clock model's second guess: every model fails it at top-1, not at top-5
    assert by_cat["pizza"]["all_fail_top1"] == 1.0 and by_cat["pizza"]["all_fail_top5"] == 0.0
    assert by_cat["clock"]["all_fail_top1"] == 0.0
    assert "| clock | 6 |" in md
    # the per-model x per-category table (top-1 and top-5) is SQL over predictions too
    cells = query(db, """SELECT r.model, r.config, p.target, avg(p.correct1::INT) AS t1, avg(p.correct5::INT) AS t5
                         FROM predictions p JOIN runs r USING (run_id) GROUP BY ALL""")
    got = {(r["model"], r["config"], r["category"]): (r["top1"], r["top5"]) for r in rep["per_model_category"]}
    assert got == {(c["model"], c["config"], names[c["target"]]): (pytest.approx(c["t1"]), pytest.approx(c["t5"]))
                   for c in cells}
    assert "## Per model and category, top-1" in md and "| model | clock | rabbit | pizza | umbrella |" in md
    # every number is named: the protocol's rule, the averages, and the published numbers with their source
    assert "protocol `wordset` (Borji 2022's rule" in md and "mean over categories" in md
    assert "about 60.0" in md and "about 80.0" in md and "arXiv:2208.10760" in md
    assert [(p["quantity"], p["value"]) for p in rep["published"]["numbers"]] == [("top1", 0.60), ("top5", 0.80)]
    # the smoke build's images are not the paper's and its models are not the paper's best: every model's number is
    # shown beside the paper's, never differenced nor judged (gensets.compare)
    rows = rep["published"]["rows"]
    assert {r["metric"] for r in rows} == {"top1", "top5"} and len(rows) == 2 * len(models)
    assert all(r["difference"] is None and r["comparison"]["text"].startswith("not comparable: ") for r in rows)
    assert "| consistent" not in md and "| differs" not in md


@pytest.mark.slow
def test_torchvision_model_scores_the_smoke_set_through_eval(smoke, tmp_path):
    """tiny:torchvision-googlenet (torchvision's GoogLeNet, random weights in the torch hub checkpoint of
    googlenet@IMAGENET1K_V1) through `gensets eval`: the run rows name the protocol, the predictions are what
    torchvision's googlenet gives on the decoded images, the targets are the word sets by hand."""
    import torch
    import torchvision
    from torchvision.models import GoogLeNet_Weights

    from gensets.images import decode_image
    from gensets.models import tiny_path
    from gensets.shards import iter_shard

    db = tmp_path / "r.duckdb"
    r = run_cli("eval", smoke, "--model", "tiny:torchvision-googlenet", "--db", db, "--protocol", "wordset")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "allow_pickle" in r.stderr, r.stderr
    res = json.loads(run_cli("eval", smoke, "--model", "tiny:torchvision-googlenet", "--allow-pickle", "--db", db,
                             "--protocol", "wordset", "--json", "--quiet", check=0).stdout)
    assert [(x["model"], x["config"], x["protocol"], x["n"]) for x in res] == [
        ("tiny:torchvision-googlenet", "sd_2_steps", "wordset", 12), ("tiny:torchvision-googlenet", "sd_4_steps",
                                                                      "wordset", 12)]
    # the word sets over the names of the model's ImageNet-1k labels (the first lemma: the paper's rule), by hand:
    # clock -> analog / digital / wall clock; rabbit -> "wood rabbit", "hare" (synonym); not 332 "Angora"
    expected = {0: [409, 530, 892], 1: [330, 331], 2: [963], 3: [879]}
    preds = query(db, "SELECT key, target, target_ids, top5, correct1, correct5 FROM predictions ORDER BY key")
    assert len(preds) == 24
    for p in preds:
        assert p["target_ids"] == expected[p["target"]]
        assert p["correct1"] == (p["top5"][0] in p["target_ids"])
        assert p["correct5"] == any(i in p["target_ids"] for i in p["top5"])
    # an independent reading of the same checkpoint: torchvision's GoogLeNet built by hand (the arguments its
    # builder uses for these weights), the checkpoint loaded by hand, the weights' own transforms
    weights = GoogLeNet_Weights.IMAGENET1K_V1
    model = torchvision.models.GoogLeNet(num_classes=1000, aux_logits=True, transform_input=True, init_weights=False)
    model.load_state_dict(torch.load(tiny_path("torchvision-googlenet") / "hub" / "checkpoints" /
                                     "googlenet-1378be20.pth", weights_only=True))
    model.aux_logits, model.aux1, model.aux2 = False, None, None
    model.eval()
    samples = {d["__key__"]: d for f in sorted((smoke / "dataset").rglob("*.tar")) for d in iter_shard(f)}
    for p in preds[:4]:
        image = decode_image(samples[p["key"]]["jpg"]).convert("RGB")
        with torch.inference_mode():
            logits = model(weights.transforms()(image)[None])
        assert p["top5"] == logits.topk(5).indices[0].tolist(), p["key"]


def test_per_category_and_per_image_means_differ_by_hand(tmp_path):
    """One model, 2 cat images (both right) and 4 dog images (1 right): over categories (Borji's averaging, the
    default) (2/2 + 1/4) / 2 = 0.625; over images 3/6 = 0.5."""
    from gensets.papers.borji.recognition_report import compute

    _scored(tmp_path / "r.duckdb", [[1, 1, 1, 0, 0, 0]], [0, 0, 1, 1, 1, 1], ["cat", "dog"])
    (row,) = compute(tmp_path / "r.duckdb")["per_model"]
    assert (row["n"], row["categories"]) == (6, 2)
    assert row["top1"] == pytest.approx(0.625) and row["top1_images"] == pytest.approx(0.5)
    cells = {r["category"]: (r["n"], r["hits1"], r["top1"]) for r in compute(tmp_path / "r.duckdb")["per_model_category"]}
    assert cells == {"cat": (2, 2, 1.0), "dog": (4, 1, 0.25)}
    # the 95% interval over images of the mean over categories: each category resampled on its own; cat's two
    # images are both right, so every resample's mean is (1 + dog's resampled accuracy) / 2: between 0.5 and 1
    from gensets import metrics as M

    assert row["top1_interval"] == pytest.approx(M.mean_of_groups_ci([[1, 1], [1, 0, 0, 0]]), abs=1e-12)
    lo, hi = row["top1_interval"]
    assert 0.5 <= lo <= 0.625 <= hi <= 1.0 and lo < hi
    assert row["top5_interval"] == pytest.approx(M.mean_of_groups_ci([[1, 1], [1, 0, 0, 0]]), abs=1e-12)
    # one image in a category: no interval (scipy resamples two or more)
    _scored(tmp_path / "one.duckdb", [[1, 0, 1]], [0, 1, 1], ["cat", "dog"])
    (one,) = compute(tmp_path / "one.duckdb")["per_model"]
    assert one["top1_interval"] is None and one["top5_interval"] is None


def test_mean_of_groups_interval_is_imagenet_ds_mean_of_subsets_reading():
    """gensets.metrics.mean_of_groups_ci calls scipy as ImageNet-D's mean-of-subsets interval does: the same
    interval for the same groups; constant groups give the mean at both ends."""
    from gensets import metrics as M
    from gensets.papers.imagenet_d.report import intervals

    by = {"background": [True, False, True, True], "texture": [False, False, True], "material": [True, False]}
    assert M.mean_of_groups_ci(list(by.values())) == pytest.approx(intervals(by)["mean"], abs=0)
    assert M.mean_of_groups_ci([[1, 1], [0, 0, 0]]) == pytest.approx((0.5, 0.5))
    assert M.mean_of_groups_ci([[1, 1], [0]]) is None and M.mean_of_groups_ci([]) is None


@pytest.mark.slow
def test_wordset_variants_differ_through_eval(tmp_path):
    """By hand. The model ranks 837 "sunglasses, dark glasses, shades" first, 33 "loggerhead, loggerhead turtle,
    Caretta caretta" second, then tench, goldfish, great white shark; 2 images of "sunglass", 2 of "turtle".

    - wordset (the paper's rule: label names "sunglasses", "loggerhead"; rabbit ~ hare only): sunglass misses
      ("sunglasses" is not "sunglass"), turtle misses ("loggerhead"): top-1 0, top-5 0.
    - wordset-plural (names, s/es optional): sunglass hits at rank 1, turtle misses: 0.5, 0.5.
    - wordset-lemmas (whole lemma lists): sunglass misses, turtle hits "loggerhead turtle" at rank 2: 0, 0.5.
    - wordset-gensets (lemma lists + sunglass -> sunglasses): both categories hit, turtle at rank 2: 0.5, 1.0.
    """
    from .test_eval import _wordset_folder

    folder = _wordset_folder(tmp_path, ["sunglass", "turtle"])  # 4 images: sunglass, turtle, sunglass, turtle
    spec = fixed_classifier(tmp_path / "m", [837, 33, 0, 1, 2])
    db = tmp_path / "r.duckdb"
    got = {}
    protocols = ("wordset", "wordset-plural", "wordset-lemmas", "wordset-gensets")
    for protocol in protocols:
        (row,) = json.loads(run_cli("eval", folder, "--model", spec, "--db", db, "--protocol", protocol, "--json",
                                    "--quiet", check=0).stdout)
        got[row["protocol"]] = (row["metrics"]["top1"], row["metrics"]["top5"])
    assert got == {"wordset": (0.0, 0.0), "wordset-plural": (0.5, 0.5), "wordset-lemmas": (0.0, 0.5),
                   "wordset-gensets": (0.5, 1.0)}
    assert query(db, "SELECT protocol FROM runs ORDER BY 1") == [{"protocol": p} for p in sorted(protocols)]
    # the report is per protocol and says which rule
    run_cli("report", "recognition", "--db", db, "--protocol", "wordset-plural", "--out", tmp_path / "rep", check=0)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "protocol `wordset-plural` (gensets' lenient reading" in md and "| sunglass | 2 |" in md
    run_cli("report", "recognition", "--db", db, "--protocol", "wordset", "--out", tmp_path / "rep0", check=0)
    assert "label's name" in (tmp_path / "rep0" / "report.md").read_text()


def _dataset_samples(ws, config):
    from gensets.shards import iter_shard

    return {d["__key__"]: d for p in sorted((ws / "dataset" / config).glob("*.tar")) for d in iter_shard(p)}


def test_duplicates_and_loose_files_are_skipped_with_their_reason(tmp_path):
    root = tmp_path / "collected"
    (root / "clock").mkdir(parents=True)
    _photo(1).save(root / "clock" / "a.jpg", quality=90)
    (root / "clock" / "b.jpg").write_bytes((root / "clock" / "a.jpg").read_bytes())  # the same file twice
    _photo(2).save(root / "clock" / "c.jpg", quality=90)
    _photo(3).save(root / "loose.jpg", quality=90)  # no category folder
    # a JSONL whose keys collide after slug(): "My Clock" and "my-clock" are both my_clock
    rows = [{"path": "collected/clock/a.jpg", "category": "clock", "key": "My Clock"},
            {"path": "collected/clock/c.jpg", "category": "clock", "key": "my-clock"}]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "rec.yaml"
    cfg.write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock"],
                                   "imports": [{"path": "collected", "source": "people"},
                                               {"path": "list.jsonl", "name": "listed"}]}))
    ws = tmp_path / "ws"
    r = run_cli("build", cfg, "--out", ws, "--quiet")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    skipped = sorted(line for line in r.stderr.splitlines() if line.startswith("skipped "))
    # files are named relative to the config, never by this machine's absolute path
    assert skipped == ["skipped collected/clock/b.jpg: duplicate of collected/clock/a.jpg",
                       "skipped collected/clock/c.jpg: key 'my_clock' is already used by collected/clock/a.jpg",
                       "skipped collected/loose.jpg: not in a category folder (put it in <import>/<category>/)"]
    run_cli("finalize", ws, check=0)
    people, listed = _dataset_samples(ws, "people"), _dataset_samples(ws, "listed")
    assert len(people) == 2 and list(listed) == ["my_clock"]
    for key, d in (*people.items(), *listed.items()):
        meta = json.loads(d["json"])
        assert meta["key"] == key  # the slugged key, as in __key__
    assert json.loads(listed["my_clock"]["json"])["original_path"] == "collected/clock/a.jpg"


def test_published_jpeg_has_no_exif_and_keeps_the_original_hash(tmp_path):
    root = tmp_path / "collected"
    (root / "clock").mkdir(parents=True)
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif[0x8825] = {1: "N", 2: (52.0, 31.0, 12.0), 3: "E", 4: (13.0, 24.0, 36.0)}  # GPS IFD
    _photo(5).save(root / "clock" / "gps.jpg", quality=90, exif=exif)
    assert Image.open(root / "clock" / "gps.jpg").getexif().get_ifd(0x8825)  # the file does carry GPS
    cfg = tmp_path / "rec.yaml"
    cfg.write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock"],
                                   "imports": [{"path": str(root), "source": "people"}]}))
    ws = tmp_path / "ws"
    run_cli("build", cfg, "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, check=0)
    (d,) = _dataset_samples(ws, "people").values()
    meta = json.loads(d["json"])
    import hashlib
    import io

    assert meta["original_sha256"] == hashlib.sha256((root / "clock" / "gps.jpg").read_bytes()).hexdigest()
    assert meta["original_path"] == "clock/gps.jpg"
    published = Image.open(io.BytesIO(d["jpg"]))
    assert published.format == "JPEG" and "exif" not in published.info and not published.getexif()
    assert b"PhoneMaker" not in d["jpg"] and published.size == (48, 40)


def test_pixel_limit_is_read_from_the_header(tmp_path):
    from gensets.sources.imports import Skip, load_checked

    Image.new("RGB", (100, 100)).save(tmp_path / "big.png")
    before = Image.MAX_IMAGE_PIXELS
    with pytest.raises(Skip, match=r"^decompression bomb: 100x100 = 10000 pixels is over the limit of 9999$"):
        load_checked(str(tmp_path / "big.png"), 9999, "png", 95)
    data, rgb = load_checked(str(tmp_path / "big.png"), 10000, "png", 95)
    assert rgb.size == (100, 100) and data == (tmp_path / "big.png").read_bytes()  # clean png: bytes kept
    assert Image.MAX_IMAGE_PIXELS == before


def test_csv_rows_with_quoted_newlines_keep_their_line_numbers(tmp_path):
    from gensets.errors import ConfigError
    from gensets.sources.imports import list_items

    (tmp_path / "a.jpg").write_bytes(b"")
    # a column gensets does not read may hold a quoted newline (category, source and key may not: test_hostile2)
    text = 'path,category,source,note\na.jpg,clock,x,"two\nlines"\na.jpg,clock,y,z\n,clock,x,z\n'
    (tmp_path / "list.csv").write_text(text)
    with pytest.raises(ConfigError, match=r"list\.csv:5: each row needs 'path' \(a string\) and 'category'"):
        list_items(tmp_path / "list.csv", None)
    (tmp_path / "list.csv").write_text(text.rsplit(",clock,x,z\n", 1)[0])
    items = list_items(tmp_path / "list.csv", None)
    assert [(i.source, i.rel) for i in items] == [("x", "a.jpg"), ("y", "a.jpg")]
    (tmp_path / "list.csv").write_text('path,category,source\na.jpg,clock,"two\nlines"\n')
    with pytest.raises(ConfigError, match=r"list\.csv:2: source: control character U\+000A"):
        list_items(tmp_path / "list.csv", None)


@pytest.mark.slow
def test_config_synonym_counts_under_the_wordset_protocol(tmp_path):
    """"hourglass" is a synonym of clock only in this config: a model that says hourglass is right."""
    root = tmp_path / "collected"
    (root / "clock").mkdir(parents=True)
    for i in range(3):
        _photo(10 + i).save(root / "clock" / f"{i}.jpg", quality=90)
    cfg = tmp_path / "rec.yaml"
    cfg.write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock", "rabbit"],
                                   "synonyms": {"clock": ["hourglass"]},
                                   "imports": [{"path": str(root), "source": "people"}]}))
    ws = tmp_path / "ws"
    run_cli("build", cfg, "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, check=0)
    hourglass = 604
    spec = fixed_classifier(tmp_path / "hourglass", [hourglass])
    res = json.loads(run_cli("eval", ws, "--model", spec, "--protocol", "wordset", "--db", tmp_path / "r.duckdb",
                             "--json", check=0).stdout)
    assert [(r["protocol"], r["n"], r["metrics"]["top1"]) for r in res] == [("wordset", 3, 1.0)]
    assert query(tmp_path / "r.duckdb", "SELECT DISTINCT target_ids FROM predictions") == [
        {"target_ids": [409, 530, 604, 892]}]


def test_report_counts_one_revision(tmp_path):
    """A rebuilt and re-scored set: the report shows the latest revision only, or the one asked for."""
    import datetime as dt

    from gensets.evaluation import store
    from gensets.papers.borji.recognition_report import compute

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    for rev, hour, correct in (("old", 1, [True, True]), ("new", 2, [False, True])):
        run = {"dataset": "out/recognition", "dataset_revision": rev, "config": "sd", "split": "test",
               "model": "m", "model_id": "m", "model_revision": None, "protocol": "wordset", "label_space": "x",
               "n": 2, "started": dt.datetime(2024, 1, 1, hour), "finished": dt.datetime(2024, 1, 1, hour, 30),
               "seconds": 1.0, "images_per_second": 2.0, "versions": {},
               "class_names": ["clock", "rabbit"] if rev == "new" else ["clock (old)", "rabbit (old)"]}
        preds = [{"key": f"k{i}", "target": i, "target_ids": [i], "top5": [i], "scores": [1.0], "correct1": c,
                  "correct5": c} for i, c in enumerate(correct)]
        store.write_run(con, run, preds, [])
    con.close()
    latest = compute(db)
    assert latest["revision"] == "new"
    assert [(r["model"], r["n"], r["top1"]) for r in latest["per_model"]] == [("m", 2, 0.5)]
    assert [(r["category"], r["images"], r["all_fail_top1"]) for r in latest["per_category"]] == [
        ("clock", 1, 1.0), ("rabbit", 1, 0.0)]
    old = compute(db, revision="old")
    assert [(r["model"], r["n"], r["top1"]) for r in old["per_model"]] == [("m", 2, 1.0)]
    assert [r["category"] for r in old["per_category"]] == ["clock (old)", "rabbit (old)"]
    from gensets.errors import GensetsError

    with pytest.raises(GensetsError, match="revisions: new, old"):
        compute(db, revision="nope")


def _scored(db, correct, targets, class_names, keys=None, correct5=None):
    """One wordset run per row of ``correct`` (models x images; ``correct5`` the same at top-5, default the
    top-1 values) in a results database, as gensets eval writes it."""
    from gensets.evaluation import store

    con = store.connect(db)
    for m, row in enumerate(correct):
        ks = keys[m] if keys else [f"i{j:03d}" for j in range(len(row))]
        row5 = correct5[m] if correct5 else row
        preds = [{"key": k, "target": int(targets[int(k[1:])]), "target_ids": [int(targets[int(k[1:])])],
                  "top5": [0], "scores": [1.0], "correct1": bool(c), "correct5": bool(c5)}
                 for k, c, c5 in zip(ks, row, row5, strict=True)]
        store.write_run(con, {"dataset": "d", "dataset_revision": "b1", "config": "sd", "split": "test",
                              "model": f"m{m}", "protocol": "wordset", "n": len(preds), "class_names": class_names},
                        preds, [])
    con.close()


def test_report_all_fail_all_succeed_by_hand(tmp_path):
    from gensets.papers.borji.recognition_report import compute

    correct = [[1, 0, 0, 1, 1],
               [1, 0, 1, 1, 0],
               [1, 0, 0, 1, 1]]
    # per image: all right, all wrong, mixed, all right, mixed
    # cat (images 0, 1): all_fail 1/2, all_succeed 1/2; dog (2, 3, 4): all_fail 0, all_succeed 1/3
    correct5 = [[1, 1, 0, 1, 1],
                [1, 0, 1, 1, 1],
                [1, 1, 1, 1, 1]]
    # top-5, per image: all right, mixed, mixed, all right, all right
    # cat: all_fail 0, all_succeed 1/2; dog: all_fail 0, all_succeed 2/3
    _scored(tmp_path / "r.duckdb", correct, [0, 0, 1, 1, 1], ["cat", "dog"], correct5=correct5)
    got = [(r["category"], r["images"], r["all_fail_top1"], r["all_succeed_top1"], r["all_fail_top5"],
            r["all_succeed_top5"], r["models"]) for r in compute(tmp_path / "r.duckdb")["per_category"]]
    assert got == [("cat", 2, 0.5, 0.5, 0.0, 0.5, 3), ("dog", 3, 0.0, pytest.approx(1 / 3), 0.0, pytest.approx(2 / 3), 3)]
    # a fourth model that scored image 0 only (wrong): image 0 is no longer all right; cat counts its images
    # over the models that scored each one, and says the fewest
    _scored(tmp_path / "r2.duckdb", [*correct, [0]], [0, 0, 1, 1, 1], ["cat", "dog"],
            keys=[[f"i{j:03d}" for j in range(5)]] * 3 + [["i000"]])
    got = [(r["category"], r["all_fail_top1"], r["all_succeed_top1"], r["models"])
           for r in compute(tmp_path / "r2.duckdb")["per_category"]]
    assert got == [("cat", 0.5, 0.0, 3), ("dog", 0.0, pytest.approx(1 / 3), 3)]


def test_report_all_fail_all_succeed_against_a_loop(tmp_path):
    from gensets.papers.borji.recognition_report import compute

    rng = np.random.default_rng(13)
    correct = rng.random((4, 300)) < 0.7
    labels = rng.integers(0, 6, 300)
    _scored(tmp_path / "r.duckdb", correct.tolist(), labels, [f"c{i}" for i in range(6)])
    by_cat = {r["category"]: r for r in compute(tmp_path / "r.duckdb")["per_category"]}
    for lab in range(6):
        cols = [j for j in range(300) if labels[j] == lab]
        fail = sum(all(not correct[m, j] for m in range(4)) for j in cols) / len(cols)
        succeed = sum(all(correct[m, j] for m in range(4)) for j in cols) / len(cols)
        r = by_cat[f"c{lab}"]
        assert (r["images"], r["all_fail_top1"], r["all_succeed_top1"], r["models"]) == (
            len(cols), pytest.approx(fail), pytest.approx(succeed), 4)


def test_recognition_config_lists_the_papers_ten_classifiers_pinned():
    """configs/recognition.yaml carries Borji (2022)'s ten classifiers: eight torchvision weights (whose enum
    member names the weights file) and DeiT / ResNeXt-WSL from timm's Hub repos at a full commit; the
    leaderboard reads them from it and allows torchvision's pickle weights."""
    import re

    import timm
    from torchvision.models import get_model_weights

    from gensets.models.spec import parse_spec
    from gensets.workspace import load_build_config

    _, cfg = load_build_config(ROOT / "configs" / "recognition.yaml")
    specs = [parse_spec(m) for m in cfg.eval.models]
    assert [s.name for s in specs if s.kind == "torchvision"] == [
        "alexnet", "mobilenet_v2", "googlenet", "densenet161", "resnext101_32x8d", "resnet101", "resnet152",
        "inception_v3"]
    for s in specs:
        if s.kind == "torchvision":  # the weights exist in this torchvision (no download: the enum only)
            assert s.revision == "IMAGENET1K_V1" and get_model_weights(s.name)[s.revision].url.endswith(".pth")
    hub = [s for s in specs if s.kind == "timm"]
    assert [s.name for s in hub] == ["hf-hub:timm/deit_base_patch16_224.fb_in1k",
                                     "hf-hub:timm/resnext101_32x8d.fb_wsl_ig1b_ft_in1k"]
    assert all(re.fullmatch(r"[0-9a-f]{40}", s.revision) for s in hub)
    assert {s.name.removeprefix("hf-hub:timm/") for s in hub} <= set(timm.list_pretrained())
    assert len(specs) == 10
    board = yaml.safe_load((ROOT / "configs" / "leaderboard.recognition.yaml").read_text())
    assert board["models_from"] == {"config": "recognition.yaml", "protocol": "wordset", "allow_pickle": True}
    assert "models" not in board  # listed once


def test_jpeg_segments_pil_does_not_name_and_trailing_bytes_are_not_published(tmp_path):
    """A JPEG carrying an APPn segment PIL reports nowhere in `info` (a camera serial in APP4) and bytes
    after its end-of-image marker is re-encoded; a plain JFIF JPEG in the set's format is published as is."""
    import io

    from gensets.sources.imports import load_checked

    buf = io.BytesIO()
    _photo(7).save(buf, "JPEG", quality=90)
    plain = buf.getvalue()
    assert plain[:2] == b"\xff\xd8" and plain.endswith(b"\xff\xd9")
    segment = b"SECRET-SERIAL-123"
    app4 = b"\xff\xe4" + (len(segment) + 2).to_bytes(2, "big") + segment
    hostile = plain[:2] + app4 + plain[2:] + b"TRAILER-GPS"
    (tmp_path / "plain.jpg").write_bytes(plain)
    (tmp_path / "hostile.jpg").write_bytes(hostile)
    assert any(m == "APP4" for m, _ in Image.open(tmp_path / "hostile.jpg").applist)  # PIL reads past it
    data, _ = load_checked(str(tmp_path / "plain.jpg"), 10**6, "jpg", 95)
    assert data == plain
    data, rgb = load_checked(str(tmp_path / "hostile.jpg"), 10**6, "jpg", 95)
    assert b"SECRET-SERIAL" not in data and b"TRAILER-GPS" not in data and rgb.size == (48, 40)
    # a PNG is always re-encoded (losslessly): private chunks never pass through
    Image.open(io.BytesIO(plain)).save(tmp_path / "p.png")
    data, rgb = load_checked(str(tmp_path / "p.png"), 10**6, "png", 95)
    assert Image.open(io.BytesIO(data)).tobytes() == rgb.tobytes()


def test_bad_import_rows_and_pixel_limits_are_config_errors(tmp_path):
    (tmp_path / "list.jsonl").write_text('{"path": "a.jpg", "category": "clock"}\n{"path": 5, "category": "clock"}\n')
    cfg = tmp_path / "rec.yaml"
    cfg.write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock"],
                                   "imports": [{"path": "list.jsonl", "source": "people"}]}))
    r = run_cli("build", cfg, "--out", tmp_path / "ws", "--quiet")
    assert r.returncode == 2 and "list.jsonl:2: each row needs 'path' (a string)" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    hard = 2 * Image.MAX_IMAGE_PIXELS
    cfg.write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock"], "max_pixels": hard,
                                   "imports": [{"path": "list.jsonl", "source": "people"}]}))
    r = run_cli("build", cfg, "--out", tmp_path / "ws2", "--quiet")
    assert r.returncode == 2 and f"max_pixels: must be in 1..{hard - 1}" in r.stderr, r.stderr


def _copy_of_build(import_folder, where):
    """The same config (imports relative to it) and import folder, copied to ``where``."""
    import shutil

    shutil.copytree(import_folder, where / "collected")
    (where / "list.jsonl").write_text(json.dumps({"path": "collected/clock/1.jpg", "category": "clock",
                                                  "key": "listed clock"}) + "\n")
    (where / "rec.yaml").write_text(yaml.safe_dump({
        "builder": "recognition", "categories": ["clock", "rabbit"], "unit_size": 4,
        "imports": [{"path": "collected", "source": "people"}, {"path": "list.jsonl", "name": "listed"}]}))
    return where / "rec.yaml"


@pytest.mark.slow
def test_build_does_not_depend_on_where_its_files_lie(import_folder, tmp_path):
    from gensets.shards import iter_shard

    out = {}
    for d in ("here", "somewhere/else"):
        cfg = _copy_of_build(import_folder, tmp_path / d)
        ws = tmp_path / d / "ws"
        r = run_cli("build", cfg, "--out", ws, "--quiet", check=0)
        out[d] = (ws, sorted(line for line in r.stderr.splitlines() if line.startswith("skipped ")))
    (a, skipped_a), (b, skipped_b) = out.values()
    assert skipped_a == skipped_b and "skipped collected/clock/notes.jpg: not an image" in skipped_a
    header = (a / "config.yaml").read_text().splitlines()[0]  # names the build's fingerprint
    assert header == (b / "config.yaml").read_text().splitlines()[0]
    assert (a / "config.yaml").read_bytes() == (b / "config.yaml").read_bytes()
    assert (a / "candidates" / "manifest.jsonl").read_bytes() == (b / "candidates" / "manifest.jsonl").read_bytes()
    shards = sorted(p.name for p in (a / "candidates").glob("*.tar"))
    assert shards and shards == sorted(p.name for p in (b / "candidates").glob("*.tar"))
    for name in shards:
        assert (a / "candidates" / name).read_bytes() == (b / "candidates" / name).read_bytes()
    # finalize reads the frozen config and the candidates, never the imported files
    import shutil

    shutil.rmtree(tmp_path / "here" / "collected")
    (tmp_path / "here" / "list.jsonl").unlink()
    for ws in (a, b):
        run_cli("finalize", ws, check=0)
    files = sorted(p.relative_to(a).as_posix() for p in (a / "dataset").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b).as_posix() for p in (b / "dataset").rglob("*") if p.is_file())
    for f in files:
        if f.endswith(".tar"):
            assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert len(list(iter_shard(next((a / "dataset" / "listed").glob("*.tar"))))) == 1
    texts = [a / "config.yaml", a / "candidates" / "manifest.jsonl", a / "dataset" / "README.md",
             *(a / "candidates").glob("*.tar"), *(a / "dataset").rglob("*.tar")]
    for p in texts:
        assert str(tmp_path).encode() not in p.read_bytes(), p


def test_a_file_changed_after_planning_is_a_one_line_error(tmp_path):
    from gensets.errors import DataError
    from gensets.papers.borji.recognition import Context, plan, run_unit
    from gensets.workspace import load_build_config

    (tmp_path / "collected" / "clock").mkdir(parents=True)
    _photo(1).save(tmp_path / "collected" / "clock" / "a.jpg", quality=90)
    (tmp_path / "rec.yaml").write_text(yaml.safe_dump({"builder": "recognition", "categories": ["clock"],
                                                       "imports": [{"path": "collected"}]}))
    _, cfg = load_build_config(tmp_path / "rec.yaml")
    assert cfg.imports[0].path == "collected" and cfg.base_dir == tmp_path
    (unit,) = plan(cfg)
    assert str(tmp_path) not in json.dumps(unit.payload)
    ctx = Context(cfg)
    ctx.skipped = []
    assert len(run_unit(unit, ctx, "b")) == 1
    _photo(2).save(tmp_path / "collected" / "clock" / "a.jpg", quality=90)
    with pytest.raises(DataError, match=r"^collected/clock/a\.jpg: the file changed since the build was planned"):
        run_unit(unit, Context(cfg), "b")


def test_report_counts_runs_of_one_precision(tmp_path):
    """A model scored in fp32 and again under bf16 autocast: two runs (their ids differ), and the report counts
    the runs of one precision (fp32 by default), never both: by hand, m's fp32 run is right on 2 of 2 images,
    its bf16 run on 1 of 2; counted together the report would say 4 images and 3/4."""
    from gensets.errors import GensetsError
    from gensets.evaluation import store
    from gensets.papers.borji.recognition_report import compute

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    for precision, correct in (("fp32", [True, True]), ("bf16", [True, False])):
        preds = [{"key": f"k{i}", "target": i, "target_ids": [i], "top5": [i], "scores": [1.0], "correct1": c,
                  "correct5": c} for i, c in enumerate(correct)]
        store.write_run(con, {"dataset": "d", "dataset_revision": "b1", "config": "sd", "split": "test",
                              "model": "m", "protocol": "wordset", "n": 2, "class_names": ["cat", "dog"],
                              "precision": precision}, preds, [])
    con.close()
    assert [(r["n"], r["top1"]) for r in compute(db)["per_model"]] == [(2, 1.0)]
    rep = compute(db, precision="bf16")
    assert (rep["precision"], [(r["n"], r["top1"]) for r in rep["per_model"]]) == ("bf16", [(2, 0.5)])
    with pytest.raises(GensetsError, match="no fp16 runs"):
        compute(db, precision="fp16")
