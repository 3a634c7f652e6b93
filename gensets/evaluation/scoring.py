"""``gensets score``: image-quality and alignment metrics (gensets.quality) of a dataset or workspace, into DuckDB.

Tables of the results database (beside ``gensets eval``'s runs / predictions / metrics):

    scores           one row per (image, metric): dataset, revision, config, split, key, generator, metric,
                     variant, models (role -> spec), commits (role -> commit loaded), value
    score_summaries  one row per (config, split, metric row): n, value (per-image metrics: the mean), a
                     percentile bootstrap interval (per-image metrics: ``gensets.metrics.bootstrap_ci``, seeded),
                     the reference set of set-level metrics, details (KID's std and subset size, IS's splits, ...)

A run replaces, in one transaction at its end, every row of the (dataset, revision, config, split, metric) it
scored: a second run never duplicates rows, and a run that is killed or fails leaves the previous ones whole.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..db import transaction
from ..errors import DataError, GensetsError
from ..images import decode_image, is_image_file
from ..progress import bar as progress
from ..quality.metrics import Models
from ..records import generator_label
from ..registry import QUALITY_METRICS
from ..safety import inside, read_regular
from . import store
from .data import open_source
from .store import SCORES_SCHEMA as SCHEMA

SUMMARY_COLUMNS = ["dataset", "revision", "config", "split", "metric", "name", "level", "variant", "models", "commits",
                   "reference", "generators", "n", "value", "lo", "hi", "higher_is_better", "details", "scored"]


def connect(path, read_only: bool = False):
    """The results database with the score tables (gensets.evaluation.store.connect)."""
    con = store.connect(path, read_only=read_only)
    if not read_only:
        con.execute(SCHEMA)
    return con


@dataclass(frozen=True)
class ScoreConfig:
    """What ``gensets score`` computes. ``models``: metric -> {role: spec} replacing the metric's defaults;
    ``reference``: real images for FID / KID / precision-recall (a folder of images, a workspace, a dataset
    folder, a shard glob or a hub id); ``pairs``: the folder where each image's init image (RA / img2img:
    ``json.prompting.init_image``) lies, for PSNR / SSIM."""

    dataset: str
    metrics: tuple[str, ...]
    db: str | Path
    models: dict = field(default_factory=dict)
    reference: str | None = None
    pairs: str | None = None
    config: str | None = None
    split: str | None = None
    batch_size: int = 16
    limit: int | None = None
    quiet: bool = False
    allow_pickle: bool = False
    trust_remote_code: bool = False
    seed: int = 0
    n_resamples: int = 1000
    device: str | None = None


def parse_models(items: list[str] | None, metrics: list[str]) -> dict[str, dict[str, str]]:
    """``--model METRIC[.ROLE]=SPEC`` options -> {metric: {role: spec}} (no ROLE: the metric's first role)."""
    out: dict[str, dict[str, str]] = {}
    for item in items or []:
        target, sep, spec = item.partition("=")
        name, _, role = target.partition(".")
        if not sep or not spec or name not in QUALITY_METRICS:
            raise GensetsError(f"--model {item!r}: expected METRIC[.ROLE]=SPEC with METRIC one of "
                               f"{', '.join(QUALITY_METRICS)}")
        if name not in metrics:
            raise GensetsError(f"--model {item!r}: metric {name!r} is not scored (add --metric {name})")
        role = role or next(iter(QUALITY_METRICS.get(name).roles), "")
        out.setdefault(name, {})[role] = spec
    return out


def _batches(records, size: int, limit: int | None):
    it = itertools.islice(records, limit) if limit else records
    while batch := list(itertools.islice(it, size)):
        yield batch


def _reference_batches(ref: str, size: int):
    """Batches of the reference images: every image file under a plain folder, else every image of a source."""
    path = Path(ref)
    if path.is_dir() and not (path / "config.yaml").exists() and not (path / "README.md").exists() \
            and not any(path.rglob("*.tar")):
        files = sorted(f for f in path.rglob("*") if f.is_file() and is_image_file(f))
        if not files:
            raise GensetsError(f"--reference {ref}: no image files")
        for i in range(0, len(files), size):
            out = []
            for f in files[i : i + size]:
                try:
                    out.append(decode_image(f.read_bytes()))
                except Exception as e:
                    raise DataError(f"--reference {f}: cannot read image: {e}") from None
            yield out
        return
    for sp in open_source(ref).splits:
        for batch in _batches(sp.records(), size, None):
            yield [r["image"] for r in batch]


def _pair(pairs: Path, meta: dict, key: str):
    """The init image of a sample (RA / img2img), checked against its recorded sha256; None when it has none."""
    p = meta.get("prompting") or {}
    name = p.get("init_image") or meta.get("init_image")
    if not name:
        return None
    where = f"sample {key}: json.prompting.init_image"
    f = inside(pairs, name, where)  # a path from the sample's metadata: never out of --pairs
    if not f.is_file():
        raise DataError(f"sample {key}: its init image {name!r} is not in --pairs {pairs}")
    data = read_regular(f, where)
    want = p.get("init_image_sha256") or meta.get("init_image_sha256")
    if want and hashlib.sha256(data).hexdigest() != want:
        raise DataError(f"sample {key}: {f} is not the init image it was generated from (sha256 differs)")
    return decode_image(data)


def score(cfg: ScoreConfig) -> list[dict]:
    """Score every metric on every (config, split) of ``cfg.dataset``; write the rows; return the summaries."""
    import numpy as np

    from .. import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the reports)

    unknown = [m for m in cfg.metrics if m not in QUALITY_METRICS]
    if unknown or not cfg.metrics:
        raise GensetsError(f"unknown metric {unknown[0] if unknown else ''!r} (known: {', '.join(QUALITY_METRICS)})")
    models = Models(allow_pickle=cfg.allow_pickle, trust_remote_code=cfg.trust_remote_code, device=cfg.device)
    metrics = {name: QUALITY_METRICS.get(name)(models, cfg.models.get(name)) for name in dict.fromkeys(cfg.metrics)}
    for name, m in metrics.items():
        if "reference" in m.needs and not cfg.reference:
            raise GensetsError(f"metric {name!r} compares with real images: pass --reference FOLDER_OR_DATASET")
        if "pair" in m.needs and not cfg.pairs:
            raise GensetsError(f"metric {name!r} compares each image with its init image: pass --pairs FOLDER")
    source = open_source(cfg.dataset, cfg.config, cfg.split)  # a missing dataset fails before any model loads
    for m in metrics.values():
        m.load()
    provenance = {name: m.provenance() for name, m in metrics.items()}
    per_image = {n: m for n, m in metrics.items() if m.level == "image"}
    per_set = {n: m for n, m in metrics.items() if m.level == "set"}
    extractors = {m.feature_key(): m for m in per_set.values()}  # metrics with one key share the extraction
    ref_features = _reference_features(cfg, per_set, cfg.quiet) if any("reference" in m.needs for m in per_set.values()) else {}
    pairs = Path(cfg.pairs) if cfg.pairs else None
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    rows, summaries, done = [], [], []
    for sp in source.splits:
        values = {n: [] for n in per_image}  # (key, generator, value)
        feats: dict = {}
        labels, generators = [], set()
        total = min(sp.n, cfg.limit) if sp.n and cfg.limit else (sp.n or cfg.limit)
        bar = progress(total=total, desc=f"score {sp.config}/{sp.split}", unit="img", disable=cfg.quiet)
        for batch in _batches(sp.records(), cfg.batch_size, cfg.limit):
            images = [r["image"] for r in batch]
            metas = [{**r["meta"], "key": r["key"]} for r in batch]
            gens = [generator_label(m) for m in metas]
            generators.update(gens)
            labels += [r["target"] if r["target"] is not None else r["meta"].get("label") for r in batch]
            for name, m in per_image.items():
                idx = list(range(len(batch)))
                if "pair" in m.needs:
                    for i in idx:
                        metas[i]["pair"] = _pair(pairs, metas[i], batch[i]["key"])
                    idx = [i for i in idx if metas[i]["pair"] is not None]
                if idx:
                    got = m.score([images[i] for i in idx], [metas[i] for i in idx])
                    values[name] += [(batch[i]["key"], gens[i], float(v)) for i, v in zip(idx, got, strict=True)]
            for k, m in extractors.items():
                for name, a in m.extract(images).items():
                    feats.setdefault(k, {}).setdefault(name, []).append(a)
            bar.update(len(batch))
        bar.close()
        if not labels:
            continue
        where = {"dataset": source.id, "revision": source.revision, "config": sp.config, "split": sp.split}
        gen_json = json.dumps(sorted(generators))
        for name, vals in values.items():
            common = {"metric": name, **_columns(provenance[name])}
            rows += [{**where, "key": key, "generator": g, **common, "value": v} for key, g, v in vals]
            done.append((sp.config, sp.split, name))
            if not vals:
                continue
            v = np.array([x[2] for x in vals])
            lo, hi = M.bootstrap_ci(v, np.mean, cfg.n_resamples, 0.95, cfg.seed)
            summaries.append({**where, **common, "name": name, "level": "image", "reference": None,
                              "generators": gen_json, "n": len(v), "value": float(v.mean()), "lo": lo, "hi": hi,
                              "higher_is_better": metrics[name].higher_is_better,
                              "details": json.dumps({"bootstrap": {"n_resamples": cfg.n_resamples, "seed": cfg.seed,
                                                                   "confidence": 0.95}}), "scored": now})
        gen_feats = {k: {n: np.concatenate(v) for n, v in d.items()} for k, d in feats.items()}
        for name, m in per_set.items():
            try:
                out = m.compute(gen_feats[m.feature_key()], labels,
                                ref_features.get(m.feature_key()) if "reference" in m.needs else None)
            except ValueError as e:  # too few images for this metric
                raise GensetsError(f"metric {name!r} on {sp.config}/{sp.split}: {e}") from None
            done.append((sp.config, sp.split, name))
            for row_name, d in out.items():
                summaries.append({**where, "metric": name, "name": row_name, "level": "set",
                                  **_columns(provenance[name]), "reference": cfg.reference if "reference" in m.needs else None,
                                  "generators": gen_json, "n": len(labels), "value": float(d["value"]),
                                  "lo": None, "hi": None, "higher_is_better": m.higher_is_better,
                                  "details": json.dumps({k: v for k, v in d.items() if k != "value"}), "scored": now})
    con = connect(cfg.db)
    try:
        write(con, source.id, source.revision, done, rows, summaries)
    finally:
        con.close()
    return summaries


