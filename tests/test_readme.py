"""Every command README.md shows runs as written (issue: the README drifted from the code once).

The fenced ``bash`` and ``python`` blocks are run top to bottom, as a newcomer would, in one temporary folder
that holds links to this checkout's ``configs/``, ``scripts/``, ``Makefile`` and virtualenv (and copies of
``pyproject.toml`` and the locks), so every ``out/...`` path a command writes lands in that folder; nothing else is
substituted.
Three kinds of line are not run as is, each recognised from the README itself:

- ``make test`` (``make test-slow``, ``make test-all``): this test suite itself;
- a line whose comment says it needs GPUs or the Hub (``# paper scale (GPUs, Hub)``, ``# needs the Hub``): run
  offline, it must stop within a minute with a non-zero exit and one ``gensets: error:`` line naming what is missing;
- ``gensets review serve ...``: a server; it must answer its page, then it is stopped.

A line that is only ``gensets`` commands (``gensets ARGS``, or several joined by ``&&``, with no other shell syntax)
runs each in a child of a fork server (tests/forkserver.py) started in that folder with the same environment: a
process of its own, as the ``gensets`` script starts, without importing torch and the rest again (about 7 s of CPU
per command); anything else runs in ``bash -c``.

``test_readme_check_fails_on_a_broken_command`` shows the check has teeth: a copy of the README with one
command broken fails it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import HANG, ROOT, stop_server

pytestmark = pytest.mark.slow  # `make test-slow` and CI: every README command, in order

FENCE = re.compile(r"^```(bash|python)\n(.*?)^```", re.M | re.S)
NEEDS_HUB = re.compile(r"#.*(GPUs, Hub|needs the Hub)")
LINKED = ["configs", "scripts", "Makefile"]


def blocks(readme: str) -> list[tuple[str, str]]:
    """The (language, text) of every fenced bash / python block, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(readme)]


def commands(readme: str) -> list[tuple[str, str]]:
    """(kind, command) in README order: kind is python, skip, offline-fails, server or run."""
    out = []
    for lang, text in blocks(readme):
        if lang == "python":
            out.append(("python", text))
            continue
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line.split("#")[0].split() in (["make", "test"], ["make", "test-slow"], ["make", "test-all"]):
                out.append(("skip", line))
            elif NEEDS_HUB.search(line):
                out.append(("offline-fails", line))
            elif line.split()[:3] == ["gensets", "review", "serve"]:
                out.append(("server", line))
            else:
                out.append(("run", line))
    return out


def _folder(tmp: Path) -> Path:
    work = tmp / "readme"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    # make's venv rule (`$(STAMP): pyproject.toml $(LOCK)`) must see the existing venv as up to date: copies, dated 1970
    for name in ["pyproject.toml", "requirements/lock.txt", "requirements/distributed.lock.txt"]:
        (work / name).parent.mkdir(exist_ok=True)
        (work / name).write_bytes((ROOT / name).read_bytes())
        os.utime(work / name, (0, 0))
    (work / ".venv").symlink_to(Path(sys.executable).resolve().parents[1]
                                if not (ROOT / ".venv").exists() else ROOT / ".venv")
    return work


