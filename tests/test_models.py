"""gensets.models: spec grammar, tiny models through the real loaders, classifiers, generators, hub failures.

Offline and CPU only. Hub behaviour is tested in subprocesses with a clean environment (HF_HUB_OFFLINE
unset) against an endpoint that never answers, and against a fake local HF cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gensets.errors import ModelError
from gensets.models import ModelSpec, load_classifier, load_generator, parse_spec, tiny_path
from gensets.models.tiny import VERSION as TINY_VERSION

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def model_env(tmp_path_factory):
    """A private gensets cache and HF home for the whole session, offline."""
    base = tmp_path_factory.mktemp("models-env")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GENSETS_CACHE", str(base / "gensets-cache"))
        mp.setenv("HF_HOME", str(base / "hf-home"))
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
            mp.setenv(var, "1")
        yield base


def _images(n=2):
    from PIL import Image

    colours = [(200, 30, 30), (20, 120, 220), (240, 240, 20), (10, 10, 10)]
    return [Image.new("RGB", (96 + 8 * i, 64 + 4 * i), colours[i % 4]) for i in range(n)]


# ---------------------------------------------------------------- spec grammar
@pytest.mark.parametrize(
    "s, kind, name, revision",
    [
        ("timm:resnet50", "timm", "resnet50", None),
        ("timm:resnet50.a1_in1k@abc123", "timm", "resnet50.a1_in1k", "abc123"),
        (
            "timm:hf-hub:timm/vit_tiny_patch16_224.augreg_in21k",
            "timm",
            "hf-hub:timm/vit_tiny_patch16_224.augreg_in21k",
            None,
        ),
        ("timm:hf-hub:org/repo@v1.0", "timm", "hf-hub:org/repo", "v1.0"),
        ("timm:local-dir:/tmp/a@b", "timm", "local-dir:/tmp/a@b", None),
        ("open_clip:ViT-B-32/openai", "open_clip", "ViT-B-32/openai", None),
        (
            "open_clip:hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
            "open_clip",
            "hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
            None,
        ),
        ("open_clip:local-dir:/models/clip", "open_clip", "local-dir:/models/clip", None),
        ("hf:google/vit-base-patch16-224", "hf", "google/vit-base-patch16-224", None),
        ("hf:google/vit-base-patch16-224@main", "hf", "google/vit-base-patch16-224", "main"),
        ("hf:/abs/path/to/model", "hf", "/abs/path/to/model", None),
        ("hf:/data/x@y/model", "hf", "/data/x@y/model", None),
        (
            "diffusers:stabilityai/stable-diffusion-2-1@refs/pr/1",
            "diffusers",
            "stabilityai/stable-diffusion-2-1",
            "refs/pr/1",
        ),
        (
            "diffusers:stabilityai/stable-diffusion-2-1@fp16",
            "diffusers",
            "stabilityai/stable-diffusion-2-1",
            "fp16",
        ),
        ("tiny:sd", "tiny", "sd", None),
        ("tiny:hf-clip", "tiny", "hf-clip", None),
        ("torchvision:alexnet@IMAGENET1K_V1", "torchvision", "alexnet", "IMAGENET1K_V1"),
        ("torchvision:resnext101_32x8d@DEFAULT", "torchvision", "resnext101_32x8d", "DEFAULT"),
        ("tiny:torchvision-googlenet", "tiny", "torchvision-googlenet", None),
        ("timm:x'; DROP TABLE runs; --", "timm", "x'; DROP TABLE runs; --", None),
    ],
)
def test_parse_spec(s, kind, name, revision):
    assert parse_spec(s) == ModelSpec(kind=kind, name=name, revision=revision, raw=s)


@pytest.mark.parametrize(
    "s",
    [
        "",
        "resnet50",
        "torch:resnet50",
        "timm:",
        "hf:   ",
        "tiny:huge",
        "tiny:",
        "open_clip:ViT-B-32",
        "open_clip:ViT-B-32/",
        "open_clip:/openai",
        "open_clip:hf-hub:",
        "timm:hf-hub:",
        "hf:org/repo@",
        "diffusers:@main",
        "timm:resnet50\nrm -rf /",
        "torchvision:alexnet",
        "torchvision:alexnet@",
        "torchvision:@IMAGENET1K_V1",
        "torchvision:alex net@IMAGENET1K_V1",
        "torchvision:alexnet@IMAGENET1K_V1@x",
        "torchvision:../alexnet@V1",
    ],
)
def test_parse_spec_errors(s):
    with pytest.raises(ModelError) as err:
        parse_spec(s)
    msg = str(err.value)
    assert repr(s) in msg and "\n" not in msg


@pytest.mark.parametrize(
    "spec",
    ["timm:x'; DROP TABLE runs; --", "hf:x'; DROP TABLE runs; --", "diffusers:x'; DROP TABLE runs; --"],
)
def test_hostile_spec_parses_but_does_not_load(spec):
    parse_spec(spec)
    loader = load_generator if spec.startswith("diffusers") else load_classifier
    with pytest.raises(ModelError) as err:  # refused by name, never looked up (no time bound: CI may be loaded)
        loader(spec)
    assert repr(spec) in str(err.value) and "\n" not in str(err.value)


def test_import_is_light():
    code = (
        "import sys, time; t = time.perf_counter(); import gensets.models; dt = time.perf_counter() - t; "
        "heavy = [m for m in ('torch', 'diffusers', 'transformers', 'timm', 'open_clip', 'huggingface_hub') "
        "if m in sys.modules]; print(dt, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    dt, heavy = out.stdout.split(" ", 1)
    assert heavy.strip() == "[]"
    assert float(dt) < 2  # measured ~0.1 s; the bound only catches a heavy import sneaking in


# ---------------------------------------------------------------- tiny models
def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_tiny_models_are_cached_safetensors_and_reproducible(tmp_path, monkeypatch):
    first = {k: tiny_path(k) for k in ("sd", "resnet", "vit", "clip", "hf-clip")}
    for kind, path in first.items():
        assert path.name == f"{kind}-{TINY_VERSION}-pinned" and (path / ".complete").is_file()  # the suite's kernels
        assert tiny_path(kind) == path  # cached
        files = [p.name for p in path.rglob("*") if p.is_file()]
        assert any(f.endswith(".safetensors") for f in files)
        assert not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".ckpt"))]
        assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp folders left
    monkeypatch.setenv("GENSETS_CACHE", str(tmp_path / "other"))
    for kind in ("resnet", "vit", "clip", "hf-clip"):  # rebuilt from scratch: byte-identical
        again = tiny_path(kind)
        assert again != first[kind]
        assert _digest(again) == _digest(first[kind])


def test_tiny_build_keeps_caller_rng_and_is_safe_across_processes(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("GENSETS_CACHE", str(tmp_path / "rng"))
    torch.manual_seed(1)
    expected = torch.rand(3)
    torch.manual_seed(1)
    tiny_path("clip")
    assert torch.equal(torch.rand(3), expected)

    env = dict(os.environ, GENSETS_CACHE=str(tmp_path / "race"), PYTHONPATH=str(ROOT))
    code = "from gensets.models import tiny_path; print(tiny_path('clip'))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1]
    assert _digest(Path(outs[0])) == _digest(tiny_path("clip"))
    assert [p.name for p in (tmp_path / "race" / "tiny").iterdir()] == [f"clip-{TINY_VERSION}-pinned"]


def test_tiny_unknown_kind():
    with pytest.raises(ModelError, match="tiny:nope"):
        tiny_path("nope")


def test_tiny_kinds_and_their_loaders_come_from_the_registry():
    from gensets.models.captioner import load_captioner
    from gensets.models.text import load_text2text
    from gensets.models.tiny import tiny_kinds

    assert tiny_kinds() == ["aesthetic-head", "bert", "blip-caption", "blip-vqa", "clip", "hf-clip", "inception",
                            "lpips", "resnet", "sd", "t5", "torchvision-googlenet", "vilt-vqa", "vit", "vlm",
                            "vlm-chair"]
    assert {loader: tiny_kinds(loader) for loader in ("timm", "hf", "open_clip", "torchvision", "diffusers", "vqa",
                                                       "caption", "text", "text-encoder")} == {
        "timm": ["resnet"], "hf": ["hf-clip", "vit"], "open_clip": ["clip"], "torchvision": ["torchvision-googlenet"],
        "diffusers": ["sd"], "vqa": ["blip-vqa", "vilt-vqa", "vlm", "vlm-chair"], "caption": ["blip-caption", "vlm"],
        "text": ["t5"], "text-encoder": ["bert"]}
    # a loader asked for a tiny model it does not read says what the model is, or what it takes instead
    for spec, what in [("tiny:t5", "a text-to-text model (gensets.models.text.load_text2text)"),
                       ("tiny:vlm", "a visual question answering model (gensets.models.vlm.load_vqa)"),
                       ("tiny:blip-caption", "an image captioning model (gensets.models.captioner.load_captioner)"),
                       ("tiny:bert", "a text encoder (gensets.models.text.load_text_encoder)"),
                       ("tiny:sd", "an image generator"),
                       ("tiny:inception", "a quality metric's network (gensets.models.scorers.load_inception)")]:
        with pytest.raises(ModelError) as err:
            load_classifier(spec)
        assert str(err.value) == f"model {spec!r} is {what}, not a classifier"
    for load, spec, message in [
        (load_generator, "tiny:vit",
         "is not an image generator (use diffusers:<repo or path>, tiny:sd, random:sd2.1, random:sd2.1-base or "
         "random:sdxl)"),
        (load_text2text, "tiny:sd", "is not a text-to-text model (use hf:<repo or path> or tiny:t5)"),
        (load_captioner, "timm:resnet50",
         "is not a captioning model (use hf:<repo or path>, tiny:blip-caption or tiny:vlm)"),
    ]:
        with pytest.raises(ModelError) as err:
            load(spec)
        assert str(err.value) == f"model {spec!r} {message}"


def test_a_tiny_model_is_one_class_with_one_decorator(tmp_path, monkeypatch):
    """A tiny kind registered here, as a new file in gensets/models/tiny/ would: `tiny:<kind>` parses, and
    the loader its registration names builds it once and loads it through the real timm path."""
    from safetensors.torch import load_file

    from gensets.models.tiny import TinyModel, tiny_kinds
    from gensets.registry import TINY_MODELS

    @TINY_MODELS.register("test-vit")
    class TinyTestViT(TinyModel):
        loaders = ("timm",)

        @staticmethod
        def build(folder: Path) -> None:
            import timm

            model = timm.create_model("test_vit", pretrained=False)
            timm.models.save_for_hf(model, str(folder), safe_serialization=True)

    monkeypatch.setenv("GENSETS_CACHE", str(tmp_path))
    try:
        assert TinyTestViT.name == "test-vit" and tiny_kinds("timm") == ["resnet", "test-vit"]
        assert parse_spec("tiny:test-vit") == ModelSpec("tiny", "test-vit", None, "tiny:test-vit")
        c = load_classifier("tiny:test-vit")
        assert (c.kind, c.spec, c.model_id, c.revision) == ("timm", "tiny:test-vit", "tiny:test-vit", None)
        path = tiny_path("test-vit")
        assert path == tmp_path / "tiny" / f"test-vit-{TINY_VERSION}-pinned" and (path / ".complete").is_file()
        saved = load_file(str(path / "model.safetensors"))
        state = c.model.state_dict()
        assert all((state[k] == v).all() for k, v in saved.items())
        assert tuple(c.predict(_images(2)).shape) == (2, len(c.label_names))
        with pytest.raises(ModelError, match=r"not an image generator \(use diffusers:<repo or path>, tiny:sd, random"):
            load_generator("tiny:test-vit")
    finally:
        TINY_MODELS.unregister("test-vit")
    assert "test-vit" not in tiny_kinds()
    with pytest.raises(ModelError, match="unknown tiny model 'test-vit'"):
        parse_spec("tiny:test-vit")


# ---------------------------------------------------------------- classifiers
def test_timm_classifier_tiny_resnet():
    import timm
    from safetensors.torch import load_file
    from timm.data import ImageNetInfo, create_transform, resolve_data_config

    c = load_classifier("tiny:resnet")
    assert (c.kind, c.spec, c.model_id, c.revision) == ("timm", "tiny:resnet", "tiny:resnet", None)
    assert c.label_names == ImageNetInfo().label_descriptions() and len(c.label_names) == 1000
    # the weights are the saved ones, not a random init
    saved = load_file(str(tiny_path("resnet") / "model.safetensors"))
    state = c.model.state_dict()
    assert all((state[k] == v).all() for k, v in saved.items())
    # preprocessing comes from the model's own pretrained config (test_resnet: 160 px)
    ref = timm.create_model(f"local-dir:{tiny_path('resnet')}", pretrained=True)
    assert ref.pretrained_cfg["input_size"] == (3, 160, 160)
    images = _images(3)
    batch = c.preprocess(images)
    assert tuple(batch.shape) == (3, 3, 160, 160)
    expected = create_transform(**resolve_data_config({}, model=ref), is_training=False)(images[0])
    assert (batch[0] == expected).all()
    logits = c.logits(batch)
    assert tuple(logits.shape) == (3, 1000)
    assert (c.predict(images) == logits).all()


def _googlenet_checkpoint() -> Path:
    return tiny_path("torchvision-googlenet") / "hub" / "checkpoints" / "googlenet-1378be20.pth"


def test_torchvision_classifier_tiny_googlenet_loads_through_get_model_with_the_weights():
    """The stand-in is torchvision:googlenet@IMAGENET1K_V1's checkpoint file with random weights: loaded by
    get_model("googlenet", weights=IMAGENET1K_V1), it has what that path sets up and weights=None would not
    (inputs re-normalised as the original weights expect: transform_input; no auxiliary heads), the saved
    weights, the weights' own transforms, and the ImageNet-1k lemma lists as label names."""
    import torch
    from timm.data import ImageNetInfo
    from torchvision.models import GoogLeNet_Weights

    with pytest.raises(ModelError) as err:  # torchvision's format is a pickle: refused without the flag
        load_classifier("tiny:torchvision-googlenet")
    assert str(err.value) == ("model 'tiny:torchvision-googlenet': torchvision weights are a pickle file "
                              "(googlenet-1378be20.pth); refusing pickle weights (pass allow_pickle=True to accept them)")
    c = load_classifier("tiny:torchvision-googlenet", allow_pickle=True)
    assert (c.kind, c.spec, c.model_id, c.revision) == ("torchvision", "tiny:torchvision-googlenet",
                                                        "tiny:torchvision-googlenet", None)
    assert c.model.transform_input is True and c.model.aux_logits is False and c.model.aux1 is None
    saved = torch.load(_googlenet_checkpoint(), weights_only=True)
    state = c.model.state_dict()
    assert set(state) == {k for k in saved if not k.startswith(("aux1.", "aux2."))}
    assert all((state[k] == saved[k]).all() for k in state)
    assert c.label_names == ImageNetInfo("imagenet-1k").label_descriptions()
    assert c.label_names[330] == "wood rabbit, cottontail, cottontail rabbit"  # torchvision's own: "wood rabbit"
    images = _images(3)
    batch = c.preprocess(images)
    assert tuple(batch.shape) == (3, 3, 224, 224)
    assert (batch[1] == GoogLeNet_Weights.IMAGENET1K_V1.transforms()(images[1])).all()
    logits = c.logits(batch)
    assert tuple(logits.shape) == (3, 1000) and (c.predict(images) == logits).all()
    # embed: the input of the head (GoogLeNet's fc), as torchvision's own feature extractor (torch.fx) gives it
    from torchvision.models.feature_extraction import create_feature_extractor

    emb = c.embed(batch)
    with torch.inference_mode():
        expected = create_feature_extractor(c.model, return_nodes={"flatten": "emb"})(batch)["emb"]
    assert tuple(emb.shape) == (3, 1024) and torch.equal(emb, expected) and emb.abs().sum() > 0


