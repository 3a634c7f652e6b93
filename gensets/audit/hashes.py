"""The image fingerprints of the audit, one pure function each: the exact pixels (:func:`pixel_digest`), the
perceptual hash (:func:`phash`) and the difference hash (:func:`dhash`) of a decoded image, and the Hamming
distance between hashes (:func:`hamming`).

pHash and dHash are idealo's ``imagededup`` 0.3 variants (``imagededup.methods.hashing.PHash`` / ``DHash``, the tool
the issue names beside gensets), so that the benchmark compares the same hashes: the image resized with Lanczos
(32 x 32 for pHash, 9 wide x 8 high for dHash), then made grayscale (PIL's ``L``); pHash: the 2-D DCT-II
(``scipy.fft.dct`` along the rows, then the columns), its top-left 8 x 8 coefficients, each bit ``coefficient >=
the median of the 63 coefficients other than the DC term``; dHash: each bit ``pixel > its left neighbour`` over the
8 rows of 8 pairs. Bits are read row by row, the first bit the most significant of the 64-bit integer (the hex
string imagededup prints is that integer's). tests/test_audit.py holds them equal to imagededup's own code and to
hand-computed values.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

PHASH_SIZE = (32, 32)  # (width, height) the image is resized to before the DCT
DHASH_SIZE = (9, 8)  # 9 wide: 8 differences per row


def pixel_digest(img: Image.Image) -> str:
    """sha256 of the decoded image as RGB pixels (mode, size and bytes): two files are the same picture exactly
    when their digests are equal, whatever their encodings (a PNG and a lossless WebP of it) or metadata."""
    rgb = img.convert("RGB")
    h = hashlib.sha256(f"RGB {rgb.width}x{rgb.height}\n".encode())
    h.update(rgb.tobytes())
    return h.hexdigest()


def _bits(mask: np.ndarray) -> int:
    """A boolean array's bits, row by row, the first the most significant."""
    out = 0
    for b in mask.reshape(-1):
        out = (out << 1) | int(bool(b))
    return out


def gray(img: Image.Image, size: tuple[int, int]) -> np.ndarray:
    """The image resized to ``size`` (width, height) with Lanczos, then grayscale: imagededup's preprocessing
    (``preprocess_image(..., grayscale=True)``: resize first, then ``convert('L')``), as a uint8 array [h, w]."""
    import numpy as np
    from PIL import Image

    return np.asarray(img.convert("RGB").resize(size, Image.Resampling.LANCZOS).convert("L"))


def phash(pixels: np.ndarray) -> int:
    """The 64-bit perceptual hash of a 32 x 32 grayscale array (:func:`gray` with :data:`PHASH_SIZE`)."""
    import numpy as np
    from scipy.fft import dct

    coef = dct(dct(np.asarray(pixels, dtype=np.float64), axis=0), axis=1)[:8, :8]
    return _bits(coef >= np.median(coef.reshape(-1)[1:]))


def dhash(pixels: np.ndarray) -> int:
    """The 64-bit difference hash of an 8-high, 9-wide grayscale array (:func:`gray` with :data:`DHASH_SIZE`)."""
    import numpy as np

    p = np.asarray(pixels, dtype=np.int16)
    return _bits(p[:, 1:] > p[:, :-1])


def hamming(a, b):
    """The number of differing bits between 64-bit hashes (ints, or numpy uint64 arrays that broadcast)."""
    import numpy as np

    if isinstance(a, int) and isinstance(b, int):
        return (a ^ b).bit_count()
    return np.bitwise_count(np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64)))


def fingerprints(img: Image.Image, mirror: bool = True) -> dict:
    """Every hash of one decoded image: ``exact`` (:func:`pixel_digest`), ``phash``, ``dhash`` and, with
    ``mirror``, the hashes of its left-right mirror image (``phash_mirror``, ``dhash_mirror``: a flipped copy is
    found by comparing one image's mirror hash with the other's hash)."""
    from PIL import ImageOps

    out = {"exact": pixel_digest(img), "phash": phash(gray(img, PHASH_SIZE)), "dhash": dhash(gray(img, DHASH_SIZE))}
    if mirror:
        flipped = ImageOps.mirror(img.convert("RGB"))
        out["phash_mirror"] = phash(gray(flipped, PHASH_SIZE))
        out["dhash_mirror"] = dhash(gray(flipped, DHASH_SIZE))
    return out
