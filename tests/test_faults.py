"""Issue 55's faults, each reproduced by a test that failed on the code before its fix: a manifest linked out of its
dataset, a query time limit too large for a timer, a missing output folder, a full disk, a store out of reach."""

import shutil

from .conftest import run_cli
from .test_hardening import one_line_error


def test_verify_and_card_refuse_a_manifest_linked_out_of_the_dataset(reference, tmp_path):
    """`publish` and `eval` refuse a dataset whose manifest.json is a symlink out of it: `verify`, the check run
    before publishing, finds it (and never reads the file outside), and `card` refuses to re-render from it."""
    ws = shutil.copytree(reference, tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "dataset" / "manifest.json").rename(outside / "manifest.json")
    (ws / "dataset" / "manifest.json").symlink_to(outside / "manifest.json")
    for target in (ws, ws / "dataset"):
        r = run_cli("verify", target)
        assert r.returncode == 1 and f"{ws / 'dataset' / 'manifest.json'}: a symlink along the way leads out" \
            in r.stdout, r.stdout
    before = (outside / "manifest.json").read_bytes()
    one_line_error(run_cli("card", ws), f"{ws / 'dataset' / 'manifest.json'}", "symlink", "refusing it", code=1)
    one_line_error(run_cli("publish", ws, "--repo", f"file://{tmp_path / 'repo'}"), "manifest.json", "symlink")
    assert (outside / "manifest.json").read_bytes() == before and not (outside / "README.md").exists()
