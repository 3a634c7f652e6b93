"""Images in and out: the file suffixes gensets reads, the formats it stores, one encoder, one decoder.

``encode_image`` is the only place an image becomes bytes (deterministic: the same pixels give the same
bytes, no metadata) and ``decode_image`` the only place bytes become an RGB image, so what a surrogate, an
evaluated model, a report and the review page see is exactly what was stored.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

# what a shard stores an image as (the member's extension)
IMAGE_EXTS = ("jpg", "png", "webp")
# which files are read as images: imports, reference and test folders, VQA image folders
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"})
_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "webp": "WEBP"}


def is_image_file(path) -> bool:
    """A file whose suffix names an image format gensets reads (not a hidden file)."""
    return path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith(".")


def encode_image(img: Image.Image, fmt: str = "webp", quality: int = 95) -> bytes:
    """Encode `img` as RGB jpg, png or webp; the same pixels always give the same bytes.

    No metadata is written (EXIF, ICC profile and PNG text chunks of `img.info` are dropped).
    `quality` is used by jpg and webp; webp with quality 100 is lossless. png ignores it.
    """
    fmt = fmt.lower()
    if fmt not in _FORMATS:
        raise ValueError(f"unknown image format {fmt!r}: use one of jpg, png, webp")
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be in 1..100, got {quality}")
    rgb = img.convert("RGB")  # always a new image
    rgb.info = {}  # PNG would otherwise carry icc_profile / text chunks over
    buf = io.BytesIO()
    if fmt == "png":
        rgb.save(buf, "PNG", optimize=False, compress_level=6)
    elif fmt == "webp":
        if quality == 100:
            rgb.save(buf, "WEBP", lossless=True, quality=100, method=4, exact=False)
        else:
            rgb.save(buf, "WEBP", quality=quality, method=4)
    else:
        rgb.save(buf, "JPEG", quality=quality, subsampling=0 if quality >= 90 else 2, optimize=False)
    return buf.getvalue()


def decode_image(data: bytes) -> Image.Image:
    """Stored bytes -> an RGB PIL image. More pixels than ``PIL.Image.MAX_IMAGE_PIXELS`` (the limit ``gensets
    verify`` enforces) is a ValueError, raised from the header before anything is decoded: PIL itself only warns
    up to twice that, and a 13000x13000 image would take 0.5 GB."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():  # PIL warns of the size we refuse just below: say it once, as an error
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        im = Image.open(io.BytesIO(data))
    with im:
        w, h = im.size
        if Image.MAX_IMAGE_PIXELS and w * h > Image.MAX_IMAGE_PIXELS:
            raise ValueError(f"{w}x{h} = {w * h} pixels is over the limit of {Image.MAX_IMAGE_PIXELS} "
                             "(a decompression bomb?)")
        return im.convert("RGB")
