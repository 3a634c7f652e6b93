"""Images with planted copies, for the audit's tests and benchmark (benchmarks/audit.py): distinct base images
(:func:`base_image`: smooth random scenes, a few shapes on a gradient, different per seed) and copies of some of them
under the transforms near-duplicate detectors are judged on (:data:`TRANSFORMS`): JPEG re-encode, crop 10-30%,
left-right flip, colour jitter, resize, a small overlay."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageOps


def base_image(seed: int, size: int = 96) -> Image.Image:
    """A distinct image per seed: a two-colour gradient, blurred noise and a few coloured shapes."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    angle = rng.uniform(0, 2 * np.pi)
    t = (np.cos(angle) * xx + np.sin(angle) * yy)[..., None]
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    img = c0 * (1 - t) + c1 * t
    noise = rng.normal(0, 1, (size // 8 + 1, size // 8 + 1, 3))
    noise = np.kron(noise, np.ones((8, 8, 1)))[:size, :size] * 30
    im = Image.fromarray(np.clip(img + noise, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(rng.integers(3, 7)):
        x0, y0 = rng.integers(0, size - 10, 2)
        w, h = rng.integers(8, size // 2, 2)
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x0 + w, y0 + h], fill=colour)
    return im


def _jpeg(im: Image.Image, quality: int) -> Image.Image:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=quality)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def _crop(im, rng):
    frac = rng.uniform(0.10, 0.30)  # the share of the area cut away
    side = (1 - frac) ** 0.5
    w, h = im.size
    cw, ch = int(w * side), int(h * side)
    x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
    return im.crop((x, y, x + cw, y + ch))


def _jitter(im, rng):
    im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.8, 1.2))
    im = ImageEnhance.Contrast(im).enhance(rng.uniform(0.8, 1.2))
    return ImageEnhance.Color(im).enhance(rng.uniform(0.8, 1.2))


def _overlay(im, rng):
    im = im.copy()
    w, h = im.size
    d = ImageDraw.Draw(im)
    x, y = rng.integers(0, w - w // 5), rng.integers(0, h - h // 8)
    d.rectangle([x, y, x + w // 5, y + h // 8], fill=(255, 255, 255))
    d.text((x + 1, y), "(c)", fill=(0, 0, 0))
    return im


TRANSFORMS = {
    "exact": lambda im, rng: im.copy(),
    "jpeg": lambda im, rng: _jpeg(im, int(rng.integers(50, 80))),
    "crop": _crop,
    "flip": lambda im, rng: ImageOps.mirror(im),
    "jitter": _jitter,
    "resize": lambda im, rng: im.resize((int(im.width * rng.uniform(0.5, 0.8)),) * 2, Image.Resampling.BICUBIC),
    "overlay": _overlay,
}


def plant(folder: Path, n_base: int, planted: dict[str, int], *, seed: int = 0, size: int = 96,
          categories: tuple[str, ...] = ("clock", "rabbit")) -> list[tuple[str, str, str]]:
    """``n_base`` distinct images as ``folder/<category>/base-NNNN.png`` and, for each transform of ``planted``,
    that many copies of the first base images (``copy-<transform>-NNNN.png``, each of another base image); returns
    the planted pairs ``(original file, copy file, transform)`` as paths relative to ``folder``."""
    rng = np.random.default_rng(seed + 1)
    files, pairs, nxt = {}, [], 0
    for i in range(n_base):
        cat = categories[i % len(categories)]
        rel = f"{cat}/base-{i:04d}.png"
        im = base_image(seed * 100_003 + i, size)
        files[rel] = im
    bases = list(files)
    for name, n in planted.items():
        for _ in range(n):
            src = bases[nxt % len(bases)]
            nxt += 1
            rel = f"{src.split('/')[0]}/copy-{name}-{nxt:04d}.png"
            files[rel] = TRANSFORMS[name](files[src], rng)
            pairs.append((src, rel, name))
    for rel, im in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        # copies at another PNG compression: an exact copy's pixels are the same, its bytes are not (a byte-identical
        # file is dropped by Borji's imports before any audit)
        im.convert("RGB").save(folder / rel, "PNG", compress_level=9 if "/copy-" in rel else 6)
    return pairs
