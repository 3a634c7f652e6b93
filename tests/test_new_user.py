"""Issue 55's first hour, as a new user meets it: each test failed on the code before its fix."""

import shutil

from .conftest import ROOT, run_cli


def test_accept_all_pending_again_says_nothing_pending_and_the_readme_shows_the_page_first(reference, tmp_path):
    """Rerunning `review accept --all-pending` said "no sample keys given" (exit 2): now "nothing pending", exit 0.
    The README accepted every image before it showed the review page, which then opened empty: the page first."""
    ws = shutil.copytree(reference, tmp_path / "ws")
    first = run_cli("review", "accept", ws, "--all-pending", "--reviewer", "ana", check=0)
    assert first.stdout.strip().endswith("sample(s) accepted") and not first.stdout.startswith("0 ")
    again = run_cli("review", "accept", ws, "--all-pending", "--reviewer", "ana", check=0)
    assert again.stdout.startswith(f"nothing pending in {ws}") and again.stderr == "", again
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    serve = next(i for i, x in enumerate(lines) if x.startswith("gensets review serve "))
    accept = next(i for i, x in enumerate(lines) if x.startswith("gensets review accept ") and "--all-pending" in x)
    build = next(i for i, x in enumerate(lines) if x.startswith("gensets build "))
    assert build < serve < accept, (build, serve, accept)
