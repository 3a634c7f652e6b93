"""Workspaces on object storage (``--out s3://bucket/prefix``, ``gs://...``, ``memory://`` in tests), through fsspec.

A URL workspace keeps the store as the truth and a local cache folder for what must be a local file:

    <url>/config.yaml                           the frozen config (written once, conditionally)
    <url>/environments/<id>.json                the environments that built units
    <url>/candidates/<unit>.tar                 a unit's shard, under its content-derived name (the same bytes on
                                                every attempt: a duplicate attempt is harmless; no rename)
    <url>/candidates/_committed/<unit>.json     the commit marker, written LAST: the manifest row, the members'
                                                offsets and each sample's json and cls members (the driver ingests
                                                the unit from it, not from the shard). Readers trust only markers;
                                                a shard without one is an orphan, overwritten by the next attempt
                                                (or removed after a build)
    <url>/dataset/...                           what ``gensets finalize`` wrote
    <url>/_lock.json                            the lease of the command running on it (pid, host, time), created
                                                with a conditional PUT (If-None-Match: *), on S3 renewed and taken
                                                over with If-Match (its holder's last ETag), removed at its end

The local cache (:func:`local_root`: under ``$GENSETS_CACHE/workspaces/``) holds ``state.duckdb``, a
``candidates/manifest.jsonl`` rebuilt from the markers (a fresh driver on another machine starts from them), copies
of the candidate shards read (each downloaded whole, once) and the dataset staged by finalize.

A workspace's storage is one protocol, :class:`WorkspaceStore` (here): a local folder (gensets/stores/local.py) and
every object store implement it, and the workspace asks it whatever differs. :class:`Store` here is the object stores'
side, for every scheme (the workspace on objects: commit markers, sync, mirror, the dataset pushed and pulled, the
lease of gensets/lease.py); a scheme's class, in gensets/stores/, gives what differs (S3's conditional writes, the
client package to import, how a bucket is looked for), registered in :data:`gensets.registry.STORES` (the built-in
schemes declared in gensets/stores/__init__.py): a new store is one file, ``@STORES.register("toy") class
ToyStore(Store)``. ``Store(url)`` is the class of the URL's scheme.

Credentials and endpoints come only from where the store's client library looks (``AWS_*`` variables and AWS config
files, ``AWS_ENDPOINT_URL`` for S3-compatible stores, GCS's); nothing here writes them anywhere. fsspec and its
backends are imported only when a URL is given.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import hashlib
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import ClassVar

from .cache import cache_root
from .errors import DataError, GensetsError, Unavailable
from .lease import LEASE_RENEW, LEASE_TTL, LOCK, check, hold  # noqa: F401 - LEASE_*: the lease's, named here too
from .output import replace, write_inside
from .registry import STORES
from .shards import Manifest
from .shards.markers import check_marker, marker, marker_index, read_marker

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
COMMITTED = "candidates/_committed"
RETRIES = (1.0, 2.0, 4.0)  # seconds before each new try of a read or write that did not reach the store (an outage)
log = logging.getLogger(__name__)


def is_url(value) -> bool:
    """Whether ``value`` names a workspace on a store (``scheme://...``) rather than a local path."""
    return isinstance(value, str) and bool(_URL.match(value))


def normalize(url: str) -> str:
    """``url`` checked (a known scheme, a bucket, no credentials in it) and without a trailing slash."""
    scheme = _URL.match(url).group(1).lower()
    if scheme == "hf":  # fsspec has it (huggingface_hub's HfFileSystem), but as a workspace it cannot work
        raise GensetsError(f"{url}: a Hugging Face Hub repo is not a workspace (every write is a commit, rate-limited, "
                           "with no create-only write for the lease); build into a folder or a bucket, then "
                           "`gensets publish WORKSPACE --repo ORG/NAME` puts the finalized dataset on the Hub")
    if scheme not in STORES:
        raise GensetsError(f"{url}: unknown storage scheme {scheme + '://'!r} (known: "
                           f"{', '.join(s + '://' for s in STORES.names())}, or a local path)")
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
    key = hashlib.sha256(f"{url}\n{os.environ.get('AWS_ENDPOINT_URL', '')}".encode()).hexdigest()[:20]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[1])[-60:].strip("-.")
    return cache_root() / "workspaces" / f"{tail}-{key}"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__


