"""The retrieval baseline's pool (a folder of captioned images or an ``hf:`` image-text dataset): its entries, its
identity for the unit ids, its items' names and bytes. Below the strategies (RA plans from the pool's identity), the
baselines, the references and TI's stage, which all read it."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from ...config import to_dict
from ...errors import GensetsError
from ...images import is_image_file
from ...sources.classes import source_name
from ...sources.images import hf_split


def hf_bytes(source: str, split: str, hf_config, rows: list[int], column: str | None = None) -> list[bytes]:
    import datasets

    ds, _, _, image_col = hf_split(source[len("hf:"):], split, what=source, hf_config=hf_config)
    col = column or image_col
    images = ds.select_columns([col]).cast_column(col, datasets.Image(decode=False)).select(rows)[col]
    return [im["bytes"] if im.get("bytes") else Path(im["path"]).read_bytes() for im in images]


@lru_cache(maxsize=4)
def _folder_pool(root: Path) -> list[tuple[str, str, str]]:
    """(path inside the pool, sha256, caption) of every image of a pool folder, by path; its caption is the
    ``<stem>.txt`` beside it."""
    if not root.is_dir():
        raise GensetsError(f"retrieval: pool folder not found: {root}")
    out = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and is_image_file(p)):
        cap = f.with_suffix(".txt")
        if not cap.is_file():
            raise GensetsError(f"retrieval: pool image {f} has no caption ({cap.name})")
        out.append((f.relative_to(root).as_posix(), hashlib.sha256(f.read_bytes()).hexdigest(),
                    cap.read_text(encoding="utf-8").strip()))
    if not out:
        raise GensetsError(f"retrieval: pool folder {root} holds no images")
    return out


def pool_entries(cfg) -> list[tuple[str, str | None, str]]:
    """(item id, sha256 or None for hf:, caption) of every pool item, in pool order."""
    r = cfg.retrieval
    if r.pool.startswith("folder:"):
        return _folder_pool(cfg.base_dir / r.pool[len("folder:"):])
    ds, _, _, _ = hf_split(r.pool[len("hf:"):], r.split, what=f"retrieval {r.pool}", hf_config=r.hf_config)
    if r.caption_column not in ds.column_names:
        raise GensetsError(f"retrieval {r.pool}: no column {r.caption_column!r} (retrieval.caption_column)")
    return [(str(i), None, str(c)) for i, c in enumerate(ds[r.caption_column])]


def pool_identity(cfg) -> dict:
    """What a retrieval (and RA from it) is planned from, for the unit ids: the retrieval settings and the pool's
    content: a folder pool's every item (path, sha256, caption) hashed, so a changed, added or removed image or
    caption re-plans; an hf: pool by name (pin it with @rev), split and config."""
    r = cfg.retrieval
    what = (hashlib.sha256(repr(pool_entries(cfg)).encode()).hexdigest() if r.pool.startswith("folder:")
            else f"{r.split}:{r.hf_config}")
    return {**to_dict(r), "pool": source_name(r.pool), "pool_content": what}


def pool_item(cfg, j: int) -> str:
    """Pool item ``j`` as samples name it: ``folder:pool/a.jpg`` or ``hf:repo/train#12``."""
    r = cfg.retrieval
    if r.pool.startswith("hf:"):
        return f"{source_name(r.pool)}/{r.split}#{pool_entries(cfg)[j][0]}"
    return f"{source_name(r.pool)}/{pool_entries(cfg)[j][0]}"


def pool_images(cfg, indices) -> list[bytes]:
    r = cfg.retrieval
    entries = pool_entries(cfg)
    if r.pool.startswith("folder:"):
        root = cfg.base_dir / r.pool[len("folder:"):]
        return [(root / entries[i][0]).read_bytes() for i in indices]
    return hf_bytes(r.pool, r.split, r.hf_config, list(indices))
