"""Issue 25, what was left open: a runaway `gensets query` (class 6: a time limit, Ctrl-C), files written and read
by timings, GenBench's TI stage and the review export (class 1: no symlink followed or replaced; class 4: a
malformed file in one line), a config that asks for absurdly many images in all (class 5), and finalize's decode
error naming the candidate shard and key (class 3). Each test failed on the code before its fix."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, run_cli
from .test_card import make_results_db
from .test_exit_codes import _ctrl_c_reaches_it
from .test_hardening import one_line_error

RUNAWAY = "SELECT count(*) FROM range(1000000000000)"  # a trillion rows: hours of work
RECURSIVE = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"  # never ends


# ------------------------------------------------------------------------------- 6. a runaway query
@pytest.mark.parametrize("sql", [RUNAWAY, RECURSIVE], ids=["range", "recursive"])
def test_a_runaway_query_stops_at_its_timeout_in_one_line(tmp_path, sql):
    db = make_results_db(tmp_path / "r.duckdb")
    t = time.monotonic()
    r = run_cli("query", "--db", db, "--timeout", "1", sql, timeout=120)
    one_line_error(r, "--timeout 1 s", "stopped", code=1)
    assert time.monotonic() - t < 60 and r.stdout == ""
    r = run_cli("query", "--db", db, "--timeout", "1", "SELECT count(*) AS n FROM runs", "--format", "csv", check=0)
    assert r.stdout.split() == ["n", "6"]  # a quick query under the same limit: its answer


def test_query_timeout_is_checked_and_defaults_to_five_minutes(capsys):
    from gensets.cli import parser

    assert parser().parse_args(["query", "--db", "r", "SELECT 1"]).timeout == 300
    assert parser().parse_args(["query", "--db", "r", "SELECT 1", "--timeout", "0"]).timeout == 0
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit) as e:
            parser().parse_args(["query", "--db", "r", "SELECT 1", "--timeout", bad])
        assert e.value.code == 2 and "argument --timeout" in capsys.readouterr().err


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:  # it ended
        return float("inf")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _has_open(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # it ended, or a descriptor closed meanwhile
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sends SIGINT")
def test_ctrl_c_stops_a_running_query(tmp_path):
    """SIGINT while DuckDB runs the query (the database is open and the process burns CPU): one line, exit 130,
    at once. Before, DuckDB ran on and Python saw the signal only when the query ended (hours here)."""
    db = make_results_db(tmp_path / "r.duckdb").resolve()
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "query", "--db", str(db), RUNAWAY],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         preexec_fn=_ctrl_c_reaches_it)
    try:
        deadline = time.monotonic() + 120
        while p.poll() is None and not _has_open(p.pid, db) and time.monotonic() < deadline:
            time.sleep(0.01)  # the database opened: the query starts next
        start = _cpu_seconds(p.pid)
        while p.poll() is None and _cpu_seconds(p.pid) < start + 0.5 and time.monotonic() < deadline:
            time.sleep(0.01)  # half a CPU second spent since: the query runs
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        t = time.monotonic()
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert time.monotonic() - t < 30
    assert p.returncode == 130, err
    assert err.strip() == ("gensets: interrupted; the query was stopped (the database is opened read-only: nothing "
                           "changed)"), err
    assert out == ""
