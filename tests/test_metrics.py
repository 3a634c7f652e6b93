"""gensets.metrics: hand-computed values on tiny inputs, independent implementations
(sklearn, scipy, naive loops) on random inputs, and edge cases (ties, absent classes, empty inputs)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.metrics import average_precision_score, balanced_accuracy_score, roc_auc_score

from gensets.metrics import (
    accuracy,
    average_precision_11pt,
    bootstrap_ci,
    class_balanced_split,
    genbench_metric,
    l2_sweep,
    mean_average_precision_11pt,
    mean_per_class_accuracy,
    normalize_yes_no,
    per_class_accuracy,
    roc_auc,
    top1,
    top5,
    topk_correct,
    vqa_binary_accuracy,
)

# ------------------------------------------------------------------ top-k
TIE_SCORES = [[0.1, 0.5, 0.4],   # ranking 1, 2, 0
              [0.3, 0.3, 0.2],   # tie 0/1: stable -> 0, 1, 2
              [0.2, 0.2, 0.2]]   # all tied -> 0, 1, 2
TIE_TARGETS = [2, 1, 2]          # ranks of the targets: 1, 1, 2


@pytest.mark.parametrize("k, expected", [
    (1, [False, False, False]),  # target ranks 1, 1, 2 are all >= 1
    (2, [True, True, False]),    # ranks 1, 1 < 2; rank 2 is not
    (3, [True, True, True]),
    (10, [True, True, True]),    # k clipped to C = 3
])
def test_topk_correct_hand(k, expected):
    out = topk_correct(TIE_SCORES, TIE_TARGETS, k)
    assert out.dtype == bool and out.tolist() == expected


def test_topk_tie_lower_index_wins():
    assert topk_correct([[1.0, 1.0]], [0], 1).tolist() == [True]
    assert topk_correct([[1.0, 1.0]], [1], 1).tolist() == [False]


def _naive_rank(row, t):
    """Rank of class t: classes scoring higher, plus equal-scoring classes with a lower index."""
    return sum(1 for j, v in enumerate(row) if v > row[t] or (v == row[t] and j < t))


def test_topk_correct_random_vs_naive():
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 4, size=(300, 7)).astype(float)  # many ties
    targets = rng.integers(0, 7, size=300)
    for k in (1, 2, 5):
        expected = [_naive_rank(r, t) < k for r, t in zip(scores.tolist(), targets.tolist(), strict=True)]
        assert topk_correct(scores, targets, k).tolist() == expected


def test_topk_correct_matches_stable_argsort():
    rng = np.random.default_rng(15)
    scores = rng.integers(0, 3, size=(500, 12)).astype(float)
    targets = rng.integers(0, 12, size=500)
    order = np.argsort(-scores, axis=1, kind="stable")
    for k in (1, 4, 12):
        expected = (order[:, :k] == targets[:, None]).any(axis=1)
        assert (topk_correct(scores, targets, k) == expected).all()


@pytest.mark.parametrize("scores, targets, k", [
    (np.zeros((0, 3)), np.zeros(0, dtype=int), 1),   # empty
    (np.zeros(3), [0, 1, 2], 1),                      # 1-D scores
    (np.zeros((2, 3)), [0], 1),                       # length mismatch
    (np.zeros((2, 3)), [0, 3], 1),                    # target out of range
    (np.zeros((2, 3)), [0, -1], 1),
    (np.zeros((2, 3)), [0.0, 1.0], 1),                # float targets
    (np.zeros((2, 3)), [0, 1], 0),                    # k < 1
    ([[0.0, np.nan]], [0], 1),                        # NaN
])
def test_topk_correct_errors(scores, targets, k):
    with pytest.raises(ValueError):
        topk_correct(scores, targets, k)


# ------------------------------------------------------------------ accuracy
def test_accuracy_hand_and_errors():
    assert accuracy([True, False, True, True]) == 0.75  # 3 / 4
    assert accuracy(np.array([1, 0])) == 0.5            # 0/1 numbers accepted
    for bad in ([], [[True]], [0, 2], ["a"]):
        with pytest.raises(ValueError):
            accuracy(bad)


def test_top1_top5_hand():
    scores = [[0.0, 0.1, 0.2, 0.3, 0.4, 0.5],   # ranking 5 4 3 2 1 0
              [0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
              [0.9, 0.0, 0.0, 0.0, 0.0, 0.0]]
    targets = [0, 1, 0]  # ranks 5, 4, 0
    assert top1(scores, targets) == pytest.approx(1 / 3)  # only rank 0
    assert top5(scores, targets) == pytest.approx(2 / 3)  # ranks 4 and 0 are < 5
    assert top5([[0.0, 1.0]], [0]) == 1.0                  # k clipped to C = 2


def test_torch_tensors_accepted():
    torch = pytest.importorskip("torch")
    scores = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    targets = torch.tensor([1, 1, 1])
    assert top1(scores, targets) == pytest.approx(2 / 3)
    assert accuracy(torch.tensor([True, False])) == 0.5
    assert roc_auc(scores[:, 1], torch.tensor([1, 0, 0])) == 1.0


def test_per_class_accuracy_hand():
    correct = [True, False, True, True, False]
    targets = [0, 0, 2, 2, 2]
    # class 0: 1 of 2; class 2: 2 of 3; class 1 absent -> not reported
    assert per_class_accuracy(correct, targets) == pytest.approx({0: 1 / 2, 2: 2 / 3})
    assert list(per_class_accuracy(correct, targets, num_classes=3)) == [0, 2]
    assert all(type(k) is int for k in per_class_accuracy(correct, targets))
    assert mean_per_class_accuracy(correct, targets) == pytest.approx((1 / 2 + 2 / 3) / 2)  # 7 / 12
    with pytest.raises(ValueError):
        per_class_accuracy(correct, targets, num_classes=2)  # target 2 >= 2
    with pytest.raises(ValueError):
        per_class_accuracy(correct, targets[:4])
    with pytest.raises(ValueError):
        mean_per_class_accuracy([], [])


def test_per_class_accuracy_random_vs_sklearn():
    rng = np.random.default_rng(3)
    targets = rng.choice([0, 2, 3, 7], size=500)  # classes 1, 4, 5, 6 absent
    correct = rng.random(500) < 0.6
    present = np.unique(targets)
    wrong = present[(np.searchsorted(present, targets) + 1) % len(present)]  # another present class
    y_pred = np.where(correct, targets, wrong)
    assert mean_per_class_accuracy(correct, targets) == pytest.approx(balanced_accuracy_score(targets, y_pred))
    per = per_class_accuracy(correct, targets)
    assert per == pytest.approx({int(c): correct[targets == c].mean() for c in present})


# ------------------------------------------------------------------ 11-point AP
def _voc07_ap_loop(scores, positives):
    """Straightforward VOC 2007 devkit loop (sorted ranking, no tie handling), exact-fraction recall."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    n_pos = sum(positives)
    tp = fp = 0
    points = []
    for i in order:
        tp += positives[i]
        fp += not positives[i]
        points.append((Fraction(tp, n_pos), tp / (tp + fp)))
    ap = 0.0
    for j in range(11):
        ps = [p for r, p in points if r >= Fraction(j, 10)]
        ap += max(ps) if ps else 0.0
    return ap / 11


