"""Append-only JSON-lines manifests, atomic JSON files, and clean-up after a killed writer."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

from gensets import recordio
from gensets.errors import DataError
from gensets.output import naming
from gensets.safety import open_regular
from gensets.shards.writer import atomic_open, canonical_json

_TAIL = 1 << 20  # a torn line is at most one row: look this far back for the last newline


class Manifest:
    """A JSON-lines file that several processes may append to at once.

    Each `append` is one `os.write` of one complete line on an O_APPEND descriptor, under an
    exclusive flock, followed by fsync. A line torn by a kill (no trailing newline) is ignored
    by `rows()` and cut off by the next `append` before it writes.
    """

    def __init__(self, path: str | os.PathLike, check=None):
        self.path = Path(path)
        self.check = check  # check(row, "file:line") -> row, or DataError: what a reader needs of each row

    def append(self, row: dict) -> None:
        if not isinstance(row, dict):
            raise TypeError(f"manifest rows are dicts, got {type(row).__name__}")
        line = canonical_json(row) + b"\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a symlink (it would append to, and cut, the file it leads to)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise DataError(f"{self.path}: cannot open the manifest to append ({e.strerror or e}; a symlink "
                            "is refused)") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DataError(f"{self.path}: the manifest is not a regular file; refusing to append to it")
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by close
            self._cut_torn_tail(fd)
            with naming(self.path):  # a full disk names the manifest (a short write leaves a torn line, cut later)
                written = os.write(fd, line)
                os.fsync(fd)
            if written != len(line):
                raise OSError(f"{self.path}: short write ({written} of {len(line)} bytes)")
        finally:
            os.close(fd)

    def _cut_torn_tail(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        start = max(0, size - _TAIL)
        cut = os.pread(fd, size - start, start).rfind(b"\n")
        if cut < 0 and start > 0:
            raise DataError(f"{self.path}: last line is over {_TAIL} bytes long and unterminated")
        os.ftruncate(fd, start + cut + 1)

    def rows(self) -> list[dict]:
        """All complete rows, in file order; [] if the file does not exist yet."""
        return list(self.iter_rows())

    def iter_rows(self):
        """The complete rows one at a time, in file order (a manifest of a million rows is never all in memory);
        nothing if the file does not exist yet. A last line without its newline (torn by a kill) is ignored."""
        if not os.path.lexists(self.path):
            return
        f = open_regular(self.path)  # a FIFO or a device is refused, not read forever
        with f:
            for lineno, line in enumerate(f, 1):
                if not line.endswith(b"\n"):
                    return  # a torn last line
                if not line.strip():
                    continue
                try:
                    row = recordio.loads(line, f"{self.path}:{lineno}")
                except DataError as e:
                    raise DataError(f"{self.path}: line {lineno}: malformed manifest line ({str(e)[:200]})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{self.path}: line {lineno}: manifest line is not a JSON object")
                yield self.check(row, f"{self.path}:{lineno}") if self.check else row

    def done(self, field: str = "unit") -> set[str]:
        """The values of `field` over all rows that have it (e.g. the units already written)."""
        return {str(row[field]) for row in self.iter_rows() if field in row}


def check_candidate_row(row: dict, where: str) -> dict:
    """A row of ``candidates/manifest.jsonl`` as a build wrote it (the candidate row schema of
    :mod:`gensets.schemas`, through :mod:`gensets.recordio`): DataError naming ``where`` (``file:line``), the key
    and the problem otherwise."""
    return recordio.check(row, "CandidateRow", where)


def read_dataset_manifest(path: str | os.PathLike, where: str | None = None) -> dict:
    """A dataset's ``manifest.json`` as ``gensets finalize`` writes it (a regular file, of the dataset manifest
    schema: ``build`` a name, ``counts`` config -> count, ``shards`` a list of {path, config, split, sha256, n,
    nbytes}, the environments that built it). DataError naming the file and key for one that is not, and for a
    ``manifest.json`` that is a symlink out of its dataset folder (what publish and eval refuse)."""
    path = Path(path)
    return recordio.read(path.name, "DatasetManifest", root=path.parent, where=where)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write canonical JSON (sorted keys, indent 1, utf-8, final newline) via temp + fsync + rename."""
    path = Path(path)
    data = json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False).encode("utf-8") + b"\n"
    with atomic_open(path) as f:
        f.write(data)


def is_temp(name: str) -> bool:
    return name.startswith(".") and ".tmp-" in name


def clean_temp(dir: str | os.PathLike) -> list[Path]:
    """Remove the `.<name>.tmp-<pid>` files a killed writer left anywhere under `dir`.

    Call it on resume, before any writer starts (it would also remove a live writer's temp file).
    Returns the removed paths.
    """
    removed = []
    for folder, _dirs, files in os.walk(dir):
        for name in sorted(files):
            if is_temp(name) and name.split(".tmp-")[-1].isdigit():  # .<name>.tmp-<pid>, what writers leave
                p = Path(folder) / name
                p.unlink(missing_ok=True)
                removed.append(p)
    return removed
