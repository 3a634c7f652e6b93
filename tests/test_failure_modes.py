"""Failure-mode discovery (Wiles et al. 2022): statistics, clustering, captioner, and whole builds.

Random tiny models fail almost everything and the tiny SD barely listens to its prompt, so the builds
here use two models made to fail by design, both loaded through the real library paths:
- a tiny SD whose cross-attention outputs are scaled x100 (`diffusers:<folder>`): images now depend on
  the prompt far more than on the seed;
- a timm ViT (one 32 px patch, no blocks, average pool: its features are a LayerNorm of a random
  projection of the image, so they have a fixed norm) whose head predicts tench when an image's features
  are close to those of "a realistic photograph of a tench" images (cosine above the 30th percentile of
  such images) and "toilet paper" otherwise; goldfish is never predicted, so that label fails always.
Images regenerated from any caption move away from the tench images: tench modes fail far more often
than tench's baseline (discovered), goldfish modes cannot beat a 100% baseline (not discovered).
"""

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gensets.curation import failure_modes as fm
from gensets.records import derive_seed

from .conftest import ROOT, run_cli

SMOKE = ROOT / "configs" / "failure_modes.smoke.yaml"
TENCH, GOLDFISH, DECOY = 0, 1, 999  # ImageNet indices; 999 is "toilet paper"
BASE_PROMPT = "a realistic photograph of a tench"


# ------------------------------------------------------------------ statistics on fixed counts
def test_fisher_one_sided_against_scipy_and_by_hand():
    from scipy.stats import fisher_exact

    # all 3 new images fail, none of 3 baseline ones: p = 1 / C(6, 3) = 0.05
    assert fm.fisher_greater(3, 3, 0, 3) == pytest.approx(0.05)
    # 16/16 vs 5/16: P(X >= 16) for X hypergeometric (32 images, 21 failures, 16 drawn)
    by_hand = math.comb(21, 16) * math.comb(11, 0) / math.comb(32, 16)
    assert fm.fisher_greater(16, 16, 5, 16) == pytest.approx(by_hand, rel=1e-12)
    # no evidence the other way round: p = 1 when the new rate is lower
    assert fm.fisher_greater(0, 10, 10, 10) == pytest.approx(1.0)
    for counts in [(7, 20, 3, 20), (12, 12, 3, 16), (5, 50, 5, 50), (0, 8, 8, 8), (30, 100, 12, 100)]:
        a, n1, b, n2 = counts
        want = fisher_exact([[a, n1 - a], [b, n2 - b]], alternative="greater").pvalue
        assert fm.fisher_greater(*counts) == pytest.approx(want, rel=1e-12)


def test_binomial_one_sided_against_scipy_and_by_hand():
    from scipy.stats import binomtest

    assert fm.binomial_greater(3, 3, 5, 10) == pytest.approx(0.125)  # 0.5 ** 3
    # P(X >= 2) for X ~ Bin(4, 0.25) = 1 - 0.75^4 - 4 * 0.25 * 0.75^3
    assert fm.binomial_greater(2, 4, 1, 4) == pytest.approx(1 - 0.75**4 - 4 * 0.25 * 0.75**3)
    assert fm.binomial_greater(1, 5, 0, 10) == pytest.approx(0.0)  # any failure against a rate of 0
    for a, n1, b, n2 in [(7, 20, 3, 20), (12, 12, 3, 16), (30, 100, 12, 100)]:
        assert fm.binomial_greater(a, n1, b, n2) == pytest.approx(
            binomtest(a, n1, b / n2, alternative="greater").pvalue, rel=1e-12)


def test_holm_and_benjamini_hochberg_by_hand_and_against_scipy():
    from scipy.stats import false_discovery_control

    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, 1*0.04 -> 0.02, 0.03, 0.06, 0.06 (monotone)
    assert fm.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert fm.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    # BH: sorted p * m / rank = 0.02, 0.02, 0.04, 0.04
    assert fm.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    rng = np.random.default_rng(0)
    for _ in range(5):
        ps = rng.uniform(0, 0.2, size=9)
        assert fm.benjamini_hochberg(ps) == pytest.approx(false_discovery_control(ps, method="bh"))
    assert fm.correct([], "holm") == []
    with pytest.raises(ValueError, match="unknown correction"):
        fm.correct([0.1], "bonferroni")


