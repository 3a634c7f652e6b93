"""Exit codes a script can rely on (gensets.errors.EXIT_CODES, the README's table): 2 fix the command, 1 the data
or a step failed, 3 fix the environment and retry, 4 retry once the other process ends, 130 interrupted."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from gensets.errors import EXIT_CODES

from .conftest import HANG, ROOT, SMALL, SMOKE, run_cli


def one_line(r, code: int, *needles: str) -> str:
    err = r.stderr.strip()
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = err.splitlines()
    assert "Traceback" not in err and (len(lines) == 1 or lines[0].startswith("usage:")), err  # argparse: usage first
    assert lines[-1].startswith("gensets"), err
    for n in needles:
        assert n in err, (n, err)
    return err


def test_the_table_is_in_the_help_and_the_readme():
    out = run_cli("--help", check=0).stdout
    readme = (ROOT / "README.md").read_text()
    for code, what in EXIT_CODES.items():
        assert f"  {code:<4} {what}" in out
        assert f"| {code} |" in readme


def test_each_class_of_failure_has_its_code(small, tmp_path):
    # 2 usage: argparse's own errors, a malformed config, an unknown model spec, a missing workspace
    one_line(run_cli("build"), 2, "the following arguments are required")
    bad = tmp_path / "bad.yaml"
    bad.write_text("builder: imagenet-d\nseed: [1\n")
    one_line(run_cli("build", bad, "--out", tmp_path / "w"), 2, str(bad))
    one_line(run_cli("eval", small, "--model", "nokind:x", "--db", tmp_path / "r.duckdb"), 2, "unknown kind")
    one_line(run_cli("verify", tmp_path / "nowhere"), 2, "nowhere")
    # 1 data: a shard whose bytes are not the manifest's
    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    shard = sorted((ws / "dataset").rglob("*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[700] ^= 0xFF
    shard.write_bytes(bytes(data))
    r = run_cli("verify", ws)  # verify lists every problem, then a summary line
    assert r.returncode == 1 and shard.name in r.stdout + r.stderr and "Traceback" not in r.stderr, r.stderr
    # 3 environment: a Hub model offline and not cached; publishing offline
    one_line(run_cli("eval", small, "--model", "timm:resnet50.a1_in1k", "--db", tmp_path / "r.duckdb"), 3,
             "not available", "offline")
    one_line(run_cli("publish", small, "--repo", "org/name"), 3, "offline")
    # 4 busy: another process holds the workspace's lock
    from gensets.workspace import Workspace

    with Workspace(ws).lock("build"):
        one_line(run_cli("finalize", ws), 4, "another gensets build", "is running on this workspace")
        one_line(run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL), 4, "another gensets build")


def _ctrl_c_reaches_it():
    """In the child before it starts: SIGINT at its default, as in a terminal. A process started with SIGINT
    ignored keeps it ignored (POSIX: what a non-interactive shell does to `cmd &`, so a Ctrl-C at the terminal
    does not reach background jobs), and Python then installs no KeyboardInterrupt handler: a test run from such a
    shell (CI) would see the signal do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_in_a_build_says_what_is_kept_and_the_rerun_resumes(tmp_path):
    ws = tmp_path / "ws"
    # the whole smoke config (21 units): after the first is committed, seconds of work are left to interrupt
    cmd = [sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--quiet",
           "--set", "images_per_pair=4"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         preexec_fn=_ctrl_c_reaches_it)
    manifest = ws / "candidates" / "manifest.jsonl"
    deadline = time.monotonic() + HANG
    while p.poll() is None and time.monotonic() < deadline:  # the first unit committed, others to go
        if manifest.is_file() and manifest.read_text().count("\n") >= 1:
            break
        time.sleep(0.02)
    assert p.poll() is None, "the build ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 130, err
    kept = manifest.read_text().count("\n")
    assert err.strip() == (f"gensets: interrupted; {kept} unit{'s' * (kept != 1)} committed in {ws} are kept: run "
                           "the same command to resume (a unit cut short is redone)"), err
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=HANG, env=os.environ)
    assert r.returncode == 0, r.stderr
    assert f"({kept} done before," in r.stdout, r.stdout


