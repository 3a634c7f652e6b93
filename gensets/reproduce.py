"""``gensets reproduce TABLE``: one command per paper table: build (or read) the data, score it with the paper's
settings, and print gensets' numbers beside the published ones (gensets/data/<paper>/published.json).

Each table is a :class:`~gensets.papers.tables.Table` that its paper folder declares (``gensets/papers/<paper>/``,
registered in :data:`~gensets.registry.PAPERS`): the configs and models of the paper run, and of ``--smoke``, the
same path on gensets' tiny random models offline (its numbers are meaningless; the output says so). Everything
goes into ``--out`` (default ``out/reproduce/<table>[-smoke]``): the workspace(s), ``results.duckdb``, the report
folder and ``reproduce.md`` / ``reproduce.json``; running the command again resumes the build and skips finished
evaluations. :func:`tables` lists every registered paper's tables, in the registry's order.

Comparison: each row names the test that fits it (:func:`gensets.compare.compare`, from the two numbers' typed
definitions: "not comparable: <field>", the same images, independent images, a prediction interval over
``--seeds N`` builds at seeds config seed + 0 .. N-1, an approximate or family-only published number), and a
verdict (``consistent`` / ``differs``) only where that test gives one. Every gensets number also has its own 95%
interval over images where the paper's report computes one: its uncertainty, which decides nothing. Smoke runs set
tiny models beside the paper's families (:attr:`Table.stand_ins`), each row naming its stand-in; random weights
are named in every row and above the table.
"""

from __future__ import annotations

import json
from dataclasses import replace

from .builders import planning
from .cards.markdown import code, table
from .cost import PRICE
from .errors import GensetsError
from .output import MARKER, claim, claimable, files, remove_tree
from .papers.tables import CONFIGS, Run, Table, builds, evaluations
from .registry import PAPERS

__all__ = ["CONFIGS", "SMOKE_NOTE", "Run", "Table", "estimate", "estimate_lines", "markdown", "plan", "reproduce",
           "tables", "with_variants"]

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
    val = [f"score imagenet-val:{run.imagenet_val} with {', '.join(e.models)} (protocol {e.protocol})"
           for e in evaluations(table, run)] if run.imagenet_val else []
    return lines + val + [f"score {run.ws} with {', '.join(e.models)} (protocol {e.protocol})"
                          for e in evaluations(table, run)] + seeds


def estimate(name: str, run: Run, price_per_hour: float | None = None) -> dict:
    """``reproduce TABLE --plan``: the dry run's steps, the plan of each build (every seed's;
    :func:`gensets.builders.planning.plan`), the models each evaluation downloads, and the builds' units, images,
    GPU-hours and cost in all (the evaluations are not costed). Offline, from the configs; nothing written."""
    table = _table(name, run)
    _check(table, run)
    made = [{"workspace": str(ws), **planning.plan(config, overrides, price_per_hour)}
            for config, ws, overrides in builds(table, run)]
    scored = [{"protocol": e.protocol, "models": [planning.model(m, "scored") for m in e.models]
               + ([planning.model(e.clip, "two-way's CLIP")] if e.clip else [])} for e in evaluations(table, run)]
    currencies = {b["cost"]["currency"] for b in made} or {PRICE["currency"]}
    return {"table": name, "smoke": run.smoke, "steps": plan(name, run), "builds": made, "evaluations": scored,
            "units": sum(b["units"] for b in made), "images_total": sum(b["images_total"] for b in made),
            "gpu_hours": sum(b["gpu"]["hours"] for b in made),
            "cost": {"total": sum(b["cost"]["total"] for b in made),
                     "currency": currencies.pop() if len(currencies) == 1 else None}}


