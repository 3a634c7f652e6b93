"""A build is a workspace: the frozen config, candidate shards, state.duckdb and the dataset folder."""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from . import recordio
from .config import apply_overrides, check_planned, fingerprint, load_config, read_yaml, to_dict
from .determinism import env_id
from .errors import Busy, ConfigError, DataError, GensetsError
from .output import write_inside
from .records import Sample
from .registry import BUILDERS
from .safety import check_regular, inside, no_symlink
from .shards import Manifest, check_candidate_row, iter_shard
from .stores import open_store

OWN = ("config.yaml", "candidates", "state.duckdb", "state.duckdb.wal", "dataset", "environments", ".gensets.lock",
       ".review-server.json", ".config-dir.json")
CONFIG_DIR = ".config-dir.json"
"""Where the frozen config's relative paths lead (a reference folder, an import), beside config.yaml and not in it
(neither frozen nor fingerprinted: a build never depends on where its files lie): the folder of the config it was
built from, relative to the workspace (or, on a store, to its local cache on this machine)."""
"""A workspace's own entries: none is ever a symlink, and no command writes a file of its own over one."""
_LEFTOVER = re.compile(r"^\.(?:(?:config\.yaml|dataset|state\.snapshot|\.config-dir\.json)\.tmp-|dataset\.old-)\d+(?:\.wal)?$")  # what create / finalize leave
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


