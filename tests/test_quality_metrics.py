"""CLER and the quality metrics of generated data, each against a hand-computed value or a plain reference."""

import math

import numpy as np
import pytest

from gensets import metrics as M
from gensets.quality import functional as F

# two classes in 2-D; every vector below is hand-normalised in the comments
GEN = [[1, 0], [0.6, 0.8],        # class 0: centre (0.8, 0.4) -> (0.8944, 0.4472)
       [0, 2], [-0.6, 0.8]]       # class 1: (0, 1), (-0.6, 0.8): centre (-0.3, 0.9) -> (-0.3162, 0.9487)
GEN_Y = [0, 0, 1, 1]
TEST = [[3, 4],     # (0.6, 0.8)   . c0 = 0.894, . c1 = 0.569 -> 0 (true 0)
        [0, 1],     # (0, 1)       . c0 = 0.447, . c1 = 0.949 -> 1 (true 0)
        [-1, 0],    # (-1, 0)      . c0 = -0.894, . c1 = 0.316 -> 1 (true 1)
        [1, 0.1]]   # (0.995, 0.0995) . c0 = 0.935, . c1 = -0.220 -> 0 (true 1)
TEST_Y = [0, 0, 1, 1]
# ensemble: centre + text, renormalised: c0 = (0.8944, 1.4472) / 1.7013, c1 = (-1.3162, 0.9487) / 1.6225
# test 2 (0, 1): 0.851 vs 0.585 -> 0 (now right); the others as before: 3 of 4
TEXT = [[0, 5], [-2, 0]]


def test_cler_hand_computed():
    assert M.cler(GEN, GEN_Y, TEST, TEST_Y) == 0.5
    assert M.cler(GEN, GEN_Y, TEST, TEST_Y, text_emb=TEXT) == 0.75


def test_cler_follows_genbench_normalisation_where_it_changes_the_answer():
    """GenBench's evaluation_utils: centres = normalise(mean of normalised images); ensemble centres =
    normalise(centre + normalised text embedding). Here each other choice gives another answer."""
    gen = [[2, 0], [0, 3],  # class 0, normalised (1, 0), (0, 1): mean m0 = (0.5, 0.5), |m0| = 0.7071
           [5, 0]]          # class 1, normalised (1, 0): m1 = (1, 0)
    gen_y = [0, 0, 1]
    # renormalised centres c0 = (0.7071, 0.7071), c1 = (1, 0)
    test = [[4, 3],   # t1 = (0.8, 0.6), class 0: c0.t1 = 0.7071 * 1.4 = 0.9899 > c1.t1 = 0.8 -> 0 (right)
            [2, 0]]   # t2 = (1, 0),     class 1: c0.t2 = 0.7071 < c1.t2 = 1 -> 1 (right)
    test_y = [0, 1]
    assert M.cler(gen, gen_y, test, test_y) == 1.0
    # centres not renormalised: m0.t1 = 0.5 * 1.4 = 0.7 < m1.t1 = 0.8 -> 1 (wrong): 0.5
    assert M.cler(gen, gen_y, test, test_y, centres="mean") == 0.5
    text = [[-4, 3],  # normalised u0 = (-0.8, 0.6)
            [3, -4]]  # normalised u1 = (0.6, -0.8)
    # GenBench: e0 = normalise(c0 + u0) = normalise(-0.0929, 1.3071) = (-0.0709, 0.9975)
    #           e1 = normalise(c1 + u1) = normalise(1.6, -0.8) = (0.8944, -0.4472)
    #   t1: e0.t1 = -0.0567 + 0.5985 = 0.5418 > e1.t1 = 0.7155 - 0.2683 = 0.4472 -> 0 (right)
    #   t2: e0.t2 = -0.0709 < e1.t2 = 0.8944 -> 1 (right): 1.0
    assert M.cler(gen, gen_y, test, test_y, text_emb=text) == 1.0
    # and every other choice gets t1 wrong (t2 stays right), 0.5:
    # - centres not renormalised: normalise(m0 + u0) = normalise(-0.3, 1.1) = (-0.2631, 0.9648);
    #   e0.t1 = -0.2105 + 0.5789 = 0.3684 < e1.t1 = 0.4472 -> 1
    # - text not normalised: normalise(c0 + (-4, 3)) = normalise(-3.2929, 3.7071) = (-0.6641, 0.7476),
    #   normalise(c1 + (3, -4)) = normalise(4, -4) = (0.7071, -0.7071); t1: -0.0827 < 0.1414 -> 1
    # - sums not renormalised: (c0 + u0).t1 = -0.0743 + 0.7843 = 0.7100 < (c1 + u1).t1 = 1.28 - 0.48 = 0.80 -> 1
    def unit(x):
        x = np.asarray(x, dtype=float)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    g, t, u = unit(gen), unit(test), unit(text)
    c = unit([g[:2].mean(0), g[2]])
    m = np.array([g[:2].mean(0), g[2]])
    for other in (unit(m + u), unit(c + np.asarray(text, dtype=float)), c + u):
        assert (np.argmax(t @ other.T, axis=1) == test_y).mean() == 0.5  # the alternatives, as computed above
    assert (np.argmax(t @ m.T, axis=1) == test_y).mean() == 0.5


