"""The lease: a workspace's lock on an object store (``<url>/_lock.json``: the pid, host and time of the command
running on it), created with a conditional PUT (If-None-Match: *), on S3 renewed and taken over with If-Match (its
holder's last ETag), removed at its end. Only :class:`gensets.store.Store` uses it (``Store.lease``,
``Store.check_lease``)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time

from . import recordio
from .errors import Busy, DataError, GensetsError
from .notices import warn

LOCK = "_lock.json"
LEASE_TTL = 300.0  # a lease not renewed for this long (its holder gone) may be taken over
LEASE_RENEW = 60.0


@contextlib.contextmanager
def hold(store, what: str):
    """Hold the workspace's lease (:data:`LOCK`) while ``what`` runs: created with a conditional PUT, renewed
    every :data:`LEASE_RENEW` s, removed at the end. Another holder's live lease: Busy, in one line naming it.
    A lease of a process that is gone (same host, pid not running) or not renewed for :data:`LEASE_TTL` s is
    taken over.

    Where the store has conditional writes (``store.conditional``: S3), every write of the lease is conditional on
    the ETag of the object this holder read or last wrote: a takeover replaces only the stale lease it judged
    stale (of two drivers taking over one stale lease, one wins; the other finds the winner's live lease: Busy),
    and a renewal only this holder's own lease. A holder that stalled past :data:`LEASE_TTL` (its lease taken
    over meanwhile) finds its renewal refused (412): it stops renewing, leaves the new holder's lease alone, and
    the next commit of this process (:func:`check`: a unit's marker, the driver's manifest row,
    finalize's dataset) fails with Busy, in one line naming the new holder (Ray workers, processes of their
    own, may still commit the unit each is running, the bytes any attempt writes; the driver stops at the next
    result). On a store without them (gs://,
    memory://) renewal overwrites the lease and a takeover removes the stale one, the conditional create
    deciding between takers, as ever: a holder stalled past :data:`LEASE_TTL` may then write on beside the new
    one."""
    held = _Lease(store, what)
    held.acquire()
    _HELD[store.url] = held
    stop = threading.Event()

    def renew():
        while not stop.wait(LEASE_RENEW):
            with contextlib.suppress(GensetsError):  # the store out of reach: tried again at the next period
                held.renew()

    t = threading.Thread(target=renew, daemon=True, name="gensets-lease")
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        if _HELD.get(store.url) is held:
            del _HELD[store.url]
        with contextlib.suppress(GensetsError):
            held.release()



def check(url: str) -> None:
    """Busy, in one line naming the new holder, when the lease this process held on the workspace at ``url``
    (:func:`hold`) was taken over by another driver: before anything more is committed. Nothing without a lease held
    here."""
    held = _HELD.get(url)
    if held is not None:
        held.check()


_HELD: dict = {}  # URL -> the _Lease this process holds on it (check: any Store of that URL)


class _Lease:
    """One holder's lease on a store: the ETag of the lease object it last wrote (conditional stores), when it last
    wrote it, and, once another holder's lease replaced it, the line that says so."""

    def __init__(self, store, what: str):
        self.store, self.what = store, what
        self.me = {"what": what, "pid": os.getpid(), "host": socket.gethostname(), "lease": secrets.token_hex(8)}
        self.etag: str | None = None
        self.written = 0.0  # time.time() of the last write of the lease
        self.lost: str | None = None
        self.lock = threading.Lock()  # the renewal thread and check(): one write at a time, each with the last ETag

    def body(self) -> bytes:
        return json.dumps({**self.me, "time": time.time()}, sort_keys=True).encode()

    def acquire(self) -> None:
        s = self.store
        for _ in range(3):
            if s.conditional:
                self.etag = s.put_if(LOCK, self.body(), None)
                if self.etag:
                    break
                seen = s.etag(LOCK)  # before the body: a takeover replaces only the object read after it
            elif s.create(LOCK, self.body()):
                break
            holder = self.holder()
            ahead = _ahead(holder)
            if holder and not _stale(holder):
                raise Busy(f"{s.url}: another gensets {holder.get('what', 'command')} (pid {holder.get('pid')} "
                           f"on {holder.get('host')}) is running on this workspace"
                           + (f" (its lease dated {ahead:.0f} s ahead of this machine's clock)" if ahead > 0 else "")
                           + "; wait for it to end (or stop it), then run this again")
            if ahead > LEASE_TTL:
                warn(f"warning: {s.url_of(LOCK)}: the lease of gensets {holder.get('what', 'command')} (pid "
                     f"{holder.get('pid')} on {holder.get('host')}) is dated {ahead:.0f} s ahead of this machine's "
                     f"clock, more than its time to live ({LEASE_TTL:g} s): a clock running ahead or a copied "
                     f"{LOCK}; taken over as stale")
            if s.conditional:
                if seen:  # a dead holder's lease, replaced only if it is still that one: one taker of two wins
                    self.etag = s.put_if(LOCK, self.body(), seen)
                    if self.etag:
                        break
            else:
                s.remove([LOCK])  # a dead holder's lease; the conditional create decides between takers
        else:
            raise Busy(f"{s.url}: could not take the workspace's lease ({s.url_of(LOCK)}); run this again")
        self.written = time.time()

    def holder(self) -> dict:
        try:
            return recordio.parse(self.store.read(LOCK), "Lease", self.store.url_of(LOCK))
        except DataError:
            return {}  # removed meanwhile, or not ours: try again / treat as stale

    def renew(self) -> None:
        with self.lock:
            if self.lost:
                return
            if self.etag is None:  # no conditional writes: overwritten
                self.store.write(LOCK, self.body())
            else:
                etag = self.store.put_if(LOCK, self.body(), self.etag)
                if etag is None:
                    etag, h = self.store.etag(LOCK), self.holder()  # the ETag first: it is of this body or older
                    if h.get("lease") != self.me["lease"]:  # (else our own write, its answer lost and retried)
                        who = (f"another gensets {h.get('what', 'command')} (pid {h.get('pid')} on {h.get('host')})"
                               if h else "another process")
                        self.lost = (f"{self.store.url}: this {self.what} lost the workspace's lease to {who} while "
                                     f"it did not renew it (for over {LEASE_TTL:g} s: stalled, or cut off from the "
                                     "store); it stopped before committing more: run the same command again once "
                                     "that one ends")
                        return
                self.etag = etag
            self.written = time.time()

    def check(self) -> None:
        """Busy once the lease is lost; a lease not renewed for half its time to live (this process stalled, or the
        store out of reach) is renewed first, here: a holder does not write on a lease it may have lost."""
        if self.etag is not None and not self.lost and time.time() - self.written > LEASE_TTL / 2:
            self.renew()
        if self.lost:
            raise Busy(self.lost)

    def release(self) -> None:
        """Remove the lease, unless it is another holder's now (on S3: only the object this holder last wrote)."""
        if self.lost:
            return
        if self.etag is None:
            self.store.remove([LOCK])
        else:
            self.store.remove_if(LOCK, self.etag)


def _stale(holder: dict) -> bool:
    """A lease not renewed for :data:`LEASE_TTL` s, whoever wrote it (a live pid on "this host" proves nothing: a
    restarted container runs its driver under the same hostname and pid); sooner, one of a pid of this host that is
    not running; at once, one dated more than :data:`LEASE_TTL` s ahead of this machine's clock."""
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        try:
            os.kill(holder["pid"], 0)
        except ProcessLookupError:
            return True
        except (PermissionError, OverflowError, ValueError):
            pass
    t = holder.get("time")
    # a lease dated further ahead than its time to live was not written by a clock that agrees with this one (a
    # driver's clock running ahead, a copied lease): judged by the time to live as if dated now, it would never end
    return not isinstance(t, (int, float)) or abs(time.time() - t) > LEASE_TTL


def _ahead(holder: dict) -> float:
    """How many seconds ahead of this machine's clock a lease is dated (0 when it is not)."""
    t = holder.get("time")
    return max(0.0, t - time.time()) if isinstance(t, (int, float)) else 0.0
