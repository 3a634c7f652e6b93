"""``two-way``: ImageNet-D's protocol for VLMs. Each image's true class against the top wrong class of a
zero-shot CLIP model (``--clip``) over the dataset's class names; the VLM is asked which of the two it sees
(question and answer parsing: :mod:`gensets.labels.twoway`).

``top1`` counts unparseable answers as wrong; ``two_way_parsed`` is the paper's variant that drops them from
the denominator; ``unparseable`` is their fraction.
"""

from __future__ import annotations

from ...errors import GensetsError
from ...labels.names import readable
from ...registry import PROTOCOLS
from .base import Scored, VQAProtocol, accuracy_row


@PROTOCOLS.register("two-way")
class TwoWay(VQAProtocol):
    @classmethod
    def check(cls, cfg):
        if not cfg.clip:
            raise GensetsError("protocol two-way needs --clip SPEC: the CLIP model that picks the wrong class")

    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)
        if not split.class_names:
            raise GensetsError(f"protocol two-way needs the class names of {split.config}/{split.split}")
        self.names = [readable(n) for n in split.class_names]
        self.clip = self.models.classifier(self.cfg.clip, labels=self.names)

    @property
    def run_protocol(self) -> str:
        return f"two-way ({self.cfg.clip})"

    def score(self, inputs, records):
        from ...labels.twoway import score_two_way

        keys = [r["key"] for r in records]
        res = score_two_way(self.model, self.clip, inputs, [int(r["target"]) for r in records], self.names,
                            self.cfg.seed, batch_size=self.cfg.batch_size, keys=keys)
        out = Scored([], {"choice": [], "correct": []})
        for key, item in zip(keys, res["items"], strict=True):
            chosen = None if item["choice"] is None else self.names.index(item["options"][item["choice"]])
            ok = item["choice"] == item["correct"]
            out.rows.append({"key": key, "target": item["target"], "target_ids": [item["target"]],
                             "top5": [] if chosen is None else [chosen], "scores": [], "correct1": ok, "correct5": ok})
            out.extra["choice"].append(item["choice"])
            out.extra["correct"].append(item["correct"])
        return out

    def metrics(self, rows, extra):
        from ...labels.twoway import two_way_accuracy

        acc = two_way_accuracy(extra["choice"], extra["correct"])
        parsed = acc["n"] - acc["n_unparseable"]
        return [accuracy_row("top1", [p["correct1"] for p in rows]),
                {"name": "two_way_parsed", "value": acc["accuracy_parsed"], "lo": None, "hi": None},
                {"name": "unparseable", "value": 1 - parsed / acc["n"] if acc["n"] else None, "lo": None, "hi": None}]
