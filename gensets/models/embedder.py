"""Image embedders: a model spec -> L2-normalised image embeddings (``Embedder.embed(images) -> float32 [B, D]``).

Any classifier spec (timm, open_clip, hf, torchvision, tiny:) embeds with :meth:`Classifier.embed` (the features
before its head, CLIP's image embedding) after its own preprocessing; ``sscd:PATH`` is SSCD's TorchScript file
(:func:`load_sscd`), preprocessed as its README does: resize the short side to 288 pixels, ImageNet mean and std.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gensets.errors import ModelError
from gensets.models.classifier import load_classifier
from gensets.models.device import default_device
from gensets.models.spec import ModelSpec, parse_spec
from gensets.models.text_features import weights_id

SSCD_SIZE = 288  # facebookresearch/sscd-copy-detection README: Resize(288) for the disc models' descriptors
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass
class Embedder:
    spec: str
    model_id: str  # what identifies the weights: a repo id and commit, or a file's sha256
    kind: str  # the family: sscd, timm, open_clip, ...
    embed_batch: Any  # list of PIL images -> torch tensor [B, D]

    def embed(self, images: list) -> Any:
        """L2-normalised float32 embeddings, a numpy array [len(images), D]."""
        import torch

        with torch.inference_mode():
            e = self.embed_batch(images).float()
        return torch.nn.functional.normalize(e, dim=1).cpu().numpy()


def load_sscd(spec: ModelSpec, *, allow_pickle: bool, device: str) -> Embedder:
    """SSCD's TorchScript file: ``torch.jit.load`` unpickles its constants, so it needs ``allow_pickle``."""
    import hashlib

    path = Path(spec.name).expanduser()
    if not path.is_file():
        raise ModelError(f"model {spec.raw!r}: no such file {path}")
    if not allow_pickle:
        raise ModelError(f"model {spec.raw!r}: a TorchScript file holds pickled data; pass --allow-pickle to load it")
    import torch
    from torchvision import transforms

    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    model = torch.jit.load(str(path), map_location=device).eval()
    prep = transforms.Compose([transforms.Resize(SSCD_SIZE), transforms.ToTensor(),
                               transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])

    def embed(images):
        # one image at a time: SSCD keeps each image's aspect ratio (no crop), so sizes differ within a batch
        return torch.cat([model(prep(im.convert("RGB")).unsqueeze(0).to(device)) for im in images])

    return Embedder(spec.raw, f"sha256:{digest}", "sscd", embed)


def load_embedder(spec: str, *, allow_pickle: bool = False, device: str | None = None) -> Embedder:
    """The image embedder named by ``spec``: a family's own ``embedder`` loader (sscd:), else a classifier's."""
    s = parse_spec(spec)
    device = device or default_device()
    own = s.family.loader("embedder")
    if own is not None:
        return own(s, allow_pickle=allow_pickle, device=device)
    clf = load_classifier(spec, labels=["an image"], allow_pickle=allow_pickle, device=device)
    weights = f"{clf.model_id} {weights_id(clf.revision, clf.model, ())}"  # a commit, else the weights' digest
    return Embedder(spec, weights, clf.kind, lambda images: clf.embed(clf.preprocess(images)))