def test_compare_flags_the_modes_that_survive_the_correction():
    baseline = {"tench": {"n": 16, "failures": 3, "confusions": {999: 3}},
                "goldfish": {"n": 16, "failures": 16, "confusions": {0: 10, 999: 6}}}
    modes = [{"id": "tench_00", "label": "tench", "n": 12, "failures": 12, "confusion": 999, "confused": 12},
             {"id": "tench_01", "label": "tench", "n": 12, "failures": 5, "confusion": 999, "confused": 5},
             {"id": "goldfish_00", "label": "goldfish", "n": 12, "failures": 12, "confusion": 0, "confused": 2}]
    out = fm.compare(modes, baseline, test="fisher", correction="holm", alpha=0.05)
    p = [fm.fisher_greater(12, 12, 3, 16), fm.fisher_greater(5, 12, 3, 16), 1.0]
    assert [m["p_failure"] for m in out] == pytest.approx(p)
    assert [m["p_failure_adjusted"] for m in out] == pytest.approx(fm.holm(p))
    assert [m["discovered"] for m in out] == [True, False, False]
    assert out[2]["baseline_confused"] == 10 and out[2]["p_confusion"] == pytest.approx(
        fm.fisher_greater(2, 12, 10, 16))
    with pytest.raises(ValueError, match="failures <= n"):
        fm.fisher_greater(5, 4, 0, 4)


def test_with_top_k_2_only_failed_images_count_as_confusions():
    from gensets.builders.failure_modes import tally
    from gensets.labels.hits import hit

    def image(top5):  # a classified image of tench; with top_k = 2 it fails when tench is not in its top 2
        return {"kept": not hit(top5, [TENCH], 2), "surrogates": [{"top5": top5}]}

    regenerated = [image([DECOY, TENCH, 5, 6, 7]),    # top-1 toilet paper, but tench 2nd: did not fail
                   image([DECOY, GOLDFISH, 5, 6, 7]),  # failed, as toilet paper
                   image([GOLDFISH, DECOY, 5, 6, 7]),  # failed, as goldfish
                   image([TENCH, DECOY, 5, 6, 7])]     # right
    t = tally(regenerated)
    assert (t["n"], t["failures"], dict(t["confusions"])) == (4, 2, {DECOY: 1, GOLDFISH: 1})
    # a mode confused with toilet paper: 1 confused image of 4 (counting every top-1 would say 2)
    baseline = {"tench": tally([image([TENCH, DECOY, 1, 2, 3])] * 7 + [image([DECOY, 5, 1, 2, 3])])}
    mode = {"id": "tench_00", "label": "tench", "n": t["n"], "failures": t["failures"], "confusion": DECOY,
            "confused": t["confusions"][DECOY]}
    [out] = fm.compare([mode], baseline)
    assert out["confused"] == 1 and out["baseline_confused"] == 1
    assert out["p_confusion"] == pytest.approx(fm.fisher_greater(1, 4, 1, 8))


def test_transfer_counts_failures_at_the_builds_top_k(tmp_path):
    from gensets.evaluation import store
    from gensets.evaluation.reports.failure_modes import transfer

    def pred(key, top5):  # an image of tench scored by another classifier
        return {"key": key, "target": TENCH, "target_ids": [TENCH], "top5": top5, "scores": [0.2] * 5,
                "correct1": top5[0] == TENCH, "correct5": TENCH in top5}

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    store.write_run(con, {"dataset": "ws", "dataset_revision": "build-1", "config": "modes", "split": "test",
                          "model": "other", "protocol": "imagenet", "n": 4},
                    [pred("a", [0, 1, 2, 3, 4]), pred("b", [9, 0, 2, 3, 4]), pred("c", [9, 8, 0, 3, 4]),
                     pred("d", [9, 8, 7, 6, 5])], [])
    con.close()
    # a: never fails; b: fails at k = 1 only; c: at k <= 2; d: at any k
    assert [transfer(db, "build-1", "clf", k)[0]["failed"] for k in (1, 2, 3, 5)] == [3, 2, 1, 1]
    assert transfer(db, "build-1", "other", 2) == [
        {"model": "other", "config": "modes", "n": 4, "failed": 2, "transfer": 0.5, "under_test": True}]


