"""The redesign's safety net: every smoke build, finalize, eval and report gives the bytes recorded before it
(tests/data/golden.json, written by ``python tests/golden.py --write``; see tests/golden.py). The suite runs on
reproducible: strict's pinned CPU kernels (tests/conftest.py), so the bytes are the same on any x86-64 CPU of the
recorded vendor (another vendor's few own entries: ``by_cpu``, see tests/golden.py); only
reports' floats computed by numpy's / scipy's OpenBLAS are compared within golden.BLAS_TOLERANCE (and their figures
set aside), and only where the OpenBLAS kernels differ from the recorded ones."""

import json

import pytest

from .golden import GOLDEN, compare, expected, scrub, snapshot, vendor, write_shared

pytestmark = pytest.mark.slow  # `make test-slow` and CI: every smoke build, eval and report


def test_smoke_builds_evals_and_reports_are_byte_identical_to_the_recorded_ones(tmp_path):
    record = json.loads(GOLDEN.read_text(encoding="utf-8"))
    want = expected(record, vendor())
    got = scrub(snapshot(tmp_path), tmp_path)
    changed = compare(want, got)
    how = "exactly" if want.get("blas") == got.get("blas") else (
        f"report.json numbers within the tolerance: OpenBLAS recorded {want.get('blas')}, here {got.get('blas')}")
    cpu = (f"{vendor()}'s own entries for {len(record['by_cpu'][vendor()])} of them" if vendor() in record.get("by_cpu", {})
           else f"recorded on {record.get('cpu')}, none of its own for {vendor()}")
    assert not changed, (f"changed ({how}; {cpu}): {sorted(changed)}\n"
                         f"{json.dumps(changed, indent=1, default=str)[:4000]}")


def test_a_cpu_vendor_is_held_to_its_own_entries_only_where_it_has_them():
    record = {"cpu": "GenuineIntel", "blas": ["b"], "a/candidates": {"x.tar": "1"}, "eval a": {"top1": 0.5},
              "by_cpu": {"AuthenticAMD": {"a/candidates": {"x.tar": "2"}}}}
    intel, amd = expected(record, "GenuineIntel"), expected(record, "AuthenticAMD")
    assert intel == {"blas": ["b"], "a/candidates": {"x.tar": "1"}, "eval a": {"top1": 0.5}}
    assert amd == {**intel, "a/candidates": {"x.tar": "2"}}
    assert expected(record, "HygonGenuine") == intel  # a vendor with no entries: the record
    assert compare(amd, {**intel, "a/candidates": {"x.tar": "1"}})  # AMD's own entry is exact, not either one


def test_a_change_made_on_one_vendor_is_taken_for_the_other_only_where_the_record_shows_them_alike():
    record = {"cpu": "GenuineIntel", "blas": ["b"], "p": "1",
              "a/dataset": {"README.md": "c1", "x.tar": "1"}, "b/dataset": {"README.md": "d1"},
              "by_cpu": {"AuthenticAMD": {"a/dataset": {"README.md": "c1", "x.tar": "2"}, "p": "2"}}}
    # on AMD: both cards' text changed (alike on both vendors before), and AMD's own shard and digest
    snap = {"blas": ["z"], "a/dataset": {"README.md": "c2", "x.tar": "3"}, "b/dataset": {"README.md": "d2"}, "p": "4"}
    new, what = write_shared(record, snap, "AuthenticAMD")
    assert expected(new, "AuthenticAMD") == {**snap, "blas": ["b"]}
    assert expected(new, "GenuineIntel") == {"blas": ["b"], "p": "1", "a/dataset": {"README.md": "c2", "x.tar": "1"},
                                             "b/dataset": {"README.md": "d2"}}
    assert what.endswith("2 for AuthenticAMD only, rerun on the others: a/dataset: x.tar; p")
    # on Intel, a shard AMD records its own value for: Intel's changes, AMD's stays
    record = {"cpu": "GenuineIntel", "a/dataset": {"README.md": "c1", "x.tar": "1"},
              "by_cpu": {"AuthenticAMD": {"a/dataset": {"README.md": "c1", "x.tar": "2"}}}}
    new, _ = write_shared(record, {"a/dataset": {"README.md": "c1", "x.tar": "5"}}, "GenuineIntel")
    assert expected(new, "GenuineIntel")["a/dataset"]["x.tar"] == "5"
    assert expected(new, "AuthenticAMD")["a/dataset"]["x.tar"] == "2"


def test_the_comparison_is_loose_only_for_report_numbers_and_only_under_another_openblas():
    want = {"blas": ["openblas 0.3.30 SkylakeX"], "report g": {"report.json": "a", "report.md": "m"},
            "report g / shape": "s", "report g / numbers": {".rows[0].fd": 0.18351753865494155},
            "g/candidates": {"x.tar": "t"}}
    moved = {**want, "report g": {"report.json": "b", "report.md": "m"},
             "report g / numbers": {".rows[0].fd": 0.18351753865713907}}
    assert compare(want, moved)  # same OpenBLAS: exact
    other = {**moved, "blas": ["openblas 0.3.30 Haswell"]}
    assert compare(want, other) == {}
    # under another OpenBLAS still: a number beyond the tolerance, another shape, a markdown byte, a shard
    assert compare(want, {**other, "report g / numbers": {".rows[0].fd": 0.1836}})
    assert compare(want, {**other, "report g / shape": "s2"})
    assert compare(want, {**other, "report g": {"report.json": "b", "report.md": "m2"}})
    assert compare(want, {**other, "g/candidates": {"x.tar": "u"}})
    assert compare(want, {**moved, "report g": {"report.json": "b", "report.md": "m", "c.png": "p"}})
