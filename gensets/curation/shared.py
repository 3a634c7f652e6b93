"""Many processes, one state.duckdb: who holds it, and waiting for it in one line.

DuckDB lets one process at a time open a database file (a read-write process excludes every other). So no
gensets process keeps state.duckdb from another: the review commands and ``finalize`` hold it for their moment;
``gensets review serve`` keeps it between requests (a decision then costs no opening) but gives it up when asked
(:func:`ask_release`). A process that finds it held asks a recorded server once, then retries for a while
(:func:`gensets.curation.state.connect`); when the wait is noticeable it says so in one line naming the holder,
never DuckDB's own message. A running review server records itself in the workspace's ``.review-server.json``
(pid, URL, the key that asks it to give the database up; mode 0600; removed when it stops), so that line, and
``gensets review invite``'s link, can name it. The record travels with a copied or shared workspace, so an entry
is believed only when its process is this user's ``gensets review serve`` of this very workspace and its URL an
address of this machine (:func:`_untrusted`); any other is ignored, with a one-line note, and dropped when a server
registers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from .. import notices, recordio
from ..errors import DataError

RECORD = ".review-server.json"  # the running review servers of a workspace: [{pid, url, started, release}]
RELEASE_PATH = "/internal/release"  # where a server is asked to give state.duckdb up
RELEASE_HEADER = "X-Gensets-Release"  # with the key it recorded
ASK_TIMEOUT_S = 2.0
_PID = re.compile(r"\(PID (\d+)\)")


def is_lock_conflict(message: str) -> bool:
    """DuckDB's error when another process holds the file ("Could not set lock ... Conflicting lock")."""
    return "lock" in message.lower()


