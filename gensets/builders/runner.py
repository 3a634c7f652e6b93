"""Runs any builder: plan -> units -> atomic candidate shards -> state.duckdb -> dataset/.

A unit is done only when its shard was written to a temporary name, fsynced, renamed, and recorded
in ``candidates/manifest.jsonl`` with its sha256 and sample count; a killed build resumes at the first
unit that is not. Under ``accelerate launch`` process i of n takes units i, i+n, ... Where units run (this process,
or Ray workers that pull them: ``--backend ray``) is :mod:`gensets.builders.backends`; this module alone writes the
manifest and state.duckdb.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from .. import determinism, notices
from ..errors import GensetsError
from ..models.device import Dist, default_device, distributed
from ..output import replace
from ..records import Sample
from ..workspace import Workspace, load_build_config
from . import backends


def progress(iterable, total: int, desc: str, disable: bool = False):
    from ..progress import bar

    return bar(iterable, total=total, desc=desc, unit="unit", disable=disable)


def build(config_path: str | Path, out: str | Path, *, quiet: bool = False, threads: int = 1,
          overrides: tuple[str, ...] | list[str] = (), backend: str = "local", workers: int | None = None,
          address: str | None = None, gpus_per_worker: float | None = None) -> dict:
    """Generate and filter every unit not yet done; returns counts for this process.

    On CPU, results depend on torch's thread count (float reductions split differently), so every
    process uses ``threads`` threads whatever the number of processes: one process or N give the same
    bytes. Throughput on CPU comes from processes (``accelerate launch``, or ``backend="ray"``: ``workers`` Ray
    workers on the cluster at ``address``, or on a local cluster started for the run), not threads.
    """
    if backend not in backends.BACKENDS:
        raise GensetsError(f"--backend {backend!r}: expected one of {', '.join(backends.BACKENDS)}")
    if backend != "ray":
        for flag, value in (("--workers", workers), ("--address", address), ("--gpus-per-worker", gpus_per_worker)):
            if value is not None:
                raise GensetsError(f"{flag} is an option of --backend ray")
    builder, cfg = load_build_config(config_path, overrides)  # --set key=value, frozen with the config
    determinism.pin(_mode(cfg))  # before torch first runs (distributed() may import it)
    dist = distributed()
    if backend == "ray" and dist.world > 1:
        raise GensetsError("--backend ray starts its own workers: run it as one process, not under accelerate launch")
    ws = Workspace(out)
    if dist.rank == 0:  # before the lock creates anything in it: --out of the wrong folder is refused as it is
        ws.check_links()
        ws.refuse_foreign_folder()
    made = dist.rank == 0 and ws.creates_folder  # a folder this build creates
    try:
        # one build per workspace at a time (its rank 0 holds the lock; the other ranks are its own processes)
        with ws.lock("build") if dist.rank == 0 else contextlib.nullcontext():
            return _build(builder, cfg, out, dist, quiet, threads, str(config_path),
                          {"backend": backend, "workers": workers, "address": address,
                           "gpus_per_worker": gpus_per_worker})
    except BaseException:
        # a build that fails before its first unit (a model offline) leaves no half-made workspace it created
        if made and ws.root.is_dir() and not (ws.manifest_path.exists() and ws.manifest_path.stat().st_size):
            shutil.rmtree(ws.root, ignore_errors=True)
        raise


_mode = backends.mode_of
_unit_name = backends.unit_name


def _build(builder, cfg, out: str | Path, dist: Dist, quiet: bool, threads: int, config_path: str,
           where: dict) -> dict:
    from ..shards import clean_temp

    if dist.rank == 0:
        ws = Workspace.create(out, builder, cfg)
        ws.clean_leftovers()
        clean_temp(ws.candidates)  # leftovers of a killed writer
    dist.barrier()
    ws = Workspace.create(out, builder, cfg)
    if dist.rank == 0:  # on a store, done = the commit markers (a fresh driver starts from them)
        ws.sync()
    dist.barrier()
    manifest = ws.manifest()
    backend = where["backend"]
    # where the units run (gensets.builders.backends): here, or on Ray workers that write their shards and
    # return the rows, which only this process appends to the manifest
    pool = backends.pool(backend, (builder, cfg, ws.where, threads, dist.rank, dist.world, config_path),
                         workers=where["workers"], address=where["address"],
                         gpus_per_worker=where.get("gpus_per_worker"), quiet=quiet)
    # A staged builder (``stages``) is planned stage by stage: stage s is planned from the committed
    # shards of the stages before it, once every process has finished them; committed units are skipped
    # as always, so a resumed build re-plans the same units and runs only the missing ones.
    stages = builder.stages
    n_units = n_done = n_run = written = 0
    cut = {"prompts": 0, "negative_prompts": 0, "windows": set()}  # texts cut to the text encoder's window
    try:
        for stage in stages or (None,):
            units = builder.plan(cfg) if stage is None else builder.plan(cfg, stage=stage, workspace=ws)
            done = manifest.done("unit")
            mine = [u for i, u in enumerate(units) if i % dist.world == dist.rank and u.id not in done]
            n_units += len(units)
            n_done += sum(u.id in done for u in units)
            n_run += len(mine)
            # torch and the models are loaded only now, when there is work; long_prompts: error stops here,
            # before any image of the stage
            pool.check(mine)
            desc = f"{builder.name} [rank {dist.rank}/{dist.world}]" if dist.world > 1 else builder.name
            desc += f" [{backend}]" if backend != "local" else ""
            desc += f" {stage}" if stage else ""
            bar = progress(pool.run(mine), len(mine), desc, disable=quiet)
            images, started = 0, time.monotonic()
            for result in bar:
                row = result["row"]
                ws.check_lease()  # a driver whose lease another took over appends nothing more (Busy, one line)
                manifest.append(row)
                images += row["n"]
                if backend != "local":  # the driver's view of the cluster: its rate, its workers, the retries
                    bar.set_postfix_str(f"{images / max(time.monotonic() - started, 1e-9):.2f} img/s, "
                                        f"{pool.alive()} workers alive, {pool.retried} retried", refresh=False)
                for k in ("prompts", "negative_prompts"):
                    cut[k] += result["cut"][k]
                cut["windows"].update(result["cut"]["windows"])
                for skip in row["skipped"]:
                    notices.notice(f"skipped {skip['path']}: {skip['reason']}")
                written += row["n"]
            dist.barrier()
    finally:
        pool.close()
    if backend != "local":
        clean_temp(ws.candidates)  # what a worker killed mid-write left (no worker writes any more)
    if dist.rank == 0:
        ws.check_committed()  # its objects still there (not removed meanwhile) before anything is reported done
        ws.remove_orphans()  # shards of attempts that never committed (every unit has its marker now)
    added = ingest(ws) if dist.rank == 0 else 0
    if dist.rank == 0:
        builder.after_build(ws)  # e.g. statistics over everything committed
    return {"units": n_units, "done_before": n_done, "units_run": n_run,
            "samples_written": written, "samples_ingested": added, "rank": dist.rank,
            "prompts_cut": cut["prompts"], "negative_prompts_cut": cut["negative_prompts"],
            "text_windows": sorted(w for w in cut["windows"] if w is not None),
            "world": dist.world, "workspace": ws.where, "needs_review": builder.needs_review,
            **({"units_retried": pool.retried, "workers": pool.size} if backend == "ray" else {})}


def rebuild(workspace: str | Path, n: int, *, seed: int, quiet: bool = False) -> dict:
    """Rebuild ``n`` committed units of a workspace, chosen at random with ``seed``, into a temporary folder and
    compare each shard with the sha256 its manifest row recorded (``gensets verify WORKSPACE --rebuild N``).

    Each unit is rebuilt as the build ran it (the frozen config, its ``reproducible`` mode, the thread count of
    the environment that built it); the environment now is compared with that one, so a shard that differs
    comes with what differs (versions, CPU or GPU, pins), and a difference in the same environment is said as
    such. Returns ``{"units": [{unit, name, identical, sha256, recorded, differences}], "seed", "environment"}``.
    """
    import random
    import tempfile

    from ..shards import write_shard

    ws = Workspace(workspace)
    builder, cfg = ws.load()
    ws.sync()
    determinism.pin(_mode(cfg))
    rows = {r["unit"]: r for r in ws.manifest().iter_rows()}
    if not rows:
        raise GensetsError(f"{ws.root}: no committed unit to rebuild; run `gensets build` first")
    envs = ws.environments()
    units = {}  # every unit of the build in plan order (a staged builder's later stages from the committed ones)
    for stage in builder.stages or (None,):
        for u in builder.plan(cfg) if stage is None else builder.plan(cfg, stage=stage, workspace=ws):
            if u.id in rows:
                units[u.id] = u
    chosen = set(random.Random(seed).sample(sorted(units), min(n, len(units))))
    import torch

    threads = {envs.get(rows[u].get("env"), {}).get("threads") for u in chosen} - {None}
    if len(threads) > 1:  # pragma: no cover - a workspace resumed with another --threads
        raise GensetsError(f"{ws.root}: the chosen units were built with different thread counts {sorted(threads)}")
    if not torch.cuda.is_available():  # never more threads than this machine's cores (the record may be another's)
        torch.set_num_threads(min(threads.pop() if threads else 1, determinism.cores()))
    determinism.switch(_mode(cfg))
    ctx = builder.Context(cfg)
    ctx.workspace = ws
    ctx.load()
    quality = None
    if getattr(cfg, "quality", None):
        from ..quality.thresholds import QualityFilter

        quality = QualityFilter(cfg.quality)
        quality.load()
    now = determinism.describe(_mode(cfg), default_device())
    out = []
    with tempfile.TemporaryDirectory(prefix="gensets-rebuild-") as tmp:
        todo = [u for u in units.values() if u.id in chosen]
        for unit in progress(todo, len(todo), f"rebuild {builder.name}", disable=quiet):
            ctx.skipped = []
            samples = builder.run_unit(unit, ctx, ws.fingerprint)
            if quality:
                quality.apply(samples)
            info = write_shard(Path(tmp) / f"{unit.id}.tar", [s.to_wds() for s in samples])
            row = rows[unit.id]
            recorded = envs.get(row.get("env"))
            out.append({"unit": unit.id, "name": _unit_name(unit), "identical": info.sha256 == row["sha256"],
                        "sha256": info.sha256, "recorded": row["sha256"], "environment": row.get("env"),
                        "differences": None if recorded is None else determinism.differences(recorded, now)})
    return {"units": out, "seed": seed, "of": len(units), "environment": now}


def ingest(ws: Workspace) -> int:
    """Load committed candidate shards into state.duckdb (idempotent), with where each image lies and the
    review page's tables, so that ``gensets review serve`` starts at once."""
    from ..curation import queue, state

    builder, _ = ws.load()
    con = state.connect(ws.state_path)
    try:
        added = state.ingest(con, ws.manifest().iter_rows(), ws.candidate,
                             builder.config_of, initial_status="pending" if builder.needs_review else "accepted",
                             index_of=ws.marker_indexes)
        state.index_images(con, ws.candidate)  # a database from before ``images``
        queue.ensure(con)
        return added
    finally:
        con.close()