def _threshold_ap_loop(scores, positives):
    """11-point AP from precision/recall of `score >= s` at every distinct score s (tie-aware)."""
    scores, positives = np.asarray(scores), np.asarray(positives, dtype=bool)
    points = []
    for s in np.unique(scores):
        pred = scores >= s
        tp = int((pred & positives).sum())
        points.append((Fraction(tp, int(positives.sum())), tp / int(pred.sum())))
    return sum(max([p for r, p in points if r >= Fraction(j, 10)], default=0.0) for j in range(11)) / 11


def test_ap_11pt_hand():
    # ranking: + - + - -, 2 positives. (recall, precision): (.5, 1), (.5, .5), (1, 2/3), (1, .5), (1, .4)
    # t = 0 .. 0.5 (6 points): max precision at recall >= t is 1; t = 0.6 .. 1 (5 points): 2/3
    # AP = (6 * 1 + 5 * 2/3) / 11 = 28/33
    scores, pos = [0.9, 0.8, 0.7, 0.6, 0.5], [1, 0, 1, 0, 0]
    assert average_precision_11pt(scores, pos) == pytest.approx(28 / 33)
    assert average_precision_11pt([0.9, 0.1], [True, False]) == 1.0
    # recall exactly 0.3 (3 of 10 positives) must count for t = 0.3: first 3 ranked are positive,
    # then 2 negatives, then the other 7 positives. Points: recall .3 precision 1 (t = 0 .. .3, 4 points);
    # recall 1 precision 10/12 (t = .4 .. 1, 7 points). AP = (4 * 1 + 7 * 10/12) / 11
    pos = [1] * 3 + [0] * 2 + [1] * 7
    scores = list(range(12, 0, -1))
    assert average_precision_11pt(scores, pos) == pytest.approx((4 + 7 * 10 / 12) / 11)


