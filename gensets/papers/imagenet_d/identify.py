"""ImageNet-D told from what it is: a split whose samples name no builder (the released ImageNet-D, a card's
names) is ImageNet-D when its class list is, and is then evaluated by its authors' protocols."""

from __future__ import annotations

from ...labels.twoway import IMAGENET_D_BUILDER
from ...registry import IDENTIFIERS
from ...sources.packaged import imagenet_d_class_names, is_imagenet_d_class_list


@IDENTIFIERS.register("imagenet-d")
def identify(sp) -> str | None:
    """ImageNet-D's class list (its card's names, or its folder names, which then become the authors' names:
    "binder_closed" -> "binder_(closed)") is ImageNet-D: its builder's name, else None."""
    if not is_imagenet_d_class_list(sp.class_names):
        return None
    sp.class_names = imagenet_d_class_names()
    return IMAGENET_D_BUILDER
