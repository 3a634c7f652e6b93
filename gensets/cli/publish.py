"""gensets card, publish, publish-results: a finalized dataset's card, and uploads to the Hub (or a folder)."""

from __future__ import annotations

import json
from pathlib import Path

from ..cards.card import rerender
from ..evaluation.scoring import build_scores
from ..evaluation.store import build_leaderboard
from ..publish import publish, publish_results
from ..store import is_url


def add_card(sub) -> None:
    cd = sub.add_parser("card", help="(re)render the dataset card and its figures",
                        description="Write WORKSPACE/dataset/README.md (YAML header with configs and features, "
                        "how it was built, curation funnel, figures, how to load, citation) and figures/.")
    cd.add_argument("workspace")
    cd.add_argument("--db", help="a results database: adds a baseline leaderboard (gensets eval) and the quality "
                    "scores of this build (gensets score)")
    cd.add_argument("--json", action="store_true", help="print {dir, files} as JSON")
    cd.set_defaults(func=_card)


def add_parser(sub) -> None:
    pb = sub.add_parser("publish", help="upload a finalized dataset to the Hugging Face Hub",
                        description="Shards first (one or more commits), then the card, manifest and figures in "
                        "the last commit, then an optional tag. The token comes from HF_TOKEN or `hf auth "
                        "login` and is never printed. --repo file:///path publishes into a local folder.")
    pb.add_argument("workspace", help="a workspace (its dataset/) or a dataset folder")
    pb.add_argument("--repo", required=True, metavar="ORG/NAME")
    pb.add_argument("--private", action="store_true")
    pb.add_argument("--revision", metavar="BRANCH", help="upload to this branch (created if missing)")
    pb.add_argument("--tag", help="tag the last commit, e.g. v1.0")
    pb.add_argument("--dry-run", action="store_true", help="list the operations, upload nothing")
    pb.add_argument("--replace", action="store_true",
                    help="publish over a repo that holds another gensets dataset (another builder or build; its shards are deleted)")
    pb.add_argument("--allow-random-weights", action="store_true",
                    help="publish a build made with random: models (noise; refused without this)")
    pb.add_argument("--json", action="store_true",
                    help="print {repo, revision, tag, dry_run, url, steps} as JSON (steps: the lines otherwise printed)")
    pb.set_defaults(func=_publish)

    pr = sub.add_parser("publish-results", help="upload the leaderboard as results/leaderboard.parquet",
                        description="Upload every leaderboard row of a results database (gensets leaderboard "
                        "--format json: one row per run) as results/leaderboard.parquet in one commit to a "
                        "dataset repo. The token comes from HF_TOKEN or `hf auth login`.")
    pr.add_argument("--db", required=True, help="the results database (DuckDB file) that gensets eval wrote")
    pr.add_argument("--repo", required=True, metavar="ORG/NAME", help="the dataset repo (created if missing); "
                    "file:///path: a local folder")
    pr.add_argument("--revision", metavar="BRANCH", help="upload to this branch (default: main)")
    pr.add_argument("--dry-run", action="store_true", help="print the commit it would make, upload nothing")
    pr.add_argument("--allow-random-weights", action="store_true",
                    help="publish runs of random-weight models (tiny:, random:; noise: refused without this, and "
                    "every file says so)")
    pr.set_defaults(func=_publish_results)


def _card(a) -> int:
    board = scores = None
    if a.db:
        def board(configs, build_id):
            return build_leaderboard(a.db, configs, build_id)

        def scores(configs, build_id):
            return build_scores(a.db, configs, build_id)
    files = rerender(a.workspace, leaderboard=board, scores=scores, progress=not a.json)
    folder = f"{a.workspace.rstrip('/')}/dataset" if is_url(a.workspace) else Path(a.workspace) / "dataset"
    if a.json:
        print(json.dumps({"dir": str(folder), "files": list(files)}, indent=1))
    else:
        print("wrote " + ", ".join(files) + f" in {folder}")
    return 0


def _publish(a) -> int:
    lines: list[str] = []
    url = publish(a.workspace, a.repo, private=a.private, revision=a.revision, tag=a.tag, dry_run=a.dry_run,
                  allow_random_weights=a.allow_random_weights, replace=a.replace,
                  out=lines.append if a.json else print)
    if a.json:
        print(json.dumps({"repo": a.repo, "revision": a.revision, "tag": a.tag, "dry_run": a.dry_run, "url": url,
                          "steps": lines}, indent=1))
    elif url:
        print(f"published: {url}")
    return 0


def _publish_results(a) -> int:
    url = publish_results(a.db, a.repo, revision=a.revision, dry_run=a.dry_run,
                          allow_random_weights=a.allow_random_weights)
    if url:
        print(f"published: {url}")
    return 0
