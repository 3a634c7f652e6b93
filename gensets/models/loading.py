"""From a model spec to the place its weights load from: the one sequence every loader follows.

    resolve(spec)       tiny:<kind>, random:<kind> -> its folder (built on first use); a local folder (an hf: / diffusers:
                        path, timm: / open_clip: local-dir:PATH) -> the folder, refusing a revision and
                        pickle-only weights; a Hub repo (an hf: / diffusers: repo id, hf-hub:org/repo, or the
                        repo a library maps a timm name or open_clip tag to) -> the repo, after
                        hub.ensure_reachable (offline and not cached: one ModelError line)
    Source.commit()     the revision recorded after loading
    load_errors(spec)   a library's exception while loading -> one ModelError line naming the spec
    expect(spec, ...)   refuses a spec the loader does not read, naming the specs it does
    torch_checkpoint()  torchvision weights: the torch hub checkpoint file (a tiny model's folder, else
                        TORCH_HOME's), offline and not cached: one ModelError line before any download
    torch_home(folder)  a context in which torch.hub reads checkpoints from `folder` (a tiny model's)
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from gensets import notices
from gensets.errors import ModelError, ModelUnavailable
from gensets.models import hub
from gensets.models.spec import ModelSpec
from gensets.models.tiny import built_kinds, built_model, built_path


@dataclass(frozen=True)
class Source:
    """Where a model loads from: a local folder (`path`) or a Hub repo (`repo`) at `revision`."""

    path: Path | None
    repo: str | None
    revision: str | None  # the revision the spec asks for (None for a folder)
    model_id: str  # what results record as the model: the repo, the folder, the library's name, or tiny:<kind>
    online: bool  # False: the Hub cannot be reached and the repo loads from the local HF cache

    @property
    def location(self) -> str:
        """What `from_pretrained` takes: the repo id or the folder."""
        return self.repo or str(self.path)

    def hub_kwargs(self) -> dict:
        """`from_pretrained` arguments for a Hub repo: the revision, and the local cache only when offline."""
        return dict(revision=self.revision, local_files_only=not self.online) if self.repo else {}

    def offline(self):
        """A context in which every Hub request fails at once when the repo must come from the cache."""
        return hub.hub_offline(not self.online)

    def commit(self, config=None) -> str | None:
        """The revision to record after loading: for a Hub repo, the commit loaded (a transformers `config`
        knows it, else the local HF cache's); else, or when unknown, the revision asked for."""
        if self.repo:
            loaded = getattr(config, "_commit_hash", None) or hub.cached_commit(self.repo, self.revision)
            if loaded:
                return loaded
        return self.revision


def resolve(
    spec: ModelSpec,
    allow_pickle: bool = False,
    *,
    repo: str | None = None,
    model_id: str | None = None,
    check_weights: bool = True,
) -> Source:
    """Where the model of `spec` loads from (see the module docstring); ModelError (one line) when nowhere.

    For a timm registry name or an open_clip pretrained tag, the caller passes the Hub `repo` its library
    maps it to (None: weights from elsewhere) and the `model_id` to record. `check_weights=False` leaves the
    refusal of pickle weights in a local folder to the caller (open_clip checks the one file it loads).
    """
    path = None
    if spec.is_built:
        path, model_id = built_path(spec.kind, spec.name), spec.raw
    elif spec.kind in ("timm", "open_clip"):
        prefix, sep, rest = spec.name.partition(":")
        if sep and prefix == "local-dir":
            path = _local_dir(spec, rest)
            model_id = str(path)
        elif sep and prefix == "hf-hub":
            hub.check_repo_id(spec, rest)
            repo = model_id = rest
    else:  # hf, diffusers
        path, repo = hub.local_or_repo(spec, spec.name)
        model_id = repo or str(path)
    if path is not None:
        if spec.revision:
            raise ModelError(
                f"model {spec.raw!r}: a revision applies to Hub repos, not to local path {str(path)!r}"
            )
        if check_weights:
            hub.check_local_weights(spec, path, allow_pickle)
    online = hub.ensure_reachable(spec, repo)
    source = Source(path=path, repo=repo, revision=spec.revision, model_id=model_id or spec.name, online=online)
    announce(spec, source)
    return source


def announce(spec: ModelSpec, source: Source) -> None:
    """One line on stderr as a model starts loading: its spec, revision and where it comes from (built here, a
    folder, the local cache, or the Hub: downloaded on first use). The CLI turns it on (GENSETS_ANNOUNCE=1, not
    under --quiet / --json) for a terminal; GENSETS_ANNOUNCE=always prints it to any stderr."""
    mode = os.environ.get("GENSETS_ANNOUNCE", "")
    if not (mode == "always" or (mode == "1" and sys.stderr.isatty())):
        return
    rev = f"@{source.revision}" if source.revision else ""
    if spec.is_built:
        where = f"built locally ({source.path})"
    elif source.path is not None:
        where = f"the folder {source.path}"
    elif source.online:
        where = f"the Hub, {source.repo}{rev} (downloaded on first use, then from the cache)"
    else:
        where = f"the local cache, {source.repo}{rev} (offline)"
    notices.notice(f"loading {spec.raw}: from {where}")


def _local_dir(spec: ModelSpec, path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelError(f"model {spec.raw!r}: local model folder {path!r} does not exist")
    return p.resolve()


def load_error(spec: ModelSpec, exc: BaseException, what: str = "") -> ModelError:
    """`model '<spec>' cannot be loaded<what>: <the first line of exc>`."""
    return ModelError(f"model {spec.raw!r} cannot be loaded{what}: {hub.one_line(exc)}")


@contextlib.contextmanager
def load_errors(spec: ModelSpec, what: str = ""):
    """Inside, any exception but a ModelError becomes load_error(spec, exc, what), without its traceback."""
    try:
        yield
    except ModelError:
        raise
    except Exception as e:
        raise load_error(spec, e, what) from None


def expect(spec: ModelSpec, kind: str, loader: str, what: str) -> None:
    """Refuse a spec that is neither `<kind>:` nor a tiny or random model registered for `loader`:
    `model '<spec>' is not <what> (use <kind>:<repo or path>, tiny:a, random:b or random:c)`."""
    if spec.kind == kind or (spec.is_built and loader in built_model(spec.kind, spec.name).loaders):
        return
    options = [f"{kind}:<repo or path>", *(f"{family}:{k}" for family in ("tiny", "random")
                                           for k in built_kinds(family, loader))]
    use = " or ".join(filter(None, [", ".join(options[:-1]), options[-1]]))
    raise ModelError(f"model {spec.raw!r} is not {what} (use {use})")


def torch_checkpoint(spec: ModelSpec, url: str, home: Path | None = None) -> Path:
    """The torch hub checkpoint file that torchvision loads `url` from: under `home`/hub/checkpoints (a tiny
    model's folder) or torch.hub's own folder (TORCH_HOME). When it is not there and the download server
    cannot be reached (or offline mode is set), one ModelError line, before anything tries the network; when
    it can be, the path (torchvision then downloads it and checks its hash)."""
    from urllib.parse import urlparse

    import torch

    folder = home / "hub" / "checkpoints" if home is not None else Path(torch.hub.get_dir()) / "checkpoints"
    where = urlparse(url)
    path = folder / Path(where.path).name
    if path.is_file():
        return path
    if home is not None:
        raise ModelError(f"model {spec.raw!r}: {path.name} is missing from {folder}")
    server = f"{where.scheme}://{where.netloc}"
    if hub.reachable(server):
        return path
    reason = "offline mode is set (HF_HUB_OFFLINE)" if hub.offline_env() else f"no network access to {server}"
    raise ModelUnavailable(
        f"model {spec.raw!r} is not available: {reason} and {path.name} is not in the torch hub cache ({folder})"
        " (offline); offline, `make demo` runs the same pipeline on tiny: models"
    )


@contextlib.contextmanager
def torch_home(home: Path | None):
    """Inside, torch.hub reads (and would write) checkpoints under `home`/hub (TORCH_HOME); None: unchanged."""
    if home is None:
        yield
        return
    import torch

    old = os.environ.get("TORCH_HOME")
    os.environ["TORCH_HOME"] = str(home)
    try:
        if Path(torch.hub.get_dir()) != home / "hub":  # torch.hub.set_dir() was called: TORCH_HOME is not read
            raise ModelError(f"torch.hub reads {torch.hub.get_dir()}, not {home / 'hub'} (torch.hub.set_dir)")
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_HOME", None)
        else:
            os.environ["TORCH_HOME"] = old
