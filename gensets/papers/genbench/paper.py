"""GenBench (Li et al. 2023) as gensets declares it: its builder and prompt strategies, report, published
numbers and table."""

from __future__ import annotations

from ...sources.packaged import genbench_published
from ..base import Paper
from .tables import TABLE


def published() -> list[dict]:
    return [{"name": f"genbench:table-{key}", "description": t.get("caption", "")}
            for key, t in genbench_published().get("tables", {}).items()]


PAPER = Paper("genbench", "Li et al., GenBench (arXiv:2307.13697)",
              modules=tuple(f"gensets.papers.genbench.{m}" for m in ("builder", "strategies", "baselines", "report")),
              tables=(TABLE,), published=published)