def test_torchvision_real_weights_load_from_the_torch_hub_cache_offline(tmp_path, monkeypatch):
    """A real spec loads from TORCH_HOME/hub/checkpoints/<the weights' file> without the network (the stand-in's
    file put there); absent, offline, it fails at once in one line; a checkpoint holding more than tensors is
    refused by the weights_only read before torchvision unpickles it."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    spec = "torchvision:googlenet@IMAGENET1K_V1"
    t0 = time.perf_counter()
    with pytest.raises(ModelError) as err:
        load_classifier(spec, allow_pickle=True)
    assert time.perf_counter() - t0 < 60  # no Hub retries (minutes offline); generous for a loaded CI machine
    msg = str(err.value)
    assert msg.startswith(f"model {spec!r} is not available: offline mode is set (HF_HUB_OFFLINE) and "
                          f"googlenet-1378be20.pth is not in the torch hub cache ({tmp_path / 'torch' / 'hub' / 'checkpoints'})")
    assert "\n" not in msg and not (tmp_path / "torch" / "hub" / "checkpoints").exists()  # nothing downloaded
    checkpoints = tmp_path / "torch" / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    shutil.copy(_googlenet_checkpoint(), checkpoints / "googlenet-1378be20.pth")
    with pytest.raises(ModelError, match="allow_pickle"):
        load_classifier(spec)
    c = load_classifier(spec, allow_pickle=True)
    assert (c.kind, c.model_id, c.revision) == ("torchvision", "googlenet.IMAGENET1K_V1", "googlenet-1378be20.pth")
    tiny = load_classifier("tiny:torchvision-googlenet", allow_pickle=True)
    images = _images(2)
    assert (c.predict(images) == tiny.predict(images)).all()  # the same file through the same path
    assert os.environ["TORCH_HOME"] == str(tmp_path / "torch")  # the stand-in's TORCH_HOME was put back
    # a hostile checkpoint under the real name: never unpickled by torchvision
    import torch

    marker = tmp_path / "pwned"

    class Hostile:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"conv1.conv.weight": Hostile()}, checkpoints / "googlenet-1378be20.pth")
    with pytest.raises(ModelError) as err:
        load_classifier(spec, allow_pickle=True)
    assert str(err.value).startswith(f"model {spec!r} cannot be loaded: UnpicklingError")
    assert "\n" not in str(err.value) and not marker.exists()


@pytest.mark.parametrize("spec, match", [
    ("torchvision:no_such_net@IMAGENET1K_V1", "unknown torchvision classification model 'no_such_net'"),
    ("torchvision:alexnet@IMAGENET1K_V9", "has no weights 'IMAGENET1K_V9' for 'alexnet' (it has IMAGENET1K_V1, DEFAULT)"),
    ("torchvision:fasterrcnn_resnet50_fpn@COCO_V1", "unknown torchvision classification model"),
])
def test_torchvision_unknown_names_are_one_line(spec, match):
    with pytest.raises(ModelError) as err:
        load_classifier(spec, allow_pickle=True)
    assert match in str(err.value) and repr(spec) in str(err.value) and "\n" not in str(err.value)


def test_hf_classifier_tiny_vit():
    import json as _json

    c = load_classifier("tiny:vit")
    assert c.kind == "hf"
    config = _json.loads((tiny_path("vit") / "config.json").read_text())
    assert c.label_names == [config["id2label"][str(i)] for i in range(1000)]
    assert c.label_names[0] == "tench, Tinca tinca"
    batch = c.preprocess(_images(2))
    assert tuple(batch.shape) == (2, 3, 32, 32)  # from preprocessor_config.json
    assert tuple(c.logits(batch).shape) == (2, 1000)


def test_zero_shot_open_clip_matches_hand_computation():
    import open_clip
    import torch
    import torch.nn.functional as F

    labels, templates = ["cat", "dog"], ["a photo of a {}.", "a drawing of a {c}."]
    c = load_classifier("tiny:clip", labels, templates)
    assert (c.kind, c.label_names) == ("open_clip", labels)
    images = _images(3)
    logits = c.predict(images)
    assert tuple(logits.shape) == (3, 2)

    name = f"local-dir:{tiny_path('clip')}"
    model, _, preprocess = open_clip.create_model_and_transforms(name)
    model.eval()
    tokenizer = open_clip.get_tokenizer(name)
    with torch.no_grad():
        columns = []
        for label in labels:
            texts = [f"a photo of a {label}.", f"a drawing of a {label}."]
            emb = F.normalize(model.encode_text(tokenizer(texts)), dim=-1).mean(dim=0)
            columns.append(emb / emb.norm())
        image = F.normalize(model.encode_image(torch.stack([preprocess(im) for im in images])), dim=-1)
        expected = 100 * image @ torch.stack(columns, dim=1)
    assert torch.allclose(logits, expected, atol=1e-4)


def test_zero_shot_hf_clip_matches_hand_computation():
    import torch
    import torch.nn.functional as F
    from transformers import CLIPModel, CLIPProcessor

    labels = ["cat", "dog"]
    c = load_classifier("tiny:hf-clip", labels)
    assert (c.kind, c.label_names) == ("hf-clip", labels)
    images = _images(2)
    logits = c.predict(images)
    assert tuple(logits.shape) == (2, 2)

    path = tiny_path("hf-clip")
    model, processor = CLIPModel.from_pretrained(path).eval(), CLIPProcessor.from_pretrained(path)
    with torch.no_grad():
        texts = processor.tokenizer([f"a photo of a {x}." for x in labels], padding=True, return_tensors="pt")
        text = F.normalize(model.get_text_features(**texts).pooler_output, dim=-1)
        pixels = processor.image_processor(images=images, return_tensors="pt")["pixel_values"]
        image = F.normalize(model.get_image_features(pixel_values=pixels).pooler_output, dim=-1)
    assert torch.allclose(logits, 100 * image @ text.T, atol=1e-4)


def test_zero_shot_needs_labels_and_good_templates():
    with pytest.raises(ModelError, match="labels"):
        load_classifier("tiny:clip")
    with pytest.raises(ModelError, match="labels"):
        load_classifier("tiny:hf-clip")
    with pytest.raises(ModelError, match="template"):
        load_classifier("tiny:clip", ["cat"], ["a photo of a {name}"])


# ---------------------------------------------------------------- generators
@pytest.fixture(scope="module")
def generator():
    return load_generator("tiny:sd")


def _pixels(image):
    import numpy as np

    return np.asarray(image)


def test_generator_batched_call_is_deterministic_and_seeds_each_image(generator):
    import numpy as np

    g = generator
    assert (g.spec, g.model_id, g.revision) == ("tiny:sd", "tiny:sd", None)
    assert (g.pipeline, g.scheduler) == ("StableDiffusionPipeline", "DDIMScheduler")
    kw = dict(steps=2, width=64, height=64)
    prompts, negatives = ["a red cube", "a blue ball on grass"], ["blurry", ""]
    pair = g.generate(prompts, [7, 8], negative_prompts=negatives, **kw)
    again = g.generate(prompts, [7, 8], negative_prompts=negatives, **kw)
    one_by_one = g.generate(prompts, [7, 8], negative_prompts=negatives, one_per_call=True, **kw)
    alone = g.generate(["a blue ball on grass"], [8], negative_prompts=[""], **kw)
    other_seed = g.generate(["a blue ball on grass"], [9], negative_prompts=[""], **kw)
    assert pair[1].size == (64, 64) and pair[1].mode == "RGB"
    assert all(np.array_equal(_pixels(a), _pixels(b)) for a, b in zip(pair, again, strict=True))  # same call: same bytes
    assert np.array_equal(_pixels(one_by_one[1]), _pixels(alone[0]))  # one_per_call: independent of the others
    # the second image of the batched call has its own seed's noise: within float rounding of seed 8 alone
    # (measured: at most 1-2 pixel values off by one), far from seed 9
    near = np.abs(_pixels(pair[1]).astype(int) - _pixels(alone[0]).astype(int))
    far = np.abs(_pixels(other_seed[0]).astype(int) - _pixels(alone[0]).astype(int))
    assert near.max() <= 2 and (near > 0).mean() < 0.01 and far.mean() > 10 * max(near.mean(), 0.1)
    with pytest.raises(ValueError):
        g.generate(["a", "b"], [1], **kw)


def test_generator_speed_settings_are_applied_and_recorded():
    """attention, channels_last and compile (GPU speed settings) as the pipeline gets them on CPU; compile only
    wraps the UNet here (torch.compile compiles on the first call, which needs a GPU to pay off: not run)."""
    import torch

    g = load_generator("tiny:sd", attention="eager", channels_last=True)
    assert g.settings == {"dtype": "float32", "attention": "eager", "compile": False, "channels_last": True,
                          "device": "cpu"}
    assert {type(p).__name__ for p in g.pipe.unet.attn_processors.values()} == {"AttnProcessor"}
    assert {type(p).__name__ for p in g.pipe.vae.attn_processors.values()} == {"AttnProcessor"}
    conv = g.pipe.unet.conv_in.weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    assert len(g.generate(["x"], [0], steps=2, width=64, height=64)) == 1
    default = load_generator("tiny:sd")
    assert {type(p).__name__ for p in default.pipe.unet.attn_processors.values()} == {"AttnProcessor2_0"}
    assert default.settings["attention"] == "sdpa" and not default.settings["channels_last"]
    compiled = load_generator("tiny:sd", compile=True)
    assert compiled.settings["compile"] is True and type(compiled.pipe.unet).__name__ == "OptimizedModule"
    assert hasattr(compiled.pipe.vae.decode, "_torchdynamo_orig_callable")  # the VAE's decoder compiled too
    with pytest.raises(ModelError, match="attention 'flash'"):
        load_generator("tiny:sd", attention="flash")


def test_img2img(generator):
    import numpy as np

    kw = dict(steps=4, width=64, height=64)
    init = generator.generate(["a red cube"], [1], steps=2, width=64, height=64)[0].resize((80, 80))
    a = generator.generate(["a red cube at night"], [3], init_images=[init], strength=0.5, **kw)
    b = generator.generate(["a red cube at night"], [3], init_images=[init], strength=0.5, **kw)
    assert a[0].size == (64, 64)
    assert np.array_equal(_pixels(a[0]), _pixels(b[0]))
    assert not np.array_equal(_pixels(a[0]), _pixels(init.resize((64, 64))))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy 2 __array__ warning inside diffusers
def test_generator_scheduler_and_errors():
    g = load_generator("tiny:sd", scheduler="EulerDiscreteScheduler")
    assert g.scheduler == "EulerDiscreteScheduler"
    assert len(g.generate(["x"], [0], steps=2, width=64, height=64)) == 1
    with pytest.raises(ModelError, match="NoSuchScheduler"):
        load_generator("tiny:sd", scheduler="NoSuchScheduler")
    with pytest.raises(ModelError, match="torch_dtype"):
        load_generator("tiny:sd", torch_dtype="float64")
    with pytest.raises(ModelError, match="not an image generator"):
        load_generator("tiny:resnet")
    with pytest.raises(ModelError, match="not a classifier"):
        load_classifier("tiny:sd")


# ---------------------------------------------------------------- errors, pickle refusal, offline
@pytest.mark.parametrize(
    "spec, match",
    [
        ("timm:not_a_real_model_xyz", "unknown timm model"),
        ("timm:resnet50.no_such_tag", "no pretrained weights"),
        ("timm:local-dir:/nonexistent/folder", "does not exist"),
        ("hf:/nonexistent/folder", "does not exist"),
        ("hf:not a repo!", "valid Hub repo id"),
        ("open_clip:NoSuchArch/openai", "unknown open_clip architecture"),
        ("open_clip:ViT-B-32/no_such_tag", "unknown open_clip pretrained tag"),
        ("open_clip:local-dir:/nonexistent/folder", "does not exist"),
        ("timm:resnet50", "not available"),
        ("hf:google/vit-base-patch16-224", "not available"),
        ("open_clip:ViT-B-32/openai", "not available"),
    ],
)
def test_unknown_or_unavailable_models(spec, match):
    with pytest.raises(ModelError, match=match) as err:
        load_classifier(spec, labels=["a", "b"])
    assert repr(spec) in str(err.value) and "\n" not in str(err.value)


def test_revision_with_local_path_is_an_error():
    with pytest.raises(ModelError, match="revision"):
        load_classifier(f"hf:{tiny_path('vit')}@main")


def test_pickle_weights_are_refused(tmp_path):
    import torch
    from safetensors.torch import load_file

    def pickled(kind, weights, pickle_name):
        d = tmp_path / kind
        shutil.copytree(tiny_path(kind), d)
        state = load_file(str(d / weights))
        (d / weights).unlink()
        torch.save(state, d / pickle_name)
        return d

    resnet = pickled("resnet", "model.safetensors", "pytorch_model.bin")
    vit = pickled("vit", "model.safetensors", "pytorch_model.bin")
    clip = pickled("clip", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
    for spec in (f"timm:local-dir:{resnet}", f"hf:{vit}", f"open_clip:local-dir:{clip}"):
        with pytest.raises(ModelError, match="allow_pickle") as err:
            load_classifier(spec, labels=["a", "b"])
        assert "\n" not in str(err.value)
    assert tuple(
        load_classifier(f"timm:local-dir:{resnet}", allow_pickle=True).predict(_images(1)).shape
    ) == (1, 1000)
    assert len(load_classifier(f"hf:{vit}", allow_pickle=True).label_names) == 1000
    assert load_classifier(f"open_clip:local-dir:{clip}", ["a", "b"], allow_pickle=True).kind == "open_clip"


HUB_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from gensets.errors import ModelError
    from gensets.models import load_classifier, load_generator
    import diffusers, timm, torch, transformers  # imported before the clock starts: what is timed is the load
    results = []
    for spec in sys.argv[1:]:
        load = load_generator if spec.startswith("diffusers:") else load_classifier
        t0 = time.perf_counter()
        try:
            m = load(spec)
            results.append({"spec": spec, "ok": True, "revision": m.revision, "model_id": m.model_id})
        except ModelError as e:
            results.append({"spec": spec, "ok": False, "error": str(e)})
        results[-1]["seconds"] = time.perf_counter() - t0
    print(json.dumps(results))
    """
)


