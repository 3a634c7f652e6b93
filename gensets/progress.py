"""Progress on stderr, one bar per stage: on a terminal tqdm's live bar; in a log (stderr not a terminal) whole
lines instead of redraws: one a minute while a stage runs and one when it ends, each printed once. A stage with
nothing to do (``total`` 0) prints nothing: the command's summary says so."""

from __future__ import annotations

import sys
import time

LOG_EVERY = 60.0  # seconds between the lines of a running stage in a log
WORDS = {"img": "image"}  # a bar's unit as a log line writes it ("12/12 images", "1/1 unit")


def bar(iterable=None, *, total: int | None, desc: str, unit: str, disable: bool = False):
    """A tqdm-like bar (iterate it, or ``update(n)`` / ``set_postfix_str`` / ``close()``) over ``total`` units."""
    from tqdm.auto import tqdm

    if disable or total == 0:
        return tqdm(iterable, total=total, disable=True)
    if sys.stderr.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr)
    return _Lines(iterable, total, desc, unit)


class _Lines:
    def __init__(self, iterable, total: int | None, desc: str, unit: str):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n, self.postfix, self.closed = 0, "", False
        self.start = self.last = time.monotonic()

    def __iter__(self):
        try:
            for x in self.iterable:
                yield x
                self.update(1)
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= LOG_EVERY and self.n != self.total:
            self.last = time.monotonic()
            self._line()

    def set_postfix_str(self, s: str, refresh: bool = False) -> None:
        self.postfix = s

    def close(self) -> None:
        if self.n and not self.closed:
            self._line()
        self.closed = True

    def _line(self) -> None:
        s = time.monotonic() - self.start
        of = f"/{self.total}" if self.total else ""
        word = WORDS.get(self.unit, self.unit)
        rate = f", {self.n / s:.2f} {word}/s" if s > 0 else ""
        post = f", {self.postfix}" if self.postfix else ""
        print(f"{self.desc}: {self.n}{of} {word}{'s' * ((self.total or self.n) != 1)} in {s:.0f} s{rate}{post}",
              file=sys.stderr, flush=True)
