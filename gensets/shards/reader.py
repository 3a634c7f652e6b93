"""Read WebDataset tars sample by sample with the tarfile module, never extracting to disk."""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterable, Iterator, Sequence

from gensets.errors import DataError
from gensets.images import IMAGE_EXTS
from gensets.records import Sample
from gensets.safety import open_regular


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
    with open_regular(path) as f:
        f.seek(offset)
        return f.read(2 * tarfile.BLOCKSIZE) == bytes(2 * tarfile.BLOCKSIZE)


_BLOCK = tarfile.BLOCKSIZE
_ZEROS = bytes(_BLOCK)


def _plain_members(fd: int) -> list[tuple[str, int, int]] | None:
    """``(name, data offset, size)`` of every member, read header by header (the data is skipped), when every
    header is a plain ustar regular file with a valid checksum and the end-of-archive marker is there, as
    :func:`gensets.shards.writer.write_shard` writes them for ASCII names; None for anything else (PAX or GNU
    headers, links, directories, a bad checksum, a cut), which tarfile then reads and judges. tarfile takes
    about 30 us to parse a header; this takes a few."""
    out, off = [], 0
    while True:
        buf = os.pread(fd, _BLOCK, off)
        if len(buf) < _BLOCK:
            return None
        if buf == _ZEROS:
            return out if os.pread(fd, _BLOCK, off + _BLOCK) == _ZEROS else None
        if buf[156:157] not in (b"0", b"\0") or buf[345:346] != b"\0" or buf[124] & 0x80:
            return None  # another member type, a ustar prefix, a base-256 size
        try:
            name = buf[:100].split(b"\0", 1)[0].decode("ascii")
            size = int(buf[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
            chksum = int(buf[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
        except (UnicodeDecodeError, ValueError):
            return None
        if chksum != sum(buf[:148]) + 256 + sum(buf[156:]):
            return None
        out.append((name, off + _BLOCK, size))
        off += _BLOCK + -(-size // _BLOCK) * _BLOCK


def _tar_members(shard: str) -> list[tuple[str, int, int]]:
    """Every regular member of a tar as ``(name, data offset, size)``, by tarfile; DataError for an unsafe member
    or a cut tar."""
    out = []
    with open_regular(shard) as f, tarfile.open(fileobj=f, mode="r:") as tf:
        for info in tf:
            why = member_problem(info)
            if why:
                raise DataError(f"{shard}: {info.name}: {why}")
            if not info.isdir():
                out.append((info.name, info.offset_data, info.size))
        end = tf.offset
    if not end_marker_ok(shard, end):
        raise DataError(f"{shard}: truncated or corrupt tar (no end-of-archive marker)")
    return out


def _key_ext(shard: str, info: tarfile.TarInfo) -> tuple[str, str] | None:
    """A member's (key, extension); None for a (safe) directory. DataError naming the shard and the member for an
    unsafe member (absolute path, '..', link, device) or a name without the key.ext form."""
    why = member_problem(info)
    if why:
        raise DataError(f"{shard}: {info.name}: {why}")
    if info.isdir():
        return None
    parts = split_name(info.name)
    if parts is None:
        raise DataError(f"{shard}: {info.name}: member name has no key.ext form")
    return parts


def iter_index(path: str | os.PathLike, read: tuple[str, ...] = ("json", "cls")) -> Iterator[dict]:
    """Like :func:`iter_shard`, from the tar headers: only the members whose extension is in ``read`` are read;
    every member's ``(data offset, size)`` is under ``"__members__"`` (``{ext: (offset, size)}``).

    The data of the other members (the images) is skipped, never read nor decoded, so indexing a shard
    costs its headers. Same checks and errors as iter_shard.
    """
    shard = os.fspath(path)
    fd = _open_fd(shard)
    try:
        members = _plain_members(fd)
        if members is None:
            members = _tar_members(shard)
        sample: dict | None = None
        for name, offset, size in members:
            key, ext = _key_ext(shard, tarfile.TarInfo(name))
            if sample is not None and sample["__key__"] != key:
                yield sample
                sample = None
            if sample is None:
                sample = {"__key__": key, "__members__": {}}
            if ext in sample["__members__"]:
                raise DataError(f"{shard}: {name}: repeated member")
            sample["__members__"][ext] = (offset, size)
            if ext in read:
                sample[ext] = os.pread(fd, size, offset)
                if len(sample[ext]) != size:
                    raise DataError(f"{shard}: {name}: truncated or corrupt tar (member cut short)")
        if sample is not None:
            yield sample
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(f"{shard}: truncated or corrupt tar ({e})") from None
    finally:
        os.close(fd)


def _open_fd(shard: str) -> int:
    """A descriptor of ``shard``, a regular file (a FIFO or a device is refused, never read: DataError)."""
    f = open_regular(shard)
    try:
        return os.dup(f.fileno())
    finally:
        f.close()


def read_at(path: str | os.PathLike, offset: int, size: int, key: str = "-") -> bytes:
    """``size`` bytes of ``path`` at ``offset`` (a member found by :func:`iter_index`); DataError if cut short."""
    try:
        with open_regular(path) as f:
            have = os.fstat(f.fileno()).st_size
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (offset, size)) \
                    or offset + size > have:  # a corrupt index: never allocate what the file cannot hold
                raise DataError(f"{os.fspath(path)}: {key}: no {str(size)[:40]} bytes at offset {str(offset)[:40]} "
                                f"(the file has {have}); the recorded location is corrupt")
            data = os.pread(f.fileno(), size, offset)
    except OSError as e:
        raise DataError(f"{os.fspath(path)}: cannot read ({e.strerror or e})") from None
    if len(data) != size:
        raise DataError(f"{os.fspath(path)}: truncated (wanted {size} bytes at offset {offset})")
    return data


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
        with open_regular(shard) as f, tarfile.open(fileobj=f, mode="r|") as tf:
            for info in tf:
                parts = _key_ext(shard, info)
                if parts is None:  # a directory
                    continue
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
            raise DataError(f"{shard}: truncated or corrupt tar (no end-of-archive marker)")
    except (tarfile.TarError, EOFError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{shard}: no such file") from None
        raise DataError(f"{shard}: truncated or corrupt tar ({e})") from None
    if sample is not None:
        yield sample


def index_shard(path: str | os.PathLike) -> list[dict]:
    """Where each sample's members lie, without reading them: ``[{"__key__": key, ext: (offset, size), ...}]``
    in tar order, with every check of :func:`iter_shard` (headers only: a member cut short shows as a missing
    end marker). :func:`read_members` reads them back, so any process can read any sample. It is
    :func:`iter_index` reading no member (one header scan for ingest and evaluation alike)."""
    return [{"__key__": d["__key__"], **d["__members__"]} for d in iter_index(path, read=())]


def read_members(path: str | os.PathLike, entry: dict) -> dict:
    """The bytes of one sample of :func:`index_shard`: ``{"__key__": key, ext: bytes, ...}``; DataError
    naming the shard and member if the file changed since it was indexed."""
    shard = os.fspath(path)
    out = {"__key__": entry["__key__"]}
    try:
        with open_regular(shard) as f:
            for ext, where in entry.items():
                if ext == "__key__":
                    continue
                offset, size = where
                f.seek(offset)
                out[ext] = f.read(size)
                if len(out[ext]) != size:
                    raise DataError(f"{shard}: {entry['__key__']}.{ext}: truncated (the shard changed while read)")
    except FileNotFoundError:
        raise DataError(f"{shard}: no such file") from None
    return out


def iter_shards(paths: Iterable[str | os.PathLike]) -> Iterator[dict]:
    for path in paths:
        yield from iter_shard(path)


class StoredSample(Sample):
    """A :class:`Sample` whose image stays in its shard: ``image`` reads it (``where``: path, offset, size) at each
    access. Its provenance is ``meta`` when given, else read (and parsed) from ``meta_at`` at each access, so
    that many of them hold no more than their locations."""

    def __init__(self, key: str, ext: str, cls: int, meta: dict | None, where: tuple[str, int, int],
                 meta_at: tuple[str, int, int] | None = None):
        self.key, self.ext, self.cls, self.where, self.meta_at = key, ext, cls, where, meta_at
        self._meta, self._image = meta, None

    @property
    def image(self) -> bytes:
        return self._image if self._image is not None else read_at(*self.where)

    @image.setter
    def image(self, data: bytes) -> None:
        self._image = data

    @property
    def meta(self) -> dict:
        return self._meta if self._meta is not None else json.loads(read_at(*self.meta_at))

    @meta.setter
    def meta(self, value: dict) -> None:
        self._meta = value


def stored_samples(path: str | os.PathLike, keep_meta: bool = True) -> Iterator[StoredSample]:
    """The samples of a shard as :class:`StoredSample`: the json and cls members are read, the image is not;
    with ``keep_meta=False`` the provenance is parsed again at each access (see StoredSample)."""
    path = os.fspath(path)
    for d in iter_index(path):
        members = d["__members__"]
        ext = next((e for e in IMAGE_EXTS if e in members), None)
        if ext is None or "json" not in d or "cls" not in d:
            raise DataError(f"{path}: {d['__key__']}: a sample needs an image, json and cls member")
        yield StoredSample(d["__key__"], ext, int(d["cls"].decode()), json.loads(d["json"]) if keep_meta else None,
                           (path, *members[ext]), (path, *members["json"]))


class ShardSamples(Sequence):
    """The samples of some shard files, in order, read again at each pass: json and cls only, each image when it
    is asked for (:class:`StoredSample`). A card or a report over N samples holds one sample at a time, and
    the images it shows. ``n``: the number of samples, when known (a manifest's counts)."""

    def __init__(self, paths: Iterable[str | os.PathLike], n: int | None = None):
        self.paths = [os.fspath(p) for p in paths]
        self.n = n

    def __iter__(self) -> Iterator[StoredSample]:
        for path in self.paths:
            yield from stored_samples(path)

    def __len__(self) -> int:
        if self.n is None:
            self.n = sum(1 for _ in self)
        return self.n

    def __getitem__(self, i):
        if not isinstance(i, int) or not 0 <= i < len(self):
            raise IndexError(i)
        return next(s for j, s in enumerate(self) if j == i)