def _clean_env(hf_home: Path, endpoint: str) -> dict:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(hf_home.parent),
        "HF_HOME": str(hf_home),
        "HF_ENDPOINT": endpoint,
        "GENSETS_CACHE": os.environ["GENSETS_CACHE"],
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(hf_home.parent),
    }
    assert not any(k.endswith("_OFFLINE") for k in env)
    return env


def _fake_hub_repo(hf_home: Path, repo: str, source: Path, commit: str) -> None:
    repo_dir = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    shutil.copytree(source, repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)


@pytest.mark.slow
def test_hub_names_fail_fast_without_offline_env_and_cached_repos_load(tmp_path):
    for kind in ("resnet", "vit", "sd"):
        tiny_path(kind)  # built here, not in the subprocesses
    # an endpoint that accepts connections and never answers: the worst case for a probe
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    # a local HF cache holding tiny models under hub repo names
    cached_home = tmp_path / "cached" / "hf"
    commit = "0123456789abcdef0123456789abcdef01234567"
    _fake_hub_repo(cached_home, "gensets/tiny-resnet", tiny_path("resnet"), commit)
    _fake_hub_repo(cached_home, "gensets/tiny-vit", tiny_path("vit"), commit)
    _fake_hub_repo(cached_home, "gensets/tiny-sd", tiny_path("sd"), commit)
    try:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        runs = {
            "fail": (
                [
                    "timm:resnet50",
                    "diffusers:stabilityai/stable-diffusion-2-1",
                    "hf:google/vit-base-patch16-224",
                ],
                _clean_env(tmp_path / "empty" / "hf", endpoint),
            ),
            "cached": (
                [
                    "timm:hf-hub:gensets/tiny-resnet",
                    "hf:gensets/tiny-vit",
                    "diffusers:gensets/tiny-sd",
                    "hf:gensets/tiny-vit@v2",
                ],
                _clean_env(cached_home, endpoint),
            ),
        }
        procs = {}
        for name, (specs, env) in runs.items():
            Path(env["HF_HOME"]).mkdir(parents=True, exist_ok=True)
            procs[name] = (
                time.perf_counter(),
                subprocess.Popen(
                    [sys.executable, "-c", HUB_SCRIPT, *specs],
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        results, walls = {}, {}
        for name, (t0, proc) in procs.items():
            out, err = proc.communicate(timeout=120)
            walls[name] = time.perf_counter() - t0
            assert proc.returncode == 0, err
            results[name] = {r["spec"]: r for r in json.loads(out.strip().splitlines()[-1])}
        silent.setblocking(False)  # the connections the two processes made, queued and never answered
        connections = 0
        while True:
            try:
                silent.accept()[0].close()
            except BlockingIOError:
                break
            connections += 1
    finally:
        silent.close()

    fail = results["fail"]
    for spec, r in fail.items():
        assert not r["ok"], spec
        assert r["error"].startswith(
            f"model {spec!r} is not available: no network access to the Hugging Face Hub"
        )
        assert "not in the local cache" in r["error"] and "tiny:" in r["error"] and "\n" not in r["error"]
        assert r["seconds"] < 10, (spec, r["seconds"])  # the probe's 3 s bound, its imports done before the clock
    # no Hub client retrying (~23 s per spec, a new connection per try): at most one probe per process, whatever
    # the load (a count, not a clock: the whole subprocess's wall time depends on the machine's load)
    assert connections <= 2, (connections, walls)

    cached = results["cached"]
    for spec in ("timm:hf-hub:gensets/tiny-resnet", "hf:gensets/tiny-vit", "diffusers:gensets/tiny-sd"):
        assert cached[spec]["ok"], cached[spec]
        assert cached[spec]["revision"] == commit
        assert cached[spec]["model_id"] == spec.split(":")[-1]
    assert not cached["hf:gensets/tiny-vit@v2"]["ok"]
    assert "gensets/tiny-vit@v2 is not in the local cache" in cached["hf:gensets/tiny-vit@v2"]["error"]


def test_offline_env_fails_at_once(monkeypatch):
    t0 = time.perf_counter()
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE"):
        load_generator("diffusers:stabilityai/stable-diffusion-2-1")
    assert time.perf_counter() - t0 < 60  # no Hub retries (minutes offline); generous for a loaded CI machine


def test_open_clip_tags_load_pinned_weights_with_the_tags_activation(tmp_path, monkeypatch):
    """An open_clip pretrained tag trained with QuickGELU (as OpenAI's are) loads with QuickGELU even
    when its architecture config says GELU (open_clip itself only warns), and `@revision` pins the
    weights of a tag or an hf-hub: repo to a commit of the local HF cache."""
    import open_clip
    import torch
    from huggingface_hub import constants
    from open_clip.pretrained import _PRETRAINED, _pcfg
    from open_clip.transformer import QuickGELU

    cfg = json.loads((tiny_path("clip") / "open_clip_config.json").read_text())
    assert "quick_gelu" not in cfg["model_cfg"]  # a GELU architecture
    (tmp_path / "arch").mkdir()
    (tmp_path / "arch" / "GensetsTinyQG.json").write_text(json.dumps(cfg["model_cfg"]))
    open_clip.add_model_config(tmp_path / "arch")
    monkeypatch.setitem(_PRETRAINED, "GensetsTinyQG", {
        "qg": _pcfg(hf_hub="gensets/tiny-clip-tag/", quick_gelu=True, mean=(0.5, 0.5, 0.5), std=(0.25,) * 3),
        "plain": _pcfg(hf_hub="gensets/tiny-clip-tag/")})
    hub_cache = tmp_path / "hf"
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    for repo in ("gensets/tiny-clip-tag", "gensets/tiny-clip-hub"):
        _fake_hub_repo(hub_cache, repo, tiny_path("clip"), commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache / "hub"))

    def activation(c):
        return type(c.model.visual.transformer.resblocks[0].mlp.gelu)

    qg = load_classifier("open_clip:GensetsTinyQG/qg", ["cat", "dog"])
    plain = load_classifier("open_clip:GensetsTinyQG/plain", ["cat", "dog"])
    assert activation(qg) is QuickGELU and activation(plain) is not QuickGELU
    assert (qg.revision, qg.model_id) == (commit, "GensetsTinyQG/qg")
    normalize = next(t for t in qg.transform.transforms if type(t).__name__ == "Normalize")
    assert tuple(normalize.mean) == (0.5, 0.5, 0.5) and tuple(normalize.std) == (0.25,) * 3  # the tag's
    # the same weights as the cached file, through a pinned tag and a pinned hf-hub repo
    pinned = load_classifier(f"open_clip:GensetsTinyQG/qg@{commit}", ["cat", "dog"])
    hub = load_classifier(f"open_clip:hf-hub:gensets/tiny-clip-hub@{commit}", ["cat", "dog"])
    assert pinned.revision == hub.revision == commit and hub.model_id == "gensets/tiny-clip-hub"
    for a, b in ((qg, pinned), (plain, hub)):
        for (ka, va), (kb, vb) in zip(a.model.state_dict().items(), b.model.state_dict().items(), strict=True):
            assert ka == kb and torch.equal(va, vb)
    with pytest.raises(ModelError, match="tiny-clip-hub@0000000000000000000000000000000000000000 is not in"):
        load_classifier("open_clip:hf-hub:gensets/tiny-clip-hub@" + "0" * 40, ["cat", "dog"])


def test_repo_code_runs_only_with_trust_remote_code(tmp_path, monkeypatch):
    """A model folder whose config maps to its own Python code: without trust_remote_code that code is
    never executed and loading fails in one line; with it, the code runs and the model loads."""
    d = tmp_path / "custom-vit"
    shutil.copytree(tiny_path("vit"), d)
    marker = tmp_path / "executed"
    monkeypatch.setenv("GENSETS_TEST_MARKER", str(marker))
    (d / "configuration_gsvit.py").write_text(textwrap.dedent("""
        import os, pathlib
        from transformers import ViTConfig
        pathlib.Path(os.environ["GENSETS_TEST_MARKER"]).write_text("ran")

        class GsViTConfig(ViTConfig):
            model_type = "gs-vit"
    """))
    (d / "modeling_gsvit.py").write_text(textwrap.dedent("""
        from transformers import ViTForImageClassification
        from .configuration_gsvit import GsViTConfig

        class GsViTForImageClassification(ViTForImageClassification):
            config_class = GsViTConfig
    """))
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(model_type="gs-vit", auto_map={
        "AutoConfig": "configuration_gsvit.GsViTConfig",
        "AutoModelForImageClassification": "modeling_gsvit.GsViTForImageClassification"})
    (d / "config.json").write_text(json.dumps(cfg))

    with pytest.raises(ModelError, match="trust_remote_code") as err:
        load_classifier(f"hf:{d}")
    assert "\n" not in str(err.value) and not marker.exists()
    c = load_classifier(f"hf:{d}", trust_remote_code=True)
    assert marker.read_text() == "ran" and type(c.model).__name__ == "GsViTForImageClassification"
    assert tuple(c.predict(_images(1)).shape) == (1, len(c.label_names))


def test_loading_hides_the_libraries_bars_but_not_the_hubs_download_bars():
    """transformers' ``disable_progress_bar`` also turns huggingface_hub's download bars off: inside
    ``quiet_progress`` "Loading weights" stays hidden while a download still shows its files' progress."""
    import diffusers.utils.logging as dl
    import transformers.utils.logging as tl
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from gensets.models.hub import quiet_progress

    enable_progress_bars()
    try:
        with quiet_progress("transformers", "diffusers"):
            assert not tl.is_progress_bar_enabled() and not dl.is_progress_bar_enabled()
            assert not are_progress_bars_disabled()
        assert tl.is_progress_bar_enabled() and not are_progress_bars_disabled()
        disable_progress_bars()  # a user who turned the Hub's bars off keeps them off
        with quiet_progress("transformers"):
            assert are_progress_bars_disabled()
        assert are_progress_bars_disabled() and tl.is_progress_bar_enabled()
    finally:
        enable_progress_bars()


@pytest.mark.slow
def test_compiled_generator_runs_on_cpu_and_stays_near_the_eager_images(tmp_path, monkeypatch):
    """generator.compile on CPU (torch inductor, a C++ compiler): the compiled UNet and VAE decoder give the eager
    image to within rounding (a few levels of 255 at most), and the same bytes on a second call (~30 s to compile)."""
    import numpy as np

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # none of another run's kernels
    kw = dict(steps=2, width=64, height=64)
    eager = load_generator("tiny:sd").generate(["a red cube"], [1], **kw)[0]
    compiled = load_generator("tiny:sd", compile=True)
    first = compiled.generate(["a red cube"], [1], **kw)[0]
    second = compiled.generate(["a red cube"], [1], **kw)[0]
    diff = np.abs(_pixels(first).astype(int) - _pixels(eager).astype(int))
    assert diff.max() <= 3 and np.array_equal(_pixels(first), _pixels(second))
