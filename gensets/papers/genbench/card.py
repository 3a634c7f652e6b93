"""The GenBench card's "How it was built" section: dataset, strategies and their prompts, seeds, cost."""

from __future__ import annotations

from ...cards.markdown import table
from ...registry import STRATEGIES
from .config import GenBenchConfig, config_name, custom_keys, prompts_per_class, selected
from .cost import cost_section
from .strategies import describe

VARIANT_TEXT = {
    "authors": "the authors' code (github.com/Luodian/GenBench, generation_utils.py `sampling_images`)",
    "gensets-v1": "gensets' earlier readings, kept as a named variant (simple template `a photo of a {}`, RD and NP on it, 10 sampled "
                  "other class names, flan-t5 CE)",
}


def _sampling(cfg: GenBenchConfig) -> str:
    if cfg.sampling == "rounds":
        return ("every shot draws its own prompt: a strategy's prompt pool is shuffled once per round of shots, each "
                "round under its own seed (`prompting.draw_seed`)")
    order = ("shuffled once for every class, as the authors' code" if cfg.shuffle == "once"
             else "shuffled per class (`shuffle: per-class`, gensets' reading)")
    return (f"as the authors' code: {prompts_per_class(cfg)} prompts per class (the pool repeated, {order}, under "
            f"`prompting.draw_seed`, cut; CE: that many distinct sentences), {cfg.images_per_prompt} images each")


def card_body(cfg: GenBenchConfig, manifest: dict, samples: list) -> str:
    g = cfg.generator
    gen = samples[0].meta["generator"] if samples else {}
    first = {}
    for s in samples:
        first.setdefault(s.meta["strategy"], s.meta)
    rows = []
    for st in cfg.strategies:
        m = first.get(st, {})
        cell = (m.get("prompt") or "-").replace("|", "\\|")
        neg = (m.get("negative_prompt") or "(none)").replace("|", "\\|")
        parts = cfg.parts(st)
        rows.append([f"`{config_name(cfg.dataset_name, st)}`", st, parts[0], describe(parts), f"`{cell}`",
                     f"`{neg[:120]}{'...' if len(neg) > 120 else ''}`",
                     manifest["counts"].get(config_name(cfg.dataset_name, st), 0)])
    # every registered strategy any of them is made of, in table order
    used = {p for st in cfg.strategies for p in cfg.parts(st)}
    details = [line for name in STRATEGIES.names() if name in used and (line := STRATEGIES.get(name)().details(cfg))]
    own = custom_keys(cfg)
    variant = (f"`{cfg.variant}`: {VARIANT_TEXT[cfg.variant]}"
               + (f"; set otherwise here: {', '.join(f'`{k}`' for k in own)}" if own else ""))
    stored = f", stored at {cfg.resize}x{cfg.resize} (bicubic)" if cfg.resize else ""
    return f"""
- Classes: {len(selected(cfg))} of the {len(cfg.class_names)} classes of `{cfg.dataset}` (metric {cfg.metric}),
  {cfg.shots} generated shots per class and strategy, label ids as in the dataset.
- Generator: `{g.model}` (id `{gen.get('id')}`, revision `{gen.get('revision')}`), scheduler
  `{gen.get('scheduler')}`, {g.steps} steps, guidance {g.guidance}, {g.width}x{g.height}{stored}, base seed {cfg.seed}.
- Prompt variant {variant}. Every image records it (`prompting.variant`) with its strategy and prompt source.
- Seeds: every image's seed is derived from (base seed, dataset, strategy, class, shot). Prompts: {_sampling(cfg)}.
  A strategy named without a prompt source builds on `{cfg.builds_on}` (RA on ST).

{table(["config", "strategy", "prompt source", "what", "example prompt", "negative prompt", "images"], rows)}

{chr(10).join(details)}

### Cost

{cost_section(cfg, manifest, samples)}

Score the strategies with CLER (and CLIP zero-shot, a linear probe, FD/KID/precision/recall):
`gensets report genbench WORKSPACE --test <real test images>`.
"""
