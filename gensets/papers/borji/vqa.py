"""Binary VQA sets on generated images (Borji 2022): images with yes / no questions.

Images are generated from prompts or imported from a folder. Questions come from a JSONL file
(``{"image": key, "question": ..., "answer": "yes" | "no"}``, checked line by line) or are generated
from the prompts: for every object and every (object, attribute) of a prompt a yes question, and a
balanced no question made by swapping in another object, or another attribute of the same family (a colour
for a colour, a material for a material), that the prompt does not mention, plurals included
(``gensets.labels.wordset`` word rules: "bus" is mentioned by "buses").
Scored with ``gensets eval --protocol vqa`` (ViLT / BLIP question answering, image-text-to-text models).

Where the files lie never enters a build: ``image_folder`` stays as written (relative to the config file),
the questions file is read into the config, and units know an imported image by its file name and sha256; the
file is found at run time under ``cfg.base_dir`` (the config's folder).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from ...builders import base
from ...builders.common import BuildFields, GeneratorConfig, ImageConfig, Unit
from ...config import check_count, to_dict
from ...errors import ConfigError, DataError
from ...images import is_image_file
from ...labels.wordset import wordset_hit
from ...records import Sample, content_id, derive_seed, slug
from ...registry import BUILDERS
from ...sources.imports import check_max_pixels, file_digest
from .common import chunked_units, load_or_skip
from .recognition import BORJI_2022

# swap vocabularies for the "no" questions (COCO-like everyday objects); an attribute is swapped only for
# another of its family, so the no answer stays true ("a red car" -> "Is the car blue?", never "metal?")
OBJECTS = ("person", "dog", "cat", "car", "bicycle", "bus", "horse", "bird", "boat", "chair", "table", "cup",
           "bottle", "umbrella", "clock", "book", "laptop", "phone", "banana", "pizza", "cake", "teddy bear",
           "vase", "kite", "bench", "tree", "house", "train", "airplane", "elephant")
# the provenance fields VQA sets add to the common provenance (records.schema)
FIELDS = (("questions", ("list", ("struct", [("question", "string"), ("answer", "string"), ("kind", "string")]))),
          ("original_path", "string"), ("original_sha256", "string"))
FIELD_DOCS = {
    "questions": "the image's yes / no questions",
    "questions[].question": "the question",
    "questions[].answer": "yes or no",
    "questions[].kind": "what the question asks about (an object, an attribute), or where it came from",
    "original_path": "an imported image's file name (null: generated)",
    "original_sha256": "an imported image's sha256 (null: generated)",
}
ATTRIBUTES = {
    "colour": ("red", "blue", "green", "yellow", "black", "white", "orange", "purple", "pink", "brown"),
    "material": ("wooden", "metal", "glass", "plastic", "stone"),
    "pattern": ("striped", "spotted", "checkered", "plain"),
    "size": ("small", "large"),
}


@dataclass(frozen=True)
class PromptSpec:
    text: str  # the prompt
    objects: tuple[str, ...]  # what it shows
    attributes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # object -> its attributes
    images: int = 1

    def validate(self, base_dir: Path) -> None:
        missing = [o for o in (*self.objects, *self.attributes) if not _mentions(self.text, o)]
        if missing:
            raise ValueError(f"objects: {missing[0]!r} does not appear in the prompt text")
        unknown = [o for o in self.attributes if o not in self.objects]
        if unknown:
            raise ValueError(f"attributes: {unknown[0]!r} is not one of the prompt's objects")
        check_count("images", self.images)


def _mentions(text: str, phrase: str) -> bool:
    """``phrase`` is among the words of ``text``, by the word-set rules with plurals (case, plural "s" / "es":
    a prompt about "buses" mentions a bus; gensets' question generation, not a score of the paper)."""
    return wordset_hit(phrase, [text], plural=True)


def read_questions(path: Path) -> list[dict]:
    """The questions file, every line checked: one ValueError naming the line of the first bad one, e.g. a
    question asked again about the same image with the other answer (case and spaces aside). A repeat with the
    same answer is kept, as the source file has it."""
    out = []
    asked: dict[tuple[str, str], dict] = {}
    for i, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}:{i}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: not valid JSON ({e.msg})") from None
        except (ValueError, RecursionError) as e:  # e.g. an integer of more than 4300 digits, deep nesting
            raise ValueError(f"{path}:{i}: not valid JSON ({' '.join(str(e).split())[:200] or 'nested too deeply'})") \
                from None
        if not isinstance(row, dict) or not isinstance(row.get("image"), str) or not row["image"]:
            raise ValueError(f"{path}:{i}: needs an 'image' key (the image's key)")
        if not isinstance(row.get("question"), str) or not row["question"].strip():
            raise ValueError(f"{path}:{i}: needs a non-empty 'question'")
        answer = str(row.get("answer", "")).strip().lower()
        if answer not in ("yes", "no"):
            raise ValueError(f"{path}:{i}: answer must be yes or no, got {row.get('answer')!r}")
        q = {"image": slug(row["image"]), "question": row["question"].strip(), "answer": answer, "kind": "given",
             "line": i}
        first = asked.setdefault((q["image"], " ".join(q["question"].lower().split())), q)
        if first["answer"] != answer:
            raise ValueError(f"{path}:{i}: image {q['image']!r}, question {q['question'][:80]!r}: answer {answer!r} "
                             f"contradicts line {first['line']} ({first['answer']!r})")
        out.append(q)
    return out