def test_transfer_by_hand_with_several_target_ids(tmp_path):
    """Every image of the finalized set failed the classifier under test; transfer is the fraction another
    model fails too: none of an image's target ids among its top-k."""
    from gensets.evaluation import store
    from gensets.evaluation.reports.failure_modes import transfer

    def pred(key, top5, target_ids):
        return {"key": key, "target": 0, "target_ids": target_ids, "top5": top5, "scores": [0.2] * 5,
                "correct1": top5[0] in target_ids, "correct5": bool(set(top5) & set(target_ids))}

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    # images 0 and 2 fail the held-out model, image 1 does not: 2/3 at k = 1
    store.write_run(con, {"dataset": "ws", "dataset_revision": "build-1", "config": "modes", "split": "test",
                          "model": "held-out", "protocol": "imagenet", "n": 3},
                    [pred("a", [5, 6, 7, 8, 9], [0]), pred("b", [3, 6, 7, 8, 9], [2, 3]),
                     pred("c", [1, 2, 7, 8, 9], [0, 2])], [])
    # a: top-1 {1} misses {0, 2}, top-2 {1, 2} holds 2; b: its class 2 is 4th
    store.write_run(con, {"dataset": "ws", "dataset_revision": "build-1", "config": "modes", "split": "test",
                          "model": "other", "protocol": "imagenet", "n": 2},
                    [pred("a", [1, 2, 4, 5, 6], [0, 2]), pred("b", [0, 1, 3, 2, 5], [2])], [])
    con.close()
    assert transfer(db, "build-1", "clf", 1) == [
        {"model": "held-out", "config": "modes", "n": 3, "failed": 2, "transfer": pytest.approx(2 / 3),
         "under_test": False},
        {"model": "other", "config": "modes", "n": 2, "failed": 2, "transfer": 1.0, "under_test": False}]
    assert [t["failed"] for t in transfer(db, "build-1", "clf", 2)] == [1, 1]
    assert [t["failed"] for t in transfer(db, "build-1", "clf", 5)] == [1, 0]


# ------------------------------------------------------------------ clustering and medoids
def _blobs(seed=0):
    rng = np.random.default_rng(seed)
    centres = np.eye(3) * 5
    rows = [centres[i % 3] + rng.normal(0, 0.3, 3) for i in range(12)]
    return np.array(rows), [i % 3 for i in range(12)]


def test_silhouette_rule_finds_the_blobs_and_numbers_clusters_by_first_row():
    x, truth = _blobs()
    c = fm.cluster(x, max_k=6, seed=0)
    assert c.k == 3 and c.labels == truth  # rows 0, 1, 2 open clusters 0, 1, 2
    assert set(c.scores) == {2, 3, 4, 5, 6} and c.silhouette == max(c.scores.values())
    assert fm.cluster(x, max_k=6, seed=0) == c  # deterministic
    assert fm.cluster(x, max_k=2, seed=0).k == 2
    assert fm.cluster(x, max_k=6, min_silhouette=0.999).k == 1  # no k reaches the bar: one cluster
    assert fm.cluster(x[:2]).k == 1 and fm.cluster(x[:1]).labels == [0]  # fewer than 3 images
    assert fm.cluster(np.ones((5, 3))).k == 1  # identical images: one cluster
    with pytest.raises(ValueError, match="zero, NaN"):
        fm.cluster(np.zeros((4, 3)))


def test_medoid_and_most_common():
    x = np.array([[1.0, 0.0], [1.0, 0.1], [1.0, -0.1], [0.0, 1.0]])
    assert fm.medoid(x, [0, 1, 2]) == 0  # the middle direction
    assert fm.medoid(x, [1, 3]) == 1  # two members: a tie, the first one
    assert fm.most_common([5, 3, 3, 5, 1]) == 3 and fm.most_common([]) is None


