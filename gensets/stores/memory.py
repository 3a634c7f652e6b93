"""``memory://``: fsspec's in-process memory filesystem (tests; one process only). No bucket to look for, no
conditional replacement."""

from __future__ import annotations

from gensets.store import Store


class MemoryStore(Store):
    def _look_for_bucket(self, bucket: str) -> None:
        return None
