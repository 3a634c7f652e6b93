"""Where weights come from: local paths, the local Hugging Face cache, or the Hub (probed once, fast).

Without network a hub download retries for ~20 s before failing; ensure_reachable() decides up front,
in well under 10 s, and turns "not reachable and not cached" into one ModelError line.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from pathlib import Path

from gensets.errors import ModelError, ModelUnavailable
from gensets.models.spec import ModelSpec

PROBE_TIMEOUT = 3.0
PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}(/[A-Za-z0-9][\w.\-]{0,95})?$")
_probe_results: dict[str, bool] = {}
_probes: dict[str, tuple[threading.Thread, list[bool], float]] = {}


def local_or_repo(spec: ModelSpec, name: str) -> tuple[Path | None, str | None]:
    """(existing local path, None) or (None, Hub repo id); ModelError when `name` is neither."""
    path = Path(name).expanduser()
    if path.exists():
        return path.resolve(), None
    looks_like_path = name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1
    if looks_like_path:
        raise ModelError(f"model {spec.raw!r}: local path {name!r} does not exist")
    check_repo_id(spec, name, "neither an existing local path nor ")
    return None, name


def check_repo_id(spec: ModelSpec, repo_id: str, what: str = "not ") -> None:
    if not _REPO_ID.match(repo_id) or "--" in repo_id or ".." in repo_id:
        raise ModelError(f"model {spec.raw!r}: {repo_id!r} is {what}a valid Hub repo id")


def hub_repo(spec: ModelSpec) -> str | None:
    """The Hub repo id a spec downloads from, when it can be told from the spec alone."""
    if spec.kind in ("timm", "open_clip"):
        prefix, sep, rest = spec.name.partition(":")
        return rest if sep and prefix == "hf-hub" else None
    if spec.kind in ("hf", "diffusers"):
        return local_or_repo(spec, spec.name)[1]
    return None


def hub_cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def cached_commit(repo_id: str, revision: str | None = None) -> str | None:
    """The commit of `repo_id@revision` held in the local HF cache, or None when it is not there."""
    repo_dir = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    ref = repo_dir / "refs" / rev
    commit = ref.read_text().strip() if ref.is_file() else rev
    snapshot = repo_dir / "snapshots" / commit
    if snapshot.is_dir() and any(snapshot.iterdir()):
        return commit
    return None


def offline_env() -> bool:
    return any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or "https://huggingface.co"


def _probe(endpoint: str, timeout: float, answer: list[bool]) -> None:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
        answer.append(True)
    except urllib.error.HTTPError:  # any HTTP answer means the Hub can be reached
        answer.append(True)
    except Exception:
        answer.append(False)


def start_probe(timeout: float = PROBE_TIMEOUT, endpoint: str | None = None) -> None:
    """Start the probe of `endpoint` (default: the Hub's) in the background (e.g. while a library is being
    imported)."""
    endpoint = endpoint or hub_endpoint()
    if offline_env() or endpoint in _probes or endpoint in _probe_results:
        return
    answer: list[bool] = []
    thread = threading.Thread(target=_probe, args=(endpoint, timeout, answer), daemon=True)
    thread.start()
    _probes[endpoint] = (thread, answer, time.monotonic())


def reachable(endpoint: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """One HEAD request to `endpoint`, no retries, bounded by `timeout` from its start (DNS included); False at
    once in offline mode (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE: gensets' one offline switch).

    The answer is remembered for the life of the process.
    """
    if offline_env():
        return False
    if endpoint not in _probe_results:
        start_probe(timeout, endpoint)
        thread, answer, started = _probes[endpoint]
        thread.join(max(0.0, timeout - (time.monotonic() - started)))
        _probe_results[endpoint] = bool(answer and answer[0])
        _probes.pop(endpoint, None)
    return _probe_results[endpoint]


def hub_reachable(timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the Hub endpoint answers (:func:`reachable`)."""
    return reachable(hub_endpoint(), timeout)


def ensure_reachable(spec: ModelSpec, repo_id: str | None = None) -> bool:
    """Check that the Hub repo behind `spec` can be loaded; return False when it must come from the cache.

    `repo_id` overrides the repo told from the spec (timm registry names and open_clip tags map to
    repos only through their library). Local paths and tiny: specs need nothing and return True.
    Raises ModelError (one line) when the repo is neither reachable nor in the local cache.
    """
    repo_id = repo_id or hub_repo(spec)
    if repo_id is None:
        return True
    cached = cached_commit(repo_id, spec.revision) is not None
    if offline_env():
        reason = "offline mode is set (HF_HUB_OFFLINE)"
    elif hub_reachable():
        return True
    else:
        reason = f"no network access to the Hugging Face Hub ({hub_endpoint()})"
    if cached:
        return False
    rev = f"@{spec.revision}" if spec.revision else ""
    raise ModelUnavailable(
        f"model {spec.raw!r} is not available: {reason} and {repo_id}{rev} is not in the local cache"
        f" ({hub_cache_dir()}) (offline); offline, `make demo` runs the same pipeline on tiny: models"
    )


@contextlib.contextmanager
def hub_offline(active: bool = True):
    """While active, every huggingface_hub request fails at once so libraries fall back to the cache."""
    if not active:
        yield
        return
    from huggingface_hub import constants

    old = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = old


@contextlib.contextmanager
def quiet_progress(*libs: str):
    """No "Loading weights" / "Loading pipeline components" progress bars from these libraries
    ("transformers", "diffusers"); their progress bar setting is restored afterwards. huggingface_hub's own
    download bars stay as they were (transformers' ``disable_progress_bar`` turns those off too): a model that is
    downloaded shows its files' progress, one that loads from the cache shows nothing."""
    import importlib

    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    downloads = not are_progress_bars_disabled()
    logs = [importlib.import_module(f"{lib}.utils.logging") for lib in libs]
    was = [log.is_progress_bar_enabled() for log in logs]
    for log in logs:
        log.disable_progress_bar()
    if downloads:
        enable_progress_bars()
    try:
        yield
    finally:
        for log, enabled in zip(logs, was, strict=True):
            if enabled:
                log.enable_progress_bar()  # (transformers' also turns huggingface_hub's bars back on)
        (enable_progress_bars if downloads else disable_progress_bars)()


def check_local_weights(spec: ModelSpec, path: Path, allow_pickle: bool) -> None:
    """Refuse a local model folder (or its component subfolders) whose weights exist only as pickle."""
    if allow_pickle or not path.is_dir():
        return
    for folder in [path, *sorted(p for p in path.iterdir() if p.is_dir())]:
        files = [f for f in folder.iterdir() if f.is_file()]
        pickles = [f.name for f in files if f.suffix in PICKLE_SUFFIXES]
        if pickles and not any(f.suffix == ".safetensors" for f in files):
            raise ModelError(
                f"model {spec.raw!r}: weights in {folder} are pickle only ({', '.join(pickles)}); "
                "refusing to load them (convert to safetensors or pass allow_pickle=True)"
            )


def one_line(exc: BaseException) -> str:
    """The first non-empty line of an exception message, for wrapping library errors in ModelError.

    A refusal to run a repo's own code says, in that line, how to allow it (the libraries say it further
    down, or only in an interactive prompt)."""
    text = str(exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    out = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
    if "trust_remote_code" in text or "contains custom code" in text:
        out += " (it runs the repo's own Python code: read it, then pass --trust-remote-code / trust_remote_code=True)"
    return out
