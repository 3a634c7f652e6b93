"""``gensets leaderboard --models``: score a list of models on datasets, then write the leaderboard as files a Hub
repo can host: ``leaderboard.md``, ``leaderboard.html`` (one self-contained page), ``leaderboard.parquet`` and
``leaderboard.csv``.

Each (model, dataset) goes through :func:`gensets.evaluation.runner.evaluate`, which skips the runs the database
holds complete already: a second call is a resume. One row per run (config, split, protocol), with top-1's 95%
bootstrap interval, the answers top-1 counts of the run's n (``counted``: two-way's TRUE / (TRUE + FALSE) leaves out
the answers naming both options or neither; ``two_way_all`` beside top-1 counts them wrong) and whether its numbers
are noise (``random_weights``: a ``tiny:`` or ``random:`` model, or images one generated), which every file says. The files name a dataset by its Hub id, or a local one by the name given (``NAME=PATH``) or
its folder's name, never by a local path. A dataset built by a failure filter (ImageNet-D) records its surrogate
classifiers in each sample's provenance (``surrogates[].model``); a model listed there is marked ``surrogate``:
its score is biased low by the selection and is not comparable with the held-out models'.

A model list is a YAML file (``models: [{spec, protocol?, clip?, decoding?, allow_pickle?, family?, hub_id?}]``,
and / or ``models_from: {config: BUILD.yaml, protocol?, ...}``: the ``eval.models`` of a build config, relative to
the list), the name of one shipped in ``gensets/data/leaderboards/`` (:data:`SHIPPED`), or model specs separated by
commas. :func:`eval_results`: each model's Hub ``.eval_results`` entries (top-1 per dataset, config and split).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..cards.markdown import table as markdown_table
from ..config import load_config
from ..errors import GensetsError
from ..output import claim
from ..output import files as staged_files
from ..records import slug
from ..safety import csv_cell
from ..store import is_url
from ..workspace import load_build_config
from . import store
from .data import open_source
from .runner import EvalConfig, evaluate

# the model lists shipped with gensets: --models NAME, each YAML file of gensets/data/leaderboards/ named by its
# stem ("_" -> "-"), in name order
SHIPPED = {f.name.removesuffix(".yaml").replace("_", "-"): f.name for f in
           sorted(resources.files("gensets.data").joinpath("leaderboards").iterdir(), key=lambda f: f.name)
           if f.name.endswith(".yaml")}
COLUMNS = ["dataset", "revision", "config", "split", "model", "protocol", "n", "counted", "top1", "top1_lo", "top1_hi",
           "two_way_all", "top5", "mean_per_class", "masked_top1", "surrogate", "random_weights"]
# the results database's record of each scored dataset: its public name and its surrogates
NAMES = """CREATE TABLE IF NOT EXISTS leaderboard_datasets (
    dataset VARCHAR, revision VARCHAR, name VARCHAR, surrogates JSON)"""
FOOTNOTE = ("† a surrogate: a model whose failures selected this dataset's images; its score is biased low by "
            "construction, compare the held-out models.")
RANDOM = ("‡ random weights: a `tiny:` or `random:` model, or images one generated; these numbers are noise, a test "
          "of the path only.")
TWO_WAY = ("counted / n: the answers top-1 counts of the run's n; two-way (TRUE / (TRUE + "
           "FALSE)) leaves out those naming both options or neither, which two-way all counts wrong.")


@dataclass(frozen=True)
class Entry:
    """One model of a list, with how ``gensets eval`` scores it (None: the protocol chosen per model)."""

    spec: str
    protocol: str | None = None
    clip: str | None = None
    decoding: str = "authors"
    allow_pickle: bool = False
    family: str | None = None  # the paper's name for it, for the reader
    hub_id: str | None = None  # its Hub repo, whose .eval_results entry --eval-results writes


@dataclass(frozen=True)
class ModelsFrom:
    """More models: a build config's ``eval.models`` (its path relative to the list), each scored as these say."""

    config: str
    protocol: str | None = None
    clip: str | None = None
    decoding: str = "authors"
    allow_pickle: bool = False