def test_ap_11pt_ties_are_order_independent():
    # scores 0.5, 0.5, 0.1 with one positive among the tied pair: the tied pair enters together,
    # precision 1/2 at recall 1 -> AP = 0.5 whichever of the two is the positive
    # (the devkit's sorted order would give 1.0 for [1, 0, 0] and 0.5 for [0, 1, 0]).
    assert average_precision_11pt([0.5, 0.5, 0.1], [1, 0, 0]) == 0.5
    assert average_precision_11pt([0.5, 0.5, 0.1], [0, 1, 0]) == 0.5
    rng = np.random.default_rng(4)
    s, p = rng.integers(0, 3, 50).astype(float), rng.random(50) < 0.4
    perm = rng.permutation(50)
    assert average_precision_11pt(s, p) == average_precision_11pt(s[perm], p[perm])


def test_ap_11pt_random_vs_loops():
    rng = np.random.default_rng(5)
    for _ in range(30):
        n = int(rng.integers(2, 60))
        pos = (rng.random(n) < 0.3).tolist()
        pos[0] = True
        scores = rng.random(n).tolist()  # continuous: no ties, the devkit loop applies
        assert average_precision_11pt(scores, pos) == pytest.approx(_voc07_ap_loop(scores, pos))
        tied = rng.integers(0, 5, n).astype(float)
        assert average_precision_11pt(tied, pos) == pytest.approx(_threshold_ap_loop(tied, pos))


def test_ap_11pt_orders_like_sklearn():
    # 11-point AP and sklearn's (non-interpolated) AP differ in value but must rank clearly
    # different classifiers the same way, and agree on a perfect ranking.
    rng = np.random.default_rng(6)
    pos = rng.random(400) < 0.3
    noise = rng.normal(size=400)
    ours, theirs = [], []
    for strength in (0.0, 1.0, 4.0):
        s = strength * pos + noise
        ours.append(average_precision_11pt(s, pos))
        theirs.append(average_precision_score(pos, s))
    assert np.argsort(ours).tolist() == np.argsort(theirs).tolist() == [0, 1, 2]
    assert average_precision_11pt(pos + 0.1 * noise, pos) == average_precision_score(pos, pos + 0.1 * noise) == 1.0


