"""A tiny text-to-image model:

    sd  diffusers StableDiffusionPipeline folder (64x64 images, DDIM), its text encoder a tiny CLIP. As in Stable
        Diffusion, the VAE has four blocks (latents 8x smaller than the image: 8x8 for 64x64), so the UNet runs on
        what SD's runs on, in miniature (v1 had two: 32x32 latents, 16 times the UNet's work per step; the GenBench
        smoke build took 20.6 s of CPU with v1, 7.2 s with v2)
"""

from __future__ import annotations

from pathlib import Path

from gensets.models.tiny import TinyModel
from gensets.models.tiny.classifiers import clip_text_config, clip_tokenizer
from gensets.registry import TINY_MODELS


def pipeline(vae_blocks: int = 4):
    """The tiny StableDiffusionPipeline, random weights from the global RNG: a VAE of ``vae_blocks`` blocks (4: latents
    8x smaller than the image, as SD's; 2: tiny:sd v1, kept for tests/test_failure_modes.py's prompt-sensitive model)."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        sample_size=64 // 2 ** (vae_blocks - 1),
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    vae = AutoencoderKL(
        block_out_channels=(32, 64) if vae_blocks == 2 else (32,) * (vae_blocks - 1) + (64,),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * vae_blocks,
        up_block_types=("UpDecoderBlock2D",) * vae_blocks,
        latent_channels=4,
        layers_per_block=1,
        sample_size=64,
    )
    tokenizer = clip_tokenizer()
    text_encoder = CLIPTextModel(CLIPTextConfig(**clip_text_config(tokenizer)))
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    return StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


@TINY_MODELS.register("sd")
class TinySD(TinyModel):
    loaders = ("diffusers",)
    quiet = ("diffusers", "transformers")

    @staticmethod
    def build(folder: Path) -> None:
        pipeline().save_pretrained(folder, safe_serialization=True)
