"""The one door for writes: every file gensets writes goes through here, and the rules are enforced once.

- The target is inside the folder the command owns (:func:`gensets.safety.writable_inside`: relative, no ``..``,
  no symlink below the root, the file itself included).
- An existing output folder is reused only if gensets made it (:func:`claim`: it holds :data:`MARKER`, naming
  the command that made it) or it is empty; a user's non-empty folder is refused in one line.
- No symlink or FIFO is followed or replaced: refused along the path and at the file, and the temporary file is
  opened ``O_NOFOLLOW``.
- A file is written whole or not at all (:func:`atomic_open`: a temporary sibling, fsynced, renamed, the folder
  fsynced), and a set of files that belong together (``report.md`` + ``report.json`` + figures) is published
  together (:func:`files`: all staged in a private folder inside the root, every target checked, then renamed
  into place; on any failure before that nothing is touched and the staged files are removed).
- A file copied from a folder gensets reads (a workspace's ``environments/``) is read as a regular file inside
  that folder (:func:`copy_in`): a symlink out of it is refused, not copied.

Every refusal is a :class:`~gensets.errors.DataError`: one line naming the path; a folder that is not there, a
:class:`~gensets.errors.GensetsError` (exit 2) naming it; a full disk (or a quota, a file size limit), a DataError
naming the file being written (:func:`naming`), never a bare ``[Errno 28]``.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import DataError, GensetsError
from .safety import file_kind, inside, parts_of, read_regular, writable_inside

MARKER = ".gensets-output"  # in a folder gensets made for a command's output: the command that made it


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    """The temporary sibling a writer uses before the atomic rename (``.<name>.tmp-<pid>``; see
    gensets.shards.clean_temp)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def replace(src, dst) -> None:
    """``src`` renamed over ``dst`` (a file or a folder, on one filesystem): the one rename gensets does."""
    os.replace(src, dst)


def remove_tree(path) -> None:
    """A folder gensets made (a staging or cache folder) removed, whatever is left in it."""
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def atomic_open(path):
    """A binary file that appears at ``path`` whole or not at all: written to :func:`temp_name`, fsynced,
    renamed over ``path``, the folder fsynced; on any failure the temp file is removed and ``path`` is left as it
    was. Something other than a regular file at the temporary name (a symlink a hostile folder placed there, a
    FIFO) is a DataError, neither written through nor removed. (``path`` itself is replaced, never followed:
    callers refuse a symlink there first, :func:`writable_inside` / :func:`no_symlink`, or use :func:`write_file`.)"""
    path = Path(path)
    tmp = temp_name(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o644)
    except FileNotFoundError:  # the folder is not there (a typo in --output): the user's path, not the temporary
        folder = path.parent if str(path.parent) else Path(".")
        raise GensetsError(f"{path}: no such folder {folder}; make it first, or write elsewhere") from None
    except OSError as e:
        raise DataError(f"{tmp}: cannot write it ({e.strerror or e}; a symlink or FIFO there is refused)") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # a device (O_TRUNC left it alone): not ours to remove
        os.close(fd)
        raise DataError(f"{tmp}: {file_kind(mode)}, not a regular file; refusing to write it")
    try:
        with naming(path), os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the file this opened (a regular file, by name: nothing else was there)
        raise
    fsync_dir(path.parent if str(path.parent) else ".")


FULL = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space within your disk quota",
        errno.EFBIG: "raise the file size limit (ulimit -f) or write elsewhere"}  # and then, what to do


@contextmanager
def naming(path):
    """A write to ``path`` that the disk cannot take (no space left, a quota, a file size limit): a DataError
    naming ``path`` (the OSError names no file), said while the write is still whole or not at all."""
    try:
        yield
    except OSError as e:
        if e.errno not in FULL:
            raise
        raise DataError(f"{path}: cannot write it: {e.strerror or e} (errno {errno.errorcode[e.errno]}); nothing "
                        f"of it was written: {FULL[e.errno]}, then run the same command again") from None


