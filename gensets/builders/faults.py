"""The tests' fault hooks for a build's workers, injected: :func:`injected` reads the test variables once, when a
worker is made, and gives ``None`` in a real build, so that no production unit calls into this module.

The hooks reach worker processes (accelerate ranks, Ray actors on other nodes) through the environment, which is
what every kind of worker inherits from the test that starts the build.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..shards.writer import temp_name

FAULT = "GENSETS_TEST_EXIT_UNIT"
"""``<unit id>:<file>``: the first attempt at that unit (the file does not exist yet: it is created) leaves a
temporary shard cut short and ends its process with ``os._exit``, as a worker killed mid-write does; on a URL
workspace it first uploads a shard cut short under the unit's name, with no marker, as a worker killed between its
shard and its marker would leave it."""

GATE = "GENSETS_TEST_GATE"
"""A folder. A worker, its models loaded, says it is ready (``<folder>/rank-<rank>``, holding its process id) and
waits for ``<folder>/go`` before its first unit: a test that must see every worker started (before it removes a
node) does not depend on how long a worker takes to start on a loaded machine."""


class Faults:
    """What the test variables asked for, read once."""

    def __init__(self, gate: str | None, fault: str | None):
        self.gate, self.gated = gate, False
        self.target, _, self.marker = (fault or "").partition(":")

    def before_unit(self, rank: int) -> None:
        """Before a worker's first unit: the start gate (:data:`GATE`)."""
        if self.gated or not self.gate:
            return
        self.gated = True
        import time

        ready, part = Path(self.gate, f"rank-{rank}"), Path(self.gate, f"rank-{rank}.part")
        part.write_text(str(os.getpid()))
        part.replace(ready)  # whole when seen
        deadline = time.monotonic() + 600
        while not Path(self.gate, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)

    def before_shard(self, unit_id: str, path: Path, store=None) -> None:
        """Before a unit's shard is written: the worker's death (:data:`FAULT`), at the named unit's first attempt."""
        if unit_id != self.target or not self.marker:
            return
        try:
            open(self.marker, "x").close()  # the first attempt only
        except FileExistsError:
            return
        temp_name(path).write_bytes(b"cut short")  # what a writer killed mid-shard leaves
        if store is not None and store.remote:  # an object store: the object a cut upload leaves
            store.write(f"candidates/{path.name}", b"cut short")
        os._exit(70)


def injected() -> Faults | None:
    """The hooks the test variables ask for; ``None`` when neither is set (every real build)."""
    gate, fault = os.environ.get(GATE), os.environ.get(FAULT)
    return Faults(gate, fault) if gate or fault else None
