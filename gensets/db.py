"""DuckDB, the way every gensets database (state.duckdb, results) is written: all of a change or none of it."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def transaction(con):
    """``with transaction(con): ...`` commits when the block ends, rolls back (and re-raises) on any error."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
