"""ImageNet-D (Zhang et al. 2024) as gensets declares it: its builder, report, published numbers and table."""

from __future__ import annotations

from ...sources.packaged import imagenet_d_published
from ..base import Paper
from .tables import TABLE


def published() -> list[dict]:
    d = imagenet_d_published()
    return [{"name": "imagenet-d:drops", "description": f"{len(d['numbers'])} published accuracy drops, ImageNet "
             f"minus ImageNet-D ({', '.join(r['what'] for r in d['numbers'])}; from the paper's summary)"}]


PAPER = Paper("imagenet-d", "Zhang et al., ImageNet-D (CVPR 2024)",
              modules=tuple(f"gensets.papers.imagenet_d.{m}" for m in ("builder", "report", "identify", "released", "imagenet_val",
                                                                      "label_space")),
              tables=(TABLE,), published=published)
