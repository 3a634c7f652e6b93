"""A build is a workspace: the frozen config, candidate shards, state.duckdb and the dataset folder."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from .config import apply_overrides, fingerprint, load_config, read_yaml, to_dict
from .errors import ConfigError, GensetsError
from .registry import BUILDERS


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
        # where the config's relative paths lead (imports, reference folders), beside it and not in it: no
        # config field, so neither frozen nor fingerprinted, and a build never depends on where its files lie
        object.__setattr__(cfg, "base_dir", base)
    return builder, cfg


class Workspace:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config_path = self.root / "config.yaml"
        self.candidates = self.root / "candidates"
        self.manifest_path = self.candidates / "manifest.jsonl"
        self.state_path = self.root / "state.duckdb"
        self.dataset = self.root / "dataset"
        self.lock_path = self.root / ".gensets.lock"
        self.environments_path = self.root / "environments"

    @classmethod
    def create(cls, root: str | Path, builder, cfg: Any) -> Workspace:
        """Freeze ``cfg`` into a new workspace, or check that an existing one holds the same build."""
        ws = cls(root)
        fp = fingerprint(cfg)
        if ws.config_path.exists():
            _, old = ws.load()
            if fingerprint(old) != fp:
                raise GensetsError(f"{ws.root}: this workspace holds another build "
                                   f"({fingerprint(old)}, not {fp}); use a new --out folder")
            return ws
        ws.candidates.mkdir(parents=True, exist_ok=True)
        text = (f"# gensets {builder.name} build {fp}: the resolved config, frozen. Do not edit.\n"
                + yaml.safe_dump(to_dict(cfg), sort_keys=False, allow_unicode=True, width=100))
        tmp = ws.config_path.with_name(f".config.yaml.tmp-{os.getpid()}")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, ws.config_path)
        return ws

    def record_environment(self, env: dict) -> str:
        """Keep ``env`` (:func:`gensets.determinism.describe`) as ``environments/<id>.json``, once per distinct
        environment (every process of a build writes the same file for the same environment); its id."""
        import json

        from .determinism import env_id

        eid = env_id(env)
        path = self.environments_path / f"{eid}.json"
        if not path.exists():
            self.environments_path.mkdir(exist_ok=True)
            tmp = path.with_name(f".{eid}.json.tmp-{os.getpid()}")
            tmp.write_text(json.dumps(env, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        return eid

    def environments(self) -> dict[str, dict]:
        """Every environment recorded in the workspace, by id."""
        import json

        if not self.environments_path.is_dir():
            return {}
        return {p.stem: json.loads(p.read_text(encoding="utf-8"))
                for p in sorted(self.environments_path.glob("*.json"))}

    @contextmanager
    def lock(self, what: str = "build"):
        """Hold an advisory lock (fcntl) on the workspace while ``what`` runs: another process that asks for it
        fails at once, in one line naming the workspace and the holder's pid. The lock goes with the process
        (a killed build leaves none); the file keeps the last holder's name, read only while it is held."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "process"
                raise GensetsError(f"{self.root}: another gensets {holder} is running on this workspace; "
                                   "wait for it to end (or stop it), then run this again") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{what} (pid {os.getpid()})\n".encode(), 0)
            yield self
        finally:
            os.close(fd)  # releases the lock

    def clean_leftovers(self) -> None:
        """Remove what a killed ``create``, ``finalize`` or environment record left: temp files and folders."""
        import shutil

        for p in [*self.root.glob(".*"), *self.environments_path.glob(".*")]:
            if ".tmp-" in p.name or p.name.startswith(".dataset.old-"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()

    def load(self):
        """(builder, config) of this workspace."""
        if not self.config_path.exists():
            raise GensetsError(f"{self.root}: not a gensets workspace (no config.yaml)")
        return load_build_config(self.config_path, frozen=True)

    def candidate(self, shard: str) -> Path:
        """The path of a committed candidate shard named in ``candidates/manifest.jsonl``: a file name in
        ``candidates/`` (a build writes ``<unit>.tar``), never a path or a symlink out of it (DataError)."""
        from .errors import DataError

        path = self.candidates / shard if isinstance(shard, str) else None
        if path is None or "/" in shard or "\\" in shard or shard in ("", ".", "..") \
                or not path.resolve().is_relative_to(self.candidates.resolve()):
            raise DataError(f"{self.manifest_path}: shard {str(shard)[:200]!r} is not a file of {self.candidates}; "
                            "refusing to read it")
        return path

    def read_candidates(self, shard: str):
        """The samples of one committed candidate shard (``candidates/<unit>.tar``)."""
        from .records import Sample
        from .shards import iter_shard

        for d in iter_shard(self.candidate(shard)):
            yield Sample.from_wds(d)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.load()[1])
