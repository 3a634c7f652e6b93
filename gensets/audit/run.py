"""``gensets audit`` and finalize's audit stage: the sets opened, their features extracted (cached), the search
(:mod:`gensets.audit.check`), the figure of the closest pairs, and the neighbours recorded where the review page
reads them (state.duckdb's ``audit_neighbours``: per image, its flagged neighbours)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import notices
from ..cards import figures
from ..curation import state
from ..db import transaction
from ..errors import GensetsError
from ..images import decode_image
from ..models.device import distributed
from ..workspace import Workspace, is_workspace
from . import check
from .features import Cache, extract
from .sources import ImageSet, candidates, config_bases, dataset_folder, open_set

FIGURE = "figures/duplicates.png"
FIGURE_PAIRS = 6  # the closest pairs the card's figure shows


@dataclass
class Audit:
    """An audit done: the set, its references, the result and its summary (the manifest's ``audit``)."""

    target: ImageSet
    references: list[ImageSet]
    result: check.Result
    summary: dict
    options: check.Options


def reference_name(spec: str, taken: set[str]) -> tuple[str, str]:
    """``NAME=SOURCE`` -> (name, source); a bare source is named after its last path part."""
    name, sep, source = spec.partition("=")
    if not sep or "/" in name or name.startswith(("hf", ".")):
        name, source = Path(spec.rstrip("/").split(":")[-1]).name or "reference", spec
    if name == "self" or name in taken:
        raise GensetsError(f"--against {spec}: the reference name {name!r} is taken; name it: --against NAME={source}")
    return name, source


def open_references(specs: list[str], bases: tuple[Path, ...] = (), *, required: bool = True) -> tuple[list, list]:
    """The reference sets ``specs`` name (``[NAME=]SOURCE``); with ``required`` False, one that cannot be read is
    skipped, said in a notice and returned among the skipped (``[{name, source, why}]``)."""
    refs, skipped, taken = [], [], set()
    for spec in specs:
        name, source = reference_name(spec, taken)
        taken.add(name)
        try:
            refs.append(open_set(source, name, bases))
        except GensetsError as e:
            if required:
                raise
            why = str(e).splitlines()[0][:200]
            notices.warn(f"audit: reference {name} ({source}) not checked: {why}")
            skipped.append({"name": name, "source": source, "why": why})
    return refs, skipped


def load_model(o: check.Options, pool=None):
    """The embedder ``o`` names (None: no embedding); with a ``pool`` (Ray workers embed) on the CPU, for its id."""
    if not o.model:
        return None
    from ..models.embedder import load_embedder  # lazy: torch, only when an embedding is asked for

    return load_embedder(o.model, allow_pickle=o.allow_pickle, device="cpu" if pool is not None else None)


def features_of(sets: list[ImageSet], embedder, cache: Cache, log=None, *, pool=None, dist=None) -> list | None:
    """Each set's features (:func:`extract`): in this process, on ``pool``'s workers, or each process of ``dist``
    its share; None on a process of ``accelerate launch`` other than process 0."""
    out = []
    for s in sets:
        f = extract(s, cache, embedder, pool=pool, dist=dist)
        if f is None:
            continue
        if log:
            log(f"{s.name}: {len(s)} images ({f.counts['cached']} from the cache, {f.counts['hashed']} hashed, "
                f"{f.counts['embedded']} embedded)")
        out.append(f)
    return out if len(out) == len(sets) else None


def target_set(target: str) -> tuple[ImageSet, Workspace | None]:
    """What ``gensets audit TARGET`` reads: a workspace's dataset/ (finalized), else its committed candidates; a
    dataset folder; a folder of images."""
    path = Path(target)
    if not path.is_dir():
        raise GensetsError(f"{target}: no such folder (give a workspace, a dataset folder or a folder of images)")
    if is_workspace(path):
        ws = Workspace(path)
        if (ws.dataset / "manifest.json").is_file():
            return dataset_folder(ws.dataset, "self", target), ws
        return candidates(ws), ws
    return open_set(target, "self"), None


def audit(target: str, against: list[str], o: check.Options, *, log=None, cache: Cache | None = None,
          pool=None) -> Audit | None:
    """``gensets audit``: the set ``target`` and every ``--against`` reference; a workspace also declares its
    builder's references (GenBench: the real test set) and gets its neighbours recorded in state.duckdb.

    What the cache lacks is computed on ``pool`` (``--backend ray``), else here; under ``accelerate launch`` each
    process computes its share and process 0 does the rest (the others return None)."""
    o = check.check_options(o)
    s, ws = target_set(target)
    refs, skipped = open_references(list(against))
    if ws is not None:  # the references the workspace's builder declares (GenBench: the real test set)
        builder, cfg = ws.load()
        named = {r.name for r in refs}
        declared = [f"{n}={src}" for n, src in builder.audit_references(cfg).items() if n not in named]
        more, skipped = open_references(declared, config_bases(cfg), required=False)
        refs += more
    embedder = load_model(o, pool)
    dist = distributed()
    cache = cache or Cache()
    try:
        feats = features_of([s, *refs], embedder, cache, log if dist.rank == 0 else None, pool=pool, dist=dist)
    finally:
        cache.close()
    if feats is None:
        return None
    result = check.find(s.keys, s.configs, feats[0], list(zip(refs, feats[1:], strict=True)), o)
    a = Audit(s, refs, result, check.summary(result, o, embedder, skipped=skipped), o)
    if ws is not None and ws.state_path.is_file():
        record_neighbours(ws, result)
    return a


NEIGHBOURS_SCHEMA = """CREATE TABLE IF NOT EXISTS audit_neighbours (
    key VARCHAR, reference VARCHAR, method VARCHAR, neighbour VARCHAR, source VARCHAR, hamming INTEGER,
    cosine DOUBLE, duplicate BOOLEAN)"""


def record_neighbours(ws: Workspace, result: check.Result) -> int:
    """The flagged neighbours of every image, in state.duckdb's ``audit_neighbours`` (replaced whole): the review
    page shows a flagged image's neighbour from it (``source``: where the neighbour is, ``self`` for an image of the
    workspace, else the reference's source)."""
    import pyarrow as pa

    sources = {r["name"]: r["source"] for r in result.references}
    rows = [{"key": result.keys[i], "reference": e["reference"], "method": e["method"], "neighbour": e["key"],
             "source": "self" if e["reference"] == "self" else sources.get(e["reference"]), "hamming": e["hamming"],
             "cosine": e["cosine"], "duplicate": e["duplicate"]}
            for i, entries in enumerate(result.neighbours) for e in entries if e["duplicate"]]
    table = pa.Table.from_pylist(rows, schema=pa.schema([
        ("key", pa.string()), ("reference", pa.string()), ("method", pa.string()), ("neighbour", pa.string()),
        ("source", pa.string()), ("hamming", pa.int32()), ("cosine", pa.float64()), ("duplicate", pa.bool_())]))
    con = state.connect(ws.state_path)
    try:
        with transaction(con):
            con.execute(NEIGHBOURS_SCHEMA)
            con.execute("DELETE FROM audit_neighbours")
            con.register("_rows", table)
            try:
                con.execute("INSERT INTO audit_neighbours SELECT * FROM _rows")
            finally:
                con.unregister("_rows")
    finally:
        con.close()
    return len(rows)


def figure(path: Path, pairs: list[dict], target: ImageSet, refs: list[ImageSet], extra=None) -> bool:
    """The closest pairs side by side (an image and its neighbour, each titled with its key, the pair with its
    reference and distances) as ``path``; ``extra(key) -> bytes``: images of the set not in ``target`` (finalize:
    read from the candidates). False when there is no pair."""
    shown = pairs[:FIGURE_PAIRS]
    if not shown:
        return False
    where = {("self", k): i for i, k in enumerate(target.keys)}
    by_name = {r.name: r for r in refs}
    for r in refs:
        where.update({(r.name, k): i for i, k in enumerate(r.keys)})

    def image(ref: str, key: str):
        s = target if ref == "self" else by_name[ref]
        i = where.get((ref, key))
        data = s.read(i) if i is not None else (extra(key) if extra else None)
        return decode_image(data) if data is not None else None

    rows = []
    for p in shown:
        how = ", ".join(f"{m} {v}" if m != "exact" else "exact" for m, v in p["methods"].items())
        rows.append((image("self", p["key"]), p["key"], image(p["reference"], p["neighbour"]),
                     f"{p['reference']}: {p['neighbour']}", how))
    figures.pairs(rows, path)
    return True
