"""Wiles et al. (2022)'s failure-mode discovery as gensets declares it: its staged builder, statistics, report and
published numbers (no reproduce table: the paper generated with Imagen, which gensets cannot run)."""

from __future__ import annotations

from ...sources.packaged import wiles_published
from ..base import Paper


def published() -> list[dict]:
    return [{"name": "failure-modes:figure-5", "description": f"{len(wiles_published()['figure5'])} published "
             "failure rates (Wiles et al. 2022, Figure 5; from the paper's summary)"}]


PAPER = Paper("wiles", "Wiles, Albuquerque, Gowal, Discovering Bugs in Vision Models using Off-the-shelf Image Generation and "
              "Captioning (2022)", modules=("gensets.papers.wiles.builder", "gensets.papers.wiles.report"),
              published=published)
