"""Errors that the CLI turns into one line on stderr and a non-zero exit, never a traceback.

Exit codes (the README's table; `gensets --help` prints it), so a script can tell "fix your command" from
"retry later":

    0    success
    1    data or runtime error: a corrupt shard or image, an inconsistent workspace, a failed step (DataError,
         OSError)
    2    usage: bad arguments, a malformed config, an unknown model spec or name (GensetsError, ConfigError,
         ModelError; argparse's own errors)
    3    environment: a model, dataset or the Hub cannot be reached (offline and not cached, no credentials, the
         network or the server failing): fix the environment, then run the same command again (Unavailable)
    4    busy: another gensets process holds the workspace's lock: run it again once that one ends (Busy)
    130  interrupted (Ctrl-C): what is committed is kept; the same command resumes
    141  the reader of the output went away (``| head``): quietly, as a process that SIGPIPE ends
"""

from __future__ import annotations

EXIT_CODES = {0: "success", 1: "data or runtime error", 2: "usage: bad arguments or config",
              3: "environment: a model, dataset or the Hub unreachable, or no credentials (retry once fixed)",
              4: "busy: the workspace is locked by another gensets process (retry later)",
              130: "interrupted (Ctrl-C): committed work is kept, the same command resumes",
              141: "the output's reader stopped reading (a pipe into head): nothing more is printed"}


class GensetsError(Exception):
    """Bad input: a config, a model spec, an argument. The message names what and where."""

    exit_code = 2


class ConfigError(GensetsError):
    """A config file is malformed: the message names the file, key and line."""


class ModelError(GensetsError):
    """A model spec is unknown, or its model cannot be loaded (missing, unsafe)."""


class DataError(GensetsError):
    """A shard, image or workspace is corrupt or inconsistent."""

    exit_code = 1


class TimedOut(GensetsError):
    """A command ran past the time limit it was given (``gensets query --timeout``): a runtime error."""

    exit_code = 1


class Unavailable(GensetsError):
    """Something outside gensets cannot be reached: the Hub or a download server (offline, not cached), credentials."""

    exit_code = 3


class ModelUnavailable(ModelError, Unavailable):
    """A model that is neither cached nor reachable (offline): exit 3, and still a ModelError."""

    exit_code = 3


class Busy(GensetsError):
    """Another gensets process holds the lock of the workspace."""

    exit_code = 4


def did_you_mean(word: str, options) -> str:
    """`` (did you mean 'x'?)`` naming the closest of ``options`` to a misspelt ``word`` (difflib), or ``""``."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=3, cutoff=0.7)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