@dataclass(frozen=True)
class VQAConfig(BuildFields):
    builder: Literal["vqa"]
    name: str = "vqa"
    pretty_name: str = "Binary VQA on generated images (gensets)"
    license: str = "cc-by-4.0"
    seed: int = 0
    generator: GeneratorConfig | None = None
    prompts: tuple[PromptSpec, ...] = ()
    image_folder: str | None = None  # imported images; an image's key is its file name without suffix
    questions: str | None = None  # JSONL questions file (relative to the config)
    generate_questions: bool = True  # make yes / no questions from the prompts
    objects: tuple[str, ...] = OBJECTS  # the vocabularies "no" questions swap in from
    attributes: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(ATTRIBUTES))  # family -> words
    max_pixels: int = 50_000_000
    image: ImageConfig = ImageConfig()
    shard_size: int = 1000
    questions_data: tuple[dict[str, Any], ...] = ()  # filled by resolved(): the checked questions file
    # Where image_folder leads (the config file's folder): set by load_build_config.
    base_dir: ClassVar[Path] = Path(".")

    def validate(self, base_dir: Path | None) -> None:
        check_max_pixels(self.max_pixels)
        if self.shard_size < 1:
            raise ValueError("shard_size: must be at least 1")
        if self.prompts and self.generator is None:
            raise ValueError("generator: prompts need a generator")
        if not self.prompts and not self.image_folder:
            raise ValueError("give prompts (with a generator) or an image_folder")
        if self.generate_questions:
            for i, p in enumerate(self.prompts):
                try:
                    _swaps(p, self.objects, self.attributes)
                except ValueError as e:
                    raise ValueError(f"prompts: prompt {i} {e}") from None
        if base_dir is None:  # a workspace's frozen copy: its files were checked when it was frozen
            return
        if self.image_folder and not (base_dir / self.image_folder).is_dir():
            raise ValueError(f"image_folder: not a folder: {base_dir / self.image_folder}")
        keys = image_keys(self.prompts, base_dir / self.image_folder if self.image_folder else None)
        if self.questions:
            path = base_dir / self.questions
            if not path.is_file():
                raise ValueError(f"questions: data file not found: {path}")
            try:
                qs = read_questions(path)
            except ValueError as e:  # the questions file's own line, not the config's
                raise ConfigError(str(e)) from None
            for q in qs:
                if q["image"] not in keys and not generated_key(self.prompts, q["image"]):
                    raise ConfigError(f"{path}:{q['line']}: image {q['image']!r} matches no image (keys are the "
                                      "image_folder's file names without suffix, and pNNNN_II for generated ones)")

    def resolved(self, base_dir: Path) -> VQAConfig:
        """The questions file read into the config, so the frozen copy stands alone; image_folder stays as
        written, and ``base_dir`` is kept beside the config (not in it) to read the images from."""
        qs = tuple(read_questions(base_dir / self.questions)) if self.questions else self.questions_data
        return replace(self, questions_data=qs, questions=None)