# ------------------------------------------------------------------ the captioner
def test_tiny_captioner_is_deterministic_and_looks_at_the_image():
    from PIL import Image

    from gensets.errors import ModelError
    from gensets.models.captioner import load_captioner

    cap = load_captioner("tiny:blip-caption")
    assert cap.kind == "blip" and cap.model_id == "tiny:blip-caption"
    images = [Image.new("RGB", (64, 64), c) for c in ("red", "blue", "white")]
    first = cap.caption(images, max_new_tokens=8)
    assert first == cap.caption(images, max_new_tokens=8) == [cap.caption([im], max_new_tokens=8)[0] for im in images]
    assert len(set(first)) > 1 and all(first)
    assert all(c.startswith("a photo of") for c in cap.caption(images, prompt="a photo of", max_new_tokens=4))
    for spec in ("tiny:blip-vqa", "tiny:sd", "timm:resnet50"):
        with pytest.raises(ModelError, match="not a captioning model"):
            load_captioner(spec)


# ------------------------------------------------------------------ builds
def _prompt_sensitive_sd(folder: Path) -> str:
    import torch
    from diffusers import StableDiffusionPipeline

    from gensets.models import tiny_path

    pipe = StableDiffusionPipeline.from_pretrained(tiny_path("sd"), low_cpu_mem_usage=False)
    with torch.no_grad():
        for name, m in pipe.unet.named_modules():
            if name.endswith("attn2.to_out.0"):  # cross-attention: how much the prompt moves the image
                m.weight.mul_(100.0)
                m.bias.mul_(100.0)
    pipe.save_pretrained(folder, safe_serialization=True)
    return f"diffusers:{folder}"


def _tench_band_classifier(folder: Path, generator: str) -> str:
    import timm
    import torch

    from gensets.images import decode_image, encode_image
    from gensets.models import load_classifier, load_generator

    args = dict(img_size=32, patch_size=32, depth=0, embed_dim=256, num_heads=2, class_token=False,
                global_pool="avg")
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=1000, **args)
    timm.models.save_for_hf(model, str(folder), safe_serialization=True, model_args=args)
    clf, gen = load_classifier(f"timm:local-dir:{folder}"), load_generator(generator)

    def features(seeds):  # as the builder sees them: generated, stored as jpg, decoded
        images = gen.generate([BASE_PROMPT] * len(seeds), seeds, steps=2, width=64, height=64)
        return clf.embed(clf.preprocess([decode_image(encode_image(im, "jpg", 90)) for im in images])).double()

    centre = features(list(range(10_000, 10_016))).mean(0)
    centre = centre / centre.norm()
    threshold = torch.quantile(features(list(range(20_000, 20_016))) @ centre, 0.3)  # other seeds: unbiased
    head = model.get_classifier()
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-100.0)
        head.weight[TENCH] = (10 * centre).float()
        head.bias[TENCH] = float(-10 * threshold)
        head.bias[DECOY] = 0.0
    timm.models.save_for_hf(model, str(folder), safe_serialization=True, model_args=args)
    return f"timm:local-dir:{folder}"


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    import torch

    d = tmp_path_factory.mktemp("fm-models")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the builds run with one thread too (and several threads are slower here)
    try:
        generator = _prompt_sensitive_sd(d / "sd")
        classifier = _tench_band_classifier(d / "clf", generator)
    finally:
        torch.set_num_threads(threads)
    path = d / "failure_modes.yaml"
    path.write_text(f"""\
builder: failure-modes
name: failure-modes-test
classifier: "{classifier}"
labels: [tench, goldfish]
generator: {{model: "{generator}", steps: 2, width: 64, height: 64, batch_size: 8}}
embedder: tiny:clip
captioner: {{model: tiny:blip-caption, max_new_tokens: 12}}
images_per_label: 16
images_per_mode: 12
clustering: {{max_k: 3, min_size: 2}}
image: {{format: jpg, quality: 90}}
unit_size: 8
""")
    return path


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory):
    ws = tmp_path_factory.mktemp("fm-ref") / "ws"
    run_cli("build", config, "--out", ws, "--quiet", check=0)
    run_cli("report", "failure-modes", ws, "--out", ws / "report", check=0)
    return ws


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _shards(ws: Path) -> dict[str, str]:
    return {p.name: _digest(p) for p in sorted((ws / "candidates").glob("*.tar"))}