def finalize(workspace: str | Path, *, include_pending: bool = False, progress: bool = False,
             publish_emails: bool = False) -> dict:
    """Write the publishable ``dataset/``: accepted images per config, manifest and card.

    In double review an image's decision is :func:`review.verdicts`'s, not the latest one: images whose
    two reviewers disagree and that nobody adjudicated are held back (counted on stderr).

    Streams: the images of one output shard at a time are in memory. Each config's samples come from
    state.duckdb in key order (their provenance and class as ingested), each image from its candidate shard
    at its recorded offset; the card reads the written shards back (:class:`gensets.shards.ShardSamples`).

    Reviewers are published as the log resolves them (a Label Studio id as the person it names); an email as a
    pseudonym (:func:`review.published_reviewer`) unless ``publish_emails``, and the card says which.
    """
    ws = Workspace(workspace)
    builder, cfg = ws.load()  # before the lock: a mistyped path is an error, not a new folder
    with ws.lock("finalize"):  # not while a build (or another finalize) writes the workspace
        return _finalize(ws, builder, cfg, include_pending, progress, publish_emails)


def _finalize(ws: Workspace, builder, cfg, include_pending: bool, shown: bool, publish_emails: bool = False) -> dict:
    from ..cards import card
    from ..curation import review, state
    from ..errors import DataError
    from ..shards import ShardSamples, read_at, sha256_file, write_json_atomic, write_shard

    ws.clean_leftovers()
    ws.sync()  # on a store, state.duckdb (local) follows the commit markers; rebuilt from them when missing
    if not ws.has_build:
        raise GensetsError(f"{ws.where}: nothing built yet (no state.duckdb); run `gensets build` first")
    _check_complete(ws, builder, cfg)
    environments = _environments(ws)  # read (and checked) before anything is written
    ingest(ws)
    pseudonyms = None if publish_emails or not builder.needs_review else _pseudonym_key(ws)
    # a snapshot, read for as long as the shards take: review servers and commands use state.duckdb meanwhile
    snap = state.snapshot(ws.state_path, ws.root / f".state.snapshot.tmp-{os.getpid()}")
    con = state.connect(snap, read_only=True)
    metas = con.cursor()  # the provenance of one output shard at a time, by key, beside the sorted stream
    try:
        double = review.is_double(con)
        reviewed = review.summary(con)  # for the card (it reads the manifest, never state.duckdb)
        verdicts = review.verdicts(con) if double else {}
        funnel = state.funnel(con, {k: v[0] for k, v in verdicts.items()},
                              quality=bool(getattr(cfg, "quality", None)))
        disputed = sum(v[0] == "disputed" for v in verdicts.values())
        held = sum(v[0] == "held" for v in verdicts.values())
        if double:
            notices.notice(f"double review: {disputed} image(s) held back because their two reviewers disagree "
                           "(`gensets review agreement` lists them; agreeing decisions under other names settle "
                           f"one), {held} rejected by their one reviewer so far")
        statuses = ["accepted", "relabeled"] + (["pending"] if include_pending else [])
        tmp = ws.root / f".dataset.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shards, counts = [], {}
        names: set[str] = set()  # the reviewer names the dataset publishes (json.review.reviewer)
        emails: set[str] = set()  # the reviewers among them that are emails (as pseudonyms unless publish_emails)
        split = builder.split
        recorded = {r.get("shard"): r.get("sha256") for r in ws.manifest().iter_rows()}
        checked: set[str] = set()  # candidate shards whose bytes were checked against the manifest's sha256

        def candidate(shard: str):
            """The candidate shard, its bytes checked once against the sha256 manifest.jsonl recorded."""
            path = ws.candidate(shard)
            if shard not in checked:
                if recorded.get(shard) is None or sha256_file(path) != recorded[shard]:
                    raise DataError(f"{path}: not the bytes {ws.manifest_path} recorded (sha256 "
                                    f"{str(recorded.get(shard))[:16]}...); the candidate shard changed after it "
                                    "was built: restore it, or remove its manifest row and build again")
                ws.check_committed_shard(shard, path)  # on a store, ingest read its marker: it must say the shard
                checked.add(shard)
            return path

        def flush(config: str, i: int, rows: list[tuple]) -> None:
            samples = []
            meta = dict(metas.execute("SELECT key, meta FROM samples WHERE list_contains(?, key)",
                                      [[r[0] for r in rows]]).fetchall())
            for key, shard, offset, size, ext, cls, status, label, reviewer, time, label_before, several in rows:
                s = Sample(key, read_at(candidate(shard), offset, size, key), ext, cls, json.loads(meta[key]))
                time = time.strftime("%Y-%m-%dT%H:%M:%SZ") if time else None
                before, reviewer = reviewer, review.published_reviewer(reviewer, pseudonyms)
                decision = {"status": status, "reviewer": reviewer, "time": time, "label_before": None,
                            "several_objects": bool(several)}
                if status == "relabeled" and label != label_before:
                    s.cls, fields = builder.relabel(s.meta, label)
                    s.meta.update(fields)
                    decision["label_before"] = label_before
                s.meta["review"] = decision
                names.update(reviewer.split(" & ") if reviewer else ())
                emails.update(n for n in (before or "").split(" & ") if "@" in n)
                samples.append(s)
            rel = f"{config}/{split}-{i:05d}.tar"
            (tmp / config).mkdir(exist_ok=True)
            info = write_shard(tmp / rel, [s.to_wds() for s in samples])
            shards.append({"path": rel, "config": config, "split": split, "sha256": info.sha256,
                           "n": info.n, "nbytes": info.nbytes})

        from tqdm.auto import tqdm

        # progress: images written, on a terminal
        bar = tqdm(desc="finalize", unit="img", disable=None if shown else True, file=sys.stderr, leave=False)
        for config in builder.config_names(cfg):
            counts[config] = 0
            rows: list[tuple] = []
            bar.set_postfix_str(config)
            for row in _published(con, config, statuses, verdicts):
                rows.append(row)
                counts[config] += 1
                bar.update(1)
                if len(rows) == cfg.shard_size:
                    flush(config, (counts[config] - 1) // cfg.shard_size, rows)
                    rows = []
            if rows:
                flush(config, (counts[config] - 1) // cfg.shard_size, rows)
        bar.close()
    finally:
        metas.close()
        con.close()
        for leftover in (snap, Path(f"{snap}.wal")):
            leftover.unlink(missing_ok=True)
    manifest = {"builder": builder.name, "build": ws.fingerprint, "include_pending": include_pending,
                "counts": counts, "funnel": funnel, "shards": shards, "environments": environments}
    if builder.needs_review:
        manifest["review"] = reviewed
        if emails:  # what the card says of people
            manifest["review"]["emails"] = "published" if publish_emails else "pseudonymised"
    random = sorted({spec for _, spec in builder.models(cfg) if str(spec).startswith("random:")})
    if random:  # full-size architectures with random weights: timing runs, not data (publish refuses them)
        manifest["random_models"] = random
    write_json_atomic(tmp / "manifest.json", manifest)
    samples = ShardSamples([tmp / s["path"] for s in shards], n=sum(counts.values()))
    try:
        card.write(tmp, builder, cfg, manifest, samples, ws.fingerprint, progress=shown)  # README.md + figures/
    except DataError as e:  # an image of the card's figures that does not decode: named where it came from
        if getattr(e, "sample", None) is None:
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        key, ext = e.sample
        raise DataError(f"{_candidate_of(ws, key) or '?'}: {key}.{ext}: {e.why}") from None
    # swap the new folder in: the old dataset stays whole until the new one is complete
    old = ws.root / f".dataset.old-{os.getpid()}"
    if ws.dataset.exists():
        replace(ws.dataset, old)
    replace(tmp, ws.dataset)
    shutil.rmtree(old, ignore_errors=True)
    ws.push_dataset()
    if builder.needs_review and names:  # once the dataset is published: what it says of people
        notices.notice(f"reviewer names published in each sample's json.review.reviewer: {', '.join(sorted(names))}"
                       + ((" (emails published: --publish-emails)" if publish_emails else " (emails as pseudonyms; "
                           "finalize --publish-emails publishes them)") if emails else ""))
    return {"dataset": ws.dataset_where, "counts": counts, "funnel": funnel,
            "shards": len(shards), "include_pending": include_pending, "disputed": disputed}


def _pseudonym_key(ws: Workspace) -> str:
    """The workspace's key for reviewers' pseudonyms (made, in state.duckdb, the first time)."""
    from ..curation import review, state
    from ..db import transaction

    con = state.connect(ws.state_path)
    try:
        with transaction(con):
            return review.pseudonym_key(con)
    finally:
        con.close()


def _check_complete(ws: Workspace, builder, cfg) -> None:
    """DataError when a unit of the build's plan has no committed shard (its manifest row; on a store, its commit
    marker): a dataset is made of every unit of its build, never of part of it."""
    from ..errors import DataError, GensetsError

    done = ws.manifest().done("unit")
    try:
        units = [u.id for stage in builder.stages or (None,)
                 for u in (builder.plan(cfg) if stage is None else builder.plan(cfg, stage=stage, workspace=ws))]
    except GensetsError as e:  # the plan reads inputs (a folder of reference images) this machine may not have
        notices.warn(f"finalize: the build's plan cannot be made here ({e}); its units' completeness is not checked")
        return
    missing = [u for u in units if u not in done]
    if missing:
        raise DataError(f"{ws.where}: {len(missing)} of {len(units)} units of the build are not committed "
                        f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}); run the same "
                        "`gensets build` again to make them, then finalize")


