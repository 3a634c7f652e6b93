"""Work handed out on the review page: the images of a reviewer's "to review" page are leased to them.

A lease holds an image for one reviewer for :data:`LEASE_S` seconds; the page renews its reviewer's leases while
it is open (every poll of ``/api/changes``), a decision releases the image, and a lease not renewed expires. A
reviewer's next "to review" page skips the images others hold: in single review any image another reviewer
holds, in double review an image whose missing decisions others already hold (two leases on an image nobody
decided, one on an image one reviewer decided), so each image goes to exactly two reviewers. Within what is left
the queue's sort order applies (:func:`gensets.curation.queue.page`).

Leases live in the server's memory, not in state.duckdb: they are a hand-out of the work among the pages of one
server (one server per workspace: ``shared.py``), and a server that stops hands nothing out. What keeps a
decision from replacing another unseen is the item's version (``review_server``: HTTP 409), not the lease.
"""

from __future__ import annotations

import threading
import time

LEASE_S = 180.0  # how long an image stays with a reviewer whose page stopped renewing it (closed, asleep)


class Leases:
    """key -> reviewer -> when the lease ends (monotonic seconds), under a lock."""

    def __init__(self, seconds: float = LEASE_S, clock=time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.held: dict[str, dict[str, float]] = {}
        self.lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for key in [k for k, by in self.held.items() if not any(t > now for t in by.values())]:
            del self.held[key]
        for by in self.held.values():
            for who in [w for w, t in by.items() if t <= now]:
                del by[who]

    def others(self, reviewer: str) -> dict[str, int]:
        """Every image leased to someone else -> how many other reviewers hold it."""
        with self.lock:
            self._expire(self.clock())
            return {k: n for k, by in self.held.items() if (n := len(by) - (reviewer in by))}

    def take(self, reviewer: str, keys) -> None:
        """``reviewer``'s leases are now ``keys`` (the images of their page): the others they held are released."""
        keys = set(keys)
        with self.lock:
            now = self.clock()
            self._expire(now)
            for key, by in list(self.held.items()):
                if reviewer in by and key not in keys:
                    del by[reviewer]
                    if not by:
                        del self.held[key]
            for key in keys:
                self.held.setdefault(key, {})[reviewer] = now + self.seconds

    def renew(self, reviewer: str) -> list[str]:
        """Extend ``reviewer``'s live leases (their page is open): the images they hold."""
        with self.lock:
            now = self.clock()
            self._expire(now)
            mine = [k for k, by in self.held.items() if reviewer in by]
            for key in mine:
                self.held[key][reviewer] = now + self.seconds
            return mine

    def release(self, reviewer: str, keys) -> None:
        """``reviewer`` decided ``keys``: their leases on them end."""
        with self.lock:
            for key in keys:
                by = self.held.get(key)
                if by is not None:
                    by.pop(reviewer, None)
                    if not by:
                        del self.held[key]
