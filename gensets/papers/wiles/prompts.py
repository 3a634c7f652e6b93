"""The prompts of a failure-mode build: Wiles et al. 2022's by default, gensets' earlier forms as named options.

Baseline prompt (``template``). The paper's: "a realistic photograph of a Persian cat (domestic animal)." -
the label, its superclass in parentheses, a full stop (``wiles2022``). The superclass is WordNet 3.0's
(gensets/data/wordnet/imagenet_superclasses.json: the class synset's grandparent; see that file's rule) unless
the config's ``superclasses`` names another for the label. ``label-only`` ("a realistic photograph of a
{label}") is gensets' earlier prompt. Any other value is a template with ``{label}`` (and ``{superclass}``).

Regeneration prompt (``mode_template``). The paper's: the baseline prompt, a space, the cluster's
description ("a realistic photograph of a ladybug (insect). it is in a plastic bag.": ``wiles2022``).
The description is the medoid's caption in the paper's form (:func:`description`). ``caption`` (the bare
caption) is gensets' earlier form: the label can vanish from the prompt, so a "failure" may be an image
without the object. Any other value is a template with ``{caption}`` or ``{description}`` (also
``{baseline}``, ``{label}``, ``{superclass}``).

The paper's captioner was a Flamingo-style model whose descriptions read "it is in a plastic bag."; gensets
captions with BLIP, whose text may begin with the prompt it was given ("a photography of ..."). The rule
that brings a caption into the paper's form is :func:`description`.
"""

from __future__ import annotations

from ...labels.imagenet import imagenet_names
from ...sources.packaged import imagenet_superclasses

TEMPLATES = {"wiles2022": "a realistic photograph of a {label} ({superclass}).",
             "label-only": "a realistic photograph of a {label}"}
MODE_TEMPLATES = {"wiles2022": "{baseline} {description}", "caption": "{caption}"}


def description(caption: str, prompt: str | None = None) -> str:
    """A caption as the paper writes a cluster's description ("it is in a plastic bag."): the captioner's
    ``prompt`` dropped from its start when it is there, whitespace collapsed, lower case, trailing
    punctuation (``.,;:!?``) replaced by one full stop; "" for a caption with no words."""
    text = " ".join(caption.split())
    if prompt:
        head = " ".join(prompt.split()).lower()
        if text.lower() == head or text.lower().startswith(head + " "):
            text = text[len(head):]
    text = text.strip().lower().rstrip(".,;:!? ")
    return f"{text}." if text else ""


def label_ids(cfg) -> dict[str, int]:
    """Each label -> its ImageNet-1k index."""
    index = {n: i for i, n in enumerate(imagenet_names())}
    return {label: index[label] for label in cfg.labels}


def superclass(cfg, label: str) -> str:
    """The label's superclass: the config's ``superclasses`` entry, else WordNet 3.0's (packaged)."""
    return cfg.superclasses.get(label) or imagenet_superclasses()[label_ids(cfg)[label]]


def template_text(cfg) -> str:
    return TEMPLATES.get(cfg.template, cfg.template)


def mode_template_text(cfg) -> str:
    return MODE_TEMPLATES.get(cfg.mode_template, cfg.mode_template)


def baseline_prompt(cfg, label: str) -> str:
    """"a realistic photograph of a Persian cat (domestic animal)." with the paper's template."""
    return template_text(cfg).format(label=label, superclass=superclass(cfg, label))


def regeneration_prompt(cfg, label: str, caption: str) -> str:
    """The prompt of a mode's regenerated images, from its medoid's caption ("a realistic photograph of a
    ladybug (insect). it is in a plastic bag." with the paper's templates)."""
    return mode_template_text(cfg).format(
        baseline=baseline_prompt(cfg, label), description=description(caption, cfg.captioner.prompt),
        caption=caption, label=label, superclass=superclass(cfg, label)).strip()


def variant(cfg) -> dict:
    """What names a build's numbers: the baseline template and regeneration form (a preset's name, or the
    template as written) and k of the top-k failure rule."""
    return {"template": cfg.template, "regeneration": cfg.mode_template, "top_k": cfg.top_k}
