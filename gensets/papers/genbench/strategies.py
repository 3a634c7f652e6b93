"""GenBench's prompt strategies as the authors' code runs them, one class each, registered in the paper's table
order (ST, DT, CE, RD, NP, RA).

The authors' code: github.com/Luodian/GenBench, ``generation_utils.py`` (``sampling_images``, ``process_classnames``,
``textual_inversion_prepare_images``), ``pipeline.py`` (its arguments and defaults), ``tools/prep_retrieval.py``.
Where it and the paper (arXiv 2307.13697) disagree, the code is the default and the other reading a named option
(``variant: gensets-v1`` in the config: what gensets did before, see config.VARIANTS):

- ST: the paper's section 2.3 writes "a photo of {}"; the code (``language_enc == "simple_template"``:
  ``template_list = ["{}"]``) and the appendix's Table 6 prompt with the bare class name.
- DT: the dataset's CLIP templates (``template_map[dataset]``, vision_benchmark/datasets/prompts.py).
- CE: ``process_classnames``: ``keytotext.pipeline("mrm8488/t5-base-finetuned-common_gen")`` called
  ``num + 50`` times on ``[class name]`` with ``do_sample=True`` (transformers' default sampling otherwise:
  top-k 50, top-p 1, temperature 1, at most 20 tokens with the decoder's start), ``list(set(...))``, then
  ``random.sample(..., num)``; keytotext's NMPipeline (gagan3012/keytotext, keytotext/models.py) feeds the
  model ``"<name> </s>"``, the name as ``str([name])`` with "," -> " " and "'", "[", "]" removed, cut at each "."
  (each piece expanded on its own, the texts concatenated): :func:`keytotext_inputs`.
- RD: ``template + ",highly detailed,hires,8k,sharp focus"`` (``sharp_focus``), appended to the templates of
  whatever prompt source is used; Table 6 builds RD on DT. The paper's Table 6 shows another suffix,
  ``", ((sharp focus)), ((highly detailed)), ((hires))"`` (and Sec. 2.3 / the appendix speak of "((airplane))"
  parentheses): the named form ``restrictive: table-6`` (:data:`RESTRICTIVE_FORMS`; also gensets-v1's). The card
  line and every RD image (``json.prompting.restrictive``) name the form: ``authors``, ``table-6`` or ``custom``.
- NP: ``", ".join(every other class name of the dataset) + ", ((disfigured)), ..., censorship,"``
  (``neg_prompts``, on DT in Table 6). A ``random.sample(names, 10)`` just above it is assigned to a variable that
  the next line overwrites: dead code, so the code uses every other class (the default, ``negative.classes: all``).
  The paper (appendix Sec. 9, "Negative Prompts") uses, "for datasets with a large number of categories", "a subset
  of categories (such as randomly selecting 5 categories)", and Table 6's NP row shows 5 other names even for
  CIFAR-10: the named option ``negative: {classes: 5}`` (one seeded subset per class, ``negative.sample: class``,
  the default; ``sample: image`` draws one per image, as gensets-v1 did). A sampled image records its draw's seed
  (``json.prompting.negative_seed``); the card says which reading.
- RA: the paper's RA starts from retrieved images (LAION-400M, via REACT); the code keeps the 20 best
  retrieved images per class (``tools/prep_retrieval.py``: ``--ref_image=retrieval --ref_shot=20``, output
  ``SD_i2i_ret20``; ``textual_inversion_prepare_images`` sorts them by ``avg_dist`` and saves them at 224x224) for
  ``sampling_images_i2i``, image-to-image, which ``pipeline.py`` imports but the published code does not contain:
  its prompt and strength are unknown. gensets prompts with ST and uses diffusers' default strength, 0.8.
- How prompts are drawn: ``sampling_images`` makes ``total_num_temps`` (16) prompts per class, the template list
  repeated ``16 // n + 1`` times, shuffled, cut to 16 (CE: the 16 sampled sentences), and generates
  ``sample_num`` (4) images per prompt: 64 images per class (``sampling: authors``, :func:`authors_slots`).
  The template list is shuffled ONCE, before the loop over the classes (``random.shuffle(template_list)`` then
  ``for category_name in concept_list``; ``textual_inversion_sampling`` likewise): every class gets the same
  prompt order (``shuffle: once``, the default: the seed names the dataset and strategy, not the class).
  gensets' earlier reading, a seeded shuffle per class, is the named option ``shuffle: per-class``. (CE's sentences
  are sampled per class in the code too: ``sample_sentences``; ``shuffle`` does not apply to them.)
  gensets' other reading (``sampling: rounds``): every shot draws its own prompt, the pool shuffled once per round.
  (As published, ``sampling_images`` raises NameError whatever the mode: ``sampled_dict`` is only set for CE,
  ``template_list`` only for the others; gensets follows what each branch evidently means.)

Two kinds of strategy. A *prompt source* says what a prompt is made of (ST, DT, CE); a *modifier* changes the
images of a source (RD appends the restrictive description, NP sets the negative prompt, RA starts from a reference
image). A config's strategy is a registered name or several joined by "+": ``NP+RD`` is Table 2's "w/ NP, RD"
(DT with both), ``CE+RD``, ``ST+NP``; at most one source and each modifier once (:func:`parts_of`). A modifier
named without a source builds on the config's ``builds_on`` (the authors: DT); RA on ST.

A new strategy is one class here (or in any module) with ``@STRATEGIES.register("XX")``: ``pool`` (what its prompts
for a class are made of: all of it goes into the unit's id), ``shot`` (shot ``i``'s prompt, negative prompt, init
image), ``finish`` (after every shot of a unit), ``needs`` (what the build loads: ``expansion``, ``references``),
``details`` (its line on the card); ``kind = "modifier"`` for one that changes another's images.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from ...config import to_dict
from ...errors import GensetsError
from ...records import derive_seed
from ...registry import STRATEGIES
from ...sources.classes import plain_name, source_name
from .pool import pool_identity

# the authors' strings, generation_utils.py, sampling_images (RD: appended as is; NP: after ", ".join(other names))
RESTRICTIVE = ",highly detailed,hires,8k,sharp focus"
QUALITY_NEGATIVES = ("((disfigured)), ((bad art)), ((deformed)), ((poorly drawn)), ((extra limbs)), ((close up)), "
                     "((b&w)), weird colors, blurry, lowres, bad anatomy, bad hands, text, error, missing fingers, "
                     "extra digit, fewer digits, cropped, worst quality, low quality, normal quality, jpeg artefacts, "
                     "signature, watermark, username, blurry, out of focus, censorship,")
# the paper's Table 6 (RD row): the suffix its example prompts show; gensets-v1 used it too
TABLE6_RESTRICTIVE = ", ((sharp focus)), ((highly detailed)), ((hires))"
# RD's named forms: ``restrictive: authors | table-6`` in a config is replaced by the text (any other text: custom)
RESTRICTIVE_FORMS = {"authors": RESTRICTIVE, "table-6": TABLE6_RESTRICTIVE}
# gensets' readings before issue #12 (variant gensets-v1)
V1_RESTRICTIVE = TABLE6_RESTRICTIVE
V1_QUALITY_NEGATIVES = ("((disfigured)), ((bad art)), ((deformed)), ((poorly drawn)), ((extra limbs)), ((close up)), "
                        "((b&w)), weird colors, blurry, lowres, worst quality, low quality, jpeg artifacts, "
                        "signature, watermark, text")
KEYTOTEXT = "keytotext"  # expansion.input: the class name as keytotext's NMPipeline gives it to the model
# TI's training loss, as the card and each class's ti/<class>.json name it (see gensets.models.textual_inversion)
TI_VARIANTS = {"clip": "authors' trainer: noise MSE + lambda x CLIP text-similarity loss (--clip_guidance text_sim)",
               "mse": "plain textual inversion: noise MSE only (no CLIP loss)"}


def fill(template: str, name: str) -> str:
    """A template with the class name filled in (``{}`` or ``{c}``)."""
    return template.format(plain_name(name), c=plain_name(name))


def keytotext_inputs(name: str) -> list[str]:
    """What keytotext's NMPipeline feeds the model for ``nlp([name])`` (keytotext/models.py,
    ``_prepare_inputs_for_nm`` and ``__call__``): ``str([name])`` with "," -> " ", "'", "[" and "]" removed, cut at
    every ".", each piece followed by " </s>". ``'airplane'`` -> ``['airplane </s>']``."""
    text = str([plain_name(name)]).replace(",", " ").replace("'", "").replace("[", "").replace("]", "")
    return [f"{piece} </s>" for piece in text.split(".")]


def draw(n: int, i: int, *parts) -> tuple[int, int]:
    """``sampling: rounds``: shot ``i``'s entry of a pool of ``n`` and the seed of its round. The pool is shuffled
    once per round of ``n`` shots, each round with its own seed, so every entry is used once per round."""
    r, j = divmod(i, n)
    seed = derive_seed(*parts, "round", r)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[j], seed


def authors_slots(n: int, prompts: int, seed: int) -> list[int]:
    """``sampling: authors``: a class's ``prompts`` prompts as indices into a pool of ``n``: the pool repeated
    ``prompts // n + 1`` times, shuffled, the first ``prompts`` (sampling_images: ``expand_ratio``,
    ``random.shuffle``, ``[:total_num_temps]``)."""
    order = list(range(n)) * (prompts // n + 1)
    random.Random(seed).shuffle(order)
    return order[:prompts]


def restrictive_form(text: str) -> str:
    """The name of an RD suffix: ``authors`` (the code's), ``table-6`` (the paper's Table 6) or ``custom``."""
    return next((k for k, v in RESTRICTIVE_FORMS.items() if v == text), "custom")


def pick(p: dict, n: int, i: int, *parts) -> tuple[int, int]:
    """Shot ``i``'s entry of a pool of ``n`` and the seed of the draw, as the unit's ``sampling`` says (authors:
    shot i takes prompt ``i // images_per_prompt`` of the class's list). ``parts`` are (seed, dataset, strategy,
    class); under ``shuffle: once`` (the authors': one shuffle for every class) the class is left out of the
    seed, so every class of a (dataset, strategy) gets the same prompt order; ``per-class`` keeps it."""
    s = p["sampling"]
    if s["mode"] == "rounds":
        return draw(n, i, *parts)
    seed = derive_seed(*(parts[:3] if s.get("shuffle") == "once" else parts), "prompts")
    return authors_slots(n, s["prompts"], seed)[i // s["images_per_prompt"]], seed


class Strategy:
    """A prompt source with the simple template's behaviour; subclasses change what they need to."""

    name: ClassVar[str] = ""  # set by @STRATEGIES.register
    description: ClassVar[str] = ""  # the card's "what" column
    kind: ClassVar[str] = "source"  # or "modifier": changes a source's images; "data": images not generated
    source: ClassVar[str | None] = None  # a modifier's prompt source when none is named (None: cfg.builds_on)
    needs: ClassVar[tuple[str, ...]] = ()  # what the build loads for it: "expansion", "references"

    def pool(self, cfg, name: str, files: dict | None = None) -> dict[str, Any]:
        """What this strategy's prompts for class ``name`` are made of (``files``: RA's reference files)."""
        return {"templates": [cfg.simple_template]}

    def shot(self, p: dict, i: int, base: tuple, row: dict, references: list | None = None) -> None:
        """Shot ``i`` of the unit ``p``: its prompt and how it was made, into ``row``. ``base`` seeds the
        draws: (seed, dataset, strategy, class)."""
        j, draw_seed = pick(p, len(p["templates"]), i, *base)
        template = p["templates"][j]
        row["prompt"] = fill(template, p["class"])
        row["prompting"].update(template=template, draw_seed=draw_seed)

    def finish(self, rows: list[dict], expand=None) -> None:
        """After every shot of a unit (CE expands, RD appends)."""

    def details(self, cfg) -> str | None:
        """The card's line on how this strategy's prompts were made."""
        return None


@STRATEGIES.register("ST")
class SimpleTemplate(Strategy):
    description = "simple template"

    def details(self, cfg) -> str:
        return f"- ST: `{cfg.simple_template}` (`{fill(cfg.simple_template, 'airplane')}` for airplane)."


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
        e = cfg.expansion
        inputs = keytotext_inputs(name) if e.input == KEYTOTEXT else [fill(e.input, name)]
        return {"expansion": {**to_dict(e), "inputs": inputs}}

    def shot(self, p, i, base, row, references=None):
        e, name, s = p["expansion"], p["class"], p["sampling"]
        seeds = (p["seed"], p["dataset"], "CE", name)  # shared by every strategy with CE: the same sentences
        row["prompting"].update(expansion_model=e["model"], expansion_input="".join(e["inputs"]))
        if s["mode"] == "rounds":  # a pool of e["prompts"] sentences, each sampled under its own seed
            j, row["prompting"]["draw_seed"] = draw(e["prompts"] or s["prompts"], i, *base)
            row["_ce"] = {"inputs": e["inputs"], "draws": [derive_seed(*seeds, j)], "keep": None}
        else:  # the authors: `draws` samples, the distinct ones, `prompts` of them drawn; shot i takes i // m
            n = e["draws"] or s["prompts"] + 50
            row["prompting"]["draw_seed"] = derive_seed(*seeds, "sample")
            row["_ce"] = {"inputs": e["inputs"], "draws": [derive_seed(*seeds, "draw", k) for k in range(n)],
                          "keep": (s["prompts"], i // s["images_per_prompt"], row["prompting"]["draw_seed"])}

    def finish(self, rows, expand=None):
        if expand is None:
            raise GensetsError("CE prompts need the expansion model (expand=)")
        for r in rows:
            ce = r.pop("_ce")
            texts = expand([t for _ in ce["draws"] for t in ce["inputs"]],
                           [s for s in ce["draws"] for _ in ce["inputs"]])
            k = len(ce["inputs"])
            sentences = [" ".join(texts[d * k:(d + 1) * k]).strip() for d in range(len(ce["draws"]))]
            if ce["keep"] is None:
                r["prompt"], r["prompting"]["expansion_seed"] = sentences[0], ce["draws"][0]
                continue
            prompts, slot, seed = ce["keep"]
            first = {}
            for d, text in enumerate(sentences):
                first.setdefault(text, d)
            if len(first) < prompts:
                raise GensetsError(f"CE: {len(first)} distinct expansions of {r['prompting']['expansion_input']!r} "
                                   f"in {len(sentences)} draws, {prompts} needed: raise expansion.draws")
            kept = random.Random(seed).sample(list(first), prompts)
            r["prompt"] = kept[slot]
            r["prompting"]["expansion_seed"] = ce["draws"][first[kept[slot]]]

    def details(self, cfg) -> str:
        e = cfg.expansion
        what = ("the class name as keytotext's pipeline gives it (`airplane </s>`)" if e.input == KEYTOTEXT
                else f"`{e.input}`")
        if cfg.sampling == "rounds":
            n = e.prompts or -(-cfg.shots // cfg.images_per_prompt)  # the prompts per class
            how = f"into {n} sentences per class, each sampled under its own seed"
        else:
            how = (f"{e.draws or 'prompts + 50'} times per class (sampled); the distinct sentences, of which "
                   f"one per prompt is drawn")
        return (f"- CE: `{e.model}` expands {what} {how} (top-k {e.top_k}, top-p {e.top_p}, temperature "
                f"{e.temperature}, at most {e.max_new_tokens} new tokens); the sentence is the prompt.")


@STRATEGIES.register("TI")
class TextualInversion(Strategy):
    """Sec. 4's knowledge injection: the class's token (trained on its reference images by the build's ``ti`` stage,
    genbench/ti.py) before the class name in the dataset's templates: ``template.format(f"{unique_id} {concept}")``
    (generation_utils.py, ``textual_inversion_sampling``; 16 templates x ``sample_num`` images, as DT draws them).
    The training texts put the same ``"<token> <class>"`` in the same templates (``placeholder_string``)."""

    description = "textual inversion: a token per class learned on its reference images, in the dataset's templates"
    needs = ("ti",)

    def pool(self, cfg, name, files=None):
        return {"templates": list(cfg.templates), "ti": {"token": cfg.ti.token_of(cfg.dataset_name, name),
                                                          "scheduler": cfg.ti.scheduler}}

    def shot(self, p, i, base, row, references=None):
        j, draw_seed = pick(p, len(p["templates"]), i, *base)
        template = p["templates"][j]
        concept = f"{p['ti']['token']} {plain_name(p['class'])}"
        row["prompt"] = template.format(concept, c=concept)
        row["prompting"].update(template=template, draw_seed=draw_seed, token=p["ti"]["token"])

    def details(self, cfg) -> str:
        t, r = cfg.ti, cfg.reference
        n = t.references or r.per_class
        where = (f"the {n} best images of the class the retrieval ranks from `{cfg.retrieval.pool}`"
                 if r.source == "retrieval" else f"the first {n} reference images of the class in `{r.source}`")
        loss = (f"{TI_VARIANTS[t.loss]}; CLIP `{t.clip}`, lambda {t.clip_lambda}" if t.loss == "clip"
                else TI_VARIANTS[t.loss])
        return (f"- TI: a token per class (`{t.token}`, initialised from `{t.initializer}`) trained by Textual "
                f"Inversion for {t.steps} steps (batch {t.batch_size}, lr {t.learning_rate}"
                f"{' x batch' if t.scale_lr else ''}, {t.lr_scheduler}; loss: {loss}) on {where}; prompts: the "
                f"dataset's templates filled with `<token> <class>`, sampled with "
                f"{t.scheduler or 'the generator scheduler'}; each image records its embedding file and sha256.")


class Modifier(Strategy):
    """Changes the images of a prompt source; adds nothing to its prompts unless it says so."""

    kind = "modifier"

    def pool(self, cfg, name, files=None):
        return {}

    def shot(self, p, i, base, row, references=None):
        pass


@STRATEGIES.register("RD")
class RestrictiveDescription(Modifier):
    description = "restrictive description appended to the prompt"

    def pool(self, cfg, name, files=None):
        return {"restrictive": cfg.restrictive}

    def shot(self, p, i, base, row, references=None):
        row["_restrictive"] = p["restrictive"]
        row["prompting"]["restrictive"] = restrictive_form(p["restrictive"])

    def finish(self, rows, expand=None):
        for r in rows:  # after the source's prompt (CE: its sentence); the code appends to the template before
            suffix = r.pop("_restrictive")  # filling it in, which gives the same text
            r["prompt"] += suffix
            if r["prompting"].get("template"):
                r["prompting"]["template"] += suffix

    def details(self, cfg) -> str:
        which = {"authors": "the authors' code, `sharp_focus`", "table-6": "the paper's Table 6"}.get(
            restrictive_form(cfg.restrictive), "custom")
        return f"- RD: `{cfg.restrictive}` appended to each prompt ({which})."


@STRATEGIES.register("NP")
class NegativePrompts(Modifier):
    description = "negative prompt: other class names of the dataset plus quality negatives"

    def pool(self, cfg, name, files=None):
        others = [c for c in dict.fromkeys(map(plain_name, cfg.class_names)) if c != plain_name(name)]
        out = {"negatives": others, "negative_classes": cfg.negative.classes, "quality": cfg.negative.quality}
        if cfg.negative.classes != "all":
            out["negative_sample"] = cfg.negative.sample
        return out

    def shot(self, p, i, base, row, references=None):
        others = p["negatives"]
        if p["negative_classes"] != "all":  # the paper's Sec. 9 (per class) / gensets-v1 (per image): a sample
            seed = derive_seed(*base, "negatives") if p.get("negative_sample") == "class" else \
                derive_seed(*base, i, "negatives")
            others = random.Random(seed).sample(others, min(p["negative_classes"], len(others)))
            row["prompting"]["negative_seed"] = seed
        row["negative_prompt"] = ", ".join([*others, p["quality"]] if p["quality"] else others)

    def details(self, cfg) -> str:
        n = cfg.negative.classes
        per = "one seeded sample per class: the paper's Sec. 9" if cfg.negative.sample == "class" else \
            "a seeded sample per image"
        which = ("every other class name of the dataset, in its order (the authors' code)" if n == "all"
                 else f"{n} other class names of the dataset ({per})")
        return f"- NP: negative prompt = {which}, then `{cfg.negative.quality}`."


@STRATEGIES.register("RA")
class RetrievalAugmented(Modifier):
    description = "retrieval augmented: image-to-image from a retrieved reference image of the class"
    source = "ST"
    needs = ("references",)

    def pool(self, cfg, name, files=None):
        ref = {**to_dict(cfg.reference), "source": source_name(cfg.reference.source)}
        if cfg.reference.source == "retrieval":  # the retrieval data type's ranking: the pool's content in the id
            pool = pool_identity(cfg)
            return {"reference": {**ref, "source": f"retrieval:{pool['pool']}", "retrieval": pool}}
        return {"reference": ref if files is None else {**ref, "files": files[name]}}

    def shot(self, p, i, base, row, references=None):
        if not references:
            raise GensetsError(f"RA: no reference images for class {p['class']!r}")
        row["reference"], _ = draw(len(references), i, *base, "references")
        r = p["reference"]
        where = r["source"] + (f"/{r['split']}" if r["source"].startswith("hf:") else "")
        row["prompting"].update(strength=r["strength"], reference_source=where,
                                allow_dataset_split=r["allow_dataset_split"])

    def details(self, cfg) -> str:
        r = cfg.reference
        own = (" The source may be the evaluated dataset's own data (`reference.allow_dataset_split: true`)."
               if r.allow_dataset_split else "")
        where = (f"the {r.per_class} best images of each class the retrieval ranks from `{cfg.retrieval.pool}`"
                 if r.source == "retrieval" else f"the first {r.per_class} reference images of each class in `{r.source}`")
        return (f"- RA: image-to-image (strength {r.strength}) from {where}; each image records its init image and "
                f"sha256.{own}")


# ------------------------------------------------------------------ composition: "NP+RD" and friends
class StrategyNames:
    """What a config's ``strategies:`` accepts: a registered name, or several joined by "+" (checked further by
    :func:`parts_of`)."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and all(p.strip() in STRATEGIES for p in name.split("+"))

    def names(self) -> list[str]:
        return [*STRATEGIES.names(), "NP+RD"]


STRATEGY_NAMES = StrategyNames()


def parts_of(name: str, builds_on: str) -> list[str]:
    """The registered strategies ``name`` is made of, its prompt source first: ``parts_of("NP+RD", "DT")`` ->
    ``["DT", "NP", "RD"]``. A ValueError says why a combination makes no sense."""
    parts = [p.strip() for p in name.split("+")]
    if len(set(parts)) != len(parts):
        raise ValueError(f"{name!r} names a strategy twice")
    data = [p for p in parts if STRATEGIES.get(p).kind == "data"]
    if data and len(parts) > 1:
        raise ValueError(f"{name!r}: {data[0]} is a data type of its own (no prompts), it combines with nothing")
    if data:
        return parts
    sources = [p for p in parts if STRATEGIES.get(p).kind == "source"]
    if len(sources) > 1:
        raise ValueError(f"{name!r} combines {len(sources)} prompt sources ({', '.join(sources)}); give at most one")
    modifiers = [p for p in parts if p not in sources]
    if sources:
        return sources + modifiers
    implied = {p: STRATEGIES.get(p).source or builds_on for p in modifiers}
    if len(set(implied.values())) > 1:
        said = ", ".join(f"{p} on {s}" for p, s in implied.items())
        raise ValueError(f"{name!r}: its parts build on different prompt sources ({said}); name one, e.g. "
                         f"{'+'.join([next(iter(implied.values())), *modifiers])!r}")
    return [next(iter(implied.values())), *modifiers]


class Composed(Strategy):
    """A prompt source and its modifiers, acting in that order."""

    def __init__(self, parts: list[str]):
        self.parts = [STRATEGIES.get(p)() for p in parts]
        self.needs = tuple(dict.fromkeys(n for s in self.parts for n in s.needs))

    def pool(self, cfg, name, files=None):
        out: dict[str, Any] = {}
        for s in self.parts:
            out.update(s.pool(cfg, name, files))
        return out

    def shot(self, p, i, base, row, references=None):
        for s in self.parts:
            s.shot(p, i, base, row, references)

    def finish(self, rows, expand=None):
        for s in self.parts:
            s.finish(rows, expand)


def compose(parts: list[str]) -> Strategy:
    """The strategy made of ``parts`` (from :func:`parts_of`): a registered one alone as it is."""
    return STRATEGIES.get(parts[0])() if len(parts) == 1 else Composed(parts)


def describe(parts: list[str]) -> str:
    """The card's "what" of a strategy made of ``parts``."""
    return "; ".join(STRATEGIES.get(p).description for p in parts)
