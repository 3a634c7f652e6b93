"""Full-size architectures with random, seeded weights: `random:<kind>`, for timing, memory and scaling.

Compute does not depend on weight values: a model built from its real architecture config with random weights
costs what the real one costs, and nothing is downloaded. Each kind is built offline from the configs packaged in
gensets/data/random/ (the diffusers / transformers config.json values of the real repos; timm and open_clip
architectures by their own registry names), saved in its library's format, and loaded back through the same real
loader as any other spec (diffusers.DiffusionPipeline.from_pretrained, timm.create_model, open_clip's
create_model_and_transforms), exactly as `tiny:` models are (gensets.models.tiny: built once per kernel set under
$GENSETS_CACHE/random/, seed 0).

    sd2.1          Stable Diffusion 2.1, the 768-v model: UNet (865.9M), VAE, OpenCLIP ViT-H text encoder (23 layers)
    sd2.1-base     Stable Diffusion 2.1 base, 512 px, epsilon prediction
    sdxl           Stable Diffusion XL base 1.0: UNet (2.57B), VAE, CLIP ViT-L and OpenCLIP ViT-bigG text encoders
    clip-vit-l-14  open_clip ViT-L-14 with QuickGELU (OpenAI's CLIP ViT-L/14, 427.6M)
    resnet50, vit-b-16, convnext-tiny   timm resnet50, vit_base_patch16_224, convnext_tiny (1000 classes)

Images a random generator makes are noise and a random classifier's predictions are chance: every sample
records its generator spec (`random:...`), the card says so, and `gensets publish` refuses a build made with a
random: model unless forced. `params` in each packaged config are the real checkpoints' parameter counts
(tests/test_random_models.py checks the configs against them). The diffusion pipelines are saved in float16
(half the disk: 2.6 GB for sd2.1, 7 GB for sdxl); they load in the dtype the generator asks for.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from gensets.models.tiny import TinyModel
from gensets.models.tiny.classifiers import clip_tokenizer
from gensets.registry import RANDOM_MODELS


def packaged(name: str) -> dict:
    """A packaged config of gensets/data/random/ (`sd2.1`, `sd2.1-base`, `sdxl`, `classifiers`)."""
    return json.loads(resources.files("gensets.data").joinpath("random", f"{name}.json").read_text())


def full_clip_tokenizer(**kwargs):
    """CLIP's own tokenizer (49,408 tokens: 256 bytes, their end-of-word forms, 48,894 merges, start and end),
    rebuilt offline from open_clip's copy of CLIP's BPE file, as a transformers CLIPTokenizer; `kwargs` as the
    packaged config says (Stable Diffusion 2's, OpenCLIP's, pads with "!")."""
    return clip_tokenizer(49152 - 256 - 2, **kwargs)


def diffusion_parts(cfg: dict, device: str = "cpu") -> dict:
    """The pipeline's parts built from packaged config `cfg` (random weights; device "meta": no memory)."""
    import diffusers
    import torch
    import transformers

    parts = {}
    with torch.device(device):
        parts["unet"] = diffusers.UNet2DConditionModel(**cfg["unet"])
        parts["vae"] = diffusers.AutoencoderKL(**cfg["vae"])
        for key in ("text_encoder", "text_encoder_2"):
            if key in cfg:
                conf = {k: v for k, v in cfg[key].items() if k != "class"}
                parts[key] = getattr(transformers, cfg[key]["class"])(transformers.CLIPTextConfig(**conf))
    return parts


class RandomDiffusion(TinyModel):
    loaders = ("diffusers",)
    quiet = ("diffusers", "transformers")

    @classmethod
    def build(cls, folder: Path) -> None:
        import diffusers
        import torch

        cfg = packaged(cls.name)  # gensets/data/random/<kind>.json
        parts = diffusion_parts(cfg)
        for key in ("tokenizer", "tokenizer_2"):
            if key in cfg:
                parts[key] = full_clip_tokenizer(**cfg[key])
        sched = {k: v for k, v in cfg["scheduler"].items() if k != "class"}
        # from_config, as from_pretrained reads scheduler_config.json: keys a class does not take are ignored
        parts["scheduler"] = getattr(diffusers, cfg["scheduler"]["class"]).from_config(sched)
        pipe_cls = getattr(diffusers, cfg["pipeline"])
        extra = {} if "text_encoder_2" in cfg else dict(safety_checker=None, feature_extractor=None,
                                                         requires_safety_checker=False)
        for part in parts.values():
            if isinstance(part, torch.nn.Module):  # torch's own cast: diffusers' .to() warns of a fp32 list (empty)
                torch.nn.Module.to(part, torch.float16)
        pipe = pipe_cls(**parts, **extra)
        pipe.save_pretrained(folder, safe_serialization=True)


def _register(base: type, kinds: tuple[str, ...]) -> None:
    """One registered subclass of ``base`` per kind; a kind's packaged config is found by its name."""
    for kind in kinds:
        RANDOM_MODELS.register(kind, type(f"Random_{kind.replace('-', '_').replace('.', '_')}", (base,), {"name": kind}))


_register(RandomDiffusion, ("sd2.1", "sd2.1-base", "sdxl"))


class RandomTimm(TinyModel):
    loaders = ("timm",)

    @classmethod
    def build(cls, folder: Path) -> None:
        import timm

        arch = packaged("classifiers")[cls.name]["architecture"]
        model = timm.create_model(arch, pretrained=False, num_classes=1000)
        timm.models.save_for_hf(model, str(folder), safe_serialization=True)


_register(RandomTimm, ("resnet50", "vit-b-16", "convnext-tiny"))


@RANDOM_MODELS.register("clip-vit-l-14")
class RandomClipViTL14(TinyModel):
    loaders = ("open_clip",)

    @staticmethod
    def build(folder: Path) -> None:
        import open_clip
        from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
        from open_clip.model import CLIP
        from safetensors.torch import save_file

        arch = packaged("classifiers")["clip-vit-l-14"]["architecture"]
        model_cfg = open_clip.get_model_config(arch)  # open_clip's own config of the architecture
        model = CLIP(**model_cfg)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(folder / "open_clip_model.safetensors"))
        preprocess_cfg = {"mean": list(OPENAI_DATASET_MEAN), "std": list(OPENAI_DATASET_STD),
                          "interpolation": "bicubic", "resize_mode": "shortest"}
        config = {"model_cfg": model_cfg, "preprocess_cfg": preprocess_cfg}
        (folder / "open_clip_config.json").write_text(json.dumps(config, indent=2) + "\n")