def test_cler_ensemble_code_and_softmax_mean_disagree_where_computed_by_hand():
    """The code's ensemble normalises centre + text; gensets' earlier reading (softmax-mean) averages the CLER
    probabilities (softmax of the cosines to the centres) and CLIP's zero-shot ones (softmax of 100 x the cosines
    to the text embeddings)."""
    gen, gen_y = [[2, 0], [0, 3], [5, 0]], [0, 0, 1]  # centres c0 = (0.7071, 0.7071), c1 = (1, 0) (above)
    test, test_y = [[4, 3], [2, 0]], [0, 1]           # t1 = (0.8, 0.6), t2 = (1, 0)
    text = [[-4, 3], [3, -4]]                         # u0 = (-0.8, 0.6), u1 = (0.6, -0.8)
    assert M.cler(gen, gen_y, test, test_y, text_emb=text) == 1.0  # the code's: both right (worked out above)
    # softmax-mean, t1: CLER cosines 0.9899 / 0.8 -> p0 = 1 / (1 + e^-(0.9899 - 0.8)) = 0.5473; CLIP cosines
    # u0.t1 = -0.28, u1.t1 = 0 -> p0 = 1 / (1 + e^28) ~ 7e-13; mean p0 = 0.2737 < 0.5 -> class 1 (wrong)
    # t2: CLER 0.7071 / 1 -> p0 = 0.4273; CLIP -0.8 / 0.6 -> p0 = 1 / (1 + e^140) ~ 0; mean 0.2137 -> 1 (right)
    assert M.cler(gen, gen_y, test, test_y, text_emb=text, ensemble="softmax-mean") == 0.5
    classes, probs = M.cler_scores(gen, gen_y, test, text_emb=text, ensemble="softmax-mean")
    cos0 = 1.4 / math.sqrt(2)  # c0.t1 = (0.8 + 0.6) / sqrt(2)
    want = (1 / (1 + math.exp(-(cos0 - 0.8))) + 1 / (1 + math.exp(28))) / 2
    assert classes.tolist() == [0, 1] and probs[0, 0] == pytest.approx(want, rel=1e-9)
    assert probs.sum(axis=1) == pytest.approx([1, 1])
    with pytest.raises(ValueError, match="ensemble must be"):
        M.cler(gen, gen_y, test, test_y, text_emb=text, ensemble="mean")
    with pytest.raises(ValueError, match="centres must be"):
        M.cler(gen, gen_y, test, test_y, centres="median")


