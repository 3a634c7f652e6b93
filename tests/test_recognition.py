"""Recognition sets (Borji 2022): import with corrupt-file skipping, generate, score, report."""


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
    assert "huge.png: decompression bomb: 20000x20000" in huge
    run_cli("finalize", ws, check=0)
    import datasets

    ds = datasets.load_dataset(str(ws / "dataset"), "people", split="test")
    assert len(ds) == 7
    metas = [r["json"] for r in ds]
    assert {m["original_path"].split("collected/")[1] for m in metas} == {
        "clock/0.jpg", "clock/1.jpg", "clock/2.jpg", "rabbit/0.jpg", "rabbit/1.jpg", "rabbit/2.jpg", "rabbit/3.png"}
    for row, m in zip(ds, metas, strict=True):
        assert m["source"] == "people" and m["builder"] == "recognition" and len(m["original_sha256"]) == 64
        assert ds.features["cls"].int2str(row["cls"]) == m["label"]
        assert m["imagenet_ids"] == ([409, 530, 892] if m["label"] == "clock" else [330, 331, 332])
    # an imported JPEG keeps its original bytes
    clock0 = next(r for r in ds if r["json"]["original_path"].endswith("clock/0.jpg"))
    import hashlib

    from gensets.shards import iter_shard

    stored = [d for p in sorted((ws / "dataset" / "people").glob("*.tar")) for d in iter_shard(p)
              if d["__key__"] == clock0["__key__"]][0]["jpg"]
    assert hashlib.sha256(stored).hexdigest() == clock0["json"]["original_sha256"]
    skipped_db = query(ws / "state.duckdb", "SELECT count(*) AS n FROM skipped")
    assert skipped_db == [{"n": 3}]


def test_report_equals_sql_over_predictions(tmp_path):
    ws = tmp_path / "ws"
    run_cli("build", ROOT / "configs" / "recognition.smoke.yaml", "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, check=0)
    db = tmp_path / "r.duckdb"
    wall_clock, hare, pizza = 892, 331, 963
    models = ["tiny:resnet", fixed_classifier(tmp_path / "clock", [wall_clock, pizza]),
              fixed_classifier(tmp_path / "hare", [hare, wall_clock])]
    run_cli("eval", ws, *[a for m in models for a in ("--model", m)], "--db", db, "--protocol", "wordset",
            "--quiet", check=0)
    out = tmp_path / "report"
    run_cli("report", "recognition", "--db", db, "--out", out, check=0)
    md = (out / "report.md").read_text()
    for png in ("per_model.png", "best_per_category.png", "all_fail_all_succeed.png", "images_per_category.png"):
        assert (out / png).stat().st_size > 1000 and png in md

    from gensets.evaluation.recognition_report import compute

    rep = compute(db)
    # per model: the same numbers from a differently written query
    rows = query(db, """SELECT r.model, r.config, sum(CASE WHEN correct1 THEN 1 ELSE 0 END) / count(*) AS top1,
                               sum(CASE WHEN correct5 THEN 1 ELSE 0 END) / count(*) AS top5
                        FROM predictions JOIN runs r USING (run_id) GROUP BY 1, 2""")
    got = {(r["model"], r["config"]): (r["top1"], r["top5"]) for r in rep["per_model"]}
    assert got == {(r["model"], r["config"]): (pytest.approx(r["top1"]), pytest.approx(r["top5"])) for r in rows}
    by_cat = {r["category"]: r for r in rep["per_category"]}
    # the fixed models: clock images hit by the "wall clock" model only at top-1; rabbit by the "hare" model
    assert by_cat["clock"]["best_top1"] == 1.0 and by_cat["rabbit"]["best_top1"] == 1.0
    assert by_cat["pizza"]["best_top1"] == 0.0 and by_cat["umbrella"]["best_top1"] == 0.0
    for cat in ("clock", "rabbit", "pizza", "umbrella"):
        assert by_cat[cat]["images"] == 6 and by_cat[cat]["models"] == 3
    # all-fail / all-succeed from per-image counts of correct models
    counts = query(db, """SELECT p.target, p.key, sum(p.correct1::INT) AS ok, count(*) AS m
                          FROM predictions p GROUP BY ALL""")
    names = ["clock", "rabbit", "pizza", "umbrella"]
    for cat_index, cat in enumerate(names):
        mine = [c for c in counts if c["target"] == cat_index]
        assert by_cat[cat]["all_fail"] == pytest.approx(sum(c["ok"] == 0 for c in mine) / len(mine))
        assert by_cat[cat]["all_succeed"] == pytest.approx(sum(c["ok"] == c["m"] for c in mine) / len(mine))
    assert by_cat["pizza"]["all_fail"] == 1.0 and by_cat["clock"]["all_fail"] == 0.0
    assert "| clock | 6 |" in md
