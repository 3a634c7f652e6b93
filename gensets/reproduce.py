"""``gensets reproduce TABLE``: one command per paper table: build (or read) the data, score it with the paper's
settings, and print gensets' numbers beside the published ones (gensets/data/<paper>/published.json).

Each table is a :class:`~gensets.papers.tables.Table` that its paper folder declares (``gensets/papers/<paper>/``,
registered in :data:`~gensets.registry.PAPERS`): the configs and models of the paper run, and of ``--smoke``, the
same path on gensets' tiny random models offline (its numbers are meaningless; the output says so). Everything
goes into ``--out`` (default ``out/reproduce/<table>[-smoke]``): the workspace(s), ``results.duckdb``, the report
folder and ``reproduce.md`` / ``reproduce.json``; running the command again resumes the build and skips finished
evaluations. :func:`tables` lists every registered paper's tables, in the registry's order.

Variance: every gensets number has its 95% interval over images where the paper's report computes one and, with
``--seeds N`` where the number depends on generation (a table whose ``no_seeds`` says nothing), the range of N
builds at seeds config seed + 0 .. N-1 (:func:`~gensets.papers.tables.over_seeds`); the published number is
called ``within`` or ``outside`` each. Smoke runs set tiny models beside the paper's families
(:attr:`Table.stand_ins`), each row naming its stand-in.
"""

from __future__ import annotations

import json
from dataclasses import replace

from .cards.markdown import code, table
from .errors import GensetsError
from .output import MARKER, claim, claimable, files, remove_tree
from .papers.tables import CONFIGS, Run, Table, evaluations
from .registry import PAPERS

__all__ = ["CONFIGS", "SMOKE_NOTE", "Run", "Table", "markdown", "plan", "reproduce", "tables", "with_variants"]

SMOKE_NOTE = ("smoke run: tiny random models built offline; the numbers are meaningless, the path (build, settings, "
              "scoring, report) is the paper table's")


def tables() -> dict[str, Table]:
    """Every registered paper's reproduce tables by name, in the registry's order."""
    return {t.name: t for _, paper in PAPERS.items() for t in paper.tables}


def _table(name: str, run: Run) -> Table:
    all_tables = tables()
    if name not in all_tables:
        raise GensetsError(f"gensets reproduce: unknown table {name!r} (known: {', '.join(all_tables)})")
    table = with_variants(all_tables[name], run.variants)
    return table.prepare(table, run) if table.prepare else table


def plan(name: str, run: Run) -> list[str]:
    """What ``reproduce`` would build and score (``--dry-run``), one line a step; nothing is run."""
    table = _table(name, run)
    _check(table, run)
    config = table.smoke_config if run.smoke else table.config
    seeds = ([f"then {run.seeds - 1} more build(s) of each, at seeds config seed + 1 .. {run.seeds - 1} "
              "(WORKSPACE-seedS), scored the same way"] if run.seeds > 1 else [])
    if table.plan and not run.smoke:
        return table.plan(table, run) + seeds
    lines = [f"build {run.ws} from {run.configs / config}"] if config else []
    return lines + [f"score {run.ws} with {', '.join(e.models)} (protocol {e.protocol})"
                    for e in evaluations(table, run)] + seeds


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _check(table: Table, run: Run) -> None:
    """Refuse what the table cannot do (--seeds, --source, the table's own check) before --out is made."""
    mode = " --smoke" if run.smoke else ""
    no_seeds = table.no_seeds_smoke if run.smoke else table.no_seeds
    if run.seeds > 1 and no_seeds:
        takes = [t.name if t.no_seeds is None and t.no_seeds_smoke is None else
                 f"{t.name} --smoke" if t.no_seeds_smoke is None else f"{t.name}'s paper run"
                 for t in tables().values() if t.no_seeds is None or t.no_seeds_smoke is None]
        raise GensetsError(f"--seeds: {table.name}{mode} {no_seeds}" + (f" ({_and(takes)} do)" if takes else ""))
    if run.sources and (run.smoke or not table.sources):
        readers = [t.name for t in tables().values() if t.sources]
        raise GensetsError(f"--source: {table.name}{mode} reads no released or test set"
                           + (f" ({_and(readers)}'s paper runs do)" if readers else ""))
    if table.check:
        table.check(table, run)


