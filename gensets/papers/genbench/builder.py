"""The GenBench builder: plan (strategy x class x chunk of shots), the prompts of a unit, run, register."""

from __future__ import annotations

import os
import time

from ...builders import base
from ...builders.common import Unit
from ...config import to_dict
from ...errors import DataError
from ...models.text import load_text2text
from ...records import Sample, content_id, derive_seed
from ...registry import BUILDERS
from ...safety import inside, read_regular
from ...sources.classes import source_name
from ...timings import record_timing
from .baselines import retrieve
from .card import card_body
from .config import GenBenchConfig, config_name, prompts_per_class, selected
from .fields import FIELD_DOCS, FIELDS, NAME, PROMPTING, key_of
from .references import Reference, load_references, reference_files, retrieved_references
from .strategies import compose
from .ti import STAGE as TI_STAGE
from .ti import embeddings, plan_training, train_unit

CITATION = """
@article{li2023genbench,
  title   = {Benchmarking and Analyzing Generative Data for Visual Recognition},
  author  = {Li, Bo and Liu, Haotian and Chen, Liangyu and Lee, Yong Jae and Li, Chunyuan and Liu, Ziwei},
  journal = {arXiv preprint arXiv:2307.13697},
  year    = {2023}
}"""


def plan(cfg: GenBenchConfig, stage: str = "generate", workspace=None) -> list[Unit]:
    """Deterministic work units: (strategy, class, chunk of shots), ids from content (the dataset by
    :func:`source_name`, RA's folder references by path in the folder and sha256, TI's embeddings by sha256:
    read from ``workspace``, where stage ``ti`` trained them, one unit per class)."""
    if stage == TI_STAGE:
        return plan_training(cfg)
    gen, image = to_dict(cfg.generator), to_dict(cfg.image)
    parts = {name: cfg.parts(name) for name in cfg.strategies}
    strategies = {name: compose(p) for name, p in parts.items()}
    files = reference_files(cfg) if any("references" in s.needs for s in strategies.values()) else None
    trained = embeddings(cfg, workspace) if any("ti" in s.needs for s in strategies.values()) else {}
    sampling = {"mode": cfg.sampling, "prompts": prompts_per_class(cfg), "images_per_prompt": cfg.images_per_prompt,
                "shuffle": cfg.shuffle}
    units = []
    for name_of_strategy, st in strategies.items():
        for index, name in selected(cfg):
            pool = st.pool(cfg, name, files)
            if "ti" in st.needs:
                pool["ti"] = {**pool["ti"], **trained[name]}
            for start in range(0, cfg.shots, cfg.unit_size):
                payload = {
                    "builder": "genbench", "dataset": source_name(cfg.dataset), "dataset_name": cfg.dataset_name,
                    "config": config_name(cfg.dataset_name, name_of_strategy), "strategy": name_of_strategy,
                    "parts": parts[name_of_strategy], "variant": cfg.variant, "sampling": sampling,
                    "class": name, "label_index": index,
                    "shots": list(range(start, min(start + cfg.unit_size, cfg.shots))),
                    "seed": cfg.seed, "generator": gen, "image": image, "resize": cfg.resize, **pool}
                units.append(Unit(id=content_id(payload), payload=payload))
    return units


def unit_prompts(unit: Unit, expand=None, references: list | None = None) -> list[dict]:
    """Every image of a unit: key, prompt, negative prompt, seeds and how the prompt was made.

    ``expand(inputs, seeds) -> texts`` is the CE expansion model (required for CE units);
    ``references`` the class's reference images (required for RA units; only their number is used here).
    """
    p = unit.payload
    s, name = p["strategy"], p["class"]
    st = compose(p["parts"])
    base_seed = (p["seed"], p["dataset"], s, name)
    rows = []
    for i in p["shots"]:
        row = {"key": key_of(p, i), "shot": i,
               "seed": derive_seed(*base_seed, i), "negative_prompt": p["generator"]["negative_prompt"],
               "prompting": {"variant": p["variant"], "prompt_source": p["parts"][0], "template": None,
                             "draw_seed": None}}
        st.shot(p, i, base_seed, row, references)
        rows.append(row)
    st.finish(rows, expand)
    return rows