@dataclass(frozen=True)
class ModelList:
    models: tuple[Entry, ...] = ()
    models_from: ModelsFrom | None = None


@dataclass(frozen=True)
class Plan:
    """What ``gensets leaderboard --models`` scores, and where it writes."""

    models: tuple[Entry, ...]
    datasets: tuple[str, ...]  # each a dataset argument of gensets eval, or NAME=that
    db: str | Path
    out: str | Path
    config: str | None = None
    split: str | None = None
    batch_size: int = 32
    limit: int | None = None
    allow_pickle: bool = False
    quiet: bool = False
    eval_results: bool = False  # also each model's Hub .eval_results entries (:func:`eval_results`)


def load_models(arg: str) -> tuple[Entry, ...]:
    """The model list ``arg`` names: a YAML file, a shipped list's name, or specs separated by commas."""
    if arg in SHIPPED:
        with resources.as_file(resources.files("gensets.data").joinpath("leaderboards", SHIPPED[arg])) as path:
            models = load_config(ModelList, path).models
    elif arg.endswith((".yaml", ".yml")) or Path(arg).is_file():
        if not Path(arg).is_file():
            raise GensetsError(f"--models {arg}: no such file (shipped lists: {', '.join(SHIPPED)})")
        listed = load_config(ModelList, arg)
        models = listed.models + (_models_from(listed.models_from, Path(arg)) if listed.models_from else ())
    else:
        models = tuple(Entry(s.strip()) for s in arg.split(",") if s.strip())
    if not models:
        raise GensetsError(f"--models {arg}: no models")
    return tuple({m.spec: m for m in reversed(models)}[s] for s in dict.fromkeys(m.spec for m in models))


def _models_from(m: ModelsFrom, listed: Path) -> tuple[Entry, ...]:
    _, build = load_build_config(listed.parent / m.config)
    specs = build.eval.models if getattr(build, "eval", None) else ()
    if not specs:
        raise GensetsError(f"{listed}: models_from: {m.config} lists no eval.models")
    return tuple(Entry(spec, m.protocol, m.clip, m.decoding, m.allow_pickle) for spec in specs)


def dataset_arg(arg: str) -> tuple[str | None, str]:
    """(name, dataset) of a --dataset: ``NAME=DATASET`` names it in the files, else (None, arg)."""
    name, eq, rest = arg.partition("=")
    if eq and re.fullmatch(r"[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?", name) and not Path(arg).exists():
        return name, rest
    return None, arg


def hub_named(arg: str) -> bool:
    """Whether a --dataset names its dataset by a Hub id (``org/name``, ``hf:org/name``, ``ORG/NAME=PATH``)."""
    name, dataset = dataset_arg(arg)
    if name is not None:
        return "/" in name
    return not is_local(dataset) and "/" in dataset.removeprefix("hf:")


def is_local(dataset: str) -> bool:
    """Whether a run's dataset id is a path of this machine (a workspace, a folder, a shard glob)."""
    if is_url(dataset):
        return False
    p = Path(dataset).expanduser()
    return p.is_absolute() or p.exists() or dataset.startswith((".", "~")) or any(ch in dataset for ch in "*?[{")


def public_name(dataset: str) -> str:
    """A run's dataset as the files name it: a Hub id as is; a local path by its folder's name (a workspace's,
    not ``dataset``)."""
    if not is_local(dataset):
        return dataset
    p = Path(dataset)
    while p.name in ("dataset", "") or any(ch in p.name for ch in "*?[{"):  # the workspace, the shards' folder
        if p.parent == p:
            break
        p = p.parent
    return p.name or "dataset"


