"""``python -m gensets.cli ARGS`` in a process forked from one that has already imported the heavy libraries.

Most of the suite's CPU time went into importing torch, torchvision, timm, open_clip, transformers, diffusers and
datasets once per command (5-7 s of CPU for a command that loads a model, about 380 commands). A *fork server*
(one per pytest process, started at its first command) imports them once, never runs them, and forks a child
per command. The child is a separate process, as ``subprocess.run`` would start: its own exit code, stdout and
stderr (files), stdin /dev/null, cwd and environment those of the server. gensets itself is imported by the child,
from scratch, exactly as by ``python -m gensets.cli``.

It is used only where it cannot change what a command does:
- the command's environment must equal the one the server was started with (every variable: a test that sets
  one, e.g. ``HF_HUB_OFFLINE=0`` or ``OMP_NUM_THREADS``, gets a real subprocess); the libraries read their
  settings (``HF_HOME``, the CPU kernel pins of ``reproducible: strict``) from that same environment at import
  (what they set for themselves on import, e.g. ``TOKENIZERS_PARALLELISM``, is set in a fresh process too);
- the server has started no thread (a fork would copy a lock held by one) and run no torch op (the kernels are
  picked at the first one, in the child, as in a fresh process).
Where either does not hold, or ``GENSETS_TEST_FORK=0``, every command is a real subprocess.

What a fresh process has that a child does not: its own hash seed (``PYTHONHASHSEED``); cross-process determinism
is what ``tests/test_golden.py`` checks (digests recorded by another process) and ``tests/test_reproducible.py``
(real subprocesses).

The server also learns: a child reports the modules it imported from the standard library and from the packages
of HEAVY and :data:`LEARN` (never gensets' own, the tests', code loaded from a model folder, Ray or an object-store
client), and the server imports them before its next fork, so later commands find them imported (diffusers' and
transformers' lazy submodules: about 2 s of CPU per build). An import that started a thread makes the server
unusable from then on (every later command a real subprocess).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# what the server may import after a child did (besides the packages of HEAVY and the standard library): libraries
# that keep no process state a fork would copy wrongly. Never Ray (its auth token and GCS client are read once per
# process), nor the object-store clients (event loops, sessions).
LEARN = ["huggingface_hub", "safetensors", "tokenizers", "pyarrow", "pandas", "torch_fidelity", "torchmetrics",
         "lpips", "sentencepiece", "regex", "ftfy", "yaml", "jinja2", "tqdm", "filelock", "PIL", "einops",
         "packaging", "pydantic", "sympy", "networkx", "joblib", "threadpoolctl"]
HEAVY = ["numpy", "PIL.Image", "torch", "torchvision", "timm", "open_clip", "transformers", "diffusers", "datasets",
         "accelerate", "duckdb", "sklearn.cluster", "scipy.linalg", "webdataset", "matplotlib.pyplot"]

_SERVER = r"""
import importlib, json, os, runpy, sys, threading, traceback
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        pass
ok = threading.active_count() == 1
import site, sysconfig
LIBS = tuple(os.path.realpath(p) + os.sep for p in {*site.getsitepackages(), sysconfig.get_paths()["stdlib"]})
STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
LEARN = {name.split(".")[0] for name in json.loads(sys.argv[1])} | set(json.loads(sys.argv[2]))
def learned(names):
    out = []
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(path, str) or not os.path.realpath(path).startswith(LIBS):
            continue
        in_site = "site-packages" in os.path.realpath(path).split(os.sep)
        if name.split(".")[0] in LEARN if in_site else os.path.realpath(path).startswith(STDLIB):
            out.append(name)
    return out