class Workspace:
    """A workspace: a folder, or on object storage (``root`` a URL such as ``s3://bucket/prefix``: see
    :mod:`gensets.store`). ``store`` is where it is kept (:func:`gensets.stores.open_store`: a
    :class:`~gensets.store.WorkspaceStore`), asked whatever differs between the two; ``root`` is the local folder
    its files are read from and written to: the workspace itself, or a store's local cache (state.duckdb, a
    manifest.jsonl rebuilt from the commit markers, copies of the shards read, the dataset staged by finalize)."""

    def __init__(self, root: str | Path):
        self.store = open_store(root)
        self.root = self.store.root
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
        return self.store.url_of("")

    # What differs between a folder and a store is asked of the store (the runner and the backends never ask which
    # it is): on a folder, the methods below that only a store needs do nothing.
    @property
    def creates_folder(self) -> bool:
        """A local workspace whose folder does not exist yet (a build that makes it may remove it on failure)."""
        return self.store.is_new()

    @property
    def has_build(self) -> bool:
        """Anything built: state.duckdb, or on a store the manifest rebuilt from the markers."""
        return self.store.has_build(self)

    @property
    def dataset_where(self) -> str:
        """Where the finalized dataset is, as the user would name it: the folder, or ``<url>/dataset``."""
        return self.store.url_of("dataset")

    @property
    def marker_indexes(self):
        """How ingest reads an uncached unit's samples: from its commit marker on a store
        (:meth:`gensets.store.Store.committed_indexes`); None on a folder (from the shard)."""
        return self.store.marker_indexes(self)

    def check_lease(self) -> None:
        """Busy when the lease this process held on the store was taken over (:meth:`gensets.store.Store.check_lease`);
        nothing on a folder (its lock is a file lock, held to the end)."""
        self.store.check_lease()

    @classmethod
    def create(cls, root: str | Path, builder, cfg: Any) -> Workspace:
        """Freeze ``cfg`` into a new workspace, or check that an existing one holds the same build."""
        ws = cls(root)
        fp = fingerprint(cfg)
        ws.pull_config(fresh=True)
        ws.check_links()
        if ws.config_path.exists():
            _, old = ws.load()
            if fingerprint(old) != fp:
                raise GensetsError(f"{ws.where}: this workspace holds another build "
                                   f"({fingerprint(old)}, not {fp}); use a new --out folder")
            ws.record_config_dir(cfg)
            return ws
        ws.refuse_foreign_folder()
        ws.candidates.mkdir(parents=True, exist_ok=True)
        text = (f"# gensets {builder.name} build {fp}: the resolved config, frozen. Do not edit.\n"
                + yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True, width=100))
        write_inside(ws.root, "config.yaml", text)
        if not ws.store.publish_config(text.encode("utf-8")):  # a store: another driver's, meanwhile
            ws.config_path.unlink()
            return cls.create(root, builder, cfg)
        ws.record_config_dir(cfg)
        return ws

    def pull_config(self, fresh: bool = False) -> None:
        """A URL workspace: its config.yaml into the local cache (``fresh``: read again even if cached;
        :meth:`gensets.store.Store.pull_config`). Nothing on a folder."""
        self.store.pull_config(self, fresh)

    def sync(self) -> int:
        """A URL workspace: the local manifest.jsonl made the store's commit markers' rows, and its environments
        copied (:meth:`gensets.store.Store.sync`); the number of committed units (0 on a folder: nothing to do)."""
        return self.store.sync(self)

    def check_links(self) -> None:
        """DataError when one of the workspace's own entries (:data:`OWN`) is a symlink: a build, finalize or lock
        would write through it out of the workspace, or replace it."""
        for name in OWN:
            no_symlink(self.root / name, f"the workspace's {name}")
        no_symlink(self.manifest_path, "the workspace's candidates/manifest.jsonl")

    def refuse_foreign_folder(self) -> None:
        """GensetsError when the root is an existing folder that is not empty and not a workspace (``build --out``
        of the wrong folder: a build would mix its files with the user's, and finalize replace their dataset/); on a
        store, a prefix likewise."""
        self.store.refuse_foreign(self)

    def record_environment(self, env: dict) -> str:
        """Keep ``env`` (:func:`gensets.determinism.describe`) as ``environments/<id>.json``, once per distinct
        environment (every process of a build writes the same file for the same environment); its id."""
        eid = env_id(env)
        path = self.environments_path / f"{eid}.json"
        if not path.exists():
            write_inside(self.root, f"environments/{eid}.json", json.dumps(env, indent=1, sort_keys=True) + "\n")
        self.store.share_environment(self, f"environments/{eid}.json")  # on a store: before any unit it built
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
        """Hold the workspace's lock while ``what`` runs: another process that asks for it fails at once, in one
        line naming the workspace and the holder. On a folder an advisory lock (fcntl: it goes with the process, a
        killed build leaves none; the file keeps the last holder's name); on a store a lease object
        (:meth:`gensets.store.Store.lease`)."""
        with self.store.lock(self, what):
            yield self

    def holder(self) -> str | None:
        """Who holds the workspace's lock now (``build (pid N)``), or None: nobody (a local workspace's lock asked
        for shared and given back at once; a store's lease is not asked)."""
        return self.store.holder(self)

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
        self.check_links()
        found = [p for p in self.root.glob(".*") if _LEFTOVER.match(p.name)]
        found += [p for p in self.environments_path.glob(".*") if _ENV_LEFTOVER.match(p.name)]
        for p in found:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()

    def load(self):
        """(builder, config) of this workspace."""
        self.store.check_bucket()
        self.pull_config()
        if not self.config_path.exists():
            raise GensetsError(f"{self.where}: not a gensets workspace (no config.yaml)")
        self.check_links()
        builder, cfg = load_build_config(self.config_path, frozen=True)
        if (self.root / CONFIG_DIR).exists():  # the frozen config's relative paths resolve from the workspace
            rel = recordio.read(CONFIG_DIR, "ConfigDir", self.root)["config_dir"]
            object.__setattr__(cfg, "base_dir", Path(os.path.normpath(self.root / rel)))
        return builder, cfg

    def record_config_dir(self, cfg) -> None:
        """Where ``cfg``'s relative paths lead (the folder of the config file it was read from), recorded beside
        the frozen copy (:data:`CONFIG_DIR`), relative to the workspace: finalize, a report or a rebuild from the
        workspace find the reference folders and imports the build read, from any working directory."""
        base = vars(cfg).get("base_dir")  # set by load_build_config on a config file, never on a frozen copy
        if base is not None:
            rel = os.path.relpath(Path(base).resolve(), self.root.resolve())
            write_inside(self.root, CONFIG_DIR, json.dumps({"config_dir": rel}, sort_keys=True) + "\n")

    def manifest(self):
        """``candidates/manifest.jsonl`` as a :class:`~gensets.shards.Manifest` whose rows are checked as read: a
        row that is not what a build writes (a count as text, a number of 300 digits) is a DataError naming
        ``file:line`` and the key, before anything is planned or ingested from it."""
        return Manifest(self.manifest_path, check=check_candidate_row)

    def candidate(self, shard: str) -> Path:
        """The path of a committed candidate shard named in ``candidates/manifest.jsonl``: a file name in
        ``candidates/`` (a build writes ``<unit>.tar``), never a path or a symlink out of it (DataError). On a
        store, a copy of the committed object, downloaded whole, once."""
        path = self.candidates / shard if isinstance(shard, str) else None
        try:
            if path is None or "/" in shard or "\\" in shard:
                raise DataError("a path")
            inside(self.candidates, shard)
        except DataError:
            raise DataError(f"{self.manifest_path}: shard {str(shard)[:200]!r} is not a file of {self.candidates}; "
                            "refusing to read it") from None
        self.store.fetch_candidate(shard, path)
        return check_regular(path, where=str(self.manifest_path))

    def commit(self, path: Path, row: dict) -> None:
        """A URL workspace: upload the unit's shard written at ``path``, then its commit marker, last: it makes the
        unit done (:meth:`gensets.store.Store.commit`). Nothing on a folder (the runner's manifest row does)."""
        self.store.commit(path, row)

    def check_committed_shard(self, shard: str, path: Path) -> None:
        """A URL workspace: DataError unless the commit marker of ``shard`` says what the copy at ``path`` holds
        (:func:`gensets.shards.markers.check_marker`): finalize checks each candidate shard it publishes from. A
        local folder: nothing (its shards were read whole at ingest)."""
        self.store.check_committed_shard(shard, path)

    def mirror(self, dest: Path) -> None:
        """A URL workspace copied into the folder ``dest`` as the local layout has it, for ``gensets verify``
        (:meth:`gensets.store.Store.mirror`)."""
        self.store.mirror(dest)

    def pull_dataset(self) -> Path:
        """The finalized dataset as a local folder: on a store, ``<url>/dataset/`` copied into the local cache's
        dataset/ (:meth:`gensets.store.Store.pull_dataset`). GensetsError when there is none."""
        return self.store.pull_dataset(self)

    def push_dataset(self) -> None:
        """A URL workspace: the local cache's dataset/ uploaded to ``<url>/dataset/``, manifest.json last
        (:meth:`gensets.store.Store.push_dataset`). Nothing on a folder."""
        self.store.push_dataset(self)

    def check_committed(self) -> None:
        """A URL workspace: DataError, before the build says anything is done, when the store lost its config.yaml
        or a committed unit's marker (:meth:`gensets.store.Store.check_committed`). Nothing on a folder."""
        self.store.check_committed(self)

    def remove_orphans(self) -> list[str]:
        """A URL workspace: remove the candidate shards that no commit marker names; the removed objects. Nothing
        on a folder."""
        return self.store.remove_orphans()

    def read_candidates(self, shard: str):
        """The samples of one committed candidate shard (``candidates/<unit>.tar``)."""
        for d in iter_shard(self.candidate(shard)):
            yield Sample.from_wds(d)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.load()[1])