def recorded_surrogates(source) -> list[str]:
    """The surrogate classifiers a dataset's samples record (``surrogates[].model`` of their provenance)."""
    for sp in source.splits:
        first = next(iter(sp.records()), None)
        if first is not None:
            got = first["meta"].get("surrogates") or []
            return [s["model"] for s in got if isinstance(s, dict) and isinstance(s.get("model"), str)]
    return []


def run(plan: Plan, log=lambda line: None) -> dict:
    """Score every model of the plan on every dataset (finished runs skipped), then write the files.

    Returns ``{rows, files, scored, resumed}``."""
    if plan.eval_results and not any(hub_named(a) for a in plan.datasets):
        raise GensetsError("--eval-results: an entry names its dataset by its Hub id, and no --dataset has one: "
                           "give a Hub id, or name a local dataset by its id with --dataset ORG/NAME=PATH")
    claim(plan.out, "gensets leaderboard", own=own_files(plan))  # a user's folder is refused before an hour of scoring
    done, scored, resumed = set(), 0, 0
    groups: dict[tuple, list[str]] = {}
    for m in plan.models:  # one gensets eval per way of scoring
        groups.setdefault((m.protocol, m.clip, m.decoding, m.allow_pickle or plan.allow_pickle), []).append(m.spec)
    for arg in plan.datasets:
        name, dataset = dataset_arg(arg)
        source = open_source(dataset, plan.config, plan.split)
        surrogates = recorded_surrogates(source)
        for (protocol, clip, decoding, pickle), specs in groups.items():
            log(f"scoring {name or public_name(source.id)} with {', '.join(specs)}")
            results = evaluate(EvalConfig(dataset, tuple(specs), plan.db, config=plan.config, split=plan.split,
                                          protocol=protocol, clip=clip, decoding=decoding, allow_pickle=pickle,
                                          batch_size=plan.batch_size, limit=plan.limit, quiet=plan.quiet))
            for r in results:
                done.add((r["dataset"], r["revision"], r["config"], r["split"], r["model"], r["variant"]))
                resumed += bool(r.get("skipped"))
                scored += not r.get("skipped")
        con = store.connect(plan.db)
        try:
            con.execute(NAMES)
            con.execute("DELETE FROM leaderboard_datasets WHERE dataset = ? AND revision IS NOT DISTINCT FROM ?",
                        [source.id, source.revision])
            con.execute("INSERT INTO leaderboard_datasets VALUES (?, ?, ?, ?)",
                        [source.id, source.revision, name or public_name(source.id), json.dumps(surrogates)])
        finally:
            con.close()
    rows = public_rows(plan.db, only=done)
    written = write(rows, plan.out)
    if plan.eval_results:
        with staged_files(plan.out, "gensets leaderboard") as staged:
            for rel, text in eval_results(rows, plan.models, dt.date.today().isoformat()).items():
                written.append(staged.write(rel, text))
    return {"rows": rows, "files": written, "scored": scored, "resumed": resumed}


def own_files(plan: Plan) -> tuple[str, ...]:
    """The files of --out that are the leaderboard's own: its results database (and DuckDB's write-ahead log) when
    --db lies in it, so that a folder holding only the database a gensets command wrote is claimed, not refused."""
    db, out = Path(plan.db), Path(plan.out)
    inside = db.parent.resolve() == out.resolve() if out.is_dir() else False
    return (db.name, f"{db.name}.wal") if inside else ()