class Context(base.Context):
    """The generator, and what the strategies need (CE's text model, RA's reference images), loaded once per
    process, lazily."""

    def __init__(self, cfg: GenBenchConfig):
        super().__init__(cfg)
        self.needs = {n for name in cfg.strategies for n in compose(cfg.parts(name)).needs}
        self._text = None
        self._references = None
        self._retrieval = None
        self._expansions: dict[tuple[str, int], str] = {}  # (input, seed) -> text: CE draws, shared by units
        self._tokens: set[str] = set()  # TI tokens loaded into the generator
        self.ti_filter_models: dict = {}  # ti.filter's captioner and text encoder, loaded by its first class
        self.ti_clip: dict = {}  # ti.clip spec -> the CLIP of TI's loss (textual_inversion.ClipGuidance), loaded once
        self.ti_step = None  # TI training: called with each completed step (tests stop a training with it)

    def load(self) -> None:
        super().load()
        if "expansion" in self.needs:
            self.text  # noqa: B018
        if "references" in self.needs or "ti" in self.needs:
            self.references  # noqa: B018
        if "retrieval" in self.needs:
            self.retrieval  # noqa: B018

    @property
    def text(self):
        if self._text is None:
            self._text = load_text2text(self.cfg.expansion.model)
        return self._text

    @property
    def references(self) -> dict[str, list[Reference]]:
        if self._references is None:
            self._references = (retrieved_references(self.cfg, self.retrieval)
                                if self.cfg.reference.source == "retrieval" else load_references(self.cfg))
        return self._references

    @property
    def retrieval(self) -> dict[str, dict]:
        """The retrieval baseline's ranked pool items per selected class, and each class's query seconds."""
        if self._retrieval is None:
            self._retrieval = retrieve(self.cfg, [n for _, n in selected(self.cfg)])
        return self._retrieval

    def load_embedding(self, ti: dict) -> None:
        """A TI embedding from the workspace into the generator's pipeline (``load_textual_inversion``), once;
        DataError when the file is not the one the unit was planned with."""
        import hashlib

        if ti["token"] in self._tokens:
            return
        path = inside(self.workspace.root, ti["embedding"])  # no symlink out of the workspace
        if not os.path.lexists(path) or hashlib.sha256(read_regular(path)).hexdigest() != ti["embedding_sha256"]:
            raise DataError(f"{path}: the TI embedding of {ti['token']!r} changed or is missing since the build was "
                            "planned; run the build again")
        self.generator.pipe.load_textual_inversion(str(path), token=ti["token"])
        self._tokens.add(ti["token"])

    def expand(self, inputs: list[str], seeds: list[int]) -> list[str]:
        """One text per (input, seed), each computed once per process (every unit of a class draws the same
        sentences under the authors' sampling)."""
        e = self.cfg.expansion
        todo = list(dict.fromkeys(k for k in zip(inputs, seeds, strict=True) if k not in self._expansions))
        if todo:
            texts = self.text.generate([t for t, _ in todo], [s for _, s in todo], max_new_tokens=e.max_new_tokens,
                                       min_new_tokens=e.min_new_tokens, do_sample=e.do_sample, top_p=e.top_p,
                                       top_k=e.top_k, temperature=e.temperature)
            self._expansions.update(zip(todo, texts, strict=True))
        return [self._expansions[k] for k in zip(inputs, seeds, strict=True)]


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """Make the unit's prompts, generate its images (timed), encode them, record their provenance."""
    p = unit.payload
    cfg, g = ctx.cfg, ctx.cfg.generator
    if p.get("stage") == TI_STAGE:  # train the class's token (ti.py)
        return train_unit(unit, ctx, build_id)
    st = compose(p["parts"])
    if st.kind == "data":  # original or retrieved images (baselines.py)
        return st.run(unit, ctx, build_id)
    needs = st.needs
    ra = "references" in needs
    refs = ctx.references[p["class"]] if ra else None
    if ra and p["reference"].get("files") not in (None, [[r.id, r.sha256] for r in refs]):
        raise DataError(f"reference {cfg.reference.source}: the images of class {p['class']!r} changed while "
                        "building; run the build again")
    if "ti" in needs:
        ctx.load_embedding(p["ti"])
    t0 = time.perf_counter()
    rows = unit_prompts(unit, expand=ctx.expand if "expansion" in needs else None, references=refs)
    expansion_seconds = time.perf_counter() - t0
    gen = ctx.generator
    with gen.use_scheduler(p["ti"].get("scheduler") if "ti" in needs else None, "ti.scheduler"):  # TI: DPMSolver
        images, seconds, texts = base.generate_encoded(
            gen, g, cfg.image, [r["prompt"] for r in rows], [r["seed"] for r in rows],
            negative_prompts=[r["negative_prompt"] for r in rows],
            init_images=[refs[r["reference"]].image() for r in rows] if ra else None, strength=cfg.reference.strength,
            resize=cfg.resize)
        scheduler = gen.scheduler
    record_timing(build_id, unit.id, len(rows), seconds, expansion_seconds)
    pipeline = gen.img2img_pipe().__class__.__name__ if ra else None
    samples = []
    for i, (r, data) in enumerate(zip(rows, images, strict=True)):
        prompting = dict(r["prompting"])
        if "expansion" in needs:
            prompting.update(expansion_model=ctx.text.model_id, expansion_revision=ctx.text.revision)
        if "ti" in needs:
            prompting.update(embedding=p["ti"]["embedding"], embedding_sha256=p["ti"]["embedding_sha256"])
        if ra:
            ref = refs[r["reference"]]
            prompting.update(init_image=ref.id, init_image_sha256=ref.sha256)
        prompting = {k: prompting.get(k) for k, _ in PROMPTING}
        meta = GenBenchBuilder.provenance(
            key=r["key"], build=build_id, unit=unit.id, config=p["config"],
            label=p["class"], label_index=p["label_index"], strategy=p["strategy"], prompt=r["prompt"],
            negative_prompt=r["negative_prompt"], seed=r["seed"], steps=g.steps, guidance=g.guidance,
            width=g.width, height=g.height,
            generator={**g.provenance(gen, pipeline, index=i, count=len(rows)), "scheduler": scheduler},
            prompting=prompting, source=g.model,
            kept=True, review=None, **texts[i])
        samples.append(Sample(key=r["key"], image=data, ext=cfg.image.format, cls=p["label_index"], meta=meta))
    return samples


