"""Evaluation metrics: pure functions over numpy arrays.

Every function accepts array-likes (lists, numpy arrays, CPU torch tensors) through ``np.asarray`` and
raises ``ValueError`` with a clear message on bad shapes, empty inputs or out-of-range labels.

Conventions:

* ``scores`` is ``(N, C)``: one row per image, one column per class, higher means more likely.
* ``targets`` is ``(N,)`` integer class ids in ``[0, C)``; where noted, an ``(N, C)`` 0/1 matrix is also
  accepted (multi-label).
* ``correct`` is ``(N,)`` bool (0/1 numbers are accepted too).
* Top-k ties: classes are ranked by a *stable* argsort of ``-scores``, so among equal scores the lower
  class index ranks first.
* Ranking metrics (AP, AUC) are tie-aware and do not depend on the order of the samples.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

__all__ = [
    "accuracy", "all_fail_all_succeed", "all_fail_all_succeed_overall", "average_precision_11pt",
    "bootstrap_ci", "cohen_kappa", "failure_transfer", "mean_average_precision_11pt", "mean_per_class_accuracy",
    "normalize_yes_no", "per_class_accuracy", "roc_auc", "top1", "top5", "topk_correct",
    "topk_correct_any", "vqa_binary_accuracy",
]


# ------------------------------------------------------------------ validation helpers
def _scores_2d(scores: Any) -> np.ndarray:
    s = np.asarray(scores)
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)  # float32 etc. stay as they are: no copy of a big score matrix
    if s.ndim != 2:
        raise ValueError(f"scores must be 2-D (N, C), got shape {s.shape}")
    if s.shape[0] == 0 or s.shape[1] == 0:
        raise ValueError(f"scores must be non-empty, got shape {s.shape}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    return s


def _bool_array(x: Any, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if a.dtype != np.bool_:
        if not (np.issubdtype(a.dtype, np.number) and np.isin(a, (0, 1)).all()):
            raise ValueError(f"{name} must be bool or 0/1, got dtype {a.dtype}")
        a = a.astype(bool)
    return a


def _int_labels(targets: Any, n: int, num_classes: int | None, name: str = "targets") -> np.ndarray:
    t = np.asarray(targets)
    if t.ndim != 1:
        raise ValueError(f"{name} must be 1-D (N,), got shape {t.shape}")
    if t.shape[0] != n:
        raise ValueError(f"{name} has length {t.shape[0]}, expected {n}")
    if n == 0:
        raise ValueError(f"{name} is empty")
    if not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"{name} must be integer class ids, got dtype {t.dtype}")
    if t.min() < 0 or (num_classes is not None and t.max() >= num_classes):
        raise ValueError(f"{name} must lie in [0, {num_classes}), got range [{t.min()}, {t.max()}]")
    return t.astype(np.int64)


def _positives(targets: Any, shape: tuple[int, int]) -> np.ndarray:
    """(N,) class ids or (N, C) 0/1 matrix -> (N, C) bool matrix of positives."""
    t = np.asarray(targets)
    if t.ndim == 2:
        if t.shape != shape:
            raise ValueError(f"targets shape {t.shape} does not match scores shape {shape}")
        return _bool_array(t, "targets", 2)
    labels = _int_labels(t, shape[0], shape[1])
    pos = np.zeros(shape, dtype=bool)
    pos[np.arange(shape[0]), labels] = True
    return pos


# ------------------------------------------------------------------ top-k accuracy
def _rank_of(s: np.ndarray, rows: np.ndarray, cols: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Position of class ``cols[j]`` in the stable argsort of ``-s[rows[j]]``: the number of classes
    scoring higher plus the equal-scoring classes with a lower index. O(C) per pair, no sort."""
    out = np.empty(len(rows), dtype=np.int64)
    arange = np.arange(s.shape[1])
    for a in range(0, len(rows), chunk):
        r, c = rows[a:a + chunk], cols[a:a + chunk]
        sub, v = s[r], s[r, c][:, None]
        out[a:a + chunk] = (sub > v).sum(axis=1) + ((sub == v) & (arange < c[:, None])).sum(axis=1)
    return out


def topk_correct(scores: Any, targets: Any, k: int = 1) -> np.ndarray:
    """Per image, whether ``targets[i]`` is among the ``k`` highest-scoring classes of ``scores[i]``.

    Classes are ranked by a stable argsort of ``-scores`` (ties: lower class index ranks first).
    ``k`` larger than ``C`` is clipped to ``C`` (every image is then a hit). Returns ``(N,)`` bool.
    """
    s = _scores_2d(scores)
    t = _int_labels(targets, s.shape[0], s.shape[1])
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return _rank_of(s, np.arange(s.shape[0]), t) < k