def eval_results(rows: list[dict], models: tuple[Entry, ...], date: str) -> dict[str, str]:
    """Each model's Hub ``.eval_results`` entries (YAML; top-1 in percent per config and split), by the path under
    --out where they go (``eval_results/<model>/.eval_results/<dataset>.yaml``), for the datasets named by a Hub id
    (``org/name``: ``--dataset org/name=PATH`` names a local one so): an entry names its dataset by it, never by a
    local path. Empty when no dataset has a Hub id."""
    import yaml

    hub = {m.spec: m.hub_id for m in models}
    out: dict[str, list[dict]] = {}
    for r in rows:
        if "/" not in r["dataset"] or r["top1"] is None:
            continue
        rel = f"eval_results/{slug(hub.get(r['model']) or r['model'])}/.eval_results/{slug(r['dataset'])}.yaml"
        out.setdefault(rel, []).append({
            "dataset": {"id": r["dataset"], "task_id": f"{r['config']}/{r['split']}"},
            "value": round(100 * r["top1"], 2), "date": date,
            "notes": f"top-1, protocol {r['protocol']}, n={r['n']}",
            "source": {"name": "gensets leaderboard", "url": f"https://huggingface.co/datasets/{r['dataset']}"}})
    return {rel: yaml.safe_dump(entries, sort_keys=False) for rel, entries in out.items()}


def public_rows(db, only: set | None = None) -> list[dict]:
    """The leaderboard rows of a results database as the files hold them (:data:`COLUMNS`): datasets by public
    name, surrogates marked; ``only``: these runs' identities (dataset, revision, config, split, model, protocol)."""
    import duckdb

    con = store.connect(db, read_only=True)
    try:
        cols, rows = store.leaderboard(con)
        have = con.execute("SELECT count(*) FROM information_schema.tables "
                           "WHERE table_name = 'leaderboard_datasets'").fetchone()[0]
        named = {(d, rev): (str(name), json.loads(s or "[]")) for d, rev, name, s in con.execute(
            "SELECT dataset, revision, name, surrogates FROM leaderboard_datasets").fetchall()} if have else {}
    except (duckdb.Error, ValueError, TypeError) as e:  # a database whose leaderboard_datasets is not gensets'
        raise GensetsError(f"{db}: leaderboard_datasets: not as gensets writes it ({str(e).splitlines()[0][:200]})"
                           ) from None
    finally:
        con.close()
    out = []
    for r in rows:
        d = dict(zip(cols, r, strict=True))
        if only is not None and tuple(d[k] for k in ("dataset", "revision", "config", "split", "model",
                                                      "protocol")) not in only:
            continue
        name, surrogates = named.get((d["dataset"], d["revision"])) or (public_name(d["dataset"]), [])
        out.append({**{c: d.get(c) for c in COLUMNS}, "dataset": name,
                    "surrogate": isinstance(surrogates, list) and d["model"] in surrogates,
                    "random_weights": bool(d.get("random_weights"))})
    out.sort(key=lambda d: (d["dataset"], d["config"], d["split"], d["top1"] is None, -(d["top1"] or 0), d["model"]))
    return out


def _pct(v) -> str:
    return "" if v is None else f"{100 * v:.2f}"


def _cells(r: dict) -> list[str]:
    ci = f"{_pct(r['top1_lo'])}–{_pct(r['top1_hi'])}" if r["top1_lo"] is not None else ""
    counted = str(r["n"]) if r.get("counted") in (None, r["n"]) else f"{r['counted']} / {r['n']}"
    return [r["dataset"], f"{r['config']}/{r['split']}",
            r["model"] + (" †" if r["surrogate"] else "") + (" ‡" if r.get("random_weights") else ""),
            r["protocol"], counted, _pct(r["top1"]), ci, _pct(r.get("two_way_all")), _pct(r["top5"]),
            _pct(r["mean_per_class"])]


SHOWN = ["dataset", "config/split", "model", "protocol", "counted / n", "top-1 %", "95% interval", "two-way all %",
         "top-5 %", "mean per class %"]
ABOUT = ("Accuracy in percent; the interval is a seeded percentile bootstrap over images (95%). One row per run: "
         "a dataset's config and split, a model, its protocol.")