def test_a_misspelt_name_gets_the_closest_ones(tmp_path):
    """'did you mean' for class names, config keys, model kinds and names; errors name the user's input, not a
    file inside the package."""
    from gensets.errors import did_you_mean

    assert did_you_mean("backpak", ["backpack", "bag", "mug"]) == " (did you mean 'backpack'?)"
    assert did_you_mean("zebra", ["backpack", "mug"]) == ""
    cases = [(("--set", "classes=[backpak]"), "unknown class 'backpak' (did you mean 'backpack'?)"),
             (("--set", "filtr.top_k=2"), "filtr: unknown key (did you mean 'filter'?)"),
             (("--set", "generator.model=tiny:sdd"), "unknown tiny model 'sdd' (did you mean 'sd'?)"),
             (("--set", "generator.model=diffuser:x/y"), "unknown kind 'diffuser' (did you mean 'diffusers'?)")]
    for args, want in cases:
        r = run_cli("build", SMOKE, "--out", tmp_path / "ws", *args)
        err = one_line(r, 2, want)
        assert "gensets/data" not in err and "site-packages" not in err, err
    # argparse's own choices (a sub-command, a protocol, a list): its usage line, then the error with the closest
    for args, want in ((("reprodce",), "(did you mean 'reproduce'?)"),
                       (("eval", "x", "--model", "m", "--db", "d", "--protocol", "imagnet"), "(did you mean 'imagenet'?)"),
                       (("list", "tabels"), "(did you mean 'tables'?)")):
        r = run_cli(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines()[-1].endswith(want), r.stderr


def test_each_model_loaded_is_announced(small, tmp_path):
    """A line per model as it starts loading (on a terminal; GENSETS_ANNOUNCE=always here): spec and source."""
    r = run_cli("eval", small, "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet",
                env={"GENSETS_ANNOUNCE": "always"}, check=0)
    lines = [line for line in r.stderr.splitlines() if line.startswith("loading ")]
    assert len(lines) == 1 and lines[0].startswith("loading tiny:resnet: from built locally ("), r.stderr
    quiet = run_cli("eval", small, "--model", "tiny:resnet", "--db", tmp_path / "r2.duckdb", "--quiet", check=0)
    assert "loading " not in quiet.stderr  # not a terminal: nothing


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_in_an_eval_keeps_finished_runs_and_the_rerun_skips_them(reference, tmp_path):
    import threading

    db = tmp_path / "r.duckdb"
    # three models, one image at a time: each config takes seconds, so the interrupt lands inside the second
    cmd = [sys.executable, "-m", "gensets.cli", "eval", str(reference), "--model", "tiny:resnet", "--model",
           "tiny:vit", "--model", "tiny:clip", "--db", str(db), "--batch-size", "1", "--workers", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         preexec_fn=_ctrl_c_reaches_it)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: os.read(p.stderr.fileno(), 65536).decode(
        errors="replace"), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + HANG
    while p.poll() is None and time.monotonic() < deadline:  # the first config's runs are written: the second began
        if "texture/test" in "".join(err):
            break
        time.sleep(0.01)
    assert p.poll() is None, "the eval ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    p.wait(timeout=300)
    reader.join(timeout=30)
    assert p.returncode == 130, "".join(err)
    assert ("gensets: interrupted; runs already written to the database are kept: run the same command to go on "
            "(finished runs are skipped)") in "".join(err), "".join(err)[-500:]
    r = subprocess.run(cmd + ["--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=HANG)
    assert r.returncode == 0, r.stderr
    assert "skipped tiny:resnet on background/test" in r.stderr, r.stderr
    assert "skipped tiny:resnet on material/test" not in r.stderr  # not finished before: scored now
    assert "texture/test" in r.stdout and "material/test" in r.stdout and "background/test" in r.stdout
