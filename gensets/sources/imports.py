"""Importing images people already collected: a folder of ``category/*.jpg`` or a CSV / JSONL list.

Every file is checked before it is taken: a file that is not an image, a corrupt or truncated image,
and a decompression bomb (more pixels than the limit, checked from the header before decoding) are
skipped with their reason, as are files outside a category folder. Published bytes carry no metadata
(see ``load_checked``); a sample's ``original_path`` is relative to the import, never a local absolute path.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from ..config import control_char
from ..errors import ConfigError, DataError
from ..images import encode_image
from ..shards import sha256_file

_PIL_EXT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}
# what may identify a person or a place: EXIF (GPS, camera serial), XMP, IPTC, ICC, comments, PNG text
_METADATA = ("exif", "xmp", "XML:com.adobe.xmp", "icc_profile", "photoshop", "comment")


@dataclass(frozen=True)
class Item:
    path: str  # absolute, to read the file; never published
    category: str
    source: str | None
    key: str | None = None  # an explicit sample key (JSONL / CSV), else derived from the content
    rel: str = ""  # published as original_path: relative to the import root or the list's folder
    skip: str | None = None  # why the file is not imported, known before reading it


class Skip(Exception):
    """A file that is not imported; the message is the reason."""


def list_items(path: Path, default_source: str | None) -> list[Item]:
    """The files of an import: ``path`` is a folder (``category/file``), a .csv or a .jsonl."""
    if path.is_dir():
        root = path.resolve()
        for f in sorted(path.iterdir()):
            if control_char(f.name):
                raise ConfigError(f"{f}: control character {control_char(f.name)} in a category folder's name; "
                                  "refusing it (it would reach the dataset card and the terminal)")
        return [Item(str(f.resolve()), f.parent.name, default_source, rel=f.relative_to(path).as_posix(),
                     skip="a symlink out of the import folder" if not f.resolve().is_relative_to(root)
                     else None if f.parent != path else "not in a category folder (put it in <import>/<category>/)")
                for f in sorted(path.rglob("*")) if f.is_file() and not f.name.startswith(".")]
    try:
        rows = _list_rows(path)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    items = []
    for line, row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("path"), str) or not row["path"] \
                or not row.get("category"):
            raise ConfigError(f"{path}:{line}: each row needs 'path' (a string) and 'category'")
        for key in ("category", "source", "key"):
            bad = control_char(str(row.get(key) or ""))
            if bad:
                raise ConfigError(f"{path}:{line}: {key}: control character {bad} in {str(row[key])[:80]!r}; "
                                  "refusing it (it would reach the dataset card and the terminal)")
        written = Path(row["path"])
        p = (written if written.is_absolute() else path.parent / written).resolve()
        try:
            rel = p.relative_to(path.parent.resolve()).as_posix()
        except ValueError:  # outside the list's folder: as written when relative, else the file name
            rel = written.as_posix() if not written.is_absolute() else p.name
        items.append(Item(str(p), str(row["category"]), row.get("source") or default_source,
                          str(row["key"]) if row.get("key") else None, rel))
    return items


def _list_rows(path: Path) -> list[tuple[int, dict]]:
    """(line, row) of a .csv (the line a record starts on; quoted newlines allowed) or a .jsonl."""
    rows: list[tuple[int, dict]] = []
    if path.suffix.lower() == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            try:
                reader.fieldnames  # noqa: B018 - reads the header, so line_num is where the rows begin
                start = reader.line_num + 1
                for row in reader:
                    rows.append((start, row))
                    start = reader.line_num + 1
            except csv.Error as e:
                raise ConfigError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None
    elif path.suffix.lower() in (".jsonl", ".ndjson"):
        with open(path, "rb") as f:
            for i, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ConfigError(f"{path}:{i}: not UTF-8 text ({e.reason} at byte {e.start})") from None
                if line.strip():
                    try:
                        rows.append((i, json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise ConfigError(f"{path}:{i}: not valid JSON ({e.msg})") from None
                    except (ValueError, RecursionError) as e:  # a number of 4300+ digits, deep nesting
                        raise ConfigError(f"{path}:{i}: not valid JSON ({' '.join(str(e).split())[:200]})") \
                            from None
    else:
        raise ConfigError(f"{path}: an import is a folder, a .csv or a .jsonl file")
    return rows


def file_digest(path: str) -> str:
    """The file's sha256, or ``unreadable:<errno>`` (the file is then skipped when read, with its reason)."""
    try:
        return sha256_file(path)
    except OSError as e:
        return f"unreadable:{e.errno}"


def check_max_pixels(max_pixels: int) -> None:
    """A config's ``max_pixels`` must be one PIL enforces: past twice ``Image.MAX_IMAGE_PIXELS`` PIL's own
    process-wide guard refuses a header before ours is asked (we leave that guard as it is)."""
    from PIL import Image

    hard = 2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS else None
    if max_pixels < 1 or (hard and max_pixels >= hard):
        raise ValueError(f"max_pixels: must be in 1..{hard - 1 if hard else 'any'} (PIL refuses larger images "
                         f"itself), got {max_pixels}")


def load_checked(path: str, max_pixels: int, fmt: str, quality: int, sha256: str | None = None,
                 name: str | None = None):
    """(the bytes to publish in format ``fmt``, the decoded RGB image), or raise Skip with the reason.

    ``sha256``: the file's hash when the build was planned; bytes that differ are a DataError naming the
    file as ``name`` (its path relative to the config), as the unit would no longer describe them.

    The original bytes are published unchanged only when they are already in ``fmt`` and carry no
    metadata. Otherwise the decoded pixels are encoded in ``fmt`` without any metadata (EXIF with GPS,
    XMP, ICC, comments, PNG text): lossless for png and webp at quality 100, one generation of
    ``quality`` for jpg and webp. The EXIF orientation is applied first, so the image stays upright.
    Provenance keeps the original file's sha256 either way.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise Skip(f"cannot read: {e.strerror}") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise DataError(f"{name or Path(path).name}: the file changed since the build was planned "
                        "(its sha256 differs); run the build again")
    try:
        # Image.open reads only the header: the size is known before anything is decoded. PIL's own
        # process-wide guard (Image.MAX_IMAGE_PIXELS, left as it is) may refuse a huge header first.
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            if w * h > max_pixels:
                raise Skip(f"decompression bomb: {w}x{h} = {w * h} pixels is over the limit of {max_pixels}")
            im.load()  # decode fully: a truncated or corrupt file fails here
            clean = _PIL_EXT.get(im.format) == fmt and not any(k in im.info for k in _METADATA) and (
                # a JPEG only with JFIF's APP0 (no APPn PIL does not name) and nothing after its EOI; a PNG is
                # always re-encoded (lossless), as it may carry chunks PIL does not report
                im.format == "WEBP" or (im.format == "JPEG" and data.endswith(b"\xff\xd9")
                                        and all(m == "APP0" for m, _ in getattr(im, "applist", []))))
            rgb = ImageOps.exif_transpose(im).convert("RGB")
    except Skip:
        raise
    except UnidentifiedImageError:
        raise Skip("not an image") from None
    except Image.DecompressionBombError as e:  # over PIL's own limit (see check_max_pixels)
        raise Skip(f"decompression bomb: {e}") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise Skip(f"corrupt image: {e}") from None
    return (data if clean else encode_image(rgb, fmt, quality)), rgb
