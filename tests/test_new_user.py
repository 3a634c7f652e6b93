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


def test_genbench_finalize_plans_the_build_from_the_workspace(tmp_path):
    """GenBench's frozen config names its reference folder relative to configs/ (`folder:genbench.smoke-refs`):
    finalize, run from the checkout, warned that the plan "cannot be made here" and skipped the completeness check.
    The folder the config was read from is recorded beside the frozen copy: the plan is made (no warning), so a
    unit missing from the build is refused."""
    import json

    ws = tmp_path / "gb"
    run_cli("build", ROOT / "configs" / "genbench.smoke.yaml", "--out", ws, "--quiet", check=0)
    recorded = json.loads((ws / ".config-dir.json").read_text())["config_dir"]  # relative: no path of this machine
    assert not recorded.startswith("/") and (ws / recorded).resolve() == (ROOT / "configs").resolve(), recorded
    r = run_cli("finalize", ws, check=0)
    assert "cannot be made here" not in r.stderr and "warning" not in r.stderr, r.stderr
    manifest = ws / "candidates" / "manifest.jsonl"
    rows = manifest.read_text().splitlines()
    manifest.write_text("\n".join(rows[1:]) + "\n")  # a unit of the plan no longer committed
    r = run_cli("finalize", ws)
    assert r.returncode == 1 and f"1 of {len(rows)} units of the build are not committed" in r.stderr, r.stderr


def _snippet(card: str) -> str:
    """The card's load snippet, as written (the python block between its <!-- load --> markers)."""
    block = card.split("<!-- load -->", 1)[1].split("<!-- /load -->", 1)[0]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_cards_load_snippet_runs_as_written_where_the_card_is(reference, tmp_path):
    """The card's snippet read `REPO = "path/or/org/name"` and failed with a traceback. Now, before publishing, it
    loads the folder the card is in, run there (no path of this machine in the card: a dataset's bytes do not
    depend on where it was built), and the card published into a folder (`file://`) loads that folder at its
    revision, run anywhere: each as written, offline."""
    import subprocess
    import sys

    repo = tmp_path / "published"
    run_cli("publish", reference, "--repo", f"file://{repo}", check=0)
    for card, here in ((reference / "dataset" / "README.md", reference / "dataset"), (repo / "README.md", tmp_path)):
        code = _snippet(card.read_text(encoding="utf-8"))
        assert "path/or/org/name" not in code, code
        r = subprocess.run([sys.executable, "-c", code + "\nprint(len(ds), ds.features['cls'].names)"],
                           capture_output=True, text=True, cwd=here, timeout=600)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (card, r.stderr[-3000:])
        n, names = r.stdout.strip().splitlines()[-1].split(" ", 1)
        assert int(n) > 0 and "backpack" in names, r.stdout


def test_accepted_and_ignored_options_are_refused_or_honoured(tmp_path):
    """`leaderboard --metric` without `--pivot` printed the plain leaderboard as if honoured: now refused in one
    line. `reproduce --dry-run --json` printed text: now JSON. A paper run that fails offline left an empty
    out/reproduce/<table>/ behind: now nothing."""
    import json

    from .test_card import make_results_db
    from .test_hardening import one_line_error

    db = make_results_db(tmp_path / "r.duckdb")
    one_line_error(run_cli("leaderboard", "--db", db, "--metric", "top5"), "--metric top5", "--pivot", code=2)
    run_cli("leaderboard", "--db", db, "--metric", "top5", "--pivot", check=0)
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--dry-run", "--json", "--out", tmp_path / "dry", check=0)
    plan = json.loads(r.stdout)
    assert plan["table"] == "imagenet-d-table" and plan["smoke"] and plan["dry_run"] and plan["steps"], plan
    assert not (tmp_path / "dry").exists()
    out = tmp_path / "new" / "reproduce" / "imagenet-d-table"
    r = run_cli("reproduce", "imagenet-d-table", "--out", out)  # the paper run: the released dataset, offline
    assert r.returncode == 3 and r.stderr.strip().splitlines()[-1].startswith("gensets: error: dataset hf:"), r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "new").exists()


def test_reproduce_scores_a_reviewed_workspace_without_rewriting_its_dataset(reference, tmp_path):
    """`reproduce --smoke --workspace WS` finalized WS again with its pending images, silently rewriting the dataset
    its owner had finalized from their review: now that dataset is scored as it is, and a line says so."""
    from .test_card import digest

    ws = shutil.copytree(reference, tmp_path / "ws")
    keys = run_cli("review", "list", ws, check=0).stdout.splitlines()[1:3]
    run_cli("review", "accept", ws, *[k.split("\t")[0] for k in keys], "--reviewer", "ana", check=0)
    run_cli("finalize", ws, check=0)  # the owner's dataset: the two images they accepted
    before = digest(ws / "dataset")
    r = run_cli("reproduce", "imagenet-d-table", "--smoke", "--workspace", ws, "--out", tmp_path / "out",
                "--quiet", check=0)
    assert digest(ws / "dataset") == before
    assert f"{ws}/dataset: finalized before from its review's decisions alone" in r.stderr, r.stderr
    assert "not finalized again" in r.stderr


