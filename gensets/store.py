"""Workspaces on object storage (``--out s3://bucket/prefix``, ``gs://...``, ``memory://`` in tests), through fsspec.

A URL workspace keeps the store as the truth and a local cache folder for what must be a local file:

    <url>/config.yaml                           the frozen config (written once, conditionally)
    <url>/environments/<id>.json                the environments that built units
    <url>/candidates/<unit>.tar                 a unit's shard, under its content-derived name (the same bytes on
                                                every attempt: a duplicate attempt is harmless; no rename)
    <url>/candidates/_committed/<unit>.json     the commit marker, written LAST: the manifest row and the members'
                                                offsets. Readers trust only markers; a shard without one is an
                                                orphan, overwritten by the next attempt (or removed after a build)
    <url>/dataset/...                           what ``gensets finalize`` wrote
    <url>/_lock.json                            the lease of the command running on it (pid, host, time), created
                                                with a conditional PUT (If-None-Match: *) and removed at its end

The local cache (:func:`local_root`: under ``$GENSETS_CACHE/workspaces/``) holds ``state.duckdb``, a
``candidates/manifest.jsonl`` rebuilt from the markers (a fresh driver on another machine starts from them), copies
of the candidate shards read (each downloaded whole, once) and the dataset staged by finalize.

Credentials and endpoints come only from where the store's client library looks (``AWS_*`` variables and AWS config
files, ``AWS_ENDPOINT_URL`` for S3-compatible stores, GCS's); nothing here writes them anywhere. fsspec and its
backends are imported only when a URL is given.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import threading
import time
from pathlib import Path

from .errors import Busy, DataError, GensetsError, Unavailable

SCHEMES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "memory": None}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
COMMITTED = "candidates/_committed"
LOCK = "_lock.json"
LEASE_TTL = 300.0  # a lease not renewed for this long (its holder gone) may be taken over
LEASE_RENEW = 60.0


def is_url(value) -> bool:
    """Whether ``value`` names a workspace on a store (``scheme://...``) rather than a local path."""
    return isinstance(value, str) and bool(_URL.match(value))


def normalize(url: str) -> str:
    """``url`` checked (a known scheme, a bucket, no credentials in it) and without a trailing slash."""
    scheme = _URL.match(url).group(1).lower()
    if scheme not in SCHEMES:
        raise GensetsError(f"{url}: unknown storage scheme {scheme + '://'!r} (known: "
                           f"{', '.join(s + '://' for s in SCHEMES)}, or a local path)")
    rest = url[len(scheme) + 3:].strip("/")
    bucket = rest.split("/", 1)[0]
    if not bucket:
        raise GensetsError(f"{url}: no bucket in the URL (expected {scheme}://BUCKET/PREFIX)")
    if "@" in bucket or ":" in bucket:  # s3://KEY:SECRET@bucket: credentials never go in a URL (it is printed)
        raise GensetsError(f"{scheme}://...: credentials or a port in the URL are refused; give credentials and "
                           "endpoints through the environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...)")
    if any(p in (".", "..") for p in rest.split("/")):
        raise GensetsError(f"{url}: '.' or '..' in the URL")
    return f"{scheme}://{rest}"


def local_root(url: str) -> Path:
    """The local cache folder of the workspace at ``url`` (its state.duckdb, manifest, shard copies): derived from
    the URL and the S3 endpoint (never from credentials)."""
    from .cache import cache_root

    key = hashlib.sha256(f"{url}\n{os.environ.get('AWS_ENDPOINT_URL', '')}".encode()).hexdigest()[:20]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[1])[-60:].strip("-.")
    return cache_root() / "workspaces" / f"{tail}-{key}"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__


