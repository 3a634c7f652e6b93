"""Containment: a path that comes from data (a manifest, a dataset card, a sample's metadata, a publish target's
files) stays inside its root, and a file read as data is a regular file.

- :func:`inside`: ``root/rel`` for a relative path read from data, refusing an absolute path, a ``..`` that
  leaves ``root`` and a symlink anywhere along the way that leads out of it.
- :func:`writable_inside`: the same for a path written (or deleted) inside ``root``: no symlink at all below
  ``root`` along the way, so a write neither follows one out nor replaces one.
- :func:`open_regular` / :func:`check_regular`: open (or check) a file only when it is a regular file: a FIFO,
  a device or a symlink to ``/dev/zero`` is refused instead of blocking or never ending. The file is opened
  non-blocking and checked with ``fstat`` on the descriptor, so it cannot be swapped between check and read.
- :func:`csv_cell` / :func:`csv_value`: a text cell of a CSV file gensets writes never starts a spreadsheet
  formula (a leading quote), and the quote is taken off again when gensets reads the file back.

Writes go through :mod:`gensets.output` (the one door for writes), records (JSON) are read through
:mod:`gensets.recordio` (the one door for records); both use these checks.

Every refusal is a :class:`~gensets.errors.DataError`: one line naming the path and, when given, where it was
read (``where``: ``file:line`` or ``file: key``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from .errors import DataError


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, by its ``st_mode``, as an error names it ("a FIFO", ...)."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink")):
        if test(mode):
            return name
    return "not a regular file"


def _at(where: str | None) -> str:
    return f" (from {where})" if where else ""


def parts_of(rel, root, where: str | None = None) -> tuple[str, ...]:
    """The components of ``rel``, a relative path read from data: DataError for an absolute path, a Windows
    drive, a ``..`` component, an empty path or a control character."""
    text = os.fspath(rel) if isinstance(rel, str | os.PathLike) else None
    if not isinstance(text, str) or not text or not text.isprintable():
        raise DataError(f"{root}: path {str(rel)[:200]!r}{_at(where)} is not a relative path inside it; refusing it")
    norm = text.replace("\\", "/")
    parts = tuple(p for p in PurePosixPath(norm).parts if p != ".")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":") or ".." in parts or not parts:
        raise DataError(f"{root}: path {text[:200]!r}{_at(where)} leads out of it (absolute or '..'); "
                        "refusing it")
    return parts


def inside(root, rel, where: str | None = None) -> Path:
    """``root/rel`` for ``rel`` read from data: relative, no ``..``, and no symlink along the way that leads out
    of ``root`` (a symlink that stays inside is followed). DataError otherwise."""
    root = Path(root)
    path = root.joinpath(*parts_of(rel, root, where))
    try:
        real = path.resolve()
        base = root.resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise DataError(f"{path}{_at(where)}: cannot resolve ({e}); refusing it") from None
    if not real.is_relative_to(base):
        raise DataError(f"{path}{_at(where)}: a symlink along the way leads out of {root}; refusing it")
    return path


def writable_inside(root, rel, where: str | None = None) -> Path:
    """``root/rel`` for a file written or deleted inside ``root``: as :func:`inside`, and no component below
    ``root`` (the file itself included) is a symlink, so a write neither follows one nor replaces one."""
    root = Path(root)
    parts = parts_of(rel, root, where)
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise DataError(f"{path}{_at(where)}: a symlink inside {root}; refusing to write through or over it")
    return path


def no_symlink(path, what: str = "") -> Path:
    """``path`` itself when it is not a symlink (it may not exist); DataError naming ``what`` it is otherwise."""
    path = Path(path)
    if path.is_symlink():
        raise DataError(f"{path}: {what or 'a file'} is a symlink (to {os.readlink(path)!r}); refusing to follow "
                        "or replace it")
    return path


def check_regular(path, where: str | None = None) -> Path:
    """``path`` when it is a regular file (a symlink to one counts); DataError for a FIFO, a device, a folder,
    a socket, a symlink to one of them, or a missing file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"{os.fspath(path)}{_at(where)}: no such file") from None
    except OSError as e:
        raise DataError(f"{os.fspath(path)}{_at(where)}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"{os.fspath(path)}{_at(where)}: {file_kind(st.st_mode)}, not a regular file; refusing to "
                        "read it")
    return Path(path)


def open_regular(path, where: str | None = None):
    """``path`` opened for reading in binary, when it is a regular file (checked on the open descriptor: a FIFO
    is opened without blocking and refused); DataError otherwise, naming the path."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise DataError(f"{os.fspath(path)}{_at(where)}: no such file") from None
    except OSError as e:
        raise DataError(f"{os.fspath(path)}{_at(where)}: cannot open ({e.strerror or e})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DataError(f"{os.fspath(path)}{_at(where)}: {file_kind(mode)}, not a regular file; refusing to "
                            "read it")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path, where: str | None = None) -> bytes:
    """The bytes of a regular file (:func:`open_regular`)."""
    with open_regular(path, where) as f:
        return f.read()


def read_text(path, where: str | None = None) -> str:
    """The UTF-8 text of a regular file (:func:`open_regular`); DataError naming it if it is not UTF-8."""
    try:
        return read_regular(path, where).decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{os.fspath(path)}{_at(where)}: not UTF-8 text ({e})") from None


FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet may run a cell starting with one (OWASP)


def csv_cell(value: str) -> str:
    """``value`` safe to open in a spreadsheet: a leading quote when it starts a formula (or is a quote)."""
    return f"'{value}" if value.startswith((*FORMULA, "'")) else value


def csv_value(cell: str) -> str:
    """The inverse of :func:`csv_cell`."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith((*FORMULA, "'")) else cell
