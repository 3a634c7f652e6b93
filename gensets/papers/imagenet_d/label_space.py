"""ImageNet-D's label space as the engine's protocols read it (:data:`gensets.registry.LABEL_SPACES`, under its
builder's name): its 113 classes' ImageNet-1k ids (``imagenet``: the class map, ``masked_top1``), and, following
the paper (``zero-shot``), the authors' class names and their single prompt "A photo of a {}"
(chenshuang-zhang/imagenet_d, ``evaluate_vlm.py``)."""

from __future__ import annotations

from ...evaluation.protocols.base import LabelSpace
from ...labels.twoway import IMAGENET_D_BUILDER, OFFICIAL_TEMPLATE, official_name
from ...registry import LABEL_SPACES
from ...sources.packaged import imagenet_d_class_map

LABEL_SPACE = LABEL_SPACES.register(IMAGENET_D_BUILDER, LabelSpace(
    class_map=imagenet_d_class_map, official_name=official_name, template=OFFICIAL_TEMPLATE,
    variant="imagenet-d official"))
