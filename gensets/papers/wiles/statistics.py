"""Failure-mode discovery (Wiles et al. 2022): the pure pieces, no models.

Clustering. The misclassified images of one label are clustered on their L2-normalised embeddings
with scikit-learn's KMeans (``n_init=10``, ``random_state=seed``, one thread). The number of clusters
is chosen by this rule: for every k in ``2 .. min(max_k, n - 1, distinct rows)`` fit KMeans and compute the mean
silhouette (cosine distance); take the k with the highest silhouette (ties: the smaller k). If fewer
than 3 images failed, or the best silhouette is below ``min_silhouette``, there is one cluster.
Clusters are numbered by their first member in key order, so the numbering is stable.

Medoid. The member with the smallest sum of cosine distances to the other members (ties: first key).

Statistics. A mode's regenerated images are compared with its label's baseline images:
``fisher`` (default) is the one-sided Fisher exact test of the 2x2 table
``[[fail_mode, ok_mode], [fail_base, ok_base]]`` with ``alternative="greater"`` (the mode's odds of
failure are higher); ``binomial`` is the one-sided binomial test of ``fail_mode`` out of ``n_mode``
against the baseline rate ``fail_base / n_base`` taken as known. The same test is applied to the
mode's specific confusion (images predicted as the cluster's most frequent wrong class). P-values are
corrected across all tested modes of a build with Holm (family-wise error, default) or
Benjamini-Hochberg (false discovery rate); a mode is *discovered* when its corrected failure p-value
is at most ``alpha``.

Target labels (Wiles et al. 2022's true -> target pairs, e.g. Persian cat -> snow leopard). For each mode
given (the builder gives its discovered ones), every class its failed images are confused with (their top-1)
is tested against the baseline rate of that same confusion, by the same one-sided test; the p-values are
corrected together over all the pairs given (:func:`compare_targets`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

TESTS = ("fisher", "binomial")
CORRECTIONS = ("holm", "bh")


# ------------------------------------------------------------------ clustering
@dataclass(frozen=True)
class Clustering:
    labels: list[int]  # cluster of each input row, numbered by first member
    k: int
    silhouette: float | None  # of the chosen k (None when k == 1)
    scores: dict[int, float]  # silhouette of every k tried


def normalize(x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"embeddings must be a non-empty (N, D) array, got shape {a.shape}")
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    if (norms == 0).any() or not np.isfinite(a).all():
        raise ValueError("embeddings contain a zero, NaN or inf row")
    return a / norms


def _renumber(labels: Sequence[int]) -> list[int]:
    """Clusters numbered 0, 1, ... in the order of their first row."""
    order: dict[int, int] = {}
    for lab in labels:
        order.setdefault(int(lab), len(order))
    return [order[int(lab)] for lab in labels]


def cluster(embeddings, *, max_k: int = 8, min_silhouette: float = 0.1, seed: int = 0) -> Clustering:
    """Cluster rows (already in key order) by the silhouette rule of the module docstring."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score
    from threadpoolctl import threadpool_limits

    x = normalize(embeddings)
    n = x.shape[0]
    if max_k < 1:
        raise ValueError(f"max_k must be at least 1, got {max_k}")
    scores: dict[int, float] = {}
    fits: dict[int, list[int]] = {}
    distinct = len(np.unique(x.round(12), axis=0))  # duplicates cannot make more clusters than this
    with threadpool_limits(1):  # the same result on any machine: no thread-count-dependent reductions
        for k in range(2, min(max_k, n - 1, distinct) + 1):
            labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
            scores[k] = round(float(silhouette_score(x, labels, metric="cosine")), 12)
            fits[k] = labels.tolist()
    if not scores or max(scores.values()) < min_silhouette:
        return Clustering([0] * n, 1, None, scores)
    best = max(scores.values())
    k = min(k for k, s in scores.items() if s == best)
    return Clustering(_renumber(fits[k]), k, best, scores)


def medoid(embeddings, members: Sequence[int]) -> int:
    """The row index (one of ``members``) with the smallest sum of cosine distances to the others."""
    if not members:
        raise ValueError("medoid of an empty cluster")
    x = normalize(embeddings)[list(members)]
    dist = 1.0 - x @ x.T
    return list(members)[int(np.argmin(dist.sum(axis=1).round(12)))]


def most_common(values: Sequence[int]) -> int | None:
    """The most frequent value (ties: the smallest), None for no values."""
    if not values:
        return None
    counts = Counter(int(v) for v in values)
    top = max(counts.values())
    return min(v for v, c in counts.items() if c == top)


# ------------------------------------------------------------------ statistics
def _check_counts(k: int, n: int, what: str) -> None:
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"{what}: need 0 <= failures <= n and n >= 1, got {k} of {n}")


