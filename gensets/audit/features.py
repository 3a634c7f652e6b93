"""Each image's fingerprints (the hashes of :mod:`gensets.audit.hashes`) and embedding, computed once: a cache keyed
by the sha256 of the image's encoded bytes and the feature (the hash variant; the embedder's weights), so an audit
run again, against a new reference, or of a rebuilt dataset with the same images, decodes and embeds nothing it has
seen (:class:`Cache`: a DuckDB file, ``<gensets cache>/audit/features.duckdb``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import notices
from ..cache import cache_root
from ..errors import DataError
from ..images import decode_image
from . import hashes

if TYPE_CHECKING:
    import numpy as np

    from .sources import ImageSet

HASHES = "hashes/imagededup-0.3+mirror"  # the cache's name for the fingerprints of hashes.fingerprints(mirror=True)
BATCH = 64  # images decoded and embedded together
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
    counts: dict = field(default_factory=dict)  # images decoded, embedded, read from the cache


def _pack(fp: dict) -> bytes:
    return bytes.fromhex(fp["exact"]) + b"".join(int(fp[k]).to_bytes(8, "big") for k in _HASH_FIELDS)


def _unpack(blob: bytes) -> dict:
    return {"exact": blob[:32].hex(), **{k: int.from_bytes(blob[32 + 8 * i: 40 + 8 * i], "big")
                                        for i, k in enumerate(_HASH_FIELDS)}}


def _decode(images: ImageSet, i: int, data: bytes):
    try:
        return decode_image(data)
    except Exception as e:  # noqa: BLE001 - any decoder failure: one line naming the image
        raise DataError(f"{images.source}: {images.keys[i]}: cannot decode image ({type(e).__name__}: {e})") from None


def extract(images: ImageSet, cache: Cache, embedder=None, *, progress=None) -> Features:
    """The fingerprints (and, with ``embedder``, embeddings) of every image of ``images``: read from the cache where
    it has them, else decoded and computed, and cached. ``progress(n)``: called with the images done so far."""
    import numpy as np

    n = len(images)
    exact: list[str] = [""] * n
    cols = {k: np.zeros(n, np.uint64) for k in _HASH_FIELDS}
    emb_feature = f"embedding {embedder.model_id}" if embedder is not None else None
    embs: list = [None] * n
    counts = {"images": n, "decoded": 0, "hashed": 0, "embedded": 0, "cached": 0}
    for lo in range(0, n, BATCH):
        idx = list(range(lo, min(n, lo + BATCH)))
        data = {i: images.read(i) for i in idx}
        shas = {i: hashlib.sha256(data[i]).hexdigest() for i in idx}
        have = cache.get(HASHES, sorted(set(shas.values())))
        have_emb = cache.get(emb_feature, sorted(set(shas.values()))) if emb_feature else {}
        new_hash, new_emb, decoded = {}, {}, {}

        def image(i, data=data, decoded=decoded):
            if i not in decoded:
                decoded[i] = _decode(images, i, data[i])
            return decoded[i]

        for i in idx:
            blob = have.get(shas[i]) or new_hash.get(shas[i])
            if blob is None:
                blob = new_hash[shas[i]] = _pack(hashes.fingerprints(image(i)))
                counts["hashed"] += 1
            fp = _unpack(blob)
            exact[i] = fp["exact"]
            for k in _HASH_FIELDS:
                cols[k][i] = fp[k]
        if embedder is not None:
            todo = [i for i in idx if shas[i] not in have_emb]
            fresh = {}
            if todo:
                out = embedder.embed([image(i) for i in todo])
                for i, vec in zip(todo, out, strict=True):
                    fresh.setdefault(shas[i], np.asarray(vec, np.float32).tobytes())
                counts["embedded"] += len(todo)
            new_emb.update(fresh)
            for i in idx:
                embs[i] = np.frombuffer(have_emb.get(shas[i]) or fresh[shas[i]], dtype=np.float32)
        counts["decoded"] += len(decoded)
        counts["cached"] += sum(shas[i] in have for i in idx)
        cache.put(HASHES, new_hash)
        if emb_feature:
            cache.put(emb_feature, new_emb)
        if progress:
            progress(idx[-1] + 1)
    emb = np.stack(embs) if embedder is not None and n else (np.zeros((0, 1), np.float32) if embedder else None)
    return Features(exact, cols, emb, counts)
