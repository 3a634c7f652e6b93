"""state.duckdb held by the review server between requests, and given up whenever another process asks.

DuckDB lets one process at a time open the file. Opening it costs more than a decision, so the server keeps it
open between requests (under one lock: one use at a time in this process), but gives it up as soon as another
gensets process asks (:func:`gensets.curation.shared.ask_release`: the review commands, ``finalize``, another
server on the same workspace) or after :data:`IDLE_S` unused; for :data:`SHARED_S` seconds after such a request it
closes it after every use, so that the asker gets its turn. Whenever it opens the file again it first reads what
another process may have changed meanwhile (:meth:`Holder._opened`).
"""

from __future__ import annotations

import contextlib
import threading
import time

from ..errors import Busy, GensetsError
from . import state

SERVER_WAIT = 10.0  # how long a request waits for state.duckdb held by another process (finalize's snapshot, a
# command, another server's request), then: 503 with one line naming it
IDLE_S = 10.0  # the server gives state.duckdb up after this long unused (else: when another process asks)
SHARED_S = 2.0  # after a release, the server closes state.duckdb after every use for this long


class Stopped(GensetsError):
    """A request that comes after the server closed its connection (it is stopping): nothing was read or saved."""


class Holder:
    """state.duckdb of a workspace, held between uses (:meth:`_held`) and given up when asked (:meth:`release`).
    ``keep_open``: never given up between uses (a caller alone with the workspace: a test, a profile)."""

    def __init__(self, path, keep_open: bool = False):
        self.path = path
        self.lock = threading.Lock()  # one use of the database at a time in this process
        self.closed = False
        self.keep_open = keep_open
        self.con = None  # state.duckdb while this process holds it
        self.used = 0.0  # when it was last used (monotonic)
        self.shared_until = 0.0  # until then (after a release), closed after every use
        self.release_asked = False

    def _opened(self, con) -> None:
        """What another process may have changed while this one did not hold the database (a subclass reads it)."""

    @contextlib.contextmanager
    def _held(self):
        """state.duckdb for one use, under the lock: opened if this process does not hold it (waiting for another
        holder), kept open after it unless someone asked for it (:meth:`release`) in the last :data:`SHARED_S`
        seconds. A wait ends, as :class:`Stopped`, once :meth:`close` was called."""
        with self.lock:
            if self.closed:
                raise Stopped("the review page is stopping: nothing was saved")
            if self.con is None:
                self.con = self._open()
            try:
                yield self.con
            finally:
                self.used = time.monotonic()
                if not self.keep_open and (self.release_asked or self.used < self.shared_until):
                    self._close()

    def _open(self):
        try:
            con = state.connect(self.path, schema=False, wait=SERVER_WAIT, notice=None,
                                cancelled=lambda: self.closed)
        except Busy:
            if self.closed:
                raise Stopped("the review page is stopping: nothing was saved") from None
            raise
        try:
            self._opened(con)
        except BaseException:
            con.close()
            raise
        return con

    def _close(self) -> None:
        """Give the database up (the lock held)."""
        if self.con is not None:
            self.con.close()
            self.con = None
        if self.release_asked:
            self.release_asked = False
            self.shared_until = time.monotonic() + SHARED_S

    def release(self) -> None:
        """Another process asks for state.duckdb: given up now, or by the request using it once it is done; for
        :data:`SHARED_S` seconds after, it is closed after every use (the asker gets its turn)."""
        self.release_asked = True
        if self.lock.acquire(blocking=False):
            try:
                self._close()
            finally:
                self.lock.release()

    def release_if_idle(self) -> None:
        """Give the database up after :data:`IDLE_S` seconds unused (a process that could not ask gets it then)."""
        if self.con is not None and not self.keep_open and time.monotonic() - self.used > IDLE_S \
                and self.lock.acquire(blocking=False):
            try:
                if self.con is not None and time.monotonic() - self.used > IDLE_S:
                    self._close()
            finally:
                self.lock.release()

    def close(self) -> None:
        """No use of the database after this one: a request waiting for it gives up (:class:`Stopped`), and this
        returns once the request using it, if any, is done (a decision is then committed)."""
        self.closed = True
        with self.lock:
            self._close()
