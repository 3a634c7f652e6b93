"""Evaluation protocols: how a model's outputs are matched to a dataset's classes.

Each protocol turns a batch of logits into, per image, the top-5 predictions (indices into the
model's label space, and their softmax scores) and the set of indices that count as correct for the
image's class. A hit at k is any correct index among the first k (the same rule as the surrogate filter).

- ``imagenet``: a 1000-way ImageNet model; a class maps to a set of ImageNet indices (a sample's
  ``imagenet_ids``), a hit on any counts. Also reports ``masked_top1`` / ``masked_top5``: the logits
  restricted to the union of the dataset's mapped indices, under their own names.
- ``zero-shot``: a CLIP model's text classifier over the dataset's own class names and templates.
- ``native``: the model's own label names are the dataset's class names.
- ``wordset`` (Borji 2022): a prediction hits when the target word appears among the words of the
  predicted label name (see ``gensets.labels.wordset``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import GensetsError
from .hits import hit

PROTOCOLS = ("imagenet", "zero-shot", "native", "wordset")
ZERO_SHOT_KINDS = ("open_clip", "hf-clip")


def readable(name: str) -> str:
    """A class name as a prompt reads it: 'binder_(closed)' -> 'binder (closed)'."""
    return name.replace("_", " ").strip()


def _norm(name: str) -> str:
    return readable(name).lower()


@dataclass
class Scored:
    top5: list[list[int]]
    scores: list[list[float]]
    targets: list[list[int]]  # per image: the indices (model label space) that count as correct
    extra: dict[str, list[bool]] = field(default_factory=dict)  # per-image hits of extra metrics


def choose(model_kind: str, model_labels: Sequence[str] | None, class_names: Sequence[str] | None,
           meta: dict) -> str:
    """The default protocol for a (model, dataset) pair."""
    if model_kind in ZERO_SHOT_KINDS:
        return "zero-shot"
    if class_names and model_labels and [_norm(n) for n in model_labels] == [_norm(n) for n in class_names]:
        return "native"
    if meta.get("imagenet_ids") is not None and model_labels is not None and len(model_labels) == 1000:
        return "imagenet"
    return "wordset"


def _topk(logits, k: int = 5):
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    k = min(k, probs.shape[-1])
    scores, idx = probs.topk(k, dim=-1)
    return idx.tolist(), [[round(float(s), 6) for s in row] for row in scores]


class Bound:
    """A protocol bound to one model and one dataset split."""

    def __init__(self, name: str, model, class_names: Sequence[str] | None, class_map: dict[int, list[int]] | None = None,
                 synonyms: dict | None = None):
        self.name = name
        self.model = model
        self.class_names = list(class_names) if class_names else None
        self.class_map = class_map
        self.synonyms = synonyms
        self._word_targets: dict[int, list[int]] = {}
        if name == "native":
            if not self.class_names or [_norm(n) for n in model.label_names] != [_norm(n) for n in self.class_names]:
                raise GensetsError(f"protocol native: the labels of '{model.spec}' are not the dataset's "
                                   f"{len(self.class_names or [])} class names")
        if name == "wordset" and not self.class_names:
            raise GensetsError("protocol wordset needs the dataset's class names (a card with a cls class_label)")

    def targets(self, record: dict) -> list[int]:
        t = record["target"]
        if self.name in ("zero-shot", "native"):
            return [] if t is None else [int(t)]
        if self.name == "imagenet":
            ids = record["meta"].get("imagenet_ids")
            if ids is None and self.class_map is not None and t is not None:
                ids = self.class_map.get(int(t))
            if ids is None:
                raise GensetsError(f"protocol imagenet: sample {record['key']} has no ImageNet ids "
                                   "(no json imagenet_ids and no class map)")
            return [int(i) for i in ids]
        if t not in self._word_targets:
            from .wordset import wordset_targets

            word = readable(self.class_names[int(t)])
            syn = dict(self.synonyms or {})  # and the dataset's own synonyms of the label (json.synonyms)
            syn[word] = [*syn.get(word, []), *(record["meta"].get("synonyms") or [])]
            self._word_targets[t] = wordset_targets(word, self.model.label_names, syn)
        return self._word_targets[t]

    def score(self, logits, records: list[dict]) -> Scored:
        top5, scores = _topk(logits)
        out = Scored(top5, scores, [self.targets(r) for r in records])
        if self.name == "imagenet" and self.class_map:
            import torch

            union = sorted({i for ids in self.class_map.values() for i in ids})
            masked = torch.full_like(logits, float("-inf"))
            masked[:, union] = logits[:, union]
            mtop, _ = _topk(masked)
            out.extra["masked_top1"] = [hit(m, t, 1) for m, t in zip(mtop, out.targets, strict=True)]
            out.extra["masked_top5"] = [hit(m, t, 5) for m, t in zip(mtop, out.targets, strict=True)]
        return out


def model_kwargs(protocol: str, class_names: Sequence[str] | None, templates: Sequence[str] | None) -> dict:
    """What ``load_classifier`` needs for a protocol: zero-shot models get the dataset's names."""
    if protocol == "zero-shot":
        if not class_names:
            raise GensetsError("protocol zero-shot needs the dataset's class names (a card with a cls class_label)")
        return {"labels": [readable(n) for n in class_names], "templates": list(templates) if templates else None}
    return {}


