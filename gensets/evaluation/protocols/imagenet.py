"""``imagenet``: a 1000-way ImageNet model; a class maps to a set of ImageNet indices (a sample's
``imagenet_ids``, else ImageNet-D's class map) and a hit on any of them counts.

The masked variant: on ImageNet-D (a split whose builder is ImageNet-D's: its samples' provenance, its class list,
or the released ImageNet-D, :data:`gensets.registry.RELEASED_DATASETS`), ``masked_top1`` / ``masked_top5`` are top-1 / top-5 with the logits
restricted to the union of the dataset's mapped indices, reported beside the unmasked ones.

Top-5 with several ids per class (9 ImageNet-D classes map to several ImageNet ids):

- ``imagenet`` (default): an image is a top-5 hit once, however many of its class's ids are in its top 5
  (:func:`gensets.labels.hits.hit`). The paper publishes top-1 accuracies only (ImageNet-D, CVPR 2024: the
  headline ResNet 55.02%, ViT-L/16 59.40%, ...; /work/shared/papers 004), so the authors' top-5 arithmetic
  produced no published number and the standard counted-once top-5 is the default. Top-1 is the same under
  both readings (an image's ids are distinct, at most one can be first).
- ``imagenet-top5-per-id`` (a named variant): the authors' code, ``evaluate_imagenet_models.py``
  (chenshuang-zhang/imagenet_d, ``test_model``): ``for k in range(len(target))`` adds
  ``correct[:5].sum()`` once per mapped id, so an image whose top 5 holds two ids of its class adds 2 to the
  top-5 count (:func:`gensets.metrics.topk_count_per_id`); ``top5`` is the count over the images (it can
  exceed the fraction of images hit, even 1). ``masked_top5`` stays counted once (gensets' own metric, not the
  authors'). The run row's protocol (``--json``: ``variant``) names which.
"""

from __future__ import annotations

from ...errors import GensetsError
from ...labels.hits import hit
from ...registry import PROTOCOLS
from .base import ClassifierProtocol, label_space, summarize, topk


@PROTOCOLS.register("imagenet")
class ImageNet(ClassifierProtocol):
    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)
        self.class_map = None
        self.union = None
        space = label_space(self.split.builder, self.first["meta"].get("builder"))
        if space is not None and space.class_map is not None:
            self.class_map = space.class_map()
            self.union = sorted({i for ids in self.class_map.values() for i in ids})

    def targets(self, record):
        ids = record["meta"].get("imagenet_ids")
        t = record["target"]
        if ids is None and self.class_map is not None and t is not None:
            ids = self.class_map.get(int(t))
        if ids is None:
            raise GensetsError(f"protocol imagenet: sample {record['key']} has no ImageNet ids "
                               "(no json imagenet_ids and no class map)")
        return [int(i) for i in ids]

    def extra(self, logits, targets):
        if not self.class_map:
            return {}
        import torch

        masked = torch.full_like(logits, float("-inf"))
        masked[:, self.union] = logits[:, self.union]
        mtop, _ = topk(masked)
        return {f"masked_top{k}": [hit(m, t, k) for m, t in zip(mtop, targets, strict=True)] for k in (1, 5)}


@PROTOCOLS.register("imagenet-top5-per-id")
class ImageNetTop5PerId(ImageNet):
    """``imagenet`` with the authors' top-5 arithmetic (``evaluate_imagenet_models.py``): each mapped id in an
    image's top 5 counts once, so ``top5`` is (sum over images of the ids hit) / images."""

    def metrics(self, rows, extra):
        import numpy as np

        from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the protocols)

        out = summarize(rows, extra)
        counts = np.array([M.topk_count_per_id(p["top5"], p["target_ids"], 5) for p in rows], dtype=float)
        lo, hi = M.bootstrap_ci(counts, seed=0)
        return [{"name": "top5", "value": float(counts.mean()), "lo": lo, "hi": hi} if r["name"] == "top5" else r
                for r in out]
