"""The one door for records: every JSON record gensets reads from a workspace, a dataset, a bucket or a server
record (environments, manifests, commit markers, timings, ``.review-server.json``, TI checkpoints' state, a
Label Studio export's tasks) is read and checked here, once:

- :func:`read`: a file, refused when a symlink leads out of ``root``, when it is not a regular file (a FIFO, a
  folder, a device: never opened for a blocking read), over ``max_bytes`` or nested deeper than
  :data:`MAX_DEPTH`; then :func:`parse`.
- :func:`parse`: bytes read elsewhere (an object of a bucket, a descriptor held under a lock, a JSONL line):
  UTF-8, JSON, the same bounds, then :func:`check`.
- :func:`check`: a value against its schema (:mod:`gensets.schemas`); a value streamed item by item (a Label
  Studio export) is checked here item by item.

Every refusal is a :class:`RecordError` (a DataError: exit 1): one line naming the file (or object, or item),
the field (``cpu.model``, ``shards[3].n``) and the problem; a string is shown ``ascii()``-escaped and cut, so that
a control character in a record never reaches the terminal. The value returned is the JSON as read (dicts and
lists), never a re-serialised copy: what gensets writes from a record it read is byte-identical to before.

Why pydantic (v2) for the schemas: mature and widely used (the typing of FastAPI, Hugging Face's and many
others' configs), already pinned in our locks; typed models that read as the records' documentation; strict
types (``"2"`` is not a number, ``true`` not a count) and declarative constraints (bounds on every number, a
pattern or a length on every string, ``extra="forbid"``) instead of hand-written checks; and errors that carry
the location of the field, which is what the one line names. msgspec would be faster, but records are small
and read once; pydantic's error locations and constraint vocabulary decided it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import DataError
from .safety import inside, open_regular

MAX_BYTES = 16 << 20  # a record is kilobytes; a dataset's manifest.json of 100k shards is ~20 MB: raise per schema
MAX_DEPTH = 32  # the deepest record gensets writes is 5 levels


class RecordError(DataError):
    """A record that is not what gensets writes: one line naming the file, the field and the problem."""


def _show(v: Any) -> str:
    """A value for the one line: ascii-escaped (no control character reaches a terminal), cut."""
    if isinstance(v, (dict, list)):
        return f"{type(v).__name__} of {len(v)}"
    text = ascii(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _field(value: Any, loc: tuple) -> str:
    """``a.b[3].c`` of a pydantic error location: the keys and indices found in ``value`` (a union's member
    tags, which pydantic puts in the location too, are not keys of the record and are left out)."""
    out, cur = "", value
    for part in loc:
        if isinstance(cur, dict) and isinstance(part, str) and part in cur:
            shown = part if part.isidentifier() or part.replace("-", "_").replace(".", "_").isidentifier() \
                else f"[{_show(part)}]"
            out += shown if not out or shown.startswith("[") else f".{shown}"
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out += f"[{part}]"
            cur = cur[part]
        elif isinstance(cur, dict) and isinstance(part, str) and not out.endswith(f".{part}"):
            if part not in ("[key]",) and ("[" in part or "-" in part or "function" in part):
                continue  # a union's or a validator's tag
            out += f".{part}" if out else part  # a missing key
            cur = None
    return out or "(the record)"


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a scalar: 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def schema_of(schema):
    """A schema class, or its name in :mod:`gensets.schemas` (imported on first use: pydantic and the models take
    ~0.5 s, which ``gensets --help`` does not pay)."""
    if isinstance(schema, str):
        from . import schemas  # lazy: pydantic and the models, which `gensets --help` does not pay for

        return getattr(schemas, schema)
    return schema


def check(value: Any, schema, name: str) -> Any:
    """``value`` when ``schema`` (a class or a name of :mod:`gensets.schemas`) accepts it (strict: no coercion),
    else RecordError naming ``name``, the field and the problem. ``value`` itself is returned, never the model:
    nothing read is rewritten."""
    from pydantic import ValidationError

    schema = schema_of(schema)
    if _depth(value) > MAX_DEPTH:
        raise RecordError(f"{name}: nested deeper than {MAX_DEPTH} levels; not a record gensets wrote, refusing it")
    try:
        schema.model_validate(value, strict=True)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        # a union's members each fail: the one that failed on a value (not on its type) says what is wrong
        first = next((x for x in errors if not x["type"].endswith("_type") and x["type"] != "none_required"),
                     errors[0])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        what = "" if first["type"] == "missing" else f" (got {_show(first.get('input'))})"
        raise RecordError(f"{name}: {_field(value, first['loc'])}: {first['msg'].removeprefix('Value error, ')}"
                          f"{what}{more}; not {getattr(schema, 'WHAT', 'a record')} as gensets writes it") from None
    return value


def loads(data: bytes | str, name: str, max_bytes: int = MAX_BYTES) -> Any:
    """The JSON value of ``data`` (bounded: size and depth), no schema: for a value that is not gensets' own and is
    used only if it is (a publish target's previous manifest.json). RecordError naming ``name`` otherwise."""
    if len(data) > max_bytes:
        raise RecordError(f"{name}: over {max_bytes} bytes; not a record gensets wrote, refusing it")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        value = json.loads(text)
    except UnicodeDecodeError as e:
        raise RecordError(f"{name}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise RecordError(f"{name}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise RecordError(f"{name}: JSON nested too deeply to read; refusing it") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise RecordError(f"{name}: not valid JSON ({' '.join(str(e).split())[:120]})") from None
    if _depth(value) > MAX_DEPTH:
        raise RecordError(f"{name}: nested deeper than {MAX_DEPTH} levels; not a record gensets wrote, refusing it")
    return value


def parse(data: bytes | str, schema, name: str, max_bytes: int | None = None) -> Any:
    """The JSON value of ``data`` (an object read from a bucket, a JSONL line, a descriptor's bytes) checked
    against ``schema`` (:func:`loads`, then :func:`check`); RecordError naming ``name`` otherwise."""
    limit = max_bytes or getattr(schema_of(schema), "MAX_BYTES", MAX_BYTES)
    return check(loads(data, name, limit), schema, name)


def read(path: str | os.PathLike, schema, root: str | os.PathLike | None = None,
         where: str | None = None, max_bytes: int | None = None) -> Any:
    """The record at ``path`` checked against ``schema``. With ``root``, ``path`` (absolute, or relative to it) must
    stay inside it: a symlink out (to a credentials file) is refused before anything is read. A FIFO, a folder or
    a device is refused without blocking; a file over ``max_bytes`` (the schema's ``MAX_BYTES``) is refused
    without reading it all. ``where``: who named the file, for the message."""
    path = Path(path)
    if root is not None:
        if path.is_absolute() and not path.is_relative_to(root):
            raise RecordError(f"{path}: not inside {root}; refusing it")
        path = inside(root, path.relative_to(root) if path.is_absolute() else path, where)
    name = f"{path}" + (f" (from {where})" if where else "")
    limit = max_bytes or getattr(schema_of(schema), "MAX_BYTES", MAX_BYTES)
    with open_regular(path, where) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise RecordError(f"{name}: over {limit} bytes; not a record gensets wrote, refusing it")
    return parse(data, schema, name, limit)
