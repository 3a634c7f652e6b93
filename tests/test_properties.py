"""Property-based tests (hypothesis) of the parsers that read what people and other tools wrote: a build config, a
candidate manifest, a review import (CSV, Label Studio JSON). For ANY input, a parser either reads it or refuses it
with one GensetsError line that names the file; no other exception escapes (issue #25). The corpus test
(tests/test_hostile_corpus.py) runs every command over hand-made hostile files; these generate thousands more.

The inputs are both shapeless (any bytes, any JSON) and shaped: a valid file with one value, anywhere in it,
replaced by an arbitrary one, which reaches the checks behind the first syntax error."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gensets.errors import GensetsError
from gensets.workspace import load_build_config

from .conftest import ROOT

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)  # the same examples on every run: CI is reproducible
SMOKE = yaml.safe_load((ROOT / "configs" / "imagenet_d.smoke.yaml").read_text())

# any JSON / YAML value: the odd numbers (huge, negative, nan, inf), control characters, deep nesting
LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**18, max_value=10**400),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
                 st.sampled_from(["", "../../etc/passwd", "/dev/zero", "tiny:nosuch", "hf:x/y@main", "\x00\x1b[2J",
                                  "=cmd()", "a" * 5000, "0x10", "1e309", "-1"]))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                     max_leaves=12)


def _paths(node, prefix=()):
    """Every key path of a nested dict / list (the places a value can be replaced)."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _replaced(node, path, value):
    if not path:
        return value
    copy = dict(node) if isinstance(node, dict) else list(node)
    copy[path[0]] = _replaced(node[path[0]], path[1:], value)
    return copy


def _read_or_refused(read, path: Path, names: tuple[str, ...] = ()):
    """``read(path)``, or its GensetsError: one line naming the file (or one of ``names``: what else the input
    was, e.g. ``--set``). Anything else fails the property."""
    try:
        return read(path)
    except GensetsError as e:
        msg = str(e)
        assert "\n" not in msg.strip(), msg
        assert any(n in msg for n in (path.name, *names)), msg  # names the file (past its syntax, the line or key)
        return e


def _write(tmp: str, name: str, data: bytes | str) -> Path:
    p = Path(tmp) / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return p


# --- the build config ----------------------------------------------------------------------------------------------

@PROPERTY
@given(st.binary(max_size=3000))
@example(b"\x00")  # found by this test: PyYAML's reader error spans two lines
@example(b"builder: imagenet-d\nclasses: &a [*a]\n")  # a recursive alias
@example(b"a: &a [*a, *a, *a]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\n")  # an alias bomb
def test_any_bytes_as_a_config_are_read_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(load_build_config, _write(tmp, "c.yaml", data))


@PROPERTY
@given(st.sampled_from(list(_paths(SMOKE))[1:]), VALUE)
@example(("generator", "guidance"), 10**400)  # found by this test: float() of it raised OverflowError
def test_the_smoke_config_with_any_value_anywhere_is_read_or_refused_in_one_line(where, value):
    cfg = _replaced(SMOKE, where, value)
    try:
        text = yaml.safe_dump(cfg, allow_unicode=True)
    except (yaml.YAMLError, ValueError):  # a value YAML cannot write (a lone surrogate)
        return
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(load_build_config, _write(tmp, "c.yaml", text))


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(["classes", "seed", "generator.steps", "filter.top_k", "nuisances",
                                           "image.quality", "generator.model", "no.such.key", "unit_size", ""]),
                          st.text(max_size=30)), min_size=1, max_size=3))
