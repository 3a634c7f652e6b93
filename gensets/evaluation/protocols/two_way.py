"""``two-way``: ImageNet-D's protocol for VLMs. Each image's true class against the top wrong class of a
zero-shot CLIP model (``--clip``) over the dataset's class names; the VLM is asked which of the two it sees
(question and answer matching: :mod:`gensets.labels.twoway`).

- ``two-way`` (default) is the authors' evaluation code: normalised names, "A photo of a {}" for CLIP, the
  question "What is the main object in this image? Choose from the following list: {true}, {wrong}.",
  substring matching with their synonym map. ``top1`` is their accuracy, TRUE / (TRUE + FALSE): answers
  naming both options or neither (DOUBLE, TODO) are left out; ``two_way_all`` counts them wrong; ``unparseable``
  is their fraction. Every answer is stored with its question and flag (the results database's ``answers``), so
  the authors' ``compute_accuracy.py`` counts can be redone from gensets' output.
- ``two-way-shuffled`` (gensets' own reading): readable names, CLIP's default template, seeded random lettered
  options, whole-word parsing. ``top1`` counts unparseable answers wrong; ``two_way_parsed`` drops them.

The wrong option: CLIP's (``--clip SPEC``), or, on a dataset that gives each image's (the released ImageNet-D's
``questions/<nuisance>.csv``, :data:`gensets.registry.RELEASED_DATASETS`: the questions its authors asked LLaVA), that one
unless ``--clip`` is given; then no CLIP model runs.

The run row's protocol names the variant and where the wrong option came from: ``two-way (SPEC)``,
``two-way-shuffled (SPEC)`` (CLIP ``SPEC``'s), ``two-way (wrong_option=released-csv)`` (the dataset's questions) and,
on such a dataset with ``--clip``, ``two-way (wrong_option=clip SPEC)``; a LLaVA model adds how it ran (fp16 on CUDA
as the authors, else ``fp32 on cpu``; its images padded to a square as LLaVA's ``expand2square``, the authors'
preprocessing: :mod:`gensets.models.vlm`).
"""

from __future__ import annotations

from ...errors import DataError, GensetsError
from ...labels.names import readable
from ...labels.twoway import (
    OFFICIAL_TEMPLATE,
    official_name,
    score_two_way,
    two_way_accuracy,
    two_way_outcomes,
)
from ...registry import PROTOCOLS, RELEASED_DATASETS
from .base import Scored, VQAProtocol, accuracy_row