def _drop(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.CRITICAL


def _quiet(name: str) -> None:
    """The logger ``name`` (a store client's) shows nothing below CRITICAL: gensets says what failed, once."""
    logger = logging.getLogger(name)
    if _drop not in logger.filters:
        logger.addFilter(_drop)


def _quiet_loop(fs) -> None:
    """An fsspec filesystem's event loop (s3fs's, gcsfs's: one per process, in a thread of its own) no longer logs a
    task that failed because the store could not be reached ("Task exception was never retrieved", a traceback
    each, forwarded from every Ray worker while an endpoint resets connections): the request that task served
    failed too, and :meth:`Store._retry` says so in one line. Any other such exception is logged as asyncio would."""
    loop = getattr(fs, "loop", None)
    if loop is None or getattr(loop.get_exception_handler(), "gensets", False):
        return

    def handler(loop, context) -> None:
        e = context.get("exception")
        if isinstance(e, (ConnectionError, TimeoutError)) or (
                e is not None and type(e).__module__.startswith("aiohttp") and "Connection" in type(e).__name__):
            return
        loop.default_exception_handler(context)

    handler.gensets = True
    loop.set_exception_handler(handler)


class Unreachable(Unavailable):
    """The store did not answer (a connection refused or cut, a timeout): worth trying again."""


class WorkspaceStore(abc.ABC):
    """Where a workspace's files are kept, and all that differs between the places it may be: one class per kind of
    place (gensets/stores/local.py: :class:`~gensets.stores.local.LocalFolder`, a folder, the workspace itself;
    :class:`Store` here: any object store, one subclass per URL scheme in gensets/stores/). A
    :class:`~gensets.workspace.Workspace` holds one and calls it; neither the workspace, the runner nor the backends
    ask which it is. ``ws`` below is the workspace (its paths: ``ws.config_path``, ``ws.candidates``, ...).

    On a folder the methods that only a store needs do nothing: the folder is the truth, written in place."""

    remote: ClassVar[bool] = False
    """Whether the truth is elsewhere (a URL): :attr:`root` is then only its local cache."""
    root: Path
    """The local folder the workspace's files are read from and written to first: the workspace, or a store's cache
    (:func:`local_root`)."""

    @abc.abstractmethod
    def url_of(self, rel: str) -> str:
        """The file or object ``rel`` of the workspace as the user would name it (``rel`` empty: the workspace)."""

    @abc.abstractmethod
    def is_new(self) -> bool:
        """Whether the workspace's folder does not exist yet (a build that makes it may remove it on failure)."""

    @abc.abstractmethod
    def has_build(self, ws) -> bool:
        """Anything built: state.duckdb, or on a store the manifest rebuilt from the markers."""

    @abc.abstractmethod
    def check_bucket(self) -> None:
        """GensetsError naming the workspace when the place that holds it (a bucket) is not there."""

    @abc.abstractmethod
    def refuse_foreign(self, ws) -> None:
        """GensetsError when the workspace is not new, not empty and not a workspace (``build --out`` of the wrong
        folder or prefix)."""

    @abc.abstractmethod
    def pull_config(self, ws, fresh: bool = False) -> None:
        """The workspace's config.yaml into :attr:`root` (``fresh``: read again even if there)."""

    @abc.abstractmethod
    def publish_config(self, data: bytes) -> bool:
        """The frozen config, written at :attr:`root`, made the workspace's: False when another one was, meanwhile."""

    @abc.abstractmethod
    def share_environment(self, ws, rel: str) -> None:
        """The environment record ``rel``, written at :attr:`root`, made the workspace's (before any unit it built
        is)."""

    @abc.abstractmethod
    def lock(self, ws, what: str):
        """A context manager holding the workspace's lock while ``what`` runs; Busy, in one line, while another
        command holds it."""

    @abc.abstractmethod
    def holder(self, ws) -> str | None:
        """Who holds the workspace's lock now (``build (pid N)``), or None: nobody, or not asked."""

    @abc.abstractmethod
    def check_lease(self) -> None:
        """Busy when the lock this process held was taken over by another command, before anything more is
        committed."""

    @abc.abstractmethod
    def sync(self, ws) -> int:
        """The local manifest made the workspace's committed units; their number (0: the folder is the truth)."""

    @abc.abstractmethod
    def fetch_candidate(self, shard: str, path: Path) -> None:
        """The committed candidate shard ``shard`` made a file at ``path`` (``candidates/<shard>`` of :attr:`root`)."""

    @abc.abstractmethod
    def commit(self, path: Path, row: dict) -> None:
        """A unit's shard, written at ``path``, and its manifest row ``row`` made the workspace's: the unit is done."""

    @abc.abstractmethod
    def check_committed_shard(self, shard: str, path: Path) -> None:
        """DataError unless what the workspace committed of ``shard`` is what the copy at ``path`` holds."""

    @abc.abstractmethod
    def marker_indexes(self, ws):
        """How ingest reads an uncached unit's samples (``f(shards)`` yielding for each its samples, or None: from
        the shard), or None: always from the shard."""

    @abc.abstractmethod
    def check_committed(self, ws) -> None:
        """DataError, before a build says anything is done, when the workspace lost what it committed."""

    @abc.abstractmethod
    def remove_orphans(self) -> list[str]:
        """Remove what attempts that never committed left; what was removed."""

    @abc.abstractmethod
    def mirror(self, dest: Path) -> None:
        """The workspace copied into the folder ``dest`` as a folder workspace has it (``gensets verify``)."""

    @abc.abstractmethod
    def pull_dataset(self, ws) -> Path:
        """The finalized dataset as a local folder; GensetsError when there is none."""

    @abc.abstractmethod
    def push_dataset(self, ws) -> None:
        """The dataset finalize wrote at :attr:`root` made the workspace's."""


class Store(WorkspaceStore):
    """The objects of one workspace URL, by path relative to it (``candidates/x.tar``). ``Store(url)`` makes the
    store of the URL's scheme (:data:`gensets.registry.STORES`); a scheme's class overrides what differs."""

    remote = True
    package: ClassVar[str | None] = None  # the fsspec backend's package, imported first (a one-line error without it)
    conditional: ClassVar[bool] = False  # see put_if: S3's If-Match; the lease relies on it where it is True
    client_loggers: ClassVar[tuple[str, ...]] = ()
    """The client library's loggers whose lines (its own retries, with tracebacks) gensets' lines replace: one per
    retry of :meth:`_retry`, then the one-line error. Not shown (a filter on each, below CRITICAL)."""

    def __new__(cls, url: str):
        if cls is Store:  # the class of the URL's scheme
            scheme = url.split("://", 1)[0].lower()
            if scheme in STORES:
                cls = STORES.get(scheme)
        return super().__new__(cls)

    def __init__(self, url: str):
        self.url = normalize(url)
        self.scheme = self.url.split("://", 1)[0]
        self._fs = None
        self.base = ""

    def filesystem(self):
        """``(fsspec filesystem, the path of the workspace in it)``: by default fsspec's for the URL."""
        import fsspec

        return fsspec.core.url_to_fs(self.url)

    @property
    def fs(self):
        if self._fs is None:
            package = self.package
            try:
                if package:
                    __import__(package)
                for name in self.client_loggers:
                    _quiet(name)
                self._fs, self.base = self.filesystem()
                _quiet_loop(self._fs)
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
            raise Unavailable(f"{self.url_of(rel)}: access denied while {doing} ({_one_line(e)}): wrong credentials, "
                              "or credentials without access to it; check the credentials in the environment") from None
        except Exception as e:  # noqa: BLE001 - the clients raise many types: one line, never a traceback
            name = type(e).__name__
            if "NoCredentials" in name:  # botocore: no key in the environment, the config files or a profile
                raise Unavailable(f"{self.url_of(rel)}: no credentials found while {doing}; give them through the "
                                  "environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)") from None
            if "Endpoint" in name or isinstance(e, (ConnectionError, TimeoutError)):
                raise Unreachable(f"{self.url_of(rel)}: the store cannot be reached while {doing} ({name}: "
                                  f"{_one_line(e)})") from None
            if "Credential" in name:
                raise Unavailable(f"{self.url_of(rel)}: the store cannot be reached while {doing} ({name}: "
                                  f"{_one_line(e)})") from None
            raise DataError(f"{self.url_of(rel)}: {doing} failed ({name}: {_one_line(e)})") from None

    def _retry(self, rel: str, doing: str, call):
        """``call()`` under :meth:`_errors`, tried again after each of :data:`RETRIES` when the store did not answer
        (an outage), each retry one line on the log (stderr); the last failure is the one-line error. Only for
        operations that give the same result when repeated (reads, writes of the same bytes, removals)."""
        for wait in (*RETRIES, None):
            try:
                with self._errors(rel, doing):
                    return call()
            except Unreachable as e:
                if wait is None:
                    raise
                log.warning("%s; trying again in %g s", e, wait)
                time.sleep(wait)

    def check_bucket(self) -> None:
        """GensetsError naming the URL when its bucket does not exist (or cannot be reached)."""
        bucket = self.path("").split("/", 1)[0]
        self._retry("", "looking for its bucket", lambda: self._look_for_bucket(bucket))

    def _look_for_bucket(self, bucket: str) -> None:
        """FileNotFoundError when ``bucket`` is not there (a scheme's class may ask its service more directly)."""
        if not self.fs.exists(bucket):
            raise FileNotFoundError("the specified bucket does not exist")

    def exists(self, rel: str) -> bool:
        return self._retry(rel, "looking for it", lambda: self.fs.exists(self.path(rel)))

    def read(self, rel: str) -> bytes:
        return self._retry(rel, "reading it", lambda: self.fs.cat_file(self.path(rel)))

    def read_many(self, rels: list[str]) -> dict[str, bytes]:
        if not rels:
            return {}
        got = self._retry(rels[0], "reading it", lambda: self.fs.cat([self.path(r) for r in rels], on_error="raise"))
        return {r: got[self.path(r)] for r in rels}

    def read_batches(self, rels: list[str], batch: int = 256):
        """``(rel, bytes)`` of each of ``rels`` in order, read ``batch`` at a time, concurrently: memory holds one
        batch, however many objects (a build's commit markers) there are."""
        for i in range(0, len(rels), batch):
            got = self.read_many(rels[i:i + batch])
            yield from ((r, got[r]) for r in rels[i:i + batch])

    def write(self, rel: str, data: bytes) -> None:
        self._retry(rel, "writing it", lambda: self.fs.pipe_file(self.path(rel), data))

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
        self._retry(rel, "uploading it", lambda: self.fs.put_file(os.fspath(local), self.path(rel)))

    def get(self, rel: str, local: str | os.PathLike) -> None:
        """Download ``rel`` whole (one sequential read) to ``local``, atomically."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp = local.with_name(f".{local.name}.tmp-{os.getpid()}")
        try:
            self._retry(rel, "downloading it", lambda: self.fs.get_file(self.path(rel), os.fspath(tmp)))
            os.replace(tmp, local)
        finally:
            tmp.unlink(missing_ok=True)

    def remove(self, rels: list[str]) -> None:
        if rels:
            self._retry(rels[0], "removing it", lambda: self.fs.rm([self.path(r) for r in rels]))

    def list(self, rel: str = "") -> list[str]:
        """Every object under ``rel`` (recursively), as paths relative to the workspace, sorted; a key with an empty,
        '.' or '..' part is left out (copied to a local folder, it would land outside it)."""
        def find():
            self.fs.invalidate_cache()
            return self.fs.find(self.path(rel), detail=False)

        found = self._retry(rel, "listing it", find)
        n = len(self.base) + 1
        return sorted(p[n:] for p in found
                      if p.startswith(self.base + "/") and not {"", ".", ".."} & set(p[n:].split("/")))

    # conditional writes (S3's If-Match / If-None-Match), for the lease: only where ``conditional`` (gensets/stores/s3.py)
    def put_if(self, rel: str, data: bytes, etag: str | None) -> str | None:
        """Write ``rel`` only if it is still the object of ``etag`` (or, None, only if there is none): the written
        object's ETag, or None when the condition failed."""
        raise NotImplementedError(f"{self.scheme}:// has no conditional writes")

    def etag(self, rel: str) -> str | None:
        """The ETag of the object ``rel`` now, or None when there is none."""
        raise NotImplementedError(f"{self.scheme}:// has no ETags")

    def remove_if(self, rel: str, etag: str) -> bool:
        """Remove ``rel`` only if it is still the object of ``etag``; False when it is not."""
        raise NotImplementedError(f"{self.scheme}:// has no conditional writes")

    # the lease: the workspace's lock on a store (gensets/lease.py)
    def lease(self, what: str):
        """A context manager holding the workspace's lease while ``what`` runs (:func:`gensets.lease.hold`)."""
        return hold(self, what)

    def check_lease(self) -> None:
        """Busy, in one line naming the new holder, when the lease this process held on the workspace (:meth:`lease`)
        was taken over by another driver: before anything more is committed (:func:`gensets.lease.check`)."""
        check(self.url)

    # the workspace on the store (WorkspaceStore): the store is the truth, root its local cache
    @functools.cached_property
    def root(self) -> Path:
        return local_root(self.url)

    def is_new(self) -> bool:
        return False

    def has_build(self, ws) -> bool:
        return ws.state_path.exists() or ws.manifest_path.exists()

    def refuse_foreign(self, ws) -> None:
        self.check_bucket()
        if not self.exists("config.yaml"):
            others = [p for p in self.list() if p != LOCK]
            if others:
                raise GensetsError(f"{self.url}: a prefix that is not a gensets workspace and not empty "
                                   f"(it holds {others[0]!r}{' and more' if len(others) > 1 else ''}); "
                                   "--out names a new or empty prefix, or a workspace")

    def pull_config(self, ws, fresh: bool = False) -> None:
        """The store's config.yaml into the local cache (``fresh``: read again even if cached). A cache whose config
        is not the store's (the store's prefix was emptied, or holds another build now) is dropped."""
        if not fresh and ws.config_path.is_file():
            return
        if not self.exists("config.yaml"):
            if ws.config_path.exists():
                shutil.rmtree(ws.root)  # a cache of what the store no longer holds
            return
        text = self.read("config.yaml")
        if ws.config_path.is_file() and ws.config_path.read_bytes() != text:
            shutil.rmtree(ws.root)
        ws.candidates.mkdir(parents=True, exist_ok=True)
        write_inside(ws.root, "config.yaml", text)

    def publish_config(self, data: bytes) -> bool:
        return self.create("config.yaml", data)  # conditionally: False when another driver's is there

    def share_environment(self, ws, rel: str) -> None:
        self.create(rel, (ws.root / rel).read_bytes())

    def lock(self, ws, what: str):
        return self.lease(what)

    def holder(self, ws) -> str | None:
        return None  # a store's lease is not asked

    def sync(self, ws) -> int:
        """The local manifest.jsonl made the store's commit markers' rows (a unit is done when its marker is there),
        and its environments copied; the number of committed units. A local manifest naming a unit without a marker
        is rebuilt from the markers, and state.duckdb with it."""
        names = [p for p in self.list(COMMITTED) if p.endswith(".json") and p.count("/") == 2]
        units = {p.rsplit("/", 1)[1][:-5]: p for p in names}
        local = Manifest(ws.manifest_path).done("unit") if ws.manifest_path.is_file() else set()
        if local - set(units):
            for p in (ws.manifest_path, ws.state_path, Path(f"{ws.state_path}.wal")):
                p.unlink(missing_ok=True)
            local = set()
        todo = sorted(set(units) - local)
        manifest = Manifest(ws.manifest_path)
        for rel, data in self.read_batches([units[u] for u in todo]):  # todo is sorted: so are the markers
            manifest.append(read_marker(data, self.url_of(rel), rel.rsplit("/", 1)[1][:-5])["row"])
        have = {p.name for p in ws.environments_path.glob("*.json")} if ws.environments_path.is_dir() else set()
        envs = [p for p in self.list("environments") if p.endswith(".json") and p.count("/") == 1]
        for rel, data in self.read_many([p for p in envs if p.split("/")[1] not in have]).items():
            write_inside(ws.root, rel, data, self.url_of(rel))
        return len(units)

    def fetch_candidate(self, shard: str, path: Path) -> None:
        if not path.is_file():  # a copy of the committed object, downloaded whole, once
            self.get(f"candidates/{shard}", path)

    def commit(self, path: Path, row: dict) -> None:
        """Upload the unit's shard written at ``path`` (under its own name), then its commit marker
        (:func:`gensets.shards.markers.marker`): written last, it makes the unit done. Not once the lease this
        process held was taken over by another driver (:meth:`check_lease`)."""
        self.put(path, f"candidates/{row['shard']}")
        body = marker(path, row)
        self.check_lease()  # a driver whose lease another took over commits nothing more (Busy)
        self.write(f"{COMMITTED}/{row['unit']}.json", body)

    def check_committed_shard(self, shard: str, path: Path) -> None:
        """DataError unless the commit marker of ``shard`` says what the copy at ``path`` holds
        (:func:`~gensets.shards.markers.check_marker`): finalize checks each candidate shard it publishes from."""
        rel = f"{COMMITTED}/{shard[:-4]}.json"
        check_marker(read_marker(self.read(rel), self.url_of(rel), shard[:-4]), path, self.url_of(rel))

    def marker_indexes(self, ws):
        return lambda shards: self.committed_indexes(ws, shards)

    def committed_indexes(self, ws, shards: list[str], batch: int = 256):
        """For each of ``shards`` in turn, its samples as :func:`gensets.shards.iter_index` gives them (key, where
        each member lies, the json and cls members), read from the unit's commit marker, so that ingesting a build
        made on other machines downloads kilobytes per unit, not its shard; None for a shard already in the local
        cache (read there) or whose marker lists no ``meta`` (a marker from before it: the shard is read). Markers
        are read ``batch`` at a time, concurrently (:meth:`read_many`). A marker that is not what a worker writes is
        a DataError naming it."""
        for i in range(0, len(shards), batch):
            chunk = shards[i:i + batch]
            want = {s: f"{COMMITTED}/{s[:-4]}.json" for s in chunk if isinstance(s, str) and s.endswith(".tar")
                    and "/" not in s and "\\" not in s and not (ws.candidates / s).is_file()}
            got = self.read_many(list(want.values()))
            for s in chunk:
                yield marker_index(got[want[s]], self.url_of(want[s]), s) if s in want else None

    def check_committed(self, ws) -> None:
        """DataError, before the build says anything is done, when the store no longer holds its config.yaml or the
        commit marker of a unit the local manifest counts as committed (the prefix emptied while the build ran: a
        lifecycle rule, an ``rm``)."""
        have = set(self.list(COMMITTED))
        units = [r["unit"] for r in ws.manifest().iter_rows()]
        gone = [u for u in units if f"{COMMITTED}/{u}.json" not in have]
        config = self.exists("config.yaml")
        if gone or not config:
            lost = ([] if config else ["config.yaml"]) + ([f"{len(gone)} of {len(units)} committed units' markers "
                                                           f"(first {gone[0]})"] if gone else [])
            raise DataError(f"{self.url}: the store lost {' and '.join(lost)} while the build ran (the prefix "
                            "emptied by a lifecycle rule or an rm?); nothing is done there: build into a new prefix, "
                            "or empty this one and build again")

    def remove_orphans(self) -> list[str]:
        """Remove the candidate shards that no commit marker names (a killed worker's, a plan's that changed); the
        removed objects."""
        objects = self.list("candidates")
        committed = {p.rsplit("/", 1)[1][:-5] for p in objects if p.startswith(f"{COMMITTED}/")}
        orphans = [p for p in objects if p.count("/") == 1 and p.endswith(".tar") and p[11:-4] not in committed]
        self.remove(orphans)
        return orphans

    def mirror(self, dest: Path) -> None:
        """The workspace copied into the folder ``dest`` as the local layout has it, for ``gensets verify``: the
        config, environments, the candidate shards the commit markers name with a manifest.jsonl of their rows, and
        dataset/; each object read whole, once. Orphan shards (no marker) are not read: nothing trusts them."""
        objects = self.list()
        markers = [p for p in objects if p.startswith(f"{COMMITTED}/") and p.endswith(".json")]
        manifest = Manifest(dest / "candidates" / "manifest.jsonl")
        (dest / "candidates").mkdir(parents=True, exist_ok=True)
        read = {}
        for rel, data in self.read_batches(sorted(markers)):
            m = read_marker(data, self.url_of(rel), rel.rsplit("/", 1)[1][:-5])
            manifest.append(m["row"])
            read[f"candidates/{m['row']['shard']}"] = (m, self.url_of(rel))
        for rel in objects:
            if rel in read or rel.startswith(("dataset/", "environments/")) or rel == "config.yaml":
                self.get(rel, dest / rel)
            if rel in read:  # what verify then reads of the unit is what its marker says (provenance included)
                check_marker(*read[rel][:1], dest / rel, read[rel][1])

    def pull_dataset(self, ws) -> Path:
        """``<url>/dataset/`` copied into the local cache's dataset/ (each object read whole, once; a file the
        store's dataset does not have is removed); the local folder. GensetsError when there is none."""
        objects = self.list("dataset")
        if "dataset/manifest.json" not in objects:
            raise GensetsError(f"{self.url}: no dataset/manifest.json; run `gensets finalize {self.url}` first")
        tmp = ws.root / f".dataset.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel in objects:
            self.get(rel, tmp / rel[len("dataset/"):])
        if ws.dataset.exists():
            shutil.rmtree(ws.dataset)
        replace(tmp, ws.dataset)
        return ws.dataset

    def push_dataset(self, ws) -> None:
        """The local cache's dataset/ uploaded to ``<url>/dataset/``: every file, manifest.json last, then the
        objects of an older dataset that this one does not have removed."""
        files = sorted(str(p.relative_to(ws.dataset)) for p in ws.dataset.rglob("*") if p.is_file())
        files.sort(key=lambda f: f == "manifest.json")
        for rel in files:
            if rel == "manifest.json":
                self.check_lease()  # finalize's commit: not once another took the lease over (Busy)
            self.put(ws.dataset / rel, f"dataset/{rel}")
        keep = {f"dataset/{rel}" for rel in files}
        self.remove([p for p in self.list("dataset") if p not in keep])
