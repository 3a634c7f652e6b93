"""Finalize: a workspace's committed, reviewed images -> the publishable ``dataset/`` (accepted images per config as
shards, ``manifest.json``, the card), one step a function:

:func:`_prepare` (the build complete, its environments read, state.duckdb ingested) -> :func:`_pseudonym_key` ->
:func:`_snapshot` (state.duckdb as it is now) -> :func:`_review_of` (decisions, double review's verdicts, the
funnel) -> :class:`_Shards` fed by :func:`_write_configs` (each config's samples in key order, :func:`_published`)
-> :func:`_manifest_of` -> :func:`_write_card` -> :func:`_swap_in` (the old dataset whole until the new one is) ->
the store's copy (``push_dataset``) -> :func:`_say_reviewers`. Before the shards, :func:`_audit` (gensets.audit:
within-set duplicates, and the builder's references; on unless ``audit`` is None) gives each published sample its
``json.audit`` and, with ``drop``, the near-duplicates left out (one image of each group kept, recorded).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from .. import notices
from ..audit import check as audit_check
from ..audit import run as audit_run
from ..audit.features import Cache
from ..audit.sources import ImageSet, config_bases
from ..cards import card
from ..curation import queue, review, state
from ..db import transaction
from ..errors import DataError, GensetsError
from ..models.device import world_size
from ..output import files, replace
from ..records import Sample
from ..shards import ShardSamples, read_at, sha256_file, write_json_atomic, write_shard
from ..workspace import Workspace
from . import backends
from .ingest import ingest


def finalize(workspace: str | Path, *, include_pending: bool = False, progress: bool = False,
             publish_emails: bool = False, audit: audit_check.Options | None = audit_check.Options(),
             against: tuple[str, ...] = (), drop: bool = False, where: dict | None = None) -> dict:
    """Write the publishable ``dataset/``: accepted images per config, manifest and card.

    In double review an image's decision is :func:`review.verdicts`'s, not the latest one: images whose
    two reviewers disagree and that nobody adjudicated are held back (counted in a notice).

    Streams: the images of one output shard at a time are in memory. Each config's samples come from
    state.duckdb in key order (their provenance and class as ingested), each image from its candidate shard
    at its recorded offset; the card reads the written shards back (:class:`gensets.shards.ShardSamples`).

    Reviewers are published as the log resolves them (a Label Studio id as the person it names); an email as a
    pseudonym (:func:`review.published_reviewer`) unless ``publish_emails``, and the card says which.

    ``audit`` (None: no audit): the checks and thresholds of the audit stage (:mod:`gensets.audit`), against the
    set itself, the builder's declared references and ``against``; ``drop``: near-duplicates within the set are
    left out, one image of each group kept (the one reviewed first, else the first by key), all recorded in the
    manifest and the card. ``where``: where the audit computes what its cache lacks (:func:`backends.embedding_pool`'s
    backend, workers, address, gpus_per_worker; None: in this process).
    """
    ws = Workspace(workspace)
    builder, cfg = ws.load()  # before the lock: a mistyped path is an error, not a new folder
    if drop and audit is None:
        raise GensetsError("--drop near-duplicates needs the audit (leave out --no-audit)")
    if audit is not None:
        audit_check.check_options(audit)
    if world_size() > 1:
        raise GensetsError("finalize runs as one process, not under accelerate launch (its audit's embedding runs on "
                           "Ray workers with --backend ray; `gensets audit` runs under accelerate launch)")
    pool = backends.embedding_pool(audit.model, audit.allow_pickle, quiet=not progress, **(where or {})) \
        if audit is not None else None
    try:
        with ws.lock("finalize"):  # not while a build (or another finalize) writes the workspace
            return _finalize(ws, builder, cfg, include_pending, progress, publish_emails, audit, tuple(against), drop,
                             pool)
    finally:
        if pool is not None:
            pool.close()


def _finalize(ws: Workspace, builder, cfg, include_pending: bool, shown: bool, publish_emails: bool = False,
              audit: audit_check.Options | None = None, against: tuple[str, ...] = (), drop: bool = False,
              pool=None) -> dict:
    environments = _prepare(ws, builder, cfg)
    pseudonyms = None if publish_emails or not builder.needs_review else _pseudonym_key(ws)
    tmp = ws.root / f".dataset.tmp-{os.getpid()}"
    try:  # a finalize that fails (an image that does not decode, a reference refused) leaves no staged dataset
        with _snapshot(ws) as con:
            seen = _review_of(con, cfg)
            _say_held(seen)
            out = _Shards(ws, builder, con, tmp, pseudonyms)
            try:
                statuses = ["accepted", "relabeled"] + (["pending"] if include_pending else [])
                found = _audit(ws, builder, cfg, con, out, statuses, seen.verdicts, audit, against, drop, pool) \
                    if audit is not None else None
                _write_configs(con, builder, cfg, out, statuses, seen.verdicts, shown)
            finally:
                out.close()
        manifest = _manifest_of(ws, builder, cfg, include_pending, out, seen, environments, publish_emails)
        if found is not None:
            manifest["audit"] = _audit_figure(tmp, found)
        _write_card(ws, tmp, builder, cfg, manifest, out, shown)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _swap_in(ws, tmp)
    ws.push_dataset()
    if found is not None and ws.state_path.is_file():  # the review page's neighbours (state.duckdb)
        audit_run.record_neighbours(ws, found.result)
    _say_reviewers(builder, out, publish_emails)
    return {"dataset": ws.dataset_where, "counts": out.counts, "funnel": seen.funnel,
            "shards": len(out.shards), "include_pending": include_pending, "disputed": seen.disputed,
            **({"audit": _audit_counts(manifest["audit"])} if found is not None else {})}


def _prepare(ws: Workspace, builder, cfg) -> list[dict]:
    """The workspace ready to be read: leftovers cleaned, a store's markers synced, every unit of the build committed,
    state.duckdb ingested; returns the environments that built it (read, and checked, before anything is written)."""
    ws.clean_leftovers()
    ws.sync()  # on a store, state.duckdb (local) follows the commit markers; rebuilt from them when missing
    if not ws.has_build:
        raise GensetsError(f"{ws.where}: nothing built yet (no state.duckdb); run `gensets build` first")
    _check_complete(ws, builder, cfg)
    environments = _environments(ws)
    ingest(ws)
    return environments


def _check_complete(ws: Workspace, builder, cfg) -> None:
    """DataError when a unit of the build's plan has no committed shard (its manifest row; on a store, its commit
    marker): a dataset is made of every unit of its build, never of part of it."""
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


def _environments(ws: Workspace) -> list[dict]:
    """The environments that built the workspace's committed units, each with how many units it built
    (``units_without``: units committed before gensets recorded environments)."""
    built = {}
    for row in ws.manifest().iter_rows():
        built[row.get("env")] = built.get(row.get("env"), 0) + 1
    envs = ws.environments()
    return [{"id": eid, "units": n, "environment": envs.get(eid)} for eid, n in built.items()]


def _pseudonym_key(ws: Workspace) -> str:
    """The workspace's key for reviewers' pseudonyms (made, in state.duckdb, the first time)."""
    con = state.connect(ws.state_path)
    try:
        with transaction(con):
            return review.pseudonym_key(con)
    finally:
        con.close()


@contextlib.contextmanager
def _snapshot(ws: Workspace):
    """A read-only connection to a snapshot of state.duckdb, read for as long as the shards take: review servers and
    commands use state.duckdb meanwhile. The snapshot is removed after."""
    snap = state.snapshot(ws.state_path, ws.root / f".state.snapshot.tmp-{os.getpid()}")
    con = state.connect(snap, read_only=True)
    try:
        yield con
    finally:
        con.close()
        for leftover in (snap, Path(f"{snap}.wal")):
            leftover.unlink(missing_ok=True)


@dataclass
class _Review:
    """What review decided, as the dataset publishes it."""

    double: bool  # double review: an image's decision is its verdict
    summary: dict  # for the card (it reads the manifest, never state.duckdb)
    verdicts: dict  # key -> (status, label, reviewer, time) in double review, else empty
    funnel: dict
    disputed: int  # held back: its two reviewers disagree
    held: int  # rejected by its one reviewer so far


def _review_of(con, cfg) -> _Review:
    double = review.is_double(con)
    summary = review.summary(con)
    verdicts = review.verdicts(con) if double else {}
    funnel = state.funnel(con, {k: v[0] for k, v in verdicts.items()}, quality=bool(getattr(cfg, "quality", None)))
    return _Review(double, summary, verdicts, funnel, disputed=sum(v[0] == "disputed" for v in verdicts.values()),
                   held=sum(v[0] == "held" for v in verdicts.values()))


def _say_held(seen: _Review) -> None:
    if seen.double:
        notices.notice(f"double review: {seen.disputed} image(s) held back because their two reviewers disagree "
                       "(`gensets review agreement` lists them; agreeing decisions under other names settle "
                       f"one), {seen.held} rejected by their one reviewer so far")


class _Shards:
    """The dataset's shards as they are written into ``tmp`` (made empty): one output shard's samples at a time, each
    read from its candidate shard (whose bytes are checked once against the manifest) with its provenance from
    state.duckdb and its review decision; ``counts`` per config, ``names`` and ``emails`` of the reviewers published."""

    def __init__(self, ws: Workspace, builder, con, tmp: Path, pseudonyms: str | None):
        self.ws, self.builder, self.tmp, self.pseudonyms = ws, builder, tmp, pseudonyms
        self.audit: dict[str, dict] | None = None  # key -> its json.audit (the audit stage's)
        self.dropped: set[str] = set()  # near-duplicates left out (finalize --drop near-duplicates)
        self.metas = con.cursor()  # the provenance of one output shard at a time, by key, beside the sorted stream
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.shards: list[dict] = []
        self.counts: dict[str, int] = {}
        self.names: set[str] = set()  # the reviewer names the dataset publishes (json.review.reviewer)
        self.emails: set[str] = set()  # the reviewers among them that are emails (as pseudonyms unless publish_emails)
        self.recorded = {r.get("shard"): r.get("sha256") for r in ws.manifest().iter_rows()}
        self.checked: set[str] = set()  # candidate shards whose bytes were checked against the manifest's sha256

    def close(self) -> None:
        self.metas.close()

    def candidate(self, shard: str) -> Path:
        """The candidate shard, its bytes checked once against the sha256 manifest.jsonl recorded."""
        ws, recorded = self.ws, self.recorded
        path = ws.candidate(shard)
        if shard not in self.checked:
            if recorded.get(shard) is None or sha256_file(path) != recorded[shard]:
                raise DataError(f"{path}: not the bytes {ws.manifest_path} recorded (sha256 "
                                f"{str(recorded.get(shard))[:16]}...); the candidate shard changed after it "
                                "was built: restore it, or remove its manifest row and build again")
            ws.check_committed_shard(shard, path)  # on a store, ingest read its marker: it must say the shard
            self.checked.add(shard)
        return path

    def sample(self, row: tuple, meta: str) -> Sample:
        """One published sample: its image, provenance and review decision (a relabel applied)."""
        key, shard, offset, size, ext, cls, status, label, reviewer, time, label_before, several = row
        s = Sample(key, read_at(self.candidate(shard), offset, size, key), ext, cls, json.loads(meta))
        time = time.strftime("%Y-%m-%dT%H:%M:%SZ") if time else None
        before, reviewer = reviewer, review.published_reviewer(reviewer, self.pseudonyms)
        decision = {"status": status, "reviewer": reviewer, "time": time, "label_before": None,
                    "several_objects": bool(several)}
        if status == "relabeled" and label != label_before:
            s.cls, fields = self.builder.relabel(s.meta, label)
            s.meta.update(fields)
            decision["label_before"] = label_before
        s.meta["review"] = decision
        if self.audit is not None:
            s.meta["audit"] = self.audit[key]
        self.names.update(reviewer.split(" & ") if reviewer else ())
        self.emails.update(n for n in (before or "").split(" & ") if "@" in n)
        return s

    def flush(self, config: str, i: int, rows: list[tuple]) -> None:
        """Output shard ``i`` of ``config``: the samples of ``rows``."""
        meta = dict(self.metas.execute("SELECT key, meta FROM samples WHERE list_contains(?, key)",
                                       [[r[0] for r in rows]]).fetchall())
        samples = [self.sample(row, meta[row[0]]) for row in rows]
        rel = f"{config}/{self.builder.split}-{i:05d}.tar"
        (self.tmp / config).mkdir(exist_ok=True)
        info = write_shard(self.tmp / rel, [s.to_wds() for s in samples])
        self.shards.append({"path": rel, "config": config, "split": self.builder.split, "sha256": info.sha256,
                            "n": info.n, "nbytes": info.nbytes})


def _write_configs(con, builder, cfg, out: _Shards, statuses: list[str], verdicts: dict, shown: bool) -> None:
    """Each config's published samples, in shards of ``cfg.shard_size``; progress (images written) on a terminal."""
    bar = tqdm(desc="finalize", unit="img", disable=None if shown else True, file=sys.stderr, leave=False)
    for config in builder.config_names(cfg):
        out.counts[config] = 0
        rows: list[tuple] = []
        bar.set_postfix_str(config)
        for row in _published(con, config, statuses, verdicts):
            if row[0] in out.dropped:
                continue
            rows.append(row)
            out.counts[config] += 1
            bar.update(1)
            if len(rows) == cfg.shard_size:
                out.flush(config, (out.counts[config] - 1) // cfg.shard_size, rows)
                rows = []
        if rows:
            out.flush(config, (out.counts[config] - 1) // cfg.shard_size, rows)
    bar.close()


def _published(con, config: str, statuses: list[str], verdicts: dict):
    """The samples of ``config`` that go into the dataset, in key order, a batch at a time: ``(key, shard, byte
    offset, size, ext, class index, status, label, reviewer, time, label before, several objects)``; in double
    review the status, label, reviewer and time are the image's verdict's (``verdicts``), and several objects is
    whether one of its reviewers' latest decisions flagged it (single review: the decision's note). (No
    provenance: DuckDB sorts narrow rows.)"""
    import pyarrow as pa

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


@dataclass
class _Audited:
    """What the audit stage found: the result over the published images, its summary, and the sets (for the
    figure's images)."""

    result: audit_check.Result
    summary: dict
    target: ImageSet
    references: list


def _audit(ws: Workspace, builder, cfg, con, out: _Shards, statuses: list[str], verdicts: dict,
           options: audit_check.Options, against: tuple[str, ...], drop: bool, pool=None) -> _Audited:
    """The published images' neighbours within the set and in each reference (the builder's declared ones, which
    are skipped with a warning when they cannot be read, and ``against``); with ``drop``, the near-duplicate groups
    and the image each keeps, and the neighbours again among the images that stay. Sets ``out.audit`` and
    ``out.dropped``."""
    keys, configs, where, reviewed = [], [], [], {}
    for config in builder.config_names(cfg):
        for key, shard, offset, size, ext, _cls, _status, _label, reviewer, time, *_ in _published(
                con, config, statuses, verdicts):
            keys.append(key)
            configs.append(config)
            where.append((shard, offset, size, key, ext))
            reviewed[key] = time if reviewer else None
    target = ImageSet("self", ws.where, keys, configs,
                      lambda i: read_at(out.candidate(where[i][0]), *where[i][1:4]),
                      lambda i: f"{ws.candidate(where[i][0])}: {where[i][3]}.{where[i][4]}")
    refs, skipped = audit_run.open_references(list(against))
    named = {r.name for r in refs}
    declared = [f"{n}={src}" for n, src in builder.audit_references(cfg).items() if n not in named]
    more, skipped = audit_run.open_references(declared, config_bases(cfg), required=False)
    refs += more
    embedder = audit_run.load_model(options, pool)
    cache = Cache()
    try:
        feats = audit_run.features_of([target, *refs], embedder, cache, pool=pool)
    finally:
        cache.close()
    pairs_of = list(zip(refs, feats[1:], strict=True))
    result = audit_check.find(keys, configs, feats[0], pairs_of, options)
    dropped = None
    if drop:
        kept = audit_check.keepers(audit_check.groups(result), reviewed)
        out.dropped = {k for g in kept for k in g["dropped"]}
        dropped = {"groups": kept, "images": len(out.dropped)}
        if out.dropped:
            notices.notice(f"finalize: {len(out.dropped)} near-duplicate image(s) left out, one image of each of "
                           f"{len(kept)} group(s) kept (manifest.json's audit.dropped names them)")
            result = audit_check.without((keys, configs, feats[0]), out.dropped, options, pairs_of)
    out.audit = result.by_key()
    summary = audit_check.summary(result, options, embedder, skipped=skipped, dropped=dropped)
    return _Audited(result, summary, target, refs)


def _audit_figure(tmp: Path, found: _Audited) -> dict:
    """The figure of the closest pairs (figures/duplicates.png, when there is a pair), in the staged dataset; the
    manifest's ``audit`` with its path."""
    summary = dict(found.summary)
    with files(tmp) as staged:
        drawn = audit_run.figure(staged.path(audit_run.FIGURE), found.result.pairs, found.target, found.references)
    summary["figure"] = audit_run.FIGURE if drawn else None
    return summary


def _audit_counts(summary: dict) -> dict:
    """finalize's answer: the pairs found per reference, and the images dropped."""
    return {"pairs": summary["pairs"]["by_reference"], "dropped": (summary.get("dropped") or {}).get("images", 0),
            "skipped": [s["name"] for s in summary.get("skipped", [])]}


def _manifest_of(ws: Workspace, builder, cfg, include_pending: bool, out: _Shards, seen: _Review,
                 environments: list[dict], publish_emails: bool) -> dict:
    """``manifest.json``: the build, the counts and funnel, the shards, the environments; with review: its summary
    (and whether emails are published); the random-weight models, if any."""
    manifest = {"builder": builder.name, "build": ws.fingerprint, "include_pending": include_pending,
                "counts": out.counts, "funnel": seen.funnel, "shards": out.shards, "environments": environments}
    if builder.needs_review:
        manifest["review"] = seen.summary
        if out.emails:  # what the card says of people
            manifest["review"]["emails"] = "published" if publish_emails else "pseudonymised"
    random = sorted({spec for _, spec in builder.models(cfg) if str(spec).startswith("random:")})
    if random:  # full-size architectures with random weights: timing runs, not data (publish refuses them)
        manifest["random_models"] = random
    return manifest


def _write_card(ws: Workspace, tmp: Path, builder, cfg, manifest: dict, out: _Shards, shown: bool) -> None:
    """``manifest.json``, then the card (README.md + figures/) read from the written shards; an image of the card's
    figures that does not decode is a DataError naming the candidate shard it came from."""
    write_json_atomic(tmp / "manifest.json", manifest)
    samples = ShardSamples([tmp / s["path"] for s in out.shards], n=sum(out.counts.values()))
    try:
        card.write(tmp, builder, cfg, manifest, samples, ws.fingerprint, progress=shown)  # README.md + figures/
    except DataError as e:  # an image of the card's figures that does not decode: named where it came from
        if getattr(e, "sample", None) is None:
            raise
        key, ext = e.sample
        raise DataError(f"{_candidate_of(ws, key) or '?'}: {key}.{ext}: {e.why}") from None


def _candidate_of(ws: Workspace, key: str) -> Path | None:
    """The candidate shard that holds sample ``key`` (state.duckdb's images), for an error that names it."""
    con = state.connect(ws.state_path, read_only=True)
    try:
        row = con.execute("SELECT shard FROM images WHERE key = ?", [key]).fetchone()
    finally:
        con.close()
    return ws.candidates / row[0] if row and isinstance(row[0], str) else None


def _swap_in(ws: Workspace, tmp: Path) -> None:
    """The new folder as ``dataset/``: the old dataset stays whole until the new one is complete."""
    old = ws.root / f".dataset.old-{os.getpid()}"
    if ws.dataset.exists():
        replace(ws.dataset, old)
    replace(tmp, ws.dataset)
    shutil.rmtree(old, ignore_errors=True)


def _say_reviewers(builder, out: _Shards, publish_emails: bool) -> None:
    """Once the dataset is published: what it says of people."""
    if builder.needs_review and out.names:
        notices.notice(f"reviewer names published in each sample's json.review.reviewer: {', '.join(sorted(out.names))}"
                       + ((" (emails published: --publish-emails)" if publish_emails else " (emails as pseudonyms; "
                           "finalize --publish-emails publishes them)") if out.emails else ""))
