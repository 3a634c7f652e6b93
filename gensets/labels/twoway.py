"""ImageNet-D's two-way protocol for VLMs: the true class against CLIP's top wrong class.

For each image with true class T, a zero-shot CLIP classifier over the dataset's class names gives its
highest-scoring class W whose name differs from T's (CLIP's top-1 when it is wrong, else its top-2). The VLM
is asked which of the two is in the image. Two variants:

- ``official`` (the default; what produced the paper's numbers, from the authors' evaluation code,
  chenshuang-zhang/imagenet_d: ``LLaVA/llava/serve/eval_imagenet_d.py`` and ``LLaVA/compute_accuracy.py``):
  class names normalised as their CLIP evaluation does (``official_name``: "_" and "-" -> " ", "/" -> " or ",
  lower case), CLIP prompted with "A photo of a {}", the question "What is the main object in this image?
  Choose from the following list: {T}, {W}." with the true class always first, and the answer matched by
  substring to each name or one of its synonyms (the authors' map, packaged in
  gensets/data/imagenet_d/two_way_synonyms.json); an answer naming both or neither is left out of the
  accuracy (TRUE / (TRUE + FALSE)), except for two pairs whose names nest ("pen" in "can opener", "plate" in
  "drying rack for plates"), which the authors decide in a fixed order.
- ``shuffled`` (gensets' own reading, a named option: protocol ``two-way-shuffled``): the options in a seeded
  random order, lettered, the answer parsed to a letter or a whole-word name; unparseable answers count wrong
  in ``accuracy`` and are dropped in ``accuracy_parsed``.

How the VLM answers (:data:`DECODING`, ``gensets eval --decoding``): ``authors`` (the default) is
eval_imagenet_d.py's: sampling at temperature 0.2 (its ``--temperature`` default; the rest of sampling as
``generate`` defaults it, top-k 50), ``max_new_tokens`` 512, each image one ``generate`` call seeded by its key
(``derive_seed(seed, key)``: the answers do not depend on the batch), and for LLaVA models the LLaVA-1.5
conversation the authors' ``conv_templates["llava_v1"]`` builds (the system sentence, ``USER: <image>\n{question}
ASSISTANT:``) instead of the processor's chat template. ``greedy`` (a named variant, gensets' earlier decoding):
greedy, 10 new tokens, the processor's chat template, one batch.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gensets.errors import GensetsError
from gensets.labels.names import readable
from gensets.records import derive_seed
from gensets.sources.packaged import imagenet_d_two_way_synonyms

if TYPE_CHECKING:
    from PIL import Image

# eval_imagenet_d.py: --temperature 0.2, --max-new-tokens 512, conv_mode llava_v1 for LLaVA-1.5 ("v1" in its name)
DECODING = {
    "authors": {"temperature": 0.2, "max_new_tokens": 512, "prompt": "llava_v1"},
    "greedy": {"temperature": None, "max_new_tokens": 10, "prompt": "chat"},
}
QUESTION = "Which of these is in the image? Answer with one option only: (A) {} (B) {}"
LETTERS = ("a", "b")
# "(b)", a bare letter as the whole answer, "B." / "B:" first, "the answer/option/choice (is) B" (not
# "the answer is a dog": the article "a")
_LETTER = re.compile(
    r"\(\s*([ab])\s*\)|^\W*([ab])\W*$|^\s*([ab])\s*[.:)]|\b(?:answer|option|choice)\s*(?:is|:)?\s*([ab])(?!\s*[a-z0-9])"
)


OFFICIAL_QUESTION = "What is the main object in this image? Choose from the following list: {}, {}."
OFFICIAL_TEMPLATE = "A photo of a {}"  # the authors' CLIP prompt (no full stop)
IMAGENET_D_BUILDER = "imagenet-d"  # the builder name in an ImageNet-D sample's provenance
# option pairs whose names nest: the authors test the longer name's side first
_NESTED = {("pen", "can opener"), ("plate", "drying rack for plates")}


def official_name(name: str) -> str:
    """A class name as the authors' CLIP evaluation writes it: "coffee/french press" -> "coffee or french
    press", "t-shirt" -> "t shirt", "binder_(closed)" -> "binder (closed)"."""
    return name.replace("_", " ").replace("-", " ").replace("/", " or ").lower()


