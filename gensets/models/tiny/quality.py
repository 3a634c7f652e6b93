"""Tiny networks of the image-quality metrics (gensets.models.scorers), random weights in model.safetensors:

    inception       torch-fidelity's FeatureExtractorInceptionV3, the full architecture (the real one's class and
                    size; convolutions He-initialised so its features do not vanish)
    lpips           lpips.LPIPS with an AlexNet backbone (linear layers non-negative, as trained ones are)
    aesthetic-head  the LAION aesthetic predictor v2's MLP over 32-d embeddings (the tiny CLIPs' width)
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from gensets.models.aesthetic import aesthetic_mlp
from gensets.models.scorers import lpips_network
from gensets.models.tiny import TinyModel
from gensets.registry import TINY_MODELS


def _save(model, folder: Path) -> None:
    from safetensors.torch import save_model

    save_model(model, str(folder / "model.safetensors"))  # (LPIPS holds its linear layers twice: saved once)


@TINY_MODELS.register("inception")
class TinyInception(TinyModel):
    loaders = ("inception",)

    @staticmethod
    def build(folder: Path) -> None:
        import torch
        from torch import nn
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

        class Random(FeatureExtractorInceptionV3):  # the class's own layers; its loading of weights skipped
            def load_state_dict(self, state_dict, strict=True, assign=False):
                return None

        empty = io.BytesIO()
        torch.save({}, empty)
        empty.seek(0)
        model = Random("inception-v3-compat", ["2048"], feature_extractor_weights_path=empty)
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=m.in_features ** -0.5)
                nn.init.zeros_(m.bias)
        _save(model, folder)


@TINY_MODELS.register("lpips")
class TinyLpips(TinyModel):
    loaders = ("lpips",)

    @staticmethod
    def build(folder: Path) -> None:
        import torch

        model = lpips_network("alex", pretrained=False)
        with torch.no_grad():
            for lin in model.lins:
                lin.model[-1].weight.abs_()
        _save(model, folder)
        (folder / "config.json").write_text(json.dumps({"net": "alex"}) + "\n")


@TINY_MODELS.register("aesthetic-head")
class TinyAestheticHead(TinyModel):
    loaders = ("aesthetic-head",)

    @staticmethod
    def build(folder: Path) -> None:
        _save(aesthetic_mlp(32), folder)