def test_ap_11pt_vision_evaluation_variant_hand():
    """GenBench scores VOC 2007 with vision-evaluation's 11-point AP, which reads sklearn's precision-recall curve
    and its closing point (recall 0, precision 1): the value at t = 0 is then 1, where the devkit's is the best
    precision reached."""
    # ranking - + - +, 2 positives. (recall, precision): (0, 0), (.5, .5), (.5, 1/3), (1, .5)
    # devkit: every t in 0 .. 1 has max precision .5 -> AP = 0.5
    # vision-evaluation: t = 0 also sees (0, 1) -> (1 + 10 * .5) / 11 = 6/11
    scores, pos = [0.9, 0.8, 0.7, 0.6], [0, 1, 0, 1]
    assert average_precision_11pt(scores, pos) == pytest.approx(0.5)
    assert average_precision_11pt(scores, pos, variant="vision-evaluation") == pytest.approx(6 / 11)
    # a top-ranked positive reaches precision 1 anyway: the two agree (the + - + - - ranking: 28/33)
    top = [0.9, 0.8, 0.7, 0.6, 0.5], [1, 0, 1, 0, 0]
    assert average_precision_11pt(*top, variant="vision-evaluation") == average_precision_11pt(*top) == \
        pytest.approx(28 / 33)
    with pytest.raises(ValueError, match="variant"):
        average_precision_11pt(scores, pos, variant="voc2012")


# ------------------------------------------------------------------ GenBench: each dataset's own metric
def test_genbench_metric_accuracy_and_mean_per_class_hand():
    probs = [[0.6, 0.3, 0.1],   # true 0 -> 0
             [0.5, 0.4, 0.1],   # true 0 -> 0
             [0.7, 0.2, 0.1],   # true 0 -> 0
             [0.6, 0.3, 0.1],   # true 1 -> 0 (wrong)
             [0.2, 0.3, 0.5]]   # true 1 -> 2 (wrong); among the classes with targets (0, 1): 1 (right)
    y = [0, 0, 0, 1, 1]
    # accuracy: 3 of 5 right
    assert genbench_metric("accuracy", probs, y) == pytest.approx(0.6)
    # mean per class as vision-evaluation's BalancedAccuracyScoreEvaluator: class 2 has no target, its column is
    # dropped before the argmax; class 0: 3/3, class 1: 1/2 -> 0.75 (with column 2 kept it would be 0.5)
    assert genbench_metric("mean-per-class", probs, y) == pytest.approx(0.75)
    assert balanced_accuracy_score(y, [0, 0, 0, 0, 1]) == pytest.approx(0.75)  # sklearn on those predictions


def test_genbench_metric_11_point_map_and_roc_auc_hand():
    # class 1's column ranks the samples - + - + (targets 0 1 0 1); class 0's column (1 - it) ranks samples
    # 3, 2, 1, 0: - + - + as well. vision-evaluation's AP of that ranking is 6/11 (above): mAP = 6/11
    probs = [[0.1, 0.9], [0.2, 0.8], [0.3, 0.7], [0.4, 0.6]]
    assert genbench_metric("11-point-map", probs, [0, 1, 0, 1]) == pytest.approx(6 / 11)
    # ROC AUC of class 1's probability: positives {0.9, 0.35} vs negatives {0.4, 0.1}: 0.9 beats both, 0.35
    # beats 0.1 only -> 3 of 4 pairs
    probs = [[0.1, 0.9], [0.6, 0.4], [0.65, 0.35], [0.9, 0.1]]
    assert genbench_metric("roc-auc", probs, [1, 0, 1, 0]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="two classes"):
        genbench_metric("roc-auc", [[0.2, 0.3, 0.5]] * 2, [0, 1])
    with pytest.raises(ValueError, match="both classes"):
        genbench_metric("roc-auc", probs, [1, 1, 1, 1])
    with pytest.raises(ValueError, match="metric must be one of"):
        genbench_metric("top-5", probs, [1, 0, 1, 0])


def test_class_balanced_split_holds_out_the_first_fifth_of_each_class():
    labels = [1, 0, 1, 1, 0, 2, 1, 1, 0, 1, 1]
    # class 0 at 1, 4, 8: ceil(0.6) = 1 -> 1; class 1 at 0, 2, 3, 6, 7, 9, 10: ceil(1.4) = 2 -> 0, 2;
    # class 2 at 5: ceil(0.2) = 1 -> 5
    train, val = class_balanced_split(labels)
    assert val.tolist() == [0, 1, 2, 5]
    assert train.tolist() == [3, 4, 6, 7, 8, 9, 10]