chan_in, chan_out = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
chan_out.write(json.dumps({"ready": ok, "threads": threading.active_count(), "env": dict(os.environ)}) + "\n")
chan_out.flush()
for line in chan_in:
    req = json.loads(line)
    seen = set(sys.modules)
    pid = os.fork()
    if pid == 0:
        chan_in.close(); chan_out.close()
        for fd, path in ((1, req["out"]), (2, req["err"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd); os.close(f)
        sys.stdout = sys.__stdout__ = open(1, "w", encoding=sys.stdout.encoding, errors="strict", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", encoding=sys.stderr.encoding, errors="backslashreplace",
                                           closefd=False, buffering=1)
        for k, v in req["env"].items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        sys.argv = ["-m", *req["argv"]]
        code = 0
        try:
            runpy.run_module("gensets.cli", run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr) or 1))
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            threading._shutdown()  # as the interpreter does at exit: join the non-daemon threads
        except Exception:
            pass
        import atexit
        atexit._run_exitfuncs()
        try:
            with open(req["mods"], "w") as f:
                json.dump(learned([m for m in list(sys.modules) if m not in seen]), f)
        except Exception:
            pass
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)
    chan_out.write(json.dumps({"pid": pid}) + "\n")
    chan_out.flush()
    _, status = os.waitpid(pid, 0)
    try:
        with open(req["mods"]) as f:
            names = json.load(f)
        os.unlink(req["mods"])
    except Exception:
        names = []
    n_learned = 0
    for name in names:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
                n_learned += 1
            except BaseException:
                pass
    ok = ok and threading.active_count() == 1
    chan_out.write(json.dumps({"status": os.waitstatus_to_exitcode(status), "ready": ok, "learned": n_learned}) + "\n")
    chan_out.flush()
"""


# set by pytest for each test, read by no library at import: passed to the child, not compared
VOLATILE = ("PYTEST_CURRENT_TEST",)


class ForkServer:
    """One server process; ``run(args, timeout)`` -> ``subprocess.CompletedProcess`` (text stdout / stderr)."""

    def __init__(self, cwd: Path, env: dict):
        self.env = dict(env)
        self.cwd = cwd
        self.tmp = tempfile.mkdtemp(prefix="gensets-fork-")
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, json.dumps(HEAVY), json.dumps(LEARN)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd, env=self.env,
                                     bufsize=1)
        hello = json.loads(self.proc.stdout.readline() or "{}")
        self.ready = bool(hello.get("ready"))
        # what the libraries set for themselves while imported (TOKENIZERS_PARALLELISM, TORCHINDUCTOR_CACHE_DIR):
        # a fresh process sets it too, as this process did when it imported them
        self.set_by_imports = {k: v for k, v in hello.get("env", {}).items() if self.env.get(k) != v}
        self.n = 0
        self.learned = 0

    def differences(self, env: dict) -> dict:
        """The variables where ``env`` differs from this server's: {name: (server's, env's)}."""
        mine = {k: v for k, v in self.env.items() if k not in self.set_by_imports and k not in VOLATILE}
        theirs = {k: v for k, v in env.items() if k not in VOLATILE
                  and not (k in self.set_by_imports and v == self.set_by_imports[k])}
        return {k: (mine.get(k), theirs.get(k)) for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)}

    def usable(self, env: dict, cwd: Path) -> bool:
        """Whether a child of this server runs with ``env`` as a fresh process would."""
        return (self.ready and self.proc.poll() is None and Path(cwd) == Path(self.cwd)
                and not self.differences(env))

    def _reply(self, deadline: float | None) -> dict | None:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    raise RuntimeError("the test fork server ended")
                return json.loads(line)

    def run(self, argv: list[str], timeout: float | None, env: dict | None = None) -> subprocess.CompletedProcess:
        """``argv`` in a child (``env``: the command's environment, as ``usable`` accepted it)."""
        self.n += 1
        out, err, mods = (os.path.join(self.tmp, f"{self.n}.{s}") for s in ("out", "err", "mods"))
        volatile = {k: (env or os.environ).get(k) for k in VOLATILE}
        self.proc.stdin.write(json.dumps({"argv": argv, "out": out, "err": err, "mods": mods, "env": volatile}) + "\n")
        self.proc.stdin.flush()
        pid = self._reply(None)["pid"]
        deadline = None if timeout is None else time.monotonic() + timeout
        reply = self._reply(deadline)
        timed_out = reply is None
        if timed_out:
            os.kill(pid, signal.SIGKILL)
            reply = self._reply(None)
        self.ready = self.ready and reply.get("ready", True)  # an import it learned started a thread: no more forks
        self.learned = reply.get("learned", 0)  # the modules the child imported that the server imported after it
        texts = []
        for path in (out, err):
            with open(path, encoding=None) as f:  # the locale's encoding, as subprocess.run(text=True)
                texts.append(f.read())
            os.unlink(path)
        cmd = [sys.executable, "-m", "gensets.cli", *argv]
        if timed_out:
            raise subprocess.TimeoutExpired(cmd, timeout, output=texts[0], stderr=texts[1])
        return subprocess.CompletedProcess(cmd, reply["status"], texts[0], texts[1])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.stdout.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
