"""Publishing a dataset folder (and leaderboard results) behind a small interface.

A :class:`Target` is a dataset repo: ``HubTarget`` (huggingface_hub's HfApi) or ``LocalTarget`` (a
folder, for tests and local mirrors: ``--repo file:///path``). ``publish`` uploads the shards first, in
one or more commits, then the card, manifest and figures in the last commit (which also deletes shards
of an earlier version that this one no longer has), so the repo's README never declares files that are
not there yet; then an optional tag.

What a publish deletes is limited to what an earlier gensets publish wrote: the shards listed by the
``manifest.json`` in the repo (each ``<config>/<name>.tar``, see :func:`deletions`) that this version does
not have; no other file of the repo is ever deleted, and ``--dry-run`` lists them. What it uploads is checked
first: every file a regular file inside the dataset folder (no symlink, no path out of it) and every shard the
bytes its manifest's sha256 names.

The token comes from huggingface_hub's usual places (``HF_TOKEN`` or ``hf auth login``). It is never
printed or logged: messages of failed Hub calls are scrubbed of it before they are shown.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import recordio
from .cards.card import for_repo
from .errors import DataError, GensetsError, Unavailable
from .evaluation import leaderboard
from .safety import check_regular, inside, no_symlink, read_regular, writable_inside
from .shards import read_dataset_manifest, sha256_file
from .store import is_url
from .workspace import Workspace

MAX_COMMIT_BYTES = 5 * 1024**3  # shards per commit: at most this many bytes ...
MAX_COMMIT_FILES = 500  # ... and files
CARD_FILES = ("manifest.json", "README.md")  # the last commit, README.md last of all
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


class Target(Protocol):
    url: str

    def create_repo(self, *, private: bool = False, revision: str | None = None) -> None: ...

    def read_file(self, path: str, revision: str | None = None) -> bytes | None:
        """The bytes of one file of the repo, None if it has no such file."""
        ...

    def upload_folder(self, folder: Path, files: list[str], commit_message: str,
                      revision: str | None = None, delete: list[str] | None = None) -> str:
        """Upload ``files`` (paths relative to ``folder``, exactly; no patterns) and delete the repo files
        ``delete`` in one commit; its URL."""
        ...

    def tag(self, tag: str, revision: str | None = None) -> None: ...


class HubTarget:
    """A dataset repo on the Hugging Face Hub."""

    def __init__(self, repo_id: str, token: str | None = None):
        from huggingface_hub import HfApi, constants

        self.repo_id = repo_id
        self.api = HfApi(token=token)  # None: HF_TOKEN or the stored login
        self.url = f"{constants.ENDPOINT}/datasets/{repo_id}"

    def create_repo(self, *, private: bool = False, revision: str | None = None) -> None:
        self.api.create_repo(self.repo_id, repo_type="dataset", private=private, exist_ok=True)
        if revision:
            self.api.create_branch(self.repo_id, branch=revision, repo_type="dataset", exist_ok=True)

    def read_file(self, path: str, revision: str | None = None) -> bytes | None:
        from huggingface_hub.errors import (
            RemoteEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        try:
            local = self.api.hf_hub_download(self.repo_id, path, repo_type="dataset", revision=revision)
        except (RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError):
            return None
        return Path(local).read_bytes()

    def upload_folder(self, folder, files, commit_message, revision=None, delete=None) -> str:
        """One ``create_commit`` with an operation per file: what ``HfApi.upload_folder`` sends, without its
        matching of every file of the folder against every pattern (quadratic in the shards)."""
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        added = set(files)
        ops = [CommitOperationDelete(path_in_repo=f, is_folder=False) for f in delete or () if f not in added]
        ops += [CommitOperationAdd(path_in_repo=f, path_or_fileobj=str(Path(folder) / f)) for f in files]
        info = self.api.create_commit(repo_id=self.repo_id, repo_type="dataset", operations=ops,
                                      commit_message=commit_message, revision=revision)
        return info.commit_url

    def tag(self, tag: str, revision: str | None = None) -> None:
        self.api.create_tag(self.repo_id, tag=tag, revision=revision, repo_type="dataset")


class LocalTarget:
    """A folder that receives the files as the Hub would; commits and tags go to ``.publish-log.jsonl``.

    Branches are not modelled: every revision writes into the same folder. Nothing is written, replaced or
    deleted through a symlink inside the folder (a sub-folder linked elsewhere is refused, in one line), and a
    file read back (the repo's manifest.json) is a regular file inside it.
    """

    LOG = ".publish-log.jsonl"

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.url = self.root.resolve().as_uri()
        self.commits: list[dict] = []
        self.tags: dict[str, int] = {}

    def _log(self, entry: dict) -> None:
        path = writable_inside(self.root, self.LOG)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def create_repo(self, *, private: bool = False, revision: str | None = None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def read_file(self, path: str, revision: str | None = None) -> bytes | None:
        p = inside(self.root, path)
        return read_regular(p) if os.path.lexists(p) else None

    def upload_folder(self, folder, files, commit_message, revision=None, delete=None) -> str:
        folder = Path(folder)
        missing = [f for f in files if not (folder / f).is_file()]
        if missing:
            raise GensetsError(f"{folder / missing[0]}: no such file to upload")
        added = set(files)
        # every path written or deleted first: none through (or over) a symlink in the folder, before any change
        dsts = {rel: writable_inside(self.root, rel) for rel in [*files, *(delete or ())]}
        # the paths publish passes are exact (see deletions): never a walk of the whole folder
        deleted = [f for f in delete or () if f not in added and dsts[f].is_file()]
        for rel in deleted:
            dsts[rel].unlink()
        for rel in files:  # in the given order: README.md (last) lands when the rest is there
            dst = dsts[rel]
            dst.parent.mkdir(parents=True, exist_ok=True)
            writable_inside(self.root, rel)  # the folders just made: still no symlink on the way
            tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
            shutil.copyfile(folder / rel, tmp)
            os.replace(tmp, dst)
        self.commits.append({"message": commit_message, "files": list(files), "deleted": deleted,
                             "revision": revision})
        self._log({"commit": len(self.commits), **self.commits[-1]})
        return f"{self.url}#commit-{len(self.commits)}"

    def tag(self, tag: str, revision: str | None = None) -> None:
        self.tags[tag] = len(self.commits)
        self._log({"tag": tag, "commit": len(self.commits), "revision": revision})


def check_repo(repo: str) -> None:
    if repo.startswith("file://"):
        if not repo[len("file://"):].startswith("/"):  # file:// alone would be the current folder
            raise GensetsError(f"bad --repo {repo!r}: a local folder is file:///absolute/path")
    elif not REPO_ID.match(repo):
        raise GensetsError(f"bad --repo {repo!r}: expected org/name (or file:///path for a local folder)")


def target_for(repo: str, dry_run: bool = False) -> Target:
    """``file:///path`` -> LocalTarget; ``org/name`` -> HubTarget (after the offline and token checks; ``dry_run``:
    their messages say what a dry run cannot tell, not how to run one)."""
    check_repo(repo)
    if repo.startswith("file://"):
        return LocalTarget(repo[len("file://"):])
    _check_hub(dry_run)
    return HubTarget(repo)


def _check_hub(dry_run: bool = False) -> None:
    """Fail fast, before any network call: offline mode, or no token."""
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        raise Unavailable("the Hub is not read: offline mode is on (HF_HUB_OFFLINE=1)" if dry_run else
                          "cannot publish to the Hub: offline mode is on (HF_HUB_OFFLINE=1); "
                          "unset it (--dry-run shows the plan offline)")
    if not get_token():
        raise Unavailable("no Hugging Face token: log in with `hf auth login` or set HF_TOKEN")


def _scrub(text: str) -> str:
    """The message with any token in it masked (the current one, and anything shaped like one)."""
    from huggingface_hub import get_token

    token = get_token()
    if token:
        text = text.replace(token, "***")
    return re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", text)


def _call(what: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except GensetsError:
        raise
    except Exception as e:  # HfHubHTTPError, OfflineModeIsEnabled, connection errors, OSError
        msg = " ".join(str(e).split()) or type(e).__name__
        raise Unavailable(_scrub(f"{what} failed: {msg}")[:500]) from None


@dataclass
class Commit:
    message: str
    files: list[str]
    nbytes: int = 0
    delete: list[str] = field(default_factory=list)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def dataset_folder(path) -> Path:
    """The publishable folder: WORKSPACE/dataset, or a dataset folder itself."""
    if is_url(path):  # a workspace on a store: its dataset/ read once into the local cache
        return Workspace(path).pull_dataset()
    path = Path(path)
    folder = no_symlink(path / "dataset", "the workspace's dataset folder") if (path / "config.yaml").exists() \
        else path
    if not (folder / "manifest.json").exists() or not (folder / "README.md").exists():
        raise GensetsError(f"{folder}: no manifest.json and README.md; run `gensets finalize` first")
    return folder


def _inside(folder: Path, rel: str) -> Path:
    """``folder/rel`` when it is a regular file inside ``folder`` (no symlink, no path out of it)."""
    p = folder / rel
    try:
        inside(folder, rel)
    except DataError:
        raise GensetsError(f"{p}: a symlink or a path out of {folder}; refusing to publish it") from None
    if p.is_symlink():
        raise GensetsError(f"{p}: a symlink or a path out of {folder}; refusing to publish it")
    if os.path.lexists(p):
        check_regular(p)  # a FIFO or a device: refused, never read
    return p


def shard_path(path) -> bool:
    """``path`` has the form of a shard finalize writes: ``<config>/<name>.tar``, relative, no ``..``, no glob
    characters (a Hub delete pattern is a glob) and no control characters."""
    if not isinstance(path, str) or not path.endswith(".tar") or not path.isprintable() \
            or any(c in path for c in "*?[]\\"):
        return False
    parts = path.split("/")
    return len(parts) == 2 and all(p and p not in (".", "..") for p in parts)


def check_same_dataset(previous: bytes | None, mine: dict, repo: str) -> None:
    """GensetsError when the repo's manifest.json is another gensets dataset: not this one's builder and build
    (the fingerprint of its frozen config). Publishing would replace it, its shards deleted as stale."""
    try:  # the target's own file, bounded (recordio); anything not gensets' is left alone
        old = recordio.loads(previous, f"{repo}: manifest.json") if previous else None
    except DataError:
        return
    if not (isinstance(old, dict) and "builder" in old and "shards" in old):
        return
    theirs, this = ((str(d.get("builder"))[:80], str(d.get("build"))[:40]) for d in (old, mine))
    if theirs != this:
        raise GensetsError(f"{repo} holds another gensets dataset (builder {theirs[0]!r}, build {theirs[1]!r}), not "
                           f"this one (builder {this[0]!r}, build {this[1]!r}): publishing would replace it and delete "
                           "its shards; use another --repo, or --replace to overwrite it")


def deletions(previous: bytes | None, shards: set[str]) -> list[str]:
    """What the last commit deletes: the shards that the repo's manifest.json (``previous``: written by an
    earlier gensets publish) lists and this version (``shards``) does not have. Only paths of the form
    finalize writes (``<config>/<name>.tar``) count; anything else in the repo, or a manifest.json that is not
    gensets', deletes nothing."""
    try:  # the target's own file, bounded (recordio); anything not gensets' deletes nothing
        old = recordio.loads(previous, "the target's manifest.json") if previous else None
    except DataError:
        return []
    listed = old.get("shards") if isinstance(old, dict) and "builder" in old else None
    paths = {e.get("path") for e in listed if isinstance(e, dict)} if isinstance(listed, list) else set()
    return sorted(p for p in paths if shard_path(p) and p not in shards)


