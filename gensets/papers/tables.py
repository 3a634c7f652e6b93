"""A paper table of ``gensets reproduce``: :class:`Table` (its configs, models and protocols, of the paper run and
of ``--smoke``), :class:`Run` (one call: where everything goes and how), and the steps every table shares: build
(or resume) a config, score a dataset with the table's evaluations, several seeds' builds (:func:`seeded`) and
the comparison of each row over them (:func:`compared`: :func:`gensets.compare.compare` with every build's
number). Each paper folder defines its tables with these; ``gensets.reproduce`` runs them.

A table's row: ``what``, ``quantity``, ``published``, ``model``, ``variant``, ``gensets`` (and ``gensets_note``
where gensets' number is not the published quantity), ``interval`` (gensets' own 95% interval over images; it
decides nothing), ``difference``, ``comparison`` (:meth:`gensets.compare.Comparison.as_dict`), ``random_weights``;
and, for :func:`compared` to redo the comparison over seeds, ``published_entry`` (the published number's typed
entry) and ``measured`` (:class:`gensets.compare.Measured`), which it takes out of the output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import notices
from ..builders.runner import build as build_ws
from ..compare import compare
from ..errors import GensetsError
from ..evaluation.runner import EvalConfig
from ..evaluation.runner import evaluate as evaluate_dataset
from ..shards import read_dataset_manifest

# the paper configs gensets ships (package data), read unless --configs names another folder: copies of a
# checkout's configs/, the source of truth that make and the golden builds read (tests/test_reproduce.py holds
# them byte for byte equal), with the folders they name (genbench.smoke-refs/)
CONFIGS = Path(__file__).parents[1] / "data" / "configs"


@dataclass(frozen=True)
class Evaluation:
    """One ``gensets eval`` of the table: these models under this protocol (``clip``: two-way's wrong options)."""

    protocol: str
    models: tuple[str, ...]
    clip: str | None = None
    allow_pickle: bool = False
    decoding: str = "authors"  # two-way: gensets.labels.twoway.DECODING


@dataclass(frozen=True)
class Table:
    name: str
    paper: str
    what: str
    needs: str  # what the paper run needs (GPUs, the Hub, hours)
    run: Callable[[Table, Run], dict]
    config: str = ""  # the build config of the paper run (configs/)
    smoke_config: str = ""
    evaluations: tuple[Evaluation, ...] = ()
    smoke_evaluations: tuple[Evaluation, ...] = ()
    # named variants of the paper run (``--variant NAME``): NAME -> (what it is, {the default's spec: its spec})
    variants: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    # --smoke: the tiny model standing in for each paper family ({tiny spec: family})
    stand_ins: dict[str, str] = field(default_factory=dict)
    # --seeds N > 1: why the paper run / the smoke run refuses it (None: it takes seeds)
    no_seeds: str | None = None
    no_seeds_smoke: str | None = None
    sources: bool = False  # the paper run reads --source
    # the table's reading of an option ({"--dataset": "a Table 2 dataset ..."}): its --help says it
    options: dict[str, str] = field(default_factory=dict)
    # the table as this run runs it (e.g. models read from the run's configs); None: as it is
    prepare: Callable[[Table, Run], Table] | None = None
    # refuses a run the table cannot do before --out is made (GensetsError); None: no check of its own
    check: Callable[[Table, Run], None] | None = None
    # the --dry-run lines of the paper run, where they are not build + score (None: those)
    plan: Callable[[Table, Run], list[str]] | None = None
    # the (workspace, --set overrides) of each build of the run at its first seed (None: one build of the config
    # into run.ws); what `reproduce --plan` counts
    builds: Callable[[Table, Run], list[tuple[Path, tuple[str, ...]]]] | None = None
    imagenet_val: bool = False  # the table reads --imagenet-val DIR (its reading: options["--imagenet-val"])


@dataclass
class Run:
    """One ``gensets reproduce`` call: where everything goes and how."""

    out: Path
    smoke: bool
    datasets: tuple[str, ...] = ()
    batch_size: int = 32
    quiet: bool = False
    configs: Path = CONFIGS  # the folder of the paper configs
    workspace: Path | None = None  # the (one) workspace to build or resume; None: OUT/workspace
    variants: tuple[str, ...] = ()  # the table's named variants to run instead of its defaults
    sources: tuple[str, ...] = ()  # --source: the table's reading (Table.options)
    dry_run: bool = False
    log: Callable[[str], None] = field(default=print)
    seeds: int = 1  # --seeds: builds at seeds config seed + 0 .. N-1, compared over them (gensets.compare)
    imagenet_val: Path | None = None  # --imagenet-val: a local ImageNet validation folder (Table.imagenet_val)

    @property
    def db(self) -> Path:
        return self.out / "results.duckdb"

    @property
    def ws(self) -> Path:
        return self.workspace or self.out / "workspace"


def config_path(table: Table, run: Run) -> Path:
    path = run.configs / (table.smoke_config if run.smoke else table.config)
    if not path.is_file():
        raise GensetsError(f"{path}: the config of {table.name} is missing (leave out --configs to read the "
                           "ones gensets ships)")
    return path


def build(table: Table, run: Run, workspace: Path, overrides: tuple[str, ...] = (), finalize: bool = True) -> Path:
    """Build (resume) the table's config into ``workspace`` and, if asked, finalize it with pending images."""
    from ..builders.finalize import finalize as finalize_ws  # lazy: numpy (cards), off the CLI parser's path

    config = config_path(table, run)
    run.log(f"building {workspace} from {config.name}" + (f" ({', '.join(overrides)})" if overrides else ""))
    r = build_ws(config, workspace, quiet=run.quiet, overrides=overrides)
    run.log(f"  {r['units']} units ({r['done_before']} done before, {r['units_run']} run now)")
    if finalize and _finalize_again(workspace):
        finalize_ws(workspace, include_pending=True)
    return workspace


def _finalize_again(workspace: Path) -> bool:
    """Whether the table's build in ``workspace`` is finalized (again) with its pending images. A dataset/ already
    there that was finalized from its review alone (a user's workspace, ``--workspace``) is scored as it is, never
    rewritten; one finalized with pending images (by reproduce, ``make demo``) is finalized again, and each is said."""
    manifest = workspace / "dataset" / "manifest.json"
    if not manifest.is_file():
        return True
    if read_dataset_manifest(manifest).get("include_pending"):
        notices.notice(f"{workspace}/dataset: finalized again with its pending images, as it was before")
        return True
    notices.notice(f"{workspace}/dataset: finalized before from its review's decisions alone (no pending images): "
                   "scored as it is, not finalized again (a new --workspace builds one of the table's own)")
    return False


def seeded(table: Table, run: Run, workspace: Path, overrides: tuple[str, ...] = ()) -> list[tuple[Path, tuple]]:
    """The (workspace, overrides) of each of ``run.seeds`` builds: ``workspace`` at the config's seed, then
    ``workspace-seedS`` at seed S = the config's seed + 1, ..."""
    import yaml

    base = int(yaml.safe_load(config_path(table, run).read_text(encoding="utf-8")).get("seed", 0))
    return [(workspace, overrides)] + [(workspace.with_name(f"{workspace.name}-seed{base + i}"),
                                        (*overrides, f"seed={base + i}")) for i in range(1, run.seeds)]


def compared(results: list[dict]) -> dict:
    """The first result (the config's seed) as the output shows it. With several builds (``--seeds N``): each
    row's number in every build (``seeds``: {n, values}; values None where a build lacks it) and its comparison
    redone by :func:`gensets.compare.compare` with those numbers (a prediction interval for one more build, where
    the test is one over builds), rows matched by what and model. ``measured`` and ``published_entry`` are taken
    out of every row."""
    values: dict[tuple, list] = {}
    for res in results:
        for r in res["rows"]:
            values.setdefault((r["what"], r["model"]), []).append(r["gensets"])
    rows = []
    for r in results[0]["rows"]:
        r = dict(r)
        measured, entry = r.pop("measured", None), r.pop("published_entry", None)
        if len(results) > 1:
            v = values[(r["what"], r["model"])]
            ok = len(v) == len(results) and None not in v
            r["seeds"] = {"n": len(results), "values": v if ok else None}
            if ok and measured is not None and entry is not None:
                c = compare(entry, replace(measured, seeds=tuple(v)))
                r["comparison"], r["difference"] = c.as_dict(), c.difference
        rows.append(r)
    return {**results[0], "rows": rows}


def builds(table: Table, run: Run) -> list[tuple[Path, Path, tuple[str, ...]]]:
    """(config, workspace, overrides) of every build the run makes, each seed's included; none for a run that
    builds nothing (it reads a released set)."""
    if not (table.smoke_config if run.smoke else table.config):
        return []
    each = table.builds(table, run) if table.builds else [(run.ws, ())]
    config = config_path(table, run)
    return [(config, ws, o) for w, overrides in each for ws, o in seeded(table, run, w, overrides)]


def evaluations(table: Table, run: Run) -> tuple[Evaluation, ...]:
    return table.smoke_evaluations if run.smoke else table.evaluations


def evaluate(table: Table, run: Run, dataset: str) -> str | None:
    """Score ``dataset`` with the table's evaluations; the dataset's name in the results (None: no run)."""
    names = set()
    for e in evaluations(table, run):
        run.log(f"scoring {dataset} with {', '.join(e.models)} (protocol {e.protocol})")
        names |= {s["dataset"] for s in evaluate_dataset(EvalConfig(
            dataset, e.models, run.db, protocol=e.protocol, clip=e.clip, batch_size=run.batch_size,
            allow_pickle=e.allow_pickle, quiet=run.quiet, decoding=e.decoding))}
    return names.pop() if len(names) == 1 else None
