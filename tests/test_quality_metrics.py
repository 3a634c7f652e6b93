"""CLER and the quality metrics of generated data, each against a hand-computed value or a plain reference."""

import math

import numpy as np
import pytest

from gensets import metrics as M

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


def test_frechet_distance_equals_scipy_sqrtm():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 6)) @ rng.normal(size=(6, 6))
    y = rng.normal(loc=0.5, size=(250, 6)) @ rng.normal(size=(6, 6))
    mu1, mu2 = x.mean(0), y.mean(0)
    s1, s2 = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    direct = ((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * sqrtm(s1 @ s2).real)
    assert abs(M.frechet_distance(x, y) - direct) < 1e-6
    assert abs(M.frechet_distance(x, x)) < 1e-6
    with pytest.raises(ValueError, match="at least 2 rows"):
        M.frechet_distance(x[:1], y)


def _poly(a, b):
    return (sum(p * q for p, q in zip(a, b, strict=True)) / len(a) + 1) ** 3


def test_kid_matches_a_loop_reference():
    rng = np.random.default_rng(2)
    real, fake = rng.normal(size=(30, 4)), rng.normal(0.3, 1.2, size=(25, 4))
    draws = np.random.default_rng(7)
    values = []
    for _ in range(5):
        r = real[draws.choice(30, 10, replace=False)]
        f = fake[draws.choice(25, 10, replace=False)]
        m = 10
        xx = sum(_poly(r[i], r[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
        yy = sum(_poly(f[i], f[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
        xy = sum(_poly(r[i], f[j]) for i in range(m) for j in range(m)) / (m * m)
        values.append(xx + yy - 2 * xy)
    assert M.kid(real, fake, subsets=5, subset_size=10, seed=7) == pytest.approx(np.mean(values), rel=1e-9)
    # subset size is capped by the smaller set
    assert M.kid(real, fake, subsets=3, subset_size=1000) == M.kid(real, fake, subsets=3, subset_size=25)


def test_inception_score_matches_the_formula():
    assert M.inception_score(np.eye(4)) == pytest.approx(4.0)  # confident and diverse: C
    assert M.inception_score(np.full((5, 3), 1 / 3)) == pytest.approx(1.0)  # uniform: 1
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(12, 5))
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    scores = []
    for part in (p[:6], p[6:]):
        py = part.mean(0)
        kl = [sum(pi[c] * math.log(pi[c] / py[c]) for c in range(5)) for pi in part]
        scores.append(math.exp(sum(kl) / len(kl)))
    assert M.inception_score(p, splits=2) == pytest.approx(np.mean(scores), rel=1e-12)
    with pytest.raises(ValueError, match="softmax"):
        M.inception_score(logits)


def test_clip_score_is_100_times_clipped_cosine():
    img = [[1, 0], [0, 2], [1, 1]]
    txt = [[2, 0], [0, -1], [1, 0]]  # cos 1, -1 (-> 0), 1/sqrt(2)
    assert M.clip_score(img, txt) == pytest.approx(100 * (1 + 0 + 1 / math.sqrt(2)) / 3)
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(7, 3)), rng.normal(size=(7, 3))
    ref = np.mean([100 * max(x @ y / np.linalg.norm(x) / np.linalg.norm(y), 0) for x, y in zip(a, b, strict=True)])
    assert M.clip_score(a, b) == pytest.approx(ref)


def _pr_reference(real, fake, k):
    def radius(points, i):
        d = sorted(np.linalg.norm(points[i] - points[j]) for j in range(len(points)) if j != i)
        return d[k - 1]

    rr = [radius(real, i) for i in range(len(real))]
    rf = [radius(fake, i) for i in range(len(fake))]
    precision = np.mean([any(np.linalg.norm(f - r) <= rr[j] for j, r in enumerate(real)) for f in fake])
    recall = np.mean([any(np.linalg.norm(r - f) <= rf[j] for j, f in enumerate(fake)) for r in real])
    return precision, recall


def test_precision_recall_hand_computed_and_against_loops():
    real = np.array([[0.0], [1], [2], [3], [10]])  # k=1 radii: 1, 1, 1, 1, 7
    fake = np.array([[0.5], [20], [2.5], [9]])  # 20 is outside every real ball; radii 2, 11, 2, 6.5
    assert M.precision_recall(real, fake, k=1) == (0.75, 1.0)
    rng = np.random.default_rng(5)
    real, fake = rng.normal(size=(40, 3)), rng.normal(0.8, 1.0, size=(35, 3))
    for k in (1, 3, 5):
        assert M.precision_recall(real, fake, k) == pytest.approx(_pr_reference(real, fake, k))


def test_precision_recall_in_chunks_equals_full_distance_matrices():
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(6)
    real, fake = rng.normal(size=(53, 4)), rng.normal(0.5, 1.2, size=(41, 4))
    for k in (1, 3):
        # the unchunked computation: whole N x N, M x M and M x N distance matrices
        r_real = np.sort(cdist(real, real), axis=1)[:, k]
        r_fake = np.sort(cdist(fake, fake), axis=1)[:, k]
        d = cdist(fake, real)
        full = ((d <= r_real[None, :]).any(axis=1).mean(), (d.T <= r_fake[None, :]).any(axis=1).mean())
        assert 0 < full[0] < 1 and 0 < full[1] < 1  # neither trivially 0 nor 1
        for chunk in (1, 5, 7, 41, 53, 10_000):
            assert M.precision_recall(real, fake, k, chunk=chunk) == full, (k, chunk)
    with pytest.raises(ValueError, match="chunk"):
        M.precision_recall(real, fake, 3, chunk=0)
