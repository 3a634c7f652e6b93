"""GenBench (Li et al., 2023): K generated training shots per class of a downstream dataset, per prompt strategy.

Classes come from one of the 22 packaged GenBench datasets (gensets/data/genbench/datasets.json: class
names, CLIP templates, group, metric), from any Hugging Face image-classification dataset (the names of
its ClassLabel feature) or from a local folder (one sub-folder per class). The six prompt strategies:

    ST  simple template          "a photo of a {class}"
    DT  defined templates        the dataset's CLIP prompt templates
    CE  category enhancement     a seq2seq model expands the class name into a sentence (the prompt)
    RD  restrictive description  "a photo of a {class}, ((sharp focus)), ((highly detailed)), ((hires))"
    NP  negative prompts         ST, with a seeded sample of the dataset's other class names plus quality
                                 negatives ("((deformed)), blurry, lowres, ...") as the negative prompt
    RA  retrieval augmented      ST, image-to-image from a real reference image of the class

Every strategy yields a pool of prompts per class (ST, RD, NP, RA: one; DT: the templates; CE: N
expansions, each sampled under its own seed). Shot i of a class takes entry ``order_r[i mod n]`` of the
pool, where ``order_r`` is a shuffle of the pool drawn with the seed of round ``r = i div n``: K <= n gives
a seeded subset without repeats, and when K exceeds the pool the prompts are drawn again, round after
round, each round's seed recorded in the sample (``prompting.draw_seed``). RA draws its init image from
the class's reference images the same way. One published config per (dataset, strategy), split ``train``;
a work unit is one (strategy, class, chunk of shots).

The package: ``config.py`` (the config), ``strategies.py`` (one registered class per strategy),
``references.py`` (RA's images), ``builder.py`` (plan, prompts, run), ``card.py`` and ``cost.py``.

Where the files lie never enters a build: paths in the config stay as written (relative to the config file),
seeds and unit ids know a local dataset or reference folder by its name (:func:`source_name`) and RA's
reference images by path inside the reference folder and sha256, and samples record those, so the same config
and files copied to another directory (paths written relative to the config) build byte-identical shards.
"""

from .builder import Context, GenBenchBuilder, plan, run_unit, unit_prompts
from .config import GenBenchConfig, config_name, selected
from .strategies import QUALITY_NEGATIVES, RESTRICTIVE, Strategy, draw, fill

__all__ = ["Context", "GenBenchBuilder", "GenBenchConfig", "QUALITY_NEGATIVES", "RESTRICTIVE", "Strategy",
           "config_name", "draw", "fill", "plan", "run_unit", "selected", "unit_prompts"]