def test_cler_paper_ensemble_is_algorithm_1_computed_by_hand():
    """GenBench Sec. 3 (shared/papers/001_f04b4de81b95e690.txt, below Eq. 1): P_k = argmax_j E_k . (E_j + L_j) / 2;
    Algorithm 1: class_centers = mean, preds_ensemble = (preds_CLER + preds_CLIP) / 2, plain dot products."""
    gen, gen_y = [[2, 0], [0.6, 0.8], [0, 1]], [0, 0, 1]  # normalised (1, 0), (0.6, 0.8): M0 = (0.8, 0.4); M1 = (0, 1)
    test, test_y = [[0.8, 0.6], [0, 1]], [0, 1]            # t1, t2 (unit already)
    text = [[0.6, 0.8], [0.8, 0.6]]                        # L0, L1 (unit already)
    # t1: M0.t1 = 0.64 + 0.24 = 0.88, M1.t1 = 0.6; L0.t1 = 0.48 + 0.48 = 0.96, L1.t1 = 0.64 + 0.36 = 1.0
    #     ensemble: class 0 (0.88 + 0.96) / 2 = 0.92, class 1 (0.6 + 1.0) / 2 = 0.80 -> 0 (right)
    # t2: M0.t2 = 0.4, M1.t2 = 1; L0.t2 = 0.8, L1.t2 = 0.6
    #     ensemble: class 0 (0.4 + 0.8) / 2 = 0.6, class 1 (1 + 0.6) / 2 = 0.8 -> 1 (right): CLER ensemble 2 / 2
    classes, probs = M.cler_scores(gen, gen_y, test, text, centres="mean", ensemble="paper")
    assert classes.tolist() == [0, 1] and probs.argmax(axis=1).tolist() == [0, 1]
    # the scores go through the code's temperature-1 softmax (argmax unchanged): p0 = 1 / (1 + e^-(0.92 - 0.80))
    assert probs[:, 0] == pytest.approx([1 / (1 + math.exp(-0.12)), 1 / (1 + math.exp(0.2))], rel=1e-12)
    assert M.cler(gen, gen_y, test, test_y, text, centres="mean", ensemble="paper") == 1.0
    # the other readings get both wrong here: CLIP's logit scale 100 lets the text decide (t1: 1.0 > 0.96 -> 1;
    # t2: 0.8 > 0.6 -> 0), so averaging probabilities (softmax-mean) is not Algorithm 1
    assert M.cler(gen, gen_y, test, test_y, text, centres="mean", ensemble="softmax-mean") == 0.0
    # with normalised centres (the code's), the paper's average uses C0 = M0 / |M0| = (0.8944, 0.4472):
    # t1: (0.9839 + 0.96) / 2 = 0.9720 vs 0.80 -> 0; t2: (0.4472 + 0.8) / 2 = 0.6236 vs 0.8 -> 1
    _, probs_n = M.cler_scores(gen, gen_y, test, text, ensemble="paper")
    c0 = np.array([0.8, 0.4]) / math.hypot(0.8, 0.4)
    assert probs_n[0, 0] == pytest.approx(1 / (1 + math.exp(-((c0 @ [0.8, 0.6] + 0.96) / 2 - 0.8))), rel=1e-12)


def test_cler_paper_ensemble_matches_algorithm_1_written_out():
    """Algorithm 1 line by line in numpy (its preds_CLIP read as mm(test_emb, text_emb.T)) on unit embeddings."""
    rng = np.random.default_rng(3)

    def unit(a):
        return a / np.linalg.norm(a, axis=1, keepdims=True)

    gen, test, text = unit(rng.normal(size=(40, 8))), unit(rng.normal(size=(25, 8))), unit(rng.normal(size=(5, 8)))
    gen_y, test_y = np.arange(40) % 5, rng.integers(0, 5, 25)
    class_centers = np.stack([gen[gen_y == c].mean(axis=0) for c in range(5)])  # gen_emb_grp.mean(dim=1)
    preds_cler = test @ class_centers.T
    preds_clip = test @ text.T
    preds_ensemble = (preds_cler + preds_clip) / 2
    _, probs = M.cler_scores(gen, gen_y, test, text, centres="mean", ensemble="paper")
    assert probs.argmax(axis=1).tolist() == preds_ensemble.argmax(axis=1).tolist()
    assert np.log(probs) - np.log(probs)[:, :1] == pytest.approx(preds_ensemble - preds_ensemble[:, :1], abs=1e-12)
    want = (preds_ensemble.argmax(axis=1) == test_y).sum() / len(test_y)  # CLER_ensemble / N (Eq. 1)
    assert M.cler(gen, gen_y, test, test_y, text, centres="mean", ensemble="paper") == pytest.approx(want)
    _, probs_cler = M.cler_scores(gen, gen_y, test, centres="mean")
    assert probs_cler.argmax(axis=1).tolist() == preds_cler.argmax(axis=1).tolist()