def topk_correct_any(scores: Any, target_sets: Sequence[Sequence[int]], k: int = 1) -> np.ndarray:
    """Per image, whether ANY index of ``target_sets[i]`` is among the top ``k`` classes of ``scores[i]``.

    For labels that map to several classes (ImageNet-D: one category -> several ImageNet ids). Same tie
    rule as :func:`topk_correct`. Every target set must be non-empty. Returns ``(N,)`` bool.
    """
    s = _scores_2d(scores)
    n, c = s.shape
    if len(target_sets) != n:
        raise ValueError(f"target_sets has length {len(target_sets)}, expected {n}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    rows, cols = [], []
    for i, ts in enumerate(target_sets):
        try:
            idx = np.asarray(list(ts))
        except TypeError:
            raise ValueError(f"target_sets[{i}] must be a sequence of ints, got {ts!r}") from None
        if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"target_sets[{i}] must be a non-empty sequence of ints, got {ts!r}")
        if idx.min() < 0 or idx.max() >= c:
            raise ValueError(f"target_sets[{i}] has ids outside [0, {c}): {ts!r}")
        rows.append(np.full(idx.size, i))
        cols.append(idx)
    rows_a = np.concatenate(rows)
    hit = _rank_of(s, rows_a, np.concatenate(cols)) < k
    return np.bincount(rows_a, weights=hit, minlength=n) > 0


def accuracy(correct: Any) -> float:
    """Fraction of True entries in ``correct`` (N,)."""
    return float(_bool_array(correct, "correct", 1).mean())


def top1(scores: Any, targets: Any) -> float:
    """Top-1 accuracy: ``accuracy(topk_correct(scores, targets, 1))``."""
    return accuracy(topk_correct(scores, targets, 1))


def top5(scores: Any, targets: Any) -> float:
    """Top-5 accuracy: ``accuracy(topk_correct(scores, targets, 5))`` (k clipped to C)."""
    return accuracy(topk_correct(scores, targets, 5))


def per_class_accuracy(correct: Any, targets: Any, num_classes: int | None = None) -> dict[int, float]:
    """Accuracy within each class: ``{c: mean(correct[targets == c])}`` for the classes present only.

    ``num_classes``, if given, only validates that every target is below it. Keys are sorted ints.
    """
    ok = _bool_array(correct, "correct", 1)
    t = _int_labels(targets, ok.shape[0], num_classes)
    classes, inverse = np.unique(t, return_inverse=True)
    hits = np.bincount(inverse, weights=ok, minlength=len(classes))
    counts = np.bincount(inverse, minlength=len(classes))
    return {int(c): float(h / m) for c, h, m in zip(classes, hits, counts, strict=True)}


def mean_per_class_accuracy(correct: Any, targets: Any) -> float:
    """Unweighted mean of :func:`per_class_accuracy` over the classes present in ``targets``."""
    return float(np.mean(list(per_class_accuracy(correct, targets).values())))