def plan(folder: Path, *, max_bytes: int = MAX_COMMIT_BYTES, max_files: int = MAX_COMMIT_FILES) -> list[Commit]:
    """The commits: shards in groups (per config, bounded in bytes and files), then the card last."""
    manifest = read_dataset_manifest(_inside(folder, "manifest.json"))
    commits: list[Commit] = []
    for s in manifest["shards"]:
        if not shard_path(s.get("path")):
            raise GensetsError(f"{folder / 'manifest.json'}: shard path {str(s.get('path'))[:200]!r} is not "
                               "<config>/<name>.tar; refusing to publish")
        p = _inside(folder, s["path"])
        if not p.is_file() or p.stat().st_size != s["nbytes"] or sha256_file(p) != s["sha256"]:
            raise GensetsError(f"{p}: missing or not the bytes the manifest says (size, sha256); "
                               f"run `gensets verify {folder}`")
        last = commits[-1] if commits else None
        if (last is None or last.files[-1].split("/")[0] != s["config"] or len(last.files) >= max_files
                or last.nbytes + s["nbytes"] > max_bytes):
            last = Commit("", [])
            commits.append(last)
        last.files.append(s["path"])
        last.nbytes += s["nbytes"]
    for c in commits:
        config = c.files[0].split("/")[0]
        c.message = f"Add {config} shards ({len(c.files)} file{'s' * (len(c.files) != 1)}, {_human(c.nbytes)})"
    figures = sorted(p.relative_to(folder).as_posix() for p in (folder / "figures").glob("*.png"))
    card = [*figures, *CARD_FILES]
    for f in card:
        _inside(folder, f)
    commits.append(Commit(f"Dataset card, manifest and figures (build {manifest.get('build')})", card,
                          sum((folder / f).stat().st_size for f in card)))
    return commits


