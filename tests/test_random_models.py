"""random: model specs: the real architectures, random weights, built offline from packaged configs.

The parameter counts below are the real checkpoints' (the safetensors headers of the Hub repos each kind stands
for, and timm's / open_clip's model tables): the packaged configs must build exactly those architectures.
"""

import json
import shutil

import pytest

from gensets.errors import ModelError
from gensets.models.random import diffusion_parts, packaged
from gensets.models.spec import parse_spec
from gensets.registry import RANDOM_MODELS

from .conftest import SMALL, SMOKE, run_cli

# the real models' parameter counts (independent of the packaged configs' "params", checked against them too)
REAL = {
    "sd2.1": {"unet": 865_910_724, "vae": 83_653_863, "text_encoder": 340_387_840},
    "sd2.1-base": {"unet": 865_910_724, "vae": 83_653_863, "text_encoder": 340_387_840},
    "sdxl": {"unet": 2_567_463_684, "vae": 83_653_863, "text_encoder": 123_060_480,
             "text_encoder_2": 694_659_840},
    "resnet50": 25_557_032, "vit-b-16": 86_567_656, "convnext-tiny": 28_589_128, "clip-vit-l-14": 427_616_513,
}


def _count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("kind", ["sd2.1", "sd2.1-base", "sdxl"])
def test_diffusion_configs_build_the_real_architectures(kind):
    import torch

    cfg = packaged(kind)
    parts = diffusion_parts(cfg, device="meta")  # the architectures without memory: counts only
    assert {name: _count(m) for name, m in parts.items()} == REAL[kind] == cfg["params"]
    assert all(p.device == torch.device("meta") for m in parts.values() for p in m.parameters())


def test_classifier_configs_build_the_real_architectures():
    import open_clip
    import timm
    import torch

    cfg = packaged("classifiers")
    with torch.device("meta"):
        for kind in ("resnet50", "vit-b-16", "convnext-tiny"):
            assert _count(timm.create_model(cfg[kind]["architecture"], num_classes=1000)) == REAL[kind]
            assert cfg[kind]["params"] == REAL[kind]
        clip = open_clip.model.CLIP(**open_clip.get_model_config(cfg["clip-vit-l-14"]["architecture"]))
    assert _count(clip) == REAL["clip-vit-l-14"] == cfg["clip-vit-l-14"]["params"]


def test_the_full_clip_tokenizer_is_clips():
    from gensets.models.random import full_clip_tokenizer

    tok = full_clip_tokenizer(pad_token="!")
    assert len(tok) == 49408 and tok.pad_token_id == 0  # SD 2's (OpenCLIP's) tokenizer pads with "!" (id 0)
    ids = tok("a photo of a cat").input_ids
    assert ids[0] == 49406 and ids[-1] == 49407  # <|startoftext|>, <|endoftext|>
    # CLIP's ids for these words (the original tokenizer's vocab.json: "a</w>" 320, "photo</w>" 1125, ...)
    assert ids[1:-1] == [320, 1125, 539, 320, 2368]


def test_specs():
    assert set(RANDOM_MODELS) >= {"sd2.1", "sd2.1-base", "sdxl", "clip-vit-l-14", "resnet50", "vit-b-16",
                                  "convnext-tiny"}
    s = parse_spec("random:sd2.1")
    assert s.kind == "random" and s.is_built and not s.is_tiny
    with pytest.raises(ModelError, match="unknown random model 'sd9'.*sd2.1"):
        parse_spec("random:sd9")
    from gensets.models.generator import load_generator

    with pytest.raises(ModelError, match="random:resnet50' is not an image generator.*random:sd2.1"):
        load_generator("random:resnet50")


@pytest.mark.slow
def test_a_random_classifier_loads_through_timm_and_a_random_build_is_not_published(tmp_path):
    """random:resnet50 as the surrogate of a smoke build: loaded by timm.create_model from its folder, recorded,
    named on the card; publish refuses the dataset unless --allow-random-weights."""
    from gensets.models.classifier import load_classifier

    clf = load_classifier("random:resnet50", device="cpu")
    assert type(clf.model).__name__ == "ResNet" and _count(clf.model) == REAL["resnet50"]
    assert clf.model_id == "random:resnet50" and len(clf.label_names) == 1000

    ws = tmp_path / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL, "--set", "filter={models: [random:resnet50], "
            "min_failures: 1, top_k: 1}", check=0)
    run_cli("finalize", ws, "--include-pending", check=0)
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    assert manifest["random_models"] == ["random:resnet50"]
    assert "RANDOM weights" in (ws / "dataset" / "README.md").read_text()
    repo = tmp_path / "repo"
    refused = run_cli("publish", ws, "--repo", f"file://{repo}")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "random-weight models (random:resnet50)" in refused.stderr and "--allow-random-weights" in refused.stderr
    assert not repo.exists()
    run_cli("publish", ws, "--repo", f"file://{repo}", "--allow-random-weights", check=0)
    assert (repo / "manifest.json").is_file()
    shutil.rmtree(repo)
