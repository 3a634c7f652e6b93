"""GenBench's prompt strategies, one class each, registered in the paper's table order (ST, DT, CE, RD, NP, RA).

A strategy says what its prompts for a class are made of (``pool``: all of it goes into the unit's id), how
shot ``i`` of a unit gets its prompt, negative prompt and init image (``shot``, seeded by ``draw``), what the
build must load for it (``needs``: ``expansion`` for CE's text model, ``references`` for RA's images), and
its line on the card (``details``). A new strategy is one class here (or in any module) with
``@STRATEGIES.register("XX")``; the config then accepts ``strategies: [XX]``.

Every strategy draws from a pool of prompts per class (ST, RD, NP, RA: one template; DT: the dataset's
templates; CE: N expansions, each sampled under its own seed). Shot i of a class takes entry
``order_r[i mod n]`` of the pool, where ``order_r`` is a shuffle of the pool drawn with the seed of round
``r = i div n``: K <= n gives a seeded subset without repeats, and when K exceeds the pool the prompts are
drawn again, round after round, each round's seed recorded in the sample (``prompting.draw_seed``).
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from ...config import to_dict
from ...errors import GensetsError
from ...records import derive_seed
from ...registry import STRATEGIES
from ...sources.classes import plain_name, source_name

RESTRICTIVE = "((sharp focus)), ((highly detailed)), ((hires))"
QUALITY_NEGATIVES = ("((disfigured)), ((bad art)), ((deformed)), ((poorly drawn)), ((extra limbs)), ((close up)), "
                     "((b&w)), weird colors, blurry, lowres, worst quality, low quality, jpeg artifacts, "
                     "signature, watermark, text")


def fill(template: str, name: str) -> str:
    """A template with the class name filled in (``{}`` or ``{c}``)."""
    return template.format(plain_name(name), c=plain_name(name))


def draw(n: int, i: int, *parts) -> tuple[int, int]:
    """Shot ``i``'s entry of a pool of ``n``: ``(index, seed of its round)``. The pool is shuffled once per
    round of ``n`` shots, each round with its own seed, so every entry is used once per round."""
    r, j = divmod(i, n)
    seed = derive_seed(*parts, "round", r)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[j], seed


class Strategy:
    """The simple-template behaviour every strategy starts from; subclasses change what they need to."""

    name: ClassVar[str] = ""  # set by @STRATEGIES.register
    description: ClassVar[str] = ""  # the card's "what" column
    needs: ClassVar[tuple[str, ...]] = ()  # what the build loads for it: "expansion", "references"

    def pool(self, cfg, name: str, files: dict | None = None) -> dict[str, Any]:
        """What this strategy's prompts for class ``name`` are made of (``files``: RA's reference files)."""
        return {"templates": [cfg.simple_template]}

    def shot(self, p: dict, i: int, base: tuple, row: dict, references: list | None = None) -> None:
        """Shot ``i`` of the unit ``p``: its prompt and how it was made, into ``row``. ``base`` seeds the
        draws: (seed, dataset, strategy, class)."""
        j, draw_seed = draw(len(p["templates"]), i, *base)
        template = p["templates"][j]
        row["prompt"] = fill(template, p["class"])
        row["prompting"].update(template=template, draw_seed=draw_seed)

    def finish(self, rows: list[dict], expand=None) -> None:
        """After every shot of a unit (CE expands all of its inputs in one call)."""

    def details(self, cfg) -> str | None:
        """The card's line on how this strategy's prompts were made."""
        return None


@STRATEGIES.register("ST")
class SimpleTemplate(Strategy):
    description = "simple template"

    def details(self, cfg) -> str:
        return f"- ST: `{cfg.simple_template}`."


@STRATEGIES.register("DT")
class DefinedTemplates(Strategy):
    description = "the dataset's defined (CLIP) templates"

    def pool(self, cfg, name, files=None):
        return {"templates": list(cfg.templates)}

    def details(self, cfg) -> str:
        return f"- DT: the {len(cfg.templates)} templates of the dataset, e.g. `{cfg.templates[0]}`."


@STRATEGIES.register("CE")
class CategoryEnhancement(Strategy):
    description = "category enhancement: a seq2seq model expands the class name into a sentence"
    needs = ("expansion",)

    def pool(self, cfg, name, files=None):
        return {"templates": [], "expansion": to_dict(cfg.expansion)}

    def shot(self, p, i, base, row, references=None):
        e, name = p["expansion"], p["class"]
        j, row["prompting"]["draw_seed"] = draw(e["prompts"], i, *base)
        row["prompting"].update(expansion_model=e["model"], expansion_input=fill(e["input"], name),
                                expansion_seed=derive_seed(p["seed"], p["dataset"], "CE", name, j))

    def finish(self, rows, expand=None):
        if expand is None:
            raise GensetsError("CE prompts need the expansion model (expand=)")
        texts = expand([r["prompting"]["expansion_input"] for r in rows],
                       [r["prompting"]["expansion_seed"] for r in rows])
        for r, text in zip(rows, texts, strict=True):
            r["prompt"] = text

    def details(self, cfg) -> str:
        e = cfg.expansion
        return (f"- CE: `{e.model}` expands `{e.input}` into {e.prompts} sentences per class, each "
                f"sampled under its own seed (top-p {e.top_p}, temperature {e.temperature}, at most "
                f"{e.max_new_tokens} new tokens); the sentence is the prompt.")


@STRATEGIES.register("RD")
class RestrictiveDescription(Strategy):
    description = "restrictive description appended to the simple template"

    def pool(self, cfg, name, files=None):
        return {"templates": [f"{cfg.simple_template}, {cfg.restrictive}"]}

    def details(self, cfg) -> str:
        return f"- RD: `{cfg.simple_template}, {cfg.restrictive}`."


@STRATEGIES.register("NP")
class NegativePrompts(Strategy):
    description = "simple template; negative prompt of other class names of the dataset plus quality negatives"

    def pool(self, cfg, name, files=None):
        others = [c for c in dict.fromkeys(map(plain_name, cfg.class_names)) if c != plain_name(name)]
        return {**super().pool(cfg, name), "negatives": others, "negative_classes": cfg.negative.classes,
                "quality": cfg.negative.quality}

    def shot(self, p, i, base, row, references=None):
        super().shot(p, i, base, row)
        rng = random.Random(derive_seed(*base, i, "negatives"))
        others = rng.sample(p["negatives"], min(p["negative_classes"], len(p["negatives"])))
        row["negative_prompt"] = ", ".join([*others, p["quality"]] if p["quality"] else others)

    def details(self, cfg) -> str:
        return (f"- NP: negative prompt = {cfg.negative.classes} other class names of the dataset "
                f"(a seeded sample per image) + `{cfg.negative.quality}`.")


@STRATEGIES.register("RA")
class RetrievalAugmented(Strategy):
    description = "retrieval augmented: image-to-image from a real reference image of the class"
    needs = ("references",)

    def pool(self, cfg, name, files=None):
        ref = {**to_dict(cfg.reference), "source": source_name(cfg.reference.source)}
        return {**super().pool(cfg, name), "reference": ref if files is None else {**ref, "files": files[name]}}

    def shot(self, p, i, base, row, references=None):
        super().shot(p, i, base, row)
        if not references:
            raise GensetsError(f"RA: no reference images for class {p['class']!r}")
        row["reference"], row["prompting"]["draw_seed"] = draw(len(references), i, *base, "references")
        row["prompting"]["strength"] = p["reference"]["strength"]

    def details(self, cfg) -> str:
        r = cfg.reference
        return (f"- RA: image-to-image (strength {r.strength}) from the first {r.per_class} reference "
                f"images of each class in `{r.source}`; each image records its init image and sha256.")
