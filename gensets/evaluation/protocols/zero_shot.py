"""``zero-shot``: a CLIP model's text classifier over the dataset's own class names.

On a dataset whose label space follows a paper (:data:`gensets.registry.LABEL_SPACES`, by its split's builder), e.g.
ImageNet-D (its samples' provenance names the ``imagenet-d`` builder, or its class list is ImageNet-D's: a card's
names, the released ImageNet-D of :data:`gensets.registry.RELEASED_DATASETS`), ``zero-shot`` is the
authors' CLIP evaluation (chenshuang-zhang/imagenet_d, ``evaluate_vlm.py``): class names normalised as
:func:`gensets.labels.twoway.official_name` ("coffee/french press" -> "coffee or french press", "t-shirt" ->
"t shirt", lower case) and the single prompt "A photo of a {}"; the run row's protocol reads
``zero-shot (imagenet-d official)``. Any other dataset: readable names ("_" -> " ") and the dataset's
templates, else the loaders' default ("a photo of a {}.").

``zero-shot-readable`` is gensets' reading on every dataset, ImageNet-D included (a named option): readable
names and the default templates. ``--template`` replaces the templates of either, and the run row says so.
"""

from __future__ import annotations

from ...labels.names import readable
from ...registry import PROTOCOLS
from .base import DatasetClasses, class_names_of, label_space


@PROTOCOLS.register("zero-shot")
class ZeroShot(DatasetClasses):
    """zero-shot: a CLIP model's text classifier over the dataset's class names; on a dataset whose label space
    follows a paper (ImageNet-D), the authors' names and prompt."""

    follow_paper = True  # a label space with a paper's reading (LABEL_SPACES): its names and prompt

    @classmethod
    def official(cls, split) -> bool:
        space = label_space(split.builder)
        return cls.follow_paper and space is not None and space.template is not None

    @classmethod
    def prompting(cls, split) -> tuple[list[str], list[str] | None]:
        """The labels and templates the model's text classifier is built from."""
        names = class_names_of(split, cls.name)
        if cls.official(split):
            space = label_space(split.builder)
            return [space.official_name(n) for n in names], split.templates or [space.template]
        return [readable(n) for n in names], split.templates

    @classmethod
    def load(cls, models, spec, split):
        labels, templates = cls.prompting(split)
        return models.classifier(spec, labels=labels, templates=templates)

    @property
    def run_protocol(self) -> str:
        variant = [*([label_space(self.split.builder).variant] if self.official(self.split) else []),
                   *(["--template"] if self.cfg.templates else [])]
        return f"{self.name} ({', '.join(variant)})" if variant else self.name


@PROTOCOLS.register("zero-shot-readable")
class ZeroShotReadable(ZeroShot):
    """zero-shot, gensets' reading on every dataset (ImageNet-D included): readable class names and the default
    templates."""

    follow_paper = False
