"""The ``gensets`` command: parses arguments, calls the library, prints. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__, notices
from .config import nonneg_float, nonneg_int, page_size, port, positive_int
from .errors import GensetsError
from .registry import PROTOCOLS, QUALITY_METRICS, REPORTS


def _build(a) -> int:
    from .builders.runner import build

    r = build(a.config, a.out, quiet=a.quiet or a.json, threads=a.threads, overrides=a.overrides,
              backend=a.backend, workers=a.workers, address=a.address, gpus_per_worker=a.gpus_per_worker)
    if r["rank"] == 0 and a.json:
        print(json.dumps(r, indent=1, default=str))
    elif r["rank"] == 0:
        print(f"{r['workspace']}: {r['units']} units ({r['done_before']} done before, "
              f"{r['units_run']} run here); {r['samples_written']} samples written, "
              f"{r['samples_ingested']} added to state.duckdb")
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


def _finalize(a) -> int:
    from .builders.finalize import finalize

    r = finalize(a.workspace, include_pending=a.include_pending, progress=not a.json,
                 publish_emails=a.publish_emails)
    if a.json:
        print(json.dumps(r, indent=1, default=str))
        return 0
    print(f"{r['dataset']}: {r['shards']} shards; images per config: "
          + ", ".join(f"{k} {v}" for k, v in r["counts"].items()))
    for config, f in r["funnel"].items():
        below = f" -> below quality {f['below_quality']}" if "below_quality" in f else ""
        print(f"  {config}: generated {f['generated']} -> kept by the filters {f['kept']}{below} -> "
              f"accepted {f['accepted']} (pending {f['pending']}, rejected {f['rejected']})")
    first = next((k for k, v in r["counts"].items() if v), None)
    if first:
        print("load it with:\n  from datasets import load_dataset\n"
              f"  ds = load_dataset({r['dataset']!r}, {first!r}, split={_split_of(a.workspace)!r})")
    return 0


def _split_of(workspace) -> str:
    from .workspace import Workspace

    return Workspace(workspace).load()[0].split


def _verify(a) -> int:
    from .shards import verify

    if a.rebuild is not None:
        return _rebuild(a)
    from .store import is_url

    if is_url(a.dir):  # a workspace on a store: its objects read once into a temporary folder, checked there
        import tempfile

        from .shards import Problem
        from .workspace import Workspace

        ws = Workspace(a.dir)
        ws.store.check_bucket()
        if not ws.store.exists("config.yaml"):
            raise GensetsError(f"{ws.store.url}: not a gensets workspace (no config.yaml)")
        with tempfile.TemporaryDirectory(prefix="gensets-verify-") as tmp:
            ws.mirror(Path(tmp))
            problems = [Problem(*(str(x).replace(tmp, ws.store.url) for x in (p.shard, p.member, p.what)))
                        for p in verify(Path(tmp), progress=not a.json)]
    else:
        problems = verify(Path(a.dir), progress=not a.json)
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
    import secrets

    from .builders.runner import rebuild

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


def _review(a) -> int:
    from .curation import review, state
    from .workspace import Workspace

    ws = Workspace(a.workspace)
    builder, cfg = ws.load()
    ws.require_state()
    if a.action == "list" and a.history:
        con = state.connect(ws.state_path, read_only=True)
        try:
            rows = review.history(con, a.history)
        finally:
            con.close()
        if a.json:
            print(json.dumps(rows, default=str, indent=1))
            return 0
        for r in rows:
            what = f"{r['status']} -> {r['label']}" if r["label"] else r["status"]
            why = [f"undoes #{r['undoes']}" if r["undoes"] is not None else "", "undone" if r["undone"] else "",
                   f"overrides {r['overrides']}" if r["overrides"] else ""]
            print(f"#{r['seq']}\t{r['time']}\t{r['reviewer']}\t{what}\t{'; '.join(w for w in why if w)}\t"
                  f"{' '.join((r['note'] or '').split())}")
        print(f"{len(rows)} decision(s) on {a.history}", file=sys.stderr)
        return 0
    if a.action == "list":
        con = state.connect(ws.state_path, read_only=True)
        rows = review.list_outcomes(con, status=None if a.status == "all" else a.status,
                                    label=a.label, config=a.config, limit=a.limit)
        con.close()
        if a.json:
            print(json.dumps(rows, default=str, indent=1))
        else:
            if rows:
                print("key\tstatus\tlabel\tnuisance\treviewer\tnote\tprompt")
            for r in rows:
                label = r["label"] if r["review_label"] == r["label"] else f"{r['label']} -> {r['review_label']}"
                print(f"{r['key']}\t{r['status']}\t{label}\t{r['nuisance']}\t{r['reviewer'] or ''}\t"
                      f"{' '.join((r['note'] or '').split())}\t{r['prompt']}")
            print(f"{len(rows)} sample(s)", file=sys.stderr)
        return 0
    con = state.connect(ws.state_path)
    try:
        status = review.ACTIONS[a.action]
        keys = list(a.keys)
        if getattr(a, "all_pending", False):
            keys += [r["key"] for r in review.list_queue(con, status="pending")]
        n = review.decide(con, keys, status, label=getattr(a, "to", None), reviewer=a.reviewer,
                          note=a.note, valid_labels=builder.class_names(cfg))
    finally:
        con.close()
    print(f"{n} sample(s) {status}")
    return 0


def _number(name: str, v: float) -> str:
    """A metric as printed: a count (n_..., ..._n_...) as a whole number, a rate to 4 decimals."""
    count = name.startswith("n_") or "_n_" in name or name.endswith("_n")
    return str(int(v)) if count and float(v).is_integer() else f"{v:.4f}"


def _eval(a) -> int:
    from .evaluation.runner import EvalConfig, evaluate
    from .workspace import refuse_own_file

    refuse_own_file(a.db, "--db")
    results = evaluate(EvalConfig(a.dataset, a.model, a.db, config=a.config, split=a.split, protocol=a.protocol,
                                  batch_size=a.batch_size, workers=a.workers, limit=a.limit, quiet=a.quiet or a.json,
                                  allow_pickle=a.allow_pickle, trust_remote_code=a.trust_remote_code, clip=a.clip,
                                  templates=a.templates, precision=a.precision, force=a.force,
                                  decoding=a.decoding))
    from .models.device import rank

    if rank():  # the other processes of an accelerate launch: process 0 prints
        return 0
    if a.json:
        print(json.dumps([{**{k: r[k] for k in ("model", "dataset", "config", "split", "protocol", "variant", "n",
                                                "metrics", "intervals")}, "skipped": r.get("skipped", False)}
                          for r in results], indent=1))
    else:
        for r in results:
            m = r["metrics"]
            lo, hi = r["intervals"].get("top1", (None, None))
            top1 = "-" if m["top1"] is None else f"{m['top1']:.4f}" + (f" ({lo:.4f}-{hi:.4f})" if lo is not None else "")
            extra = "".join(f"  {k} {_number(k, v)}" for k, v in m.items() if k != "top1" and v is not None)
            print(f"{r['model']}  {r['config']}/{r['split']}  [{r['variant']}]  n={r['n']}  top1 {top1}{extra}")
        print(f"results in {a.db}: gensets leaderboard --db {a.db}", file=sys.stderr)
    return 0


def _score(a) -> int:
    from .evaluation.scoring import ScoreConfig, parse_models, score
    from .workspace import refuse_own_file

    refuse_own_file(a.db, "--db")
    summaries = score(ScoreConfig(a.dataset, tuple(a.metric), a.db, models=parse_models(a.model, a.metric),
                                  reference=a.reference, pairs=a.pairs, config=a.config, split=a.split,
                                  batch_size=a.batch_size, limit=a.limit, quiet=a.quiet or a.json,
                                  allow_pickle=a.allow_pickle, trust_remote_code=a.trust_remote_code, seed=a.seed))
    if a.json:
        keep = ("dataset", "revision", "config", "split", "metric", "name", "level", "variant", "models", "commits",
                "reference", "n", "value", "lo", "hi", "details")
        print(json.dumps([{k: json.loads(r[k]) if k in ("models", "commits", "details") else r[k] for k in keep}
                          for r in summaries], indent=1))
        return 0
    for r in summaries:
        ci = f" ({r['lo']:.4f}-{r['hi']:.4f})" if r["lo"] is not None else ""
        print(f"{r['config']}/{r['split']}  {r['name']}  {r['value']:.4f}{ci}  n={r['n']}  [{r['variant']}]")
    print(f"scores in {a.db}: gensets query --db {a.db} 'SELECT * FROM score_summaries'", file=sys.stderr)
    return 0


def _print_rows(cols: list[str], rows: list, fmt: str, output: str | None = None, db: str | None = None) -> None:
    """The rows as a table, markdown, CSV or JSON: on stdout, or written whole to ``output`` (``--output``)."""
    import io

    def cell(v):
        return f"{v:.4f}" if isinstance(v, float) else ("" if v is None else str(v))

    out = io.StringIO()
    if fmt == "json":
        print(json.dumps([dict(zip(cols, r, strict=True)) for r in rows], default=str, indent=1), file=out)
    elif fmt == "csv":
        import csv

        from .curation.interchange import csv_cell  # the review export's guard against spreadsheet formulas

        def safe(v):
            return csv_cell(v) if isinstance(v, str) else v

        w = csv.writer(out)
        w.writerow([safe(c) for c in cols])
        w.writerows([safe(v) for v in r] for r in rows)
    elif fmt == "markdown":
        from .cards.markdown import table

        print(table(cols, rows, lambda v: cell(v).replace("|", "\\|")), file=out)
    else:
        cells = [[cell(v) for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
        print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)), file=out)
        for r in cells:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)), file=out)
    _emit(out.getvalue(), output, db)


def _emit(text: str, output: str | None, db: str | None = None) -> None:
    """``text`` on stdout (no ``--output``, or ``-``), else written to the file ``output``: whole or not at all
    (replaced atomically), never through a symlink, over the database being read or a workspace's own files."""
    if not output or output == "-":
        sys.stdout.write(text)
        return
    from .output import write_file
    from .workspace import refuse_own_file

    path = Path(output)
    if db and path.exists() and Path(db).exists() and path.resolve() == Path(db).resolve():
        raise GensetsError(f"{output}: --output is the database read (--db {db}); choose another file")
    if path.is_dir():
        raise GensetsError(f"{output}: --output is a folder; name a file")
    refuse_own_file(path, "--output")
    write_file(path, text, "--output")


