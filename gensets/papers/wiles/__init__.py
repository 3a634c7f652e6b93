"""Failure-mode discovery (Wiles et al. 2022): generate, classify, cluster the failures, caption, regenerate.

A staged build; each stage's units are planned from the committed shards of the stages before it
(gensets.builders.runner plans stage by stage and skips committed units, so a killed build resumes):

1. ``baseline``   per label, ``images_per_label`` images from ``template`` (the paper's "a realistic
                  photograph of a Persian cat (domestic animal)."; see prompts.py), classified by
                  ``classifier`` over ImageNet-1k: an image fails when its label is not in the top ``top_k``
                  (the paper's 3); the baseline failure rate and confusion counts (failed images by top-1).
                  A unit is a chunk of one label's images.
2. ``clusters``   per label, the misclassified images (named by key and image sha256 in the unit, so
                  the unit's id changes when they do) are embedded with ``embedder``, clustered (rule:
                  gensets.papers.wiles.statistics), every member is captioned with ``captioner``; one
                  record per cluster (its medoid image) keeps the members, all captions, and the
                  medoid's caption as the mode's caption.
3. ``regenerate`` per cluster of at least ``clustering.min_size`` images, ``images_per_mode`` images from
                  ``mode_template`` (the paper's: baseline prompt + " " + the medoid caption's description,
                  "a realistic photograph of a ladybug (insect). it is in a plastic bag."), classified again.
After the build, ``after_build`` compares every mode with its label's baseline (one-sided Fisher exact
test, Holm-corrected by default), tests each discovered mode's true -> target pairs against the baseline
rate of the same confusion, and writes ``modes.json`` and the ``failure_*`` tables of state.duckdb; every
mode and pair names its variant (template, regeneration, top_k). gensets' earlier prompts ("a realistic
photograph of a {label}", the bare caption) and top-1 are named options (``label-only``, ``caption``,
``top_k: 1``). The paper publishes no number gensets could reproduce (it generated with Imagen). Seeds derive from content: (seed, stage, label, index) and (seed, stage, mode, caption,
index). Published configs: ``baseline`` and ``modes``, the misclassified images of each.

The package: ``config.py``, ``prompts.py`` (the prompts and their variants), ``stages.py`` (plan and run each
stage), ``analysis.py`` (statistics after the build), ``builder.py``.
"""

from .analysis import analyze, tally
from .builder import FailureModesBuilder
from .config import STAGES, FailureModesConfig
from .prompts import label_ids
from .stages import Context, mode_meta, plan, run_unit

__all__ = ["STAGES", "Context", "FailureModesBuilder", "FailureModesConfig", "analyze", "label_ids", "mode_meta",
           "plan", "run_unit", "tally"]
