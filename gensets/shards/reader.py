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
    if info.issparse():  # a few stored bytes that read as gigabytes: no writer of WebDataset makes one
        return f"sparse member ({info.size} bytes when expanded)"
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


def iter_shard(path: str | os.PathLike) -> Iterator[dict]:
    """Yield {"__key__": key, ext: bytes, ...} for each run of consecutive members sharing a key.

    Raises DataError naming the shard (and member) for an unsafe member (absolute path, '..',
    link, device), a member without an extension, a repeated member, or a truncated/corrupt tar
    (the truncation check runs when the last member has been read, before the last sample is
    yielded).
    """
    shard = os.fspath(path)
    sample: dict | None = None
    try:
        with tarfile.open(shard, mode="r|") as tf:
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
                sample[ext] = tf.extractfile(info).read()
            end = tf.offset  # tarfile stops quietly at a cut between members: check the end marker
        if not end_marker_ok(shard, end):
            raise DataError(f"{shard}: -: truncated or corrupt tar (no end-of-archive marker)")
    except (tarfile.TarError, EOFError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{shard}: -: no such file") from None
        raise DataError(f"{shard}: -: truncated or corrupt tar ({e})") from None
    if sample is not None:
        yield sample


def iter_shards(paths: Iterable[str | os.PathLike]) -> Iterator[dict]:
    for path in paths:
        yield from iter_shard(path)
