"""Nearest neighbours for the audit: each query's closest item of a set, exactly, in memory that stays flat.

- :func:`nearest_hamming`: 64-bit hashes, the nearest within ``radius`` bits (none beyond). Below
  :data:`BRUTE_PAIRS` query-item pairs, every pair in chunks; above, multi-index hashing (Norouzi et al., CVPR 2012):
  the 64 bits in four 16-bit blocks, and since two hashes within ``radius`` bits agree on some block to within
  ``radius // 4`` bits (pigeonhole), only the items whose block is that close to the query's are compared: near-linear
  for the small radii of near-duplicates, and the same answer as every pair.
- :func:`nearest_cosine`: L2-normalised embeddings, the most similar item. Every pair in chunks (a query block
  times the set: BLAS) up to :data:`INDEX_PAIRS` pairs, and the same below that when faiss is not installed; above
  it, faiss's HNSW graph index (approximate: :data:`HNSW`), which keeps the search near-linear.

Ties go to the smallest index (the first item in the set's order), so an answer never depends on the chunking.
``same``: the queries are the set itself, and an item is never its own neighbour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import notices

if TYPE_CHECKING:
    import numpy as np

BRUTE_PAIRS = 50_000_000  # hashes: every pair below this many query x item pairs
CHUNK_BYTES = 16 << 20  # the largest block of pair distances held at once (with its temporaries)
# bytes per query-item pair of a block: Hamming, the XOR of two uint64 hashes, its popcount and the running
# minimum (uint8 each); cosine, a float32 similarity
HAMMING_PAIR_BYTES, COSINE_PAIR_BYTES = 8 + 1 + 1, 4
# embeddings: faiss's HNSW index above this many pairs, when faiss is installed: the crossover measured by
# benchmarks/audit.py on 2 CPU cores (exact: ~3e-8 s a pair; HNSW: ~5 ms an item, for 512-d vectors): ~170k x 170k
INDEX_PAIRS = 30_000_000_000
HNSW = {"M": 32, "efConstruction": 80, "efSearch": 128}  # faiss.IndexHNSWFlat's graph degree and search breadths
_BLOCKS = 4  # 16-bit blocks of multi-index hashing


def _chunk(n_items: int, per_pair: int) -> int:
    return max(1, CHUNK_BYTES // max(1, n_items * per_pair))


def _best(dist: np.ndarray, idx: np.ndarray, qi: np.ndarray, n: int, radius: int):
    """Per query (``qi``), the candidate of smallest distance, then smallest index; -1 where none is within
    ``radius``."""
    import numpy as np

    out_i, out_d = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    keep = dist <= radius
    dist, idx, qi = dist[keep], idx[keep], qi[keep]
    if len(qi):
        order = np.lexsort((idx, dist, qi))
        first = order[np.r_[True, qi[order][1:] != qi[order][:-1]]]
        out_i[qi[first]], out_d[qi[first]] = idx[first], dist[first]
    return out_i, out_d


def nearest_hamming(queries: list[np.ndarray], items: np.ndarray, radius: int, same: bool = False):
    """``(index, distance)`` per query: the item (of ``items``, uint64 hashes) nearest to the query within
    ``radius`` bits, where the query's distance to an item is the smallest over its hashes in ``queries`` (one
    uint64 array per form of the query: the image, its mirror image); index -1 and distance -1 where none is."""
    import numpy as np

    items = np.asarray(items, dtype=np.uint64)
    queries = [np.asarray(q, dtype=np.uint64) for q in queries]
    n, m = len(queries[0]), len(items)
    if n == 0 or m == 0:
        return np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    flips = radius // _BLOCKS
    if n * m * len(queries) <= BRUTE_PAIRS or flips > 3:
        if flips > 3 and n * m > BRUTE_PAIRS:
            notices.notice(f"audit: a Hamming radius of {radius} bits is searched pair by pair ({n} x {m} pairs)")
        return _hamming_pairs(queries, items, radius, same)
    return _hamming_blocks(queries, items, radius, same, flips)


def _hamming_pairs(queries, items, radius: int, same: bool):
    import numpy as np

    n, m = len(queries[0]), len(items)
    out_i, out_d = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    step = _chunk(m, HAMMING_PAIR_BYTES)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        d = np.full((hi - lo, m), 255, np.uint8)
        for q in queries:
            np.minimum(d, np.bitwise_count(q[lo:hi, None] ^ items[None, :]), out=d)
        if same:
            d[np.arange(hi - lo), np.arange(lo, hi)] = 255
        d[d > radius] = 255
        j = d.argmin(axis=1)  # the first of the smallest
        best = d[np.arange(hi - lo), j].astype(np.int64)
        found = best <= radius
        out_i[lo:hi] = np.where(found, j, -1)
        out_d[lo:hi] = np.where(found, best, -1)
    return out_i, out_d


def _masks(flips: int) -> np.ndarray:
    """Every 16-bit value with at most ``flips`` bits set."""
    import numpy as np

    v = np.arange(1 << 16, dtype=np.uint64)
    return v[np.bitwise_count(v) <= flips]


def _hamming_blocks(queries, items, radius: int, same: bool, flips: int):
    import numpy as np

    n, m = len(queries[0]), len(items)
    masks = _masks(flips)
    shifts = [np.uint64(16 * (_BLOCKS - 1 - b)) for b in range(_BLOCKS)]
    tables = []
    for s in shifts:
        vals = (items >> s) & np.uint64(0xFFFF)
        order = np.argsort(vals, kind="stable")
        tables.append((vals[order], order))
    out_i, out_d = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    # candidates per query: about len(masks) * blocks * forms * (m / 65536) items
    per_query = max(1, int(len(masks) * _BLOCKS * len(queries) * (1 + m / 65536)))
    step = max(1, (CHUNK_BYTES // 32) // per_query)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        cand_q, cand_i = [], []
        for q in queries:
            for s, (vals, order) in zip(shifts, tables, strict=True):
                probes = ((q[lo:hi] >> s) & np.uint64(0xFFFF))[:, None] ^ masks[None, :]
                left = np.searchsorted(vals, probes, "left").reshape(-1)
                count = np.searchsorted(vals, probes, "right").reshape(-1) - left
                total = int(count.sum())
                if not total:
                    continue
                owner = np.repeat(np.repeat(np.arange(lo, hi), len(masks)), count)
                start = np.repeat(left - np.cumsum(count) + count, count)  # each run's first slot
                cand_q.append(owner)
                cand_i.append(order[start + np.arange(total)])
        if not cand_q:
            continue
        qi, ii = np.concatenate(cand_q), np.concatenate(cand_i)
        if same:
            qi, ii = qi[qi != ii], ii[qi != ii]
        d = np.min([np.bitwise_count(q[qi] ^ items[ii]) for q in queries], axis=0).astype(np.int64)
        bi, bd = _best(d, ii, qi - lo, hi - lo, radius)
        out_i[lo:hi], out_d[lo:hi] = bi, bd
    return out_i, out_d


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401  # lazy: optional, the index of large embedding searches
    except ImportError:
        return False
    return True


def nearest_cosine(queries: np.ndarray, items: np.ndarray, same: bool = False) -> tuple:
    """``(index, similarity, how)``: per query (rows of L2-normalised float32 embeddings) the most similar item and
    its cosine similarity (index -1 where the set is empty, or holds only the query itself); ``how`` says which
    search ran: ``exact`` (every pair) or ``hnsw`` (faiss's approximate index)."""
    import numpy as np

    queries = np.ascontiguousarray(queries, dtype=np.float32)
    items = np.ascontiguousarray(items, dtype=np.float32)
    n, m = len(queries), len(items)
    if n == 0 or m == 0 or (same and m == 1):
        return np.full(n, -1, np.int64), np.full(n, np.nan), "exact"
    if n * m > INDEX_PAIRS and faiss_available():
        return (*_cosine_hnsw(queries, items, same), "hnsw")
    if n * m > INDEX_PAIRS:
        notices.notice(f"audit: {n} x {m} embedding pairs compared one by one (pip install faiss-cpu for an index "
                       "that grows near-linearly)")
    out_i, out_s = np.full(n, -1, np.int64), np.full(n, np.nan)
    step = _chunk(m, COSINE_PAIR_BYTES)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        s = queries[lo:hi] @ items.T
        if same:
            s[np.arange(hi - lo), np.arange(lo, hi)] = -np.inf
        j = s.argmax(axis=1)
        out_i[lo:hi], out_s[lo:hi] = j, s[np.arange(hi - lo), j]
    return out_i, out_s, "exact"


def _cosine_hnsw(queries, items, same: bool):
    import faiss  # lazy: optional, installed with gensets (pyproject) once the lock has it
    import numpy as np

    index = faiss.IndexHNSWFlat(items.shape[1], HNSW["M"], faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = HNSW["efConstruction"]
    index.hnsw.efSearch = HNSW["efSearch"]
    index.add(items)
    k = 2 if same else 1
    out_i, out_s = np.full(len(queries), -1, np.int64), np.full(len(queries), np.nan)
    step = 65536
    for lo in range(0, len(queries), step):
        sims, idx = index.search(queries[lo:lo + step], k)
        for r in range(len(idx)):
            for s, j in zip(sims[r], idx[r], strict=True):
                if j >= 0 and not (same and j == lo + r):
                    out_i[lo + r], out_s[lo + r] = j, s
                    break
    return out_i, out_s
