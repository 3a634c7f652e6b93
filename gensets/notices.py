"""What the library says besides its results (an input a unit skipped, images held back, a model loading, a class
list matched by position, a retry), through the ``gensets`` logger: :func:`notice` (INFO) and :func:`warn`
(WARNING); each message is the whole line, its own ``warning:`` prefix included.

A program that uses gensets sees them through its own logging handlers; with none, nothing is printed (a
``NullHandler``, as the logging HOWTO asks of a library). The CLI calls :func:`to_stderr` once, as it starts: each
notice is then printed on stderr as its bare message, the line users saw when the library printed it itself. A
build's Ray workers do the same when their driver does (:data:`SHOWN`, :func:`inherit`).
"""

from __future__ import annotations

import logging
import os
import sys

LOGGER = logging.getLogger("gensets")
LOGGER.addHandler(logging.NullHandler())
SHOWN = "GENSETS_NOTICES"
"""Set (to ``stderr``) in the environment of a process whose notices go to its stderr because the process that
started it (a build's driver, for its Ray workers) prints its own there."""


def notice(message: str) -> None:
    """Something a user may want to know (the run goes on as asked)."""
    LOGGER.info(message)


def warn(message: str) -> None:
    """Something that may be wrong (the run goes on, but perhaps not as meant)."""
    LOGGER.warning(message)


class _Stderr(logging.StreamHandler):
    """Each record's message, flushed at once, on whatever ``sys.stderr`` is when it is emitted (a test's capture,
    a stream redirected after the handler was installed)."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):
        return sys.stderr


class _Others(_Stderr):
    """On the root logger of a process that prints its notices: other libraries' warnings, each its bare message
    (what Python's last-resort handler printed), never a notice again. Being there, it also keeps a library's
    ``logging.info(...)`` on the root logger (open_clip's, as a model loads) from calling ``logging.basicConfig``,
    whose handler printed every later notice a second time as ``INFO:gensets:...``."""

    def __init__(self):
        super().__init__()
        self.setLevel(logging.WARNING)
        self.addFilter(lambda r: r.name != LOGGER.name and not r.name.startswith(LOGGER.name + "."))


def to_stderr(quiet: bool = False) -> None:
    """Print the notices on stderr from now on, one bare message a line (installed once: a second call only sets
    ``quiet``). ``quiet``: warnings only."""
    handler = next((h for h in LOGGER.handlers if isinstance(h, _Stderr)), None)
    if handler is None:
        handler = _Stderr()
        LOGGER.addHandler(handler)
    handler.setLevel(logging.WARNING if quiet else logging.INFO)
    if LOGGER.level == logging.NOTSET or LOGGER.level > logging.INFO:
        LOGGER.setLevel(logging.INFO)
    if not any(isinstance(h, _Others) for h in logging.root.handlers):
        logging.root.addHandler(_Others())


def shown() -> bool:
    """Whether this process prints its notices on stderr (:func:`to_stderr` was called)."""
    return any(isinstance(h, _Stderr) for h in LOGGER.handlers)


def inherit() -> None:
    """:func:`to_stderr` in a process whose starter asked for it (:data:`SHOWN` in its environment)."""
    if os.environ.get(SHOWN) == "stderr":
        to_stderr()
