"""``imagenet``: a 1000-way ImageNet model; a class maps to a set of ImageNet indices (a sample's
``imagenet_ids``, else ImageNet-D's class map) and a hit on any of them counts.

The masked variant: on ImageNet-D, ``masked_top1`` / ``masked_top5`` are top-1 / top-5 with the logits
restricted to the union of the dataset's mapped indices, reported beside the unmasked ones.
"""

from __future__ import annotations

from ...errors import GensetsError
from ...labels.hits import hit
from ...registry import PROTOCOLS
from .base import ClassifierProtocol, topk


@PROTOCOLS.register("imagenet")
class ImageNet(ClassifierProtocol):
    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)
        self.class_map = None
        self.union = None
        if self.first["meta"].get("builder") == "imagenet-d":
            from ...sources.packaged import imagenet_d_class_map

            self.class_map = imagenet_d_class_map()
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