def with_variants(table: Table, names: tuple[str, ...]) -> Table:
    """``table`` with the model specs of its named ``variants`` in place of the defaults' (GensetsError: a name the
    table does not have)."""
    swap = {}
    for n in names:
        if n not in table.variants:
            raise GensetsError(f"--variant {n!r}: {table.name} has "
                               + (f"the variants {', '.join(table.variants)}" if table.variants else "no variants"))
        swap.update(table.variants[n][1])
    return replace(table, evaluations=tuple(replace(e, models=tuple(swap.get(m, m) for m in e.models))
                                            for e in table.evaluations))


def reproduce(name: str, run: Run) -> dict:
    """Run table ``name`` into ``run.out``; the side-by-side rows (fractions; difference = gensets - published)."""
    table = _table(name, run)
    claimable(run.out, f"gensets reproduce {name}")
    _check(table, run)
    made = next((p for p in (run.out, *run.out.parents)[::-1] if not p.exists()), None)  # the first folder made
    claim(run.out, f"gensets reproduce {name}")  # a user's non-empty folder is refused before anything runs
    try:
        result = table.run(table, run)
    except BaseException:
        if made is not None and _holds_nothing(run.out):  # a run that failed before writing (offline): no trace
            remove_tree(made)
        raise
    result = {"table": name, "paper": table.paper, "what": table.what, "smoke": run.smoke,
              **({"smoke_note": SMOKE_NOTE} if run.smoke else {}), **result}
    with files(run.out) as staged:  # both or neither
        staged.write("reproduce.json", json.dumps(result, indent=1) + "\n")
        staged.write("reproduce.md", markdown(result))
    return result
def _holds_nothing(folder) -> bool:
    """Whether ``folder`` holds nothing but the output marker :func:`claim` wrote and empty folders."""
    return all((p.is_dir() and not p.is_symlink()) or (p.name == MARKER and p.parent == folder)
               for p in folder.rglob("*"))


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def _interval(ci, kind: str | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}] ({kind})"


def markdown(result: dict) -> str:
    seeds = next((r["seeds"]["n"] for r in result["rows"] if "seeds" in r), 0)
    rows = [[r["what"], r["protocol"], _pct(r["published"]), _pct(r["gensets"]),
             "-" if r["difference"] is None else f"{100 * r['difference']:+.2f}",
             _interval(r.get("interval"), r.get("interval_kind")), r.get("verdict") or "-",
             *([_interval(r["seeds"]["range"], f"{seeds} seeds"), r["seeds"]["verdict"] or "-"] if seeds else []),
             "not run" if r["model"] is None else code(r["model"], True),
             "-" if r["variant"] is None else code(r["variant"], True)] for r in result["rows"]]
    head = [f"# {result['table']}: {result['paper']}", "", result["what"] + ".", ""]
    if result["smoke"]:
        head += [f"**{result['smoke_note']}.**", ""]
    spread = (f" Over seeds: the range (min, max) of the {seeds} builds' numbers at seeds config seed + 0 .. "
              f"{seeds - 1}; the table's number is the first's." if seeds else "")
    return "\n".join([*head, table(["row", "protocol / metric", "published", "gensets", "difference",
                                    "95% interval", "published is",
                                    *(["over seeds", "published is (seeds)"] if seeds else []),
                                    "gensets model", "variant"], rows), "",
                      f"Interval: {result['interval']}; published is: within or outside it.{spread}", "",
                      f"Published: {result['source']}. {result['note']}", "",
                      *[x for line in result.get("not_run", ()) for x in (f"Not run: {line}", "")],
                      f"Full report: {result['report']}", ""])