def _env() -> dict:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    # a worktree or an uninstalled checkout: the package this test is testing
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _serve(line: str, work: Path, env: dict) -> str | None:
    """Start the server the line starts; None once its page answered, else what went wrong."""
    m = re.search(r"--port\s+(\d+)", line)
    url = f"http://127.0.0.1:{m.group(1) if m else 8765}/"
    p = subprocess.Popen(["bash", "-c", "exec " + line], cwd=work, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline:
            if p.poll() is not None:
                return f"exited {p.returncode}: {p.stderr.read()[-2000:]}"
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return None
            except OSError:
                time.sleep(0.5)
        return f"{url} did not answer in {HANG} s"
    finally:
        stop_server(p)


SHELL = re.compile(r"[|;<>`$(){}*?~\\\n]|(?<!&)&(?!&)")  # what only a shell gives meaning to (&& is split here)


def gensets_argvs(line: str) -> list[list[str]] | None:
    """The argument lists of a line that is only ``gensets`` commands joined by ``&&``; None otherwise."""
    import shlex

    code = line.split(" #")[0]
    if SHELL.search(code):
        return None
    try:
        argvs = [shlex.split(part) for part in code.split("&&")]
    except ValueError:
        return None
    return [a[1:] for a in argvs] if all(a and a[0] == "gensets" for a in argvs) else None


def _run(kind: str, cmd: str, work: Path, env: dict, fork) -> subprocess.CompletedProcess:
    timeout = 60 if kind == "offline-fails" else 900
    argvs = gensets_argvs(cmd) if kind != "python" else None
    if argvs is None or not fork.usable(env, work):
        argv = [sys.executable, "-c", cmd] if kind == "python" else ["bash", "-c", cmd]
        return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    out = err = ""
    for args in argvs:  # as `a && b`: the next runs only when this one succeeded
        p = fork.run(args, timeout, env)
        out, err = out + p.stdout, err + p.stderr
        if p.returncode != 0:
            break
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def run_readme(readme: str, tmp: Path) -> list[str]:
    """Run every command of ``readme``; the failures, each as one message (empty: all ran as written)."""
    from .forkserver import ForkServer

    work, env = _folder(tmp), _env()
    fork = ForkServer(work, env)
    try:
        return _run_all(readme, work, env, fork)
    finally:
        fork.close()


def _run_all(readme: str, work: Path, env: dict, fork) -> list[str]:
    failures, took = [], []
    for kind, cmd in commands(readme):
        if kind == "skip":
            continue
        took.append((time.monotonic(), cmd))
        if kind == "server":
            if (why := _serve(cmd, work, env)) is not None:
                failures.append(f"{cmd!r}: {why}")
            continue
        try:
            p = _run(kind, cmd, work, env, fork)
        except subprocess.TimeoutExpired:
            failures.append(f"{cmd!r}: did not finish ({'offline, it must fail fast' if kind == 'offline-fails' else 'timeout'})")
            continue
        if kind == "offline-fails":
            errors = [x for x in p.stderr.splitlines() if x.startswith("gensets: error:")]
            if p.returncode == 0 or len(errors) != 1 or "Traceback" in p.stderr:
                failures.append(f"{cmd!r}: offline it must fail with one 'gensets: error:' line; exit "
                                f"{p.returncode}, stderr: {p.stderr[-1500:]}")
        elif p.returncode != 0:
            failures.append(f"{cmd!r}: exit {p.returncode}\n{p.stderr[-3000:]}")
    took = sorted(((end - start, cmd) for (start, cmd), (end, _) in zip(took, [*took[1:], (time.monotonic(), "")], strict=True)),
                  reverse=True)
    print("slowest README commands:", *(f"{s:6.1f} s  {cmd.split('#')[0].strip()[:110]}" for s, cmd in took[:15]),
          sep="\n  ")
    return failures


def test_readme_commands_run_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    kinds = [k for k, _ in commands(readme)]
    assert kinds.count("run") >= 10 and "offline-fails" in kinds and "server" in kinds and "python" in kinds
    assert run_readme(readme, tmp_path) == []


def test_readme_check_fails_on_a_broken_command(tmp_path):
    """One README command broken in a copy (a flag renamed): the check names exactly that command."""
    readme = (ROOT / "README.md").read_text()
    first = next(cmd for kind, cmd in commands(readme) if kind == "run" and cmd.startswith("gensets build "))
    broken = first.replace("--out", "--output-folder", 1)
    only = "```bash\n" + broken + "\n```\n"
    failures = run_readme(only, tmp_path)
    assert len(failures) == 1 and failures[0].startswith(repr(broken)), failures


@pytest.mark.parametrize("line, argvs", [
    ("gensets finalize out/x   # accepted images", [["finalize", "out/x"]]),
    ("gensets build c.yaml --out out/rec && gensets finalize out/rec", [["build", "c.yaml", "--out", "out/rec"],
                                                                        ["finalize", "out/rec"]]),
    ("gensets build c.yaml --set 'labels=[tench]'", [["build", "c.yaml", "--set", "labels=[tench]"]]),
    ("gensets publish x --repo file://$PWD/out/p", None),
    ("gensets eval x > out.txt", None),
    ("make demo", None),
    ("python scripts/leaderboard.py c.yaml", None),
    ("gensets build a && make demo", None),
])
def test_plain_gensets_lines_are_recognised(line, argvs):
    assert gensets_argvs(line) == argvs


@pytest.mark.parametrize("line, kind", [
    ("make test    # creates .venv", "skip"),
    ("make test-slow", "skip"),
    ("make build-genbench DATASET=oxford-pets STRATEGY=CE   # paper scale (GPUs, Hub)", "offline-fails"),
    ("gensets review serve out/x --reviewer ana   # the page", "server"),
    ("gensets finalize out/x   # accepted images", "run"),
])
def test_readme_lines_are_classified_from_the_readme(line, kind):
    assert commands(f"```bash\n{line}\n```\n") == [(kind, line)]