def publish(path, repo: str, *, target: Target | None = None, private: bool = False,
            revision: str | None = None, tag: str | None = None, dry_run: bool = False,
            allow_random_weights: bool = False, replace: bool = False,
            out: Callable[[str], None] = print) -> str | None:
    """Upload a finalized dataset: shards first, the card last, then the tag. Returns the last commit URL.
    A build made with `random:` models (random weights: noise) is refused unless `allow_random_weights`; a repo that
    holds another gensets dataset (another builder, or another build of it) is refused unless `replace` (its shards
    would be deleted as stale), before anything is written."""
    check_repo(repo)
    folder = dataset_folder(path)
    mine = read_dataset_manifest(_inside(folder, "manifest.json"))
    random = mine.get("random_models")
    if random and not allow_random_weights:
        raise GensetsError(f"{folder}: built with random-weight models ({', '.join(map(str, random if isinstance(random, list) else [random]))}): its images"
                           " and labels are noise, for timing only; refusing to publish (--allow-random-weights)")
    commits = plan(folder)
    shards = {f for c in commits[:-1] for f in c.files}
    where = f"{repo}" + (f" (branch {revision})" if revision else "")
    if dry_run:
        from huggingface_hub import get_token

        if not repo.startswith("file://"):
            out(f"token: {'found' if get_token() else 'none found (log in with `hf auth login` or set HF_TOKEN)'}")
        out(f"create dataset repo {repo} if missing ({'private' if private else 'public'})"
            + (f", branch {revision}" if revision else ""))
        for i, c in enumerate(commits, 1):
            out(f"commit {i}/{len(commits)} to {where}: {c.message}")
            if i == len(commits):
                out(_dry_deletions(repo, revision, target, shards, mine, replace))
            for f in c.files:
                out(f"  upload {f}")
        if tag:
            out(f"tag {tag} on the last commit")
        return None
    target = target or target_for(repo)
    read = lambda rev: _call(f"reading manifest.json of {repo}", target.read_file, "manifest.json", rev)  # noqa: E731
    # the repo made if missing (then no dataset is in it), an existing one left as it is (exist_ok)
    _call(f"creating the repo {repo}", target.create_repo, private=private)
    previous = read(revision)
    if not replace:  # before anything is written (no branch, no file); a new branch would be main's copy
        check_same_dataset(read(None) if previous is None and revision else previous, mine, repo)
    if revision:
        _call(f"creating the branch {revision} of {repo}", target.create_repo, private=private, revision=revision)
        previous = read(revision) if previous is None else previous  # the branch as just made
    commits[-1].delete = deletions(previous, shards)
    url = None
    from tqdm.auto import tqdm

    with tempfile.TemporaryDirectory(prefix="gensets-card-") as staged, \
            tqdm(total=sum(_size(folder, f) for c in commits[:-1] for f in c.files), unit="B", unit_scale=True,
                 desc=f"publish {repo}", file=sys.stderr, disable=None) as bar:  # on a terminal only
        card_folder = stage_card(folder, commits[-1].files, Path(staged), repo, tag or revision)
        for i, c in enumerate(commits, 1):
            url = _call(f"commit {i}/{len(commits)} ({c.message})", target.upload_folder,
                        card_folder if i == len(commits) else folder, c.files, c.message, revision, c.delete or None)
            if i < len(commits):
                bar.update(sum(_size(folder, f) for f in c.files))
            out(f"commit {i}/{len(commits)}: {c.message}: {url}")
    if tag:
        _call(f"tagging {tag}", target.tag, tag, revision)
        out(f"tagged {tag}")
    return url


