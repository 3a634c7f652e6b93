"""Commit markers: what a worker writes beside a unit's shard on an object store (``candidates/_committed/<unit>.json``,
written last: the unit is done when it is there). A marker holds the unit's manifest row, where each sample's members
lie in the shard and each sample's json and cls members (the driver ingests the unit from it, not from the shard);
it is read through :mod:`gensets.recordio` (its schema) and checked against its shard before anything of it is
published or verified as ok."""

from __future__ import annotations

from pathlib import Path

from .. import recordio
from ..errors import DataError
from .reader import index_shard, iter_index
from .writer import canonical_json, sha256_file


def marker(path: Path, row: dict) -> bytes:
    """The commit marker of the unit whose shard is at ``path`` and whose manifest row is ``row``."""
    members = [{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()} for d in index_shard(path)]
    # each sample's json and cls members as text: the driver ingests the unit from its marker, never
    # downloading the shard (Store.committed_indexes)
    try:
        meta = {"meta": {d["__key__"]: [d["json"].decode("utf-8"), d["cls"].decode("ascii")]
                         for d in iter_index(path)}}
    except (KeyError, UnicodeDecodeError):  # a sample without them: the driver reads the shard
        meta = {}
    return canonical_json({"row": row, "members": members, **meta})


def marker_index(data: bytes, url: str, shard: str) -> list[dict] | None:
    """The samples of a commit marker (:func:`marker`) as iter_index dicts; None for a marker without ``meta``;
    DataError naming the marker when it is not what a worker writes."""
    def bad(why: str):
        return DataError(f"{url}: not a commit marker gensets wrote ({why})")

    m = read_marker(data, url, shard[:-4] if shard.endswith(".tar") else shard)
    if m.get("meta") is None:
        return None
    members, meta = m["members"], m["meta"]
    if len(members) != len(meta) or len(members) != m["row"]["n"]:
        raise bad("its members and meta are not those of its row's samples")
    out = []
    for e in members:
        key = e["__key__"]
        text = meta.get(key)
        where = {k: v for k, v in e.items() if k != "__key__"}
        if text is None or not where:
            raise bad(f"sample {ascii(key)[:100]}")
        out.append({"__key__": key, "__members__": {k: tuple(v) for k, v in where.items()},
                    "json": text[0].encode("utf-8"), "cls": text[1].encode("utf-8")})
    return out


def read_marker(data: bytes, url: str, unit: str) -> dict:
    """A commit marker's JSON (:func:`marker`) read through :mod:`gensets.recordio` (the commit marker schema), and
    its row that of ``unit`` (its name); DataError naming the marker otherwise."""
    m = recordio.parse(data, "CommitMarker", url)
    if m["row"]["unit"] != unit or m["row"]["shard"] != f"{unit}.tar":
        raise DataError(f"{url}: not a commit marker gensets wrote (its unit and shard are not those of its name)")
    return m


def check_marker(m: dict, path: Path, url: str) -> None:
    """DataError unless the commit marker ``m`` says what the shard at ``path`` holds: its sha256, and each
    sample's members where the marker places them, with the provenance (json) and class (cls) the marker carries.
    Ingest reads a unit's provenance from its marker, so a marker forged beside a true shard (another prompt) is
    caught here, before anything of it is published or verified as ok."""
    if sha256_file(path) != m["row"]["sha256"]:
        raise DataError(f"{url}: its sha256 is not that of {m['row']['shard']}; refusing the unit")
    members = [{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()} for d in index_shard(path)]
    if members != m["members"]:
        raise DataError(f"{url}: its members are not where {m['row']['shard']} holds them; refusing the unit")
    if m.get("meta") is not None:
        for d in iter_index(path):
            said = m["meta"].get(d["__key__"])
            try:
                true = [d["json"].decode("utf-8"), d["cls"].decode("ascii")]
            except (KeyError, UnicodeDecodeError):
                true = None
            if said != true:
                raise DataError(f"{url}: the provenance it gives sample {ascii(d['__key__'])[:100]} is not that "
                                f"sample's in {m['row']['shard']} (a forged or stale marker); refusing the unit")
