"""A local folder: the workspace itself, the truth written in place. Its lock is an advisory file lock (fcntl); what
only an object store needs (sync, commit, the lease's check, publishing the dataset) does nothing here."""

from __future__ import annotations

import fcntl
import os
import stat
from contextlib import contextmanager
from pathlib import Path

from gensets.errors import Busy, GensetsError
from gensets.store import WorkspaceStore


class LocalFolder(WorkspaceStore):
    """The folder ``root``, a workspace (or to be one)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def url_of(self, rel: str) -> str:
        return str(self.root / rel) if rel else str(self.root)

    def is_new(self) -> bool:
        return not self.root.exists()

    def has_build(self, ws) -> bool:
        return ws.state_path.exists()

    def check_bucket(self) -> None:
        return None

    def refuse_foreign(self, ws) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise GensetsError(f"{self.root}: not a folder; --out names a new or empty folder, or a workspace")
        if self.root.is_dir() and not ws.config_path.exists():
            others = sorted(p.name for p in self.root.iterdir() if p.name != ws.lock_path.name)
            if others:
                raise GensetsError(f"{self.root}: a folder that is not a gensets workspace and not empty "
                                   f"(it holds {others[0]!r}{' and more' if len(others) > 1 else ''}); "
                                   "--out names a new or empty folder, or a workspace")

    def pull_config(self, ws, fresh: bool = False) -> None:
        return None

    def publish_config(self, data: bytes) -> bool:
        return True  # written in place already

    def share_environment(self, ws, rel: str) -> None:
        return None

    @contextmanager
    def lock(self, ws, what: str):
        """Hold an advisory lock (fcntl) on the workspace while ``what`` runs: another process that asks for it
        fails at once, in one line naming the workspace and the holder's pid. The lock goes with the process (a
        killed build leaves none); the file keeps the last holder's name, read only while it is held."""
        self.root.mkdir(parents=True, exist_ok=True)
        ws.check_links()
        try:  # never through a symlink: the file is truncated and written below
            fd = os.open(ws.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise GensetsError(f"{ws.lock_path}: cannot open the workspace's lock ({e.strerror or e})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise GensetsError(f"{ws.lock_path}: the workspace's lock is not a regular file; refusing it")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "process"
                raise Busy(f"{self.root}: another gensets {holder} is running on this workspace; "
                           "wait for it to end (or stop it), then run this again") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{what} (pid {os.getpid()})\n".encode(), 0)
            yield
        finally:
            os.close(fd)  # releases the lock

    def holder(self, ws) -> str | None:
        """The lock asked for shared and given back at once: None when it was given, else its holder's name."""
        if not ws.lock_path.is_file():
            return None
        try:
            fd = os.open(ws.lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "process"
        finally:
            os.close(fd)  # releases the shared lock

    def check_lease(self) -> None:
        return None  # the file lock is held to the end

    def sync(self, ws) -> int:
        return 0

    def fetch_candidate(self, shard: str, path: Path) -> None:
        return None

    def commit(self, path: Path, row: dict) -> None:
        return None  # written in place: the runner's manifest row makes the unit done

    def check_committed_shard(self, shard: str, path: Path) -> None:
        return None  # its shards were read whole at ingest

    def marker_indexes(self, ws):
        return None  # ingest reads the shards

    def check_committed(self, ws) -> None:
        return None

    def remove_orphans(self) -> list[str]:
        return []

    def mirror(self, dest: Path) -> None:
        raise GensetsError(f"{self.root}: a folder workspace is read in place, not mirrored")

    def pull_dataset(self, ws) -> Path:
        if not (ws.dataset / "manifest.json").is_file():
            raise GensetsError(f"{self.root}: no dataset/manifest.json; run `gensets finalize {self.root}` first")
        return ws.dataset

    def push_dataset(self, ws) -> None:
        return None
