"""``native``: the model's own label names are the dataset's class names, in order."""

from __future__ import annotations

from ...errors import GensetsError
from ...labels.names import same_names
from ...registry import PROTOCOLS
from .base import DatasetClasses


@PROTOCOLS.register("native")
class Native(DatasetClasses):
    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)
        if not split.class_names or not same_names(model.label_names, split.class_names):
            raise GensetsError(f"protocol native: the labels of '{model.spec}' are not the dataset's "
                               f"{len(split.class_names or [])} class names")
