"""The suite's fork server (tests/forkserver.py) runs a command as a fresh subprocess would, and only then."""

import os
import shutil
import subprocess
import sys

from .conftest import ROOT, _fork_server, module_fork_server, run_cli
from .forkserver import ForkServer


def _fresh(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gensets.cli", *args], capture_output=True, text=True,
                          env=env or dict(os.environ), cwd=ROOT)


def test_a_forked_command_gives_what_a_fresh_process_gives(tmp_path):
    server = _fork_server(dict(os.environ))
    assert server is not None and server.ready and not server.differences(dict(os.environ))
    assert server.usable(dict(os.environ), ROOT)
    before = server.n
    for args in (["list", "builders"], ["verify", str(tmp_path / "missing")], ["build", "--nope"]):
        forked, fresh = run_cli(*args), _fresh(*args)
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert server.n == before + 3  # each went through the server
    missing = run_cli("verify", tmp_path / "missing")
    assert missing.returncode == 2 and missing.stderr.startswith("gensets: error:") and "Traceback" not in missing.stderr


def test_another_environment_gets_a_fresh_process(tmp_path):
    server = _fork_server(dict(os.environ))
    before = server.n
    p = run_cli("list", "builders", env={"GENSETS_SOMETHING_NEW": "1"})
    assert p.returncode == 0 and server.n == before
    assert not server.usable({**os.environ, "OMP_NUM_THREADS": "3"}, ROOT)
    assert not server.usable(dict(os.environ), tmp_path)


def test_a_command_past_its_timeout_is_killed(tmp_path, small):
    shutil.copytree(small, tmp_path / "ws")
    server = ForkServer(ROOT, dict(os.environ))
    try:
        if not server.ready:  # a library started a thread on import: the suite runs fresh subprocesses
            return
        try:
            server.run(["review", "serve", str(tmp_path / "ws"), "--port", "0"], timeout=3)
        except subprocess.TimeoutExpired as e:
            assert e.timeout == 3 and "Traceback" not in e.stderr
        else:
            raise AssertionError("no timeout")
        assert server.run(["list", "builders"], 60).returncode == 0  # the server goes on
    finally:
        server.close()


def test_the_server_learns_the_modules_its_children_imported(small):
    """A child's library imports (verify decodes JPEGs: PIL's plugins) are made by the server after it: the next
    child finds them imported, and the server can still fork."""
    server = ForkServer(ROOT, dict(os.environ))
    try:
        if not server.ready:
            return
        assert server.run(["verify", str(small / "dataset")], 120).returncode == 0
        first = server.learned
        assert server.run(["verify", str(small / "dataset")], 120).returncode == 0
        assert first > 0 and server.learned == 0 and server.ready
    finally:
        server.close()


def test_a_module_environment_gets_its_own_server(monkeypatch):
    session = _fork_server(dict(os.environ))
    monkeypatch.setenv("GENSETS_TEST_MODULE_VARIABLE", "1")
    with module_fork_server() as server:
        before, session_before = server.n, session.n
        assert run_cli("list", "builders").returncode == 0
        assert server.n == before + 1 and session.n == session_before
    assert server.proc.poll() is not None  # closed with its block
    assert run_cli("list", "builders").returncode == 0  # a fresh subprocess again (the session's differs)
    assert session.n == session_before
