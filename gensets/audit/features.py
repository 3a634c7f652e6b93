"""Each image's fingerprints (the hashes of :mod:`gensets.audit.hashes`) and embedding, computed once: a cache keyed
by the sha256 of the image's encoded bytes and the feature (the hash variant; the embedder's weights), so an audit
run again, against a new reference, or of a rebuilt dataset with the same images, decodes and embeds nothing it has
seen (:class:`Cache`: a DuckDB file, ``<gensets cache>/audit/features.duckdb``). What the cache lacks is computed
in chunks (:func:`compute`) in this process, by each process of ``accelerate launch`` for its share, or by a Ray
pool's workers (:class:`EmbedWorker`, ``--backend ray``): the same chunks, the same features."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import notices
from ..cache import cache_root
from ..errors import DataError
from ..images import decode_image
from ..models.device import Dist
from ..registry import load_plugins
from . import hashes

if TYPE_CHECKING:
    import numpy as np

    from .sources import ImageSet

HASHES = "hashes/imagededup-0.3+mirror"  # the cache's name for the fingerprints of hashes.fingerprints(mirror=True)
BATCH = 64  # images decoded and embedded together: a chunk, on any backend
WINDOW = 16  # chunks looked up and computed at a time (the images' bytes in memory: WINDOW * BATCH of them)
_HASH_FIELDS = ("phash", "dhash", "phash_mirror", "dhash_mirror")


class Cache:
    """Features by (image sha256, feature name), in a DuckDB file. Another process holding the file (DuckDB has one
    writer) or a file that cannot be opened leaves the cache off for this run, said in one notice."""

    def __init__(self, path=None):
        self.path = path or cache_root() / "audit" / "features.duckdb"
        self.con = None
        self.off = False

    def _open(self):
        if self.con is None and not self.off:
            import duckdb

            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.con = duckdb.connect(str(self.path))
                self.con.execute("CREATE TABLE IF NOT EXISTS features (sha256 VARCHAR, feature VARCHAR, value BLOB, "
                                 "PRIMARY KEY (sha256, feature))")
            except (duckdb.Error, OSError) as e:
                self.off = True
                notices.notice(f"audit: the feature cache {self.path} is not used this time "
                               f"({str(e).splitlines()[0][:160]})")
        return self.con

    def get(self, feature: str, shas: list[str]) -> dict[str, bytes]:
        con = self._open()
        if con is None or not shas:
            return {}
        import pyarrow as pa

        con.register("_wanted", pa.table({"sha256": pa.array(shas, pa.string())}))
        try:
            rows = con.execute("SELECT f.sha256, f.value FROM features f JOIN _wanted w USING (sha256) "
                               "WHERE f.feature = ?", [feature]).fetchall()
        finally:
            con.unregister("_wanted")
        return dict(rows)

    def put(self, feature: str, values: dict[str, bytes]) -> None:
        con = self._open()
        if con is None or not values:
            return
        import pyarrow as pa

        con.register("_new", pa.table({"sha256": pa.array(list(values), pa.string()),
                                       "feature": pa.array([feature] * len(values), pa.string()),
                                       "value": pa.array(list(values.values()), pa.binary())}))
        try:
            con.execute("INSERT OR IGNORE INTO features SELECT * FROM _new")
        finally:
            con.unregister("_new")

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


@dataclass
class Features:
    """The features of one :class:`ImageSet`, in its order."""

    exact: list[str]
    hashes: dict[str, np.ndarray]  # phash, dhash, phash_mirror, dhash_mirror: uint64 [N]
    embeddings: np.ndarray | None = None  # float32 [N, D], L2-normalised
    counts: dict = field(default_factory=dict)  # images decoded, embedded, read from the cache; workers computing


def _pack(fp: dict) -> bytes:
    return bytes.fromhex(fp["exact"]) + b"".join(int(fp[k]).to_bytes(8, "big") for k in _HASH_FIELDS)


def _unpack(blob: bytes) -> dict:
    return {"exact": blob[:32].hex(), **{k: int.from_bytes(blob[32 + 8 * i: 40 + 8 * i], "big")
                                        for i, k in enumerate(_HASH_FIELDS)}}


def _decode(name: str, data: bytes):
    try:
        return decode_image(data)
    except Exception as e:  # noqa: BLE001 - any decoder failure: one line naming the image
        raise DataError(f"{name}: cannot decode image ({type(e).__name__}: {e})") from None


Item = tuple[str, bytes, str, bool, bool]  # (image sha256, its encoded bytes, its name, hash it?, embed it?)


def compute(items: list[Item], embedder=None) -> list[tuple[str, bytes | None, bytes | None]]:
    """What a chunk of images lacks: each image decoded once, its fingerprints (packed) and its embedding (float32
    bytes) where asked, as ``(sha256, fingerprints or None, embedding or None)``; the images embedded together."""
    import numpy as np

    decoded = [_decode(name, data) for _, data, name, _, _ in items]
    fps = [_pack(hashes.fingerprints(im)) if h else None for im, (_, _, _, h, _) in zip(decoded, items, strict=True)]
    want = [k for k, it in enumerate(items) if it[4]]
    vecs = dict(zip(want, embedder.embed([decoded[k] for k in want]), strict=True)) if want else {}
    return [(it[0], fps[k], np.asarray(vecs[k], np.float32).tobytes() if k in vecs else None)
            for k, it in enumerate(items)]


@dataclass
class Chunk:
    """Images a pool's worker decodes, hashes and embeds (``payload["items"]``: :data:`Item`)."""

    id: str
    payload: dict


