"""Errors that the CLI turns into one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations


class GensetsError(Exception):
    """Bad input: a config, a model spec, a file. The message names what and where."""

    exit_code = 2


class ConfigError(GensetsError):
    """A config file is malformed: the message names the file, key and line."""


class ModelError(GensetsError):
    """A model spec is unknown, or its model cannot be loaded (offline, missing, unsafe)."""


class DataError(GensetsError):
    """A shard, image or workspace is corrupt or inconsistent."""

    exit_code = 1
