"""DuckDB, the way every gensets database (state.duckdb, results) is written: all of a change or none of it; and
SQL run so that Ctrl-C and a time limit stop it."""

from __future__ import annotations

from contextlib import contextmanager

from .errors import TimedOut


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


def interruptible(con, sql: str, timeout: float | None = None) -> tuple[list[str], list[tuple]]:
    """``sql``'s column names and rows, run in a thread of its own while this one waits: DuckDB runs a query
    without looking at Python's signals, so Ctrl-C alone would not stop it. Ctrl-C (KeyboardInterrupt here) and
    ``timeout`` seconds (None or 0: no limit) stop it with ``con.interrupt()``; then KeyboardInterrupt is raised
    again, or :class:`~gensets.errors.TimedOut`. Other errors of the query are raised as they are."""
    import threading

    done, out = threading.Event(), {}

    def run() -> None:
        try:
            cur = con.execute(sql)
            cols = [d[0] for d in cur.description] if cur.description else []
            out["result"] = (cols, cur.fetchall() if cols else [])
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread, raised there
            out["error"] = e
        finally:
            done.set()

    worker = threading.Thread(target=run, name="gensets-sql", daemon=True)
    worker.start()
    try:
        finished = done.wait(min(timeout, threading.TIMEOUT_MAX) if timeout else None)  # a timer waits no longer
    except KeyboardInterrupt:
        con.interrupt()
        worker.join(10)
        raise
    if not finished:
        con.interrupt()
        worker.join(10)
        raise TimedOut(f"the query ran past --timeout {timeout:g} s and was stopped (--timeout 0: no limit)")
    if "error" in out:
        raise out["error"]
    return out["result"]