def _size(folder: Path, rel: str) -> int:
    try:
        return (folder / rel).stat().st_size
    except OSError:  # checked where it is read for the upload, with one line
        return 0


def stage_card(folder: Path, files: list[str], staged: Path, repo: str, revision: str | None) -> Path:
    """The last commit's files copied into ``staged``, the card as published: its load snippet and Repository
    line name ``repo`` (a ``file://`` repo: its folder) and ``revision`` (the tag, else the branch), so a reader of
    the repo copies a working ``load_dataset`` call. The local card stays as finalize wrote it."""
    for rel in files:
        dst = staged / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_inside(folder, rel), dst)
    readme = staged / "README.md"
    where = repo[len("file://"):] if repo.startswith("file://") else repo
    readme.write_text(for_repo(readme.read_text(encoding="utf-8"), where, revision), encoding="utf-8")
    return staged


def _dry_deletions(repo: str, revision: str | None, target: Target | None, shards: set[str],
                   mine: dict | None = None, replace: bool = False) -> str:
    """The dry run's line(s) of what the last commit deletes (the repo's manifest.json is read when it can be)."""
    try:
        target = target or target_for(repo, dry_run=True)
        previous = _call(f"reading manifest.json of {repo}", target.read_file, "manifest.json", revision)
    except GensetsError as e:
        return (f"  delete: cannot tell ({e}); only shards that the repo's manifest.json (an earlier gensets "
                "publish) lists and this version does not have would be deleted")
    if mine is not None and not replace:
        try:
            check_same_dataset(previous, mine, repo)
        except GensetsError as e:
            return f"  REFUSED: {e}"
    gone = deletions(previous, shards)
    if not gone:
        return "  delete nothing (no shard of an earlier gensets publish is missing from this version)"
    return "\n".join(f"  delete {f}" for f in gone)