class TwoWay(VQAProtocol):
    variant = "official"

    @classmethod
    def check(cls, cfg):
        """No --clip: refused before anything loads unless the dataset may give the wrong options (the released
        ImageNet-D; a split of it without a questions CSV is refused once it is read)."""
        from pathlib import Path

        if not cfg.clip and not any(r.matches_id(str(cfg.dataset)) or r.looks(Path(cfg.dataset))
                                    for _, r in RELEASED_DATASETS.items()):
            raise GensetsError(f"protocol {cls.name} needs --clip SPEC: the CLIP model that picks the wrong class")

    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)
        if not split.class_names:
            raise GensetsError(f"protocol {self.name} needs the class names of {split.config}/{split.split}")
        self.from_dataset = split.wrong_options is not None and not self.cfg.clip
        if not self.cfg.clip and not self.from_dataset:
            raise GensetsError(f"protocol {self.name} needs --clip SPEC: the CLIP model that picks the wrong class "
                               "(the released ImageNet-D's questions/*.csv give it without one)")
        official = self.variant == "official"
        self.names = [official_name(n) if official else readable(n) for n in split.class_names]
        self.clip = None if self.from_dataset else self.models.classifier(
            self.cfg.clip, labels=self.names, templates=[OFFICIAL_TEMPLATE] if official else None)

    @property
    def run_protocol(self) -> str:
        """The protocol with its variant: where the wrong option came from, when it is not the authors'
        (:data:`gensets.labels.twoway.DECODING`) the decoding, and a LLaVA model's dtype and image aspect
        (:attr:`gensets.models.vlm.VQAModel.variant`): ``two-way (tiny:clip; decoding=greedy; fp32 on cpu,
        pad-square)``; on CUDA the authors' ``fp16, pad-square``."""
        decoding = "" if self.cfg.decoding == "authors" else f"; decoding={self.cfg.decoding}"
        llava = getattr(self.model, "variant", "")  # a LLaVA model's dtype and image aspect (gensets.models.vlm)
        decoding += f"; {llava}" if llava else ""
        if self.from_dataset:
            return f"{self.name} (wrong_option=released-csv{decoding})"
        if self.split.wrong_options is not None:
            return f"{self.name} (wrong_option=clip {self.cfg.clip}{decoding})"
        return f"{self.name} ({self.cfg.clip}{decoding})"

    def _wrong(self, records) -> list[int] | None:
        """Each record's wrong option as the dataset gives it (None: CLIP picks them)."""
        if not self.from_dataset:
            return None
        out = []
        for r in records:
            if r["key"] not in self.split.wrong_options:
                raise DataError(f"{self.split.questions or 'the questions'}: no question for image {r['key']} "
                                f"({self.split.config}); give --clip SPEC to let CLIP pick every wrong option")
            out.append(self.split.wrong_options[r["key"]])
        return out

    def score(self, inputs, records):
        keys = [r["key"] for r in records]
        res = score_two_way(self.model, self.clip, inputs, [int(r["target"]) for r in records], self.names,
                            self.cfg.seed, batch_size=self.cfg.batch_size, keys=keys, variant=self.variant,
                            wrong=self._wrong(records), decoding=self.cfg.decoding)
        out = Scored([], {"choice": [], "correct": [], "question": [], "answer": [], "flag": []})
        for key, item in zip(keys, res["items"], strict=True):
            ok = item["choice"] == item["correct"]
            out.rows.append({"key": key, "target": item["target"], "target_ids": [item["target"]],
                             "top5": [] if item["chosen"] is None else [item["chosen"]], "scores": [],
                             "correct1": ok, "correct5": ok})
            out.extra["choice"].append(item["choice"])
            out.extra["correct"].append(item["correct"])
            for k in ("question", "answer", "flag"):
                out.extra[k].append(item[k])
        return out

    def answers(self, rows, extra):
        """Each answer's question, raw text and flag (TRUE, FALSE, DOUBLE, TODO: how ``top1`` counted it)."""
        return [{"key": r["key"], "question": q, "answer": a, "flag": f}
                for r, q, a, f in zip(rows, extra["question"], extra["answer"], extra["flag"], strict=True)]

    def metrics(self, rows, extra):
        acc = two_way_accuracy(extra["choice"], extra["correct"])
        unparseable = {"name": "unparseable", "value": acc["n_unparseable"] / acc["n"] if acc["n"] else None,
                       "lo": None, "hi": None}
        counted = two_way_outcomes(rows, self.variant)  # official: the authors' TRUE / (TRUE + FALSE)
        top1 = accuracy_row("top1", counted) if counted else {"name": "top1", "value": None, "lo": None, "hi": None}
        other = ({"name": "two_way_all", "value": acc["accuracy"], "lo": None, "hi": None}
                 if self.variant == "official" else
                 {"name": "two_way_parsed", "value": acc["accuracy_parsed"], "lo": None, "hi": None})
        return [top1, other, unparseable]


@PROTOCOLS.register("two-way")
class TwoWayOfficial(TwoWay):
    """two-way (ImageNet-D's protocol for VLMs, the authors' evaluation code): the true class against CLIP's top
    wrong one, their names, template, question and substring matching; top1 is TRUE / (TRUE + FALSE)."""

    variant = "official"


@PROTOCOLS.register("two-way-shuffled")
class TwoWayShuffled(TwoWay):
    """two-way, gensets' own reading: readable names, CLIP's default template, seeded random lettered options,
    whole-word parsing; top1 counts unparseable answers wrong."""

    variant = "shuffled"
