"""ImageNet-D (Zhang et al. 2024) as gensets declares it: its builder, report, published numbers and table."""

from __future__ import annotations

from ...sources.packaged import imagenet_d_published
from ..base import Paper
from .tables import TABLE


def published() -> list[dict]:
    d = imagenet_d_published()
    return [{"name": "imagenet-d:top1", "description": f"{len(d['top1'])} published accuracies "
             f"({', '.join(r['model'] for r in d['top1'])}; from the paper's summary)"}]


PAPER = Paper("imagenet-d", "Zhang et al., ImageNet-D (CVPR 2024)",
              modules=tuple(f"gensets.papers.imagenet_d.{m}" for m in ("builder", "report", "identify", "released", "label_space")),
              tables=(TABLE,), published=published)