class EmbedWorker:
    """An audit's worker in a pool of :mod:`gensets.builders.backends` (a Ray actor): :func:`compute` for each chunk
    it is given, its embedder (``spec``, None: hashes only) loaded once, at its first chunk."""

    def __init__(self, spec: str | None, allow_pickle: bool = False):
        load_plugins()  # a Ray worker is a process of its own: the plugins the driver's CLI loaded, here too
        notices.inherit()  # and its notices on stderr when the driver prints its own
        self.spec, self.allow_pickle, self.embedder = spec, allow_pickle, None

    @staticmethod
    def ranked(args: tuple, rank: int, world: int) -> tuple[tuple, None]:
        return args, None  # every worker alike, in the environment Ray gives it

    def ping(self) -> bool:
        return True

    def run(self, chunk: Chunk) -> list:
        if self.spec and self.embedder is None:
            from ..models.embedder import load_embedder  # lazy: torch, in the worker that embeds

            self.embedder = load_embedder(self.spec, allow_pickle=self.allow_pickle)
        return compute(chunk.payload["items"], self.embedder)


def extract(images: ImageSet, cache: Cache, embedder=None, *, progress=None, pool=None,
            dist: Dist | None = None) -> Features | None:
    """The fingerprints (and, with ``embedder``, embeddings) of every image of ``images``: read from the cache where
    it has them, else decoded and computed (:func:`compute`, in chunks of :data:`BATCH` images), and cached.
    ``progress(n)``: called with the images done so far.

    Where the chunks are computed: in this process; with ``pool`` (a Ray pool of :class:`EmbedWorker`), by its
    workers; under ``accelerate launch`` (``dist``) process r of n computes chunks r, r + n, ... of each window and
    process 0 gathers them. Process 0 alone reads the cache, writes it and returns the features (the others: None).
    The chunks are the same on every backend, so are the features (to float tolerance: the thread count)."""
    import numpy as np

    dist = dist or Dist()
    lead = dist.rank == 0
    n = len(images)
    exact: list[str] = [""] * n
    cols = {k: np.zeros(n, np.uint64) for k in _HASH_FIELDS}
    emb_feature = f"embedding {embedder.model_id}" if embedder is not None else None
    embs: list = [None] * n
    counts = {"images": n, "decoded": 0, "hashed": 0, "embedded": 0, "cached": 0}
    # the images read at a time: a window of chunks to keep several workers busy, one chunk in this process alone
    size = (WINDOW if pool is not None or dist.world > 1 else 1) * BATCH
    for lo in range(0, n, size):
        idx = range(lo, min(n, lo + size))
        data, shas, have, have_emb, todo = {}, {}, {}, {}, []
        if lead:
            data = {i: images.read(i) for i in idx}
            shas = {i: hashlib.sha256(data[i]).hexdigest() for i in idx}
            have = cache.get(HASHES, sorted(set(shas.values())))
            have_emb = cache.get(emb_feature, sorted(set(shas.values()))) if emb_feature else {}
            first = {}
            for i in idx:
                first.setdefault(shas[i], i)
            todo = [(i, sha, sha not in have, emb_feature is not None and sha not in have_emb)
                    for sha, i in first.items() if sha not in have or (emb_feature and sha not in have_emb)]
        todo = dist.gather([todo] if lead else [])[0]  # process 0's, everywhere
        chunks = [todo[k:k + BATCH] for k in range(0, len(todo), BATCH)]

        def items(chunk, data=data):
            return [(sha, data[i] if i in data else images.read(i), images.where(i), h, e)
                    for i, sha, h, e in chunk]

        if pool is not None:
            done = list(pool.run([Chunk(f"{images.name}-{lo // BATCH + k}", {"stage": "audit", "items": items(c)})
                                  for k, c in enumerate(chunks)]))
        else:
            done = dist.gather([compute(items(c), embedder) for c in chunks[dist.rank::dist.world]])
        if not lead:
            continue
        new_hash = {sha: fp for part in done for sha, fp, _ in part if fp is not None}
        new_emb = {sha: e for part in done for sha, _, e in part if e is not None}
        counts["decoded"] += len(todo)
        counts["hashed"] += len(new_hash)
        counts["embedded"] += sum(shas[i] not in have_emb for i in idx) if emb_feature else 0
        counts["cached"] += sum(shas[i] in have for i in idx)
        cache.put(HASHES, new_hash)
        if emb_feature:
            cache.put(emb_feature, new_emb)
        have.update(new_hash)
        have_emb.update(new_emb)
        for i in idx:
            fp = _unpack(have[shas[i]])
            exact[i] = fp["exact"]
            for k in _HASH_FIELDS:
                cols[k][i] = fp[k]
            if emb_feature:
                embs[i] = np.frombuffer(have_emb[shas[i]], dtype=np.float32)
        if progress:
            progress(idx[-1] + 1)
    if not lead:
        return None
    counts["workers"] = (pool.size if pool is not None else dist.world) if counts["decoded"] else 0  # that computed
    emb = np.stack(embs) if embedder is not None and n else (np.zeros((0, 1), np.float32) if embedder else None)
    return Features(exact, cols, emb, counts)