def _swaps(prompt: PromptSpec, objects: Sequence[str], families: Mapping[str, Sequence[str]]):
    """What a no question may swap in: the objects the prompt does not mention, and per attribute of
    the prompt the other words of its family it does not mention. A ValueError names what is missing."""
    absent = [o for o in objects if not _mentions(prompt.text, o)]
    if prompt.objects and not absent:
        raise ValueError(f"{prompt.text!r}: every object of `objects` is in the prompt; none is left for a no question")
    attrs = {}
    for obj, words in prompt.attributes.items():
        for attr in words:
            family = next((f for f, members in families.items() if attr in members), None)
            if family is None:
                raise ValueError(f"{prompt.text!r}: attribute {attr!r} of {obj!r} is in no family of `attributes` "
                                 f"({', '.join(families)}); add it to one")
            attrs[attr] = [a for a in families[family] if not _mentions(prompt.text, a)]
            if not attrs[attr]:
                raise ValueError(f"{prompt.text!r}: every {family} word is in the prompt; none is left to swap "
                                 f"for {attr!r}")
    return absent, attrs


def generated_questions(prompt: PromptSpec, objects: Sequence[str], attributes: Mapping[str, Sequence[str]],
                        seed: int) -> list[dict]:
    """A yes question per object and per (object, attribute), each with a balanced no question that
    names an object, or an attribute of the same family (``attributes``: family -> words), absent from
    the prompt."""
    rng = random.Random(seed)
    absent_objects, absent_attrs = _swaps(prompt, objects, attributes)
    out = []
    for obj in prompt.objects:
        out.append({"question": f"Is there a {obj} in the image?", "answer": "yes", "kind": "object"})
        other = rng.choice(absent_objects)
        out.append({"question": f"Is there a {other} in the image?", "answer": "no", "kind": "object"})
        for attr in prompt.attributes.get(obj, ()):
            out.append({"question": f"Is the {obj} {attr}?", "answer": "yes", "kind": "attribute"})
            other = rng.choice(absent_attrs[attr])
            out.append({"question": f"Is the {obj} {other}?", "answer": "no", "kind": "attribute"})
    return out


def generated_key(prompts: Sequence[PromptSpec], key: str) -> bool:
    """``key`` is a generated image's (``pNNNN_II``: image II of prompt NNNN), counted, not listed: a prompt may ask
    for many images."""
    import re

    m = re.fullmatch(r"p(\d+)_(\d+)", key)
    if m is None:
        return False
    i, j = int(m[1]), int(m[2])
    return i < len(prompts) and j < prompts[i].images and key == f"p{i:04d}_{j:02d}"


def image_keys(prompts: Sequence[PromptSpec], folder: Path | None) -> dict[str, Path]:
    """Every imported image's key -> its file (the generated images' keys: :func:`generated_key`). Two files with
    one key (``a.jpg`` and ``a.png``), or a file named like a generated image, are a ConfigError naming both."""
    keys: dict[str, Path] = {}
    files = sorted(f for f in folder.iterdir() if is_image_file(f) and f.is_file()) if folder else []
    for f in files:
        if not f.resolve().is_relative_to(folder.resolve()):
            raise ConfigError(f"{folder}: {f.name} is a symlink out of the image folder; copy the image in instead")
        key = slug(f.stem)
        if key in keys or generated_key(prompts, key):
            other = keys[key].name if key in keys else "a generated image"
            raise ConfigError(f"{folder}: {other} and {f.name} have the same image key {key!r}; rename one")
        keys[key] = f
    return keys


def plan(cfg: VQAConfig) -> list[Unit]:
    units = []
    base = {"builder": "vqa", "seed": cfg.seed, "image": to_dict(cfg.image)}
    for i, p in enumerate(cfg.prompts):
        payload = {**base, "kind": "generate", "prompt": to_dict(p), "index": i,
                   "generator": to_dict(cfg.generator), "generate_questions": cfg.generate_questions,
                   "objects": list(cfg.objects), "attributes": to_dict(cfg.attributes)}
        units.append(Unit(content_id(payload), payload))
    if cfg.image_folder:
        folder = cfg.base_dir / cfg.image_folder
        if not folder.is_dir():
            raise DataError(f"image_folder {cfg.image_folder}: not a folder under {cfg.base_dir}")
        files = image_keys(cfg.prompts, folder)
        # an image is known by its file name in the folder and its sha256, never by where the folder lies
        items = [{"rel": f.name, "key": k, "sha256": file_digest(str(f))} for k, f in files.items()]
        units += chunked_units({**base, "kind": "import"}, "items", items, 64)
    return units


