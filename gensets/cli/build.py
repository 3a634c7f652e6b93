"""gensets build, finalize, verify (and verify --rebuild): a workspace from a config to its dataset/."""

from __future__ import annotations

import json
import secrets
import sys

from ..builders.finalize import finalize
from ..builders.planning import lines, plan
from ..builders.runner import build, rebuild
from ..builders.verify import verify
from ..config import nonneg_float, nonneg_int, positive_int
from ..errors import GensetsError
from ..workspace import Workspace
from .options import add_audit_options, add_backend_options, audit_options, backend_of


def add_parser(sub) -> None:
    b = sub.add_parser("build", help="generate and filter a dataset into a workspace (resumable)",
                       description="Generate every work unit of CONFIG that is not done yet, score it with "
                       "the surrogates and record it in WORKSPACE/state.duckdb. Safe to kill and re-run; "
                       "under `accelerate launch` each process takes its share of the units.")
    b.add_argument("config", help="a builder config (YAML), e.g. configs/imagenet_d.smoke.yaml")
    b.add_argument("--out", metavar="WORKSPACE", help="the workspace folder (required, but with --plan)")
    b.add_argument("--plan", action="store_true", help="build nothing: print the units, images per config, the models "
                   "to download (size where the Hugging Face cache knows it, licence), the disk and the GPU-hours and "
                   "cost by gensets' cost model (offline, from the config alone; --json: as JSON)")
    b.add_argument("--price-per-hour", type=nonneg_float, metavar="PRICE", help="with --plan: what a GPU hour costs "
                   "(default: the config's cost.price_per_hour, else 1.47 USD: GenBench Table 5's A100)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads per process on CPU (default 1: CPU results depend on the thread "
                   "count, so keep it fixed for byte-identical rebuilds; scale with processes instead)")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a config key before validation (repeatable; VALUE is YAML, dotted keys "
                   "reach nested ones), e.g. --set classifier=timm:resnet50.a1_in1k --set 'labels=[tench]'; "
                   "the workspace freezes the result")
    b.add_argument("--json", action="store_true", help="print the counts as JSON (no progress bar)")
    add_backend_options(b, "where units run: local (this process, or each process of accelerate launch; the default) "
                        "or ray (Ray workers pull units, each writes its shards; needs pip install "
                        "'gensets[distributed]' and a workspace every worker can write)", "build")
    b.set_defaults(func=_build)

    f = sub.add_parser("finalize", help="write the publishable dataset/ folder of a workspace",
                       description="Write WORKSPACE/dataset: the reviewed images as WebDataset shards, "
                       "one config per nuisance kind, the manifest and the dataset card.")
    f.add_argument("workspace")
    f.add_argument("--include-pending", action="store_true",
                   help="also include images not yet reviewed (for smoke runs)")
    f.add_argument("--publish-emails", action="store_true",
                   help="publish reviewers known by an email address (Label Studio's annotators) as they are, and "
                   "say so in the card; by default each is a pseudonym (reviewer-<10 hex>)")
    f.add_argument("--json", action="store_true", help="print the counts and the funnel as JSON")
    add_audit_options(f, finalize=True)
    f.set_defaults(func=_finalize)

    v = sub.add_parser("verify", help="rehash, recount and decode every shard under DIR",
                       description="Check every shard under DIR against its manifest: sha256, sample count, "
                       "safe member names, and that every member decodes. Exit 0 when all is well, "
                       "1 when a problem was found (one line each), 2 on bad usage.")
    v.add_argument("dir")
    v.add_argument("--rebuild", type=positive_int, metavar="N",
                   help="DIR is a workspace: rebuild N of its committed units, chosen at random, and compare "
                   "their bytes with the recorded ones (exit 1 if any differs, naming how the environment "
                   "differs from the one that built them)")
    v.add_argument("--seed", type=nonneg_int, help="with --rebuild: which units (default: a random seed, printed)")
    v.add_argument("--quiet", action="store_true", help="with --rebuild: no progress bar")
    v.add_argument("--json", action="store_true", help="print {dir, ok, problems: [{file, member, problem}]}")
    v.set_defaults(func=_verify)