def test_top_k_per_class_picks_the_highest_scores_and_breaks_ties_by_key():
    """GenBench's --clip_selection K on fixed scores: per class, the K highest, ties to the smaller key."""
    keys = ["a_0", "a_1", "a_2", "a_3", "b_0", "b_1", "b_2", "c_0"]
    labels = [0, 0, 0, 0, 1, 1, 1, 2]
    scores = [0.20, 0.31, 0.25, 0.31,  # class 0: a_1 and a_3 tie at the top, then a_2 (0.25), a_0 (0.20)
              0.50, 0.50, 0.50,        # class 1: a three-way tie
              0.10]                    # class 2: one image
    assert M.top_k_per_class(scores, labels, keys, 1).tolist() == [1, 4, 7]          # a_1 (< a_3), b_0, c_0
    assert M.top_k_per_class(scores, labels, keys, 2).tolist() == [1, 3, 4, 5, 7]    # a_1, a_3; b_0, b_1; c_0
    assert M.top_k_per_class(scores, labels, keys, 3).tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert M.top_k_per_class(scores, labels, keys, 20).tolist() == list(range(8))    # fewer than K: all kept
    # the tie goes by key, not by position: with the keys of a_1 and a_3 swapped, a_3's position wins
    swapped = ["a_0", "a_3", "a_2", "a_1", "b_0", "b_1", "b_2", "c_0"]
    assert M.top_k_per_class(scores, labels, swapped, 1).tolist() == [3, 4, 7]
    # nested: every smaller K is a subset of a larger one
    for k in range(1, 4):
        assert set(M.top_k_per_class(scores, labels, keys, k)) <= set(M.top_k_per_class(scores, labels, keys, k + 1))
    with pytest.raises(ValueError, match="distinct"):
        M.top_k_per_class(scores, labels, ["a"] * 8, 1)
    with pytest.raises(ValueError, match="NaN"):
        M.top_k_per_class([float("nan")] * 8, labels, keys, 1)
    with pytest.raises(ValueError, match="at least 1"):
        M.top_k_per_class(scores, labels, keys, 0)


def test_cler_with_the_datasets_metric_or_accuracy():
    # GEN and TEST above, with one more test image of class 0, (3, 4) -> class 0 (right):
    # predictions 0, 1, 1, 0, 0 for labels 0, 0, 1, 1, 0. accuracy 3/5; mean per class (2/3 + 1/2) / 2 = 7/12
    test, test_y = TEST + [[3, 4]], TEST_Y + [0]
    assert M.cler(GEN, GEN_Y, test, test_y) == pytest.approx(0.6)
    assert M.cler(GEN, GEN_Y, test, test_y, metric="mean-per-class") == pytest.approx(7 / 12)
    # ROC AUC of class 1's probability, i.e. of (c1 - c0).t: t1 -0.325, t2 0.502, t3 1.210, t4 -1.155, t5 -0.325;
    # positives {t3, t4} vs negatives {t1, t2, t5}: t3 beats 3, t4 none -> 3 / 6
    assert M.cler(GEN, GEN_Y, test, test_y, metric="roc-auc") == pytest.approx(0.5)


def test_cler_accepts_tensors_and_checks_inputs():
    torch = pytest.importorskip("torch")
    t = torch.tensor
    assert M.cler(t(GEN), t(GEN_Y), t(TEST, requires_grad=True), t(TEST_Y), text_emb=t(TEXT)) == 0.75
    with pytest.raises(ValueError, match="class 2 without generated images"):
        M.cler(GEN, GEN_Y, TEST, [0, 2, 1, 1])
    with pytest.raises(ValueError, match="dimension"):
        M.cler(GEN, GEN_Y, [[1, 0, 0]], [0])
    with pytest.raises(ValueError, match="text_emb has 1 rows"):
        M.cler(GEN, GEN_Y, TEST, TEST_Y, text_emb=[[0, 1]])


