import atexit
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gensets import determinism

# Every build, eval and report of the suite runs on the pinned CPU kernels of `reproducible: strict`, set before
# torch or numpy first runs in this process (and inherited by the processes it starts): the recorded digests
# (tests/test_golden.py) then hold on any x86-64 CPU of a recorded vendor, and a strict build in this process is
# never "too late".
determinism.pin("strict")

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "imagenet_d.smoke.yaml"


@pytest.fixture(scope="session", autouse=True)
def offline_env(tmp_path_factory):
    """Offline, with the tiny-model cache and HF caches in a session temp folder, which the processes of a
    pytest-xdist run share (tiny models are built once, renamed into place atomically)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = tmp_path_factory.getbasetemp().parent / "shared-env"
        base.mkdir(exist_ok=True)
    else:
        base = tmp_path_factory.mktemp("env")
    env = {
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(base / "hf"),
        "GENSETS_CACHE": str(base / "gensets-cache"), "TMPDIR": str(base / "tmp"),
    }
    (base / "tmp").mkdir(exist_ok=True)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _SESSION_ENV.update(os.environ)
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _environment_restored():
    """What a test (or a command it ran in this process) set in os.environ ends with it: the next test, and the
    fork server's environment check (tests/forkserver.py), see the session's environment."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}  # pytest's own, per phase
    yield
    if {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"} != env:
        now = os.environ.get("PYTEST_CURRENT_TEST")
        os.environ.clear()
        os.environ.update(env, **({"PYTEST_CURRENT_TEST": now} if now else {}))


SMALL = ("--set", "classes=[mug]", "--set", "nuisances={background: {limit: 2}}")  # a small smoke build


@pytest.fixture(scope="session")
def small(tmp_path_factory):
    """One small smoke build (one class, one nuisance kind), finalized with pending images; read only (tests that
    change a workspace copy it first)."""
    ws = tmp_path_factory.mktemp("small") / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL, check=0)
    run_cli("finalize", ws, "--include-pending", check=0)
    return ws


LONGEST = ("test_golden.py::test_smoke", "test_readme.py::test_readme_commands_run_as_written")


def pytest_collection_modifyitems(items):
    """The longest tests (every smoke build, eval and report: test_golden; every README command: test_readme), each
    at the start of its share of the collection: under ``pytest-xdist --dist worksteal`` (``make test``) each
    worker's queue is one contiguous share, so each starts one of them and steals the rest around it."""
    long = [i for i in items if any(name in i.nodeid for name in LONGEST)]
    rest = [i for i in items if i not in long]
    for j, item in enumerate(long):
        rest.insert(j * len(items) // len(long), item)
    items[:] = rest


_SESSION_ENV: dict = {}  # os.environ once offline_env set it: the fork server's environment
_FORK: list = []  # this pytest process's fork servers (tests/forkserver.py): the session's first


def _fork_server(env: dict):
    """A fork server whose children run as a fresh process with ``env`` would: the session's (started at the first
    command), or one a module started for the environment all its commands share (:func:`module_fork_server`);
    None otherwise (a variable set for one command: a fresh subprocess)."""
    if os.environ.get("GENSETS_TEST_FORK", "1") == "0":
        return None
    if not _FORK:
        from .forkserver import ForkServer

        _FORK.append(ForkServer(ROOT, _SESSION_ENV or dict(os.environ)))
        atexit.register(_FORK[0].close)
    return next((s for s in _FORK if s.usable(env, ROOT)), None)


@contextlib.contextmanager
def module_fork_server():
    """A fork server for the environment of ``os.environ`` now, while the block runs: a module that sets variables
    for all its commands (tests/test_object_store.py: an S3 endpoint and its credentials) starts its commands from
    it instead of a fresh process each."""
    from .forkserver import ForkServer

    server = None if os.environ.get("GENSETS_TEST_FORK", "1") == "0" else ForkServer(ROOT, dict(os.environ))
    if server is not None:
        _FORK.append(server)
    try:
        yield server
    finally:
        if server is not None:
            _FORK.remove(server)
            server.close()


# How long a test waits for work that is still making progress (a build, a Ray cluster and its workers starting)
# before it calls it hung. A guard against hangs, not a measure of speed: on this 2-core machine with two busy loops
# beside the suite, a 12-unit Ray build took over 10 minutes (its cluster and model loads 5.5), and a test that
# fails because the machine is slow is a timed test. Tests of a timeout or of a stop pass their own bound.
HANG = 3600


def run_cli(*args, env=None, check=None, timeout=HANG):
    """Run ``gensets`` in a process of its own, as a user would: forked from a process that has imported the
    heavy libraries where the environment is the session's or a module's (tests/forkserver.py), else a fresh
    subprocess."""
    full = {**os.environ, **(env or {})}
    server = _fork_server(full)
    if server is not None:
        p = server.run([str(a) for a in args], timeout, full)
    else:
        p = subprocess.run([sys.executable, "-m", "gensets.cli", *map(str, args)], capture_output=True,
                           text=True, env=full, timeout=timeout, cwd=ROOT)
    if check is not None and p.returncode != check:
        raise AssertionError(f"exit {p.returncode}, wanted {check}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    return p


# A test client's wait for an answer from `gensets review serve`: longer than the server's own wait for state.duckdb
# held by another process (holding.SERVER_WAIT, 10 s), so that under load a slow answer is the server's
# answer (200, or 503 busy), never the client giving up (a timeout raised in a reviewer thread once lost a decision)
HTTP_WAIT = 60


def stop_server(proc: subprocess.Popen, hang_s: float = 60) -> str | None:
    """Ctrl-C to a ``gensets review serve`` process, and its stderr (if piped) once it ended. It ends within 2 s
    of the signal, also under load (tests/test_review_stop.py); ``hang_s`` only guards against a hang: then it
    is killed and the test fails, instead of the server outliving it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=hang_s)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        err = proc.communicate()[1]
        raise AssertionError(f"gensets review serve still ran {hang_s} s after SIGINT; stderr: {err}") from None


@pytest.fixture
def server_factory():
    """``start(ws, *args, token=None)``: a ``gensets review serve`` (tests/test_review_web.py's Server); every
    server a test started is stopped after it (a server that does not stop fails the test)."""
    from .test_review_web import Server

    servers = []

    def start(ws, *args, token=None):
        servers.append(Server(ws, *args, token=token))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def owner_session(client, rs, token: str | None = None):
    """A Flask test client of the review page signed in as its owner (the link ``review serve`` prints), or with
    ``token`` (an invited reviewer's link): the link exchanged for a session (``POST /api/session``, as the page's
    script does), whose id and CSRF token go with every request."""
    r = client.post("/api/session", json={"token": token or rs.owner_token})
    assert r.status_code == 200, r.get_json()
    got = r.get_json()
    client.environ_base["HTTP_X_GENSETS_SESSION"] = got["session"]
    client.environ_base["HTTP_X_CSRF_TOKEN"] = got["csrf"]
    return client


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """One uninterrupted build of the smoke config, finalized with pending images."""
    ws = tmp_path_factory.mktemp("ref") / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, "--include-pending", check=0)
    return ws