def _state(ws: Path, sql: str) -> list[tuple]:
    import duckdb

    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _samples(ws: Path) -> dict[str, tuple[str, dict]]:
    return {key: (config, json.loads(meta)) for key, config, meta in _state(ws, "SELECT key, config, meta FROM samples")}


def _assert_traceable(modes: dict, m: dict, samples: dict) -> None:
    """A tested mode traces back to its cluster of misclassified baseline images, every caption, its prompt,
    its regenerated images with their seeds, and the counts and p-value it was tested with."""
    base = modes["baseline"][m["label"]]
    assert m["regenerated"] and m["size"] == len(m["members"]) >= 2 and m["medoid"] in m["members"]
    for key, seed in zip(m["members"], m["member_seeds"], strict=True):
        config, meta = samples[key]
        assert config == "baseline" and meta["label"] == m["label"] and meta["kept"]
        assert seed == meta["seed"] == derive_seed(0, "baseline", m["label"], int(key.rsplit("_", 1)[1]))
    captions = {c["key"]: c["caption"] for c in m["captions"]}
    assert set(captions) == set(m["members"]) and captions[m["medoid"]] == m["caption"]
    config, record = samples[m["record"]]
    assert config == "clusters" and record["failure_mode"]["caption"] == m["caption"]
    assert record["prompt"] == m["prompt"] == m["caption"]  # mode_template "{caption}"
    # the regenerated images: prompt, seeds derived from content, counts
    assert len(m["images"]) == m["n"] > 0 and m["seeds"] == [
        derive_seed(0, "regenerate", m["id"], m["caption"], i) for i in range(m["n"])]
    for key, seed in zip(m["images"], m["seeds"], strict=True):
        config, meta = samples[key]
        assert config == "modes" and meta["failure_mode"]["id"] == m["id"]
        assert meta["prompt"] == m["prompt"] and meta["seed"] == seed
    assert m["failures"] == len(m["failed"]) == sum(samples[k][1]["kept"] for k in m["images"])
    # confused: failed regenerated images whose top-1 is the cluster's confusion (as the baseline counts them)
    assert m["confused"] == sum(samples[k][1]["surrogates"][0]["top5"][0] == m["confusion"] for k in m["failed"])
    assert m["baseline_failures"] == base["failures"] and m["baseline_n"] == base["n"]
    assert m["p_failure"] == pytest.approx(fm.p_greater(modes["test"], m["failures"], m["n"], base["failures"],
                                                        base["n"]))


def test_a_build_discovers_modes_and_each_traces_to_its_images_caption_seeds_and_counts(reference):
    modes = json.loads((reference / "modes.json").read_text())
    assert modes["test"] == "fisher" and modes["correction"] == "holm" and modes["top_k"] == 1
    assert modes["baseline"]["goldfish"]["failures"] == modes["baseline"]["goldfish"]["n"] == 16
    assert 0 < modes["baseline"]["tench"]["failures"] < 16
    found = [m for m in modes["modes"] if m["discovered"]]
    assert found and {m["label"] for m in found} == {"tench"}
    assert modes["discovered"] == [m["id"] for m in found]
    assert any(m["label"] == "goldfish" and m["regenerated"] and not m["discovered"] for m in modes["modes"])

    samples = _samples(reference)
    base = modes["baseline"]["tench"]
    assert base["n"] == sum(c == "baseline" and m["label"] == "tench" for c, m in samples.values())
    assert base["failures"] == sum(c == "baseline" and m["label"] == "tench" and m["kept"]
                                   for c, m in samples.values())
    tested = [m for m in modes["modes"] if m["regenerated"]]
    for m in found:
        _assert_traceable(modes, m, samples)
        assert m["n"] == 12 and m["p_failure_adjusted"] <= 0.05
    assert [m["p_failure_adjusted"] for m in tested] == pytest.approx(fm.holm([m["p_failure"] for m in tested]))

    # the same in state.duckdb
    rows = _state(reference, "SELECT id, caption, n, failures, p_failure_adjusted, discovered FROM failure_modes "
                             "ORDER BY id")
    assert rows == [(m["id"], m["caption"], m["n"], m["failures"], m["p_failure_adjusted"], m["discovered"])
                    for m in sorted(modes["modes"], key=lambda m: m["id"])]
    for m in found:
        members = _state(reference, f"SELECT key, seed FROM failure_mode_members WHERE mode = '{m['id']}'")
        assert sorted(members) == sorted(zip(m["members"], m["member_seeds"], strict=True))
        images = _state(reference, f"SELECT key, seed FROM failure_mode_images WHERE mode = '{m['id']}' ORDER BY key")
        assert images == list(zip(m["images"], m["seeds"], strict=True))

    # the report: markdown and figures, one per discovered mode
    report = (reference / "report" / "report.md").read_text()
    assert f"**{len(found)} mode(s) discovered.**" in report
    for m in found:
        assert m["caption"] in report and (reference / "report" / f"mode_{m['id']}.png").stat().st_size > 0
    assert (reference / "report" / "rates.png").exists() and (reference / "report" / "confusions.png").exists()


