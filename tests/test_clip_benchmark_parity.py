"""gensets eval's zero-shot protocol against clip_benchmark 1.6.2, image by image.

The same webp shards (clip_benchmark's wds layout, also a gensets card folder), the same random
open_clip ``local-dir:`` model built from a config and the same single template
"a photo of a {c}." on both sides (clip_benchmark's templates file, gensets' ``--template``), fp32 (clip_benchmark's --no_amp), the same batch size.

clip_benchmark runs in its own venv (tests/clip_benchmark_env.py: numpy<2.4, gensets' torch). Its CLI
writes no per-image predictions, so a driver runs its own ``build_dataset`` loader,
``zero_shot_classifier`` and ``run_classification`` and dumps them; the CLI itself runs too, and its
accuracy must be the driver's. gensets runs as a user runs it: ``gensets eval`` into DuckDB.

The test skips only when pip cannot install clip_benchmark, and fails then if GENSETS_REQUIRE_PARITY=1. The environment is built once (~15 s) and
reused: $GENSETS_CLIP_BENCHMARK_VENV, else the gensets cache as it was before the test session
redirected it (~/.cache/gensets by default).
"""

import json
import os
from pathlib import Path

import pytest

from . import clip_benchmark_env as cbe
from .conftest import run_cli

pytestmark = pytest.mark.slow  # `make test-slow` and CI: clip_benchmark's own run in its side venv

# captured at import, before conftest's session fixture points GENSETS_CACHE at a temp folder
_USER_CACHE = os.environ.get("GENSETS_CACHE") or str(Path.home() / ".cache" / "gensets")

# No '_' in these names: gensets' readable() prompts "a_b" as "a b", clip_benchmark as written.
CLASSES = ["tench", "goldfish", "church", "parachute"]
TEMPLATE = "a photo of a {c}."  # clip_benchmark's templates file; gensets eval --template takes {c} too
N, SHARDS, BATCH = 40, 2, 16


@pytest.fixture(scope="module")
def cb_python():
    try:
        return cbe.ensure_env(cbe.default_dir(_USER_CACHE), log=lambda m: None)
    except cbe.Unavailable as e:
        if os.environ.get("GENSETS_REQUIRE_PARITY") == "1":  # CI: a missing parity check is a failure
            pytest.fail(f"GENSETS_REQUIRE_PARITY=1 but clip_benchmark cannot be installed here: {e}")
        pytest.skip(f"clip_benchmark cannot be installed here: {e}")


def _gensets_predictions(db: Path) -> dict[str, dict]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT key, target, top5, scores, correct1 FROM predictions").fetchall()
    finally:
        con.close()
    return {k: {"target": t, "pred": top5[0], "top5": top5, "scores": sc, "correct1": c}
            for k, t, top5, sc, c in rows}


def test_zero_shot_top1_matches_clip_benchmark_image_by_image(cb_python, tmp_path):
    images, labels = cbe.tinted_images(N, len(CLASSES), (48, 40), seed=0)
    root = cbe.write_dataset(tmp_path / "data" / "parity", images, labels, CLASSES, templates=[TEMPLATE],
                             shards=SHARDS)

    # a random tiny model; if it gives every image the same class, a differently seeded or bigger one
    for cfg, seed in [(cbe.TINY_CLIP, 0), (cbe.TINY_CLIP, 1), (cbe.SMALL_CLIP, 0)]:
        model = cbe.make_open_clip(tmp_path / f"clip-{cfg['embed_dim']}-{seed}", cfg, seed=seed)
        cb = cbe.run_driver(cb_python, {"mode": "predictions", "model": f"local-dir:{model}", "name": "parity",
                                        "root": str(root), "batch_size": BATCH, "shards": SHARDS}, tmp_path)
        if len(set(cb["pred"])) > 1:
            break
    assert len(set(cb["pred"])) > 1, f"every model predicts one class for all images: {cb['pred']}"
    assert cb["classes"] == CLASSES and cb["templates"] == [TEMPLATE]
    assert sorted(cb["keys"]) == [f"s{i:05d}" for i in range(N)]

    # clip_benchmark's CLI on the same data and model: the driver's accuracy is the CLI's
    out = tmp_path / "clip_benchmark.json"
    cbe.run_cli(cb_python, ["eval", "--task", "zeroshot_classification", "--model", f"local-dir:{model}",
                            "--pretrained", "none", "--dataset", "wds/parity", "--dataset_root", str(root),
                            "--no_amp", "--batch_size", str(BATCH), "--num_workers", "1",
                            "--output", str(out), "--quiet"], tmp_path)
    cli_metrics = json.loads(out.read_text())["metrics"]
    assert cli_metrics["acc1"] == pytest.approx(cb["acc1"])

    db = tmp_path / "results.duckdb"
    r = run_cli("eval", root, "--model", f"open_clip:local-dir:{model}", "--protocol", "zero-shot",
                "--template", TEMPLATE, "--db", db, "--batch-size", BATCH, "--json", check=0)
    res = json.loads(r.stdout)
    assert len(res) == 1 and res[0]["protocol"] == "zero-shot" and res[0]["n"] == N
    ours = _gensets_predictions(db)

    assert set(ours) == set(cb["keys"])
    mismatches = []
    for key, target, pred, probs in zip(cb["keys"], cb["target"], cb["pred"], cb["probs"], strict=True):
        g = ours[key]
        assert g["target"] == target, key
        if g["pred"] != pred:
            mismatches.append(f"{key}: gensets {g['pred']} clip_benchmark {pred} (probs {probs})")
        # the scores gensets stores are the softmax of the same logits
        for idx, score in zip(g["top5"], g["scores"], strict=True):
            assert score == pytest.approx(probs[idx], abs=1e-4), (key, idx)
    assert not mismatches, "top-1 differs:\n" + "\n".join(mismatches)

    ours_acc1 = sum(g["correct1"] for g in ours.values()) / N
    assert res[0]["metrics"]["top1"] == pytest.approx(ours_acc1)
    assert ours_acc1 == pytest.approx(cb["acc1"])
    print(f"\nparity on {N} images, model {model.name}: top-1 gensets {ours_acc1:.4f}, "
          f"clip_benchmark {cb['acc1']:.4f} (CLI {cli_metrics['acc1']:.4f}); "
          f"{len(set(cb['pred']))} distinct predicted classes")
