"""GenBench's config: the dataset and its classes, the strategies and how their prompts are made (a ``variant``
of readings: the authors' code by default), CE's expansion model, NP's negatives, RA's references, the cost."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from ...builders.common import BuildFields, GeneratorConfig, ImageConfig, check_spec
from ...config import check_count
from ...errors import did_you_mean
from ...labels.imagenet import imagenet_templates
from ...sources.classes import DatasetInfo, dataset_info, plain_name, split_rev
from ...sources.packaged import genbench_datasets, genbench_hub_copies, genbench_published
from . import strategies as S
from .strategies import STRATEGY_NAMES, parts_of

METRICS = ("accuracy", "mean-per-class", "11-point-map", "roc-auc")

# The readings of how prompts are made; a config key left out (null) takes its variant's value. "authors" is
# the authors' code (Luodian/GenBench generation_utils.py and pipeline.py, see strategies.py for each line);
# "gensets-v1" is what gensets did before issue #12, kept as a named option.
VARIANTS: dict[str, dict] = {
    "authors": {
        "simple_template": "{}",  # sampling_images: language_enc == "simple_template" -> ["{}"]
        "restrictive": S.RESTRICTIVE,  # sharp_focus: template + ",highly detailed,hires,8k,sharp focus"
        "builds_on": "DT",  # RD and NP act on the lang_enc (CLIP) templates: Table 6, Table 2 "w/ NP, RD"
        "sampling": "authors",  # total_num_temps prompts per class, sample_num images each
        "shuffle": "once",  # sampling_images: random.shuffle(template_list) once, before the loop over classes
        "images_per_prompt": 4,  # pipeline.py: --sample_num 4 (num_images_per_prompt)
        # neg_prompts: every other class; a sample (the paper's Sec. 9: negative.classes 5) is drawn per class
        "negative": {"classes": "all", "quality": S.QUALITY_NEGATIVES, "sample": "class"},
        "expansion": {  # process_classnames: keytotext_pipeline("mrm8488/t5-base-finetuned-common_gen")
            "model": "hf:mrm8488/t5-base-finetuned-common_gen", "input": S.KEYTOTEXT, "prompts": None,
            "draws": None,  # None: prompts per class + 50 (num + 50)
            # nlp([n], num_return_sequences=1, do_sample=True): transformers' generation defaults otherwise
            "max_new_tokens": 19, "min_new_tokens": 0, "do_sample": True, "top_p": 1.0, "top_k": 50,
            "temperature": 1.0},
        # tools/prep_retrieval.py: --ref_shot=20; sampling_images_i2i is not published: diffusers' default strength
        "reference": {"per_class": 20, "strength": 0.8},
    },
    "gensets-v1": {
        "simple_template": "a photo of a {}", "restrictive": S.V1_RESTRICTIVE, "builds_on": "ST", "sampling": "rounds",
        "shuffle": "per-class", "images_per_prompt": 1,
        "negative": {"classes": 10, "quality": S.V1_QUALITY_NEGATIVES, "sample": "image"},
        "expansion": {"model": "hf:google/flan-t5-base", "input": "Write a short sentence describing a photo of a {}.",
                      "prompts": 8, "draws": None, "max_new_tokens": 40, "min_new_tokens": 2, "do_sample": True,
                      "top_p": 0.95, "top_k": 0, "temperature": 1.0},
        "reference": {"per_class": 5, "strength": 0.75},
    },
}


def _config_slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "dataset"


def _letters(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@dataclass(frozen=True)
class ExpansionConfig:
    """CE: the seq2seq model that expands a class name into a sentence, and how (null: the variant's value)."""

    model: str | None = None  # any transformers seq2seq model spec, or tiny:t5
    input: str | None = None  # "keytotext" (the class name as keytotext gives it) or a template with {}
    prompts: int | None = None  # sampling rounds: the CE pool (sentences per class, each under its own seed)
    draws: int | None = None  # sampling authors: sentences sampled per class (null: prompts per class + 50)
    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    do_sample: bool | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0: no top-k filtering
    temperature: float | None = None

    def validate(self, base_dir: Path) -> None:
        if self.model is not None:
            check_spec(self.model, "model")
        if self.input is not None and self.input != S.KEYTOTEXT and "{}" not in self.input:
            raise ValueError(f"input: {S.KEYTOTEXT!r} or a template that contains {{}} for the class name")
        for key in ("prompts", "draws", "max_new_tokens"):
            if getattr(self, key) is not None:
                check_count(key, getattr(self, key))
        if (self.min_new_tokens or 0) < 0 or (self.top_k or 0) < 0:
            raise ValueError("min_new_tokens and top_k must be at least 0")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError("top_p: must be in (0, 1]")


@dataclass(frozen=True)
class NegativeConfig:
    """NP: other class names of the dataset (all: the authors' code; or a seeded sample of N, per class: the
    paper's Sec. 9 with N = 5, or per image: gensets-v1) plus quality negatives."""

    classes: Literal["all"] | int | None = None
    quality: str | None = None
    sample: Literal["class", "image"] | None = None  # classes N: one sample per class or one per image

    def validate(self, base_dir: Path) -> None:
        if isinstance(self.classes, int) and self.classes < 0:
            raise ValueError("classes: 'all' or at least 0")


@dataclass(frozen=True)
class ReferenceConfig:
    """RA: retrieved reference images of each class, the init images of image-to-image generation."""

    # folder:<path> (class_name/*.jpg) or hf:<repo or path>[@rev] of retrieved images, or "retrieval": the best
    # per_class images the retrieval data type ranks from retrieval.pool (the authors: --ref_image=retrieval)
    source: str | None = None
    split: str = "train"  # hf: the split to take references from
    hf_config: str | None = None
    label_column: str | None = None  # hf: the ClassLabel column (default: the first)
    per_class: int | None = None  # the first N images of each class (null: the variant's)
    strength: float | None = None  # image-to-image strength (1.0 ignores the reference; null: the variant's)
    allow_dataset_split: bool = False  # take the evaluated dataset's own images anyway (recorded in every sample)

    def validate(self, base_dir: Path) -> None:
        if self.source is not None and self.source != "retrieval":
            kind, sep, rest = self.source.partition(":")
            if not sep or kind not in ("folder", "hf") or not rest:
                raise ValueError(f"source: expected folder:<path>, hf:<repo or path> or retrieval, got {self.source!r}")
            # a folder is looked for where the config lies: GenBenchConfig.validate (a workspace's frozen
            # copy keeps the path as written, relative to the config it was built from)
        if self.per_class is not None:
            check_count("per_class", self.per_class)
        if self.strength is not None and not 0 < self.strength <= 1:
            raise ValueError("strength: must be in (0, 1]")


@dataclass(frozen=True)
class TIFilterConfig:
    """An option, not the authors' code (Luodian/GenBench has no such filter): the paper's Sec. 4 reading that
    reference images are kept when the BERT similarity between the image's caption and the class name is at least
    0.8 (shared/papers/001_f04b4de81b95e690.txt, Sec. 4: BLIP-2 captions, their BERT similarity with the class word
    above 0.8, "typically ranging from 5-30 images"). gensets' reading: each reference captioned by ``captioner``
    (default BLIP base, not the paper's BLIP-2),
    caption and class name embedded by ``text_model`` (mean of the last hidden states over the tokens), kept when
    their cosine >= ``threshold``."""

    captioner: str = "hf:Salesforce/blip-image-captioning-base"  # any load_captioner spec (tiny:blip-caption)
    text_model: str = "hf:bert-base-uncased"  # any transformers encoder spec (tiny:bert)
    threshold: float = 0.8

    def validate(self, base_dir: Path) -> None:
        if self.threshold < -1:
            raise ValueError(f"threshold: a cosine (at least -1), got {self.threshold}")


@dataclass(frozen=True)
class TIConfig:
    """TI (Sec. 4, Table 3): a token per class learned by Textual Inversion on the class's ``reference:`` images.
    Defaults: the paper where it says (shared/papers/001_f04b4de81b95e690.txt, Sec. 4: "We trained 1000 steps for
    each category", the Table 3 runs; Table 3's FT Shot: 5 original images per class), the authors' code otherwise:
    the per-class command (Luodian/GenBench textual_inversion/example.sh, line 2:
    ``--placeholder_token='<voc-2007-classification bicycle>' --initializer_token=bicycle --train_batch_size=4
    --max_train_steps=500 --learning_rate=5.0e-04 --scale_lr --lr_scheduler=constant --lr_warmup_steps=0
    --lambda_global_clip_loss 1.0``, ``--learnable_property=object``: the dataset's templates; the script's defaults
    otherwise: ``--repeats 100``, no centre crop, flip p 0.5, ``--clip_guidance text_sim`` with lambda 1.0 on
    OpenAI's CLIP ViT-B/16), textual_inversion_prepare_images (generation_utils.py: ``--ref_shot`` 5 references per
    class, each resized to 224x224 first) and textual_inversion_sampling (generation_utils.py: the pipeline's
    scheduler replaced by ``DPMSolverMultistepScheduler.from_config``, 50 steps, guidance 7.5, 512x512: the
    ``generator:`` keys). ``steps: 500`` is example.sh's and pipeline.py's ``--steps 500`` (named, not the default:
    the paper's 1000 is the count it gives for the table). ``loss: mse`` is plain Textual Inversion. The dataset-level
    scripts train_ti_original.sh / train_ti_reference.sh (one token ``<all>``, initializer ``entity``, batch 8, 5000
    steps, lr 5e-4 / 1e-4, cosine_with_restarts, warmup 100) are another reading: set the keys to them."""

    token: str = "<{dataset} {class}>"  # the placeholder token: {dataset} the dataset_name, {class} the class name
    initializer: str = "{class}"  # the initializer token ({class}: the class name), convert_tokens_to_ids as is
    steps: int = 1000  # the paper, Sec. 4; 500: example.sh --max_train_steps=500, pipeline.py --steps 500
    learning_rate: float = 5e-4
    scale_lr: bool = True  # the rate applied: learning_rate x batch_size (x 1 accumulation step x 1 process)
    batch_size: int = 4
    lr_scheduler: Literal["constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts",
                          "polynomial"] = "constant"
    warmup_steps: int = 0
    repeats: int = 100
    flip_p: float = 0.5
    resolution: int | None = None  # training side; null: the generator's width (the authors: 512 both)
    center_crop: bool = False
    prepare_size: int | None = 224  # references resized to this square first (null: as they are)
    checkpoint_every: int = 100  # steps between checkpoints (embedding + AdamW moments) in the workspace
    filter: TIFilterConfig | None = None  # the paper's caption-and-BERT reference filter (an option; null: off)
    # the first (folder, hf:) or best (retrieval) N of the class's reference.per_class images: Table 3's 5-shot
    # original data, --ref_shot 5; null: all of them (Table 3's retrieval row: 100 retrieved, ti.filter keeps 5~30)
    references: int | None = 5
    loss: Literal["clip", "mse"] = "clip"  # the noise MSE + clip_lambda x CLIP text similarity (the script), or plain
    clip: str = "open_clip:ViT-B-16/openai"  # the CLIP of the loss (the script: clip.load("ViT-B/16")); open_clip
    clip_lambda: float = 1.0  # --lambda_clip_guidance 1.0
    # TI's images: the pipeline's scheduler replaced by this diffusers scheduler, configured from it
    # (textual_inversion_sampling); null: the generator's, as the other strategies
    scheduler: str | None = "DPMSolverMultistepScheduler"

    def validate(self, base_dir: Path) -> None:
        if "{class}" not in self.token:
            raise ValueError("token: must contain {class} (one token per class)")
        for key in ("steps", "batch_size", "repeats", "checkpoint_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be at least 1")
        if self.learning_rate <= 0 or self.warmup_steps < 0 or not 0 <= self.flip_p <= 1:
            raise ValueError("learning_rate must be > 0, warmup_steps >= 0 and flip_p in [0, 1]")
        if (self.resolution or 8) < 8 or (self.prepare_size or 1) < 1:
            raise ValueError("resolution and prepare_size must be positive")
        if self.references is not None:
            check_count("references", self.references)
        if self.clip_lambda < 0:
            raise ValueError(f"clip_lambda: must be at least 0, got {self.clip_lambda}")
        check_spec(self.clip, "clip")

    def token_of(self, dataset_name: str, name: str) -> str:
        return self.token.replace("{dataset}", dataset_name).replace("{class}", plain_name(name))

    def initializer_of(self, name: str) -> str:
        return self.initializer.replace("{class}", plain_name(name))


@dataclass(frozen=True)
class OriginalConfig:
    """The original-data baseline (strategy ``original``, GenBench Sec. 2.4, Fig. 3): K images per class drawn
    with a recorded seed from the dataset's own training split."""

    source: str | None = None  # folder:<path> (class_name/*.jpg) or hf:<repo or path>[@rev]; null: the dataset
    split: str = "train"  # hf: the split
    hf_config: str | None = None
    label_column: str | None = None  # hf: the ClassLabel column (default: the first)

    def validate(self, base_dir: Path) -> None:
        if self.source is not None:
            kind, sep, rest = self.source.partition(":")
            if not sep or kind not in ("folder", "hf") or not rest:
                raise ValueError(f"source: expected folder:<path> or hf:<repo or path>, got {self.source!r}")


@dataclass(frozen=True)
class RetrievalConfig:
    """The retrieval baseline (strategy ``retrieval``, GenBench Sec. 2.4, Table 1; MTS Sec. 3.3): images of a
    pool the user provides, ranked per class by CLIP similarity with the class's queries (its templates filled
    in). Defaults: the authors' retrieval (``t2t_sep_prompt_30nn`` in tools/prep_retrieval.py: text-to-text, one
    query per template, 30 nearest neighbours each) and MTS over the best 10 (tools/text_similarity.py,
    ``ref_shot = 10``)."""

    pool: str | None = None  # folder:<path> (images, each with a <stem>.txt caption) or hf:<repo or path>[@rev]
    split: str = "train"  # hf: the split
    hf_config: str | None = None
    caption_column: str = "caption"  # hf: the text column
    clip: str = "open_clip:ViT-B-32/openai"  # the CLIP model that embeds queries and captions (or images)
    mode: Literal["text-to-text", "text-to-image"] = "text-to-text"
    neighbours: int = 30  # nearest pool items per query
    mts_shot: int = 10  # MTS: the mean over each class's best N retrieved images

    def validate(self, base_dir: Path) -> None:
        if self.pool is not None:
            kind, sep, rest = self.pool.partition(":")
            if not sep or kind not in ("folder", "hf") or not rest:
                raise ValueError(f"pool: expected folder:<path> or hf:<repo or path>, got {self.pool!r}")
        check_spec(self.clip, "clip")
        if self.neighbours < 1 or self.mts_shot < 1:
            raise ValueError("neighbours and mts_shot must be at least 1")


@dataclass(frozen=True)
class ReferenceCost:
    per_image: float  # price of one image this way, in the currency of cost
    source: str  # where the figure comes from


def paper_labelling() -> ReferenceCost:
    """GenBench's price of a labelled image: Table 5's "Original, Human Labeling" row, 1.20e-2 USD per image (the
    same figure as Table 1; Sec. 8 takes it from the AWS SageMaker Ground Truth price list)."""
    pub = genbench_published()
    t5 = pub["tables"]["5"]
    row = next(r for r in t5["rows"] if r["data_type"] == "Original")
    return ReferenceCost(row["cost_per_image"], f"GenBench (Li et al. 2023), {t5['source']['where']}: "
                         f"{row['data_type']}, {row['collection_source']} (arXiv:{t5['source']['arxiv']})")


# GenBench's price of a generator GPU hour: Table 5's "Generative, Model Inference" row, 1.47 USD per hour of an
# Azure NC24ads A100 v4 at its spot price (Sec. 8; gensets/data/genbench/published.json, tables.5)
PAPER_PRICE_PER_HOUR = 1.47
PAPER_HARDWARE = "Azure NC24ads A100 v4, spot price (GenBench Table 5)"


@dataclass(frozen=True)
class CostConfig:
    price_per_hour: float = PAPER_PRICE_PER_HOUR  # price of one hour of the generator's device (default: the paper's)
    currency: str = "USD"
    hardware: str = PAPER_HARDWARE  # what the price is for, e.g. "1x A100 80GB, on demand"
    reference: dict[str, ReferenceCost] = field(default_factory=dict)  # other ways to get an image
    # the original-data baseline's price per labelled image, with its source; null: the paper's (Table 5,
    # paper_labelling), in USD
    labelling: ReferenceCost | None = None

    @property
    def labelling_price(self) -> ReferenceCost:
        """The configured labelling price, else the paper's (Table 5; a price in USD, so only with currency USD)."""
        return self.labelling or paper_labelling()

    def validate(self, base_dir: Path) -> None:
        if self.price_per_hour < 0:
            raise ValueError("price_per_hour: must be at least 0")


@dataclass(frozen=True)
class GenBenchConfig(BuildFields):
    builder: Literal["genbench"]
    generator: GeneratorConfig
    name: str = "genbench"
    pretty_name: str = "GenBench generated training data (gensets)"
    license: str = "openrail++"
    seed: int = 0
    dataset: str = "cifar-10"  # a packaged GenBench dataset, hf:<repo or path>[@rev] or folder:<path>
    hf_config: str | None = None  # hf: the dataset config
    label_column: str | None = None  # hf: the ClassLabel column (default: the first)
    dataset_name: str | None = None  # names the published configs <dataset_name>-<strategy>
    class_names: tuple[str, ...] = ()  # every class of the dataset (filled in from the dataset when empty)
    classes: Literal["all"] | tuple[str, ...] = "all"  # the classes to generate
    metric: Literal["accuracy", "mean-per-class", "11-point-map", "roc-auc"] | None = None  # default: packaged
    shots: int = 16  # K images per class and strategy
    # registered names (strategies.py), or several joined by "+": NP+RD (Table 2's "w/ NP, RD")
    strategies: tuple[Annotated[str, STRATEGY_NAMES], ...] = ("ST",)
    variant: Literal["authors", "gensets-v1"] = "authors"  # the readings the keys left out take (VARIANTS)
    sampling: Literal["authors", "rounds"] | None = None  # how shots get prompts from a strategy's pool
    # sampling authors: the template list shuffled once for every class (the code) or per class (gensets' reading)
    shuffle: Literal["once", "per-class"] | None = None
    images_per_prompt: int | None = None  # sampling authors: K / images_per_prompt prompts per class
    simple_template: str | None = None  # ST
    templates: tuple[str, ...] = ()  # DT; default: the dataset's own CLIP templates (others: ImageNet's)
    restrictive: str | None = None  # RD: appended to each prompt as it is; or a named form: authors, table-6
    builds_on: Literal["ST", "DT", "CE"] | None = None  # the prompt source of RD and NP when a strategy names none
    expansion: ExpansionConfig = ExpansionConfig()
    negative: NegativeConfig = NegativeConfig()
    reference: ReferenceConfig = ReferenceConfig()
    ti: TIConfig = TIConfig()  # TI: Textual Inversion on the reference images
    original: OriginalConfig = OriginalConfig()  # the original-data baseline (strategy `original`)
    retrieval: RetrievalConfig = RetrievalConfig()  # the retrieval baseline (strategy `retrieval`)
    resize: int | None = None  # the stored images' side, resized (bicubic) after generation; null: as generated
    cost: CostConfig = CostConfig()
    image: ImageConfig = ImageConfig()
    unit_size: int = 8  # shots per work unit
    shard_size: int = 1000
    # the real test set the generated images are audited against (test-set contamination; finalize and gensets
    # audit check it without being asked): folder:<path> (class folders) or hf:<dataset> (its test split); null: the
    # dataset's own (hf: / folder: dataset), else the packaged dataset's Hub copy (hub_copies.json)
    test_set: str | None = field(default=None, kw_only=True, metadata={"omit_default": True})
    # Where this config's relative folder: paths lead (the config file's folder): set by load_build_config.
    base_dir: ClassVar[Path] = Path(".")

    def info(self, base_dir: Path) -> DatasetInfo:
        if self.class_names:
            d = genbench_datasets().get(self.dataset, {})
            return DatasetInfo(self.class_names, tuple(d.get("templates", ())), d.get("metric", "accuracy"),
                               d.get("group", "custom"))
        return dataset_info(self.dataset, base_dir, self.hf_config, self.label_column)

    def parts(self, strategy: str) -> list[str]:
        """The registered strategies ``strategy`` is made of, its prompt source first."""
        return parts_of(strategy, self.builds_on or VARIANTS[self.variant]["builds_on"])

    def validate(self, base_dir: Path | None) -> None:
        if not self.strategies:
            raise ValueError("strategies: give at least one of " + ", ".join(STRATEGY_NAMES.names()))
        seen: dict = {}
        for s in self.strategies:
            try:
                parts = self.parts(s)
            except ValueError as e:
                raise ValueError(f"strategies: {e}") from None
            key = (parts[0], frozenset(parts[1:]))
            if key in seen:
                raise ValueError(f"strategies: {s!r} is {seen[key]!r} again")
            seen[key] = s
        for key in ("shots", "unit_size", "shard_size"):
            check_count(key, getattr(self, key))
        if (self.images_per_prompt is not None and self.images_per_prompt < 1) or (self.resize or 1) < 1:
            raise ValueError("images_per_prompt and resize must be at least 1")
        checked = [("simple_template", self.simple_template)] + [("templates", t) for t in self.templates]
        for key, t in checked:
            if t is not None and "{}" not in t and "{c}" not in t:
                raise ValueError(f"{key}: {t!r} must contain {{}} for the class name")
        if self.restrictive is not None and ("{" in self.restrictive or "}" in self.restrictive):
            raise ValueError("restrictive: no braces: it is appended to the prompt as it is")
        if any(p == "TI" or "TI" in mods for p, mods in seen):
            if not self.reference.source:
                raise ValueError("reference.source: TI trains a token per class on reference images (retrieved, "
                                 "or original with reference.allow_dataset_split): folder:<path> or hf:<dataset>")
            if self.generator.dtype != "float32":
                raise ValueError("generator.dtype: TI trains in float32 (the authors' per-class command: no mixed "
                                 "precision)")
            per_class = self.reference.per_class or VARIANTS[self.variant]["reference"]["per_class"]
            if self.ti.references is not None and self.ti.references > per_class:
                raise ValueError(f"ti.references: {self.ti.references} reference images per class, but "
                                 f"reference.per_class takes {per_class}: raise it or lower ti.references")
        if any("RA" in mods for _, mods in seen) and not self.reference.source:
            raise ValueError("reference.source: RA needs reference images of each class, e.g. retrieved ones "
                             "(the paper: LAION-400M): folder:<path> (class_name/*.jpg) or hf:<dataset>")
        if self.reference.source == "retrieval" and not self.retrieval.pool:
            raise ValueError("retrieval.pool: reference.source retrieval takes RA's references from the retrieval "
                             "data type's ranking of a pool: folder:<path> (image + <stem>.txt) or hf:<dataset>")
        if any(p == "original" for p, _ in seen):
            if not (self.original.source or self.dataset.startswith(("hf:", "folder:"))):
                raise ValueError(f"original.source: the original-data baseline needs the images of {self.dataset}: "
                                 "folder:<path> (class_name/*.jpg) or hf:<dataset>")
            if self.cost.labelling is None and self.cost.currency != "USD":
                raise ValueError(f"cost.labelling: the paper's labelling price (Table 5) is in USD, the config's "
                                 f"currency {self.cost.currency}: give a price per labelled image in "
                                 f"{self.cost.currency} and its source ({{per_image: ..., source: ...}})")
        if any(p == "retrieval" for p, _ in seen) and not self.retrieval.pool:
            raise ValueError("retrieval.pool: the retrieval baseline needs a pool of images with captions: "
                             "folder:<path> (image + <stem>.txt) or hf:<dataset>")
        src = self.reference.source or ""
        # the folder is checked where the config lies (base_dir None: a workspace's frozen copy, see gensets.config)
        if src.startswith("folder:") and base_dir is not None and not (base_dir / src[len("folder:"):]).is_dir():
            raise ValueError(f"reference: source: folder not found: {base_dir / src[len('folder:'):]}")
        own = self.own_data(base_dir) if src and not self.reference.allow_dataset_split else None
        if own:
            raise ValueError(f"reference: source: {src} is the evaluated dataset's own data ({own}); RA starts from "
                             "retrieved images (the paper: LAION-400M): name a retrieval source, or set "
                             "reference.allow_dataset_split: true to take it anyway")
        names = self.info(base_dir).classes
        if len(set(names)) != len(names):
            raise ValueError("class_names: class names must be unique")
        if self.classes != "all":
            unknown = [c for c in self.classes if c not in names]
            if unknown:
                raise ValueError(f"classes: unknown class {unknown[0]!r} of {self.dataset}"
                                 f"{did_you_mean(unknown[0], names)} (e.g. {', '.join(names[:5])})")

    @property
    def real_test_set(self) -> str | None:
        """The real test set the audit checks the images against (``test_set``, else the dataset's own)."""
        if self.test_set:
            return self.test_set
        if self.dataset.startswith(("hf:", "folder:")):
            return self.dataset
        copies = genbench_hub_copies().get(self.dataset, [])
        return f"hf:{copies[0]}" if copies else None

    def own_data(self, base_dir: Path | None) -> str | None:
        """Why RA's reference source is the evaluated dataset's own data (any split of it), or None: the same
        hf: repo or folder as ``dataset``, or, for a packaged dataset, a Hub copy of it (hub_copies.json, or a
        repo named like it: ``uoft-cs/cifar10`` for cifar-10)."""
        kind, _, rest = (self.reference.source or "").partition(":")
        dkind, dsep, drest = self.dataset.partition(":")
        rest, drest = split_rev(rest.rstrip("/"))[0], split_rev(drest.rstrip("/"))[0]
        if not dsep and kind == "hf":
            copies = [c.lower() for c in genbench_hub_copies().get(self.dataset, [])]
            if rest.lower() in copies or _letters(rest.split("/")[-1]) == _letters(self.dataset):
                return f"hf:{rest} holds the {self.dataset} images"
            return None
        if kind != dkind:
            return None
        if kind == "folder" and base_dir is not None:
            a, b = (base_dir / rest).resolve(), (base_dir / drest).resolve()
            return f"the dataset is {self.dataset}" if a == b or a in b.parents or b in a.parents else None
        return f"the dataset is {self.dataset}" if rest.lower() == drest.lower() else None

    def resolved(self, base_dir: Path) -> GenBenchConfig:
        """Class names, templates and metric read into the config, and the keys left out filled in from the
        variant, so the frozen copy stands alone. Paths stay as written (the frozen copy and the card hold no
        absolute path of this machine); ``base_dir`` is kept beside the config (not in it) to read the reference
        folder from."""
        info = self.info(base_dir)
        name = self.dataset_name or (self.dataset if self.dataset in genbench_datasets()
                                     else split_rev(self.dataset.partition(":")[2].rstrip("/"))[0].split("/")[-1])
        v = VARIANTS[self.variant]

        def fill(obj, preset: dict) -> dict:
            return {k: val for k, val in preset.items() if getattr(obj, k) is None}

        nested = {k: replace(getattr(self, k), **fill(getattr(self, k), v[k]))
                  for k in ("negative", "expansion", "reference")}
        top = fill(self, {k: val for k, val in v.items() if k not in nested})
        if self.restrictive in S.RESTRICTIVE_FORMS:  # a named form: its text (the card and images name it back)
            top["restrictive"] = S.RESTRICTIVE_FORMS[self.restrictive]
        return replace(self, **top, **nested, dataset_name=_config_slug(name), class_names=info.classes,
                       metric=self.metric or info.metric,
                       templates=self.templates or info.templates or tuple(imagenet_templates()))


def custom_keys(cfg: GenBenchConfig) -> list[str]:
    """The prompt settings of a resolved config that differ from its variant's (the card names them)."""
    v = VARIANTS[cfg.variant]
    out = []
    for k, val in v.items():
        if isinstance(val, dict):
            out += [f"{k}.{s}" for s, x in val.items() if getattr(getattr(cfg, k), s) != x]
        elif getattr(cfg, k) != val:
            out.append(k)
    return out


def prompts_per_class(cfg: GenBenchConfig) -> int:
    """sampling authors: the prompts of a class (the code's total_num_temps): K / images_per_prompt, rounded up."""
    return math.ceil(cfg.shots / cfg.images_per_prompt)


def config_name(dataset_name: str, strategy: str) -> str:
    """The published config of a strategy: ``cifar-10-np``, ``cifar-10-np-rd`` for NP+RD."""
    return f"{dataset_name}-{strategy.lower().replace('+', '-')}"


def selected(cfg: GenBenchConfig) -> list[tuple[int, str]]:
    """The (label index, class name) pairs to generate."""
    if cfg.classes == "all":
        return list(enumerate(cfg.class_names))
    return [(cfg.class_names.index(c), c) for c in cfg.classes]