def test_a_second_fresh_build_is_byte_identical(reference, config, tmp_path):
    ws = tmp_path / "ws"
    run_cli("build", config, "--out", ws, "--quiet", check=0)
    run_cli("report", "failure-modes", ws, "--out", ws / "report", check=0)
    assert _shards(ws) == _shards(reference)
    assert _digest(ws / "modes.json") == _digest(reference / "modes.json")
    for f in sorted((reference / "report").iterdir()):
        assert _digest(ws / "report" / f.name) == _digest(f), f.name


def test_killed_in_a_later_stage_resumes_to_the_same_bytes(reference, config, tmp_path):
    ws = tmp_path / "ws"
    manifest = ws / "candidates" / "manifest.jsonl"
    baseline_units = 4  # 2 labels x 16 images / unit_size 8
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "build", str(config), "--out", str(ws), "--quiet"],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if manifest.exists() and len(manifest.read_text().splitlines()) > baseline_units:
            break  # a clusters unit is committed: kill in the middle of the later stages
        time.sleep(0.05)
    assert p.poll() is None, "the build finished before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = len(manifest.read_text().splitlines())
    assert not (ws / "modes.json").exists()
    r = run_cli("build", config, "--out", ws, "--quiet", check=0)
    assert f"({done} done before" in r.stdout
    assert _shards(ws) == _shards(reference)
    assert _digest(ws / "modes.json") == _digest(reference / "modes.json")


def test_finalized_set_loads_and_the_report_checks_transfer(reference, tmp_path):
    from datasets import load_dataset

    run_cli("finalize", reference, check=0)
    run_cli("verify", reference / "dataset", check=0)
    modes = json.loads((reference / "modes.json").read_text())
    ds = load_dataset(str(reference / "dataset"), "modes", split="test")
    assert ds.features["cls"].names == ["tench", "goldfish"]
    assert len(ds) == sum(m["failures"] or 0 for m in modes["modes"])
    assert {r["failure_mode"]["id"] for r in ds["json"]} <= {m["id"] for m in modes["modes"]}
    db = tmp_path / "r.duckdb"
    run_cli("eval", reference, "--model", modes["classifier"], "--model", "tiny:resnet", "--db", db, "--quiet", check=0)
    out = tmp_path / "report"
    r = run_cli("report", "failure-modes", reference, "--out", out, "--db", db, check=0)
    assert "discovered" in r.stdout
    text = (out / "report.md").read_text()
    assert "## Transfer" in text and "(under test)" in text
    # every image fails the classifier under test, by construction of the set
    assert f"| {modes['classifier']} (under test) | modes | {len(ds)} | {len(ds)} | 1.000 |" in text