def _leaderboard(a) -> int:
    from .evaluation import store

    if a.models or a.out:
        return _leaderboard_run(a)
    if a.dataset and len(a.dataset) > 1:
        raise GensetsError("--dataset: one dataset to show (several are scored with --models LIST --out DIR)")
    a.dataset = a.dataset[0] if a.dataset else None
    con = store.connect(a.db, read_only=True)
    cols, rows = store.leaderboard(con, a.dataset, a.config, a.split)
    why = None if rows else store.unmatched(con, a.dataset, a.config, a.split)
    con.close()
    if why:
        raise GensetsError(f"{a.db}: {why}")
    if a.pivot:
        cols, rows = store.pivot(cols, rows, a.metric)
    if a.percent:  # every float of the leaderboard is a fraction (top1, its interval, top5, ...)
        if a.json or a.format == "json":
            raise GensetsError("--percent: the JSON keeps fractions (0-1); use --format table, markdown or csv")
        pct = [any(isinstance(r[i], float) for r in rows) for i in range(len(cols))]
        cols = [f"{c} %" if p else c for c, p in zip(cols, pct, strict=True)]
        rows = [[100 * v if isinstance(v, float) else v for v in r] for r in rows]
    _print_rows(cols, rows, "json" if a.json else a.format, a.output, a.db)
    return 0


def _leaderboard_run(a) -> int:
    from .evaluation import leaderboard
    from .workspace import refuse_own_file

    if not (a.models and a.out and a.dataset):
        raise GensetsError("--models LIST, --dataset D (one or more) and --out DIR go together: score LIST on D "
                           "and write DIR/leaderboard.{md,html,parquet,csv}")
    refuse_own_file(a.db, "--db")
    done = leaderboard.run(leaderboard.Plan(
        leaderboard.load_models(a.models), tuple(a.dataset), a.db, a.out, config=a.config, split=a.split,
        batch_size=a.batch_size, limit=a.limit, allow_pickle=a.allow_pickle, quiet=a.quiet),
        log=(lambda line: None) if a.quiet else (lambda line: print(line, file=sys.stderr)))
    rows = done["rows"]
    _print_rows(leaderboard.COLUMNS, [[r[c] for c in leaderboard.COLUMNS] for r in rows],
                "json" if a.json else a.format)
    print(f"{done['scored']} run(s) scored, {done['resumed']} already in {a.db}; "
          + ", ".join(str(f) for f in done["files"]), file=sys.stderr)
    return 0