def official_question(true_name: str, wrong_name: str) -> tuple[str, list[str]]:
    """The authors' question and its two options (normalised names), the true class first."""
    options = [official_name(true_name), official_name(wrong_name)]
    return OFFICIAL_QUESTION.format(*options), options


def _names(name: str, answer: str) -> bool:
    return name in answer or any(w in answer for w in imagenet_d_two_way_synonyms().get(name, ()))


FLAGS = ("TRUE", "FALSE", "DOUBLE", "TODO")  # the authors' flags of an answer (compute_accuracy.py)


def official_flag(answer: str, options: Sequence[str]) -> str:
    """The authors' flag of an answer (chenshuang-zhang/imagenet_d, ``LLaVA/compute_accuracy.py``): ``TRUE`` (it
    names the true class, the first option), ``FALSE`` (the wrong one), ``DOUBLE`` (both) or ``TODO`` (neither). A
    name counts when it, or one of its synonyms, is a substring of the lower-cased answer (no word boundaries, as
    the authors' code); for the two pairs whose names nest ("pen" in "can opener", "plate" in "drying rack for
    plates") the longer name's side is tested first and an answer is never DOUBLE. Top-1 counts TRUE / (TRUE +
    FALSE): DOUBLE and TODO are left out."""
    true, wrong = options
    text = answer.lower()
    t, w = _names(true, text), _names(wrong, text)
    if (true, wrong) in _NESTED:  # the wrong option's name contains the true one's
        return "FALSE" if w else "TRUE" if t else "TODO"
    if (wrong, true) in _NESTED:
        return "TRUE" if t else "FALSE" if w else "TODO"
    if t and w:
        return "DOUBLE"
    return "TRUE" if t else "FALSE" if w else "TODO"


def official_choice(answer: str, options: Sequence[str]) -> int | None:
    """The authors' answer matching as an option index: 0 (the first option, the true class: TRUE), 1 (the wrong
    one: FALSE), or None when the answer names both or neither (DOUBLE, TODO; :func:`official_flag`)."""
    return {"TRUE": 0, "FALSE": 1}.get(official_flag(answer, options))


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


def picked(answer: str, options: Sequence[str]) -> set[int]:
    """The indices of the options an answer names, by letter ("B", "(b)", "the answer is B") or by name
    (case-insensitive, whole words)."""
    text = " ".join(answer.lower().split())
    out = {LETTERS.index(next(g for g in m.groups() if g)) for m in _LETTER.finditer(text)}
    spans = [_name_spans(text, o) for o in options]
    for i, own in enumerate(spans):  # "sports car" names one option, not also an option "car"
        others = [s for j, other in enumerate(spans) if j != i for s in other]
        if any(not any(a <= s and e <= b and (a, b) != (s, e) for a, b in others) for s, e in own):
            out.add(i)
    return out


def parse_choice(answer: str, options: Sequence[str]) -> int | None:
    """The index of the option an answer picks (:func:`picked`); None when it picks both, contradicts itself, or
    picks neither."""
    chosen = picked(answer, options)
    return chosen.pop() if len(chosen) == 1 else None


def flag(answer: str, options: Sequence[str], correct: int, variant: str = "official") -> str:
    """An answer's flag (:data:`FLAGS`) under a two-way variant: ``official`` the authors' (:func:`official_flag`);
    ``shuffled`` TRUE / FALSE for the option it picks (:func:`picked`), DOUBLE for both, TODO for neither."""
    if variant == "official":
        return official_flag(answer, options)
    chosen = picked(answer, options)
    return "DOUBLE" if len(chosen) > 1 else "TODO" if not chosen else "TRUE" if chosen == {correct} else "FALSE"


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