def test_smoke_config_runs_offline_and_every_tested_mode_is_traceable(tmp_path):
    # The smoke config's random tiny models discover nothing (see its comment); what it shows is that every
    # mode it tests traces back to its images, captions, seeds and counts.
    ws = tmp_path / "ws"
    start = time.time()
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    r = run_cli("report", "failure-modes", ws, "--out", ws / "report", check=0)
    assert time.time() - start < 120
    assert (ws / "report" / "report.md").exists() and "mode(s) discovered" in r.stdout
    modes = json.loads((ws / "modes.json").read_text())
    tested = [m for m in modes["modes"] if m["regenerated"]]
    assert tested and modes["discovered"] == [m["id"] for m in modes["modes"] if m["discovered"]]
    samples = _samples(ws)
    for m in tested:
        _assert_traceable(modes, m, samples)
    assert [m["p_failure_adjusted"] for m in tested] == pytest.approx(fm.holm([m["p_failure"] for m in tested]))
    assert all(m["discovered"] == (m["p_failure_adjusted"] <= modes["alpha"]) for m in tested)


def test_bad_inputs_are_one_line_errors(tmp_path, config):
    r = run_cli("build", SMOKE, "--out", tmp_path / "a", "--set", "labels=[tench, gldfish]", check=2)
    assert r.stderr.strip() == ("gensets: error: --set: labels: labels[1] 'gldfish' is not an ImageNet class "
                                "name (did you mean: goldfish, goldfinch, lionfish)")
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMOKE.read_text().replace("images_per_label: 12", "images_per_label: 0")
                   .replace("captioner: {model: tiny:blip-caption", "captioner: {model: nope"))
    r = run_cli("build", bad, "--out", tmp_path / "b", check=2)
    assert len(r.stderr.strip().splitlines()) == 1 and f"{bad}:" in r.stderr and "captioner.model" in r.stderr
    r = run_cli("build", SMOKE, "--out", tmp_path / "c", "--set", "mode_template=no caption", check=2)
    assert "mode_template: must contain {caption}" in r.stderr
    r = run_cli("report", "failure-modes", tmp_path / "nowhere", "--out", tmp_path / "r", check=2)
    assert len(r.stderr.strip().splitlines()) == 1 and "not a gensets workspace" in r.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_set_overrides_reach_nested_keys_and_are_frozen_in_the_config():
    from gensets.workspace import load_build_config

    _, cfg = load_build_config(SMOKE, ["classifier=tiny:vit", "labels=[Tench]", "clustering.max_k=5",
                                       "captioner.prompt=a photo of"])
    assert (cfg.classifier, cfg.labels, cfg.clustering.max_k, cfg.clustering.min_size) == ("tiny:vit", ("tench",), 5, 2)
    assert cfg.captioner.prompt == "a photo of" and cfg.images_per_mode == 8


def test_make_discover_failures_passes_model_and_labels_to_the_config():
    import shlex

    from gensets.workspace import load_build_config

    model = "timm:hf-hub:timm/resnet50.a1_in1k"
    make = subprocess.run(["make", "--no-print-directory", "-n", "discover-failures", f"MODEL={model}", "LABELS=tench, great white shark"],
                          cwd=ROOT, capture_output=True, text=True)
    assert make.returncode == 0, make.stderr
    out = make.stdout.replace("\\\n", " ")
    ws = "out/failure-modes-timm-hf-hub-timm-resnet50.a1_in1k"
    args = shlex.split(next(line for line in out.splitlines() if "gensets build" in line))
    assert args[1:5] == ["build", "configs/failure_modes.yaml", "--out", ws]
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert sets == [f"classifier={model}", "labels=[tench, great white shark]"]
    _, cfg = load_build_config(ROOT / "configs" / "failure_modes.yaml", sets)  # the config's real keys
    assert cfg.classifier == model and cfg.labels == ("tench", "great white shark")
    assert f"gensets finalize {ws}\n" in out and f"gensets report failure-modes {ws} --out {ws}/report" in out
    # without MODEL or LABELS: the usage line, exit 2 (the venv is not rebuilt for it: -o)
    for args in (["MODEL=x"], ["LABELS=tench"]):
        r = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.gensets-installed", "discover-failures", *args], cwd=ROOT,
                           capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout.startswith("usage: make discover-failures MODEL=") and "LABELS=" in r.stdout
