"""Issue 55's faults, each reproduced by a test that failed on the code before its fix: a manifest linked out of its
dataset, a query time limit too large for a timer, a missing output folder, a full disk, a store out of reach."""

import shutil

from .conftest import run_cli
from .test_hardening import one_line_error


def test_verify_and_card_refuse_a_manifest_linked_out_of_the_dataset(reference, tmp_path):
    """`publish` and `eval` refuse a dataset whose manifest.json is a symlink out of it: `verify`, the check run
    before publishing, finds it (and never reads the file outside), and `card` refuses to re-render from it."""
    ws = shutil.copytree(reference, tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "dataset" / "manifest.json").rename(outside / "manifest.json")
    (ws / "dataset" / "manifest.json").symlink_to(outside / "manifest.json")
    for target in (ws, ws / "dataset"):
        r = run_cli("verify", target)
        assert r.returncode == 1 and f"{ws / 'dataset' / 'manifest.json'}: a symlink along the way leads out" \
            in r.stdout, r.stdout
    before = (outside / "manifest.json").read_bytes()
    one_line_error(run_cli("card", ws), f"{ws / 'dataset' / 'manifest.json'}", "symlink", "refusing it", code=1)
    one_line_error(run_cli("publish", ws, "--repo", f"file://{tmp_path / 'repo'}"), "manifest.json", "symlink")
    assert (outside / "manifest.json").read_bytes() == before and not (outside / "README.md").exists()


def test_a_query_time_limit_too_long_for_a_timer_is_refused_in_one_line(tmp_path):
    """`--timeout 1e308` ended in an OverflowError traceback from the timer, then a C++ abort from DuckDB's thread:
    now argparse's usage error (exit 2), before any query runs; the library waits no longer than a timer can."""
    from gensets.db import interruptible

    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb")
    r = run_cli("query", "--db", db, "--timeout", "1e308", "SELECT count(*) FROM runs")
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.strip().splitlines()[-1] == ("gensets query: error: argument --timeout: expected a number of "
                                                 "seconds from 0 to 1e9, got '1e308'"), r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr
    import duckdb

    assert interruptible(duckdb.connect(), "SELECT 42", 1e308) == (["42"], [(42,)])