class Context(base.Context):
    """The generator (when there are prompts) and the questions file's questions per image key."""

    def __init__(self, cfg: VQAConfig):
        super().__init__(cfg)
        self.given: dict[str, list[dict]] = {}
        for q in cfg.questions_data:
            self.given.setdefault(q["image"], []).append({k: q[k] for k in ("question", "answer", "kind")})

    def load(self) -> None:
        if self.cfg.prompts:
            self.generator  # noqa: B018


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    p = unit.payload
    cfg = ctx.cfg
    out = []
    if p["kind"] == "generate":
        prompt = next(x for x in cfg.prompts if to_dict(x) == p["prompt"])
        g = cfg.generator
        gen = ctx.generator
        seeds = [derive_seed(cfg.seed, "vqa", prompt.text, i) for i in range(prompt.images)]
        images, _, texts = base.generate_encoded(gen, g, cfg.image, [prompt.text] * prompt.images, seeds)
        for i, (seed, data) in enumerate(zip(seeds, images, strict=True)):
            key = f"p{p['index']:04d}_{i:02d}"
            qs = list(ctx.given.get(key, []))
            if cfg.generate_questions:
                qs += generated_questions(prompt, cfg.objects, cfg.attributes, derive_seed(seed, "questions"))
            meta = VQABuilder.provenance(key=key, build=build_id, unit=unit.id, config="default",
                              prompt=prompt.text, negative_prompt=g.negative_prompt, seed=seed, steps=g.steps,
                              guidance=g.guidance, width=g.width, height=g.height,
                              generator=g.provenance(gen, index=i, count=len(seeds)),
                              source=g.model, questions=qs, kept=True, **texts[i])
            out.append(Sample(key, data, cfg.image.format, 0, meta))
        return out
    for it in p["items"]:
        where = (Path(cfg.image_folder) / it["rel"]).as_posix()  # relative to the config, as written
        got = load_or_skip(ctx, str(cfg.base_dir / cfg.image_folder / it["rel"]), it["sha256"], where)
        if got is None:
            continue
        data, rgb = got
        meta = VQABuilder.provenance(key=it["key"], build=build_id, unit=unit.id, config="default",
                          width=rgb.width, height=rgb.height, original_path=it["rel"],
                          original_sha256=it["sha256"], questions=ctx.given.get(it["key"], []), kept=True)
        out.append(Sample(it["key"], data, cfg.image.format, 0, meta))
    return out


@BUILDERS.register("vqa")
class VQABuilder(base.Builder):
    description = ("Generated images with binary (yes / no) questions about the objects and attributes their "
                   "prompts name, for scoring visual question answering models, after Borji (2022).")
    citation = BORJI_2022
    task_categories = ("visual-question-answering",)
    Config = VQAConfig
    Context = Context
    fields = FIELDS
    field_docs = FIELD_DOCS

    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)

    def planned_images(self, cfg: VQAConfig) -> list[tuple[tuple[str, int], ...]]:
        """The generated images (an image folder's files exist: not counted)."""
        return [((f"prompts[{i}].images", p.images),) for i, p in enumerate(cfg.prompts)]


    def work(self, unit: Unit) -> base.Work:
        p = unit.payload
        if p["kind"] == "generate":
            return base.Work({"default": p["prompt"]["images"]}, p["generator"])
        return base.Work({"default": len(p["items"])})

    def check_prompts(self, unit: Unit, ctx: Context) -> None:
        if unit.payload["kind"] == "generate":
            base.check_prompts(ctx.generator, ctx.cfg.generator, [unit.payload["prompt"]["text"]])

    def class_names(self, cfg: VQAConfig) -> list[str]:
        return ["image"]

    def card_body(self, cfg: VQAConfig, manifest: dict, samples: list) -> str:
        qs = [q for s in samples for q in (s.meta.get("questions") or [])]
        yes = sum(q["answer"] == "yes" for q in qs)
        gen = f"`{cfg.generator.model}`, {cfg.generator.steps} steps" if cfg.generator else "(imported images)"
        return f"""
- Images: {len(samples)} ({len(cfg.prompts)} prompts; generator {gen}).
- Questions: {len(qs)} ({yes} yes, {len(qs) - yes} no), in each sample's `json.questions`. Generated
  questions ask about every object and attribute of the prompt (yes) and swap in an object, or an
  attribute of the same family, that the prompt does not mention (no), so yes and no are balanced.
- Score a VQA model: `gensets eval DATASET --model hf:Salesforce/blip-vqa-base --protocol vqa --db results.duckdb`.
"""

