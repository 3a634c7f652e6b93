"""Importing images people already collected: a folder of ``category/*.jpg`` or a CSV / JSONL list.

Every file is checked before it is taken: a file that is not an image, a corrupt or truncated image,
and a decompression bomb (more pixels than the limit, checked from the header before decoding) are
skipped with their reason; nothing else is changed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
_PIL_EXT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}


@dataclass(frozen=True)
class Item:
    path: str  # absolute
    category: str
    source: str | None
    key: str | None = None  # an explicit sample key (JSONL), else derived from the path


class Skip(Exception):
    """A file that is not imported; the message is the reason."""


def list_items(path: Path, default_source: str | None) -> list[Item]:
    """The files of an import: ``path`` is a folder (``category/file``), a .csv or a .jsonl."""
    if path.is_dir():
        items = [Item(str(f.resolve()), f.parent.name, default_source)
                 for f in sorted(path.rglob("*")) if f.is_file() and f.parent != path
                 and not f.name.startswith(".")]
        return items
    rows: list[tuple[int, dict]] = []
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".csv":
        rows = list(enumerate(csv.DictReader(text.splitlines()), start=2))
    elif path.suffix.lower() in (".jsonl", ".ndjson"):
        for i, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((i, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{path}:{i}: not valid JSON ({e.msg})") from None
    else:
        raise ConfigError(f"{path}: an import is a folder, a .csv or a .jsonl file")
    items = []
    for line, row in rows:
        if not isinstance(row, dict) or not row.get("path") or not row.get("category"):
            raise ConfigError(f"{path}:{line}: each row needs 'path' and 'category'")
        p = Path(row["path"])
        p = p if p.is_absolute() else (path.parent / p)
        items.append(Item(str(p.resolve()), str(row["category"]), row.get("source") or default_source,
                          row.get("key")))
    return items


def file_digest(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        return f"unreadable:{e.errno}"
    return h.hexdigest()


def load_checked(path: str, max_pixels: int):
    """(original bytes, PIL format ext or None, decoded RGB image), or raise Skip with the reason."""
    from PIL import Image, UnidentifiedImageError

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise Skip(f"cannot read: {e.strerror}") from None
    limit = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None  # our own limit applies, from the header, before anything is decoded
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            if w * h > max_pixels:
                raise Skip(f"decompression bomb: {w}x{h} = {w * h} pixels is over the limit of {max_pixels}")
            fmt = im.format
            im.load()  # decode fully: a truncated or corrupt file fails here
            rgb = im.convert("RGB")
    except Skip:
        raise
    except UnidentifiedImageError:
        raise Skip("not an image") from None
    except Image.DecompressionBombError as e:
        raise Skip(f"decompression bomb: {e}") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise Skip(f"corrupt image: {e}") from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    return data, _PIL_EXT.get(fmt), rgb
