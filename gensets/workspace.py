"""A build is a workspace: the frozen config, candidate shards, state.duckdb and the dataset folder."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from . import recordio
from .config import apply_overrides, check_planned, fingerprint, load_config, read_yaml, to_dict
from .errors import Busy, ConfigError, DataError, GensetsError
from .output import replace, write_inside
from .registry import BUILDERS

OWN = ("config.yaml", "candidates", "state.duckdb", "state.duckdb.wal", "dataset", "environments", ".gensets.lock",
       ".review-server.json")
"""A workspace's own entries: none is ever a symlink, and no command writes a file of its own over one."""
_LEFTOVER = re.compile(r"^\.(?:(?:config\.yaml|dataset|state\.snapshot)\.tmp-|dataset\.old-)\d+(?:\.wal)?$")  # what create / finalize leave
_ENV_LEFTOVER = re.compile(r"^\.[0-9a-f]+\.json\.tmp-\d+$")  # what record_environment leaves


def is_workspace(folder: Path) -> bool:
    return (folder / "config.yaml").is_file() and (folder / "candidates").is_dir()


def own_file(path) -> tuple[Path, str] | None:
    """(workspace root, entry) when ``path`` is, or lies inside, one of a workspace's own entries (:data:`OWN`:
    config.yaml, state.duckdb, candidates/, dataset/, environments/, the lock) or is the workspace itself;
    None otherwise."""
    real = Path(os.path.abspath(path))
    try:
        real = real.resolve()
    except (OSError, RuntimeError):
        pass
    for folder in (real, *real.parents):
        if is_workspace(folder):
            if folder == real:
                return folder, "."
            top = real.relative_to(folder).parts[0]
            if top in OWN or top.startswith("state.duckdb"):
                return folder, top
    return None


def refuse_own_file(path, option: str) -> None:
    """GensetsError when an output ``path`` (named by ``option``, e.g. ``--file``) would write over one of a
    workspace's own files (:func:`own_file`)."""
    hit = own_file(path)
    if hit:
        root, entry = hit
        what = "the workspace itself" if entry == "." else f"its {entry}"
        raise GensetsError(f"{path}: {option} is part of the gensets workspace {root} ({what}); "
                           "choose a path outside its own files")


def builder_for(node, source: str):
    """The builder a config names in its ``builder`` key."""
    if not isinstance(node.value, dict) or "builder" not in node.value:
        raise ConfigError(f"{source}:{node.line}: builder: required key is missing "
                          f"(one of: {', '.join(BUILDERS)})")
    b = node.value["builder"]
    if not isinstance(b.value, str) or b.value not in BUILDERS:
        raise ConfigError(f"{source}:{b.line}: builder: unknown builder {b.value!r} "
                          f"(known: {', '.join(BUILDERS)})")
    return BUILDERS.get(b.value)()


def load_build_config(path: str | Path, overrides: tuple[str, ...] | list[str] = (), *, frozen: bool = False):
    """Read, validate and resolve a build config: (builder, frozen config). ``overrides`` are
    ``dotted.key=VALUE`` strings applied before validation (``gensets build --set``). ``frozen``: ``path`` is
    a workspace's config.yaml, resolved already; its input files are neither looked for nor read again."""
    path = Path(path)
    node = read_yaml(path)
    apply_overrides(node, overrides)
    builder = builder_for(node, str(path))
    cfg = load_config(builder.Config, path, node, frozen=frozen)
    if not frozen:
        base = path.resolve().parent
        resolved = getattr(cfg, "resolved", None)
        cfg = resolved(base) if resolved else cfg
        check_planned(builder.planned_images(cfg), path, node)  # a typo'd count: refused before any planning
        # where the config's relative paths lead (imports, reference folders), beside it and not in it: no
        # config field, so neither frozen nor fingerprinted, and a build never depends on where its files lie
        object.__setattr__(cfg, "base_dir", base)
    return builder, cfg


def _marker_index(data: bytes, url: str, shard: str) -> list[dict] | None:
    """The samples of a commit marker (:meth:`Workspace.commit`) as iter_index dicts; None for a marker without
    ``meta``; DataError naming the marker when it is not what a worker writes."""
    def bad(why: str):
        return DataError(f"{url}: not a commit marker gensets wrote ({why})")

    m = read_marker(data, url, shard[:-4] if shard.endswith(".tar") else shard)
    if m.get("meta") is None:
        return None
    members, meta = m["members"], m["meta"]
    if len(members) != len(meta) or len(members) != m["row"]["n"]:
        raise bad("its members and meta are not those of its row's samples")
    out = []
    for e in members:
        key = e["__key__"]
        text = meta.get(key)
        where = {k: v for k, v in e.items() if k != "__key__"}
        if text is None or not where:
            raise bad(f"sample {ascii(key)[:100]}")
        out.append({"__key__": key, "__members__": {k: tuple(v) for k, v in where.items()},
                    "json": text[0].encode("utf-8"), "cls": text[1].encode("utf-8")})
    return out