def _query(a) -> int:
    import duckdb

    from .db import interruptible
    from .evaluation import store

    if a.schema:
        return _schema(a)
    if not a.db or a.sql is None:
        raise GensetsError("gensets query: give --db FILE and SQL (or --schema: the tables and their columns)")
    con = store.query_connection(a.db)
    try:
        cols, rows = interruptible(con, a.sql, a.timeout)  # Ctrl-C and --timeout stop it
    except duckdb.Error as e:
        raise GensetsError(f"query failed: {store.query_error(con, a.sql, e)}") from None
    finally:
        con.close()
    _print_rows(cols, rows, "json" if a.json else a.format, a.output, a.db)
    return 0


def _schema(a) -> int:
    """gensets query --schema: the tables (of --db, else the ones gensets creates), columns, keys, examples."""
    from .evaluation import store

    con = store.query_connection(a.db) if a.db else None
    try:
        tables = store.schema(con)
    finally:
        if con is not None:
            con.close()
    if a.json:
        text = json.dumps({"tables": tables, "examples": store.EXAMPLES}, indent=1) + "\n"
    else:
        text = "".join(f"{t['name']}: {t['about']}\n  " + ", ".join(f"{c['name']} {c['type']}" for c in t["columns"])
                       + "\n" for t in tables)
        text += "examples:\n" + "".join(f"  gensets query --db results.duckdb \"{q}\"\n" for q in store.EXAMPLES)
    _emit(text, a.output, a.db)
    return 0


def _http_url(value: str) -> str:
    """--url: an http(s) address (what a reviewer's browser opens)."""
    from urllib.parse import urlsplit

    u = urlsplit(value)
    if u.scheme not in ("http", "https") or not u.netloc or u.query or u.fragment:
        raise argparse.ArgumentTypeError(f"not an http(s) address of the review page: {value[:80]!r}")
    return value


