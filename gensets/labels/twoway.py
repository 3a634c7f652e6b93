"""ImageNet-D's two-way protocol for VLMs: the true class against CLIP's top wrong class.

For each image with true class T, a zero-shot CLIP classifier over the dataset's class names gives its
highest-scoring class W whose name differs from T's. The VLM is asked which of the two is in the image,
the options in a seeded random order, and its answer is parsed to option A/B or to an option's name.
An answer that names both options (or contradicts itself) or neither is unparseable.

Two accuracies: `accuracy` counts unparseable answers as wrong; `accuracy_parsed` (the paper's variant)
drops them from the denominator.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gensets.errors import GensetsError
from gensets.labels.names import readable

if TYPE_CHECKING:
    from PIL import Image

QUESTION = "Which of these is in the image? Answer with one option only: (A) {} (B) {}"
LETTERS = ("a", "b")
# "(b)", a bare letter as the whole answer, "B." / "B:" first, "the answer/option/choice (is) B" (not
# "the answer is a dog": the article "a")
_LETTER = re.compile(
    r"\(\s*([ab])\s*\)|^\W*([ab])\W*$|^\s*([ab])\s*[.:)]|\b(?:answer|option|choice)\s*(?:is|:)?\s*([ab])(?!\s*[a-z0-9])"
)


def build_question(true_name: str, wrong_name: str, seed: int | str) -> tuple[str, list[str]]:
    """The question and its two options (the names as given) in a random order fixed by `seed`."""
    options = [true_name, wrong_name]
    if random.Random(seed).random() < 0.5:
        options.reverse()
    return QUESTION.format(*(readable(o) for o in options)), options


def _name_spans(answer: str, name: str) -> list[tuple[int, int]]:
    words = r"\s+".join(re.escape(w) for w in readable(name).lower().split())
    pattern = rf"(?<!\w){words}(?:e?s)?(?!\w)"  # whole words, plural allowed
    return [m.span() for m in re.finditer(pattern, answer)] if words else []


def parse_choice(answer: str, options: Sequence[str]) -> int | None:
    """The index of the option an answer picks, by letter ("B", "(b)", "the answer is B") or by name
    (case-insensitive, whole words); None when it picks both, contradicts itself, or picks neither."""
    text = " ".join(answer.lower().split())
    picked = {LETTERS.index(next(g for g in m.groups() if g)) for m in _LETTER.finditer(text)}
    spans = [_name_spans(text, o) for o in options]
    for i, own in enumerate(spans):  # "sports car" names one option, not also an option "car"
        others = [s for j, other in enumerate(spans) if j != i for s in other]
        if any(not any(a <= s and e <= b and (a, b) != (s, e) for a, b in others) for s, e in own):
            picked.add(i)
    return picked.pop() if len(picked) == 1 else None


def two_way_accuracy(choices: Sequence[int | None], correct_index: Sequence[int]) -> dict:
    """Accuracy with unparseable answers (None) counted wrong, and with them dropped (accuracy_parsed)."""
    if len(choices) != len(correct_index):
        raise ValueError(f"{len(choices)} choices but {len(correct_index)} correct indices")
    n = len(choices)
    n_unparseable = sum(c is None for c in choices)
    n_correct = sum(c is not None and c == t for c, t in zip(choices, correct_index, strict=True))
    n_parsed = n - n_unparseable
    return {
        "accuracy": n_correct / n if n else None,
        "accuracy_parsed": n_correct / n_parsed if n_parsed else None,
        "n": n,
        "n_correct": n_correct,
        "n_unparseable": n_unparseable,
    }


def top_wrong(scores: Sequence[float], target: int, class_names: Sequence[str]) -> int:
    """The highest-scoring class whose (readable, case-folded) name differs from the target's."""
    true = readable(class_names[target]).lower()
    order = sorted(range(len(scores)), key=lambda j: -scores[j])
    for j in order:
        if readable(class_names[j]).lower() != true:
            return j
    raise GensetsError(f"two-way protocol: no class other than {class_names[target]!r} to offer")


def score_two_way(
    vlm,
    clip_classifier,
    images: Sequence[Image.Image],
    targets: Sequence[int],
    class_names: Sequence[str],
    seed: int = 0,
    *,
    batch_size: int = 16,
    max_new_tokens: int = 10,
    keys: Sequence[str] | None = None,
) -> dict:
    """Run the two-way protocol: `vlm` is a gensets.models.vlm.VQAModel, `clip_classifier` a zero-shot
    classifier whose label_names are `class_names` (in order). Returns two_way_accuracy's dict plus
    `items`: per image the target, wrong class, question, options, answer, choice and correct index."""
    if len(images) != len(targets):
        raise GensetsError(f"two-way protocol: {len(images)} images but {len(targets)} targets")
    if len(clip_classifier.label_names) != len(class_names):
        raise GensetsError(
            f"two-way protocol: the CLIP classifier has {len(clip_classifier.label_names)} classes,"
            f" the dataset {len(class_names)}"
        )
    items = []
    for start in range(0, len(images), batch_size):
        batch = list(images[start : start + batch_size])
        logits = clip_classifier.predict(batch).float().cpu().tolist()
        questions, rows = [], []
        for k, (scores, t) in enumerate(zip(logits, targets[start : start + batch_size], strict=True)):
            w = top_wrong(scores, int(t), class_names)
            # the option order is seeded per image: by its key when given, else by its position
            per_image = keys[start + k] if keys is not None else start + k
            question, options = build_question(class_names[t], class_names[w], f"{seed}:{per_image}")
            questions.append(question)
            rows.append(
                {
                    "target": int(t),
                    "wrong": w,
                    "question": question,
                    "options": options,
                    "correct": options.index(class_names[t]),
                }
            )
        answers = vlm.answer(batch, questions, max_new_tokens=max_new_tokens)
        for row, answer in zip(rows, answers, strict=True):
            row.update(answer=answer, choice=parse_choice(answer, row["options"]))
            items.append(row)
    result = two_way_accuracy([r["choice"] for r in items], [r["correct"] for r in items])
    return {**result, "items": items}