def read_marker(data: bytes, url: str, unit: str) -> dict:
    """A commit marker's JSON (:meth:`Workspace.commit`) read through :mod:`gensets.recordio` (the commit marker
    schema), and its row that of ``unit`` (its name); DataError naming the marker otherwise."""
    m = recordio.parse(data, "CommitMarker", url)
    if m["row"]["unit"] != unit or m["row"]["shard"] != f"{unit}.tar":
        raise DataError(f"{url}: not a commit marker gensets wrote (its unit and shard are not those of its name)")
    return m


def check_marker(m: dict, path: Path, url: str) -> None:
    """DataError unless the commit marker ``m`` says what the shard at ``path`` holds: its sha256, and each
    sample's members where the marker places them, with the provenance (json) and class (cls) the marker carries.
    Ingest reads a unit's provenance from its marker, so a marker forged beside a true shard (another prompt) is
    caught here, before anything of it is published or verified as ok."""
    from .shards import index_shard, iter_index, sha256_file

    if sha256_file(path) != m["row"]["sha256"]:
        raise DataError(f"{url}: its sha256 is not that of {m['row']['shard']}; refusing the unit")
    members = [{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()} for d in index_shard(path)]
    if members != m["members"]:
        raise DataError(f"{url}: its members are not where {m['row']['shard']} holds them; refusing the unit")
    if m.get("meta") is not None:
        for d in iter_index(path):
            said = m["meta"].get(d["__key__"])
            try:
                true = [d["json"].decode("utf-8"), d["cls"].decode("ascii")]
            except (KeyError, UnicodeDecodeError):
                true = None
            if said != true:
                raise DataError(f"{url}: the provenance it gives sample {ascii(d['__key__'])[:100]} is not that "
                                f"sample's in {m['row']['shard']} (a forged or stale marker); refusing the unit")