class Store:
    """The objects of one workspace URL, by path relative to it (``candidates/x.tar``)."""

    def __init__(self, url: str):
        self.url = normalize(url)
        self.scheme = self.url.split("://", 1)[0]
        self._fs = None
        self.base = ""

    @property
    def fs(self):
        if self._fs is None:
            package = SCHEMES[self.scheme]
            try:
                import fsspec

                if package:
                    __import__(package)
                self._fs, self.base = fsspec.core.url_to_fs(self.url)
            except ImportError as e:
                raise GensetsError(f"{self.url}: needs {package or 'fsspec'} (pip install 'gensets[distributed]'): "
                                   f"{e}") from None
            except Exception as e:  # noqa: BLE001 - a client that cannot start: one line
                raise Unavailable(f"{self.url}: cannot open the store ({_one_line(e)})") from None
            self.base = self.base.rstrip("/")
        return self._fs

    def path(self, rel: str) -> str:
        self.fs  # noqa: B018 - opens the store, which sets base
        return f"{self.base}/{rel}" if rel else self.base

    def url_of(self, rel: str) -> str:
        return f"{self.url}/{rel}" if rel else self.url

    @contextlib.contextmanager
    def _errors(self, rel: str, doing: str):
        """An error of the store as one line naming the object: a missing bucket or denied access is the
        environment's (exit 3); anything else a runtime error."""
        try:
            yield
        except GensetsError:
            raise
        except FileNotFoundError as e:
            if "bucket" in str(e).lower():
                raise GensetsError(f"{self.url}: no such bucket ({_one_line(e)}); create it first, or check "
                                   "the URL and AWS_ENDPOINT_URL") from None
            raise DataError(f"{self.url_of(rel)}: not found while it was {doing}") from None
        except PermissionError as e:
            raise Unavailable(f"{self.url_of(rel)}: access denied while {doing} ({_one_line(e)}); check the "
                              "credentials in the environment") from None
        except Exception as e:  # noqa: BLE001 - the clients raise many types: one line, never a traceback
            name = type(e).__name__
            if "Credential" in name or "Endpoint" in name or isinstance(e, (ConnectionError, TimeoutError)):
                raise Unavailable(f"{self.url_of(rel)}: the store cannot be reached while {doing} ({name}: "
                                  f"{_one_line(e)})") from None
            raise DataError(f"{self.url_of(rel)}: {doing} failed ({name}: {_one_line(e)})") from None

    def check_bucket(self) -> None:
        """GensetsError naming the URL when its bucket does not exist (or cannot be reached)."""
        if self.scheme == "memory":
            return
        bucket = self.path("").split("/", 1)[0]
        with self._errors("", "looking for its bucket"):
            if not self.fs.exists(bucket):
                raise FileNotFoundError("the specified bucket does not exist")

    def exists(self, rel: str) -> bool:
        with self._errors(rel, "looking for it"):
            return self.fs.exists(self.path(rel))

    def read(self, rel: str) -> bytes:
        with self._errors(rel, "reading it"):
            return self.fs.cat_file(self.path(rel))

    def read_many(self, rels: list[str]) -> dict[str, bytes]:
        if not rels:
            return {}
        with self._errors(rels[0], "reading it"):
            got = self.fs.cat([self.path(r) for r in rels], on_error="raise")
        return {r: got[self.path(r)] for r in rels}

    def write(self, rel: str, data: bytes) -> None:
        with self._errors(rel, "writing it"):
            self.fs.pipe_file(self.path(rel), data)

    def create(self, rel: str, data: bytes) -> bool:
        """Write ``rel`` only if no object has that name (a conditional PUT, If-None-Match: *): False if one has."""
        with self._errors(rel, "creating it"):
            try:
                self.fs.pipe_file(self.path(rel), data, mode="create")
            except FileExistsError:
                return False
            except (TypeError, NotImplementedError):  # a backend without conditional writes: check, then write
                if self.fs.exists(self.path(rel)):
                    return False
                self.fs.pipe_file(self.path(rel), data)
            return True

    def put(self, local: str | os.PathLike, rel: str) -> None:
        with self._errors(rel, "uploading it"):
            self.fs.put_file(os.fspath(local), self.path(rel))

    def get(self, rel: str, local: str | os.PathLike) -> None:
        """Download ``rel`` whole (one sequential read) to ``local``, atomically."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.tmp-{os.getpid()}")
        try:
            with self._errors(rel, "downloading it"):
                self.fs.get_file(self.path(rel), os.fspath(tmp))
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    def remove(self, rels: list[str]) -> None:
        if rels:
            with self._errors(rels[0], "removing it"):
                self.fs.rm([self.path(r) for r in rels])

    def list(self, rel: str = "") -> list[str]:
        """Every object under ``rel`` (recursively), as paths relative to the workspace, sorted; a key with an empty,
        '.' or '..' part is left out (copied to a local folder, it would land outside it)."""
        with self._errors(rel, "listing it"):
            self.fs.invalidate_cache()
            found = self.fs.find(self.path(rel), detail=False)
        n = len(self.base) + 1
        return sorted(p[n:] for p in found
                      if p.startswith(self.base + "/") and not {"", ".", ".."} & set(p[n:].split("/")))

    # the lease: the workspace's lock on a store
    @contextlib.contextmanager
    def lease(self, what: str):
        """Hold the workspace's lease (:data:`LOCK`) while ``what`` runs: created with a conditional PUT, renewed
        every :data:`LEASE_RENEW` s, removed at the end. Another holder's live lease: Busy, in one line naming it.
        A lease of a process that is gone (same host, pid not running) or not renewed for :data:`LEASE_TTL` s is
        taken over."""
        me = {"what": what, "pid": os.getpid(), "host": socket.gethostname()}

        def body() -> bytes:
            return json.dumps({**me, "time": time.time()}, sort_keys=True).encode()

        for _ in range(3):
            if self.create(LOCK, body()):
                break
            try:
                holder = json.loads(self.read(LOCK))
            except (DataError, ValueError):
                holder = {}  # removed meanwhile, or not ours: try again / treat as stale below
            if holder and not _stale(holder):
                raise Busy(f"{self.url}: another gensets {holder.get('what', 'command')} (pid {holder.get('pid')} "
                           f"on {holder.get('host')}) is running on this workspace; wait for it to end (or stop "
                           "it), then run this again")
            self.remove([LOCK])  # a dead holder's lease; the conditional create decides between takers
        else:
            raise Busy(f"{self.url}: could not take the workspace's lease ({self.url_of(LOCK)}); run this again")
        stop = threading.Event()

        def renew():
            while not stop.wait(LEASE_RENEW):
                with contextlib.suppress(GensetsError):
                    self.write(LOCK, body())

        t = threading.Thread(target=renew, daemon=True, name="gensets-lease")
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()
            with contextlib.suppress(GensetsError):
                self.remove([LOCK])


def _stale(holder: dict) -> bool:
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    t = holder.get("time")
    return not isinstance(t, (int, float)) or time.time() - t > LEASE_TTL
