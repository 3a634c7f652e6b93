"""Read WebDataset tars sample by sample with the tarfile module, never extracting to disk."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterable, Iterator

from gensets.errors import DataError


def member_problem(info: tarfile.TarInfo) -> str | None:
    """Why a member must not be read (unsafe name or not a regular file), or None if it is fine."""
    name = info.name
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "absolute member path"
    if ".." in parts:
        return "member path contains '..'"
    if info.issym() or info.islnk():
        return f"link member (to {info.linkname!r})"
    if not info.isfile() and not info.isdir():
        return "special member (device, fifo or unknown type)"
    return None


def split_name(name: str) -> tuple[str, str] | None:
    """WebDataset's rule: the key is everything up to the first '.' of the last path component."""
    head, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem or not ext:
        return None
    return (f"{head}/{stem}" if head else stem), ext


def end_marker_ok(path: str | os.PathLike, offset: int) -> bool:
    """True if the two zero blocks that end a tar are at `offset` (else the tar was cut short)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(2 * tarfile.BLOCKSIZE) == bytes(2 * tarfile.BLOCKSIZE)


def _scan(shard: str, mode: str, read) -> Iterator[dict]:
    """The samples of a tar, each ``{"__key__": key, ext: read(tf, info), ...}``, with every check of
    :func:`iter_shard`; the last sample comes after the end-of-archive check."""
    sample: dict | None = None
    try:
        with tarfile.open(shard, mode=mode) as tf:
            for info in tf:
                why = member_problem(info)
                if why:
                    raise DataError(f"{shard}: {info.name}: {why}")
                if info.isdir():
                    continue
                parts = split_name(info.name)
                if parts is None:
                    raise DataError(f"{shard}: {info.name}: member name has no key.ext form")
                key, ext = parts
                if sample is not None and sample["__key__"] != key:
                    yield sample
                    sample = None
                if sample is None:
                    sample = {"__key__": key}
                if ext in sample:
                    raise DataError(f"{shard}: {info.name}: repeated member")
                sample[ext] = read(tf, info)
            end = tf.offset  # tarfile stops quietly at a cut between members: check the end marker
        if not end_marker_ok(shard, end):
            raise DataError(f"{shard}: -: truncated or corrupt tar (no end-of-archive marker)")
    except (tarfile.TarError, EOFError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{shard}: -: no such file") from None
        raise DataError(f"{shard}: -: truncated or corrupt tar ({e})") from None
    if sample is not None:
        yield sample


def iter_shard(path: str | os.PathLike) -> Iterator[dict]:
    """Yield {"__key__": key, ext: bytes, ...} for each run of consecutive members sharing a key.

    Raises DataError naming the shard (and member) for an unsafe member (absolute path, '..',
    link, device), a member without an extension, a repeated member, or a truncated/corrupt tar
    (the truncation check runs when the last member has been read, before the last sample is
    yielded).
    """
    yield from _scan(os.fspath(path), "r|", lambda tf, info: tf.extractfile(info).read())


def index_shard(path: str | os.PathLike) -> list[dict]:
    """Where each sample's members lie, without reading them: ``[{"__key__": key, ext: (offset, size), ...}]``
    in tar order, with every check of :func:`iter_shard` (headers only: a member cut short shows as a missing
    end marker). :func:`read_members` reads them back, so any process can read any sample."""
    return list(_scan(os.fspath(path), "r:", lambda tf, info: (info.offset_data, info.size)))


def read_members(path: str | os.PathLike, entry: dict) -> dict:
    """The bytes of one sample of :func:`index_shard`: ``{"__key__": key, ext: bytes, ...}``; DataError
    naming the shard and member if the file changed since it was indexed."""
    shard = os.fspath(path)
    out = {"__key__": entry["__key__"]}
    try:
        with open(shard, "rb") as f:
            for ext, where in entry.items():
                if ext == "__key__":
                    continue
                offset, size = where
                f.seek(offset)
                out[ext] = f.read(size)
                if len(out[ext]) != size:
                    raise DataError(f"{shard}: {entry['__key__']}.{ext}: truncated (the shard changed while read)")
    except FileNotFoundError:
        raise DataError(f"{shard}: -: no such file") from None
    return out


def iter_shards(paths: Iterable[str | os.PathLike]) -> Iterator[dict]:
    for path in paths:
        yield from iter_shard(path)
