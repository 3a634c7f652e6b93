"""The failure-modes builder: a staged builder over gensets.builders.runner."""

from __future__ import annotations

from ...builders import base
from ...cards.markdown import table
from ...registry import BUILDERS
from . import prompts
from .analysis import analyze
from .config import CLUSTER_RULE, STAGES, FailureModesConfig
from .stages import FIELD_DOCS, FIELDS, NAME, Context, plan, run_unit


@BUILDERS.register(NAME)
class FailureModesBuilder(base.Builder):
    description = ("Images that a classifier gets wrong, found by failure-mode discovery after Wiles et al., "
                   "'Discovering Bugs in Vision Models using Off-the-shelf Image Generation and Captioning' "
                   "(2022): generated images per label are classified, the misclassified ones clustered and "
                   "captioned, and images regenerated from each caption tested for a higher failure rate.")
    citation = """
@article{wiles2022discovering,
  title   = {Discovering Bugs in Vision Models using Off-the-shelf Image Generation and Captioning},
  author  = {Wiles, Olivia and Albuquerque, Isabela and Gowal, Sven},
  journal = {arXiv preprint arXiv:2208.08831},
  year    = {2022}
}"""
    Config = FailureModesConfig
    Context = Context
    stages = STAGES
    fields = FIELDS
    field_docs = FIELD_DOCS

    plan = staticmethod(plan)
    run_unit = staticmethod(run_unit)

    def planned_images(self, cfg) -> list[tuple[tuple[str, int], ...]]:
        """The baseline, and at most ``clustering.max_k`` failure modes per label regenerated (a mode is a cluster
        of at least ``clustering.min_size`` of the label's images)."""
        labels, per_label = ("labels", len(cfg.labels)), cfg.images_per_label
        modes = min(cfg.clustering.max_k, per_label // cfg.clustering.min_size)
        return [(labels, ("images_per_label", per_label)),
                (labels, ("clustering.max_k", modes), ("images_per_mode", cfg.images_per_mode or per_label))]


    def work(self, unit) -> base.Work | None:
        """A baseline unit (the later stages are planned from its results): its images, scored by the classifier."""
        p = unit.payload
        if p["stage"] != "baseline":
            return None
        return base.Work({"baseline": p["images"][1] - p["images"][0]}, p["generator"], surrogates=1,
                         models=(("classifier under test", p["classifier"]),))

    def check_prompts(self, unit, ctx) -> None:
        """The baseline and regenerate stages (a unit: one prompt); the clusters stage generates nothing."""
        if unit.payload["stage"] != "clusters":
            base.check_prompts(ctx.generator, ctx.cfg.generator, [unit.payload["prompt"]])

    def after_build(self, ws) -> None:
        analyze(ws)

    def selected_against(self, cfg: FailureModesConfig) -> list[str]:
        return [cfg.classifier]

    def config_names(self, cfg: FailureModesConfig) -> list[str]:
        return ["baseline", "modes"]

    def class_names(self, cfg: FailureModesConfig) -> list[str]:
        return list(cfg.labels)

    def card_body(self, cfg: FailureModesConfig, manifest: dict, samples: list) -> str:
        from collections import Counter

        per_mode = Counter(s.meta["failure_mode"]["id"] for s in samples if s.meta.get("failure_mode"))
        captions = {s.meta["failure_mode"]["id"]: s.meta["failure_mode"]["caption"] for s in samples
                    if s.meta.get("failure_mode")}
        rows = [[m, captions[m], per_mode[m]] for m in sorted(per_mode)]
        g = cfg.generator
        return f"""
Every image here is misclassified by `{cfg.classifier}` (its label's ImageNet class is not in its
top-{cfg.top_k}): an adversarial set for that classifier. Score other classifiers on it with
`gensets eval` to see whether the failures transfer.

- Variant: baseline template `{cfg.template}`, regeneration `{cfg.mode_template}`, top-{cfg.top_k} failures
  (each sample's `json.variant`).
- `baseline`: images of {len(cfg.labels)} label(s) from `{prompts.template_text(cfg)}` (superclass: WordNet 3.0
  grandparent unless the config names one; each sample's `json.superclass`), {cfg.images_per_label} per label,
  generator `{g.model}`, {g.steps} steps, guidance {g.guidance}, {g.width}x{g.height}.
- `modes`: images regenerated ({cfg.images_per_mode} per mode) from `{prompts.mode_template_text(cfg)}`, with
  the description (or caption, by `{cfg.captioner.model}`) of the medoid of a cluster of misclassified images
  (embedded with `{cfg.embedder}`; {CLUSTER_RULE}). Each sample's `json.failure_mode` names its mode.
- Modes are compared with their label's baseline by a one-sided {cfg.test} test, {cfg.correction}-corrected,
  alpha {cfg.alpha}: see `modes.json` and `gensets report failure-modes` in the build's workspace.

{table(["mode", "caption", "misclassified images"], rows) if rows else "(no regenerated image was misclassified)"}
"""