def test_l2_sweep_follows_the_parametric_binary_search():
    asked = []

    def score(value):  # peaks at 10**1.375, a point of the 97-point grid (8 per decade)
        asked.append(round(math.log10(value), 3))
        return 10 - abs(math.log10(value) - 1.375)

    value, best = l2_sweep(score)
    # 7 coarse points: 10**2 scores best (9.375); steps of 8 grid points (a decade): 10**1 (9.625) beats it,
    # 10**3 does not; 4: 10**1.5 (9.875) wins over 10**0.5; 2: 10**1.25 ties (not strictly better), 10**1.75
    # is worse; 1: 10**1.375 (10) wins, 10**1.625 (the old peak's other neighbour) does not
    assert asked == [-6, -4, -2, 0, 2, 4, 6, 1, 3, 0.5, 1.5, 1.25, 1.75, 1.375, 1.625]
    assert value == pytest.approx(10 ** 1.375) and best == 10
    # as Elevater: a peak must score above 0, else the last grid value; ties keep the earlier peak
    assert l2_sweep(lambda v: 0.0) == (1e6, 0.0)
    assert l2_sweep(lambda v: 0.5) == (1e-6, 0.5)


def test_map_11pt_hand_and_absent_class():
    scores = np.array([[0.9, 0.1, 0.3],
                       [0.8, 0.9, 0.3],
                       [0.7, 0.2, 0.3],
                       [0.6, 0.8, 0.3],
                       [0.5, 0.7, 0.3]])
    targets = [0, 1, 0, 1, 1]
    # class 0: the + - + - - ranking above, AP 28/33; class 1: positives 0.9, 0.8, 0.7 rank first, AP 1;
    # class 2: no positives -> skipped.  mAP = (28/33 + 1) / 2 = 61/66
    assert mean_average_precision_11pt(scores, targets) == pytest.approx(61 / 66)
    onehot = np.eye(3, dtype=int)[targets]
    assert mean_average_precision_11pt(scores, onehot) == pytest.approx(61 / 66)
    # multi-label: also mark image 4 positive for class 2; all class-2 scores tie -> precision 1/5 at
    # recall 1 -> AP 0.2.  mAP = (28/33 + 1 + 0.2) / 3
    multi = onehot.copy()
    multi[4, 2] = 1
    assert mean_average_precision_11pt(scores, multi) == pytest.approx((28 / 33 + 1 + 0.2) / 3)


def test_map_11pt_random_vs_loop():
    rng = np.random.default_rng(7)
    scores = rng.random((120, 6))
    targets = rng.choice([0, 1, 2, 4, 5], size=120)  # class 3 absent
    expected = np.mean([_voc07_ap_loop(scores[:, c].tolist(), (targets == c).tolist()) for c in (0, 1, 2, 4, 5)])
    assert mean_average_precision_11pt(scores, targets) == pytest.approx(expected)


@pytest.mark.parametrize("scores, targets", [
    (np.zeros((0, 2)), np.zeros(0, dtype=int)),  # empty
    (np.zeros((3, 2)), np.zeros((3, 2))),        # no class has a positive
    (np.zeros((3, 2)), np.zeros((3, 3))),        # shape mismatch
    (np.zeros((3, 2)), [0, 1]),                  # length mismatch
    (np.zeros((3, 2)), [0, 1, 2]),               # class out of range
    (np.zeros((3, 2)), np.full((3, 2), 2)),      # not 0/1
])
def test_map_11pt_errors(scores, targets):
    with pytest.raises(ValueError):
        mean_average_precision_11pt(scores, targets)


def test_ap_11pt_errors():
    for scores, pos in (([], []), ([0.1, 0.2], [0, 0]), ([0.1, 0.2], [1]), ([np.nan], [1])):
        with pytest.raises(ValueError):
            average_precision_11pt(scores, pos)


