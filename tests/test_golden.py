"""The redesign's safety net: every smoke build, finalize, eval and report gives the bytes recorded before it
(tests/data/golden.json, written by ``python tests/golden.py --write``; see tests/golden.py). The suite runs on
reproducible: strict's pinned CPU kernels (tests/conftest.py), so the bytes are the same on any x86-64 CPU; only
reports' floats computed by numpy's / scipy's OpenBLAS are compared within golden.BLAS_TOLERANCE (and their figures
set aside), and only where the OpenBLAS kernels differ from the recorded ones."""

import json

import pytest

from .golden import GOLDEN, compare, scrub, snapshot

pytestmark = pytest.mark.slow  # `make test-slow` and CI: every smoke build, eval and report


def test_smoke_builds_evals_and_reports_are_byte_identical_to_the_recorded_ones(tmp_path):
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = scrub(snapshot(tmp_path), tmp_path)
    changed = compare(want, got)
    how = "exactly" if want.get("blas") == got.get("blas") else (
        f"report.json numbers within the tolerance: OpenBLAS recorded {want.get('blas')}, here {got.get('blas')}")
    assert not changed, f"changed ({how}): {sorted(changed)}\n{json.dumps(changed, indent=1, default=str)[:4000]}"


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
