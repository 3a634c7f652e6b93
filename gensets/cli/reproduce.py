"""gensets reproduce TABLE: one paper table end to end, beside its published numbers (gensets.reproduce)."""

from __future__ import annotations

import json
from pathlib import Path

from ..config import nonneg_float, positive_int
from ..reproduce import CONFIGS, Run, estimate, estimate_lines, markdown, plan, reproduce, tables
from .common import log


def add_parser(sub) -> None:
    tables_ = tables()  # every registered paper's tables (gensets.registry.PAPERS)

    def per_table(option: str, default: str = "") -> str:  # the tables' readings of an option, for its help
        return "; ".join([default] * bool(default) + [f"{t.name}: {t.options[option]}"
                                                      for t in tables_.values() if option in t.options])

    rp2 = sub.add_parser(
        "reproduce", help="one paper table: build, score with the paper's settings, print beside the published numbers",
        description="Run one paper table end to end (build or resume the data, score it with the paper's settings, "
        "write the report) and print gensets' numbers beside the published ones, with the difference and the "
        "variant behind each. Tables: " + "; ".join(f"{t.name}: {t.what} (paper run needs: {t.needs})"
                                                  for t in tables_.values())
        + ". --smoke runs the same path on tiny random models offline (numbers meaningless).")
    rp2.add_argument("table", choices=list(tables_), help="the paper table")
    rp2.add_argument("--smoke", action="store_true", help="tiny random models, offline, minutes on a CPU")
    rp2.add_argument("--dataset", action="append", default=[], metavar="NAME", help=per_table("--dataset"))
    rp2.add_argument("--out", help="folder for the workspace(s), results.duckdb, the report and reproduce.md "
                     "(default: out/reproduce/TABLE[-smoke]); a rerun resumes")
    rp2.add_argument("--workspace", help="the workspace to build or resume (default: "
                     + per_table("--workspace", "OUT/workspace") + "), e.g. the one `make demo` built")
    rp2.add_argument("--configs", help="a folder of paper configs (default: the ones gensets ships, "
                     "gensets/data/configs: copies of a checkout's configs/)")
    rp2.add_argument("--source", action="append", default=[], metavar="SOURCE", help=per_table("--source"))
    rp2.add_argument("--dry-run", action="store_true", help="print what the run would build and score, do nothing")
    rp2.add_argument("--plan", action="store_true", help="print the dry run's steps with each build's plan (units, "
                     "images, models to download, disk, GPU-hours and cost: gensets build --plan) and the models "
                     "scored, do nothing (offline; --json: as JSON)")
    rp2.add_argument("--price-per-hour", type=nonneg_float, metavar="PRICE",
                     help="with --plan: what a GPU hour costs (default: each config's, else gensets' cost model's)")
    rp2.add_argument("--variant", action="append", default=[], metavar="NAME",
                     help="a named variant of the table's models instead of the default (repeatable): "
                          + "; ".join(f"{t.name}: " + ", ".join(f"{n} ({what})" for n, (what, _) in t.variants.items())
                                      for t in tables_.values() if t.variants))
    rp2.add_argument("--seeds", type=positive_int, default=1, metavar="N",
                     help="N builds at seeds config seed + 0 .. N-1, each number compared over them (a prediction "
                     "interval for one more build) with the published one (" + ", ".join(
                         t.name if t.no_seeds is None and t.no_seeds_smoke is None else
                         f"{t.name} --smoke" if t.no_seeds_smoke is None else f"{t.name}'s paper run"
                         for t in tables_.values() if t.no_seeds is None or t.no_seeds_smoke is None) + ")")
    rp2.add_argument("--imagenet-val", metavar="DIR", help="a local ImageNet validation folder (class folders named "
                     "by WordNet id, n01440764/...): " + per_table("--imagenet-val"))
    rp2.add_argument("--batch-size", type=positive_int, default=32)
    rp2.add_argument("--json", action="store_true", help="print reproduce.json's content instead of the table "
                     "(with --dry-run: {table, smoke, dry_run, steps})")
    rp2.add_argument("--quiet", action="store_true", help="no progress")
    rp2.set_defaults(func=_reproduce)


def _reproduce(a) -> int:
    out = Path(a.out or f"out/reproduce/{a.table}{'-smoke' if a.smoke else ''}")
    quiet = a.quiet or a.json
    run = Run(out, a.smoke, tuple(a.dataset), a.batch_size, quiet, Path(a.configs) if a.configs else CONFIGS,
              Path(a.workspace) if a.workspace else None, tuple(a.variant), tuple(a.source), a.dry_run,
              log=log(quiet), seeds=a.seeds, imagenet_val=Path(a.imagenet_val) if a.imagenet_val else None)
    if a.plan:
        e = estimate(a.table, run, a.price_per_hour)
        print(json.dumps(e, indent=1) if a.json else "\n".join(estimate_lines(e)))
        return 0
    if a.dry_run:
        steps = plan(a.table, run)
        print(json.dumps({"table": a.table, "smoke": a.smoke, "dry_run": True, "steps": steps}, indent=1) if a.json
              else "\n".join(steps))
        return 0
    result = reproduce(a.table, run)
    print(json.dumps(result, indent=1) if a.json else markdown(result), end="\n" if a.json else "")
    return 0
