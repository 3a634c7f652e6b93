"""GenBench (Li et al., 2023): K generated training shots per class of a downstream dataset, per prompt strategy.

Classes come from one of the 22 packaged GenBench datasets (gensets/data/genbench/datasets.json: class
names, CLIP templates, group, metric), from any Hugging Face image-classification dataset (the names of
its ClassLabel feature) or from a local folder (one sub-folder per class). The strategies, as the authors' code
(Luodian/GenBench, generation_utils.py) makes them by default (``variant: authors``; strategies.py cites each
line, and where the paper's text differs):

    ST  simple template          the bare class name ("{}")
    DT  defined templates        the dataset's CLIP prompt templates
    CE  category enhancement     mrm8488/t5-base-finetuned-common_gen expands the class name (keytotext style),
                                 sampled; the distinct sentences are the prompts
    RD  restrictive description  DT + ",highly detailed,hires,8k,sharp focus"
    NP  negative prompts         DT, with every other class name of the dataset plus quality negatives
                                 ("((disfigured)), ((bad art)), ...") as the negative prompt
    RA  retrieval augmented      ST, image-to-image from retrieved reference images of the class (a retrieval
                                 source the user names; the evaluated dataset's own images only with
                                 ``reference.allow_dataset_split``, recorded in every sample)

TI (Sec. 4, knowledge injection) is a prompt source whose tokens are trained first: the builder is staged
(``ti`` then ``generate``), ti.py trains a token per class by Textual Inversion on the reference images into the
workspace, and TI units, planned from those embeddings, fill the dataset's templates with ``"<token> <class>"``.

Two data types that are not generated are registered like strategies (baselines.py): ``original`` (K images per
class of the dataset's own training split, a seeded draw) and ``retrieval`` (K per class from a user's pool of
captioned images, ranked by CLIP similarity with the class's queries); they combine with nothing.

Strategies compose: ``NP+RD`` (Table 2's "w/ NP, RD": DT with both), ``CE+RD``, ``ST+NP``: one prompt source (ST,
DT, CE) and modifiers (RD, NP, RA); a modifier alone builds on ``builds_on`` (DT). ``variant: gensets-v1`` keeps
gensets' earlier readings ("a photo of a {}", RD and NP on it, 10 sampled other names, flan-t5 CE, a prompt per shot).

Prompts per class (``sampling: authors``): K / images_per_prompt (16 x 4 at paper scale) prompts, the pool repeated,
shuffled and cut, each prompt giving images_per_prompt images; CE draws its sentences (prompts + 50 samples, the
distinct ones, a seeded sample of them). ``sampling: rounds``: shot i takes entry ``order_r[i mod n]`` of the pool,
a shuffle per round ``r = i div n``. Every seed is recorded (``prompting.draw_seed``, ``expansion_seed``). RA draws
its init image from the class's reference images round by round. One published config per (dataset, strategy),
split ``train``; a work unit is one (strategy, class, chunk of shots).

The package: ``config.py`` (the config), ``strategies.py`` (one registered class per strategy),
``references.py`` (RA's and TI's images), ``ti.py`` (TI's training stage), ``baselines.py`` (original and retrieved data), ``pool.py``
(the retrieval pool), ``fields.py`` (the samples' provenance fields and keys), ``builder.py`` (plan, prompts, run), ``card.py``
and ``cost.py``.

Where the files lie never enters a build: paths in the config stay as written (relative to the config file),
seeds and unit ids know a local dataset or reference folder by its name (:func:`source_name`) and RA's
reference images by path inside the reference folder and sha256, and samples record those, so the same config
and files copied to another directory (paths written relative to the config) build byte-identical shards.
"""

from .builder import Context, GenBenchBuilder, plan, run_unit, unit_prompts
from .config import VARIANTS, GenBenchConfig, config_name, selected
from .strategies import QUALITY_NEGATIVES, RESTRICTIVE, Strategy, draw, fill, keytotext_inputs, parts_of

__all__ = ["VARIANTS", "Context", "GenBenchBuilder", "GenBenchConfig", "QUALITY_NEGATIVES", "RESTRICTIVE", "Strategy",
           "config_name", "draw", "fill", "keytotext_inputs", "parts_of", "plan", "run_unit", "selected",
           "unit_prompts"]