def notes(rows: list[dict]) -> list[str]:
    """The lines every file of the leaderboard says about its rows: random weights first (above the table)."""
    return ([RANDOM] if any(r.get("random_weights") for r in rows) else []) + \
        ([TWO_WAY] if any(r.get("counted") not in (None, r["n"]) or r.get("two_way_all") is not None for r in rows)
         else []) + ([FOOTNOTE] if any(r["surrogate"] for r in rows) else [])


def markdown(rows: list[dict]) -> str:
    warn = [f"**{RANDOM}**", ""] if any(r.get("random_weights") for r in rows) else []
    lines = ["# Leaderboard", "", *warn, ABOUT, "",
             markdown_table(SHOWN, [_cells(r) for r in rows], lambda v: str(v).replace("|", "\\|")).rstrip("\n")]
    for n in notes(rows):
        lines += ["", n]
    return "\n".join(lines) + "\n"


def page(rows: list[dict]) -> str:
    """One self-contained HTML page (no external file): the table, sortable by a click on a column's header."""
    from html import escape

    head = "".join(f"<th>{escape(c)}</th>" for c in SHOWN)
    body = "\n".join("<tr" + (' class="surrogate"' if r["surrogate"] else "") + ">"
                     + "".join(f"<td>{escape(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    warn = f"<p><strong>{escape(RANDOM)}</strong></p>" if any(r.get("random_weights") for r in rows) else ""
    foot = "".join(f"<p>{escape(n)}</p>" for n in notes(rows))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Leaderboard</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:left}}th{{cursor:pointer;background:#f3f3f3}}
tr.surrogate{{color:#888}}</style></head><body>
<h1>Leaderboard</h1>{warn}<p>{escape(ABOUT)} Click a column to sort.</p>
<table><thead><tr>{head}</tr></thead><tbody>
{body}
</tbody></table>{foot}
<script>
document.querySelectorAll("th").forEach((th, i) => th.onclick = () => {{
  const tb = th.closest("table").tBodies[0], rows = [...tb.rows], up = th.dataset.up !== "1";
  const key = r => {{ const t = r.cells[i].textContent, x = parseFloat(t); return isNaN(x) ? t : x; }};
  rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1));
  th.dataset.up = up ? "1" : "0"; rows.forEach(r => tb.appendChild(r));
}});
</script></body></html>
"""


def write(rows: list[dict], out: str | Path) -> list[Path]:
    """leaderboard.md, .html, .parquet and .csv under ``out`` (a folder gensets made, or a new one), published
    together, whole or not at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    buf = pa.BufferOutputStream()
    pq.write_table(table(rows), buf)
    files = {"leaderboard.md": markdown(rows).encode(), "leaderboard.html": page(rows).encode(),
             "leaderboard.parquet": buf.getvalue().to_pybytes(), "leaderboard.csv": csv_text(rows).encode()}
    with staged_files(out, "gensets leaderboard") as staged:  # published together, never through a symlink
        for name, data in files.items():
            staged.write(name, data)
    return [out / name for name in files]


def csv_text(rows: list[dict]) -> str:
    """The rows as leaderboard.csv holds them: :data:`COLUMNS`, every value."""
    import csv
    import io

    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(COLUMNS)
    w.writerows([csv_cell(v) if isinstance(v, str) else v for v in (r[c] for c in COLUMNS)] for r in rows)
    return text.getvalue()


def table(rows: list[dict]):
    """The rows as an Arrow table of :data:`COLUMNS` (typed even when empty)."""
    import pyarrow as pa

    s, f, i, b = pa.string(), pa.float64(), pa.int64(), pa.bool_()
    schema = pa.schema([("dataset", s), ("revision", s), ("config", s), ("split", s), ("model", s),
                        ("protocol", s), ("n", i), ("counted", i), ("top1", f), ("top1_lo", f), ("top1_hi", f),
                        ("two_way_all", f), ("top5", f), ("mean_per_class", f), ("masked_top1", f), ("surrogate", b),
                        ("random_weights", b)])
    return pa.Table.from_pylist(rows, schema=schema)
