"""The batches of a split, decoded and prepared for the models in worker processes.

Batch ``b`` holds records ``[b * size, (b + 1) * size)`` of the split (after ``--limit``), whatever the number of
worker or evaluation processes. For a split of tar shards a batch is read by offset (:func:`data.index_split`,
:func:`data.read_records`), decoded and passed through each bound protocol's ``prepare`` in a worker process of
a torch ``DataLoader`` (``workers`` of them; 0: in this process), and handed back in batch order: every model sees
the same batches, so the rows equal a one-process, one-thread run's. Under ``accelerate launch`` process ``r`` of
``n`` takes batches ``r, r + n, ...``; the runner gathers the rows back into batch order. A split without shards
(a Hub dataset streamed by ``datasets``) is read and prepared in this process; one of image files (``Split.entries``
and ``Split.read``: the released ImageNet-D) is read as shards are, by its entries.

Workers are forked, so they inherit the loaded protocols instead of pickling models; ``prepare`` runs there on
the CPU (torch gives each worker one thread) and returns tensors or other picklable values, which the
``DataLoader`` pins for a non-blocking copy when the models run on CUDA (``pin_memory``).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import GensetsError
from .data import Split, index_split, read_records

MAX_DEFAULT_WORKERS = 16


def default_workers(world: int = 1) -> int:
    """Decoding processes per evaluation process: the cores this process may use, shared by the ``world``
    evaluation processes, less one for the process that runs the models (at least 1, at most 16)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_DEFAULT_WORKERS, cores // max(world, 1) - 1))


Prepared = tuple[int, list[dict], list[Any]]  # (batch index, records without their images, each model's input)


def _prepared(b: int, records: list[dict], prepares: list[Callable]) -> Prepared:
    images = [r.pop("image") for r in records]  # a model gets its image through prepare, sent back once
    return b, records, [prepare(images) for prepare in prepares]


class BatchReader:
    """A map-style dataset for torch's ``DataLoader``: item ``i`` is batch ``batches[i]`` of ``entries``, read,
    decoded and prepared. A GensetsError (a bad image or member) is returned, not raised, so that the main
    process raises it as it is: one line, not a worker's traceback."""

    def __init__(self, entries: list, size: int, batches: list[int], prepares: list[Callable],
                 read: Callable[[list], list[dict]] = read_records):
        self.entries, self.size, self.batches, self.prepares, self.read = entries, size, batches, prepares, read

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Prepared | GensetsError:
        b = self.batches[i]
        try:
            return _prepared(b, self.read(self.entries[b * self.size:(b + 1) * self.size]), self.prepares)
        except GensetsError as e:
            return e


def _as_is(item):
    return item


class SplitBatches:
    """The batches of one split: ``first()`` (its first record, to bind the protocols), then ``prepared(...)``."""

    def __init__(self, split: Split, size: int, limit: int | None):
        self.split, self.size, self.limit = split, size, limit
        self.read = read_records if split.shards is not None else split.read
        if split.shards is not None or split.entries is not None:
            self.entries: list | None = index_split(split) if split.shards is not None else list(split.entries)
            self.n: int | None = len(self.entries)  # the split's size, before --limit
            self.entries = self.entries[:limit] if limit else self.entries
        else:
            self.entries, self.n = None, split.n
            self._stream = self._streamed()
            self._head: list[list[dict]] = []

    def _streamed(self) -> Iterator[list[dict]]:
        records = self.split.records()
        it = itertools.islice(records, self.limit) if self.limit else records
        while batch := list(itertools.islice(it, self.size)):
            yield batch

    @property
    def total(self) -> int | None:
        """Images to score, when known up front (the progress bar)."""
        if self.entries is not None:
            return len(self.entries)
        return min(self.n, self.limit) if self.n and self.limit else (self.n or self.limit)

    def first(self) -> dict | None:
        """The split's first record; the whole first batch is read and checked, so that bad data fails before the
        models load (the loader reads it again: one batch more per split)."""
        if self.entries is not None:
            return self.read(self.entries[:self.size])[0] if self.entries else None
        if not self._head:
            self._head = [b for b in [next(self._stream, None)] if b]
        return self._head[0][0] if self._head else None

    def prepared(self, prepares: list[Callable], *, rank: int = 0, world: int = 1, workers: int = 0,
                 pin_memory: bool = False) -> Iterator[Prepared]:
        """This process's batches (``b % world == rank``) in order, each ``(b, records, inputs)``: records
        without their images, ``inputs[j]`` the images as ``prepares[j]`` prepared them."""
        if self.entries is None:
            for b, batch in enumerate(itertools.chain(self._head, self._stream)):
                if b % world == rank:
                    yield _prepared(b, batch, prepares)
            return
        import torch

        mine = list(range(rank, -(-len(self.entries) // self.size), world))
        workers = min(workers, len(mine))
        context = "fork" if workers and "fork" in multiprocessing.get_all_start_methods() else None
        loader = torch.utils.data.DataLoader(
            BatchReader(self.entries, self.size, mine, prepares, self.read), batch_size=None, shuffle=False,
            num_workers=workers, collate_fn=_as_is, pin_memory=pin_memory, multiprocessing_context=context)
        for item in loader:
            if isinstance(item, GensetsError):
                raise item
            yield item
