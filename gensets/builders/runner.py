"""Runs any builder: plan -> units -> atomic candidate shards -> state.duckdb (:mod:`gensets.builders.ingest`); the
publishable dataset/ is a stage of its own (:mod:`gensets.builders.finalize`). ``rebuild``: committed units built again
and compared (``gensets verify WORKSPACE --rebuild N``).

A unit is done only when its shard was written to a temporary name, fsynced, renamed, and recorded
in ``candidates/manifest.jsonl`` with its sha256 and sample count; a killed build resumes at the first
unit that is not. Under ``accelerate launch`` process i of n takes units i, i+n, ... Where units run (this process,
or Ray workers that pull them: ``--backend ray``) is :mod:`gensets.builders.backends`; this module alone appends to the
manifest and ingests state.duckdb.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

from .. import determinism, notices
from ..errors import GensetsError
from ..models.device import Dist, distributed
from ..progress import bar as stage_bar
from ..quality.thresholds import QualityFilter
from ..shards import clean_temp, write_shard
from ..workspace import Workspace, load_build_config
from . import backends
from .environment import BuildEnvironment
from .ingest import ingest


def progress(iterable, total: int, desc: str, disable: bool = False):
    return stage_bar(iterable, total=total, desc=desc, unit="unit", disable=disable)


def build(config_path: str | Path, out: str | Path, *, quiet: bool = False, threads: int = 1,
          overrides: tuple[str, ...] | list[str] = (), backend: str = "local", workers: int | None = None,
          address: str | None = None, gpus_per_worker: float | None = None) -> dict:
    """Generate and filter every unit not yet done; returns counts for this process.

    On CPU, results depend on torch's thread count (float reductions split differently), so every
    process uses ``threads`` threads whatever the number of processes: one process or N give the same
    bytes. Throughput on CPU comes from processes (``accelerate launch``, or ``backend="ray"``: ``workers`` Ray
    workers on the cluster at ``address``, or on a local cluster started for the run), not threads.
    """
    backends.check_backend(backend, workers, address, gpus_per_worker)
    builder, cfg = load_build_config(config_path, overrides)  # --set key=value, frozen with the config
    environment = BuildEnvironment.of(cfg, threads)  # how every process of the build computes, decided once
    environment.pin()  # before torch first runs (distributed() may import it)
    dist = distributed()
    backends.check_backend(backend, workers, address, gpus_per_worker, dist.world)
    ws = Workspace(out)
    if dist.rank == 0:  # before the lock creates anything in it: --out of the wrong folder is refused as it is
        ws.check_links()
        ws.refuse_foreign_folder()
    made = dist.rank == 0 and ws.creates_folder  # a folder this build creates
    try:
        # one build per workspace at a time (its rank 0 holds the lock; the other ranks are its own processes)
        with ws.lock("build") if dist.rank == 0 else contextlib.nullcontext():
            return _build(builder, cfg, out, dist, quiet, environment, str(config_path),
                          {"backend": backend, "workers": workers, "address": address,
                           "gpus_per_worker": gpus_per_worker})
    except BaseException:
        # a build that fails before its first unit (a model offline) leaves no half-made workspace it created
        if made and ws.root.is_dir() and not (ws.manifest_path.exists() and ws.manifest_path.stat().st_size):
            shutil.rmtree(ws.root, ignore_errors=True)
        raise


_unit_name = backends.unit_name


def _build(builder, cfg, out: str | Path, dist: Dist, quiet: bool, environment: BuildEnvironment, config_path: str,
           where: dict) -> dict:
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
    pool = backends.pool(backend, (builder, cfg, ws.where, environment, dist.rank, dist.world, config_path),
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

    ws = Workspace(workspace)
    builder, cfg = ws.load()
    ws.sync()
    environment = BuildEnvironment.of(cfg)  # its threads: the recorded ones, once the units are chosen
    environment.pin()
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
    threads = {envs.get(rows[u].get("env"), {}).get("threads") for u in chosen} - {None}
    if len(threads) > 1:  # pragma: no cover - a workspace resumed with another --threads
        raise GensetsError(f"{ws.root}: the chosen units were built with different thread counts {sorted(threads)}")
    # never more threads than this machine's cores (the record may be another's)
    environment = environment.with_threads(min(threads.pop() if threads else 1, determinism.cores()))
    environment.start()
    ctx = builder.Context(cfg)
    ctx.workspace = ws
    ctx.load()
    quality = None
    if getattr(cfg, "quality", None):
        quality = QualityFilter(cfg.quality)
        quality.load()
    now = environment.record()
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
