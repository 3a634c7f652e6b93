"""Failure-mode discovery (Wiles et al. 2022): statistics, clustering, captioner, and whole builds.

Random tiny models fail almost everything and the tiny SD barely listens to its prompt, so the builds
here use two models made to fail by design, both loaded through the real library paths:
- a tiny SD whose cross-attention outputs are scaled x100 (`diffusers:<folder>`): images now depend on
  the prompt far more than on the seed;
- a timm ViT (one 32 px patch, no blocks, average pool: its features are a LayerNorm of a random
  projection of the image, so they have a fixed norm) whose head predicts tench when an image's features
  are close to those of "a realistic photograph of a tench" images (cosine above the 40th percentile of
  such images) and "toilet paper" otherwise; goldfish is never predicted, so that label fails always.
Images regenerated from the baseline prompt + a description move away from the tench images: tench modes fail
far more often than tench's baseline (discovered), goldfish modes cannot beat a 100% baseline (not discovered).
The head always ranks tench and toilet paper first and second, so these builds count failures at top-1.
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

from gensets.labels.hits import hit
from gensets.papers.wiles import statistics as fm
from gensets.papers.wiles.prompts import description
from gensets.records import derive_seed

from .conftest import ROOT, run_cli

pytestmark = pytest.mark.slow  # `make test-slow` and CI: staged builds, each several stages of images

SMOKE = ROOT / "configs" / "failure_modes.smoke.yaml"
TENCH, GOLDFISH, DECOY = 0, 1, 999  # ImageNet indices; 999 is "toilet paper"
BASE_PROMPT = "a realistic photograph of a tench (cypriniform fish)."  # the paper's template, WordNet's superclass
PERSIAN_CAT, TABBY_CAT, SNOW_LEOPARD = 283, 281, 289


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


def test_holm_and_benjamini_hochberg_by_hand_and_against_loops():
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, 1*0.04 -> 0.02, 0.03, 0.06, 0.06 (monotone)
    assert fm.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert fm.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    # BH: sorted p * m / rank = 0.02, 0.02, 0.04, 0.04
    assert fm.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    rng = np.random.default_rng(0)
    for _ in range(5):  # the definitions, p-value by p-value (rank 1 = smallest; no ties in these draws)
        ps = rng.uniform(0, 0.2, size=9)
        m, rank = len(ps), {v: i + 1 for i, v in enumerate(sorted(ps))}
        holm = [min(1, max((m - rank[q] + 1) * q for q in ps if q <= v)) for v in ps]
        bh = [min(1, min(m * q / rank[q] for q in ps if q >= v)) for v in ps]
        assert fm.holm(ps) == pytest.approx(holm) and fm.benjamini_hochberg(ps) == pytest.approx(bh)
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
    from gensets.papers.wiles import tally

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
    from gensets.papers.wiles.report import transfer

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
    from gensets.papers.wiles.report import transfer

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


# ------------------------------------------------------------------ prompts (Wiles et al. 2022 and the named variants)
def _cfg(*sets):
    from gensets.workspace import load_build_config

    return load_build_config(SMOKE, ["labels=[Persian cat, ladybug, tench]", *sets])[1]


def test_paper_prompts_for_persian_cat_and_ladybug():
    from gensets.papers.wiles import prompts

    cfg = _cfg()
    assert (cfg.template, cfg.mode_template, cfg.top_k) == ("wiles2022", "wiles2022", 3)  # the defaults
    # the paper's examples, written out by hand: the label, its superclass in parentheses, a full stop
    assert prompts.baseline_prompt(cfg, "Persian cat") == "a realistic photograph of a Persian cat (domestic animal)."
    assert prompts.baseline_prompt(cfg, "ladybug") == "a realistic photograph of a ladybug (insect)."
    # regeneration: baseline prompt + " " + the caption as a lower-case sentence ending in a full stop
    assert (prompts.regeneration_prompt(cfg, "ladybug", "It is in a plastic bag")
            == "a realistic photograph of a ladybug (insect). it is in a plastic bag.")
    assert (prompts.regeneration_prompt(cfg, "Persian cat", "a cat lying in the snow ")
            == "a realistic photograph of a Persian cat (domestic animal). a cat lying in the snow.")
    # BLIP repeats the prompt it was given: it is not part of the description
    blip = _cfg("captioner.prompt=a photography of")
    assert (prompts.regeneration_prompt(blip, "Persian cat", "a photography of a cat lying in the snow")
            == "a realistic photograph of a Persian cat (domestic animal). a cat lying in the snow.")


def test_description_rule_by_hand():
    from gensets.papers.wiles.prompts import description

    assert description("It is in a plastic bag") == "it is in a plastic bag."
    assert description("  a dog   on a beach . ") == "a dog on a beach."  # whitespace collapsed, one full stop
    assert description("A dog?!") == "a dog."  # trailing punctuation replaced
    assert description("a photography of a dog", "a photography of") == "a dog."
    assert description("a photography ofa dog", "a photography of") == "a photography ofa dog."  # whole words only
    assert description("a photography of", "a photography of") == "" and description(" . ") == ""


def test_default_and_earlier_variants_give_different_prompts():
    from gensets.papers.wiles import prompts

    paper, old = _cfg(), _cfg("template=label-only", "mode_template=caption", "top_k=1")
    caption = "a cat lying in the snow"
    assert prompts.baseline_prompt(old, "Persian cat") == "a realistic photograph of a Persian cat"
    assert prompts.regeneration_prompt(old, "Persian cat", caption) == caption  # the bare caption
    assert prompts.baseline_prompt(paper, "Persian cat") != prompts.baseline_prompt(old, "Persian cat")
    assert prompts.regeneration_prompt(paper, "Persian cat", caption) != caption
    assert prompts.variant(paper) == {"template": "wiles2022", "regeneration": "wiles2022", "top_k": 3}
    assert prompts.variant(old) == {"template": "label-only", "regeneration": "caption", "top_k": 1}
    # a superclass named in the config replaces WordNet's (label matched case-insensitively)
    own = _cfg("superclasses={persian cat: cat}")
    assert own.superclasses == {"Persian cat": "cat"}
    assert prompts.baseline_prompt(own, "Persian cat") == "a realistic photograph of a Persian cat (cat)."
    assert prompts.baseline_prompt(own, "ladybug") == "a realistic photograph of a ladybug (insect)."
    # a template of one's own, named by itself
    custom = _cfg("template='a photo of a {label}, a kind of {superclass}'", "mode_template='{baseline} {caption}'")
    assert prompts.regeneration_prompt(custom, "ladybug", "On a leaf.") == "a photo of a ladybug, a kind of insect On a leaf."
    assert prompts.variant(custom)["template"] == "a photo of a {label}, a kind of {superclass}"


def test_packaged_superclasses_are_wordnet_grandparents():
    from gensets.labels.imagenet import imagenet_names
    from gensets.sources.packaged import imagenet_superclasses

    sup, names = imagenet_superclasses(), imagenet_names()
    assert len(sup) == len(names) == 1000
    # read off WordNet 3.0's data.noun by hand: Persian cat -> domestic cat -> {cat, domestic animal} (the last
    # listed is taken); ladybug -> beetle -> insect; snow leopard -> big cat -> feline; tench -> cyprinid ->
    # cypriniform fish
    assert [sup[i] for i in (PERSIAN_CAT, 301, SNOW_LEOPARD, TENCH)] == [
        "domestic animal", "insect", "feline", "cypriniform fish"]
    assert names[PERSIAN_CAT] == "Persian cat" and names[301] == "ladybug" and names[SNOW_LEOPARD] == "snow leopard"


# ------------------------------------------------------------------ top-k and target labels on fixed counts
def test_top1_and_top3_failure_rates_differ_on_fixed_predictions():
    from gensets.papers.wiles import tally

    # six Persian cat images: the classifier's top-5 (only the first three matter at k = 3)
    top5s = [[PERSIAN_CAT, 1, 2, 3, 4],              # right at any k
             [SNOW_LEOPARD, PERSIAN_CAT, 2, 3, 4],   # fails at top-1 only
             [TABBY_CAT, 5, PERSIAN_CAT, 3, 4],      # fails at top-1 only (3rd)
             [SNOW_LEOPARD, 5, 6, PERSIAN_CAT, 4],   # fails at both (4th)
             [SNOW_LEOPARD, TABBY_CAT, 6, 7, 8],     # fails at both
             [TABBY_CAT, 5, 6, 7, 8]]                # fails at both

    def rate(k):
        t = tally([{"kept": not hit(t5, [PERSIAN_CAT], k), "surrogates": [{"top5": t5}]} for t5 in top5s])
        return t["failures"] / t["n"], dict(t["confusions"])

    # by hand: top-1 fails images 2-6 (5/6), confused with their top-1; top-3 fails images 4-6 (3/6)
    assert rate(1) == (5 / 6, {SNOW_LEOPARD: 3, TABBY_CAT: 2})
    assert rate(3) == (3 / 6, {SNOW_LEOPARD: 2, TABBY_CAT: 1})


def test_target_labels_against_the_baseline_rate_of_the_same_confusion():
    from scipy.stats import hypergeom

    baseline = {"Persian cat": {"n": 20, "failures": 5, "confusions": {SNOW_LEOPARD: 1, TABBY_CAT: 4}}}
    mode = {"id": "persian_cat_00", "label": "Persian cat", "n": 10, "failures": 9,
            "confusions": {TABBY_CAT: 3, SNOW_LEOPARD: 6}}
    rows = fm.compare_targets([mode], baseline, test="fisher", correction="holm", alpha=0.05)
    assert [(r["target"], r["confused"], r["n"], r["baseline_confused"], r["baseline_n"]) for r in rows] == [
        (SNOW_LEOPARD, 6, 10, 1, 20), (TABBY_CAT, 3, 10, 4, 20)]  # most confused first
    # Persian cat -> snow leopard: 6 of 10 against 1 of 20. One-sided Fisher = P(X >= 6), X hypergeometric:
    # 30 images, 7 of them snow leopards, 10 drawn (the mode's): [C(7,6) C(23,4) + C(7,7) C(23,3)] / C(30,10)
    leopard = (math.comb(7, 6) * math.comb(23, 4) + math.comb(7, 7) * math.comb(23, 3)) / math.comb(30, 10)
    assert rows[0]["p"] == pytest.approx(leopard, rel=1e-12)
    assert rows[0]["p"] == pytest.approx(hypergeom.sf(5, 30, 7, 10), rel=1e-9)  # scipy, independently
    # Persian cat -> tabby: 3 of 10 against 4 of 20: P(X >= 3), 30 images, 7 tabbies, 10 drawn
    tabby = sum(math.comb(7, x) * math.comb(23, 10 - x) for x in range(3, 8)) / math.comb(30, 10)
    assert rows[1]["p"] == pytest.approx(tabby, rel=1e-12)
    # Holm over the two pairs: 2 * the smaller, then max(that, the larger)
    assert rows[0]["p_adjusted"] == pytest.approx(2 * leopard)
    assert rows[1]["p_adjusted"] == pytest.approx(min(1.0, max(2 * leopard, tabby)))
    assert [r["significant"] for r in rows] == [True, False]  # 2 * 0.0021 <= 0.05 < 0.43
    assert leopard == pytest.approx(0.002122, abs=1e-6) and tabby == pytest.approx(0.4288, abs=1e-4)
    # a confusion the baseline never shows is still tested (against 0 of 20), and no mode gives no rows
    [only] = fm.compare_targets([{**mode, "confusions": {5: 2}}], baseline)
    assert only["baseline_confused"] == 0 and only["p"] == pytest.approx(
        math.comb(2, 2) * math.comb(28, 8) / math.comb(30, 10))
    assert fm.compare_targets([], baseline) == []


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
    """tiny:sd v1 (a VAE of two blocks: 32x32 latents, where the prompt moves the image enough for a caption to
    make a failure mode; v2's 8x8 latents do not, measured with cross-attention scaled 100 to 10,000 times), its
    cross-attention scaled up."""
    import torch

    from gensets.models.tiny.diffusion import pipeline

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # as tiny:sd v1 was built (gensets.models.tiny._build)
        pipe = pipeline(vae_blocks=2)
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
    threshold = torch.quantile(features(list(range(20_000, 20_016))) @ centre, 0.4)  # other seeds: unbiased
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
top_k: 1
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
    # the paper's regeneration prompt: the label's baseline prompt, a space, the caption's description
    assert m["description"] == description(m["caption"]) != ""
    assert record["prompt"] == m["prompt"] == f"{base['prompt']} {m['description']}"
    assert record["variant"] == {k: modes["variant"][k] for k in ("template", "regeneration", "top_k")}
    # the regenerated images: prompt, seeds derived from content, counts
    assert len(m["images"]) == m["n"] > 0 and m["seeds"] == [
        derive_seed(0, "regenerate", m["id"], m["caption"], i) for i in range(m["n"])]
    for key, seed in zip(m["images"], m["seeds"], strict=True):
        config, meta = samples[key]
        assert config == "modes" and meta["failure_mode"]["id"] == m["id"]
        assert meta["prompt"] == m["prompt"] and meta["seed"] == seed
        assert meta["variant"] == record["variant"] and meta["surrogate_top_k"] == modes["top_k"]
        # failed: the label's class not among the classifier's top-k (k of the build)
        assert meta["kept"] == (not hit(meta["surrogates"][0]["top5"], meta["imagenet_ids"], modes["top_k"]))
    assert m["failures"] == len(m["failed"]) == sum(samples[k][1]["kept"] for k in m["images"])
    # confused: failed regenerated images whose top-1 is the cluster's confusion (as the baseline counts them)
    assert m["confused"] == sum(samples[k][1]["surrogates"][0]["top5"][0] == m["confusion"] for k in m["failed"])
    assert m["baseline_failures"] == base["failures"] and m["baseline_n"] == base["n"]
    assert m["p_failure"] == pytest.approx(fm.p_greater(modes["test"], m["failures"], m["n"], base["failures"],
                                                        base["n"]))


def test_a_build_discovers_modes_and_each_traces_to_its_images_caption_seeds_and_counts(reference):
    modes = json.loads((reference / "modes.json").read_text())
    assert modes["test"] == "fisher" and modes["correction"] == "holm" and modes["top_k"] == 1
    assert modes["variant"] == {"template": "wiles2022", "regeneration": "wiles2022", "top_k": 1}
    assert modes["baseline"]["tench"]["prompt"] == BASE_PROMPT
    assert modes["baseline"]["goldfish"]["superclass"] == "cypriniform fish"
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

    # target labels: each discovered mode's confusions, each against the baseline's count of the same one
    targets = modes["targets"]
    assert targets and {t["mode"] for t in targets} == {m["id"] for m in found}
    for m in found:
        base_conf = {c["class"]: c["count"] for c in modes["baseline"][m["label"]]["confusions"]}
        assert m["targets"] == [t for t in targets if t["mode"] == m["id"]]
        assert sum(t["confused"] for t in m["targets"]) == m["failures"]  # every failed image has a top-1
        for t in m["targets"]:
            assert t["target_name"] == "toilet paper" and t["baseline_confused"] == base_conf.get(t["target"], 0)
            assert t["p"] == pytest.approx(fm.fisher_greater(t["confused"], t["n"], t["baseline_confused"],
                                                             t["baseline_n"]))
            assert (t["template"], t["regeneration"], t["top_k"]) == ("wiles2022", "wiles2022", 1)
    assert [t["p_adjusted"] for t in targets] == pytest.approx(fm.holm([t["p"] for t in targets]))
    assert _state(reference, "SELECT mode, target, confused, p_adjusted, significant, top_k FROM failure_mode_targets") == [
        (t["mode"], t["target"], t["confused"], t["p_adjusted"], t["significant"], 1) for t in targets]

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

    # the report: markdown, JSON and figures, one per discovered mode; it names the variant and the pairs
    report = (reference / "report" / "report.md").read_text()
    assert f"**{len(found)} mode(s) discovered.**" in report
    assert "Variant: baseline template `wiles2022`, regeneration `wiles2022`, top-1 failures" in report
    assert "## Target labels" in report and "| tench -> toilet paper |" in report
    assert "## Published numbers (Wiles et al. 2022, Figure 5)" in report
    # the smoke labels are not Persian cat: Figure 5's rates are shown, with nothing of this build beside them
    row = next(line for line in report.splitlines()
               if line.startswith("| Persian cat, total failure rate, the automatically found caption |"))
    assert row.startswith("| Persian cat, total failure rate, the automatically found caption | failure_rate | 0.64% "
                          "| no such caption | - | ") and row.endswith(" | not built |"), row
    assert "consistent" not in row and "differs" not in row, row  # no verdict on a build of other images
    assert json.loads((reference / "report" / "report.json").read_text())["targets"] == targets
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
    assert modes["variant"] == {"template": "wiles2022", "regeneration": "wiles2022", "top_k": 3}  # the paper's
    for m in tested:
        _assert_traceable(modes, m, samples)
    assert [m["p_failure_adjusted"] for m in tested] == pytest.approx(fm.holm([m["p_failure"] for m in tested]))
    assert all(m["discovered"] == (m["p_failure_adjusted"] <= modes["alpha"]) for m in tested)
    for config, meta in samples.values():  # the top-3 rule, on every classified image
        if config != "clusters":
            assert meta["kept"] == (not hit(meta["surrogates"][0]["top5"], meta["imagenet_ids"], 3))


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
    assert "mode_template: must be one of wiles2022, caption or contain {caption} or {description}" in r.stderr
    r = run_cli("build", SMOKE, "--out", tmp_path / "c", "--set", "superclasses={gldfish: fish}", check=2)
    assert r.stderr.strip() == "gensets: error: --set: superclasses: 'gldfish' is not one of labels"
    r = run_cli("build", SMOKE, "--out", tmp_path / "c", "--set", "template='a {label} ({kind})'", check=2)
    assert len(r.stderr.strip().splitlines()) == 1 and "template: bad template" in r.stderr
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
