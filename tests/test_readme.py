"""Every command README.md shows runs as written, and leaves the checkout clean (issues: the README drifted from
the code once; it named no setup step and its commands left files in the repository root, #48).

The fenced ``bash`` and ``python`` blocks are run top to bottom, as a newcomer types them, in a scratch git
checkout of this repository: ``git clone --shared`` of this one, then this working tree's files copied over it
(tracked and untracked-but-not-ignored ones, uncommitted edits included) and committed there, so its
``git status --porcelain`` is empty to begin with. Its ``.venv`` is a folder of links to this checkout's
virtualenv (a real folder, so the repository's own ``.venv/`` rule ignores it), its ``pyproject.toml`` and locks
dated 1970 so that make's venv rule sees that venv as up to date, and ``PYTHONPATH`` is the scratch checkout (the
venv's gensets is an editable install of the repository it was made for: this makes every process run the
checkout's code). The commands run in a newcomer's shell: the session's environment (offline, the test caches)
with no virtualenv on ``PATH``. The README's setup line (``. .venv/bin/activate``, recognised from the README
itself, which must hold it before its first ``python`` or ``gensets`` command) takes effect where the README
gives it: every command after it runs as ``bash -c '<setup line> || exit 99; <command>'`` (python blocks: the
activated ``python`` reading the block), the ones before it (``make demo``) without it.

After each command ``git status --porcelain --untracked-files=all`` must be what it was: a command that leaves a
file outside the ignored folders (``out/``, ``.venv/``, ...) in the checkout, or changes a tracked file, fails,
named with what it left; so the checkout is as clean after the last command as before the first.

Three kinds of line are not run as is, each recognised from the README itself:

- ``make test`` (``make test-slow``, ``make test-all``): this test suite itself;
- a line whose comment says it needs GPUs or the Hub (``# paper scale (GPUs, Hub)``, ``# needs the Hub``): run
  offline, it must stop within a minute with a non-zero exit and one ``gensets: error:`` line naming what is missing;
- ``gensets review serve ...``: a server; it must answer its page, then it is stopped.

A line after the setup line that is only ``gensets`` commands (``gensets ARGS``, or several joined by ``&&``, with
no other shell syntax) runs each in a child of a fork server (tests/forkserver.py) started in the checkout with the
environment the setup line gives (read from ``bash`` once it ran it), when the activated ``gensets`` is the script
of this interpreter's venv: that is what the activated ``gensets`` script does (``python -m gensets.cli ARGS``
in a process of its own, with that environment, in that folder), without importing torch and the rest again
(about 7 s of CPU per command); anything else runs in ``bash -c``.

The check has teeth: ``test_readme_check_fails_on_a_broken_command`` (a copy of the README with one command
broken fails it), ``test_readme_check_fails_on_a_file_left_in_the_checkout`` (one command writing
``results.duckdb`` into the checkout's root fails it) and ``test_readme_commands_need_the_setup_line`` (without
the setup line ``gensets`` is "command not found").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .conftest import HANG, ROOT, stop_server

pytestmark = pytest.mark.slow  # `make test-slow` and CI: every README command, in order

FENCE = re.compile(r"^( *)```(bash|python)\n(.*?)^\1```", re.M | re.S)  # a block in a list item is indented
NEEDS_HUB = re.compile(r"#.*(GPUs, Hub|needs the Hub)")
ACTIVATE = re.compile(r"(\.|source)\s+\.venv/bin/activate")  # the README's setup line, its comment aside
# make's venv rule (`$(STAMP): pyproject.toml $(LOCK)`) must see the existing venv as up to date: these dated 1970
VENV_INPUTS = ["pyproject.toml", "requirements/lock.txt", "requirements/distributed.lock.txt"]
NOT_FOUND = 99  # the exit of a command whose setup line failed


def blocks(readme: str) -> list[tuple[str, str]]:
    """The (language, text) of every fenced bash / python block, in order; an indented one (in a list item)
    without its indent."""
    return [(m.group(2), "".join(line[len(m.group(1)):] for line in m.group(3).splitlines(keepends=True)))
            for m in FENCE.finditer(readme)]


def _code(line: str) -> str:
    return line.split(" #")[0].strip()


def commands(readme: str) -> list[tuple[str, str]]:
    """(kind, command) in README order: kind is python, skip, activate, offline-fails, server or run."""
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
            elif ACTIVATE.fullmatch(_code(line)):
                out.append(("activate", line))
            elif NEEDS_HUB.search(line):
                out.append(("offline-fails", line))
            elif line.split()[:3] == ["gensets", "review", "serve"]:
                out.append(("server", line))
            else:
                out.append(("run", line))
    return out


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def checkout(tmp: Path) -> Path:
    """A scratch git checkout of this repository holding this working tree's files, committed: ``git status
    --porcelain`` empty. Its ``.venv``: links to this checkout's virtualenv (or this interpreter's)."""
    repo = tmp / "repo"
    _git("clone", "--shared", "--quiet", "--no-checkout", str(ROOT), str(repo), cwd=tmp)
    _git("checkout", "--quiet", "--detach", _git("rev-parse", "HEAD", cwd=ROOT).strip(), cwd=repo)
    for name in _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0"):
        if not name:
            continue
        src, dst = ROOT / name, repo / name
        if dst.is_symlink() or dst.is_file():
            dst.unlink()
        if src.is_symlink() or src.is_file():  # else deleted in the working tree: deleted here too
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
    _git("add", "--all", cwd=repo)
    if porcelain(repo):
        _git("-c", "user.name=test_readme", "-c", "user.email=test_readme@localhost", "-c", "commit.gpgsign=false",
             "commit", "--quiet", "--no-verify", "-m", "the working tree under test", cwd=repo)
    venv = ROOT / ".venv" if (ROOT / ".venv" / "bin").is_dir() else Path(sys.prefix)
    (repo / ".venv").mkdir()
    for entry in venv.iterdir():
        (repo / ".venv" / entry.name).symlink_to(entry)
    for name in VENV_INPUTS:
        os.utime(repo / name, (0, 0))
    return repo


def porcelain(repo: Path) -> str:
    """``git status --porcelain`` of the checkout, every untracked file named (ignored ones not)."""
    return _git("status", "--porcelain", "--untracked-files=all", cwd=repo)


def _is_venv_bin(path: str) -> bool:
    return bool(path) and (Path(path).parent / "pyvenv.cfg").is_file()


def newcomer_env(repo: Path) -> dict:
    """The environment of a newcomer's shell in the checkout: this session's (offline, the test caches), no
    virtualenv active or on PATH; PYTHONPATH the checkout (the code under test, see the module's docstring)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not _is_venv_bin(p))
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and not (Path(p).exists() and Path(p).samefile(ROOT))]
    env["PYTHONPATH"] = os.pathsep.join([str(repo), *rest])
    return env