def _columns(provenance: dict) -> dict:
    """The provenance columns of a score row: the variant, models and commits (JSON)."""
    return {"variant": provenance["variant"], "models": json.dumps(provenance["models"], sort_keys=True),
            "commits": json.dumps(provenance["commits"], sort_keys=True)}


def _reference_features(cfg: ScoreConfig, per_set: dict, quiet: bool = False) -> dict:
    """What the set-level metrics that need real images extract from ``cfg.reference``, once per feature key (a bar:
    at paper scale the longest stage)."""
    import numpy as np

    wanted = {m.feature_key(): m for m in per_set.values() if "reference" in m.needs}
    out: dict = {}
    bar = progress(total=None, desc=f"reference features {cfg.reference}", unit="img", disable=quiet)
    for batch in _reference_batches(cfg.reference, cfg.batch_size):
        for k, m in wanted.items():
            for name, a in m.extract(batch).items():
                out.setdefault(k, {}).setdefault(name, []).append(a)
        bar.update(len(batch))
    bar.close()
    return {k: {n: np.concatenate(v) for n, v in d.items()} for k, d in out.items()}


def write(con, dataset: str, revision: str | None, done: list[tuple[str, str, str]], rows: list[dict],
          summaries: list[dict]) -> None:
    """Replace the rows of every scored (config, split, metric) of this dataset revision, in one transaction."""
    import pyarrow as pa

    score_table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("dataset", pa.string()), ("revision", pa.string()), ("config", pa.string()), ("split", pa.string()),
        ("key", pa.string()), ("generator", pa.string()), ("metric", pa.string()), ("variant", pa.string()),
        ("models", pa.string()), ("commits", pa.string()), ("value", pa.float64())]))
    summary_table = pa.Table.from_pylist(summaries, schema=pa.schema([
        ("dataset", pa.string()), ("revision", pa.string()), ("config", pa.string()), ("split", pa.string()),
        ("metric", pa.string()), ("name", pa.string()), ("level", pa.string()), ("variant", pa.string()),
        ("models", pa.string()), ("commits", pa.string()), ("reference", pa.string()), ("generators", pa.string()),
        ("n", pa.int32()), ("value", pa.float64()), ("lo", pa.float64()), ("hi", pa.float64()),
        ("higher_is_better", pa.bool_()), ("details", pa.string()), ("scored", pa.timestamp("us"))]))
    done_table = pa.table({"config": [d[0] for d in done], "split": [d[1] for d in done],
                           "metric": [d[2] for d in done]})
    with transaction(con):
        con.register("_done", done_table)
        for table in ("scores", "score_summaries"):
            con.execute(f"DELETE FROM {table} t USING _done d WHERE t.dataset = ? AND t.revision IS NOT DISTINCT FROM ? "
                        "AND t.config = d.config AND t.split = d.split AND t.metric = d.metric", [dataset, revision])
        con.unregister("_done")
        for table, data in (("scores", score_table), ("score_summaries", summary_table)):
            if data.num_rows:
                con.register("_incoming", data)
                con.execute(f"INSERT INTO {table} SELECT * FROM _incoming")
                con.unregister("_incoming")


