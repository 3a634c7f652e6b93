"""Append-only JSON-lines manifests, atomic JSON files, and clean-up after a killed writer."""

from __future__ import annotations

import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any

from gensets.errors import DataError
from gensets.safety import open_regular, read_json
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
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"{self.path}: short write ({written} of {len(line)} bytes)")
            os.fsync(fd)
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
                    row = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError) as e:
                    raise DataError(f"{self.path}: line {lineno}: malformed manifest line "
                                    f"({type(e).__name__}: {str(e)[:200]})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{self.path}: line {lineno}: manifest line is not a JSON object")
                yield self.check(row, f"{self.path}:{lineno}") if self.check else row

    def done(self, field: str = "unit") -> set[str]:
        """The values of `field` over all rows that have it (e.g. the units already written)."""
        return {str(row[field]) for row in self.iter_rows() if field in row}


_MAX_N = 1 << 40  # more samples, bytes or images than any real shard or dataset has: a corrupt number


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_N


def _text(v) -> bool:
    return isinstance(v, str) and bool(v) and v.isprintable() and len(v) <= 1000


def _bad(where: str, key: str, v, want: str) -> DataError:
    return DataError(f"{where}: {key}: expected {want}, got {json.dumps(v)[:80] if _plain(v) else type(v).__name__}")


def _plain(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def check_candidate_row(row: dict, where: str) -> dict:
    """A row of ``candidates/manifest.jsonl`` as a build wrote it (what ingest and finalize read of it):
    ``unit``, ``shard`` and ``sha256`` names, ``n`` a count, ``skipped`` a list of {path, reason}; DataError
    naming ``where`` (``file:line``) and the key otherwise."""
    for key in ("unit", "shard", "sha256"):
        if not _text(row.get(key)):
            raise _bad(where, key, row.get(key), "a name")
    for key in ("n", "nbytes", "kept"):
        if (key == "n" or key in row) and not _count(row.get(key)):
            raise _bad(where, key, row.get(key), "a whole number of at least 0")
    skipped = row.get("skipped") or []
    if not isinstance(skipped, list) or not all(
            isinstance(r, dict) and isinstance(r.get("path"), str) and isinstance(r.get("reason"), str)
            for r in skipped):
        raise _bad(where, "skipped", skipped, "a list of {path, reason}")
    return row


def read_dataset_manifest(path: str | os.PathLike, where: str | None = None) -> dict:
    """A dataset's ``manifest.json`` as ``gensets finalize`` writes it (read as a regular file): ``build`` a
    name, ``counts`` config -> count, ``shards`` a list of {path, config, split, sha256, n, nbytes}. DataError
    naming the file (and line, or key) for one that is cut short, foreign or nested too deeply."""
    m = read_json(path, where)
    if not isinstance(m, dict) or "shards" not in m or "build" not in m:
        raise DataError(f"{os.fspath(path)}: not a gensets manifest.json (no build and shards); refusing it")
    if not _text(m["build"]):
        raise _bad(os.fspath(path), "build", m["build"], "a name")
    counts = m.get("counts", {})
    if not isinstance(counts, dict) or not all(_text(k) and _count(v) for k, v in counts.items()):
        raise _bad(os.fspath(path), "counts", counts, "config -> a whole number")
    if not isinstance(m["shards"], list):
        raise _bad(os.fspath(path), "shards", m["shards"], "a list")
    for i, sh in enumerate(m["shards"]):
        if not isinstance(sh, dict):
            raise _bad(os.fspath(path), f"shards[{i}]", sh, "an object")
        for key in ("path", "config", "split", "sha256"):
            if not _text(sh.get(key)):
                raise _bad(os.fspath(path), f"shards[{i}].{key}", sh.get(key), "a name")
        for key in ("n", "nbytes"):
            if not _count(sh.get(key)):
                raise _bad(os.fspath(path), f"shards[{i}].{key}", sh.get(key), "a whole number of at least 0")
    return m


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