class Workspace:
    """A workspace folder, or a workspace on object storage (``root`` a URL such as ``s3://bucket/prefix``: see
    :mod:`gensets.store`): then ``store`` holds its objects and ``root`` is its local cache folder (state.duckdb, a
    manifest.jsonl rebuilt from the commit markers, copies of the shards read, the dataset staged by finalize)."""

    def __init__(self, root: str | Path):
        from .store import is_url

        self.store = None
        if is_url(root):  # a str: a Path has lost the '//' of a URL
            from .store import Store, local_root

            self.store = Store(root)
            root = local_root(self.store.url)
        self.root = Path(root)
        self.config_path = self.root / "config.yaml"
        self.candidates = self.root / "candidates"
        self.manifest_path = self.candidates / "manifest.jsonl"
        self.state_path = self.root / "state.duckdb"
        self.dataset = self.root / "dataset"
        self.lock_path = self.root / ".gensets.lock"
        self.environments_path = self.root / "environments"

    @property
    def where(self) -> str:
        """The workspace as the user named it: its folder, or its URL."""
        return self.store.url if self.store else str(self.root)

    # What differs between a folder and a store, asked of the workspace (the runner and the backends never ask
    # which it is): on a folder, the methods below that only a store needs do nothing.
    @property
    def creates_folder(self) -> bool:
        """A local workspace whose folder does not exist yet (a build that makes it may remove it on failure)."""
        return self.store is None and not self.root.exists()

    @property
    def has_build(self) -> bool:
        """Anything built: state.duckdb, or on a store the manifest rebuilt from the markers."""
        return self.state_path.exists() or (self.store is not None and self.manifest_path.exists())

    @property
    def dataset_where(self) -> str:
        """Where the finalized dataset is, as the user would name it: the folder, or ``<url>/dataset``."""
        return self.store.url_of("dataset") if self.store else str(self.dataset)

    @property
    def marker_indexes(self):
        """How ingest reads an uncached unit's samples: from its commit marker (:meth:`committed_indexes`) on a
        store; None on a folder (from the shard)."""
        return self.committed_indexes if self.store else None

    def check_lease(self) -> None:
        """Busy when the lease this process held on the store was taken over (:meth:`gensets.store.Store.check_lease`);
        nothing on a folder (its lock is a file lock, held to the end)."""
        if self.store:
            self.store.check_lease()

    @classmethod
    def create(cls, root: str | Path, builder, cfg: Any) -> Workspace:
        """Freeze ``cfg`` into a new workspace, or check that an existing one holds the same build."""
        ws = cls(root)
        fp = fingerprint(cfg)
        if ws.store:
            ws.pull_config(fresh=True)
        ws.check_links()
        if ws.config_path.exists():
            _, old = ws.load()
            if fingerprint(old) != fp:
                raise GensetsError(f"{ws.where}: this workspace holds another build "
                                   f"({fingerprint(old)}, not {fp}); use a new --out folder")
            return ws
        ws.refuse_foreign_folder()
        ws.candidates.mkdir(parents=True, exist_ok=True)
        text = (f"# gensets {builder.name} build {fp}: the resolved config, frozen. Do not edit.\n"
                + yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True, width=100))
        write_inside(ws.root, "config.yaml", text)
        if ws.store and not ws.store.create("config.yaml", text.encode("utf-8")):  # another driver's, meanwhile
            ws.config_path.unlink()
            return cls.create(root, builder, cfg)
        return ws

    def pull_config(self, fresh: bool = False) -> None:
        """A URL workspace: its config.yaml into the local cache (``fresh``: read again even if cached). A cache
        whose config is not the store's (the store's prefix was emptied, or holds another build now) is dropped."""
        if self.store is None:  # a folder: nothing to do
            return
        import shutil

        if not fresh and self.config_path.is_file():
            return
        if not self.store.exists("config.yaml"):
            if self.config_path.exists():
                shutil.rmtree(self.root)  # a cache of what the store no longer holds
            return
        text = self.store.read("config.yaml")
        if self.config_path.is_file() and self.config_path.read_bytes() != text:
            shutil.rmtree(self.root)
        self.candidates.mkdir(parents=True, exist_ok=True)
        write_inside(self.root, "config.yaml", text)

    def sync(self) -> int:
        """A URL workspace: the local manifest.jsonl made the store's commit markers' rows (a unit is done when its
        marker is there), and its environments copied; the number of committed units. A local manifest naming a
        unit without a marker is rebuilt from the markers, and state.duckdb with it."""
        if self.store is None:  # a folder: nothing to do
            return 0
        from .shards import Manifest
        from .store import COMMITTED

        names = [p for p in self.store.list(COMMITTED) if p.endswith(".json") and p.count("/") == 2]
        units = {p.rsplit("/", 1)[1][:-5]: p for p in names}
        local = Manifest(self.manifest_path).done("unit") if self.manifest_path.is_file() else set()
        if local - set(units):
            for p in (self.manifest_path, self.state_path, Path(f"{self.state_path}.wal")):
                p.unlink(missing_ok=True)
            local = set()
        todo = sorted(set(units) - local)
        manifest = Manifest(self.manifest_path)
        for rel, data in self.store.read_batches([units[u] for u in todo]):  # todo is sorted: so are the markers
            manifest.append(read_marker(data, self.store.url_of(rel), rel.rsplit("/", 1)[1][:-5])["row"])
        have = {p.name for p in self.environments_path.glob("*.json")} if self.environments_path.is_dir() else set()
        envs = [p for p in self.store.list("environments") if p.endswith(".json") and p.count("/") == 1]
        for rel, data in self.store.read_many([p for p in envs if p.split("/")[1] not in have]).items():
            write_inside(self.root, rel, data, self.store.url_of(rel))
        return len(units)

    def check_links(self) -> None:
        """DataError when one of the workspace's own entries (:data:`OWN`) is a symlink: a build, finalize or lock
        would write through it out of the workspace, or replace it."""
        from .safety import no_symlink

        for name in OWN:
            no_symlink(self.root / name, f"the workspace's {name}")
        no_symlink(self.manifest_path, "the workspace's candidates/manifest.jsonl")

    def refuse_foreign_folder(self) -> None:
        """GensetsError when the root is an existing folder that is not empty and not a workspace (``build --out``
        of the wrong folder: a build would mix its files with the user's, and finalize replace their dataset/)."""
        if self.store:
            from .store import LOCK

            self.store.check_bucket()
            if not self.store.exists("config.yaml"):
                others = [p for p in self.store.list() if p != LOCK]
                if others:
                    raise GensetsError(f"{self.store.url}: a prefix that is not a gensets workspace and not empty "
                                       f"(it holds {others[0]!r}{' and more' if len(others) > 1 else ''}); "
                                       "--out names a new or empty prefix, or a workspace")
            return
        if self.root.exists() and not self.root.is_dir():
            raise GensetsError(f"{self.root}: not a folder; --out names a new or empty folder, or a workspace")
        if self.root.is_dir() and not self.config_path.exists():
            others = sorted(p.name for p in self.root.iterdir() if p.name != self.lock_path.name)
            if others:
                raise GensetsError(f"{self.root}: a folder that is not a gensets workspace and not empty "
                                   f"(it holds {others[0]!r}{' and more' if len(others) > 1 else ''}); "
                                   "--out names a new or empty folder, or a workspace")

    def record_environment(self, env: dict) -> str:
        """Keep ``env`` (:func:`gensets.determinism.describe`) as ``environments/<id>.json``, once per distinct
        environment (every process of a build writes the same file for the same environment); its id."""
        import json

        from .determinism import env_id

        eid = env_id(env)
        path = self.environments_path / f"{eid}.json"
        if not path.exists():
            write_inside(self.root, f"environments/{eid}.json", json.dumps(env, indent=1, sort_keys=True) + "\n")
        if self.store:  # before any unit it built is committed
            self.store.create(f"environments/{eid}.json", path.read_bytes())
        return eid

    def environments(self) -> dict[str, dict]:
        """Every environment recorded in the workspace, by id."""
        if not self.environments_path.is_dir():
            return {}
        # each a regular file inside the workspace (a symlink out of it, to a credentials file, is refused), of the
        # environment schema: a thread count, a version, a CPU's name bounded and free of control characters
        return {p.stem: recordio.read(f"environments/{p.name}", "Environment", self.root) for p in
                sorted(self.environments_path.glob("*.json"))}

    @contextmanager
    def lock(self, what: str = "build"):
        """Hold an advisory lock (fcntl) on the workspace while ``what`` runs: another process that asks for it
        fails at once, in one line naming the workspace and the holder's pid. The lock goes with the process
        (a killed build leaves none); the file keeps the last holder's name, read only while it is held. On a
        store: a lease object (:meth:`gensets.store.Store.lease`)."""
        import fcntl

        if self.store:
            with self.store.lease(what):
                yield self
            return

        self.root.mkdir(parents=True, exist_ok=True)
        self.check_links()
        try:  # never through a symlink: the file is truncated and written below
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as e:
            raise GensetsError(f"{self.lock_path}: cannot open the workspace's lock ({e.strerror or e})") from None
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise GensetsError(f"{self.lock_path}: the workspace's lock is not a regular file; refusing it")
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "process"
                raise Busy(f"{self.root}: another gensets {holder} is running on this workspace; "
                                   "wait for it to end (or stop it), then run this again") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{what} (pid {os.getpid()})\n".encode(), 0)
            yield self
        finally:
            os.close(fd)  # releases the lock

    def holder(self) -> str | None:
        """Who holds the workspace's lock now (``build (pid N)``), or None: nobody (a local workspace's lock asked
        for shared and given back at once; a store's lease is not asked)."""
        import fcntl

        if self.store or not self.lock_path.is_file():
            return None
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "process"
        finally:
            os.close(fd)  # releases the shared lock

    def require_state(self) -> None:
        """GensetsError unless state.duckdb exists; Busy (exit 4) while a build holds the workspace and has not
        recorded its first units yet."""
        if self.state_path.exists():
            return
        who = self.holder()
        if who:
            raise Busy(f"{self.root}: a gensets {who} is running on this workspace and has not recorded its first "
                       "units yet (no state.duckdb); run this again in a moment")
        raise GensetsError(f"{self.root}: nothing built yet (no state.duckdb)")

    def clean_leftovers(self) -> None:
        """Remove what a killed ``create``, ``finalize`` or environment record left: temp files and folders of
        exactly the names they write (nothing else of the folder; a symlink is removed, never followed)."""
        import shutil

        self.check_links()
        found = [p for p in self.root.glob(".*") if _LEFTOVER.match(p.name)]
        found += [p for p in self.environments_path.glob(".*") if _ENV_LEFTOVER.match(p.name)]
        for p in found:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()

    def load(self):
        """(builder, config) of this workspace."""
        if self.store:
            self.store.check_bucket()
            self.pull_config()
        if not self.config_path.exists():
            raise GensetsError(f"{self.where}: not a gensets workspace (no config.yaml)")
        self.check_links()
        return load_build_config(self.config_path, frozen=True)

    def manifest(self):
        """``candidates/manifest.jsonl`` as a :class:`~gensets.shards.Manifest` whose rows are checked as read: a
        row that is not what a build writes (a count as text, a number of 300 digits) is a DataError naming
        ``file:line`` and the key, before anything is planned or ingested from it."""
        from .shards import Manifest, check_candidate_row

        return Manifest(self.manifest_path, check=check_candidate_row)

    def candidate(self, shard: str) -> Path:
        """The path of a committed candidate shard named in ``candidates/manifest.jsonl``: a file name in
        ``candidates/`` (a build writes ``<unit>.tar``), never a path or a symlink out of it (DataError)."""
        from .errors import DataError
        from .safety import check_regular, inside

        path = self.candidates / shard if isinstance(shard, str) else None
        try:
            if path is None or "/" in shard or "\\" in shard:
                raise DataError("a path")
            inside(self.candidates, shard)
        except DataError:
            raise DataError(f"{self.manifest_path}: shard {str(shard)[:200]!r} is not a file of {self.candidates}; "
                            "refusing to read it") from None
        if self.store and not path.is_file():  # a copy of the committed object, downloaded whole, once
            self.store.get(f"candidates/{shard}", path)
        return check_regular(path, where=str(self.manifest_path))

    def commit(self, path: Path, row: dict) -> None:
        """A URL workspace: upload the unit's shard written at ``path`` (under its own name), then its commit
        marker (the manifest row and where each sample's members lie): written last, it makes the unit done. Not once
        the lease this process held was taken over by another driver (:meth:`gensets.store.Store.check_lease`)."""
        if self.store is None:  # a folder: nothing to do
            return
        from .shards import index_shard, iter_index
        from .shards.writer import canonical_json
        from .store import COMMITTED

        self.store.put(path, f"candidates/{row['shard']}")
        members = [{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()} for d in index_shard(path)]
        # each sample's json and cls members as text: the driver ingests the unit from its marker, never
        # downloading the shard (committed_indexes)
        try:
            meta = {"meta": {d["__key__"]: [d["json"].decode("utf-8"), d["cls"].decode("ascii")]
                             for d in iter_index(path)}}
        except (KeyError, UnicodeDecodeError):  # a sample without them: the driver reads the shard
            meta = {}
        self.store.check_lease()  # a driver whose lease another took over commits nothing more (Busy)
        self.store.write(f"{COMMITTED}/{row['unit']}.json",
                         canonical_json({"row": row, "members": members, **meta}))

    def check_committed_shard(self, shard: str, path: Path) -> None:
        """A URL workspace: DataError unless the commit marker of ``shard`` says what the copy at ``path`` holds
        (:func:`check_marker`): finalize checks each candidate shard it publishes from. A local folder: nothing (its
        shards were read whole at ingest)."""
        if not self.store:
            return
        from .store import COMMITTED

        rel = f"{COMMITTED}/{shard[:-4]}.json"
        check_marker(read_marker(self.store.read(rel), self.store.url_of(rel), shard[:-4]), path,
                     self.store.url_of(rel))

    def committed_indexes(self, shards: list[str], batch: int = 256):
        """A URL workspace: for each of ``shards`` in turn, its samples as :func:`gensets.shards.iter_index` gives
        them (key, where each member lies, the json and cls members), read from the unit's commit marker, so that
        ingesting a build made on other machines downloads kilobytes per unit, not its shard; None for a shard
        already in the local cache (read there) or whose marker lists no ``meta`` (a marker from before it: the
        shard is read). Markers are read ``batch`` at a time, concurrently (``Store.read_many``). A marker that
        is not what a worker writes is a DataError naming it."""
        from .store import COMMITTED

        for i in range(0, len(shards), batch):
            chunk = shards[i:i + batch]
            want = {s: f"{COMMITTED}/{s[:-4]}.json" for s in chunk if self.store and isinstance(s, str)
                    and s.endswith(".tar") and "/" not in s and "\\" not in s and not (self.candidates / s).is_file()}
            got = self.store.read_many(list(want.values()))
            for s in chunk:
                yield _marker_index(got[want[s]], self.store.url_of(want[s]), s) if s in want else None

    def mirror(self, dest: Path) -> None:
        """A URL workspace copied into the folder ``dest`` as the local layout has it, for ``gensets verify``: the
        config, environments, the candidate shards the commit markers name with a manifest.jsonl of their rows,
        and dataset/; each object read whole, once. Orphan shards (no marker) are not read: nothing trusts them."""
        from .shards import Manifest
        from .store import COMMITTED

        objects = self.store.list()
        markers = [p for p in objects if p.startswith(f"{COMMITTED}/") and p.endswith(".json")]
        manifest = Manifest(dest / "candidates" / "manifest.jsonl")
        (dest / "candidates").mkdir(parents=True, exist_ok=True)
        read = {}
        for rel, data in self.store.read_batches(sorted(markers)):
            m = read_marker(data, self.store.url_of(rel), rel.rsplit("/", 1)[1][:-5])
            manifest.append(m["row"])
            read[f"candidates/{m['row']['shard']}"] = (m, self.store.url_of(rel))
        for rel in objects:
            if rel in read or rel.startswith(("dataset/", "environments/")) or rel == "config.yaml":
                self.store.get(rel, dest / rel)
            if rel in read:  # what verify then reads of the unit is what its marker says (provenance included)
                check_marker(*read[rel][:1], dest / rel, read[rel][1])

    def pull_dataset(self) -> Path:
        """A URL workspace: ``<url>/dataset/`` copied into the local cache's dataset/ (each object read whole, once;
        a file the store's dataset does not have is removed); the local folder. GensetsError when there is none."""
        import shutil

        objects = self.store.list("dataset")
        if "dataset/manifest.json" not in objects:
            raise GensetsError(f"{self.store.url}: no dataset/manifest.json; run `gensets finalize "
                               f"{self.store.url}` first")
        tmp = self.root / f".dataset.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        for rel in objects:
            self.store.get(rel, tmp / rel[len("dataset/"):])
        if self.dataset.exists():
            shutil.rmtree(self.dataset)
        replace(tmp, self.dataset)
        return self.dataset

    def push_dataset(self) -> None:
        """A URL workspace: the local cache's dataset/ uploaded to ``<url>/dataset/``: every file, manifest.json
        last, then the objects of an older dataset that this one does not have removed."""
        if self.store is None:  # a folder: nothing to do
            return
        files = sorted(str(p.relative_to(self.dataset)) for p in self.dataset.rglob("*") if p.is_file())
        files.sort(key=lambda f: f == "manifest.json")
        for rel in files:
            if rel == "manifest.json":
                self.store.check_lease()  # finalize's commit: not once another took the lease over (Busy)
            self.store.put(self.dataset / rel, f"dataset/{rel}")
        keep = {f"dataset/{rel}" for rel in files}
        self.store.remove([p for p in self.store.list("dataset") if p not in keep])

    def check_committed(self) -> None:
        """A URL workspace: DataError, before the build says anything is done, when the store no longer holds its
        config.yaml or the commit marker of a unit the local manifest counts as committed (the prefix emptied while
        the build ran: a lifecycle rule, an ``rm``)."""
        if self.store is None:  # a folder: nothing to do
            return
        from .store import COMMITTED

        have = set(self.store.list(COMMITTED))
        units = [r["unit"] for r in self.manifest().iter_rows()]
        gone = [u for u in units if f"{COMMITTED}/{u}.json" not in have]
        config = self.store.exists("config.yaml")
        if gone or not config:
            lost = ([] if config else ["config.yaml"]) + ([f"{len(gone)} of {len(units)} committed units' markers "
                                                           f"(first {gone[0]})"] if gone else [])
            raise DataError(f"{self.store.url}: the store lost {' and '.join(lost)} while the build ran (the prefix "
                            "emptied by a lifecycle rule or an rm?); nothing is done there: build into a new prefix, "
                            "or empty this one and build again")

    def remove_orphans(self) -> list[str]:
        """A URL workspace: remove the candidate shards that no commit marker names (a killed worker's, a plan's
        that changed); the removed objects."""
        if self.store is None:  # a folder: nothing to do
            return []
        from .store import COMMITTED

        objects = self.store.list("candidates")
        committed = {p.rsplit("/", 1)[1][:-5] for p in objects if p.startswith(f"{COMMITTED}/")}
        orphans = [p for p in objects if p.count("/") == 1 and p.endswith(".tar") and p[11:-4] not in committed]
        self.store.remove(orphans)
        return orphans

    def read_candidates(self, shard: str):
        """The samples of one committed candidate shard (``candidates/<unit>.tar``)."""
        from .records import Sample
        from .shards import iter_shard

        for d in iter_shard(self.candidate(shard)):
            yield Sample.from_wds(d)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.load()[1])
