"""``gensets verify DIR``: the problems of every shard under DIR, a folder or a workspace on object storage (its
objects read once into a temporary folder and checked there; each problem named by its URL)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import GensetsError
from ..shards import Problem
from ..shards import verify as verify_folder
from ..store import is_url
from ..workspace import Workspace


def verify(target: str, *, progress: bool = True) -> list[Problem]:
    """Every problem found under ``target`` (a folder, or the URL of a workspace: s3://..., gs://...)."""
    if not is_url(target):
        return verify_folder(Path(target), progress=progress)
    ws = Workspace(target)
    ws.store.check_bucket()
    if not ws.store.exists("config.yaml"):
        raise GensetsError(f"{ws.store.url}: not a gensets workspace (no config.yaml)")
    with tempfile.TemporaryDirectory(prefix="gensets-verify-") as tmp:
        ws.mirror(Path(tmp))
        return [Problem(*(str(x).replace(tmp, ws.store.url) for x in (p.shard, p.member, p.what)))
                for p in verify_folder(Path(tmp), progress=progress)]
