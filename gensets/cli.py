"""The ``gensets`` command: parses arguments, calls the library, prints. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__
from .errors import GensetsError


def _build(a) -> int:
    from .builders.runner import build

    r = build(a.config, a.out, quiet=a.quiet, threads=a.threads)
    if r["rank"] == 0:
        print(f"{r['workspace']}: {r['units']} units ({r['done_before']} done before, "
              f"{r['units_run']} run here); {r['samples_written']} samples written, "
              f"{r['samples_ingested']} added to state.duckdb")
        print(f"next: gensets review list {r['workspace']}   then: gensets finalize {r['workspace']}")
    return 0


def _finalize(a) -> int:
    from .builders.runner import finalize

    r = finalize(a.workspace, include_pending=a.include_pending)
    print(f"{r['dataset']}: {r['shards']} shards; images per config: "
          + ", ".join(f"{k} {v}" for k, v in r["counts"].items()))
    for config, f in r["funnel"].items():
        print(f"  {config}: generated {f['generated']} -> kept by the filters {f['kept']} -> "
              f"accepted {f['accepted']} (pending {f['pending']}, rejected {f['rejected']})")
    first = next((k for k, v in r["counts"].items() if v), None)
    if first:
        print("load it with:\n  from datasets import load_dataset\n"
              f"  ds = load_dataset({r['dataset']!r}, {first!r}, split='test')")
    return 0


def _verify(a) -> int:
    from .shards import verify

    problems = verify(Path(a.dir))
    for p in problems:
        print(p)
    if problems:
        print(f"{a.dir}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{a.dir}: ok")
    return 0


def _review(a) -> int:
    from .curation import review, state
    from .workspace import Workspace

    ws = Workspace(a.workspace)
    builder, cfg = ws.load()
    if not ws.state_path.exists():
        raise GensetsError(f"{ws.root}: nothing built yet (no state.duckdb)")
    if a.action == "list":
        con = state.connect(ws.state_path, read_only=True)
        rows = review.list_queue(con, status=None if a.status == "all" else a.status,
                                 label=a.label, config=a.config, limit=a.limit)
        con.close()
        if a.json:
            print(json.dumps(rows, default=str, indent=1))
        else:
            for r in rows:
                label = r["label"] if r["review_label"] == r["label"] else f"{r['label']} -> {r['review_label']}"
                print(f"{r['key']}\t{r['status']}\t{label}\t{r['nuisance']}\t{r['prompt']}")
            print(f"{len(rows)} sample(s)", file=sys.stderr)
        return 0
    con = state.connect(ws.state_path)
    try:
        status = {"accept": "accepted", "reject": "rejected", "relabel": "relabeled"}[a.action]
        keys = list(a.keys)
        if getattr(a, "all_pending", False):
            keys += [r["key"] for r in review.list_queue(con, status="pending")]
        n = review.decide(con, keys, status, label=getattr(a, "to", None), reviewer=a.reviewer,
                          note=a.note, valid_labels=builder.class_names(cfg))
    finally:
        con.close()
    print(f"{n} sample(s) {status}")
    return 0


def _eval(a) -> int:
    from .evaluation.runner import evaluate

    results = evaluate(a.dataset, a.model, a.db, config=a.config, split=a.split, protocol=a.protocol,
                       batch_size=a.batch_size, workers=a.workers, limit=a.limit, quiet=a.quiet or a.json,
                       allow_pickle=a.allow_pickle, trust_remote_code=a.trust_remote_code, clip=a.clip)
    if a.json:
        print(json.dumps([{k: r[k] for k in ("model", "dataset", "config", "split", "protocol", "n", "metrics")}
                          for r in results], indent=1))
    else:
        for r in results:
            m = r["metrics"]
            lo, hi = r["intervals"]["top1"]
            extra = "".join(f"  {k} {v:.4f}" for k, v in m.items() if k != "top1" and v is not None)
            print(f"{r['model']}  {r['config']}/{r['split']}  [{r['protocol']}]  n={r['n']}  "
                  f"top1 {m['top1']:.4f} ({lo:.4f}-{hi:.4f}){extra}")
        print(f"results in {a.db}: gensets leaderboard --db {a.db}", file=sys.stderr)
    return 0


def _print_rows(cols: list[str], rows: list, fmt: str) -> None:
    def cell(v):
        return f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))

    if fmt == "json":
        print(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str, indent=1))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    elif fmt == "markdown":
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(cell(v).replace("|", "\\|") for v in r) + " |")
    else:
        cells = [[cell(v) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
        for r in cells:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))


def _leaderboard(a) -> int:
    from .evaluation import store

    con = store.connect(a.db, read_only=True)
    cols, rows = store.leaderboard(con, a.dataset, a.config, a.split)
    con.close()
    _print_rows(cols, rows, a.format)
    return 0


def _query(a) -> int:
    import duckdb

    from .evaluation import store

    con = store.connect(a.db, read_only=True)
    try:
        cur = con.execute(a.sql)
        cols = [d[0] for d in cur.description] if cur.description else []
        rows = cur.fetchall() if cols else []
    except duckdb.Error as e:
        raise GensetsError(f"query failed: {str(e).splitlines()[0]}") from None
    finally:
        con.close()
    _print_rows(cols, rows, a.format)
    return 0


def _report_recognition(a) -> int:
    from .evaluation import recognition_report as R

    rep = R.compute(a.db, a.dataset, a.protocol)
    path = R.write(rep, a.out)
    print(f"{path} (+ figures in {path.parent})")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gensets",
        description="Generate, curate, publish and evaluate benchmark datasets of generated images.")
    p.add_argument("--version", action="version", version=f"gensets {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="generate and filter a dataset into a workspace (resumable)",
                       description="Generate every work unit of CONFIG that is not done yet, score it with "
                       "the surrogates and record it in WORKSPACE/state.duckdb. Safe to kill and re-run; "
                       "under `accelerate launch` each process takes its share of the units.")
    b.add_argument("config", help="a builder config (YAML), e.g. configs/imagenet_d.smoke.yaml")
    b.add_argument("--out", required=True, metavar="WORKSPACE", help="the workspace folder")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--threads", type=int, default=1,
                   help="torch threads per process on CPU (default 1: CPU results depend on the thread "
                   "count, so keep it fixed for byte-identical rebuilds; scale with processes instead)")
    b.set_defaults(func=_build)

    f = sub.add_parser("finalize", help="write the publishable dataset/ folder of a workspace",
                       description="Write WORKSPACE/dataset: the reviewed images as WebDataset shards, "
                       "one config per nuisance kind, the manifest and the dataset card.")
    f.add_argument("workspace")
    f.add_argument("--include-pending", action="store_true",
                   help="also include images not yet reviewed (for smoke runs)")
    f.set_defaults(func=_finalize)

    v = sub.add_parser("verify", help="rehash, recount and decode every shard under DIR",
                       description="Check every shard under DIR against its manifest: sha256, sample count, "
                       "safe member names, and that every member decodes. Exit 0 when all is well, "
                       "1 when a problem was found (one line each), 2 on bad usage.")
    v.add_argument("dir")
    v.set_defaults(func=_verify)

    r = sub.add_parser("review", help="the review queue: list, accept, reject, relabel")
    rsub = r.add_subparsers(dest="action", required=True, metavar="ACTION")
    rl = rsub.add_parser("list", help="list samples in the queue")
    rl.add_argument("workspace")
    rl.add_argument("--status", default="pending", choices=["pending", "accepted", "rejected", "relabeled", "all"])
    rl.add_argument("--label", help="only this class")
    rl.add_argument("--config", help="only this config (nuisance kind)")
    rl.add_argument("--limit", type=int)
    rl.add_argument("--json", action="store_true")
    for action, text in (("accept", "accept samples"), ("reject", "reject samples"),
                         ("relabel", "give samples another class (and accept them)")):
        ra = rsub.add_parser(action, help=text)
        ra.add_argument("workspace")
        ra.add_argument("keys", nargs="*", metavar="KEY")
        if action == "relabel":
            ra.add_argument("--to", required=True, metavar="CLASS", help="the new class name")
        else:
            ra.add_argument("--all-pending", action="store_true", help=f"{action} every pending sample")
        ra.add_argument("--reviewer", help="who decides (default: the login name)")
        ra.add_argument("--note")
    r.set_defaults(func=_review)

    e = sub.add_parser("eval", help="score models on a dataset; results into a DuckDB file",
                       description="Score every --model on DATASET (a workspace, a local repo folder, a hub id "
                       "org/name[@revision] or a WebDataset glob). Each batch is decoded once and every model "
                       "runs on it. The protocol (imagenet, zero-shot, native, wordset) is chosen from the "
                       "dataset and the model unless given, and is always reported.")
    e.add_argument("dataset")
    e.add_argument("--model", action="append", required=True, metavar="SPEC",
                   help="a model spec (repeatable): timm:..., open_clip:..., hf:..., tiny:...")
    e.add_argument("--db", required=True, help="the results database (DuckDB file)")
    e.add_argument("--config", help="only this config")
    e.add_argument("--split", help="only this split")
    e.add_argument("--protocol", choices=["imagenet", "zero-shot", "native", "wordset", "two-way"])
    e.add_argument("--clip", metavar="SPEC", help="two-way only: the CLIP model that picks each image's top "
                   "wrong class (the --model specs are then VQA / image-text-to-text models)")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--workers", type=int, default=2, help="batches decoded ahead in the background (0: none)")
    e.add_argument("--limit", type=int, help="only the first N images of each split")
    e.add_argument("--json", action="store_true", help="print one JSON object per (model, config, split)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument("--allow-pickle", action="store_true", help="allow pickle weights (unsafe)")
    e.add_argument("--trust-remote-code", action="store_true", help="run the model repo's own code (unsafe)")
    e.set_defaults(func=_eval)

    lb = sub.add_parser("leaderboard", help="the leaderboard of a results database")
    lb.add_argument("--db", required=True)
    lb.add_argument("--dataset")
    lb.add_argument("--config")
    lb.add_argument("--split")
    lb.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    lb.set_defaults(func=_leaderboard)

    rp = sub.add_parser("report", help="reports of a builder's results: tables and plots")
    rpsub = rp.add_subparsers(dest="report", required=True, metavar="KIND")
    rr = rpsub.add_parser("recognition", help="Borji-style recognition report from a results database",
                          description="Per-model top-1/top-5, the best model per category and the fraction of "
                          "images all models fail / all succeed per category, as markdown and PNG plots.")
    rr.add_argument("--db", required=True, help="the results database of `gensets eval`")
    rr.add_argument("--dataset", help="the dataset as recorded in runs (default: the only one)")
    rr.add_argument("--protocol", default="wordset", help="which protocol's runs (default: wordset)")
    rr.add_argument("--out", default="out/report-recognition", help="folder for report.md and figures")
    rr.set_defaults(func=_report_recognition)

    q = sub.add_parser("query", help="run read-only SQL on a results database",
                       description="Tables: runs, predictions, metrics. The connection is read-only.")
    q.add_argument("--db", required=True)
    q.add_argument("sql")
    q.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    q.set_defaults(func=_query)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except GensetsError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("gensets: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
