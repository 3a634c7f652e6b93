"""gensets' cache folder: $GENSETS_CACHE, default ~/.cache/gensets (tiny models, measured timings)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("GENSETS_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "gensets"
