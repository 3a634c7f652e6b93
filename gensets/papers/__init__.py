"""One folder per paper: its builder(s), report(s), paper-only statistics and ``gensets reproduce`` tables, declared
by the folder's ``paper.py`` as a :class:`~gensets.papers.base.Paper` and listed here in
:data:`~gensets.registry.PAPERS` (a ``"module:attr"`` target each, imported when first asked for). The engine
(builders/, evaluation/) never imports a paper; ``gensets list`` and ``gensets reproduce`` read the registry.

A paper outside gensets is a plugin package (the entry-point group ``gensets.plugins``, :func:`gensets.registry.load_plugins`)
whose module registers it as it is imported: ``PAPERS.register("toy", PAPER)``.

- ``imagenet_d``: ImageNet-D (Zhang et al. 2024), its builder, report, released-dataset reader, label space and
  ``imagenet-d-table``.
- ``genbench``: GenBench (Li et al. 2023), its builder, prompt strategies, baselines, TI stage, report and analysis,
  ``genbench-table2``.
- ``borji``: Borji (2022), the recognition and VQA builders and reports, ``borji-fig2`` and ``borji-vqa``.
- ``wiles``: failure-mode discovery (Wiles et al. 2022), its staged builder, statistics (clustering, Fisher /
  binomial) and report.
"""

from ..registry import PAPERS

for _name in ("imagenet_d", "genbench", "borji", "wiles"):
    PAPERS.register(_name.replace("_", "-"), f"gensets.papers.{_name}.paper:PAPER")
