"""Runs any builder: plan -> units -> atomic candidate shards -> state.duckdb -> dataset/.

A unit is done only when its shard was written to a temporary name, fsynced, renamed, and recorded
in ``candidates/manifest.jsonl`` with its sha256 and sample count; a killed build resumes at the first
unit that is not. Under ``accelerate launch`` process i of n takes units i, i+n, ...
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path

from ..errors import GensetsError
from ..models.device import distributed
from ..records import Sample
from ..workspace import Workspace, load_build_config


def progress(iterable, total: int, desc: str, disable: bool = False):
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, unit="unit", disable=disable, file=sys.stderr)


def build(config_path: str | Path, out: str | Path, *, quiet: bool = False, threads: int = 1,
          overrides: tuple[str, ...] | list[str] = ()) -> dict:
    """Generate and filter every unit not yet done; returns counts for this process.

    On CPU, results depend on torch's thread count (float reductions split differently), so every
    process uses ``threads`` threads whatever the number of processes: one process or N give the same
    bytes. Throughput on CPU comes from processes (``accelerate launch``), not threads.
    """
    import torch

    from ..shards import Manifest, clean_temp, write_shard

    builder, cfg = load_build_config(config_path, overrides)  # --set key=value, frozen with the config
    if not torch.cuda.is_available():
        torch.set_num_threads(threads)
    dist = distributed()
    if dist.rank == 0:
        ws = Workspace.create(out, builder, cfg)
        ws.clean_leftovers()
        clean_temp(ws.candidates)  # leftovers of a killed writer
    dist.barrier()
    ws = Workspace.create(out, builder, cfg)
    build_id = ws.fingerprint
    manifest = Manifest(ws.manifest_path)
    ctx = builder.Context(cfg)
    ctx.workspace = ws  # staged builders read the shards of earlier stages
    # A staged builder (``stages``) is planned stage by stage: stage s is planned from the committed
    # shards of the stages before it, once every process has finished them; committed units are skipped
    # as always, so a resumed build re-plans the same units and runs only the missing ones.
    stages = builder.stages
    n_units = n_done = n_run = written = 0
    loaded = False
    for stage in stages or (None,):
        units = builder.plan(cfg) if stage is None else builder.plan(cfg, stage=stage, workspace=ws)
        done = manifest.done("unit")
        mine = [u for i, u in enumerate(units) if i % dist.world == dist.rank and u.id not in done]
        n_units += len(units)
        n_done += sum(u.id in done for u in units)
        n_run += len(mine)
        if mine and not loaded:
            ctx.load()  # every model up front: a missing one fails now, in one line, before any work
            loaded = True
        desc = f"{builder.name} [rank {dist.rank}/{dist.world}]" if dist.world > 1 else builder.name
        desc += f" {stage}" if stage else ""
        for unit in progress(mine, len(mine), desc, disable=quiet):
            ctx.skipped = []  # inputs a unit refused (an import's corrupt files), each with its reason
            samples = builder.run_unit(unit, ctx, build_id)
            name = f"{unit.id}.tar"
            info = write_shard(ws.candidates / name, [s.to_wds() for s in samples])
            manifest.append({"unit": unit.id, "shard": name, "sha256": info.sha256, "n": info.n,
                             "nbytes": info.nbytes, "kept": sum(bool(s.meta.get("kept")) for s in samples),
                             "skipped": ctx.skipped, "rank": dist.rank, "world": dist.world})
            for row in ctx.skipped:
                print(f"skipped {row['path']}: {row['reason']}", file=sys.stderr)
            written += info.n
        dist.barrier()
    added = ingest(ws) if dist.rank == 0 else 0
    if dist.rank == 0:
        builder.after_build(ws)  # e.g. statistics over everything committed
    return {"units": n_units, "done_before": n_done, "units_run": n_run,
            "samples_written": written, "samples_ingested": added, "rank": dist.rank,
            "world": dist.world, "workspace": str(ws.root)}


def ingest(ws: Workspace) -> int:
    """Load committed candidate shards into state.duckdb (idempotent)."""
    from ..curation import state
    from ..shards import Manifest

    builder, _ = ws.load()
    con = state.connect(ws.state_path)
    try:
        return state.ingest(con, Manifest(ws.manifest_path).rows(),
                            lambda shard: ws.read_candidates(shard), builder.config_of,
                            initial_status="pending" if builder.needs_review else "accepted")
    finally:
        con.close()


def finalize(workspace: str | Path, *, include_pending: bool = False) -> dict:
    """Write the publishable ``dataset/``: accepted images per config, manifest and card.

    In double review an image's decision is :func:`review.verdicts`'s, not the latest one: images whose
    two reviewers disagree and that nobody adjudicated are held back (counted on stderr).
    """
    from ..cards import card
    from ..curation import review, state
    from ..shards import write_json_atomic, write_shard

    ws = Workspace(workspace)
    builder, cfg = ws.load()
    ws.clean_leftovers()
    if not ws.state_path.exists():
        raise GensetsError(f"{ws.root}: nothing built yet (no state.duckdb); run `gensets build` first")
    ingest(ws)
    con = state.connect(ws.state_path)
    rows = con.execute("""SELECT s.key, s.shard, s.config, r.status, r.label, r.reviewer, r.time, s.label
                          FROM samples s JOIN reviews r USING (key) ORDER BY s.config, s.key""").fetchall()
    double = review.is_double(con)
    verdicts = review.verdicts(con) if double else {}
    funnel = state.funnel(con, {k: v[0] for k, v in verdicts.items()})
    con.close()
    disputed = sum(v[0] == "disputed" for v in verdicts.values())
    held = sum(v[0] == "held" for v in verdicts.values())
    if double:
        print(f"double review: {disputed} image(s) held back because their two reviewers disagree "
              "(`gensets review agreement` lists them; agreeing decisions under other names settle one), "
              f"{held} rejected by their one reviewer so far", file=sys.stderr)

    statuses = ["accepted", "relabeled"] + (["pending"] if include_pending else [])
    wanted = defaultdict(dict)  # shard -> key -> review row
    for key, shard, config, status, label, reviewer, time, label_before in rows:
        status, label, reviewer, time = verdicts.get(key, (status, label, reviewer, time))
        if status in statuses:
            time = time.strftime("%Y-%m-%dT%H:%M:%SZ") if time else None
            wanted[shard][key] = (key, shard, config, status, label, reviewer, time, label_before)
    per_config: dict[str, list[Sample]] = defaultdict(list)
    for shard in sorted(wanted):
        for s in ws.read_candidates(shard):
            row = wanted[shard].get(s.key)
            if row is None:
                continue
            _, _, config, status, label, reviewer, time, label_before = row
            review = {"status": status, "reviewer": reviewer, "time": time, "label_before": None}
            if status == "relabeled" and label != label_before:
                s.cls, fields = builder.relabel(s.meta, label)
                s.meta.update(fields)
                review["label_before"] = label_before
            s.meta["review"] = review
            per_config[config].append(s)

    tmp = ws.root / f".dataset.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shards, counts = [], {}
    split = builder.split
    configs = builder.config_names(cfg)
    for config in configs:
        samples = sorted(per_config.get(config, []), key=lambda s: s.key)
        counts[config] = len(samples)
        if not samples:
            continue
        (tmp / config).mkdir()
        for i in range(0, len(samples), cfg.shard_size):
            rel = f"{config}/{split}-{i // cfg.shard_size:05d}.tar"
            info = write_shard(tmp / rel, [s.to_wds() for s in samples[i : i + cfg.shard_size]])
            shards.append({"path": rel, "config": config, "split": split, "sha256": info.sha256,
                           "n": info.n, "nbytes": info.nbytes})
    all_samples = [s for config in configs for s in sorted(per_config.get(config, []), key=lambda s: s.key)]
    manifest = {"builder": builder.name, "build": ws.fingerprint, "include_pending": include_pending,
                "counts": counts, "funnel": funnel, "shards": shards}
    write_json_atomic(tmp / "manifest.json", manifest)
    card.write(tmp, builder, cfg, manifest, all_samples, ws.fingerprint)  # README.md + figures/
    # swap the new folder in: the old dataset stays whole until the new one is complete
    old = ws.root / f".dataset.old-{os.getpid()}"
    if ws.dataset.exists():
        os.replace(ws.dataset, old)
    os.replace(tmp, ws.dataset)
    shutil.rmtree(old, ignore_errors=True)
    return {"dataset": str(ws.dataset), "counts": counts, "funnel": funnel,
            "shards": len(shards), "include_pending": include_pending, "disputed": disputed}
