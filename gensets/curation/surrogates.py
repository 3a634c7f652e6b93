"""The surrogate failure filter (ImageNet-D): keep images that several classifiers fail together.

An image fails a surrogate when none of its class's ImageNet ids is among the surrogate's top-k
predictions (a hit on any id counts); it is kept when at least ``min_failures`` surrogates fail it
(default: all of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ModelError
from ..labels.hits import hit
from ..labels.imagenet import imagenet_names
from ..models import load_classifier

# what the filter adds to a sample's provenance (records dtypes)
FIELDS = (("surrogate_top_k", "int64"),
          ("surrogates", ("list", ("struct", [("model", "string"), ("top5", ("list", "int64")),
                                              ("scores", ("list", "float64")), ("hit", "bool")]))),
          ("surrogate_failures", "int64"))
FIELD_DOCS = {
    "surrogate_top_k": "an image fails a surrogate when none of its class's ImageNet ids is in the surrogate's top-k",
    "surrogates": "per surrogate classifier, its prediction on the stored image bytes",
    "surrogates[].model": "the surrogate's model spec",
    "surrogates[].top5": "its five best ImageNet-1k class indices (names: the ImageNet-1k class list)",
    "surrogates[].scores": "their softmax probabilities",
    "surrogates[].hit": "whether one of the class's ImageNet ids is in the surrogate's top-k",
    "surrogate_failures": "how many surrogates failed the image",
}


def keep(failures: int, n_surrogates: int, min_failures: int | None = None) -> bool:
    """The filter's verdict: failed by at least ``min_failures`` surrogates (default: all)."""
    need = n_surrogates if min_failures is None else min_failures
    return failures >= need


@dataclass
class Verdict:
    surrogates: list[dict]  # per surrogate: model, top5, scores (softmax), hit
    failures: int
    kept: bool


class SurrogateFilter:
    """Runs every surrogate on each batch of decoded images (each image decoded once, by the caller)."""

    def __init__(self, specs: Sequence[str], *, top_k: int = 1, min_failures: int | None = None,
                 templates: Sequence[str] = ("a photo of a {}.",), batch_size: int = 16,
                 device: str | None = None):
        self.specs = list(specs)
        self.device = device  # None: the loaders' default (this process's device); set once loaded
        self.top_k = top_k
        self.min_failures = min_failures
        self.templates = list(templates)
        self.batch_size = batch_size
        self._models = None

    @property
    def models(self):
        if self._models is None:
            names = imagenet_names()
            self._models = []
            for spec in self.specs:
                m = load_classifier(spec, labels=names, templates=self.templates, device=self.device)
                if len(m.label_names) != 1000:
                    raise ModelError(f"surrogate '{spec}' predicts {len(m.label_names)} classes, "
                                     "not the 1000 ImageNet classes the filter needs")
                self._models.append(m)
                self.device = m.device
        return self._models

    def score(self, images: list, target_ids: list[Sequence[int]]) -> list[Verdict]:
        import torch

        per_image: list[list[dict]] = [[] for _ in images]
        for start in range(0, len(images), self.batch_size):
            batch = images[start : start + self.batch_size]
            for spec, model in zip(self.specs, self.models, strict=True):
                probs = torch.softmax(model.logits(model.preprocess(batch)).float(), dim=-1)
                scores, idx = probs.topk(5, dim=-1)
                for j in range(len(batch)):
                    top5 = [int(i) for i in idx[j]]
                    per_image[start + j].append({
                        "model": spec, "top5": top5,
                        "scores": [round(float(s), 6) for s in scores[j]],
                        "hit": hit(top5, target_ids[start + j], self.top_k),
                    })
        out = []
        for preds in per_image:
            failures = sum(not p["hit"] for p in preds)
            out.append(Verdict(preds, failures, keep(failures, len(preds), self.min_failures)))
        return out