def test_list_alone_packaged_configs_distinct_descriptions_and_a_mistyped_path(tmp_path):
    """`gensets list` alone was an argparse error: now the lists. Outside the checkout `list configs` printed
    nothing: now the paper configs gensets ships. `list protocols` showed variants with one description (cut, or
    their module's): now each says what it is. A mistyped relative path was reported as a Hub lookup only: now
    that no such folder exists here, then that it was tried as a Hub id."""
    import subprocess
    import sys

    from gensets.catalog import LISTS
    from gensets.reproduce import CONFIGS

    r = run_cli("list", check=0)
    assert [x.split()[0] for x in r.stdout.splitlines()] == list(LISTS), r.stdout
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    elsewhere = subprocess.run([sys.executable, "-m", "gensets.cli", "list", "configs"], capture_output=True,
                               text=True, cwd=tmp_path, timeout=300, env=env)
    names = [x.split()[0] for x in elsewhere.stdout.splitlines()]
    assert elsewhere.returncode == 0 and str(CONFIGS / "imagenet_d.smoke.yaml") in names, elsewhere
    assert sorted(names) == sorted(str(p) for p in CONFIGS.glob("*.yaml")) and "no ./configs here" in elsewhere.stderr
    here = run_cli("list", "configs", check=0)  # in the checkout: its configs/, as before
    assert "configs/imagenet_d.smoke.yaml" in [x.split()[0] for x in here.stdout.splitlines()]
    for what in ("protocols", "builders", "reports", "metrics"):
        shown = [x.split(None, 1)[1] for x in run_cli("list", what, check=0).stdout.splitlines()]
        assert len(set(shown)) == len(shown), (what, shown)
    r = run_cli("eval", "my-build/dataset", "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"gensets: error: my-build/dataset: no such folder here (in {ROOT}), so it was tried "
                               "as a Hub dataset id: "), lines


DUPLICATE = """
import logging
from gensets import notices
from gensets.models.classifier import load_classifier
notices.to_stderr()  # as the CLI does
load_classifier("tiny:clip", labels=["a", "b"])  # open_clip calls logging.info on the root logger: basicConfig
load_classifier("tiny:clip", labels=["a", "b"])
logging.getLogger("another.library").warning("another library's warning")
"""


def test_each_notice_is_printed_once_after_a_library_configures_the_root_logger():
    """open_clip's `logging.info` on the root logger called logging.basicConfig as a model loaded; every later
    notice was then printed twice, the second time as `INFO:gensets:loading ...` (failure-modes builds, reproduce).
    Now once; another library's warning is still printed, once, bare."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "GENSETS_ANNOUNCE": "always",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, "-c", DUPLICATE], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=600)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 0 and not any("gensets:" in x.split(" ")[0] for x in lines), r.stderr
    assert len(lines) == 3 and all(x.startswith("loading tiny:clip: ") for x in lines[:2]), lines
    assert lines[2] == "another library's warning"


def test_review_help_agreement_invite_json_and_plurals(reference, tmp_path):
    """The top-level help called `review` "list, accept, reject, relabel" only: now every verb. `review agreement`
    with no image decided twice said "observed agreement None"; `review invite --list` had no --json; finalize
    said "1 shards" and a log "12/12 unit": now words that fit."""
    import json
    import re

    ws = shutil.copytree(reference, tmp_path / "ws")
    top = run_cli("--help", check=0).stdout
    line = " ".join(re.search(r"^    review\s+(.*?)(?=^    \S)", top, re.M | re.S).group(1).split())
    verbs = re.findall(r"^    ([a-z-]+)\b", run_cli("review", "--help", check=0).stdout, re.M)
    assert len(verbs) >= 11 and all(re.search(rf"\b{v}\b", line) for v in verbs), (line, verbs)
    run_cli("review", "mode", ws, "double", check=0)
    r = run_cli("review", "agreement", ws, check=0)
    assert "None" not in r.stdout and r.stdout.startswith("no image decided by two reviewers yet"), r.stdout
    run_cli("review", "invite", ws, "ana", check=0)
    links = json.loads(run_cli("review", "invite", ws, "--list", "--json", check=0).stdout)
    assert [(x["reviewer"], x["role"], x["state"]) for x in links] == [("ana", "reviewer", "valid")], links
    assert "token" not in json.dumps(links).lower()
    run_cli("review", "mode", ws, "single", check=0)
    key = run_cli("review", "list", ws, check=0).stdout.splitlines()[1].split("\t")[0]
    run_cli("review", "accept", ws, key, "--reviewer", "ana", check=0)
    r = run_cli("finalize", ws, check=0)  # one accepted image: one shard
    assert re.search(r": 1 shard; images per config", r.stdout), r.stdout
    small = run_cli("build", ROOT / "configs" / "imagenet_d.smoke.yaml", "--out", tmp_path / "one", "--set",
                    "nuisances={background: {limit: 1}}", "--set", "classes=[mug]", "--set", "images_per_pair=1",
                    check=0)
    assert ": 1 unit (0 done before, 1 run here); 1 sample written" in small.stdout, small.stdout
    assert "imagenet-d: 1/1 unit in " in small.stderr, small.stderr
    import contextlib
    import io

    from gensets.progress import bar

    for unit, n, said in (("unit", 12, "12/12 units in "), ("img", 3, "3/3 images in "), ("img", 1, "1/1 image in ")):
        log = io.StringIO()  # a log, not a terminal: one line when the stage ends
        with contextlib.redirect_stderr(log):
            list(bar(range(n), total=n, desc="stage", unit=unit))
        assert log.getvalue().startswith(f"stage: {said}"), log.getvalue()