# ------------------------------------------------------------------ ranking metrics
def average_precision_11pt(scores: Any, positives: Any) -> float:
    """VOC 11-point interpolated average precision of one ranking.

    ``AP = mean over t in {0, 0.1, ..., 1.0} of max{precision(r) : recall(r) >= t}`` (0 if no point
    reaches recall ``t``), where the precision/recall points are those of thresholding at each distinct
    score (``score >= s``): tied scores enter together, so the result does not depend on sample order.
    Without ties this is the PASCAL VOC 2007 devkit value (recall is compared with exact tenths, where the
    devkit's float thresholds can miss e.g. recall == 0.3). ``positives`` must contain a positive.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be non-empty 1-D, got shape {s.shape}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    pos = _bool_array(positives, "positives", 1)
    if pos.shape != s.shape:
        raise ValueError(f"positives shape {pos.shape} does not match scores shape {s.shape}")
    n_pos = int(pos.sum())
    if n_pos == 0:
        raise ValueError("average precision is undefined without positives")
    order = np.argsort(-s, kind="stable")
    s_sorted, tp = s[order], np.cumsum(pos[order])
    last_of_tie = np.r_[s_sorted[1:] != s_sorted[:-1], True]  # one PR point per distinct score
    tp = tp[last_of_tie]
    n_pred = np.flatnonzero(last_of_tie) + 1
    precision = tp / n_pred
    ap = 0.0
    for j in range(11):  # recall >= j/10, compared in integers: no 0.1 * 3 != 0.3 surprises
        reached = 10 * tp >= j * n_pos
        ap += precision[reached].max() if reached.any() else 0.0
    return float(ap / 11)


def mean_average_precision_11pt(scores: Any, targets: Any) -> float:
    """Mean over classes of :func:`average_precision_11pt` of ``scores[:, c]`` against class-c positives.

    ``targets`` is ``(N,)`` class ids or an ``(N, C)`` 0/1 matrix. Classes without any positive are
    skipped; ValueError when no class has one.
    """
    s = _scores_2d(scores)
    pos = _positives(targets, s.shape)
    present = np.flatnonzero(pos.any(axis=0))
    if present.size == 0:
        raise ValueError("no class has a positive sample")
    return float(np.mean([average_precision_11pt(s[:, c], pos[:, c]) for c in present]))


def _binary_auc(scores: np.ndarray, pos: np.ndarray) -> float:
    """Mann-Whitney U / (n_pos * n_neg) with average ranks for ties (a tie counts 1/2)."""
    n_pos = int(pos.sum())
    n_neg = pos.size - n_pos
    ranks = rankdata(scores)  # 'average' method
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def roc_auc(scores: Any, targets: Any) -> float:
    """ROC AUC via the rank (Mann-Whitney U) formula, ties getting average ranks (i.e. counting 1/2).

    * ``scores`` (N,), ``targets`` (N,) 0/1: binary AUC; ValueError unless both classes occur.
    * ``scores`` (N, C), ``targets`` (N,) class ids or (N, C) 0/1: macro one-vs-rest mean over classes
      with at least one positive and one negative; ValueError when there is none.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 1:
        if s.size == 0:
            raise ValueError("scores is empty")
        if np.isnan(s).any():
            raise ValueError("scores contain NaN")
        pos = _bool_array(targets, "targets", 1)
        if pos.shape != s.shape:
            raise ValueError(f"targets shape {pos.shape} does not match scores shape {s.shape}")
        if pos.all() or not pos.any():
            raise ValueError("binary ROC AUC needs both positive and negative samples")
        return _binary_auc(s, pos)
    s = _scores_2d(s)
    pos = _positives(targets, s.shape)
    n_pos = pos.sum(axis=0)
    usable = np.flatnonzero((n_pos > 0) & (n_pos < s.shape[0]))
    if usable.size == 0:
        raise ValueError("no class has both positive and negative samples")
    return float(np.mean([_binary_auc(s[:, c], pos[:, c]) for c in usable]))


# ------------------------------------------------------------------ yes/no questions
_YES, _NO = {"yes", "yeah", "yep", "true"}, {"no", "nope", "false"}


def normalize_yes_no(answer: str) -> str | None:
    """Map a free-form answer to ``"yes"``/``"no"`` by its first word, else None.

    The first run of letters after lowercasing: yes/yeah/yep/true -> "yes", no/nope/false -> "no".
    So "Yes.", "YES", "yes, it is" -> "yes"; "Nope" -> "no"; "maybe", "" , "not sure" -> None.
    """
    if not isinstance(answer, str):
        return None
    m = re.search(r"[a-z]+", answer.lower())
    word = m.group(0) if m else ""
    return "yes" if word in _YES else "no" if word in _NO else None


def vqa_binary_accuracy(pred: Sequence[Any], truth: Sequence[str]) -> dict[str, float | int]:
    """Accuracy of yes/no answers. ``pred`` is compared exactly to ``truth``; anything that is not
    exactly "yes"/"no" (e.g. None, "Yes", "maybe") counts as wrong, so normalize first
    (:func:`normalize_yes_no`). ``truth`` must be all "yes"/"no".

    Returns ``accuracy``, ``yes_accuracy`` (over questions whose truth is "yes"; NaN if none),
    ``no_accuracy`` (likewise), and the counts ``n``, ``n_yes``, ``n_no``.
    """
    pred, truth = list(pred), list(truth)
    if len(pred) != len(truth):
        raise ValueError(f"pred has length {len(pred)}, truth has length {len(truth)}")
    if not truth:
        raise ValueError("no questions")
    bad = {t for t in truth if t not in ("yes", "no")}
    if bad:
        raise ValueError(f"truth must be 'yes' or 'no', got {sorted(map(repr, bad))}")
    ok = np.array([isinstance(p, str) and p == t for p, t in zip(pred, truth, strict=True)])
    is_yes = np.array([t == "yes" for t in truth])
    n_yes, n_no = int(is_yes.sum()), int((~is_yes).sum())
    return {
        "accuracy": float(ok.mean()),
        "yes_accuracy": float(ok[is_yes].mean()) if n_yes else float("nan"),
        "no_accuracy": float(ok[~is_yes].mean()) if n_no else float("nan"),
        "n": len(truth), "n_yes": n_yes, "n_no": n_no,
    }


