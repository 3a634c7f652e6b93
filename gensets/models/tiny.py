"""Tiny random models built offline from configs, identical on every build (seed 0), saved with safetensors.

Each is saved in its library's own format and loaded back through the same code path as a real model:
    sd       diffusers StableDiffusionPipeline folder (64x64 images, DDIM)
    resnet   timm `test_resnet` folder for `local-dir:` (1000 ImageNet classes, 160 px input)
    vit      transformers ViTForImageClassification + ViTImageProcessor (1000 ImageNet classes, 32 px)
    clip     open_clip `local-dir:` folder (open_clip_config.json + open_clip_model.safetensors, 32 px)
    hf-clip  transformers CLIPModel + CLIPProcessor (32 px)
Built once under $GENSETS_CACHE/tiny/<kind>-v1 (default ~/.cache/gensets/tiny/<kind>-v1), in a temp
folder renamed into place, so concurrent builders are safe: the first rename wins.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from gensets.cache import cache_root
from gensets.errors import ModelError
from gensets.models.spec import TINY_KINDS

VERSION = "v1"
N_MERGES = 1000  # BPE merges kept for the tiny CLIP tokenizer (vocab = 512 byte tokens + merges + 2 specials)
_DONE = ".complete"
_BUILD_LOCK = threading.Lock()


def tiny_path(kind: str) -> Path:
    """The folder of tiny model `kind`, built on first use."""
    if kind not in TINY_KINDS:
        raise ModelError(f"model 'tiny:{kind}': unknown tiny model (expected one of {', '.join(TINY_KINDS)})")
    if kind in ("vilt-vqa", "blip-vqa", "vlm"):
        from gensets.models.tiny_vlm import tiny_vlm_path

        return tiny_vlm_path(kind)
    if kind == "t5":
        from gensets.models.tiny_text import tiny_text_path

        return tiny_text_path(kind)
    if kind == "blip-caption":
        from gensets.models.tiny_caption import tiny_caption_path

        return tiny_caption_path(kind)
    final = cache_root() / "tiny" / f"{kind}-{VERSION}"
    if (final / _DONE).is_file():
        return final
    with _BUILD_LOCK:  # the global torch RNG is seeded while building: one build at a time per process
        if (final / _DONE).is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{VERSION}-", dir=final.parent))
        try:
            _build(kind, tmp)
            (tmp / _DONE).write_text(f"tiny:{kind} {VERSION}\n")
            if final.exists() and not (final / _DONE).is_file():
                shutil.rmtree(final, ignore_errors=True)  # left over from an interrupted, non-atomic copy
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / _DONE).is_file():  # lost the race to a builder that failed: a real error
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _build(kind: str, folder: Path) -> None:
    import torch

    from gensets.models.hub import quiet_progress

    with torch.random.fork_rng(devices=[]), quiet_progress(*_LIBS.get(kind, ())):
        torch.manual_seed(0)
        _BUILDERS[kind](folder)


def clip_tokenizer(n_merges: int = N_MERGES):
    """A transformers CLIPTokenizer rebuilt offline from open_clip's BPE file, first `n_merges` merges."""
    import gzip

    from open_clip.tokenizer import bytes_to_unicode, default_bpe
    from transformers import CLIPTokenizer

    with gzip.open(default_bpe(), "rt", encoding="utf-8") as f:
        merges = [tuple(m.split()) for m in f.read().split("\n")[1 : n_merges + 1]]
    byte_chars = list(bytes_to_unicode().values())
    tokens = byte_chars + [c + "</w>" for c in byte_chars] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)


def _text_config(tokenizer) -> dict:
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _build_sd(d: Path) -> None:
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        sample_size=32,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    vae = AutoencoderKL(
        block_out_channels=(32, 64),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        layers_per_block=1,
        sample_size=64,
    )
    tokenizer = clip_tokenizer()
    text_encoder = CLIPTextModel(CLIPTextConfig(**_text_config(tokenizer)))
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(d, safe_serialization=True)


def _build_resnet(d: Path) -> None:
    import timm

    model = timm.create_model("test_resnet", pretrained=False, num_classes=1000)
    timm.models.save_for_hf(model, str(d), safe_serialization=True)


def _imagenet_id2label() -> dict[int, str]:
    from timm.data import ImageNetInfo

    return dict(enumerate(ImageNetInfo("imagenet-1k").label_descriptions()))


def _build_vit(d: Path) -> None:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    id2label = _imagenet_id2label()
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        image_size=32,
        patch_size=8,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    ViTForImageClassification(config).save_pretrained(d, safe_serialization=True)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(d)


def _build_clip(d: Path) -> None:
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
    from open_clip.model import CLIP
    from safetensors.torch import save_file

    model_cfg = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 8},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
    }
    preprocess_cfg = {
        "mean": list(OPENAI_DATASET_MEAN),
        "std": list(OPENAI_DATASET_STD),
        "interpolation": "bicubic",
        "resize_mode": "shortest",
    }
    model = CLIP(**model_cfg)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(d / "open_clip_model.safetensors"))
    config = {"model_cfg": model_cfg, "preprocess_cfg": preprocess_cfg}
    (d / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")


def _build_hf_clip(d: Path) -> None:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    tokenizer = clip_tokenizer()
    config = CLIPConfig(
        text_config=_text_config(tokenizer),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=32,
    )
    CLIPModel(config).save_pretrained(d, safe_serialization=True)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(d)


_LIBS = {"sd": ("diffusers", "transformers"), "vit": ("transformers",), "hf-clip": ("transformers",)}
_BUILDERS = {
    "sd": _build_sd,
    "resnet": _build_resnet,
    "vit": _build_vit,
    "clip": _build_clip,
    "hf-clip": _build_hf_clip,
}
