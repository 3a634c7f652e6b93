"""What gensets eval and score read: a :class:`Source` (a dataset as the user named it, at a revision) holding
:class:`Split` s (one config's split: its class names and records). Made by gensets.evaluation.data (workspaces,
folders, shard globs, Hub ids) and a paper's released dataset (gensets.registry.RELEASED_DATASETS)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Split:
    config: str
    split: str
    class_names: list[str] | None
    records: Callable[[], Iterator[dict]]
    templates: list[str] | None = None
    n: int | None = None  # when known up front (for the progress bar)
    builder: str | None = None  # the gensets builder that wrote it (its samples' provenance), when known
    shards: list[Path] | None = None  # tar shards: indexed, batches read by any process
    # two-way's wrong option of each image (key -> class index) where the dataset gives it: the released
    # ImageNet-D's questions CSV (a released dataset, registry.RELEASED_DATASETS), named by ``questions``
    wrong_options: dict[str, int] | None = None
    questions: str | None = None
    # a split of image files rather than shards (the released ImageNet-D): ``entries`` its samples in ``records()``
    # order, ``read`` (a module-level function: worker processes call it) any slice of them -> their records
    entries: list | None = None
    read: Callable[[list], list[dict]] | None = None


@dataclass
class Source:
    id: str  # what the user named: a path, a hub id or a glob
    revision: str | None  # hub revision, the build fingerprint of a local gensets folder, or a released folder's digest
    splits: list[Split] = field(default_factory=list)