def estimate_lines(e: dict) -> list[str]:
    """:func:`estimate` as text."""
    out = [f"gensets reproduce {e['table']}{' --smoke' if e['smoke'] else ''}:", *[f"  {s}" for s in e["steps"]]]
    for i, b in enumerate(e["builds"], 1):
        out += [f"build {i} of {len(e['builds'])}, into {b['workspace']}: " + planning.lines(b)[0],
                *planning.lines(b)[1:]]
    for ev in e["evaluations"]:
        out += [f"scored with protocol {ev['protocol']}:", *[f"  {planning.model_line(m)}" for m in ev["models"]]]
    c = e["cost"]
    out.append(f"in all: {len(e['builds'])} build{'s' * (len(e['builds']) != 1)}, {e['units']:,} units, "
               f"{e['images_total']:,} images; {e['gpu_hours']:,.1f} GPU-hours of building, cost "
               f"{c['total']:,.2f} {c['currency'] or '(several currencies: see each build)'} (the evaluations are "
               "not costed)")
    return out


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
    if run.imagenet_val is not None:
        if not table.imagenet_val:
            readers = [t.name for t in tables().values() if t.imagenet_val]
            raise GensetsError(f"--imagenet-val: {table.name} reads no ImageNet validation images"
                               + (f" ({_and(readers)} does)" if readers else ""))
        if not run.imagenet_val.is_dir():
            raise GensetsError(f"--imagenet-val {run.imagenet_val}: no such folder (an ImageNet validation folder of "
                               "class folders named by WordNet id, e.g. n01440764/)")
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
    noise = sorted({r["model"] for r in result["rows"] if r.get("random_weights") and r.get("model")})
    result = {"table": name, "paper": table.paper, "what": table.what, "smoke": run.smoke,
              **({"smoke_note": SMOKE_NOTE} if run.smoke else {}), **result, "random_weights": noise}
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


def _seeds(r: dict) -> str:
    v = (r.get("seeds") or {}).get("values")
    return "-" if not v else ", ".join(_pct(x) for x in v)


RANDOM = ("**Random weights**: {models}: the numbers of these models (or of images they made) are noise; no row "
          "with one is compared.")


def markdown(result: dict) -> str:
    seeds = next((r["seeds"]["n"] for r in result["rows"] if "seeds" in r), 0)
    rows = [[r["what"], r.get("quantity") or r.get("protocol") or "-", _pct(r["published"]),
             _pct(r["gensets"]) + (f" ({r['gensets_note']})" if r.get("gensets_note") else ""),
             _interval(r.get("interval"), r.get("interval_kind")),
             "-" if r["difference"] is None else f"{100 * r['difference']:+.2f}",
             *([_seeds(r)] if seeds else []), (r.get("comparison") or {}).get("text") or "-",
             "not run" if r["model"] is None else code(r["model"], True)
             + (" (random weights)" if r.get("random_weights") else ""),
             "-" if r["variant"] is None else code(r["variant"], True)] for r in result["rows"]]
    head = [f"# {result['table']}: {result['paper']}", "", result["what"] + ".", ""]
    if result["smoke"]:
        head += [f"**{result['smoke_note']}.**", ""]
    if result.get("random_weights"):
        head += [RANDOM.format(models=", ".join(code(m, True) for m in result["random_weights"])), ""]
    spread = (f" Over seeds: the number of each of the {seeds} builds at seeds config seed + 0 .. {seeds - 1} (the "
              "table's number is the first's); the comparison is then a prediction interval for one more build."
              if seeds else "")
    return "\n".join([*head, table(["row", "quantity", "published", "gensets", "gensets 95% interval", "difference",
                                    *(["over seeds"] if seeds else []), "comparison", "gensets model", "variant"],
                                   rows), "",
                      f"gensets' interval: {result['interval']} (its own uncertainty, which decides nothing). "
                      "Comparison: the test that fits the two numbers' definitions (README, \"How gensets compares "
                      f"with a paper\"); a verdict only where that test gives one.{spread}", "",
                      f"Published: {result['source']}. {result['note']}", "",
                      *[x for line in result.get("not_run", ()) for x in (f"Not run: {line}", "")],
                      f"Full report: {result['report']}", ""])