def two_way_outcomes(predictions: Iterable[dict], variant: str = "official") -> list[bool]:
    """The outcomes a two-way top-1 averages, from prediction rows (``correct1``; ``top5``: the chosen class, empty
    when the answer named both options or neither). ``official``: the authors' TRUE / (TRUE + FALSE): such an
    answer is left out (chenshuang-zhang/imagenet_d, ``LLaVA/compute_accuracy.py``: DOUBLE and TODO rows count in
    neither ``true_num`` nor ``false_num``); ``shuffled``: every answer, an unparseable one wrong. The eval run's
    ``top1`` (protocol two-way) and ``gensets report imagenet-d`` both call this."""
    if variant not in ("official", "shuffled"):
        raise GensetsError(f"two-way protocol: unknown variant {variant!r} (official or shuffled)")
    return [bool(p["correct1"]) for p in predictions if variant == "shuffled" or len(p["top5"] or ()) > 0]


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
    keys: Sequence[str] | None = None,
    variant: str = "official",
    wrong: Sequence[int] | None = None,
    decoding: str = "authors",
) -> dict:
    """Run the two-way protocol (``variant``: ``official`` or ``shuffled``, see the module): `vlm` is a
    gensets.models.vlm.VQAModel, `clip_classifier` a zero-shot classifier whose label_names are
    `class_names` (in order). ``wrong``: each image's wrong class given (the released ImageNet-D's questions
    CSV); then no CLIP model runs (``clip_classifier`` may be None). Returns two_way_accuracy's dict plus
    `items`: per image the target, wrong class, question, options, answer, choice, correct index, the chosen
    class (None: unparseable) and the answer's flag (:func:`flag`). ``decoding``: how the VLM answers (:data:`DECODING`)."""
    if decoding not in DECODING:
        raise GensetsError(f"two-way protocol: unknown decoding {decoding!r} ({', '.join(DECODING)})")
    how = DECODING[decoding]
    if variant not in ("official", "shuffled"):
        raise GensetsError(f"two-way protocol: unknown variant {variant!r} (official or shuffled)")
    if len(images) != len(targets):
        raise GensetsError(f"two-way protocol: {len(images)} images but {len(targets)} targets")
    if wrong is not None:
        if len(wrong) != len(targets):
            raise GensetsError(f"two-way protocol: {len(targets)} images but {len(wrong)} wrong options")
        for t, w in zip(targets, wrong, strict=True):
            if not 0 <= int(w) < len(class_names) or int(w) == int(t):
                raise GensetsError(f"two-way protocol: wrong option {w} of an image of class {t} is not another "
                                   f"class of the {len(class_names)}")
    elif len(clip_classifier.label_names) != len(class_names):
        raise GensetsError(
            f"two-way protocol: the CLIP classifier has {len(clip_classifier.label_names)} classes,"
            f" the dataset {len(class_names)}"
        )
    items = []
    for start in range(0, len(images), batch_size):
        batch = list(images[start : start + batch_size])
        if wrong is None:
            logits = clip_classifier.predict(batch).float().cpu().tolist()
            given = [top_wrong(scores, int(t), class_names)
                     for scores, t in zip(logits, targets[start : start + batch_size], strict=True)]
        else:
            given = [int(w) for w in wrong[start : start + batch_size]]
        questions, rows = [], []
        for k, (w, t) in enumerate(zip(given, targets[start : start + batch_size], strict=True)):
            # the option order is seeded per image: by its key when given, else by its position
            per_image = keys[start + k] if keys is not None else start + k
            if variant == "official":
                question, options = official_question(class_names[t], class_names[w])
                classes = [int(t), w]
            else:
                question, options = build_question(class_names[t], class_names[w], f"{seed}:{per_image}")
                classes = [int(t) if o == class_names[t] else w for o in options]
            questions.append(question)
            rows.append({"target": int(t), "wrong": w, "question": question, "options": options,
                         "classes": classes, "correct": classes.index(int(t))})
        seeds = None
        if how["temperature"] is not None:
            seeds = [derive_seed(seed, keys[start + k] if keys is not None else start + k) for k in range(len(batch))]
        answers = vlm.answer(batch, questions, max_new_tokens=how["max_new_tokens"], temperature=how["temperature"],
                             seeds=seeds, prompt=how["prompt"])
        parse = official_choice if variant == "official" else parse_choice
        for row, answer in zip(rows, answers, strict=True):
            choice = parse(answer, row["options"])
            row.update(answer=answer, choice=choice, chosen=None if choice is None else row["classes"][choice],
                       flag=flag(answer, row["options"], row["correct"], variant))
            items.append(row)
    result = two_way_accuracy([r["choice"] for r in items], [r["correct"] for r in items])
    return {**result, "items": items}
