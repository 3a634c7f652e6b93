"""What every evaluation protocol is: a class registered with ``@PROTOCOLS.register(name)``.

A protocol says how its models are loaded (``load``: a classifier, with the labels and templates a zero-shot
model needs, or a VQA model) and checked (``check``), is bound to one loaded model and one dataset split
(``__init__``: one line naming what is missing when the split does not fit), turns a batch into one
prediction row per sample (``score``, plus ``extra`` per-row values its metrics read) and, at the end of the
split, into metric rows (``metrics``). The runner (:mod:`gensets.evaluation.runner`) owns the loop, the
timing, the run row and the summary, so a new protocol is one module in this package.

A prediction row is ``{"key", "target", "target_ids", "top5", "scores", "correct1", "correct5"}``: the
top-5 indices into the model's label space and their softmax scores, the indices that count as correct,
and whether one of them is first / among the first five (the hit rule of :mod:`gensets.labels.hits`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import GensetsError
from ...labels.hits import hit
from ...labels.imagenet import imagenet_names
from ...labels.names import same_names
from ...models import load_classifier, load_vqa, parse_spec
from ...registry import LABEL_SPACES, PROTOCOLS

if TYPE_CHECKING:
    from ..data import Split

ZERO_SHOT_KINDS = ("open_clip", "hf-clip")


@dataclass(frozen=True)
class LabelSpace:
    """A label space's paper-specific facts, registered by its paper in :data:`gensets.registry.LABEL_SPACES`
    under its builder's name (a split's ``builder``): ``class_map``, its classes' index -> the ImageNet-1k ids
    that count as it (``imagenet``, and the protocol chosen when its samples give none); following the paper
    (``zero-shot``), its class names read by ``official_name`` and prompted with ``template``, the run row's
    protocol naming ``variant``."""

    class_map: Callable[[], dict[int, list[int]]] | None = None
    official_name: Callable[[str], str] | None = None
    template: str | None = None
    variant: str = ""


def label_space(*builders: str | None) -> LabelSpace | None:
    """The label space registered for the first of ``builders`` that has one (None: none has)."""
    for builder in builders:
        if isinstance(builder, str) and builder in LABEL_SPACES:
            return LABEL_SPACES.get(builder)
    return None


def choose(model_kind: str, model_labels: Sequence[str] | None, class_names: Sequence[str] | None,
           meta: dict) -> str:
    """The default protocol for a (model, dataset) pair."""
    if model_kind in ZERO_SHOT_KINDS:
        return "zero-shot"
    if class_names and model_labels and same_names(model_labels, class_names):
        return "native"
    if meta.get("imagenet_ids") is not None and model_labels is not None and len(model_labels) == 1000:
        return "imagenet"
    return "wordset"


class Models:
    """The models of one evaluation, each loaded once (a zero-shot model once per label space); the loaders'
    options (``allow_pickle``, ``trust_remote_code``, ``device``) are given once, to the constructor."""

    def __init__(self, vlm: dict | None = None, **options):
        self.options = options
        self.vlm = vlm or {}  # a LLaVA model's dtype and aspect (gensets eval --vlm-precision, --vlm-aspect)
        self._classifiers: dict[tuple, Any] = {}
        self._vqa: dict[str, Any] = {}

    def classifier(self, spec: str, labels: Sequence[str] | None = None, templates: Sequence[str] | None = None):
        key = (spec, tuple(labels or ()), tuple(templates or ()))
        model = self._classifiers.get((spec,)) or self._classifiers.get(key)
        if model is None:
            model = load_classifier(spec, list(labels) if labels is not None else None,
                                    list(templates) if templates else None, **self.options)
            # only a zero-shot model depends on the labels it was given
            self._classifiers[key if model.kind in ZERO_SHOT_KINDS else (spec,)] = model
        return model

    def vqa(self, spec: str):
        if spec not in self._vqa:
            self._vqa[spec] = load_vqa(spec, **self.options, **self.vlm)
        return self._vqa[spec]


def automatic(models: Models, spec: str, split: Split, first: dict) -> tuple[type[Protocol], Any]:
    """No ``--protocol``: the model (a zero-shot one gets the dataset's class names when it has them) and the
    protocol :func:`choose` picks from the loaded model's kind and labels, never from the spec's name; a
    split whose label space has a class map (:data:`~gensets.registry.LABEL_SPACES`) maps its samples to
    ImageNet ids whether or not their json says so."""
    model = PROTOCOLS.get("zero-shot").load(models, spec, split) if split.class_names else models.classifier(spec)
    meta = first["meta"]
    space = label_space(split.builder)
    if space is not None and space.class_map is not None and meta.get("imagenet_ids") is None:  # its classes' ids: the class map
        meta = {**meta, "imagenet_ids": []}
    return PROTOCOLS.get(choose(model.kind, model.label_names, split.class_names, meta)), model


@dataclass
class Scored:
    rows: list[dict]  # one prediction row per sample (VQA: per question)
    extra: dict[str, list] = field(default_factory=dict)  # per-row values the protocol's metrics read


class Protocol:
    """One protocol bound to one model and one dataset split."""

    name: ClassVar[str] = ""  # the name it is registered under
    row_per_image: ClassVar[bool] = True  # one prediction row per image: images per second is rows per second

    @classmethod
    def check(cls, cfg) -> None:
        """Refuse a bad evaluation (an EvalConfig) before any data is read."""

    @classmethod
    def load(cls, models: Models, spec: str, split: Split):
        """The model ``spec`` as this protocol scores it on ``split``."""
        raise NotImplementedError

    def __init__(self, model, split: Split, *, first: dict, cfg, models: Models):
        """Bound to ``model`` on ``split``; ``first`` is the split's first record, ``cfg`` the EvalConfig."""
        self.model, self.split, self.first, self.cfg, self.models = model, split, first, cfg, models

    @property
    def run_protocol(self) -> str:
        """The protocol as the ``runs`` table records it (part of a run's identity)."""
        return self.name

    @property
    def label_space(self) -> str:
        return "dataset"

    @property
    def class_names(self) -> list[str] | None:
        """The names of the target indices, as the ``runs`` table records them."""
        return self.split.class_names

    def prepare(self, images: list) -> Any:
        """The model's input for a batch of decoded images. Runs in a worker process while the models score
        (gensets.evaluation.loader): on the CPU, returning tensors or other picklable values."""
        return images

    def score(self, inputs: Any, records: list[dict]) -> Scored:
        """Prediction rows of a batch: ``inputs`` is what ``prepare`` made of its images, ``records`` the
        batch's records (key, target, meta; their images went to ``prepare``)."""
        raise NotImplementedError

    def metrics(self, rows: list[dict], extra: dict[str, list]) -> list[dict]:
        """The run's metric rows ``{"name", "value", "lo", "hi"}``."""
        raise NotImplementedError

    def answers(self, rows: list[dict], extra: dict[str, list]) -> list[dict] | None:
        """A VLM's answers, one ``{"key", "question", "answer", "flag"}`` per prediction row, for the results
        database's ``answers`` table (None: the protocol's model gives no text)."""
        return None


class ClassifierProtocol(Protocol):
    """A classifier's logits -> per image the top-5 and the indices (model label space) that count as correct."""

    @classmethod
    def check(cls, cfg) -> None:
        for spec in cfg.models:
            parse_spec(spec)

    @classmethod
    def load(cls, models, spec, split):
        """A zero-shot (CLIP) model gets ImageNet-1k's labels under any protocol but zero-shot; other loaders
        ignore them."""
        return models.classifier(spec, labels=imagenet_names())

    def targets(self, record: dict) -> list[int]:
        raise NotImplementedError

    def extra(self, logits, targets: list[list[int]]) -> dict[str, list[bool]]:
        """Per-image hits of metrics reported beside top-1 and top-5 (name -> hits)."""
        return {}

    @property
    def label_space(self) -> str:
        return f"model ({len(self.model.label_names)})"

    def prepare(self, images):
        return self.model.preprocess(images)

    def score(self, inputs, records):
        logits = self.model.logits(inputs)
        top5, scores = topk(logits)
        targets = [self.targets(r) for r in records]
        rows = [{"key": r["key"], "target": r["target"], "target_ids": tg, "top5": top, "scores": sc,
                 "correct1": hit(top, tg, 1), "correct5": hit(top, tg, 5)}
                for r, top, sc, tg in zip(records, top5, scores, targets, strict=True)]
        return Scored(rows, self.extra(logits, targets))

    def metrics(self, rows, extra):
        return summarize(rows, extra)


class DatasetClasses(ClassifierProtocol):
    """The model's label space is the dataset's classes: a sample's target is its class index."""

    @property
    def label_space(self) -> str:
        return "dataset"

    def targets(self, record):
        t = record["target"]
        return [] if t is None else [int(t)]


class VQAProtocol(Protocol):
    """The models are VQA / image-text-to-text models (gensets.models.vlm), asked questions about each image."""

    @classmethod
    def load(cls, models, spec, split):
        return models.vqa(spec)


def class_names_of(split: Split, protocol: str) -> list[str]:
    """The split's class names; GensetsError when the dataset declares none."""
    if not split.class_names:
        raise GensetsError(f"protocol {protocol} needs the dataset's class names (a card with a cls class_label)")
    return split.class_names


def topk(logits, k: int = 5) -> tuple[list[list[int]], list[list[float]]]:
    """Per row, the indices of the ``k`` highest logits and their softmax scores (6 decimals)."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    k = min(k, probs.shape[-1])
    scores, idx = probs.topk(k, dim=-1)
    return idx.tolist(), [[round(float(s), 6) for s in row] for row in scores]


def accuracy_row(name: str, correct: Sequence[bool], seed: int = 0) -> dict:
    """A metric row: the fraction correct with its seeded bootstrap 95% interval."""
    import numpy as np

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the protocols)

    c = np.array(correct, dtype=bool)
    lo, hi = M.bootstrap_ci(c.astype(float), seed=seed)
    return {"name": name, "value": M.accuracy(c), "lo": lo, "hi": hi}


def summarize(preds: list[dict], extra: dict[str, list[bool]], seed: int = 0) -> list[dict]:
    """Metric rows of a classifier's run: top-1 and top-5 (with seeded bootstrap 95% intervals), every extra
    hit list under its name, and the mean per-class top-1 when every sample has a target."""
    import numpy as np

    from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the protocols)

    out = [accuracy_row("top1", [p["correct1"] for p in preds], seed),
           accuracy_row("top5", [p["correct5"] for p in preds], seed),
           *(accuracy_row(k, v, seed) for k, v in extra.items())]
    targets = np.array([-1 if p["target"] is None else p["target"] for p in preds])
    if (targets >= 0).all():
        c1 = np.array([p["correct1"] for p in preds], dtype=bool)
        out.append({"name": "mean_per_class", "value": M.mean_per_class_accuracy(c1, targets),
                    "lo": None, "hi": None})
    return out
