"""The redesign's safety net: every smoke build, finalize, eval and report gives the bytes recorded before it
(tests/data/golden.json, written by ``python tests/golden.py --write``; see tests/golden.py)."""

import json

from .golden import GOLDEN, scrub, snapshot


def test_smoke_builds_evals_and_reports_are_byte_identical_to_the_recorded_ones(tmp_path):
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = scrub(snapshot(tmp_path), tmp_path)
    changed = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    # per file for a tree of digests, else the two values (a digest, eval rows)
    detail = {k: {f: (want[k].get(f), got[k].get(f)) for f in want[k].keys() | got[k].keys()
                  if want[k].get(f) != got[k].get(f)}
              if isinstance(want.get(k), dict) and isinstance(got.get(k), dict) else (want.get(k), got.get(k))
              for k in changed}
    assert not changed, f"changed: {changed}\n{json.dumps(detail, indent=1, default=str)[:4000]}"