def build_scores(db, configs: list[str], build_id: str) -> list[dict]:
    """The per-image scores of a build (rows whose revision is the build's fingerprint) for its card."""
    import duckdb

    con = connect(db, read_only=True)
    try:
        try:
            cur = con.execute("SELECT config, key, metric, value, generator FROM scores WHERE revision = ? AND "
                              "list_contains(?, config) ORDER BY config, metric, key", [build_id, list(configs)])
        except duckdb.CatalogException:  # a database without score tables
            return []
        return [dict(zip(("config", "key", "metric", "value", "generator"), r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def summaries(db, datasets: list[tuple[str, str | None]] | None = None, metrics: list[str] | None = None) -> list[dict]:
    """The score summaries of a results database, of these (dataset, revision) pairs and metrics when given."""
    import duckdb

    con = connect(db, read_only=True)
    try:
        try:
            cur = con.execute(f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM score_summaries "
                              "ORDER BY dataset, revision, config, split, metric, name")
        except duckdb.CatalogException:
            raise GensetsError(f"{db}: no quality scores (run `gensets score ... --db {db}` first)") from None
        rows = [dict(zip(SUMMARY_COLUMNS, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    if datasets is not None:
        rows = [r for r in rows if (r["dataset"], r["revision"]) in set(datasets)]
    if metrics:
        rows = [r for r in rows if r["metric"] in metrics]
    return rows
