"""The GenBench builder: plan (strategy x class x chunk of shots), the prompts of a unit, run, register."""

from __future__ import annotations

import time

from ...config import to_dict
from ...errors import DataError
from ...records import Sample, content_id, derive_seed, slug
from ...registry import BUILDERS, STRATEGIES
from ...sources.classes import source_name
from ...timings import record_timing
from .. import base
from ..common import Unit
from .card import card_body
from .config import GenBenchConfig, config_name, selected
from .references import Reference, load_references, reference_files

CITATION = """
@article{li2023genbench,
  title   = {Benchmarking and Analyzing Generative Data for Visual Recognition},
  author  = {Li, Bo and Liu, Haotian and Chen, Liangyu and Lee, Yong Jae and Li, Chunyuan and Liu, Ziwei},
  journal = {arXiv preprint arXiv:2307.13697},
  year    = {2023}
}"""
# the provenance fields GenBench adds to the common provenance (records.schema): the strategy, and how the prompt was made (the template,
# the seeded draw from the strategy's prompt pool, a seq2seq expansion (CE), an init image (RA))
PROMPTING = [("template", "string"), ("draw_seed", "int64"), ("expansion_model", "string"),
             ("expansion_revision", "string"), ("expansion_input", "string"), ("expansion_seed", "int64"),
             ("init_image", "string"), ("init_image_sha256", "string"), ("strength", "float64")]
FIELDS = (("strategy", "string"), ("prompting", ("struct", PROMPTING)))


def strategy(name: str):
    """The registered strategy ``name`` (an instance)."""
    return STRATEGIES.get(name)()


def plan(cfg: GenBenchConfig) -> list[Unit]:
    """Deterministic work units: (strategy, class, chunk of shots), ids from content (the dataset by
    :func:`source_name`, RA's folder references by path in the folder and sha256)."""
    gen, image = to_dict(cfg.generator), to_dict(cfg.image)
    strategies = {name: strategy(name) for name in cfg.strategies}
    files = reference_files(cfg) if any("references" in s.needs for s in strategies.values()) else None
    units = []
    for name_of_strategy, st in strategies.items():
        for index, name in selected(cfg):
            pool = st.pool(cfg, name, files)
            for start in range(0, cfg.shots, cfg.unit_size):
                payload = {
                    "builder": "genbench", "dataset": source_name(cfg.dataset), "dataset_name": cfg.dataset_name,
                    "config": config_name(cfg.dataset_name, name_of_strategy), "strategy": name_of_strategy,
                    "class": name, "label_index": index,
                    "shots": list(range(start, min(start + cfg.unit_size, cfg.shots))),
                    "seed": cfg.seed, "generator": gen, "image": image, **pool}
                units.append(Unit(id=content_id(payload), payload=payload))
    return units


def unit_prompts(unit: Unit, expand=None, references: list | None = None) -> list[dict]:
    """Every image of a unit: key, prompt, negative prompt, seeds and how the prompt was made.

    ``expand(inputs, seeds) -> texts`` is the CE expansion model (required for CE units);
    ``references`` the class's reference images (required for RA units; only their number is used here).
    """
    p = unit.payload
    s, name = p["strategy"], p["class"]
    st = strategy(s)
    base_seed = (p["seed"], p["dataset"], s, name)
    rows = []
    for i in p["shots"]:
        row = {"key": f"{s.lower()}_{p['label_index']:04d}_{slug(name)}_{i:04d}", "shot": i,
               "seed": derive_seed(*base_seed, i), "negative_prompt": p["generator"]["negative_prompt"],
               "prompting": {"template": None, "draw_seed": None}}
        st.shot(p, i, base_seed, row, references)
        rows.append(row)
    st.finish(rows, expand)
    return rows