def holder_pid(message: str) -> int | None:
    """The pid DuckDB names in its lock-conflict message, if any."""
    m = _PID.search(message)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _record_file(root: Path):
    """The record file, opened without following a symlink and locked (fcntl) while it is read and rewritten: two
    servers starting together both end up in it."""
    import fcntl
    import stat

    path = root / RECORD
    try:  # non-blocking: a FIFO is opened and refused, never waited on
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as e:  # a folder, a symlink, no permission: named, one line
        raise DataError(f"{path}: cannot open the review-server record ({e.strerror or e}); remove it") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError(f"{path}: not a regular file (a FIFO or a device); remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def _read(fd, root: Path) -> list[dict]:
    """The live servers of a record that are what they say (a server killed with SIGKILL left its entry: a dead
    pid is dropped; an entry :func:`_untrusted` names a reason for is ignored, with a note)."""
    data = os.pread(fd, (1 << 16) + 1, 0)
    # the review-server schema (gensets.recordio): a pid, a URL without control characters (it is printed), a
    # release key; a record that is not is named in one line, with the field
    rows = recordio.parse(data or b"[]", "ReviewServers", str(root / RECORD))
    rows = [r for r in rows if _alive(r["pid"])]
    kept = []
    for r in rows:
        why = _untrusted(root, r)
        if why is None:
            kept.append(r)
        elif (r["pid"], str(r.get("url"))) not in _noted:
            _noted.add((r["pid"], str(r.get("url"))))
            notices.notice(f"note: {root / RECORD}: ignored the entry of pid {r['pid']} "
                           f"({str(r.get('url'))[:80]!r}): {why}")
    return kept


_noted: set = set()  # entries already noted as ignored (a wait asks again and again)


def _untrusted(root: Path, row: dict) -> str | None:
    """Why a record entry is not believed, or None: its process must be this user's ``gensets review serve`` of
    the workspace at ``root`` (read from /proc), and its URL's host an address of this machine."""
    from urllib.parse import urlsplit

    pid = row["pid"]
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return "its process is another user's"
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return "its process cannot be read"
    start = next((i + 1 for i, a in enumerate(argv[:4]) if a == "gensets.cli" or Path(a).name == "gensets"), None)
    here = root.resolve()
    if start is None or argv[start:start + 2] != ["review", "serve"] \
            or not any((cwd / a).resolve() == here for a in argv[start + 2:] if not a.startswith("-")):
        return "its process is no gensets review server of this workspace"
    try:
        u = urlsplit(str(row.get("url")))
        local = u.scheme == "http" and u.port is not None and _local_host(u.hostname or "")
    except ValueError:
        local = False
    return None if local else "its URL is no http address of this machine"


def _local_host(host: str) -> bool:
    """``host`` is loopback, every address (0.0.0.0, ::) or an IP address of this machine (one a socket can be
    bound to); a name other than localhost is not looked up."""
    import ipaddress
    import socket

    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if ip.is_loopback or ip.is_unspecified:
        return True
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((host, 0))  # only an address of this machine can be bound (nothing is sent)
    except OSError:
        return False
    return True


def _write(fd, rows: list[dict]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(rows, indent=1).encode() + b"\n", 0)


def register(root: Path, url: str, release: str) -> None:
    """Record this process as a review server of the workspace at ``root`` answering at ``url``, which gives the
    database up to whoever shows ``release`` (:func:`ask_release`)."""
    import time

    with _record_file(root) as fd:
        rows = [r for r in _read(fd, root) if r["pid"] != os.getpid()]
        _write(fd, rows + [{"pid": os.getpid(), "url": url, "started": int(time.time()), "release": release}])


def unregister(root: Path) -> None:
    """Take this process out of the record; the file goes with the last server."""
    try:
        with _record_file(root) as fd:
            rows = [r for r in _read(fd, root) if r["pid"] != os.getpid()]
            if rows:
                _write(fd, rows)
            else:
                os.unlink(root / RECORD)
    except (OSError, DataError):  # a record made unreadable meanwhile: nothing of ours left to take out
        pass


def servers(root: Path) -> list[dict]:
    """The review servers running on the workspace at ``root`` (pid, url), as recorded and believed (:func:`_read`);
    [] when none."""
    path = root / RECORD
    if not path.is_file() or path.is_symlink():
        return []
    try:
        with _record_file(root) as fd:
            return _read(fd, root)
    except OSError:
        return []


def describe(root: Path, pid: int | None) -> str:
    """Who holds state.duckdb, for one line: a recorded review server with its URL, else the command line of
    the process (Linux), else its pid."""
    if pid is None:
        return "another process"
    for s in servers(root):
        if s["pid"] == pid:
            return f"gensets review serve (pid {pid}, {s.get('url')})"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = []
    if "gensets.cli" in argv or any(Path(a).name == "gensets" for a in argv[:2]):
        start = next(i for i, a in enumerate(argv) if a == "gensets.cli" or Path(a).name == "gensets") + 1
        return f"gensets {' '.join(argv[start:start + 2])} (pid {pid})"
    return f"process {pid}"


def ask_release(root: Path, pid: int | None) -> bool:
    """Ask the review server ``pid`` (as recorded) to give state.duckdb up: it keeps it open between requests,
    so that a decision costs no opening. False when ``pid`` is no recorded server or it could not be asked (it
    then gives it up once idle)."""
    import urllib.request
    from urllib.parse import urlsplit

    server = next((s for s in servers(root) if s["pid"] == pid and s.get("release")), None)
    if server is None:
        return False
    try:
        u = urlsplit(str(server.get("url")))
        # bound to every address: asked on loopback
        netloc = {"0.0.0.0": f"127.0.0.1:{u.port}", "::": f"[::1]:{u.port}"}.get(u.hostname or "", u.netloc)
        req = urllib.request.Request(f"http://{netloc}{RELEASE_PATH}", data=b"", method="POST",
                                     headers={RELEASE_HEADER: str(server["release"])})
        with _no_proxy().open(req, timeout=ASK_TIMEOUT_S) as r:
            return r.status == 204
    except (OSError, ValueError):
        return False


def _no_proxy():
    """An opener that goes straight to the server (an http_proxy of the environment would not reach loopback)."""
    import urllib.request

    return urllib.request.build_opener(urllib.request.ProxyHandler({}))