def _review_serve(a) -> int:
    from .curation.review_server import serve

    try:
        serve(a.workspace, host=a.host, port=a.port, reviewer=a.reviewer, double=a.double, page_size=a.page_size)
    except KeyboardInterrupt:  # a signal during start-up
        pass
    print("review page stopped; every decision is in state.duckdb", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # serve() closed the database and the listening socket: end here, without the interpreter's teardown (a
    # second or more on a loaded machine) and whatever request threads still wait on open connections
    os._exit(0)


def _review_invite(a) -> int:
    """A personal link to the review page for reviewer NAME (its token stored hashed), their links revoked
    (``review revoke``, ``invite --revoke``), or every link listed (``invite --list``: never a secret)."""
    from .curation import reviewers, shared, state
    from .workspace import Workspace

    action = a.action if a.action == "revoke" else "revoke" if a.revoke else "list" if a.list else "invite"
    name = a.revoke or a.name
    if action == "invite" and not name:
        raise GensetsError("review invite: give the reviewer's NAME (or --list, or --revoke NAME)")
    if action != "invite" and a.action != "revoke" and (a.name or a.role or a.expires or a.url):
        raise GensetsError("review invite: --list and --revoke take no NAME, --role, --expires or --url")
    expires = reviewers.duration(a.expires) if getattr(a, "expires", None) else None
    ws = Workspace(a.workspace)
    ws.load()
    ws.require_state()
    con = state.connect(ws.state_path)
    try:
        if action == "revoke":
            n = reviewers.revoke(con, name)
        elif action == "list":
            rows = reviewers.listing(con)
        else:
            token = reviewers.invite(con, name, role=a.role or "reviewer", expires=expires)
    finally:
        con.close()
    if action == "revoke":
        print(f"{name}: {n} link(s) revoked (a running review page refuses them from now on)")
        return 0
    if action == "list":
        print("reviewer\trole\tcreated\texpires\tstate")
        for r in rows:
            print(f"{r['reviewer']}\t{r['role']}\t{r['created']}\t{r['expires'] or 'never'}\t{r['state']}"
                  + (f" {r['revoked']}" if r["revoked"] else ""))
        if not rows:
            print(f"nobody invited (gensets review invite {a.workspace} NAME)", file=sys.stderr)
        return 0
    running = [s["url"] for s in shared.servers(ws.root)]
    base = a.url or (running[0] if running else "http://127.0.0.1:8765/")
    print(f"{base.rstrip('/')}/?token={token}")
    until = f", valid for {a.expires}" if expires else ""
    print(f"the link above is {name}'s alone ({a.role or 'reviewer'}{until}): whoever opens it reviews as {name}; "
          f"`gensets review invite {a.workspace} --revoke {name}` ends it; pages already open are unaffected",
          file=sys.stderr)
    return 0


def _review_mode(a) -> int:
    """Show, or switch, the workspace's review mode (single or double); every decision is kept."""
    from .curation import review, state
    from .workspace import Workspace

    ws = Workspace(a.workspace)
    ws.load()
    ws.require_state()
    con = state.connect(ws.state_path, read_only=a.mode is None)
    try:
        if a.mode is not None:
            review.set_mode(con, a.mode)
        mode = "double" if review.is_double(con) else "single"
    finally:
        con.close()
    print(f"{mode} review" + ("" if a.mode is None else " (every decision kept; a running review page follows "
                              "it, reload it)"))
    return 0


def _review_agreement(a) -> int:
    from .curation import state
    from .curation.review_server import agreement
    from .workspace import Workspace

    ws = Workspace(a.workspace)
    ws.load()
    ws.require_state()
    con = state.connect(ws.state_path, read_only=True)
    r = agreement(con)
    con.close()
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    kappa = "undefined (one label only)" if r["kappa"] is None and r["items"] else r["kappa"]
    print(f"{r['items']} image(s) decided by two reviewers ({r['reviewed_once']} by one so far); "
          f"Cohen's kappa {kappa if r['items'] else '-'}; observed agreement {r['observed_agreement']}")
    for pair in r["pairs"]:
        print(f"  {' & '.join(pair['reviewers'])}: {pair['items']} image(s), kappa {pair['kappa']}")
    for d in r["disagreements"]:
        print(f"  disagree {d['key']}: " + ", ".join(f"{k} {v}" for k, v in d["decisions"].items()))
    return 0


def _review_exchange(a) -> int:
    from .curation import interchange

    if a.action == "export":
        from .workspace import refuse_own_file

        refuse_own_file(a.file, "--file")
        if a.format == "label-studio":
            refuse_own_file(f"{a.file}.label_config.xml", "--file")
        n = interchange.export(a.workspace, a.format, a.file, status=None if a.status == "all" else a.status,
                               images=a.images, base_url=a.base_url, root=a.root, project=a.project)
        extra = f" (+ {a.file}.label_config.xml)" if a.format == "label-studio" else ""
        print(f"{a.file}: {n} sample(s){extra}")
    else:
        r = interchange.import_(a.workspace, a.format, a.file, reviewer=a.reviewer, users=a.users, double=a.double)
        withdrawn = f", {r['withdrawn']} withdrawn" if r["withdrawn"] else ""
        print(f"{a.file}: {r['rows']} row(s): {r['recorded']} decision(s) recorded, {r['unchanged']} unchanged"
              + withdrawn)
        for note in r["notes"]:
            print(f"note: {note}", file=sys.stderr)
    return 0


def _report(run):
    """A report's run, after checking that its --out folder is none of a workspace's own files."""
    def checked(a) -> int:
        from .output import claimable
        from .workspace import refuse_own_file

        if getattr(a, "out", None):
            refuse_own_file(a.out, "--out")
            claimable(a.out, "gensets report")  # a user's folder refused before the report is computed
        return run(a)

    return checked


def _card(a) -> int:
    from .cards.card import rerender

    board = scores = None
    if a.db:
        from .evaluation.scoring import build_scores
        from .evaluation.store import build_leaderboard

        def board(configs, build_id):
            return build_leaderboard(a.db, configs, build_id)

        def scores(configs, build_id):
            return build_scores(a.db, configs, build_id)
    files = rerender(a.workspace, leaderboard=board, scores=scores, progress=not a.json)
    from .store import is_url

    folder = f"{a.workspace.rstrip('/')}/dataset" if is_url(a.workspace) else Path(a.workspace) / "dataset"
    if a.json:
        print(json.dumps({"dir": str(folder), "files": list(files)}, indent=1))
    else:
        print("wrote " + ", ".join(files) + f" in {folder}")
    return 0


def _publish(a) -> int:
    from .publish import publish

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
    from .publish import publish_results

    url = publish_results(a.db, a.repo, revision=a.revision, dry_run=a.dry_run)
    if url:
        print(f"published: {url}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose invalid-choice error also says "did you mean" (sub-commands' parsers are of the
    same class: ``add_subparsers`` makes them with ``type(self)``)."""

    def error(self, message):
        import re

        from .errors import did_you_mean

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:
            message += did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        super().error(message)


def parser() -> argparse.ArgumentParser:
    from .errors import EXIT_CODES
    from .evaluation.runner import METRICS, PRECISIONS  # no torch: --help stays fast

    p = _Parser(
        prog="gensets", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Generate, curate, publish and evaluate benchmark datasets of generated images.",
        epilog="exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items()))
    p.add_argument("--version", action="version", version=f"gensets {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="generate and filter a dataset into a workspace (resumable)",
                       description="Generate every work unit of CONFIG that is not done yet, score it with "
                       "the surrogates and record it in WORKSPACE/state.duckdb. Safe to kill and re-run; "
                       "under `accelerate launch` each process takes its share of the units.")
    b.add_argument("config", help="a builder config (YAML), e.g. configs/imagenet_d.smoke.yaml")
    b.add_argument("--out", required=True, metavar="WORKSPACE", help="the workspace folder")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.add_argument("--threads", type=positive_int, default=1,
                   help="torch threads per process on CPU (default 1: CPU results depend on the thread "
                   "count, so keep it fixed for byte-identical rebuilds; scale with processes instead)")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a config key before validation (repeatable; VALUE is YAML, dotted keys "
                   "reach nested ones), e.g. --set classifier=timm:resnet50.a1_in1k --set 'labels=[tench]'; "
                   "the workspace freezes the result")
    b.add_argument("--json", action="store_true", help="print the counts as JSON (no progress bar)")
    b.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="where units run: local (this process, or each process of accelerate launch; the default) or "
                   "ray (Ray workers pull units, each writes its shards; needs pip install 'gensets[distributed]' and "
                   "a workspace every worker can write)")
    b.add_argument("--workers", type=positive_int, metavar="N",
                   help="with --backend ray: N workers, one CPU each (default: every CPU of the cluster)")
    b.add_argument("--address", metavar="ADDR",
                   help="with --backend ray: join the Ray cluster at ADDR (e.g. auto, or HOST:6379 of `ray start "
                   "--head`); default: a local cluster on 127.0.0.1, started for the build and stopped after it")
    b.add_argument("--gpus-per-worker", type=nonneg_float, metavar="G",
                   help="with --backend ray: GPUs each worker reserves (default 0: CPU workers; 1: one worker per GPU; "
                   "0.5: two workers share a GPU)")
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

    r = sub.add_parser("review", help="the review queue: list, accept, reject, relabel")
    rsub = r.add_subparsers(dest="action", required=True, metavar="ACTION")
    rl = rsub.add_parser("list", help="list the samples still to review (--status all: every sample, with "
                         "its reviewer and note)", description="The pending samples by default (those finalize "
                         "leaves out until decided); --status picks another outcome, all lists every sample. "
                         "Columns: key, status, label, nuisance, reviewer, note, prompt.")
    rl.add_argument("workspace")
    rl.add_argument("--status", default="pending",
                    choices=["pending", "accepted", "rejected", "relabeled", "below-quality", "disputed", "held",
                             "all"], help="in double review, the outcome finalize sees (disputed: the reviewers "
                    "disagree; held: rejected by its one reviewer so far), not each image's last decision")
    rl.add_argument("--label", help="only this class")
    rl.add_argument("--config", help="only this config (nuisance kind)")
    rl.add_argument("--limit", type=positive_int)
    rl.add_argument("--json", action="store_true")
    rl.add_argument("--history", metavar="KEY", help="instead: every decision on sample KEY, oldest first (seq, "
                    "time, reviewer, what, undo / override, note)")
    for action, text in (("accept", "accept samples"), ("reject", "reject samples"),
                         ("relabel", "give samples another class (and accept them)")):
        ra = rsub.add_parser(action, help=text)
        ra.add_argument("workspace")
        ra.add_argument("keys", nargs="*", metavar="KEY")
        if action == "relabel":
            ra.add_argument("--to", required=True, metavar="CLASS", help="the new class name")
        else:
            ra.add_argument("--all-pending", action="store_true", help=f"{action} every pending sample")
        ra.add_argument("--reviewer", help="who decides, published with the decision (default: $GENSETS_REVIEWER; "
                        "one of them is needed)")
        ra.add_argument("--note")
    r.set_defaults(func=_review)

    e = sub.add_parser("eval", help="score models on a dataset; results into a DuckDB file",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="metrics:\n" + "\n".join(f"  {k:<16} {v}" for k, v in METRICS.items()),
                       description="Score every --model on DATASET (a workspace, a local repo folder, a hub id "
                       "org/name[@revision], a WebDataset glob, or the released ImageNet-D: hf:zcs15/ImageNet-D or a folder in its "
                       "layout). Each batch is decoded once and every model "
                       "runs on it. The protocol (imagenet, zero-shot, native, wordset) is chosen from the "
                       "dataset and the model unless given, and is always reported. Several GPUs: "
                       "accelerate launch --multi_gpu --num_processes N -m gensets.cli eval ... (one run, the same "
                       "rows as one process).")
    e.add_argument("dataset")
    e.add_argument("--model", action="append", required=True, metavar="SPEC",
                   help="a model spec (repeatable): timm:..., open_clip:..., hf:..., torchvision:ARCH@WEIGHTS, "
                   "tiny:...")
    e.add_argument("--db", required=True, help="the results database (DuckDB file)")
    e.add_argument("--config", help="only this config")
    e.add_argument("--split", help="only this split")
    e.add_argument("--protocol", choices=list(PROTOCOLS),
                   help="two-way: ImageNet-D's VLM protocol as the authors' code runs it (their question, true "
                   "class first, their answer matching); two-way-shuffled: gensets' lettered, shuffled variant; "
                   "zero-shot: on ImageNet-D the authors' names and 'A photo of a {}'; zero-shot-readable: "
                   "readable names and the default templates on every dataset; "
                   "wordset: Borji's rule, the category word is one of the words of the predicted label's name; "
                   "wordset-plural: a trailing s/es may differ; wordset-lemmas: the labels' whole lemma lists; "
                   "wordset-gensets: lemma lists and gensets' extra synonyms; imagenet-top5-per-id: the ImageNet-D "
                   "authors' top-5 (one count per mapped id)")
    e.add_argument("--clip", metavar="SPEC", help="two-way only: the CLIP model that picks each image's top "
                   "wrong class (the --model specs are then VQA / image-text-to-text models); the released ImageNet-D's "
                   "questions CSVs give it without one")
    e.add_argument("--decoding", choices=("authors", "greedy"), default="authors",
                   help="two-way only: how a generative VLM answers: authors (default: ImageNet-D's eval_imagenet_d.py, "
                   "sampling at temperature 0.2 seeded per image, up to 512 new tokens, LLaVA-1.5's own conversation "
                   "for LLaVA models) or greedy (10 new tokens, the processor's chat template; the run's protocol "
                   "names it)")
    e.add_argument("--template", action="append", metavar="TEXT", dest="templates",
                   help="zero-shot prompt template with {} for the class name (repeatable; default: the "
                   "dataset's paper's, e.g. ImageNet-D's 'A photo of a {}', else 'a photo of a {}.')")
    e.add_argument("--batch-size", type=positive_int, default=32)
    e.add_argument("--workers", type=nonneg_int, default=None,
                   help="processes that decode and prepare the batches (default: the machine's cores less one, "
                   "at most 16, shared by accelerate's processes; 0: decode in this process); results do not "
                   "depend on it")
    e.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                   help="fp32 (default: comparable results) or autocast to bf16 / fp16 (GPUs); recorded in the run "
                   "row, and the leaderboard names it")
    e.add_argument("--force", action="store_true",
                   help="score again the runs that --db holds complete already with the same settings (by default "
                   "they are skipped, so an interrupted eval goes on where it stopped)")
    e.add_argument("--limit", type=positive_int, help="only the first N images of each split")
    e.add_argument("--json", action="store_true", help="print one JSON object per (model, config, split)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument("--allow-pickle", action="store_true", help="allow pickle weights (unsafe)")
    e.add_argument("--trust-remote-code", action="store_true", help="run the model repo's own code (unsafe)")
    e.set_defaults(func=_eval)

    sc = sub.add_parser("score", help="image-quality and alignment scores of a dataset; into a DuckDB file",
                        description="Score the images of DATASET (a workspace, a local repo folder, a hub id or a "
                        "WebDataset glob) with each --metric: per-image values (CLIPScore, CLIP-IQA, aesthetic, "
                        "PickScore, HPS v2, VQAScore, PSNR / SSIM) into the `scores` table and a summary per (config, "
                        "metric) with a bootstrap interval into `score_summaries`; set-level metrics (FID, KID, IS, "
                        "precision / recall, LPIPS diversity) per config, against --reference where they need real "
                        "images. A second run replaces the rows it scores.")
    sc.add_argument("dataset")
    sc.add_argument("--metric", action="append", required=True, choices=list(QUALITY_METRICS), metavar="NAME",
                    help=f"a metric (repeatable): {', '.join(QUALITY_METRICS)}")
    sc.add_argument("--model", action="append", metavar="METRIC[.ROLE]=SPEC",
                    help="a model instead of a metric's default (repeatable), e.g. clip_score=tiny:hf-clip, "
                    "aesthetic.head=tiny:aesthetic-head, fid=tiny:inception")
    sc.add_argument("--db", default="results.duckdb", help="the results database (default results.duckdb)")
    sc.add_argument("--reference", metavar="SOURCE", help="real images for fid, kid, precision_recall: a folder of "
                    "images, a workspace, a dataset folder, a shard glob or a hub id")
    sc.add_argument("--pairs", metavar="FOLDER", help="psnr, ssim: the folder holding each image's init image "
                    "(json.prompting.init_image: GenBench RA's reference folder)")
    sc.add_argument("--config", help="only this config")
    sc.add_argument("--split", help="only this split")
    sc.add_argument("--batch-size", type=positive_int, default=16)
    sc.add_argument("--limit", type=positive_int, help="only the first N images of each split")
    sc.add_argument("--seed", type=nonneg_int, default=0, help="the bootstrap's seed (default 0)")
    sc.add_argument("--json", action="store_true", help="print the summaries as JSON")
    sc.add_argument("--quiet", action="store_true", help="no progress bar")
    sc.add_argument("--allow-pickle", action="store_true", help="allow pickle weights (unsafe)")
    sc.add_argument("--trust-remote-code", action="store_true", help="run a model repo's own code (unsafe)")
    sc.set_defaults(func=_score)

    lb = sub.add_parser("leaderboard", help="the leaderboard of a results database; with --models, score a model "
                        "list on datasets first and write it as files",
                        description="Print the leaderboard of a results database (gensets eval). With --models LIST "
                        "--dataset D [--dataset D2 ...] --out DIR: first score every model on every dataset (runs "
                        "the database holds complete are skipped: a resume), then write DIR/leaderboard.md, .html, "
                        ".parquet and .csv, one row per run with top-1's 95%% interval, datasets named without local "
                        "paths and the dataset's surrogate models marked.")
    lb.add_argument("--db", required=True)
    lb.add_argument("--dataset", action="append", help="the runs of this dataset only; with --models: a dataset to "
                    "score (a workspace, a folder, a hub id; NAME=DATASET names it in the files), repeatable")
    lb.add_argument("--models", metavar="LIST", help="a model list: a YAML file (models: [{spec, protocol, ...}]), "
                    "a shipped one (imagenet-d, smoke) or specs separated by commas")
    lb.add_argument("--out", metavar="DIR", help="with --models: the folder of the leaderboard's files")
    lb.add_argument("--batch-size", type=positive_int, default=32, help="with --models (default 32)")
    lb.add_argument("--limit", type=positive_int, help="with --models: only the first N images of each split")
    lb.add_argument("--allow-pickle", action="store_true", help="with --models: allow pickle weights (unsafe)")
    lb.add_argument("--quiet", action="store_true", help="with --models: no progress bar")
    lb.add_argument("--config")
    lb.add_argument("--split")
    lb.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    lb.add_argument("--json", action="store_true", help="the same as --format json")
    lb.add_argument("--pivot", action="store_true",
                    help="a grid: one row per model (and protocol), one column per config/split, --metric in the cells")
    lb.add_argument("--metric", default="top1", help="the cell of --pivot (default top1; e.g. top5, masked_top1)")
    lb.add_argument("--output", metavar="FILE", help="write the result to FILE (whole, or not at all) instead of "
                    "stdout; - is stdout")
    lb.add_argument("--percent", action="store_true", help="accuracies in percent, as the card and reproduce print "
                    "them (columns named 'NAME %%'); by default fractions (0-1), as --format json always has them")
    lb.set_defaults(func=_leaderboard)

    rp = sub.add_parser("report", help="reports of a builder's results: tables and plots")
    rpsub = rp.add_subparsers(dest="report", required=True, metavar="KIND")
    for kind, report in REPORTS.items():  # each report adds its own arguments (gensets.evaluation.reports)
        rk, r = rpsub.add_parser(kind, help=report.help, description=report.description), report()
        r.add_arguments(rk)
        rk.set_defaults(func=_report(r.run))

    q = sub.add_parser("query", help="run read-only SQL on a results database",
                       description="Tables: runs (key run_id), predictions and metrics (name, value, lo, hi; "
                       "each joins runs on run_id), the view results (runs JOIN metrics: dataset, config, split, "
                       "model, protocol, metric, value, ...) from gensets eval; scores, score_summaries from gensets "
                       "score. --schema lists every column and two example queries. The connection is read-only.")
    q.add_argument("--db", help="the results database (DuckDB file)")
    q.add_argument("sql", nargs="?", help="the query, e.g. \"SELECT model, config, metric, value FROM results\"")
    q.add_argument("--schema", action="store_true", help="print the tables (of --db, else the ones gensets "
                   "creates), their columns and types, how they join, and two example queries")
    q.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table")
    q.add_argument("--json", action="store_true", help="the same as --format json")
    q.add_argument("--timeout", type=nonneg_float, default=300.0, metavar="SECONDS",
                   help="stop the query after this many seconds, exit 1 (default 300; 0: no limit); Ctrl-C stops "
                   "it too, exit 130")
    q.add_argument("--output", metavar="FILE", help="write the result to FILE (whole, or not at all) instead of "
                    "stdout; - is stdout")
    q.set_defaults(func=_query)

    # review in the browser, agreement, Label Studio / CSV exchange (issue 6)
    rs = rsub.add_parser("serve", help="review in the browser: a page served on loopback",
                         description="Serve the review page: pending images in a grid with their class, "
                         "nuisance, prompt and the surrogates' top-5; keys a accept, r reject, l relabel, "
                         "s several objects, z undo, + zoom, arrows or j/k move, n/p page, ? every key; shift-click "
                         "a range and accept or reject it at once. Each decision is saved in state.duckdb at "
                         "once; the server gives it up whenever another gensets process asks, so review commands, "
                         "finalize and other servers work beside it. Every page needs a link, on loopback too: serve prints "
                         "yours (a secret for this run); others get theirs from gensets review invite.")
    rs.add_argument("workspace")
    rs.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (loopback only)")
    rs.add_argument("--port", type=port, default=8765, help="default 8765; 0 picks a free port")
    rs.add_argument("--reviewer", help="the default reviewer name on the page when nobody is invited (default: "
                    "$GENSETS_REVIEWER, else each reviewer types theirs)")
    rs.add_argument("--double", action="store_true",
                    help="double review: each image needs two reviewers; each sees their own decisions")
    rs.add_argument("--page-size", type=page_size, default=60,
                    metavar="N", help="images per page (default 60)")
    rs.set_defaults(func=_review_serve)
    iv = rsub.add_parser("invite", help="a personal link to the review page for a reviewer",
                         description="Print a link with a secret token for reviewer NAME (state.duckdb keeps only "
                         "its sha256). Whoever opens it reviews as NAME (never a name typed on the page), in "
                         "NAME's role; pages already open, the owner's included, are unaffected. --list says who "
                         "holds which link (never a secret), --revoke NAME ends NAME's links.")
    iv.add_argument("workspace")
    iv.add_argument("name", metavar="NAME", nargs="?")
    iv.add_argument("--role", choices=["reviewer", "adjudicator"], help="reviewer (default) or adjudicator: in "
                    "double review only an adjudicator settles an image two reviewers disagree on")
    iv.add_argument("--expires", metavar="DURATION", help="the link ends after DURATION: 30m, 8h, 2d (default: "
                    "when revoked)")
    iv.add_argument("--url", type=_http_url, help="the page's address as reviewers reach it (default: the running "
                    "server's, else http://127.0.0.1:8765/)")
    iv.add_argument("--list", action="store_true", help="list every link made: reviewer, role, created, expires, "
                    "state (valid, expired, revoked)")
    iv.add_argument("--revoke", metavar="NAME", help="end every link of reviewer NAME")
    iv.set_defaults(func=_review_invite, action="invite")
    rv = rsub.add_parser("revoke", help="end every personal link of a reviewer (as review invite --revoke)")
    rv.add_argument("workspace")
    rv.add_argument("name", metavar="NAME")
    rv.set_defaults(func=_review_invite, action="revoke", revoke=None, list=False, role=None, expires=None, url=None)
    md = rsub.add_parser("mode", help="show or switch single / double review (decisions kept)",
                         description="Without MODE: the workspace's review mode. single: each image's latest "
                         "decision counts again (whoever made it); double: two reviewers per image (as serve "
                         "--double). Nothing logged is changed, so switching back and forth loses no decision.")
    md.add_argument("workspace")
    md.add_argument("mode", nargs="?", choices=["single", "double"])
    md.set_defaults(func=_review_mode)
    ag = rsub.add_parser("agreement", help="agreement of double review (Cohen's kappa)")
    ag.add_argument("workspace")
    ag.add_argument("--json", action="store_true")
    ag.set_defaults(func=_review_agreement)
    for action in ("export", "import"):
        rx = rsub.add_parser(action, help=f"{action} review decisions as CSV or Label Studio JSON",
                             description="CSV columns: key,status,label,reviewer,note. Label Studio: tasks with "
                             "the image as a data: URI and the surrogates' top-1 as predictions (+ a labeling "
                             "config beside the file); import reads Label Studio's JSON export: the snapshot "
                             "export with emails, or Export -> JSON with --users. Imports check every row first "
                             "and write nothing if one is bad (named as file:line, or the task).")
        rx.add_argument("workspace")
        rx.add_argument("--format", required=True, choices=["label-studio", "csv"])
        if action == "export":
            rx.add_argument("--file", "--output", dest="file", required=True, metavar="FILE",
                            help="where the export is written (--output: the same)")
            rx.add_argument("--status", default="all",
                            choices=["all", "pending", "accepted", "rejected", "relabeled"])
            rx.add_argument("--images", choices=["base64", "url", "local-files"], default="base64",
                            help="Label Studio: each image in its task as base64 (default: self-contained, ~10 KB "
                            "per small image), as a URL of `gensets review serve` (url, with --base-url), or "
                            "written under --root for Label Studio's local-files storage (local-files)")
            rx.add_argument("--base-url", metavar="URL", help="--images url: where `gensets review serve` answers, "
                            "e.g. http://127.0.0.1:8765")
            rx.add_argument("--root", metavar="DIR", help="--images local-files: Label Studio's "
                            "LOCAL_FILES_DOCUMENT_ROOT; images go to DIR/gensets-images/")
            rx.add_argument("--project", metavar="URL", help="Label Studio: the address of the project the tasks "
                            "are for (http://HOST:PORT/projects/ID), recorded with the export; without it, the "
                            "project of their first import. An import of them from another project is refused")
        else:
            rx.add_argument("--file", required=True, metavar="FILE", help="the file to import")
            rx.add_argument("--reviewer", help="for rows without one (default: $GENSETS_REVIEWER)")
            rx.add_argument("--users", metavar="FILE", help="Label Studio: who the numeric user ids of Export -> "
                            "JSON are: the JSON of GET /api/users, or {\"1\": \"a@b.c\"}")
            rx.add_argument("--double", action="store_true", help="put the workspace in double review (needed "
                            "when an image has decisions by several reviewers)")
        rx.set_defaults(func=_review_exchange)

    cd = sub.add_parser("card", help="(re)render the dataset card and its figures",
                        description="Write WORKSPACE/dataset/README.md (YAML header with configs and features, "
                        "how it was built, curation funnel, figures, how to load, citation) and figures/.")
    cd.add_argument("workspace")
    cd.add_argument("--db", help="a results database: adds a baseline leaderboard (gensets eval) and the quality "
                    "scores of this build (gensets score)")
    cd.add_argument("--json", action="store_true", help="print {dir, files} as JSON")
    cd.set_defaults(func=_card)

    ls = sub.add_parser("list", help="what gensets has: builders, configs, protocols, metrics, reports, models, tables",
                        description="List the registered builders, evaluation protocols, quality metrics and reports, "
                        "the tiny: and random: models, the configs under ./configs, and the papers' published tables "
                        "packaged for comparison.")
    ls.add_argument("what", choices=LISTS)
    ls.add_argument("--json", action="store_true", help="a JSON list of {name, description, ...}")
    ls.set_defaults(func=_list)

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
    pr.set_defaults(func=_publish_results)

    from .reproduce import tables

    TABLES = tables()  # every registered paper's tables (gensets.registry.PAPERS)

    def per_table(option: str, default: str = "") -> str:  # the tables' readings of an option, for its help
        return "; ".join([default] * bool(default) + [f"{t.name}: {t.options[option]}"
                                                      for t in TABLES.values() if option in t.options])

    rp2 = sub.add_parser(
        "reproduce", help="one paper table: build, score with the paper's settings, print beside the published numbers",
        description="Run one paper table end to end (build or resume the data, score it with the paper's settings, "
        "write the report) and print gensets' numbers beside the published ones, with the difference and the "
        "variant behind each. Tables: " + "; ".join(f"{t.name}: {t.what} (paper run needs: {t.needs})"
                                                  for t in TABLES.values())
        + ". --smoke runs the same path on tiny random models offline (numbers meaningless).")
    rp2.add_argument("table", choices=list(TABLES), help="the paper table")
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
    rp2.add_argument("--variant", action="append", default=[], metavar="NAME",
                     help="a named variant of the table's models instead of the default (repeatable): "
                          + "; ".join(f"{t.name}: " + ", ".join(f"{n} ({what})" for n, (what, _) in t.variants.items())
                                      for t in TABLES.values() if t.variants))
    rp2.add_argument("--seeds", type=positive_int, default=1, metavar="N",
                     help="N builds at seeds config seed + 0 .. N-1, the range of each number over them beside the "
                     "published one (" + ", ".join(
                         t.name if t.no_seeds is None and t.no_seeds_smoke is None else
                         f"{t.name} --smoke" if t.no_seeds_smoke is None else f"{t.name}'s paper run"
                         for t in TABLES.values() if t.no_seeds is None or t.no_seeds_smoke is None) + ")")
    rp2.add_argument("--batch-size", type=positive_int, default=32)
    rp2.add_argument("--json", action="store_true", help="print reproduce.json's content instead of the table")
    rp2.add_argument("--quiet", action="store_true", help="no progress")
    rp2.set_defaults(func=_reproduce)
    return p


def _reproduce(a) -> int:
    from pathlib import Path

    from .reproduce import CONFIGS, Run, markdown, plan, reproduce

    out = Path(a.out or f"out/reproduce/{a.table}{'-smoke' if a.smoke else ''}")
    quiet = a.quiet or a.json
    run = Run(out, a.smoke, tuple(a.dataset), a.batch_size, quiet, Path(a.configs) if a.configs else CONFIGS,
              Path(a.workspace) if a.workspace else None, tuple(a.variant), tuple(a.source), a.dry_run,
              log=(lambda line: None) if quiet else (lambda line: print(line, file=sys.stderr)), seeds=a.seeds)
    if a.dry_run:
        print("\n".join(plan(a.table, run)))
        return 0
    result = reproduce(a.table, run)
    print(json.dumps(result, indent=1) if a.json else markdown(result), end="\n" if a.json else "")
    return 0


LISTS = ("builders", "configs", "protocols", "metrics", "reports", "models", "tables")


def _doc(obj) -> str:
    """The first paragraph of an object's help, else its description, its docstring or its module's, for
    `gensets list`: Sphinx roles (:func:`x`) read as their names."""
    import re

    text = next((t for t in (getattr(obj, "help", None), getattr(obj, "description", None), obj.__doc__,
                             sys.modules[obj.__module__].__doc__) if isinstance(t, str) and t.strip()), "")
    line = " ".join(text.strip().split("\n\n")[0].replace("``", "").split())
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", line)


def catalog(what: str) -> list[dict]:
    """What `gensets list WHAT` prints: rows of name and description (and kind-specific fields)."""
    from .registry import BUILDERS, PROTOCOLS, QUALITY_METRICS, REPORTS

    if what == "builders":
        return [{"name": n, "description": _doc(c)} for n, c in BUILDERS.items()]
    if what == "protocols":
        return [{"name": n, "description": _doc(c)} for n, c in PROTOCOLS.items()]
    if what == "metrics":
        return [{"name": n, "description": _doc(c), "variant": getattr(c, "variant", None)}
                for n, c in QUALITY_METRICS.items()]
    if what == "reports":
        return [{"name": n, "description": _doc(c)} for n, c in REPORTS.items()]
    if what == "models":
        from .models.random import packaged
        from .models.tiny import built_kinds, built_model

        real = {**{k: packaged(k)["stands_for"] for k in ("sd2.1", "sd2.1-base", "sdxl")},
                **{k: v["stands_for"] for k, v in packaged("classifiers").items()}}
        return [{"name": f"{family}:{k}", "loaders": list(built_model(family, k).loaders),
                 "description": f"loaded by {', '.join(built_model(family, k).loaders)}"
                 + (f"; the architecture of {real[k]}, random weights (timing only)" if family == "random" else
                    "; small random weights, built offline (tests, demos)")}
                for family in ("tiny", "random") for k in built_kinds(family)]
    if what == "configs":
        import itertools
        from pathlib import Path

        folder = Path.cwd() / "configs"
        rows = []
        for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            lines = f.read_text(errors="replace").splitlines()
            head = [line.lstrip("#").strip() for line in itertools.takewhile(lambda t: t.startswith("#"), lines)]
            first = " ".join(itertools.takewhile(bool, head))  # the first paragraph of its opening comment
            rows.append({"name": f"configs/{f.name}", "description": first})
        return rows
    if what == "tables":  # every registered paper's published numbers, then its reproduce tables
        from .registry import PAPERS
        from .reproduce import tables

        rows = [row for _, paper in PAPERS.items() for row in paper.published()]
        return rows + [{"name": f"reproduce:{t.name}", "description": f"gensets reproduce {t.name}: {t.what}"}
                       for t in tables().values()]
    raise GensetsError(f"gensets list: unknown {what!r} (expected one of {', '.join(LISTS)})")


def _list(a) -> int:
    rows = catalog(a.what)
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:  # the text listing keeps each description to one line; --json has them whole
        d = r["description"]
        print(f"{r['name']:<{width}}  {d if len(d) <= 110 else d[:107] + '...'}")
    return 0


def _interrupted(a) -> str:
    """What an interrupted command kept, and how to go on (after "gensets: interrupted")."""
    if a.command == "build":
        try:
            from .workspace import Workspace

            with open(Workspace(a.out).manifest_path, "rb") as f:
                units = sum(1 for line in f if line.strip())
        except (OSError, GensetsError):
            units = 0
        return (f"; {units} unit{'s' * (units != 1)} committed in {a.out} are kept: run the same command to resume"
                " (a unit cut short is redone)")
    if a.command == "eval":
        return "; runs already written to the database are kept: run the same command to go on (finished runs are skipped)"
    if a.command == "finalize":
        return "; the previous dataset/ (if any) is unchanged: run it again"
    if a.command == "query":
        return "; the query was stopped (the database is opened read-only: nothing changed)"
    return ""


def main(argv: list[str] | None = None) -> int:
    from .registry import load_plugins

    notices.to_stderr()  # the library's notices (gensets.notices), each its bare line on stderr
    try:
        load_plugins()  # installed packages' builders, model families, storage schemes, reports (gensets.plugins)
    except GensetsError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return e.exit_code
    args = parser().parse_args(argv)
    if not (getattr(args, "quiet", False) or getattr(args, "json", False)):
        os.environ.setdefault("GENSETS_ANNOUNCE", "1")  # a line per model loaded, on a terminal
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, so that a reader gone away (| head) is a BrokenPipeError below
        return code
    except BrokenPipeError:  # the reader of stdout stopped reading: quietly, as a process killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush then writes nowhere
        return 141
    except GensetsError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"gensets: interrupted{_interrupted(args)}", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"gensets: error: {e}", file=sys.stderr)
        return 1
    finally:
        from .models.device import close_distributed

        close_distributed()


if __name__ == "__main__":
    sys.exit(main())
