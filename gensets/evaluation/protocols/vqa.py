"""``vqa`` (Borji 2022): binary visual question answering. Every question of every image (``json.questions``),
answers normalised to yes / no; accuracy overall, on yes and on no questions. One prediction row per question,
keyed ``<image key>/q<i>``, so per-image accuracy is a GROUP BY away; each answer's raw text is stored with its
question and flag (``answers``: TRUE right, FALSE wrong, TODO neither yes nor no). A LLaVA model's dtype and image
aspect (:attr:`gensets.models.vlm.VQAModel.variant`: the authors' fp16 and pad-square on CUDA) are named in the run
row's protocol: ``vqa (fp16, pad-square)``."""

from __future__ import annotations

import math

from ...errors import GensetsError
from ...registry import PROTOCOLS
from .base import Scored, VQAProtocol, accuracy_row


@PROTOCOLS.register("vqa")
class VQA(VQAProtocol):
    row_per_image = False  # a row per question

    @property
    def run_protocol(self) -> str:
        variant = getattr(self.model, "variant", "")  # a LLaVA model's dtype and image aspect
        return f"{self.name} ({variant})" if variant else self.name

    @property
    def label_space(self) -> str:
        return "yes/no"

    @property
    def class_names(self) -> list[str]:
        return ["no", "yes"]

    def score(self, inputs, records):
        from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the protocols)

        pairs = [(image, r, i, q) for image, r in zip(inputs, records, strict=True)
                 for i, q in enumerate(r["meta"].get("questions") or [])]
        answers = self.model.answer([p[0] for p in pairs], [q["question"] for *_, q in pairs])
        out = Scored([], {"said": [], "truth": [], "question": [], "answer": []})
        for (_, r, i, q), a in zip(pairs, answers, strict=True):
            said, truth = M.normalize_yes_no(a), q["answer"]
            out.rows.append({"key": f"{r['key']}/q{i}", "target": int(truth == "yes"),
                             "target_ids": [int(truth == "yes")], "top5": [] if said is None else [int(said == "yes")],
                             "scores": [], "correct1": said == truth, "correct5": said == truth})
            out.extra["said"].append(said or "")
            out.extra["truth"].append(truth)
            out.extra["question"].append(q["question"])
            out.extra["answer"].append(a)
        return out

    def answers(self, rows, extra):
        """Each answer's question, raw text and flag: TRUE (right), FALSE (wrong), TODO (neither yes nor no)."""
        return [{"key": r["key"], "question": q, "answer": a,
                 "flag": "TODO" if not said else "TRUE" if r["correct1"] else "FALSE"}
                for r, q, a, said in zip(rows, extra["question"], extra["answer"], extra["said"], strict=True)]

    def metrics(self, rows, extra):
        from ... import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the protocols)

        if not rows:
            raise GensetsError(f"{self.split.config}/{self.split.split}: no questions (json.questions) to score")
        acc = M.vqa_binary_accuracy(extra["said"], extra["truth"])
        # yes/no accuracy is undefined (NaN) without yes/no questions: stored and printed as null
        return [accuracy_row("top1", [p["correct1"] for p in rows]),
                *({"name": f"vqa_{k}", "value": None if math.isnan(acc[k]) else acc[k], "lo": None, "hi": None}
                  for k in ("accuracy", "yes_accuracy", "no_accuracy", "n_yes", "n_no"))]