def _candidate_of(ws: Workspace, key: str) -> Path | None:
    """The candidate shard that holds sample ``key`` (state.duckdb's images), for an error that names it."""
    from ..curation import state

    con = state.connect(ws.state_path, read_only=True)
    try:
        row = con.execute("SELECT shard FROM images WHERE key = ?", [key]).fetchone()
    finally:
        con.close()
    return ws.candidates / row[0] if row and isinstance(row[0], str) else None


def _environments(ws: Workspace) -> list[dict]:
    """The environments that built the workspace's committed units, each with how many units it built
    (``units_without``: units committed before gensets recorded environments)."""

    built = {}
    for row in ws.manifest().iter_rows():
        built[row.get("env")] = built.get(row.get("env"), 0) + 1
    envs = ws.environments()
    return [{"id": eid, "units": n, "environment": envs.get(eid)} for eid, n in built.items()]


def _published(con, config: str, statuses: list[str], verdicts: dict):
    """The samples of ``config`` that go into the dataset, in key order, a batch at a time: ``(key, shard, byte
    offset, size, ext, class index, status, label, reviewer, time, label before, several objects)``; in double
    review the status, label, reviewer and time are the image's verdict's (``verdicts``), and several objects is
    whether one of its reviewers' latest decisions flagged it (single review: the decision's note). (No
    provenance: DuckDB sorts narrow rows.)"""
    import pyarrow as pa

    from ..curation import queue

    def flagged(note: str) -> str:  # queue.has_flag in SQL: the flag is one of the note's ';'-separated parts
        return f"list_contains(list_transform(string_split(coalesce({note}, ''), ';'), lambda x: trim(x)), '{queue.FLAG}')"

    con.register("_verdicts", pa.table({
        "key": pa.array(list(verdicts), pa.string()),
        "status": pa.array([v[0] for v in verdicts.values()], pa.string()),
        "label": pa.array([v[1] for v in verdicts.values()], pa.string()),
        "reviewer": pa.array([v[2] for v in verdicts.values()], pa.string()),
        "time": pa.array([v[3] for v in verdicts.values()], pa.timestamp("us"))}))
    try:
        reader = con.sql(f"""
            SELECT * FROM (
                SELECT s.key, i.shard, i.byte_offset, i.nbytes, i.ext, s.label_index,
                       CASE WHEN v.key IS NULL THEN r.status ELSE v.status END AS status,
                       CASE WHEN v.key IS NULL THEN r.label ELSE v.label END AS label,
                       CASE WHEN v.key IS NULL THEN coalesce(al.reviewer, r.reviewer) ELSE v.reviewer END
                           AS reviewer,
                       CASE WHEN v.key IS NULL THEN r.time ELSE v.time END AS time, s.label AS label_before,
                       CASE WHEN v.key IS NULL THEN {flagged("r.note")} ELSE coalesce(f.flagged, false) END
                FROM samples s JOIN reviews r USING (key) JOIN images i USING (key)
                LEFT JOIN _verdicts v USING (key) LEFT JOIN reviewer_aliases al ON al.alias = r.reviewer
                LEFT JOIN (SELECT key, bool_or({flagged("note")}) AS flagged FROM ({queue.LATEST.format(where="")})
                           WHERE status <> 'pending' GROUP BY key) f USING (key)
                WHERE s.config = ?)
            WHERE list_contains(?, status) ORDER BY key""", params=[config, statuses]).to_arrow_reader(1024)
        for batch in reader:
            yield from zip(*(col.to_pylist() for col in batch.columns), strict=True)
    finally:
        con.unregister("_verdicts")
