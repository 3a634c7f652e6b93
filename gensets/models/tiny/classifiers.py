"""Tiny image classifiers, one per classifier library:

    resnet   timm `test_resnet` folder for `local-dir:` (1000 ImageNet classes, 160 px input)
    vit      transformers ViTForImageClassification + ViTImageProcessor (1000 ImageNet classes, 32 px)
    clip     open_clip `local-dir:` folder (open_clip_config.json + open_clip_model.safetensors, 32 px)
    hf-clip  transformers CLIPModel + CLIPProcessor (32 px)
    torchvision-googlenet  torchvision GoogLeNet, random weights saved as the torch hub checkpoint of
             torchvision:googlenet@IMAGENET1K_V1 (torchvision's own format, a pickle: loading it needs
             allow_pickle, as the real weights do), loaded through get_model(..., weights=IMAGENET1K_V1)
The CLIP tokenizer (rebuilt offline from open_clip's BPE file) and text config serve the tiny SD too.
"""

from __future__ import annotations

import json
from pathlib import Path

from gensets.models.tiny import TinyModel, transformer_config, vision_config
from gensets.registry import TINY_MODELS

N_MERGES = 1000  # BPE merges kept for the tiny CLIP tokenizer (vocab = 512 byte tokens + merges + 2 specials)


def clip_tokenizer(n_merges: int = N_MERGES, **kwargs):
    """A transformers CLIPTokenizer rebuilt offline from open_clip's BPE file, first `n_merges` merges (CLIP's
    own: 48,894); `kwargs` go to CLIPTokenizer (e.g. pad_token)."""
    import gzip

    from open_clip.tokenizer import bytes_to_unicode, default_bpe
    from transformers import CLIPTokenizer

    with gzip.open(default_bpe(), "rt", encoding="utf-8") as f:
        merges = [tuple(m.split()) for m in f.read().split("\n")[1 : n_merges + 1]]
    byte_chars = list(bytes_to_unicode().values())
    tokens = byte_chars + [c + "</w>" for c in byte_chars] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    return CLIPTokenizer(vocab=vocab, merges=merges, **{"model_max_length": 77, **kwargs})


def clip_text_config(tokenizer) -> dict:
    """A tiny CLIP text encoder's config over `tokenizer` (a CLIPTextConfig's arguments)."""
    return transformer_config(
        vocab_size=len(tokenizer),
        max_position_embeddings=77,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def _imagenet_id2label() -> dict[int, str]:
    from timm.data import ImageNetInfo

    return dict(enumerate(ImageNetInfo("imagenet-1k").label_descriptions()))


@TINY_MODELS.register("resnet")
class TinyResnet(TinyModel):
    loaders = ("timm",)

    @staticmethod
    def build(folder: Path) -> None:
        import timm

        model = timm.create_model("test_resnet", pretrained=False, num_classes=1000)
        timm.models.save_for_hf(model, str(folder), safe_serialization=True)


@TINY_MODELS.register("vit")
class TinyViT(TinyModel):
    loaders = ("hf",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

        id2label = _imagenet_id2label()
        config = ViTConfig(
            **vision_config(),
            num_labels=len(id2label),
            id2label=id2label,
            label2id={v: k for k, v in id2label.items()},
        )
        ViTForImageClassification(config).save_pretrained(folder, safe_serialization=True)
        ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)


@TINY_MODELS.register("clip")
class TinyClip(TinyModel):
    loaders = ("open_clip",)

    @staticmethod
    def build(folder: Path) -> None:
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
        save_file(state, str(folder / "open_clip_model.safetensors"))
        config = {"model_cfg": model_cfg, "preprocess_cfg": preprocess_cfg}
        (folder / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")


@TINY_MODELS.register("hf-clip")
class TinyHFClip(TinyModel):
    loaders = ("hf",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

        tokenizer = clip_tokenizer()
        config = CLIPConfig(
            text_config=clip_text_config(tokenizer), vision_config=vision_config(), projection_dim=32
        )
        CLIPModel(config).save_pretrained(folder, safe_serialization=True)
        image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
        CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)


@TINY_MODELS.register("torchvision-googlenet")
class TinyTorchvisionGoogLeNet(TinyModel):
    """GoogLeNet, one of the two classifiers of Borji (2022) that timm lacks: the full architecture (6.6M
    parameters, 26 MB; AlexNet's 61M would be 244 MB), with the auxiliary heads the real checkpoint carries,
    so `get_model("googlenet", weights=GoogLeNet_Weights.IMAGENET1K_V1)` loads it exactly as the real file."""

    loaders = ("torchvision",)
    stands_for = "torchvision:googlenet@IMAGENET1K_V1"  # the spec whose weights enum and file name it takes

    @classmethod
    def build(cls, folder: Path) -> None:
        from urllib.parse import urlparse

        import torch
        from torchvision.models import get_model, get_model_weights

        arch, _, name = cls.stands_for.removeprefix("torchvision:").partition("@")
        weights = get_model_weights(arch)[name]
        # PyTorch's default init (init_weights=False): torchvision's truncated normal (std 0.01) shrinks the
        # activations of a random GoogLeNet towards subnormal floats, which CPUs compute very slowly
        model = get_model(arch, weights=None, num_classes=len(weights.meta["categories"]), aux_logits=True,
                          init_weights=False)
        checkpoints = folder / "hub" / "checkpoints"
        checkpoints.mkdir(parents=True)
        torch.save(model.state_dict(), checkpoints / Path(urlparse(weights.url).path).name)
