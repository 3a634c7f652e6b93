"""Check a folder of shards against its manifests: hashes, counts, tar structure, every member decodes, each
key once per (manifest, config, split), and every ``cls`` one of the classes the dataset card declares.

Members are streamed: an image is spooled (to disk past :data:`SPOOL` bytes) and decoded from there, text is
decoded chunk by chunk, and a ``.json`` over :data:`MAX_JSON` bytes or a ``.cls`` over :data:`MAX_CLS` bytes is
a problem rather than something to read, so memory stays bounded whatever a tar holds.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from gensets import recordio
from gensets.config import safe_load
from gensets.errors import DataError, GensetsError
from gensets.safety import inside, open_regular
from gensets.shards.manifest import Manifest, is_temp
from gensets.shards.reader import end_marker_ok, member_problem, split_name


@dataclass(frozen=True)
class Problem:
    shard: str
    member: str  # "-" when the problem is about the whole file
    what: str

    def __str__(self) -> str:
        return f"{self.shard}: {self.what}" if self.member == "-" else f"{self.shard}: {self.member}: {self.what}"


SPOOL = 8 << 20  # an image member up to this size is checked in memory, a larger one from a temporary file
MAX_JSON = 16 << 20  # a sample's .json is its provenance (a few KB): past this it is a problem, not read
MAX_CLS = 32  # a class index
_CHUNK = 1 << 20


def _image(f) -> None:
    with tempfile.SpooledTemporaryFile(SPOOL) as spool:
        shutil.copyfileobj(f, spool, _CHUNK)
        spool.seek(0)
        with warnings.catch_warnings():
            # Over Image.MAX_IMAGE_PIXELS PIL only warns (error over twice that): treat both as errors.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(spool) as im:
                im.load()


def _json(f) -> None:
    data = f.read(MAX_JSON + 1)
    if len(data) > MAX_JSON:
        raise ValueError(f"over {MAX_JSON} bytes (a sample's provenance is a few KB)")
    json.loads(data.decode("utf-8"))  # a finding's check only: the value is not used


def _txt(f) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")()
    while chunk := f.read(_CHUNK):
        decoder.decode(chunk)
    decoder.decode(b"", final=True)


def _cls(f) -> int:
    data = f.read(MAX_CLS + 1)
    if len(data) > MAX_CLS:
        raise ValueError(f"over {MAX_CLS} bytes")
    return int(data.decode("ascii"))


DECODERS: dict[str, Callable[[Any], Any]] = {
    "jpg": _image,
    "jpeg": _image,
    "png": _image,
    "webp": _image,
    "json": _json,
    "txt": _txt,
    "cls": _cls,
}


def _one_line(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())


@dataclass
class _Expect:
    manifest: Path
    sha256: str | None
    n: int | None
    group: tuple  # (manifest, config, split): a key appears once in a group
    classes: int | None  # how many classes the card declares for the shard's config (None: unknown)


def card_classes(folder: Path) -> dict[str, int]:
    """config -> how many classes the dataset card (``folder/README.md``) declares for ``cls``; {} without a card.
    DataError for a header that does not parse."""
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    inside(folder, "README.md")  # a card that is a symlink out of the dataset is not read
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return {}
    try:
        header = safe_load(text.split("---", 2)[1])
    except Exception as e:  # noqa: BLE001 - YAMLError, RecursionError: a finding about the card
        raise DataError(f"{readme}: the card's YAML header does not parse ({_one_line(e)})") from None
    out = {}
    infos = header.get("dataset_info") if isinstance(header, dict) else None
    for info in infos if isinstance(infos, list) else []:
        feats = info.get("features") if isinstance(info, dict) else None
        for feat in feats if isinstance(feats, list) else []:
            dtype = feat.get("dtype") if isinstance(feat, dict) and feat.get("name") == "cls" else None
            label = dtype.get("class_label") if isinstance(dtype, dict) else None
            names = label.get("names") if isinstance(label, dict) else None
            if isinstance(names, (dict, list)):
                out[str(info.get("config_name"))] = len(names)
    return out


def _entries(obj: Any) -> Iterator[dict]:
    """Every dict with a "path" found in a list under a "shards" key, at any depth."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "shards" and isinstance(v, list):
                yield from (e for e in v if isinstance(e, dict) and isinstance(e.get("path"), str))
            yield from _entries(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _entries(v)


def _read_manifest(path: Path) -> list[tuple[str, dict]]:
    """(relative shard path, entry) pairs; raises DataError for an unreadable manifest."""
    if path.name == "manifest.jsonl":  # a shard rewritten on resume has several rows: the last one counts
        last = {r["shard"]: r for r in Manifest(path).rows() if isinstance(r.get("shard"), str)}
        return list(last.items())
    try:
        obj = recordio.read(path, "AnyRecord")  # bounded, no control characters; its entries checked below
    except DataError as e:  # verify's own form, "path: what": the line and column go into the message
        where, sep, what = str(e).partition(": ")
        at = where.removeprefix(f"{path}").lstrip(":").split(":")
        raise DataError(f"{path}: {what}" + (f" at line {at[0]}, column {at[1]}" if sep and len(at) == 2 else "")) \
            from None
    try:
        return [(e["path"], e) for e in _entries(obj)]
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply to read; refusing it") from None


class _HashingReader:
    """Read-only file wrapper hashing every byte read, so one pass gives the tar and its sha256."""

    def __init__(self, f):
        self.f = f
        self.h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        b = self.f.read(n)
        self.h.update(b)
        return b

    def drain(self) -> str:
        while self.read(1 << 20):
            pass
        return self.h.hexdigest()


def _check_shard(path: Path, name: str, classes: int | None = None) -> tuple[str, set[str] | None, list[Problem]]:
    """Stream the shard once: (sha256, its sample keys or None if unreadable, problems). ``classes``: a ``cls``
    must be in ``0..classes-1``."""
    problems: list[Problem] = []
    keys: set[str] = set()
    members: set[str] = set()
    last_key = None
    readable = True
    with open_regular(path) as f:
        src = _HashingReader(f)
        try:
            with tarfile.open(fileobj=src, mode="r|") as tf:
                for info in tf:
                    why = member_problem(info)
                    if why or info.isdir():
                        if why:
                            problems.append(Problem(name, info.name, why))
                        continue
                    if info.name in members:
                        problems.append(Problem(name, info.name, "repeated member"))
                        continue
                    members.add(info.name)
                    parts = split_name(info.name)
                    if parts is None:
                        problems.append(Problem(name, info.name, "member name has no key.ext form"))
                        continue
                    key, ext = parts
                    if key != last_key and key in keys:
                        problems.append(
                            Problem(name, info.name, f"members of sample {key!r} are not contiguous")
                        )
                    keys.add(key)
                    last_key = key
                    decode = DECODERS.get(ext.rsplit(".", 1)[-1].lower())
                    if decode is None:
                        problems.append(Problem(name, info.name, f"no decoder for .{ext}"))
                        continue
                    try:
                        value = decode(tf.extractfile(info))  # streamed: never the whole member in memory
                    except (tarfile.TarError, EOFError):
                        raise  # the tar itself ends early: a finding about the whole file (below)
                    except Exception as e:  # any decoder failure is a finding, not a crash
                        problems.append(Problem(name, info.name, f"cannot decode: {_one_line(e)}"))
                        continue
                    if decode is _cls and classes is not None and not 0 <= value < classes:
                        problems.append(Problem(name, info.name, f"class {value} is not one of the {classes} "
                                                "classes the dataset card declares"))
                end = tf.offset
            if not end_marker_ok(path, end):
                readable = False
                problems.append(Problem(name, "-", "truncated or corrupt tar (no end-of-archive marker)"))
        except (tarfile.TarError, EOFError) as e:
            readable = False
            problems.append(Problem(name, "-", f"truncated or corrupt tar ({_one_line(e)})"))
        sha = src.drain()
    return sha, (keys if readable else None), problems


def verify(root: str | os.PathLike, *, progress: bool = False) -> list[Problem]:
    """Find every manifest and tar under `root` (or check the single tar `root`) and return problems.

    A manifest governs the tars in its folder and every folder below it: a tar there that no manifest
    lists is a problem, and so is a manifest path that is absolute or leaves the manifest's folder. A key in
    two shards of one manifest's (config, split), or of one folder's unlisted tars, is a problem, and so is a
    ``cls`` outside the classes that the card beside a ``manifest.json`` declares for the shard's config.

    Raises GensetsError if `root` does not exist.
    """
    root = Path(root)
    if not root.exists():
        raise GensetsError(f"{root}: no such file or directory")
    if not root.is_dir():
        try:
            open_regular(root).close()  # a FIFO or a device named *.tar is refused, never read
        except DataError as e:
            raise GensetsError(str(e)) from None
    problems: list[Problem] = []
    expect: dict[Path, list[_Expect]] = {}
    tars: list[Path] = []
    manifest_dirs: set[Path] = set()

    if root.is_file():
        tars.append(root)
        walk: list = []
    else:
        walk = sorted(os.walk(root))
    for folder, _dirs, files in walk:
        folder = Path(folder)
        for fname in sorted(files):
            p = folder / fname
            if is_temp(fname):
                problems.append(Problem(str(p), "-", "leftover temp file from a killed writer"))
            elif fname.endswith(".tar"):
                try:
                    inside(root, p.relative_to(root))  # a symlink out of the folder is not read
                    tars.append(p)
                except DataError as e:
                    problems.append(Problem(str(p), "-", str(e).removeprefix(f"{p}: ")))
            elif fname in ("manifest.json", "manifest.jsonl"):
                manifest_dirs.add(folder)
                try:
                    inside(root, p.relative_to(root))  # a manifest that is a symlink out of the folder is not read
                    entries = _read_manifest(p)
                    declared = card_classes(folder) if fname == "manifest.json" else {}
                except DataError as e:
                    problems.append(Problem(str(p), "-", str(e).removeprefix(f"{p}: ")))
                    continue
                for rel, entry in entries:
                    shard = Path(os.path.normpath(folder / rel))
                    if os.path.isabs(rel) or not shard.is_relative_to(folder):
                        problems.append(Problem(str(p), "-", f"shard path {rel!r} leaves {folder}"))
                        continue
                    try:
                        inside(folder, rel, where=str(p))
                    except DataError:
                        problems.append(Problem(str(p), "-", f"shard path {rel!r} leads out of {folder} "
                                                "through a symlink"))
                        continue
                    sha = entry.get("sha256")
                    n = entry.get("n")
                    config, split = entry.get("config"), entry.get("split")
                    expect.setdefault(shard, []).append(
                        _Expect(p, sha if isinstance(sha, str) else None, n if isinstance(n, int) else None,
                                (str(p), str(config), str(split)), declared.get(str(config)))
                    )

    shards = sorted({Path(os.path.normpath(t)) for t in tars} | set(expect))
    seen: dict[tuple, dict[str, str]] = {}  # group -> key -> the shard it was first seen in
    from tqdm.auto import tqdm

    # progress: a bar per shard on a terminal (rehashing and decoding every image takes a while at scale)
    for shard in tqdm(shards, desc="verify", unit="shard", disable=None if progress else True, leave=False):
        name = str(shard)
        if not shard.exists():
            for e in expect[shard]:
                problems.append(Problem(name, "-", f"listed in {e.manifest} but missing"))
            continue
        if shard not in expect and manifest_dirs.intersection(shard.parents):
            # a manifest anywhere above governs the tar (dataset/manifest.json over dataset/<config>/)
            problems.append(Problem(name, "-", "not listed in any manifest"))
        listed = expect.get(shard, [])
        classes = next((e.classes for e in listed if e.classes is not None), None)
        try:
            sha, keys, found = _check_shard(shard, name, classes)
        except OSError as e:
            problems.append(Problem(name, "-", f"cannot read: {_one_line(e)}"))
            continue
        except DataError as e:  # a FIFO, a device: refused, never read
            problems.append(Problem(name, "-", str(e).removeprefix(f"{name}: ")))
            continue
        n = None if keys is None else len(keys)
        for group in {e.group for e in listed} or {("folder", str(shard.parent))}:
            first = seen.setdefault(group, {})
            for key in sorted(keys or ()):
                if first.setdefault(key, name) != name:
                    problems.append(Problem(name, key, f"key also in {first[key]} (the same sample twice)"))
        for e in listed:
            if e.sha256 is not None and e.sha256 != sha:
                problems.append(Problem(name, "-", f"sha256 {sha} differs from {e.sha256} in {e.manifest}"))
            if e.n is not None and n is not None and e.n != n:
                problems.append(Problem(name, "-", f"{n} samples, {e.manifest} says {e.n}"))
        problems.extend(found)
    # The same fact can come from two manifests listing one shard identically: report it once.
    return list(dict.fromkeys(problems))