class Shell:
    """Runs README commands in the checkout as a newcomer's shell would, with the README's setup line in effect
    once it ran."""

    def __init__(self, repo: Path, env: dict):
        self.repo, self.env = repo, env
        self.setup: str | None = None  # the setup line's command, once run
        self.activated: dict | None = None  # the environment it gives (what a command after it runs with)
        self._fork = None

    def script(self, cmd: str) -> str:
        return cmd if self.setup is None else f"{self.setup} || exit {NOT_FOUND}\n{cmd}"

    def bash(self, cmd: str, timeout: float, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", self.script(cmd)], cwd=self.repo, env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=timeout)

    def activate(self, line: str) -> str | None:
        """Run the setup line; None once in effect, else what went wrong."""
        p = subprocess.run(["bash", "-c", f"{_code(line)} || exit {NOT_FOUND}\nexec env -0"], cwd=self.repo,
                           env=self.env, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            return f"exit {p.returncode}: {p.stderr[-2000:]}"
        self.setup = _code(line)
        self.activated = dict(v.split("=", 1) for v in p.stdout.split("\0") if "=" in v)
        self.activated.pop("_", None)  # bash's: the path of the last command (here env itself)
        return None

    def fork(self):
        """The fork server for the activated environment, started at the first plain gensets line; None where
        its children would not be what the activated ``gensets`` is (another venv's script)."""
        if self.activated is None:
            return None
        if self._fork is None:
            from .forkserver import ForkServer

            script = shutil.which("gensets", path=self.activated.get("PATH"))
            mine = script is not None and Path(script).parent.samefile(Path(sys.executable).parent)
            self._fork = ForkServer(self.repo, self.activated) if mine else False
        return self._fork if self._fork and self._fork.usable(self.activated, self.repo) else None

    def close(self):
        if self._fork:
            self._fork.close()


def _serve(line: str, shell: Shell) -> str | None:
    """Start the server the line starts; None once its page answered, else what went wrong."""
    m = re.search(r"--port\s+(\d+)", line)
    url = f"http://127.0.0.1:{m.group(1) if m else 8765}/"
    p = subprocess.Popen(["bash", "-c", shell.script("exec " + line)], cwd=shell.repo, env=shell.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline:
            if p.poll() is not None:
                return f"exited {p.returncode}: {p.stderr.read()[-2000:]}"
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return None
            except urllib.error.HTTPError as e:  # without the owner's link (its secret): refused, but served
                if e.code == 401:
                    return None
                time.sleep(0.5)
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


def _run(kind: str, cmd: str, shell: Shell) -> subprocess.CompletedProcess:
    timeout = 60 if kind == "offline-fails" else 900
    if kind == "python":  # the (activated) python, the block typed into it
        return shell.bash("exec python -", timeout, stdin=cmd)
    argvs = gensets_argvs(cmd)
    fork = shell.fork() if argvs is not None else None
    if fork is None:
        return shell.bash(cmd, timeout)
    out = err = ""
    for args in argvs:  # as `a && b`: the next runs only when this one succeeded
        p = fork.run(args, timeout, shell.activated)
        out, err = out + p.stdout, err + p.stderr
        if p.returncode != 0:
            break
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def run_readme(readme: str, tmp: Path) -> list[str]:
    """Run every command of ``readme`` in a scratch checkout; the failures, each as one message (empty: all ran
    as written, and the checkout is as clean as before)."""
    repo = checkout(tmp)
    assert porcelain(repo) == "", porcelain(repo)
    shell = Shell(repo, newcomer_env(repo))
    try:
        return _run_all(readme, shell)
    finally:
        shell.close()


def _run_all(readme: str, shell: Shell) -> list[str]:
    failures, took, clean = [], [], porcelain(shell.repo)
    for kind, cmd in commands(readme):
        if kind == "skip":
            continue
        took.append((time.monotonic(), cmd))
        failures += _run_one(kind, cmd, shell)
        if (now := porcelain(shell.repo)) != clean:
            failures.append(f"{cmd!r}: left the checkout changed (git status --porcelain; write under out/):\n{now}")
            clean = now
    took = sorted(((end - start, cmd) for (start, cmd), (end, _) in zip(took, [*took[1:], (time.monotonic(), "")], strict=True)),
                  reverse=True)
    print("slowest README commands:", *(f"{s:6.1f} s  {cmd.split('#')[0].strip()[:110]}" for s, cmd in took[:15]),
          sep="\n  ")
    return failures


def _run_one(kind: str, cmd: str, shell: Shell) -> list[str]:
    if kind == "activate":
        return [] if (why := shell.activate(cmd)) is None else [f"{cmd!r}: the setup line failed: {why}"]
    if kind == "server":
        return [] if (why := _serve(cmd, shell)) is None else [f"{cmd!r}: {why}"]
    try:
        p = _run(kind, cmd, shell)
    except subprocess.TimeoutExpired:
        return [f"{cmd!r}: did not finish ({'offline, it must fail fast' if kind == 'offline-fails' else 'timeout'})"]
    if kind == "offline-fails":
        errors = [x for x in p.stderr.splitlines() if x.startswith("gensets: error:")]
        if p.returncode == 0 or len(errors) != 1 or "Traceback" in p.stderr:
            return [f"{cmd!r}: offline it must fail with one 'gensets: error:' line; exit {p.returncode}, stderr: "
                    f"{p.stderr[-1500:]}"]
    elif p.returncode != 0:
        return [f"{cmd!r}: exit {p.returncode}\n{p.stderr[-3000:]}"]
    return []


def setup_line(readme: str) -> str:
    """The README's setup line (``. .venv/bin/activate``)."""
    return next(cmd for kind, cmd in commands(readme) if kind == "activate")


def test_readme_commands_run_as_written(tmp_path):
    readme = (ROOT / "README.md").read_text()
    kinds = [k for k, _ in commands(readme)]
    assert kinds.count("run") >= 10 and "offline-fails" in kinds and "server" in kinds and "python" in kinds
    # the setup line, once, before the first python block and the first gensets command: the README says how a
    # newcomer gets gensets on PATH before it shows a command that needs it
    first_gensets = next(i for i, (_, cmd) in enumerate(commands(readme)) if cmd.startswith("gensets "))
    assert kinds.count("activate") == 1 and kinds.index("activate") < min(kinds.index("python"), first_gensets)
    assert run_readme(readme, tmp_path) == []


# the README's leaderboard example, which once scored its runs and then refused the folder it made (issue 55)
LEADERBOARD = ("gensets leaderboard --models smoke --dataset out/demo/imagenet-d --db out/leaderboard/results.duckdb "
               "--out out/leaderboard")


def test_every_readme_block_is_run_in_order():
    """Every fenced bash / python block of README.md is among those run (an indented one in a list item too, and
    only fences of another language, yaml, are left out), and the leaderboard example is a command of its own,
    exactly as written, run after `make demo` made its dataset and again over the folder it made."""
    readme = (ROOT / "README.md").read_text()
    fences = re.findall(r"^ *```(\w*)$", readme, re.M)
    opened = fences[::2]  # every other fence opens a block
    assert len(blocks(readme)) == sum(lang in ("bash", "python") for lang in opened) and set(opened) <= {
        "bash", "python", "yaml"}, opened
    assert any(line.startswith("gensets review invite ") for _, text in blocks(readme) for line in text.splitlines())
    runs = [cmd.split(" #")[0].strip() for kind, cmd in commands(readme) if kind == "run"]
    assert runs.count(LEADERBOARD) == 2 and runs.index("make demo") < runs.index(LEADERBOARD)


def test_readme_check_fails_on_a_broken_command(tmp_path):
    """One README command broken in a copy (a flag renamed), after the setup line: the check names exactly that
    command, with gensets' usage exit (2), not a shell's "command not found"."""
    readme = (ROOT / "README.md").read_text()
    first = next(cmd for kind, cmd in commands(readme) if kind == "run" and cmd.startswith("gensets build ")
                 and "--out" in cmd)
    broken = first.replace("--out", "--output-folder", 1)
    only = f"```bash\n{setup_line(readme)}\n{broken}\n```\n"
    failures = run_readme(only, tmp_path)
    assert len(failures) == 1 and failures[0].startswith(f"{broken!r}: exit 2\n"), failures


def test_readme_check_fails_on_a_file_left_in_the_checkout(tmp_path):
    """A README command writing ``results.duckdb`` into the checkout's root (as ``--db results.duckdb`` once did,
    #48) fails the check, named with what it left; the README's own line (printing) does not."""
    readme = (ROOT / "README.md").read_text()
    schema = next(cmd for kind, cmd in commands(readme) if kind == "run" and cmd.startswith("gensets query --schema"))
    dirty = f"{_code(schema)} --output results.duckdb"
    copy = f"```bash\n{setup_line(readme)}\n{schema}\n{dirty}\n```\n"
    failures = run_readme(copy, tmp_path)
    assert len(failures) == 1 and failures[0].startswith(f"{dirty!r}: left the checkout changed"), failures
    assert failures[0].splitlines()[-1] == "?? results.duckdb", failures


def test_readme_commands_need_the_setup_line(tmp_path):
    """Without the README's setup line a newcomer's shell has no ``gensets`` (the issue's "command not found"):
    the check runs commands in such a shell, not in the test's, and a plain gensets line too."""
    if shutil.which("gensets", path=newcomer_env(tmp_path)["PATH"]):
        pytest.skip("a gensets outside any virtualenv is on PATH")
    line = "gensets query --schema"
    failures = run_readme(f"```bash\n{line}\n```\n", tmp_path)
    assert len(failures) == 1 and failures[0].startswith(f"{line!r}: exit 127\n"), failures


def test_checkout_holds_the_working_tree_and_is_clean(tmp_path):
    """The scratch checkout is this working tree, uncommitted edits included, with an empty ``git status``."""
    repo = checkout(tmp_path)
    assert porcelain(repo) == ""
    for name in ["README.md", "tests/test_readme.py", "Makefile"]:
        assert (repo / name).read_bytes() == (ROOT / name).read_bytes()
    assert (repo / ".venv" / "bin" / "activate").is_file() and (repo / ".venv").is_dir()
    assert not (repo / ".venv").is_symlink()  # so that the repository's `.venv/` rule ignores it
    (repo / "results.duckdb").write_bytes(b"")
    assert porcelain(repo) == "?? results.duckdb\n"


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


def test_an_indented_block_is_read_without_its_indent():
    text = "- a list item:\n\n  ```bash\n  gensets review invite out/x ben   # a link\n  ```\n"
    assert commands(text) == [("run", "gensets review invite out/x ben   # a link")]


@pytest.mark.parametrize("line, kind", [
    ("make test    # creates .venv", "skip"),
    ("make test-slow", "skip"),
    (". .venv/bin/activate   # puts gensets on PATH", "activate"),
    ("source .venv/bin/activate", "activate"),
    ("make build-genbench DATASET=oxford-pets STRATEGY=CE   # paper scale (GPUs, Hub)", "offline-fails"),
    ("gensets review serve out/x --reviewer ana   # the page", "server"),
    ("gensets finalize out/x   # accepted images", "run"),
])
def test_readme_lines_are_classified_from_the_readme(line, kind):
    assert commands(f"```bash\n{line}\n```\n") == [(kind, line)]