def fisher_greater(fail_new: int, n_new: int, fail_base: int, n_base: int) -> float:
    """One-sided Fisher exact p-value that the new failure rate exceeds the baseline's."""
    from scipy.stats import fisher_exact

    _check_counts(fail_new, n_new, "new")
    _check_counts(fail_base, n_base, "baseline")
    table = [[fail_new, n_new - fail_new], [fail_base, n_base - fail_base]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def binomial_greater(fail_new: int, n_new: int, fail_base: int, n_base: int) -> float:
    """One-sided binomial p-value of ``fail_new`` of ``n_new`` against the baseline rate as known."""
    from scipy.stats import binomtest

    _check_counts(fail_new, n_new, "new")
    _check_counts(fail_base, n_base, "baseline")
    return float(binomtest(fail_new, n_new, fail_base / n_base, alternative="greater").pvalue)


def p_greater(test: str, fail_new: int, n_new: int, fail_base: int, n_base: int) -> float:
    if test == "fisher":
        return fisher_greater(fail_new, n_new, fail_base, n_base)
    if test == "binomial":
        return binomial_greater(fail_new, n_new, fail_base, n_base)
    raise ValueError(f"unknown test {test!r} (expected one of {', '.join(TESTS)})")




def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values: ``max_{j<=i} min(1, (m - j + 1) p_(j))`` in sorted order.

    Written out: scipy has no Holm correction (``false_discovery_control`` is BH / BY only) and statsmodels'
    ``multipletests`` is not a dependency; tests/test_failure_modes.py checks it on a hand-worked example."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out.tolist()


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values, ``min_{j>=i} min(1, m p_(j) / j)`` in sorted order:
    ``scipy.stats.false_discovery_control(method="bh")``."""
    from scipy.stats import false_discovery_control

    return false_discovery_control(np.asarray(pvalues, dtype=np.float64), method="bh").tolist()


def correct(pvalues: Sequence[float], method: str) -> list[float]:
    if not len(pvalues):
        return []
    if method == "holm":
        return holm(pvalues)
    if method == "bh":
        return benjamini_hochberg(pvalues)
    raise ValueError(f"unknown correction {method!r} (expected one of {', '.join(CORRECTIONS)})")


def compare(modes: list[dict], baseline: dict[str, dict], *, test: str = "fisher", correction: str = "holm",
            alpha: float = 0.05) -> list[dict]:
    """Each mode (``label``, ``n``, ``failures``, ``confusion``, ``confused``) against its label's
    baseline (``n``, ``failures``, ``confusions``: {class: count}); returns the modes with p-values,
    corrected p-values and ``discovered``. Corrections run over all modes given."""
    out = []
    for m in modes:
        b = baseline[m["label"]]
        conf_base = b["confusions"].get(m["confusion"], 0) if m["confusion"] is not None else 0
        out.append({**m, "baseline_n": b["n"], "baseline_failures": b["failures"],
                    "baseline_confused": conf_base,
                    "p_failure": p_greater(test, m["failures"], m["n"], b["failures"], b["n"]),
                    "p_confusion": p_greater(test, m["confused"], m["n"], conf_base, b["n"])})
    for key in ("p_failure", "p_confusion"):
        for m, adj in zip(out, correct([m[key] for m in out], correction), strict=True):
            m[f"{key}_adjusted"] = adj
    for m in out:
        m["discovered"] = bool(m["p_failure_adjusted"] <= alpha)
    return out


def compare_targets(modes: list[dict], baseline: dict[str, dict], *, test: str = "fisher", correction: str = "holm",
                    alpha: float = 0.05) -> list[dict]:
    """True -> target pairs: for each mode (``id``, ``label``, ``n``, ``confusions``: {class: count of its
    failed images with that top-1}), each class it is confused with, tested against its label's baseline
    count of the same confusion (``n``, ``confusions``). Rows in mode order, then most confused first (ties:
    smaller class); p-values corrected over all rows; ``significant`` when the corrected p is at most ``alpha``."""
    rows = []
    for m in modes:
        b = baseline[m["label"]]
        for target, count in sorted(m["confusions"].items(), key=lambda kv: (-kv[1], kv[0])):
            base = b["confusions"].get(target, 0)
            rows.append({"mode": m["id"], "label": m["label"], "target": int(target), "n": m["n"], "confused": count,
                         "baseline_n": b["n"], "baseline_confused": base,
                         "p": p_greater(test, count, m["n"], base, b["n"])})
    for r, adj in zip(rows, correct([r["p"] for r in rows], correction), strict=True):
        r["p_adjusted"] = adj
        r["significant"] = bool(adj <= alpha)
    return rows