# ------------------------------------------------------------------ ROC AUC
def test_roc_auc_binary_hand():
    # positives {0.35, 0.8} vs negatives {0.1, 0.4}: 0.35 beats 0.1 only, 0.8 beats both -> 3/4
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    # tie: positives {0.5, 0.9} vs negatives {0.5, 0.2}: 0.5~0.5 counts 1/2, 0.5>0.2, 0.9 beats both
    # -> 3.5/4. Ranks: 0.2->1, 0.5->2.5, 0.9->4; (2.5 + 4 - 2*3/2) / (2*2) = 0.875
    assert roc_auc([0.5, 0.5, 0.2, 0.9], [True, False, False, True]) == 0.875


def test_roc_auc_multiclass_hand():
    scores = [[0.8, 0.1, 0.0],
              [0.6, 0.2, 0.0],
              [0.7, 0.9, 0.0],
              [0.1, 0.05, 0.0]]
    targets = [0, 0, 1, 1]
    # class 0: pos {0.8, 0.6} vs neg {0.7, 0.1}: 2 + 1 wins of 4 -> 0.75
    # class 1: pos {0.9, 0.05} vs neg {0.1, 0.2}: 2 + 0 wins of 4 -> 0.5
    # class 2: no positives -> skipped. macro = 0.625
    assert roc_auc(scores, targets) == pytest.approx(0.625)
    assert roc_auc(scores, np.eye(3, dtype=int)[targets]) == pytest.approx(0.625)


def test_roc_auc_random_vs_sklearn():
    rng = np.random.default_rng(8)
    y = rng.random(300) < 0.4
    s = rng.integers(0, 6, 300) + y  # ties plus some signal
    assert roc_auc(s, y) == pytest.approx(roc_auc_score(y, s))
    scores = rng.normal(size=(300, 5))
    targets = rng.integers(0, 5, 300)
    onehot = np.eye(5, dtype=int)[targets]
    assert roc_auc(scores, targets) == pytest.approx(roc_auc_score(onehot, scores, average="macro"))
    # a class with no positives is skipped: macro over the remaining classes
    targets = rng.choice([0, 1, 3, 4], 300)
    expected = np.mean([roc_auc_score(targets == c, scores[:, c]) for c in (0, 1, 3, 4)])
    assert roc_auc(scores, targets) == pytest.approx(expected)


@pytest.mark.parametrize("scores, targets", [
    ([], []),                                # empty
    ([0.1, 0.2], [1, 1]),                    # binary: no negatives
    ([0.1, 0.2], [0, 0]),                    # binary: no positives
    ([0.1, 0.2], [0, 2]),                    # binary: not 0/1
    ([0.1, 0.2], [0, 1, 1]),                 # length mismatch
    ([0.1, np.nan], [0, 1]),                 # NaN
    (np.zeros((3, 1)), [0, 0, 0]),           # the only class has no negatives
    (np.zeros((3, 2, 1)), [0, 0, 0]),        # 3-D
])
def test_roc_auc_errors(scores, targets):
    with pytest.raises(ValueError):
        roc_auc(scores, targets)


# ------------------------------------------------------------------ yes / no
@pytest.mark.parametrize("answer, expected", [
    ("yes", "yes"), ("Yes.", "yes"), ("YES", "yes"), ("yes, it is", "yes"), ("  Yeah!", "yes"),
    ("yep", "yes"), ("True", "yes"), ('"Yes"', "yes"),
    ("no", "no"), ("No, it is not.", "no"), ("Nope", "no"), ("false", "no"),
    ("maybe", None), ("", None), ("...", None), ("I think yes", None), ("not sure", None),
    ("yesterday", None), (None, None),
])
def test_normalize_yes_no(answer, expected):
    assert normalize_yes_no(answer) == expected