# a local path inside a value: absolute (after a spec's `kind:` or `local-dir:`, a `file://`) or in the home folder
_LOCAL_PATH = re.compile(r"(?:(?<=^)|(?<=[\s:=,(]))(?:file://)?(?:~|/(?!/))[^\s,;@)]*")


def public(value):
    """``value`` fit to publish: a local path in it (``/home/me/out/ws``, ``~/x``, ``hf:/abs/model``) cut to its
    last name (a workspace's ``dataset/`` folder, a glob: the folder above: ``ws``; a home folder itself: ``user``,
    not the login name); the rest of the value as it is (the login name elsewhere is a name the user chose, a split
    ``test`` for the login ``test``); anything not a string as it is."""
    import getpass

    if not isinstance(value, str):
        return value

    login = None
    with contextlib.suppress(Exception):  # no login name to be found: nothing to replace
        login = getpass.getuser()

    def name(m) -> str:
        parts = [p for p in m.group(0).removeprefix("file://").split("/") if p not in ("", "~", ".", "..")]
        while parts and (parts[-1] == "dataset" or any(c in parts[-1] for c in "*?[")):
            parts.pop()
        last = parts[-1] if parts else "local"
        return "user" if login and last == login else last  # a home folder itself (/home/ana): not the login

    return _LOCAL_PATH.sub(name, value)  # only the paths: a split `test`, a dataset `ana-bench` stay as they are


def publish_results(db, repo: str, *, target: Target | None = None, revision: str | None = None,
                    dry_run: bool = False, out: Callable[[str], None] = print,
                    allow_random_weights: bool = False) -> str | None:
    """The leaderboard rows of a results database as ``results/leaderboard.parquet`` (and .csv, .html, .md) in
    the repo: datasets named without local paths, surrogate models marked (:mod:`gensets.evaluation.leaderboard`).
    A database holding runs of random-weight models (``tiny:``, ``random:``, or images one made: noise) is refused
    unless ``allow_random_weights``; then every file says so."""
    import tempfile

    rows = leaderboard.public_rows(db)
    if not rows:
        raise GensetsError(f"{db}: no runs to publish (run `gensets eval` first)")
    noise = sorted({r["model"] for r in rows if r.get("random_weights")})
    if noise and not allow_random_weights:
        more = f", ... ({len(noise)} in all)" if len(noise) > 5 else ""
        raise GensetsError(f"{db}: runs of random-weight models ({', '.join(noise[:5])}{more}): their numbers are "
                           "noise, for testing the path only; refusing to publish them (--allow-random-weights)")
    rels = [f"results/leaderboard.{ext}" for ext in ("parquet", "csv", "html", "md")]
    message = f"Leaderboard results ({len(rows)} rows)"
    check_repo(repo)
    rows = [{k: public(v) for k, v in r.items()} for r in rows]  # no local path leaves this machine
    if dry_run:
        out(f"create dataset repo {repo} if missing")
        out(f"commit 1/1 to {repo}: {message}")
        names = ", ".join(sorted({str(r.get("dataset")) for r in rows}))
        for rel in rels:
            out(f"  upload {rel}: {names}")
        out(f"the values it publishes ({rels[1]}):")
        for line in leaderboard.csv_text(rows).splitlines():
            out(f"  {line}")
        return None
    target = target or target_for(repo)
    with tempfile.TemporaryDirectory() as tmp:
        leaderboard.write(rows, Path(tmp) / "results")
        _call(f"creating the repo {repo}", target.create_repo, revision=revision)
        url = _call("uploading the results", target.upload_folder, Path(tmp), rels, message, revision)
    out(f"commit 1/1: {message}: {url}")
    return url
