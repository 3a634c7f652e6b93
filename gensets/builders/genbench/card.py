"""The GenBench card's "How it was built" section: dataset, strategies and their prompts, seeds, cost."""

from __future__ import annotations

from ...cards.markdown import table
from ...registry import STRATEGIES
from .config import GenBenchConfig, config_name, selected
from .cost import cost_section


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
        rows.append([f"`{config_name(cfg.dataset_name, st)}`", st, STRATEGIES.get(st).description, f"`{cell}`",
                     f"`{neg[:120]}{'...' if len(neg) > 120 else ''}`",
                     manifest["counts"].get(config_name(cfg.dataset_name, st), 0)])
    # the simple template first (the other strategies build on it), then each strategy used, in table order
    used = [name for name in STRATEGIES.names() if name in cfg.strategies and name != "ST"]
    details = [line for name in ("ST", *used) if (line := STRATEGIES.get(name)().details(cfg))]
    return f"""
- Classes: {len(selected(cfg))} of the {len(cfg.class_names)} classes of `{cfg.dataset}` (metric {cfg.metric}),
  {cfg.shots} generated shots per class and strategy, label ids as in the dataset.
- Generator: `{g.model}` (id `{gen.get('id')}`, revision `{gen.get('revision')}`), scheduler
  `{gen.get('scheduler')}`, {g.steps} steps, guidance {g.guidance}, {g.width}x{g.height}, base seed {cfg.seed}.
- Seeds: every image's seed is derived from (base seed, dataset, strategy, class, shot). A strategy's
  prompt pool is shuffled once per round of shots, each round under its own seed (`prompting.draw_seed`),
  so when K exceeds the prompts a strategy yields, prompts are drawn again.

{table(["config", "strategy", "what", "example prompt", "negative prompt", "images"], rows)}

{chr(10).join(details)}

### Cost

{cost_section(cfg, manifest, samples)}

Score the strategies with CLER (and CLIP zero-shot, a linear probe, FD/KID/precision/recall):
`gensets report genbench WORKSPACE --test <real test images>`.
"""