def test_vqa_binary_accuracy_hand():
    pred = ["yes", "no", "maybe", None, "Yes"]
    truth = ["yes", "no", "no", "yes", "no"]
    # correct: T T F F F ("maybe", None and un-normalized "Yes" are wrong) -> 2/5
    # truth yes at 0, 3: T F -> 1/2;  truth no at 1, 2, 4: T F F -> 1/3
    out = vqa_binary_accuracy(pred, truth)
    assert out == pytest.approx({"accuracy": 0.4, "yes_accuracy": 0.5, "no_accuracy": 1 / 3,
                                 "n": 5, "n_yes": 2, "n_no": 3})
    assert type(out["n"]) is int
    only_yes = vqa_binary_accuracy(["yes", "no"], ["yes", "yes"])
    assert only_yes["yes_accuracy"] == 0.5 and math.isnan(only_yes["no_accuracy"]) and only_yes["n_no"] == 0


def test_vqa_binary_accuracy_random_vs_loop():
    rng = np.random.default_rng(9)
    truth = rng.choice(["yes", "no"], 200).tolist()
    pred = rng.choice(["yes", "no", "other"], 200).tolist()
    out = vqa_binary_accuracy(pred, truth)
    yes = [p == t for p, t in zip(pred, truth, strict=True) if t == "yes"]
    no = [p == t for p, t in zip(pred, truth, strict=True) if t == "no"]
    assert out["accuracy"] == pytest.approx((sum(yes) + sum(no)) / 200)
    assert out["yes_accuracy"] == pytest.approx(sum(yes) / len(yes))
    assert out["no_accuracy"] == pytest.approx(sum(no) / len(no))


@pytest.mark.parametrize("pred, truth", [([], []), (["yes"], ["yes", "no"]), (["yes"], ["maybe"]),
                                         (["yes"], ["Yes"])])
def test_vqa_binary_accuracy_errors(pred, truth):
    with pytest.raises(ValueError):
        vqa_binary_accuracy(pred, truth)


# ------------------------------------------------------------------ bootstrap
def _bootstrap_loop(values, statistic, n_resamples, confidence, seed):
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(n_resamples):
        idx = rng.integers(0, len(values), size=len(values))
        stats.append(statistic(values[idx]))
    stats = np.sort(stats)
    # linear-interpolated quantile by hand: position q * (B - 1)
    def q(p):
        pos = p * (n_resamples - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, n_resamples - 1)
        return stats[lo] + (pos - lo) * (stats[hi] - stats[lo])
    alpha = (1 - confidence) / 2
    return q(alpha), q(1 - alpha)


def test_bootstrap_ci_hand():
    assert bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)  # every resample has mean 3
    assert bootstrap_ci([5.0], n_resamples=10) == (5.0, 5.0)
    # two values 0, 1: a resample mean is 0, 0.5 or 1, so both bounds are among them
    lo, hi = bootstrap_ci([0.0, 1.0], n_resamples=200)
    assert (lo, hi) == (0.0, 1.0)  # P(mean = 0) = P(mean = 1) = 1/4 > 2.5%


def test_bootstrap_ci_vs_loop_and_deterministic():
    rng = np.random.default_rng(10)
    values = rng.normal(size=80)
    for stat in (np.mean, np.median):
        ci = bootstrap_ci(values, stat, n_resamples=500, confidence=0.9, seed=3)
        assert ci == pytest.approx(_bootstrap_loop(values, stat, 500, 0.9, 3), rel=0, abs=1e-12)
        assert ci == bootstrap_ci(values, stat, n_resamples=500, confidence=0.9, seed=3)
        assert ci[0] <= stat(values) <= ci[1]
    assert bootstrap_ci(values, seed=0) != bootstrap_ci(values, seed=1)
    wide, narrow = bootstrap_ci(values, confidence=0.99), bootstrap_ci(values, confidence=0.5)
    assert wide[0] < narrow[0] < narrow[1] < wide[1]


def test_bootstrap_ci_rows():
    # (N, 2) resampled along axis 0: paired difference of two models' correctness per image
    rng = np.random.default_rng(11)
    pairs = rng.random((100, 2)) < [0.7, 0.5]
    def diff(a):
        return a[:, 0].mean() - a[:, 1].mean()
    ci = bootstrap_ci(pairs, diff, n_resamples=300, seed=5)
    assert ci == pytest.approx(_bootstrap_loop(pairs, diff, 300, 0.95, 5), rel=0, abs=1e-12)
    assert ci[0] <= diff(pairs) <= ci[1]