# ------------------------------------------------------------------ uncertainty
def bootstrap_ci(values: Any, statistic: Callable[[np.ndarray], Any] = np.mean, n_resamples: int = 1000,
                 confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``statistic(values)``.

    ``values`` is ``(N,)`` or ``(N, ...)``; each resample draws N rows along axis 0 with replacement,
    ``idx = rng.integers(0, N, size=N)`` from ``np.random.default_rng(seed)``, one draw per resample in
    order, and evaluates ``statistic(values[idx])`` (must return a scalar). The interval is the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (``np.quantile``, linear) of the
    resampled statistics. Deterministic for a seed. Agrees with
    ``scipy.stats.bootstrap(method='percentile')`` only up to Monte-Carlo error (different draws).
    """
    v = np.asarray(values)
    if v.ndim == 0 or v.shape[0] == 0:
        raise ValueError(f"values must have at least one row along axis 0, got shape {v.shape}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    n = v.shape[0]
    stats = np.empty(n_resamples)
    for b in range(n_resamples):
        st = np.asarray(statistic(v[rng.integers(0, n, size=n)]))
        if st.size != 1:
            raise ValueError(f"statistic must return a scalar, got shape {st.shape}")
        stats[b] = st.item()
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha])
    return float(lo), float(hi)


# ------------------------------------------------------------------ failure analysis (Borji 2022)
def all_fail_all_succeed(correct: Any, labels: Any) -> dict[Any, dict[str, float | int]]:
    """Per label, the fraction of its images that EVERY model gets wrong / EVERY model gets right.

    ``correct`` is ``(M models, N images)`` bool, ``labels`` ``(N,)`` (ints or strings). Returns
    ``{label: {"n": images, "all_fail": frac, "all_succeed": frac}}`` with labels as Python scalars in
    sorted order (Borji 2022, Fig. 2). See :func:`all_fail_all_succeed_overall` for all images.
    """
    ok = _bool_array(correct, "correct", 2)
    lab = np.asarray(labels)
    if lab.shape != (ok.shape[1],):
        raise ValueError(f"labels shape {lab.shape} does not match correct's N = {ok.shape[1]}")
    fail, succeed = ~ok.any(axis=0), ok.all(axis=0)
    out: dict[Any, dict[str, float | int]] = {}
    for label in np.unique(lab):
        sel = lab == label
        out[label.item()] = {"n": int(sel.sum()), "all_fail": float(fail[sel].mean()),
                             "all_succeed": float(succeed[sel].mean())}
    return out


def all_fail_all_succeed_overall(correct: Any) -> tuple[float, float]:
    """``(all_fail, all_succeed)``: fraction of images every model fails / every model gets right.

    ``correct`` is ``(M models, N images)`` bool.
    """
    ok = _bool_array(correct, "correct", 2)
    return float((~ok.any(axis=0)).mean()), float(ok.all(axis=0).mean())


def failure_transfer(surrogate_failed: Any, heldout_correct: Any) -> float:
    """Of the images that failed the surrogate model(s), the fraction the held-out model ALSO fails:
    ``mean(~heldout_correct[surrogate_failed])``. NaN when no image failed the surrogates (undefined).
    """
    failed = _bool_array(surrogate_failed, "surrogate_failed", 1)
    held = _bool_array(heldout_correct, "heldout_correct", 1)
    if failed.shape != held.shape:
        raise ValueError(f"shape mismatch: surrogate_failed {failed.shape}, heldout_correct {held.shape}")
    if not failed.any():
        return float("nan")
    return float((~held[failed]).mean())


# ------------------------------------------------------------------ agreement between two raters
def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Cohen's kappa of two raters' labels for the same items: ``(p_o - p_e) / (1 - p_e)``.

    ``a[i]`` and ``b[i]`` are the two labels of item i (any hashable values: strings, ints). ``p_o`` is
    the fraction of items where they agree; ``p_e`` the agreement expected by chance,
    ``sum_c freq_a(c) * freq_b(c)``. 1 is perfect agreement, 0 chance level, < 0 worse than chance.
    NaN when ``p_e == 1`` (both raters used one and the same label throughout: undefined), as
    ``sklearn.metrics.cohen_kappa_score`` returns.
    """
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"a has length {len(a)}, b has length {len(b)}")
    if not a:
        raise ValueError("no items")
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b, strict=True)) / n
    count_a, count_b = {}, {}
    for x, y in zip(a, b, strict=True):
        count_a[x] = count_a.get(x, 0) + 1
        count_b[y] = count_b.get(y, 0) + 1
    p_e = sum(c * count_b.get(label, 0) for label, c in count_a.items()) / (n * n)
    if p_e == 1:
        return float("nan")
    return float((p_o - p_e) / (1 - p_e))
