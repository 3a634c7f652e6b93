"""Draw the GenBench smoke data once: configs/genbench.smoke-train/<class>/<i>.png (the original-data baseline's
training images) and configs/genbench.smoke-pool/<stem>.png + <stem>.txt (the retrieval pool: the three classes
and three distractors, each with a caption). 32x32 PNG drawings, seeded: running it again writes the same bytes.

    python scripts/genbench_smoke_data.py
"""

from __future__ import annotations

import random
from pathlib import Path

from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parents[1] / "configs"
SKY, SEA = (135, 190, 235), (30, 80, 150)


def draw(kind: str, rng: random.Random) -> Image.Image:
    jitter = lambda c: tuple(max(0, min(255, v + rng.randint(-25, 25))) for v in c)  # noqa: E731
    dx, dy = rng.randint(-4, 4), rng.randint(-4, 4)
    im = Image.new("RGB", (32, 32), jitter(SKY if kind in ("airplane", "ship", "tree") else (200, 190, 170)))
    d = ImageDraw.Draw(im)
    if kind == "airplane":
        d.rectangle([6 + dx, 14 + dy, 26 + dx, 17 + dy], fill=jitter((240, 240, 240)))
        d.polygon([(13 + dx, 15 + dy), (19 + dx, 15 + dy), (16 + dx, 5 + dy)], fill=jitter((220, 220, 230)))
        d.polygon([(13 + dx, 16 + dy), (19 + dx, 16 + dy), (16 + dx, 27 + dy)], fill=jitter((220, 220, 230)))
    elif kind == "cat":
        d.ellipse([8 + dx, 12 + dy, 24 + dx, 28 + dy], fill=jitter((230, 140, 50)))
        d.polygon([(9 + dx, 15 + dy), (12 + dx, 6 + dy), (15 + dx, 13 + dy)], fill=jitter((230, 140, 50)))
        d.polygon([(17 + dx, 13 + dy), (20 + dx, 6 + dy), (23 + dx, 15 + dy)], fill=jitter((230, 140, 50)))
    elif kind == "ship":
        d.rectangle([0, 22, 31, 31], fill=jitter(SEA))
        d.polygon([(5 + dx, 18 + dy), (27 + dx, 18 + dy), (23 + dx, 24 + dy), (9 + dx, 24 + dy)], fill=jitter((120, 70, 40)))
        d.rectangle([15 + dx, 8 + dy, 17 + dx, 18 + dy], fill=jitter((90, 60, 40)))
    elif kind == "car":
        d.rectangle([5 + dx, 16 + dy, 27 + dx, 23 + dy], fill=jitter((200, 30, 30)))
        d.ellipse([7 + dx, 21 + dy, 12 + dx, 26 + dy], fill=(20, 20, 20))
        d.ellipse([20 + dx, 21 + dy, 25 + dx, 26 + dy], fill=(20, 20, 20))
    elif kind == "tree":
        d.rectangle([14 + dx, 18 + dy, 18 + dx, 30], fill=jitter((100, 70, 30)))
        d.ellipse([7 + dx, 4 + dy, 25 + dx, 22 + dy], fill=jitter((40, 140, 50)))
    else:  # flower
        for cx, cy in ((16, 10), (10, 16), (22, 16), (16, 22)):
            d.ellipse([cx - 4 + dx, cy - 4 + dy, cx + 4 + dx, cy + 4 + dy], fill=jitter((230, 80, 160)))
        d.ellipse([13 + dx, 13 + dy, 19 + dx, 19 + dy], fill=jitter((250, 220, 40)))
    return im


CAPTIONS = {
    "airplane": ["a jet airplane in a blue sky", "a white passenger airplane flying", "an airplane seen from below",
                 "a small propeller airplane over clouds"],
    "cat": ["an orange cat sitting on the floor", "a tabby cat with pointed ears", "a cat curled up asleep",
            "a kitten looking at the camera"],
    "ship": ["a cargo ship at sea", "a wooden sailing ship on the ocean", "a ship in a harbour",
             "a fishing boat on blue water"],
    "car": ["a red car parked on a street"], "tree": ["a green tree in a field"], "flower": ["a pink flower in bloom"],
}


def main() -> None:
    rng = random.Random(0)
    for c in ("airplane", "cat", "ship"):
        for i in range(4):
            path = ROOT / "genbench.smoke-train" / c / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            draw(c, rng).save(path, optimize=True)
    pool = ROOT / "genbench.smoke-pool"
    pool.mkdir(parents=True, exist_ok=True)
    for kind, captions in CAPTIONS.items():
        for i, caption in enumerate(captions):
            draw(kind, rng).save(pool / f"{kind}{i}.png", optimize=True)
            (pool / f"{kind}{i}.txt").write_text(caption + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