def test_bootstrap_ci_is_scipys_on_the_values_themselves():
    # bootstrap_ci resamples row indices (any (N, ...) array); scipy resampling the values draws the same rows
    values = np.random.default_rng(12).normal(size=201)
    ours = bootstrap_ci(values, np.mean, n_resamples=4000, seed=0)
    ref = sps.bootstrap((values,), np.mean, n_resamples=4000, method="percentile",
                        rng=np.random.default_rng(0)).confidence_interval
    assert ours == pytest.approx((ref.low, ref.high), rel=0, abs=1e-12)


@pytest.mark.parametrize("kwargs", [
    {"values": []}, {"values": 3.0}, {"values": [1.0], "n_resamples": 0},
    {"values": [1.0], "confidence": 1.0}, {"values": [1.0], "confidence": 0.0},
    {"values": [1.0, 2.0], "statistic": lambda a: a},  # not a scalar
])
def test_bootstrap_ci_errors(kwargs):
    with pytest.raises(ValueError):
        bootstrap_ci(**kwargs)


# ------------------------------------------------------------------ Cohen's kappa
def test_cohen_kappa_hand():
    from gensets.metrics import cohen_kappa

    # 10 items, agree on 7 (p_o = 0.7); a: 6 acc / 4 rej, b: 5 acc / 5 rej -> p_e = .6*.5 + .4*.5 = 0.5
    a = ["acc"] * 6 + ["rej"] * 4
    b = ["acc"] * 4 + ["rej"] * 2 + ["acc"] + ["rej"] * 3
    assert cohen_kappa(a, b) == pytest.approx((0.7 - 0.5) / 0.5)
    assert cohen_kappa(["x", "y"], ["x", "y"]) == 1.0
    assert cohen_kappa(["x", "y"], ["y", "x"]) == pytest.approx(-1.0)
    assert math.isnan(cohen_kappa(["x", "x"], ["x", "x"]))  # one label only: undefined
    for x, y in (([], []), (["a"], ["a", "b"])):
        with pytest.raises(ValueError):
            cohen_kappa(x, y)


@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa_matches_sklearn(seed):
    from sklearn.metrics import cohen_kappa_score

    from gensets.metrics import cohen_kappa

    rng = np.random.default_rng(seed)
    labels = ["accepted", "rejected", "relabeled:teapot", "relabeled:mug"][: 2 + seed % 3]
    a = rng.choice(labels, size=200)
    b = np.where(rng.random(200) < 0.6, a, rng.choice(labels, size=200))
    assert cohen_kappa(a.tolist(), b.tolist()) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    ints_a, ints_b = rng.integers(0, 5, 50), rng.integers(0, 5, 50)
    assert cohen_kappa(ints_a, ints_b) == pytest.approx(cohen_kappa_score(ints_a, ints_b), abs=1e-12)


def test_topk_count_per_id_is_the_imagenet_d_authors_arithmetic():
    """By hand, ImageNet-D's alarm_clock (ImageNet ids 409 analog clock, 530 digital clock): the authors'
    evaluate_imagenet_models.py adds correct[:5].sum() once per id, so a top 5 holding both counts 2."""
    from gensets import metrics as M

    assert M.topk_count_per_id([409, 530, 1, 2, 3], [409, 530]) == 2  # both ids in the top 5
    assert M.topk_count_per_id([5, 6, 7, 8, 530], [409, 530]) == 1
    assert M.topk_count_per_id([0, 1, 2, 3, 4], [409, 530]) == 0
    assert M.topk_count_per_id([409, 530, 1, 2, 3], [409, 530], k=1) == 1  # top-1: at most one id is first
    assert M.topk_count_per_id([409, 530], [409, 530, -1, -1]) == 2  # their -1 padding never matches
    with pytest.raises(ValueError):
        M.topk_count_per_id([1], [1], k=0)