def test_cler_is_nearest_normalised_centre_on_random_data():
    rng = np.random.default_rng(0)
    g, gy = rng.normal(size=(60, 8)), rng.integers(0, 5, 60)
    t, ty = rng.normal(size=(40, 8)), rng.integers(0, 5, 40)
    gn = g / np.linalg.norm(g, axis=1, keepdims=True)
    tn = t / np.linalg.norm(t, axis=1, keepdims=True)
    correct = 0
    for x, y in zip(tn, ty, strict=True):
        sims = []
        for c in range(5):
            centre = gn[gy == c].mean(axis=0)
            sims.append(x @ centre / np.linalg.norm(centre))
        correct += int(np.argmax(sims) == y)
    assert M.cler(g, gy, t, ty) == correct / 40


# FD, KID, IS and precision / recall are torch-fidelity's (gensets.quality.functional, the one implementation that
# `gensets score` and the GenBench report share): each checked here against a computation written in the test.
def test_fid_equals_scipy_sqrtm():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6))
    y = rng.normal(loc=0.5, size=(250, 6)) @ rng.normal(size=(6, 6))
    mu1, mu2 = x.mean(0), y.mean(0)
    s1, s2 = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    direct = ((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * sqrtm(s1 @ s2).real)
    assert abs(F.fid(x, y) - direct) < 1e-6
    assert abs(F.fid(x, x)) < 1e-6
    with pytest.raises(ValueError, match=">= 2 rows"):
        F.fid(x[:1], y)


def _poly(a, b):
    return (sum(p * q for p, q in zip(a, b, strict=True)) / len(a) + 1) ** 3


def test_kid_matches_a_loop_reference():
    rng = np.random.default_rng(2)
    gen, ref = rng.normal(0.3, 1.2, size=(25, 4)), rng.normal(size=(30, 4))
    draws = np.random.RandomState(7)  # torch-fidelity's draws: per subset, generated rows, then real ones
    values = []
    for _ in range(5):
        g = gen[draws.choice(25, 10, replace=False)]
        r = ref[draws.choice(30, 10, replace=False)]
        m = 10
        gg = sum(_poly(g[i], g[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
        rr = sum(_poly(r[i], r[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
        gr = sum(_poly(g[i], r[j]) for i in range(m) for j in range(m)) / (m * m)
        values.append(gg + rr - 2 * gr)
    mean, std, size = F.kid(gen, ref, subsets=5, subset_size=10, seed=7)
    assert (mean, std, size) == (pytest.approx(np.mean(values), rel=1e-9), pytest.approx(np.std(values), rel=1e-9), 10)
    # the subset size is capped by the smaller set
    assert F.kid(gen, ref, subsets=3, subset_size=1000) == F.kid(gen, ref, subsets=3, subset_size=25)
    with pytest.raises(ValueError, match="at least 2"):
        F.kid(gen[:1], ref)


def test_inception_score_matches_the_formula():
    assert F.inception_score(50 * np.eye(4), splits=1)[0] == pytest.approx(4.0)  # confident and diverse: C
    assert F.inception_score(np.zeros((5, 3)), splits=1)[0] == pytest.approx(1.0)  # uniform: 1
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(12, 5))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    p = p[np.random.RandomState(9).permutation(12)]  # torch-fidelity shuffles the rows, then splits them in order
    scores = []
    for part in (p[:6], p[6:]):
        py = part.mean(0)
        kl = [sum(pi[c] * math.log(pi[c] / py[c]) for c in range(5)) for pi in part]
        scores.append(math.exp(sum(kl) / len(kl)))
    assert F.inception_score(logits, splits=2, seed=9) == (pytest.approx(np.mean(scores), rel=1e-12),
                                                           pytest.approx(np.std(scores), rel=1e-9), 2)
    assert F.inception_score(logits[:3])[2] == 3  # the splits are clipped to N


def test_clip_score_is_100_times_clipped_cosine():
    img = [[1, 0], [0, 2], [1, 1]]
    txt = [[2, 0], [0, -1], [1, 0]]  # cos 1, -1 (-> 0), 1/sqrt(2)
    assert M.clip_score(img, txt) == pytest.approx(100 * (1 + 0 + 1 / math.sqrt(2)) / 3)
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    ref = np.mean([100 * max(x @ y / np.linalg.norm(x) / np.linalg.norm(y), 0) for x, y in zip(a, b, strict=True)])
    assert M.clip_score(a, b) == pytest.approx(ref)


def _pr_reference(gen, ref, k):
    def radius(points, i):
        d = sorted(np.linalg.norm(points[i] - points[j]) for j in range(len(points)) if j != i)
        return d[k - 1]

    rr = [radius(ref, i) for i in range(len(ref))]
    rg = [radius(gen, i) for i in range(len(gen))]
    precision = np.mean([any(np.linalg.norm(g - r) <= rr[j] for j, r in enumerate(ref)) for g in gen])
    recall = np.mean([any(np.linalg.norm(r - g) <= rg[j] for j, g in enumerate(gen)) for r in ref])
    return precision, recall


def test_precision_recall_hand_computed_and_against_loops():
    ref = np.array([[0.0], [1], [2], [3], [10]])  # k=1 radii: 1, 1, 1, 1, 7
    gen = np.array([[0.5], [20], [2.5], [9]])  # 20 is outside every real ball; radii 2, 11, 2, 6.5
    assert F.precision_recall(gen, ref, k=1) == (0.75, 1.0)
    rng = np.random.default_rng(5)
    ref, gen = rng.normal(size=(40, 3)), rng.normal(0.8, 1.0, size=(35, 3))
    for k in (1, 3, 5):
        assert F.precision_recall(gen, ref, k) == pytest.approx(_pr_reference(gen, ref, k))
    with pytest.raises(ValueError, match="more than 3"):
        F.precision_recall(gen[:3], ref, 3)


# ------------------------------------------------------------------ the linear probes
# A fixed 3-class set in 3-D (generated: 5 per class; test: 3 per class) on which the three probes disagree.
PX = [[1.3, 0.7, 0.3], [-0.2, 0.8, 0.4], [0.5, 0.5, 0.3], [1.3, 0.0, 0.5], [0.3, -0.1, -0.4],
      [0.5, 1.0, -0.3], [-0.7, 0.8, 0.0], [-0.2, 2.2, 0.9], [-2.4, -0.7, -0.2], [-0.4, 1.2, 0.2],
      [1.9, -1.0, 0.7], [1.8, 0.6, 1.6], [-0.5, -1.5, 1.2], [0.1, -1.1, 0.4], [-0.1, -0.9, 0.9]]
PY = [0] * 5 + [1] * 5 + [2] * 5
PXT = [[1.1, 0.0, -0.5], [1.5, 0.8, 0.3], [0.3, 0.7, -0.5], [0.8, 0.0, 0.8], [0.0, -0.1, -0.3],
       [0.0, 1.2, -0.9], [-1.0, 0.2, 0.6], [0.2, 0.7, -0.5], [0.2, 1.1, 0.7]]
PYT = [0] * 3 + [1] * 3 + [2] * 3
HEAD = [[0.6, 0.4, 0.1], [0.4, 0.8, -0.7], [-0.1, -0.2, 1.4]]
# Elevater's class-balanced split, by hand: the first ceil(0.2 x 5) = 1 image of each class is held out
FIT, HELD = [1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14], [0, 5, 10]


def _sk_accuracy(fit, c, max_iter, x_eval, y_eval):
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=c, max_iter=max_iter).fit(np.asarray(PX)[fit], np.asarray(PY)[fit])
    return float((clf.predict(np.asarray(x_eval)) == np.asarray(y_eval)).mean())


def test_fixed_c_and_clip_probes_differ_as_their_protocols_say():
    every = list(range(15))
    fixed = M.linear_probe(PX, PY, PXT, PYT, probe="fixed-c")
    assert fixed == {"probe": "fixed-c", "C": 1.0, "value": _sk_accuracy(every, 1.0, 2000, PXT, PYT)}
    # the CLIP paper's protocol, replayed with scikit-learn on the hand-made split: C = 1 / lambda chosen on the
    # held-out images, then a fit on all 15 scored on the test images once
    lam, _ = M.l2_sweep(lambda lam: _sk_accuracy(FIT, 1 / lam, 1000, np.asarray(PX)[HELD], np.asarray(PY)[HELD]))
    clip = M.linear_probe(PX, PY, PXT, PYT, probe="clip")
    assert clip == {"probe": "clip", "C": 1 / lam, "value": _sk_accuracy(every, 1 / lam, 1000, PXT, PYT)}
    assert clip["C"] != 1.0 and clip["value"] != fixed["value"]  # 3/9 vs 4/9 here
    assert M.linear_probe(PX, [0] * 15, PXT, PYT) is None  # one class: nothing to separate


def _torch_epochs(x, y, x_eval, head, lr, wd, epochs, seed=0):
    """Elevater's Classifier as torch modules: BatchNorm1d(affine=False) -> Linear (text-initialised head, bias 0),
    cross-entropy, SGD (momentum 0.9, weight decay), batches of 64 in numpy's order, a batch of one skipped."""
    torch = pytest.importorskip("torch")
    x, x_eval, y = torch.tensor(x, dtype=torch.float64), torch.tensor(x_eval, dtype=torch.float64), torch.tensor(y)
    bn = torch.nn.BatchNorm1d(x.shape[1], affine=False).double()
    lin = torch.nn.Linear(x.shape[1], head.shape[0]).double()
    lin.weight.data, lin.bias.data = torch.tensor(head, dtype=torch.float64), torch.zeros(head.shape[0],
                                                                                            dtype=torch.float64)
    opt = torch.optim.SGD(lin.parameters(), lr=lr, momentum=0.9, weight_decay=wd, nesterov=False)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        bn.train()
        order = rng.permutation(len(y))
        for a in range(0, len(y), 64):
            idx = torch.tensor(order[a : a + 64])
            if len(idx) == 1:
                continue
            loss = torch.nn.functional.cross_entropy(lin(bn(x[idx])), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        bn.eval()
        with torch.no_grad():
            yield lin(bn(x_eval)).softmax(-1).numpy()


def test_elevater_epochs_are_torch_batchnorm_linear_sgd():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(129, 4)), rng.integers(0, 3, 129)  # batches of 64, 64 and 1 (skipped)
    x_eval, head = rng.normal(size=(7, 4)), rng.normal(size=(3, 4))
    ours = list(M.elevater_epochs(x, y, x_eval, head, 0.05, 1e-2, 3))
    theirs = list(_torch_epochs(x, y, x_eval, head, 0.05, 1e-2, 3))
    assert len(ours) == 3
    for a, b in zip(ours, theirs, strict=True):
        assert np.abs(a - b).max() < 1e-10
    assert np.abs(ours[0] - ours[2]).max() > 1e-3  # it does train


def test_elevater_probe_reports_the_best_test_epoch_and_the_last():
    head = np.asarray(HEAD) / np.linalg.norm(HEAD, axis=1, keepdims=True)
    x, y = np.asarray(PX), np.asarray(PY)

    def curve(epochs_of, fit, x_eval, y_eval, lr, wd, epochs):  # accuracy after each epoch
        return [float((p.argmax(1) == y_eval).mean()) for p in epochs_of(x[fit], y[fit], x_eval, head, lr, wd, epochs)]

    # Elevater's sweep, replayed (its epochs are torch's, test above): per learning rate the weight decay by
    # l2_sweep on the best of 10 held-out epochs; a learning rate replaces the best only when strictly better
    best, chosen = 0.0, (0.0, 0.0)
    for lr in np.logspace(-6, -1, 6).tolist():
        wd, score = M.l2_sweep(lambda wd, lr=lr: max(0.0, *curve(M.elevater_epochs, FIT, x[HELD], y[HELD], lr, wd, 10)))
        if best < score:
            best, chosen = score, (lr, wd)
    # the final 50 epochs on all generated images, scored on the test images, with the torch reference
    final = curve(_torch_epochs, list(range(15)), np.asarray(PXT), np.asarray(PYT), *chosen, 50)
    got = M.linear_probe(PX, PY, PXT, PYT, probe="elevater", text_emb=HEAD)
    assert (got["lr"], got["weight_decay"]) == chosen
    assert got["value"] == max(final) and got["last_epoch"] == final[-1]
    assert got["value"] > got["last_epoch"]  # 5/9 at its best test epoch, 3/9 after the 50th
    assert "test-set selection" in got["selection"]
    with pytest.raises(ValueError, match="text_emb"):
        M.linear_probe(PX, PY, PXT, PYT, probe="elevater")

