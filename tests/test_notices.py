"""The library's notices go through logging (gensets.notices); the CLI prints them on stderr, each line as the
library printed it itself before."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from .conftest import ROOT, run_cli

# what `accelerate launch --num_processes 2` without --multi_gpu gives the one process it starts on CPU
SIMPLE_LAUNCHER = {"ACCELERATE_USE_CPU": "False", "MASTER_ADDR": "127.0.0.1"}
MATCHED = ("gensets: test set x: its 2 classes matched to the dataset's 2 by position (2 spelled differently; "
           "e.g. 'tench, Tinca tinca' is 'tench')")
UNMATCHED = "gensets: warning: test set x: 1 class(es) match no class of the dataset and are left out: 'cat'"
CALL = ("from gensets.sources.classes import report_match; "
        "report_match('test set x', ['tench, Tinca tinca', 'cat'], ['tench', 'dog'], {0: 0}, 'index')")


def test_a_library_notice_reaches_logging_and_not_stderr(caplog):
    from gensets.sources.classes import report_match

    caplog.set_level(logging.INFO, logger="gensets")
    report_match("test set x", ["tench, Tinca tinca", "cat"], ["tench", "dog"], {0: 0}, "index")
    said = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [("gensets", logging.INFO, MATCHED), ("gensets", logging.WARNING, UNMATCHED)]

    # a program that installed no handler: nothing on stderr (nor stdout), the warning included
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CALL], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r
    # the CLI's handler: the bare lines on stderr; quiet: the warning alone
    for quiet, lines in ((False, [MATCHED, UNMATCHED]), (True, [UNMATCHED])):
        call = f"from gensets import notices; notices.to_stderr(quiet={quiet}); {CALL}"
        r = subprocess.run([sys.executable, "-c", call], capture_output=True, text=True, env=env, cwd=ROOT,
                           timeout=120)
        assert r.returncode == 0 and r.stdout == "" and r.stderr == "".join(f"{x}\n" for x in lines), r


def test_the_cli_prints_a_notice_on_stderr_as_before(tmp_path):
    """The warning of `accelerate launch` without --multi_gpu, then the refusal of a foreign --out: the same bytes
    as when the library printed the warning itself."""
    out = tmp_path / "foreign"
    out.mkdir()
    (out / "mine.txt").write_text("x")
    r = run_cli("build", ROOT / "configs" / "imagenet_d.smoke.yaml", "--out", out, env=SIMPLE_LAUNCHER, check=2)
    assert r.stdout == ""
    assert r.stderr == (
        "gensets: warning: accelerate launch started one process, not --num_processes: on CPU it needs --multi_gpu "
        "(accelerate launch --multi_gpu --num_processes N -m gensets.cli ...); running as one process\n"
        f"gensets: error: {out}: a folder that is not a gensets workspace and not empty (it holds 'mine.txt'); "
        "--out names a new or empty folder, or a workspace\n"), r.stderr
