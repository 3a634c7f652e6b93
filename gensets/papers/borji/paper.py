"""Borji (2022) as gensets declares it: the recognition and VQA builders and reports, published numbers and
tables."""

from __future__ import annotations

from ...sources.packaged import borji_published
from ..base import Paper
from .tables import FIG2, VQA


def published() -> list[dict]:
    d = borji_published()
    return [{"name": f"borji:{key}", "description": f"{len(d[key])} published figures "
             f"({d['paper'][:120]})"} for key in ("recognition", "vqa") if key in d]


PAPER = Paper("borji", "Borji, How good are deep models in understanding the generated images? (arXiv:2208.10760)",
              modules=tuple(f"gensets.papers.borji.{m}"
                            for m in ("recognition", "vqa", "recognition_report", "vqa_report")),
              tables=(FIG2, VQA), published=published)