def test_any_set_overrides_are_applied_or_refused_in_one_line(overrides):
    """``gensets build --set KEY=VALUE``: any key and any YAML text as the value."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(tmp, "c.yaml", yaml.safe_dump(SMOKE))
        _read_or_refused(lambda p: load_build_config(p, [f"{k}={v}" for k, v in overrides]), path, ("--set",))


# --- the candidate manifest ----------------------------------------------------------------------------------------

ROW = {"unit": "0123456789abcdef", "shard": "0123456789abcdef.tar", "sha256": "0" * 64, "n": 4, "nbytes": 1024,
       "kept": 2, "skipped": [], "rank": 0, "world": 1, "env": "e0"}


def _manifest_rows(path: Path):
    from gensets.shards import Manifest, check_candidate_row

    m = Manifest(path, check=check_candidate_row)
    return m.rows(), m.done("unit")


@PROPERTY
@given(st.binary(max_size=3000))
@example(b'{"unit": "a"}')  # a torn last line: ignored
@example(b"[" * 100000 + b"\n")  # nesting past the JSON parser's recursion limit
def test_any_bytes_as_a_manifest_are_read_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(_manifest_rows, _write(tmp, "manifest.jsonl", data))


@PROPERTY
@given(st.lists(st.tuples(st.sampled_from(sorted(ROW) + ["other"]), VALUE), max_size=3), st.integers(0, 3))
def test_manifest_rows_with_any_value_of_any_key_are_read_or_refused_in_one_line(changes, line):
    rows = [dict(ROW, unit=f"{i:016x}", shard=f"{i:016x}.tar") for i in range(4)]
    for key, value in changes:
        rows[line][key] = value
    try:
        text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows)
    except (TypeError, ValueError):
        return
    with tempfile.TemporaryDirectory() as tmp:
        got = _read_or_refused(_manifest_rows, _write(tmp, "manifest.jsonl", text))
        if not isinstance(got, GensetsError):  # what is read is what a build writes
            for r in got[0]:
                assert isinstance(r["unit"], str) and isinstance(r["n"], int) and r["n"] >= 0


# --- review imports: CSV and Label Studio JSON ---------------------------------------------------------------------

def _csv(path: Path):
    from gensets.curation.interchange import _read_csv

    return _read_csv(path, "anon")


def _label_studio(path: Path):
    from gensets.curation.interchange import _read_label_studio

    return _read_label_studio(path, "anon")


@PROPERTY
@given(st.binary(max_size=3000))
@example(b"key,status,label,reviewer,note\n" + b"a" * 200000 + b",accept,,,\n")  # over csv's field size limit
@example(b'key,status\n"unclosed,accept\n')
def test_any_bytes_as_a_review_csv_are_read_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(_csv, _write(tmp, "decisions.csv", data))


@PROPERTY
@given(st.lists(st.lists(st.one_of(st.text(max_size=20), st.sampled_from(["accept", "reject", "relabel", "pending",
                                                                           "mug", "=1+1", "k" * 65])),
                         max_size=6), max_size=5),
       st.sampled_from([["key", "status", "label", "reviewer", "note"], ["key", "status"], ["status", "key", "label"],
                        ["key", "label"], []]))
def test_review_csv_rows_of_any_cells_are_read_or_refused_in_one_line(rows, header):
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    if header:
        w.writerow(header)
    w.writerows(rows)
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(_csv, _write(tmp, "decisions.csv", buf.getvalue()))


@PROPERTY
@given(st.binary(max_size=3000))
@example(b"[" * 100000)
@example(b'[{"id": 1, "data": {"key": "k"}, "annotations": [{"result": []}]}')  # cut short
def test_any_bytes_as_a_label_studio_export_are_read_or_refused_in_one_line(data):
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(_label_studio, _write(tmp, "export.json", data))


def _task(i: int) -> dict:
    """A task as Label Studio 1.23 exports it (JSON): one annotator's choice."""
    return {"id": i, "data": {"key": f"{i:016x}", "image": f"/data/{i}.jpg"},
            "annotations": [{"id": 10 + i, "completed_by": 1, "was_cancelled": False,
                             "created_at": "2026-11-20T10:00:00.000000Z", "updated_at": "2026-11-20T10:00:00.000000Z",
                             "result": [{"from_name": "verdict", "to_name": "image", "type": "choices",
                                         "value": {"choices": ["relabel"]}},
                                        {"from_name": "class", "to_name": "image", "type": "choices",
                                         "value": {"choices": ["mug"]}}]}]}


EXPORT = [_task(i) for i in range(3)]


@PROPERTY
@given(st.sampled_from(list(_paths(EXPORT))[1:]), VALUE)
def test_a_label_studio_export_with_any_value_anywhere_is_read_or_refused_in_one_line(where, value):
    export = _replaced(EXPORT, where, value)
    try:
        text = json.dumps(export, allow_nan=True)
    except (TypeError, ValueError):
        return
    with tempfile.TemporaryDirectory() as tmp:
        _read_or_refused(_label_studio, _write(tmp, "export.json", text))


def test_the_unchanged_shaped_inputs_are_read():
    """The shaped properties start from inputs the parsers accept: a refusal there is the change's doing."""
    with tempfile.TemporaryDirectory() as tmp:
        assert not isinstance(_read_or_refused(load_build_config, _write(tmp, "c.yaml", yaml.safe_dump(SMOKE))),
                              GensetsError)
        rows = "".join(json.dumps(dict(ROW, unit=f"{i:016x}")) + "\n" for i in range(4))
        got = _read_or_refused(_manifest_rows, _write(tmp, "manifest.jsonl", rows))
        assert not isinstance(got, GensetsError) and len(got[0]) == 4
        read = _read_or_refused(_label_studio, _write(tmp, "export.json", json.dumps(EXPORT)))
        assert not isinstance(read, GensetsError), read
        assert len(read.decisions) == 3


pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
