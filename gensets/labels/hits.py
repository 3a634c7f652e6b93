"""The hit rule shared by the surrogate filter and every evaluation protocol."""

from __future__ import annotations

from collections.abc import Sequence


def hit(top_indices: Sequence[int], target_ids: Sequence[int], k: int = 1) -> bool:
    """True when any of ``target_ids`` is among the first ``k`` of ``top_indices``."""
    return not set(int(i) for i in top_indices[:k]).isdisjoint(int(t) for t in target_ids)
