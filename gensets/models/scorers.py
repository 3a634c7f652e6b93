"""The networks of the image-quality metrics that are neither classifiers nor VLMs, behind one loader each:

    load_inception(spec)       torch-fidelity's FeatureExtractorInceptionV3: the Inception-v3 of FID, KID and IS
                               as the field computes them (TF-compatible 299 px resize inside, pool3 "2048"
                               features, "logits_unbiased"); torchmetrics' FID / KID / IS use the same class
    load_lpips(spec)           the LPIPS network of Zhang et al. 2018, their own package ``lpips`` (``lpips.LPIPS``:
                               a torchvision backbone + their learned linear layers v0.1)
    load_aesthetic_head(spec)  the LAION aesthetic predictor v2's MLP (improved-aesthetic-predictor,
                               simple_inference.py) over L2-normalised CLIP image embeddings

Specs:
    tiny:inception | tiny:lpips | tiny:aesthetic-head    built offline, random weights (gensets.models.tiny.quality)
    hf:<repo or local folder>[@rev]                      a folder holding model.safetensors: the state dict of the
                                                         same class (+ config.json {"net": ...} for LPIPS)
    torch-fidelity:inception-v3-compat                   torch-fidelity's own weights (its GitHub release v0.2.0)
    lpips:alex | lpips:vgg | lpips:squeeze               torchvision's ImageNet backbone + the linear layers v0.1
                                                         the lpips package ships (torchmetrics:lpips-<net>, the
                                                         name of earlier releases, is the same network)
The last two are pickle files from outside the Hub: they need allow_pickle (read with torch.load(weights_only=
True)) and a network or the torch hub cache; offline and not cached, they fail in one ModelError line.
Every form goes through the same constructor: the weights are read into a state dict, then the library's own
class is built from it, so a tiny model runs the code path of the real one.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

from gensets.errors import ModelError, ModelUnavailable
from gensets.models import hub, loading
from gensets.models.aesthetic import aesthetic_mlp
from gensets.models.device import default_device
from gensets.models.spec import ModelSpec, parse_spec

INCEPTION_URL = ("https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/"
                 "weights-inception-2015-12-05-6726825d.pth")  # = torch_fidelity's URL_INCEPTION_V3
INCEPTION_FEATURES = ("2048", "logits_unbiased")
LPIPS_NETS = ("alex", "vgg", "squeeze")
LIBRARY = {"torch-fidelity:inception-v3-compat": "inception",
           **{f"lpips:{n}": "lpips" for n in LPIPS_NETS}, **{f"torchmetrics:lpips-{n}": "lpips" for n in LPIPS_NETS}}
WEIGHTS = "model.safetensors"


@dataclass
class Loaded:
    """A loaded scorer network: ``model`` (eval mode, on ``device``) and what results record about it."""

    spec: str
    model_id: str
    revision: str | None
    model: object
    device: str


def _parse(spec: str, what: str, tiny: str) -> ModelSpec | str:
    """A library weights name (``torch-fidelity:...``), else a ``hf:`` / ``tiny:<tiny>`` spec."""
    if spec in LIBRARY:
        if LIBRARY[spec] != what:
            raise ModelError(f"model {spec!r} is not {what} weights")
        return spec
    s = parse_spec(spec)
    if not (s.kind == "hf" or (s.is_tiny and s.name == tiny)):
        names = ", ".join(k for k, v in LIBRARY.items() if v == what)
        raise ModelError(f"model {spec!r} is not {what} weights (use tiny:{tiny}, hf:<repo or folder with "
                         f"{WEIGHTS}>{', or ' + names if names else ''})")
    return s


def _folder_weights(s: ModelSpec, allow_pickle: bool) -> tuple[Path, str, str | None]:
    """The folder of a tiny: / hf: spec holding model.safetensors (downloaded at the pinned revision), the model
    id and the commit to record."""
    source = loading.resolve(s, allow_pickle)
    with loading.load_errors(s), source.offline():
        if source.repo:
            from huggingface_hub import hf_hub_download

            path = Path(hf_hub_download(source.repo, WEIGHTS, revision=s.revision)).parent
        else:
            path = source.path
        if not (path / WEIGHTS).is_file():
            raise ModelError(f"model {s.raw!r}: no {WEIGHTS} in {path}")
    return path, source.model_id, source.commit()


def _library_weights(spec: str, url: str, allow_pickle: bool) -> dict:
    """A pickle state dict downloaded from ``url`` into the torch hub cache (read with weights_only=True)."""
    import torch

    if not allow_pickle:
        raise ModelError(f"model {spec!r}: the weights are a pickle file at {url!r}; refusing pickle weights "
                         "(pass --allow-pickle / allow_pickle=True to accept them)")
    cached = Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[1]
    if not cached.is_file() and hub.offline_env():
        raise ModelUnavailable(f"model {spec!r} is not available: offline mode is set (HF_HUB_OFFLINE) and {url} is not "
                         f"in the torch hub cache ({cached.parent}); offline, use tiny: models")
    try:
        return torch.hub.load_state_dict_from_url(url, map_location="cpu", progress=False, weights_only=True)
    except Exception as e:
        raise ModelError(f"model {spec!r} cannot be loaded: {hub.one_line(e)}") from None


def load_inception(spec: str, *, allow_pickle: bool = False, device: str | None = None) -> Loaded:
    """torch-fidelity's FeatureExtractorInceptionV3 with the weights of ``spec`` (see the module docstring);
    ``model(uint8 [B, 3, H, W]) -> (pool3 [B, 2048], logits_unbiased [B, 1008])``."""
    import torch
    from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

    s = _parse(spec, "inception", "inception")
    if isinstance(s, str):
        state, model_id, revision = _library_weights(spec, INCEPTION_URL, allow_pickle), spec, "v0.2.0"
    else:
        from safetensors.torch import load_file

        path, model_id, revision = _folder_weights(s, allow_pickle)
        state = load_file(str(path / WEIGHTS))
    buffer = io.BytesIO()  # torch-fidelity reads its weights with torch.load: hand it the checked state dict
    torch.save(state, buffer)
    buffer.seek(0)
    try:
        model = FeatureExtractorInceptionV3("inception-v3-compat", list(INCEPTION_FEATURES),
                                            feature_extractor_weights_path=buffer)
    except Exception as e:  # e.g. a state dict of another network
        raise ModelError(f"model {spec!r} cannot be loaded: {hub.one_line(e)}") from None
    device = device or default_device()
    return Loaded(spec, model_id, revision, model.to(device).eval(), device)


def lpips_network(net: str, *, pretrained: bool):
    """``lpips.LPIPS`` (version 0.1): ``pretrained`` loads torchvision's ImageNet backbone and the package's linear
    layers, else both are random (a tiny model's, whose weights are then loaded). The package asks torchvision for
    its backbone with the ``pretrained=`` argument torchvision deprecated: that warning is the package's, not the
    user's, and is not shown."""
    import warnings

    import lpips

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(pretrained|weights).*", category=UserWarning)
        return lpips.LPIPS(pretrained=pretrained, net=net, pnet_rand=not pretrained, verbose=False)


def load_lpips(spec: str, *, allow_pickle: bool = False, device: str | None = None) -> Loaded:
    """The LPIPS network (``lpips.LPIPS``) with the weights of ``spec``; ``model(a, b, normalize=True)`` of images
    in [0, 1] gives the LPIPS distance of each pair."""
    import torch

    s = _parse(spec, "lpips", "lpips")
    if isinstance(s, str):
        net = spec.replace("torchmetrics:lpips-", "lpips:").split(":", 1)[1]
        if not allow_pickle:  # torchvision's backbone and the package's linear layers are both pickle files
            raise ModelError(f"model {spec!r}: torchvision's {net} weights and the lpips package's weights/v0.1/"
                             f"{net}.pth are pickle files; refusing pickle weights (pass --allow-pickle to accept "
                             "them)")
        if hub.offline_env():
            import torchvision

            weights = getattr(torchvision.models, {"alex": "AlexNet_Weights", "vgg": "VGG16_Weights",
                                                   "squeeze": "SqueezeNet1_1_Weights"}[net]).DEFAULT
            cached = Path(torch.hub.get_dir()) / "checkpoints" / weights.url.rsplit("/", 1)[1]
            if not cached.is_file():
                raise ModelUnavailable(f"model {spec!r} is not available: offline mode is set (HF_HUB_OFFLINE) and "
                                 f"{weights.url} is not in the torch hub cache; offline, use tiny:lpips")
        try:
            model = lpips_network(net, pretrained=True)
        except Exception as e:
            raise ModelError(f"model {spec!r} cannot be loaded: {hub.one_line(e)}") from None
        model_id, revision = spec, None
    else:
        from safetensors.torch import load_model

        path, model_id, revision = _folder_weights(s, allow_pickle)
        config = path / "config.json"
        net = json.loads(config.read_text()).get("net", "alex") if config.is_file() else "alex"
        with loading.load_errors(s):
            model = lpips_network(net, pretrained=False)
            # the linear layers are shared by lin<i> and lins.<i>; the input scaling's two constant buffers may be
            # missing (torchmetrics' copy of the network does not save them): anything else must match
            missing, unexpected = load_model(model, str(path / WEIGHTS), strict=False)
            if unexpected or set(missing) - {"scaling_layer.shift", "scaling_layer.scale"}:
                raise ModelError(f"model {spec!r}: not LPIPS {net} weights (missing {sorted(missing)[:3]}, "
                                 f"unexpected {sorted(unexpected)[:3]})")
    device = device or default_device()
    return Loaded(spec, model_id, revision, model.to(device).eval(), device)


def load_aesthetic_head(spec: str, *, allow_pickle: bool = False, device: str | None = None) -> Loaded:
    """The aesthetic predictor's MLP with the weights of ``spec`` (its input size read from them)."""
    from safetensors.torch import load_file

    s = _parse(spec, "aesthetic head", "aesthetic-head")
    path, model_id, revision = _folder_weights(s, allow_pickle)
    with loading.load_errors(s):
        state = load_file(str(path / WEIGHTS))
        model = aesthetic_mlp(int(state["layers.0.weight"].shape[1]))
        model.load_state_dict(state, strict=True)
    device = device or default_device()
    return Loaded(spec, model_id, revision, model.to(device).eval(), device)