def _target(path: Path, what: str) -> Path:
    """``path`` when nothing or a regular file is there (it may be replaced); DataError for a symlink (neither
    followed nor replaced), a FIFO, a folder, a device."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return path
    if stat.S_ISLNK(mode):
        raise DataError(f"{path}: {what} is a symlink (to {os.readlink(path)!r}); refusing to follow or replace it")
    if not stat.S_ISREG(mode):
        raise DataError(f"{path}: {what} is {file_kind(mode)}, not a regular file; refusing to write over it")
    return path


def _text(data: bytes | str) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def write_file(path, data: bytes | str, what: str = "the file") -> Path:
    """``data`` (str: UTF-8) written whole to ``path`` (:func:`atomic_open`), refusing a symlink, a FIFO or a
    folder at ``path``; the path."""
    path = _target(Path(path), what)
    with atomic_open(path) as f:
        f.write(_text(data))
    return path


def write_inside(root, rel, data: bytes | str, where: str | None = None) -> Path:
    """``data`` written whole to ``root/rel``: no symlink below ``root`` along the way (:func:`writable_inside`),
    none or a regular file at the target; the folders between made. The path."""
    path = writable_inside(root, rel, where)
    _mkdirs(Path(root), path.parent)
    return write_file(path, data)


def copy_in(src_root, rel, dst, where: str | None = None) -> Path:
    """``src_root/rel`` (read from data: a regular file inside ``src_root``, no symlink out of it) copied whole to
    ``dst`` (no symlink there); ``dst``."""
    data = read_regular(inside(src_root, rel, where), where)
    return write_file(dst, data)


def _mkdirs(root: Path, folder: Path) -> None:
    """The folders from ``root`` down to ``folder`` made, none of them a symlink (checked by the caller)."""
    if folder != root and not folder.is_relative_to(root):
        raise DataError(f"{folder}: not inside {root}; refusing to write there")
    folder.mkdir(parents=True, exist_ok=True)


def claim(root, made_by: str, own: tuple = ()) -> Path:
    """``root`` as a command's output folder: made (with :data:`MARKER` naming ``made_by``) when missing or
    empty, reused when gensets made it; DataError, in one line, for a file there or a non-empty folder gensets did
    not make, so nothing of a user's folder is written over. ``own``: names of files the command itself keeps in
    the folder (its results database): a folder holding only those is as good as empty."""
    if claimable(root, made_by, own):
        return Path(root)
    Path(root).mkdir(parents=True, exist_ok=True)
    write_file(Path(root) / MARKER, f"{made_by}\n", "the output marker")
    return Path(root)


def claimable(root, made_by: str, own: tuple = ()) -> bool:
    """:func:`claim`'s check alone, nothing made (a command checks its output folder before it works for an
    hour): True when gensets made ``root``, False when it is missing or empty (or holds only ``own``); DataError
    otherwise."""
    root = Path(root)
    if root.is_symlink() and not root.exists():
        raise DataError(f"{root}: a dangling symlink; refusing to write {made_by}'s output through it")
    if root.exists():
        if not root.is_dir():
            raise DataError(f"{root}: not a folder; refusing to write {made_by}'s output there")
        marker = root / MARKER
        if marker.is_file() and not marker.is_symlink():
            return True
        if any(p.name not in own or not p.is_file() or p.is_symlink() for p in root.iterdir()):
            raise DataError(f"{root}: a non-empty folder gensets did not make (no {MARKER}); refusing to write "
                            f"{made_by}'s output into it; choose a new or empty folder")
    return False


class Files:
    """The files of one set, staged (see :func:`files`): ``write`` / ``open`` a file, ``path`` for a writer that
    wants a path (matplotlib), ``remove`` a file of the root at the commit."""

    def __init__(self, root: Path, stage: Path):
        self.root, self.stage = root, stage
        self.written: list[str] = []
        self.removed: list[str] = []

    def path(self, rel) -> Path:
        """Where ``rel`` is staged (its folders made): a path in a folder this process made, to write once."""
        parts = parts_of(rel, self.root)
        rel = "/".join(parts)
        if rel not in self.written:
            self.written.append(rel)
        path = self.stage.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def write(self, rel, data: bytes | str) -> Path:
        """``data`` (str: UTF-8) staged as ``rel``; the path it will have in the root."""
        with self.open(rel) as f:
            f.write(_text(data))
        return self.root / rel

    @contextmanager
    def open(self, rel):
        """``rel`` staged, opened for writing in binary."""
        with naming(self.root / rel), open(self.path(rel), "wb") as f:
            yield f

    def remove(self, rel) -> None:
        """``rel`` of the root removed at the commit (when it is not written again)."""
        self.removed.append("/".join(parts_of(rel, self.root)))

    def _commit(self) -> None:
        # a staged name that was never written (a figure not drawn) is not published
        targets = {rel: _target(writable_inside(self.root, rel), rel) for rel in self.written
                   if (self.stage / rel).is_file()}
        gone = [_target(writable_inside(self.root, rel), rel) for rel in self.removed if rel not in targets]
        for path in gone:  # every check passed: now the set changes, file by file
            path.unlink(missing_ok=True)
        folders = set()
        for rel, path in targets.items():
            _mkdirs(self.root, path.parent)
            os.replace(self.stage / rel, path)
            folders.add(path.parent)
        for folder in sorted(folders | {p.parent for p in gone if p.parent.is_dir()}):  # a figure's folder
            fsync_dir(folder)  # may not exist: nothing was there to remove


@contextmanager
def files(root, made_by: str | None = None):
    """A set of files published together into ``root``: ``with files(root, "gensets report vqa") as out:
    out.write("report.md", text)``. ``made_by``: ``root`` is the command's output folder, :func:`claim` ed first;
    None: ``root`` is a folder the caller already owns (a workspace's ``dataset/``). Everything is staged in a
    private folder inside ``root``; at the end every target is checked (inside, no symlink, nothing but a regular
    file) and only then renamed into place. On a failure before that nothing in ``root`` changes, the staged
    files are removed, and a folder :func:`claim` made for this set is removed again."""
    root = Path(root)
    made = not root.exists()
    if made_by is not None:
        claim(root, made_by)
    elif not root.is_dir():
        raise DataError(f"{root}: no such folder; nothing written")
    stage = Path(tempfile.mkdtemp(prefix=f".gensets-stage-{os.getpid()}-", dir=root))
    try:
        out = Files(root, stage)
        yield out
        out._commit()
    except BaseException:
        if made:
            remove_tree(root)
        raise
    finally:
        remove_tree(stage)
