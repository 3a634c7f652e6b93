"""The contract every builder fulfils, with its defaults, and the generate-and-encode step they share.

A builder is one class, registered where it is defined::

    @BUILDERS.register("my-builder")
    class MyBuilder(Builder):
        Config = MyConfig                      # a frozen dataclass; gensets.config validates the YAML into it
        fields = (("my_field", "string"),)     # the provenance fields it adds to the common ones

        def plan(self, cfg): ...               # -> [Unit]: deterministic, ids from content
        def run_unit(self, unit, ctx, build_id): ...   # -> [Sample]
        def check_prompts(self, unit, ctx): ...  # optional: long_prompts: error, checked before the first image
        def work(self, unit): ...              # optional: -> Work, what `gensets build --plan` counts

Everything else has a default: one published config (``default``) with a ``test`` split, no review step,
no relabelling, a card section with the build's models. ``gensets.builders.runner`` drives it: plan ->
units -> atomic candidate shards -> state.duckdb -> ``finalize`` -> dataset/; ``gensets.cards.card``
writes its card.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import GensetsError
from ..images import encode_image
from ..records import Sample, provenance_of
from .common import GeneratorConfig, ImageConfig, Unit


@dataclass(frozen=True)
class Work:
    """What one unit will do, as ``gensets build --plan`` counts it before anything runs: its images per published
    config, the generator settings that make them (``None``: they are imported, copied or drawn, not generated),
    how many classifiers score each one (surrogates), the other models it loads as (role, spec), and what else it
    does that the plan does not cost (``other``, e.g. "Textual Inversion's training")."""

    images: dict[str, int] = field(default_factory=dict)
    generator: dict | None = None  # a GeneratorConfig as the unit's payload holds it (model, steps, width, ...)
    surrogates: int = 0
    models: tuple[tuple[str, str], ...] = ()
    other: str | None = None


class PlannedLater(GensetsError):
    """A stage that is planned from what the stages before it made (their shards, trained embeddings): raised by
    ``plan(cfg, stage=..., workspace=None)``; ``gensets build --plan`` bounds its images by ``planned_images``."""


class Context:
    """What one process of a build holds: the config, models loaded once and lazily, the workspace (set by the
    runner: staged builders read earlier stages from it) and the inputs a unit refused (``skipped``)."""

    def __init__(self, cfg: Any):
        self.cfg = cfg
        self.workspace = None
        self.skipped: list[dict] = []
        self._generator = None

    def load(self) -> None:
        """Load every model the build needs now, so a missing one fails in one line before any work."""
        if getattr(self.cfg, "generator", None) is not None:
            self.generator  # noqa: B018

    @property
    def generator(self):
        """The config's generator (``cfg.generator``), loaded on first use."""
        if self._generator is None:
            self._generator = self.cfg.generator.load()
        return self._generator