@BUILDERS.register(NAME)
class GenBenchBuilder(base.Builder):
    description = (
        "Generated training images for image classification: K shots per class of a downstream dataset, "
        "one config per prompt strategy (simple template, defined templates, category enhancement, "
        "restrictive description, negative prompts, retrieval augmented, and their combinations), after "
        "GenBench (Li et al., 2023), as the authors' code makes them. "
        "Score them with CLER: `gensets report genbench`.")
    citation = CITATION
    Config = GenBenchConfig
    Context = Context
    split = "train"
    fields = FIELDS
    field_docs = FIELD_DOCS
    stages = (TI_STAGE, "generate")  # TI's tokens are trained before any image is generated

    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)

    def planned_images(self, cfg: GenBenchConfig) -> list[tuple[tuple[str, int], ...]]:
        return [(("strategies", len(cfg.strategies)), ("classes", len(selected(cfg))), ("shots", cfg.shots))]


    def work(self, unit: Unit) -> base.Work:
        p = unit.payload
        if p.get("stage") == TI_STAGE:
            clip = (("Textual Inversion's CLIP loss", p["training"]["clip"]),) if p["training"].get("clip") else ()
            return base.Work(models=(("Textual Inversion's base", p["model"]), *clip),
                             other=f"Textual Inversion's training ({p['training']['steps']} steps a class)")
        st = compose(p["parts"])
        if st.kind == "data":  # the dataset's own images or retrieved ones: drawn, not generated
            return base.Work({p["config"]: len(p["shots"])})
        if "expansion" in st.needs:
            return base.Work({p["config"]: len(p["shots"])}, p["generator"],
                             models=(("prompt expansion", p["expansion"]["model"]),),
                             other="prompts sampled from the expansion model")
        return base.Work({p["config"]: len(p["shots"])}, p["generator"])

    def check_prompts(self, unit: Unit, ctx: Context) -> None:
        """Every unit but CE's (its prompts are the expansion model's: checked while the unit runs), TI's training
        and the baselines' (no prompt). A TI unit's token is loaded first, so it counts as the one token it is."""
        p = unit.payload
        if ctx.cfg.generator.long_prompts != "error" or p.get("stage") == TI_STAGE:
            return
        st = compose(p["parts"])
        if st.kind == "data" or "expansion" in st.needs:
            return
        if "ti" in st.needs:
            ctx.load_embedding(p["ti"])
        refs = ctx.references[p["class"]] if "references" in st.needs else None
        rows = unit_prompts(unit, references=refs)
        base.check_prompts(ctx.generator, ctx.cfg.generator, [r["prompt"] for r in rows],
                           [r["negative_prompt"] for r in rows])

    def config_names(self, cfg: GenBenchConfig) -> list[str]:
        """One published config per (dataset, strategy), each with a train split."""
        return [config_name(cfg.dataset_name, s) for s in cfg.strategies]

    def class_names(self, cfg: GenBenchConfig) -> list[str]:
        return list(cfg.class_names)

    def audit_references(self, cfg: GenBenchConfig) -> dict[str, str]:
        """The real test set (``test_set``, else the dataset's own): GenBench trains on these images and tests on
        it, so a generated image that copies a test image inflates CLER (the audit's contamination check)."""
        return {"test": cfg.real_test_set} if cfg.real_test_set else {}

    def card_body(self, cfg: GenBenchConfig, manifest: dict, samples: list) -> str:
        return card_body(cfg, manifest, samples)