class Context(base.Context):
    """The generator, and what the strategies need (CE's text model, RA's reference images), loaded once per
    process, lazily."""

    def __init__(self, cfg: GenBenchConfig):
        super().__init__(cfg)
        self.needs = {n for name in cfg.strategies for n in strategy(name).needs}
        self._text = None
        self._references = None

    def load(self) -> None:
        super().load()
        if "expansion" in self.needs:
            self.text  # noqa: B018
        if "references" in self.needs:
            self.references  # noqa: B018

    @property
    def text(self):
        if self._text is None:
            from ...models.text import load_text2text

            self._text = load_text2text(self.cfg.expansion.model)
        return self._text

    @property
    def references(self) -> dict[str, list[Reference]]:
        if self._references is None:
            self._references = load_references(self.cfg)
        return self._references

    def expand(self, inputs: list[str], seeds: list[int]) -> list[str]:
        e = self.cfg.expansion
        return self.text.generate(inputs, seeds, max_new_tokens=e.max_new_tokens, do_sample=e.do_sample,
                                  top_p=e.top_p, temperature=e.temperature)


def run_unit(unit: Unit, ctx: Context, build_id: str) -> list[Sample]:
    """Make the unit's prompts, generate its images (timed), encode them, record their provenance."""
    p = unit.payload
    cfg, g = ctx.cfg, ctx.cfg.generator
    needs = strategy(p["strategy"]).needs
    ra = "references" in needs
    refs = ctx.references[p["class"]] if ra else None
    if ra and p["reference"].get("files") not in (None, [[r.id, r.sha256] for r in refs]):
        raise DataError(f"reference {cfg.reference.source}: the images of class {p['class']!r} changed while "
                        "building; run the build again")
    t0 = time.perf_counter()
    rows = unit_prompts(unit, expand=ctx.expand if "expansion" in needs else None, references=refs)
    expansion_seconds = time.perf_counter() - t0
    images, seconds = base.generate_encoded(
        ctx.generator, g, cfg.image, [r["prompt"] for r in rows], [r["seed"] for r in rows],
        negative_prompts=[r["negative_prompt"] for r in rows],
        init_images=[refs[r["reference"]].image() for r in rows] if ra else None, strength=cfg.reference.strength)
    record_timing(build_id, unit.id, len(rows), seconds, expansion_seconds)
    gen = ctx.generator
    pipeline = gen.img2img_pipe().__class__.__name__ if ra else None
    samples = []
    for i, (r, data) in enumerate(zip(rows, images, strict=True)):
        prompting = dict(r["prompting"])
        if "expansion" in needs:
            prompting.update(expansion_model=ctx.text.model_id, expansion_revision=ctx.text.revision)
        if ra:
            ref = refs[r["reference"]]
            prompting.update(init_image=ref.id, init_image_sha256=ref.sha256)
        prompting = {k: prompting.get(k) for k, _ in PROMPTING}
        meta = GenBenchBuilder.provenance(
            key=r["key"], build=build_id, unit=unit.id, config=p["config"],
            label=p["class"], label_index=p["label_index"], strategy=p["strategy"], prompt=r["prompt"],
            negative_prompt=r["negative_prompt"], seed=r["seed"], steps=g.steps, guidance=g.guidance,
            width=g.width, height=g.height, generator=g.provenance(gen, pipeline, index=i, count=len(rows)),
            prompting=prompting, source=g.model,
            kept=True, review=None)
        samples.append(Sample(key=r["key"], image=data, ext=cfg.image.format, cls=p["label_index"], meta=meta))
    return samples


@BUILDERS.register("genbench")
class GenBenchBuilder(base.Builder):
    description = (
        "Generated training images for image classification: K shots per class of a downstream dataset, "
        "one config per prompt strategy (simple template, defined templates, category enhancement, "
        "restrictive description, negative prompts, retrieval augmented), after GenBench (Li et al., 2023). "
        "Score them with CLER: `gensets report genbench`.")
    citation = CITATION
    Config = GenBenchConfig
    Context = Context
    split = "train"
    fields = FIELDS

    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)

    def config_names(self, cfg: GenBenchConfig) -> list[str]:
        """One published config per (dataset, strategy), each with a train split."""
        return [config_name(cfg.dataset_name, s) for s in cfg.strategies]

    def class_names(self, cfg: GenBenchConfig) -> list[str]:
        return list(cfg.class_names)

    def card_body(self, cfg: GenBenchConfig, manifest: dict, samples: list) -> str:
        return card_body(cfg, manifest, samples)
