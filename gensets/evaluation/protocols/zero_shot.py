"""``zero-shot``: a CLIP model's text classifier over the dataset's own class names and templates."""

from __future__ import annotations

from ...labels.names import readable
from ...registry import PROTOCOLS
from .base import DatasetClasses, class_names_of


@PROTOCOLS.register("zero-shot")
class ZeroShot(DatasetClasses):
    @classmethod
    def load(cls, models, spec, split):
        """The dataset's class names (as prompts read them) and templates are the model's labels."""
        names = class_names_of(split, cls.name)
        return models.classifier(spec, labels=[readable(n) for n in names], templates=split.templates)