class Builder:
    """Defaults for every member of the builder contract; a builder overrides what it needs."""

    name: ClassVar[str] = ""  # set by @BUILDERS.register
    description: ClassVar[str] = ""  # the card's first paragraph
    citation: ClassVar[str] = ""  # BibTeX of the paper it reproduces
    Config: ClassVar[type]  # the config dataclass (``builder: <name>`` selects it)
    Context: ClassVar[type] = Context
    split: ClassVar[str] = "test"  # the published split
    needs_review: ClassVar[bool] = False  # kept images wait in the review queue (else: accepted)
    task_categories: ClassVar[tuple[str, ...]] = ("image-classification",)  # the card's task_categories
    stages: ClassVar[tuple[str, ...] | None] = None  # staged builders: planned stage after stage
    fields: ClassVar[tuple] = ()  # (name, dtype) of the provenance fields it adds to records.schema's common ones
    field_docs: ClassVar[dict[str, str]] = {}  # what each of its fields means (dotted paths), for the card
    review_instructions: ClassVar[tuple[str, ...]] = (  # the review page's, unless the config's review.instructions
        "Accept an image that shows an object of its class, recognisable as such by a person.",
        "Reject an image where no object of the class can be recognised, or that is broken (noise, garbled shapes, "
        "text instead of an object).",
        "Relabel an image that clearly shows one object of another class of this dataset: choose that class.",
        "Mark \"several objects\" (s) when objects of more than one class are prominent; decide as above as well.")

    def instructions(self, cfg) -> list[str]:
        """What the review page says accept, reject and relabel mean, in paragraphs: the config's
        ``review.instructions``, else the builder's :attr:`review_instructions`."""
        review = getattr(cfg, "review", None)
        given = review.instructions if review is not None and review.instructions else self.review_instructions
        return [t.strip() for t in given if t.strip()]

    def plan(self, cfg) -> list[Unit]:
        """Deterministic work units (a unit's id hashes its content). Staged builders (``stages``) are called
        as ``plan(cfg, stage=, workspace=)``, and plan each stage from the committed shards of the ones before."""
        raise NotImplementedError

    def planned_images(self, cfg) -> list[tuple[tuple[str, int], ...]]:
        """The images ``cfg`` asks for (at most), counted from its keys without planning them: a sum of products,
        each term a tuple of ``(config key, count)`` factors. ``load_build_config`` refuses a config beyond
        :data:`gensets.config.MAX_IMAGES` in all before anything is planned. Empty (the default): not known up
        front (e.g. imported files), not checked."""
        return []

    def run_unit(self, unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
        """Generate (or import) a unit's images and return them with their provenance."""
        raise NotImplementedError

    def check_prompts(self, unit: Unit, ctx: Context) -> None:
        """Under ``long_prompts: error``, raise :class:`PromptTooLong` when a prompt of ``unit`` is longer than
        its generator's text encoder reads (call :func:`check_prompts` with the unit's prompts). The runner
        calls it for every unit to run before the build's first image; a builder whose prompts are known only
        while a unit runs (made by a model: GenBench's CE) leaves it be, and :func:`generate_encoded` refuses
        them before the unit's first image."""

    def work(self, unit: Unit) -> Work | None:
        """What ``unit`` will do, counted before the build (``gensets build --plan``); None: not known ahead."""
        return None

    def config_names(self, cfg) -> list[str]:
        """The published configs, in the card's order."""
        return ["default"]

    def class_names(self, cfg) -> list[str]:
        """The class list of ``cls`` (the card's ClassLabel)."""
        return []

    def config_of(self, meta: dict) -> str:
        """The published config a sample goes to."""
        return meta["config"]

    def relabel(self, meta: dict, new_class: str) -> tuple[int, dict]:
        """A reviewer's relabel: the new class index and the changed provenance fields; KeyError when
        ``new_class`` is not a class (builders without a review step never relabel)."""
        raise KeyError(new_class)

    def after_build(self, ws) -> None:
        """Called once on rank 0 after every unit is committed (e.g. statistics over the whole build)."""

    def card_body(self, cfg, manifest: dict, samples) -> str:
        """The card's "How it was built" section. ``samples``: the published samples, a sequence read from the
        shards again at each pass (``len``, ``samples[0]``, iteration): count or collect what you need, never
        a list of them all."""
        return ""

    def selected_against(self, cfg) -> list[str]:
        """The classifiers whose failures chose the published images (ImageNet-D's surrogates): the card warns that
        their scores on this set are biased low by construction. None by default."""
        return []

    def audit_references(self, cfg) -> dict[str, str]:
        """The reference sets a build's audit (finalize, ``gensets audit WORKSPACE``) checks its images against
        without being asked: ``{name: source}`` (a folder of images, a dataset folder or ``hf:NAME``; a relative
        path is relative to the config's folder). GenBench: its real test set (test-set contamination). None by
        default."""
        return {}

    def models(self, cfg) -> list[tuple[str, str]]:
        """(role, spec) of every model the build used, for the card: the generator by default."""
        g = getattr(cfg, "generator", None)
        return [("generator", g.model)] if g is not None else []

    @classmethod
    def provenance(cls, **values) -> dict:
        """A sample's complete provenance: records.schema(fields), the common fields and this builder's."""
        return provenance_of(cls.fields, builder=cls.name, **values)


class PromptTooLong(GensetsError):
    """A prompt longer than the text encoder's window under ``long_prompts: error`` (the runner names the
    config file and the unit)."""


def prompt_texts(generator, g: GeneratorConfig, prompts: list[str], negative_prompts: list[str]) -> list[dict]:
    """Per image, the provenance of its prompt and negative prompt (``records.COMMON_TAIL``): ``prompt_tokens``,
    ``negative_prompt_tokens`` (untruncated counts, BOS and EOS included) and, when the text is longer than the
    text encoder's window, ``prompt_received`` / ``negative_prompt_received`` (what the encoder read; else
    None), as :meth:`gensets.models.Generator.measure` finds them. An empty negative prompt counts 2 (BOS, EOS):
    diffusers then encodes "". Under ``long_prompts: error``, a cut text raises :class:`PromptTooLong` naming
    the longest."""
    measured: dict[str, tuple] = {}
    out = []
    for texts in zip(prompts, negative_prompts, strict=True):
        row = {}
        for name, text in zip(("prompt", "negative_prompt"), texts, strict=True):
            if text not in measured:
                measured[text] = generator.measure(text or "")
            row[f"{name}_tokens"], row[f"{name}_received"] = measured[text]
        out.append(row)
    if g.long_prompts == "error":
        cut = [(row[f"{name}_tokens"], name) for row in out for name in ("prompt", "negative_prompt")
               if row[f"{name}_received"] is not None]
        if cut:
            n, name = max(cut)
            raise PromptTooLong(f"{name.replace('_', ' ')} of {n} tokens exceeds the text encoder's "
                                f"{generator.text_window} (long_prompts: error)")
    return out


def check_prompts(generator, g: GeneratorConfig, prompts: list[str], negative_prompts: list[str] | None = None) -> None:
    """:func:`prompt_texts`'s check alone, for :meth:`Builder.check_prompts` (nothing to do under ``truncate``).
    ``negative_prompts`` defaults to the config's negative prompt for every image."""
    if g.long_prompts == "error":
        negatives = negative_prompts if negative_prompts is not None else [g.negative_prompt] * len(prompts)
        prompt_texts(generator, g, prompts, negatives)


def generate_encoded(generator, g: GeneratorConfig, image: ImageConfig, prompts: list[str], seeds: list[int], *,
                     negative_prompts: list[str] | None = None, init_images: list | None = None,
                     strength: float = 0.75, resize: int | None = None) -> tuple[list[bytes], float, list[dict]]:
    """Generate one image per (prompt, seed) in the pipeline calls of ``g.batches(n)`` (calls of
    ``g.batch_size``, or one per image with ``batching: per-image``) and encode each as ``image`` says; returns
    the encoded images and the generator's seconds. ``negative_prompts`` defaults to the config's negative
    prompt for every image; a call whose negative prompts are all empty passes none. Image ``i``'s provenance
    is ``g.provenance(generator, index=i, count=n)``: it names the call that made it. ``resize``: each image is
    resized to ``resize`` x ``resize`` (bicubic, as PIL's ``Image.resize`` by default) before encoding.
    Third, image ``i``'s prompt provenance (:func:`prompt_texts`, measured before the first call: under
    ``long_prompts: error`` a prompt too long stops the unit before any image): pass it as ``**texts[i]``."""
    n = len(prompts)
    negatives = negative_prompts if negative_prompts is not None else [g.negative_prompt] * n
    texts = prompt_texts(generator, g, prompts, negatives)
    out: list[bytes] = []
    seconds = 0.0
    for call in g.batches(n):
        start, end = call.start, call.stop
        neg = negatives[start:end]
        t0 = time.perf_counter()
        pil = generator.generate(prompts[start:end], seeds[start:end], negative_prompts=neg if any(neg) else None,
                                 steps=g.steps, guidance=g.guidance, width=g.width, height=g.height,
                                 init_images=init_images[start:end] if init_images is not None else None,
                                 strength=strength)
        seconds += time.perf_counter() - t0
        if resize:
            pil = [im.resize((resize, resize), resample=3) for im in pil]  # 3: bicubic
        out += [encode_image(im, image.format, image.quality) for im in pil]
    return out, seconds, texts