def _build(a) -> int:
    if a.plan:
        return _plan(a)
    if not a.out:
        raise GensetsError("gensets build: --out WORKSPACE is required (or --plan: what the build would do)")
    r = build(a.config, a.out, quiet=a.quiet or a.json, threads=a.threads, overrides=a.overrides, **backend_of(a))
    if r["rank"] == 0 and a.json:
        print(json.dumps(r, indent=1, default=str))
    elif r["rank"] == 0:
        print(f"{r['workspace']}: {r['units']} unit{'s' * (r['units'] != 1)} ({r['done_before']} done before, "
              f"{r['units_run']} run here); {r['samples_written']} sample{'s' * (r['samples_written'] != 1)} "
              f"written, {r['samples_ingested']} added to state.duckdb")
        if r.get("workers"):  # a Ray build that ran units
            n = r["units_retried"]
            print(f"Ray: {r['workers']} workers; {n} unit{'s' * (n != 1)} run again after their worker died")
        if r["prompts_cut"] or r["negative_prompts_cut"]:
            window = "/".join(map(str, r["text_windows"])) or "?"
            print(f"{r['prompts_cut']} prompts and {r['negative_prompts_cut']} negative prompts cut to the text "
                  f"encoder's {window} tokens (long_prompts: truncate; each sample records what it received)")
        if r.get("needs_review"):
            print(f"next: gensets review list {r['workspace']}   then: gensets finalize {r['workspace']}")
        else:
            print(f"next: gensets finalize {r['workspace']}")
    return 0


def _plan(a) -> int:
    p = plan(a.config, a.overrides, price_per_hour=a.price_per_hour)
    print(json.dumps(p, indent=1) if a.json else "\n".join(lines(p)))
    return 0


def _finalize(a) -> int:
    r = finalize(a.workspace, include_pending=a.include_pending, progress=not a.json,
                 publish_emails=a.publish_emails, audit=None if a.no_audit else audit_options(a),
                 against=tuple(a.against), drop=bool(a.drop), where=backend_of(a))
    if a.json:
        print(json.dumps(r, indent=1, default=str))
        return 0
    print(f"{r['dataset']}: {r['shards']} shard{'s' * (r['shards'] != 1)}; images per config: "
          + ", ".join(f"{k} {v}" for k, v in r["counts"].items()))
    for config, f in r["funnel"].items():
        below = f" -> below quality {f['below_quality']}" if "below_quality" in f else ""
        print(f"  {config}: generated {f['generated']} -> kept by the filters {f['kept']}{below} -> "
              f"accepted {f['accepted']} (pending {f['pending']}, rejected {f['rejected']})")
    if "audit" in r:
        found = ", ".join(f"{n} {ref}" for ref, n in r["audit"]["pairs"].items())
        dropped = f"; {r['audit']['dropped']} near-duplicate(s) left out" if r["audit"]["dropped"] else ""
        print(f"  audit: pairs within the thresholds: {found}{dropped} (the card's Duplicates and contamination)")
    first = next((k for k, v in r["counts"].items() if v), None)
    if first:
        split = Workspace(a.workspace).load()[0].split
        print("load it with:\n  from datasets import load_dataset\n"
              f"  ds = load_dataset({r['dataset']!r}, {first!r}, split={split!r})")
    return 0


def _verify(a) -> int:
    if a.rebuild is not None:
        return _rebuild(a)
    problems = verify(a.dir, progress=not a.json)
    if a.json:
        print(json.dumps({"dir": a.dir, "ok": not problems,
                          "problems": [{"file": p.shard, "member": None if p.member == "-" else p.member,
                                        "problem": p.what} for p in problems]}, indent=1))
        return 1 if problems else 0
    for p in problems:
        print(p)
    if problems:
        print(f"{a.dir}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{a.dir}: ok")
    return 0


def _rebuild(a) -> int:
    seed = a.seed if a.seed is not None else secrets.randbelow(2**31)
    r = rebuild(a.dir, a.rebuild, seed=seed, quiet=a.quiet)
    print(f"{a.dir}: rebuilt {len(r['units'])} of {r['of']} units (--seed {seed})")
    changes = set()
    for u in r["units"]:
        d = u["differences"]
        if d is None:
            why = "no environment recorded for it (built before gensets recorded them)"
        else:
            why = f"the environment differs in: {'; '.join(d)}" if d else "the environment is the one recorded"
            changes.update(d)
        said = "identical" if u["identical"] else f"differs (sha256 {u['sha256'][:12]}, recorded {u['recorded'][:12]})"
        print(f"  {u['name']}: {said}; {why}")
    bad = sum(not u["identical"] for u in r["units"])
    if not bad:
        env = f", though the environment differs in: {'; '.join(sorted(changes))}" if changes else ""
        print(f"identical: {len(r['units'])} of {len(r['units'])} units give the recorded bytes{env}")
        return 0
    if changes:
        print(f"differs: {bad} of {len(r['units'])} units, and the environment differs in: {'; '.join(sorted(changes))}")
    elif all(u["differences"] is not None for u in r["units"]):
        print(f"differs: {bad} of {len(r['units'])} units in the environment that built them (a nondeterminism "
              "or a changed input file: please report it with the workspace's environments/)")
    else:
        print(f"differs: {bad} of {len(r['units'])} units; no environment was recorded to compare with")
    return 1
