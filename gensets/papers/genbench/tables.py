"""GenBench's ``gensets reproduce`` table: ``genbench-table2`` (Li et al. 2023): per dataset, Table 2's Stable
Diffusion strategies (ST, CE, DT, NP, NP+RD) built from ``configs/genbench.yaml``, CLER of their 20 shots
(``gensets report genbench``), each with gensets' own 95% interval over the test images
(:data:`~gensets.papers.genbench.report.CLER_INTERVAL`). A CLER depends on the generation, which one build cannot
measure: one build is the difference only, ``--seeds N`` a prediction interval for one more build over N
(:func:`gensets.compare.compare`); a ``classes:`` subset is another quantity. Smoke: ``configs/genbench.smoke.yaml``
against its synthetic test images."""

from __future__ import annotations

from pathlib import Path

from ...errors import GensetsError
from ...sources.packaged import genbench_hub_copies, genbench_published
from ..tables import Run, Table, build, compared, seeded
from . import report as genbench

# the paper as the table's output cites it (the numbers: gensets/data/genbench/published.json)
GENBENCH_PAPER = ("Li et al., \"Benchmarking and Analyzing Generative Data for Visual Recognition\" (GenBench, "
                  "arXiv:2307.13697)")

TABLE2_STRATEGIES = ("ST", "CE", "DT", "NP", "NP+RD")  # Table 2's Stable Diffusion rows (published.json)


def _genbench_table2(table: Table, run: Run) -> dict:
    not_run: list[str] = []
    builds = _builds(table, run)
    if run.smoke:
        tests = [str(run.configs / "genbench.smoke-refs")]
        clip, selection_clip = "tiny:clip", None
    else:
        runnable, not_run = table2_datasets(run)
        for line in not_run:
            run.log(line)
        tests = [f"{d}={test}" for d, test, _ in runnable]
        clip, selection_clip = "open_clip:ViT-B-32/openai", genbench.SELECTION_CLIP
    seeds = [seeded(table, run, ws, overrides) for ws, overrides in builds]  # [build][seed]
    results = []
    for i in range(run.seeds):
        workspaces = [str(build(table, run, *b[i], finalize=False)) for b in seeds]
        run.log(f"scoring CLER of {len(workspaces)} workspace(s) with {clip}")
        rep = genbench.compute(workspaces, tests, clip, batch_size=run.batch_size, selection_clip=selection_clip,
                               intervals=True)
        report = genbench.write(rep, run.out / ("report" if i == 0 else f"report-seed{i}"))
        pub = rep["published"]
        pairs = {(r["dataset"], r["strategy"], r["shots"]): (entry, ours)
                 for r, _, entry, ours in genbench.table2_pairs(rep["rows"], rep["datasets"], clip)}
        rows = [{"what": f"{r['dataset']} {r['strategy']}", "quantity": f"CLER, K={r['shots']}",
                 "published": r["published"], "model": r["generator_spec"], "variant": f"{r['generator']} row",
                 "gensets": r["gensets"], "difference": r["difference"], "interval": r.get("interval"),
                 "interval_kind": "test images", "comparison": r["comparison"], "random_weights": r["random_weights"],
                 "published_entry": pairs[(r["dataset"], r["strategy"], r["shots"])][0],
                 "measured": pairs[(r["dataset"], r["strategy"], r["shots"])][1]} for r in pub["rows"]]
        results.append({"rows": rows, "report": str(report), "source": f"{GENBENCH_PAPER}, Sec. 3.2, {pub['table']}",
                        "interval": genbench.CLER_INTERVAL, "note": pub["strategy_note"],
                        **({"not_run": not_run} if not_run else {})})
    return compared(results)


def _builds(table: Table, run: Run) -> list[tuple[Path, tuple[str, ...]]]:
    """The run's builds: the smoke config's strategies, and Table 2's composed NP+RD in a workspace of its own;
    the paper run: one per dataset with test images."""
    if run.smoke:
        return [(run.ws, ()), (run.ws.with_name(f"{run.ws.name}-np-rd"), ("strategies=[NP+RD]",))]
    return [(ws, _table2_overrides(d)) for d, _, ws in table2_datasets(run)[0]]


def _table2_overrides(dataset: str) -> tuple[str, ...]:
    return f"dataset={dataset}", "strategies=[" + ", ".join(TABLE2_STRATEGIES) + "]"


def table2_datasets(run: Run) -> tuple[list[tuple[str, str, Path]], list[str]]:
    """Table 2's paper run: (dataset, its real test images, its workspace) for each dataset (--dataset, default
    all) with test images (--source DATASET=SOURCE, else a known Hub copy), and one line per other dataset.
    GensetsError: a --dataset that is not a column, or one named but without test images."""
    columns = genbench_published()["tables"]["2"]["columns"]
    given = dict(s.partition("=")[::2] for s in run.sources)
    for d in (*run.datasets, *given):
        if d not in columns:
            raise GensetsError(f"--dataset {d!r}: not a column of GenBench Table 2 ({', '.join(columns)})")
    if "" in given.values():
        raise GensetsError("--source: genbench-table2 takes DATASET=SOURCE (the dataset's real test images)")
    datasets = run.datasets or tuple(columns)
    if run.workspace and len(datasets) != 1:
        raise GensetsError(f"--workspace: one workspace for {len(datasets)} datasets; name one with --dataset")
    copies = genbench_hub_copies()
    runnable, not_run = [], []
    for d in datasets:
        test = given.get(d) or (f"hf:{copies[d][0]}" if d in copies else None)
        if test:
            runnable.append((d, test, run.workspace or run.out / f"genbench-{d}"))
        else:
            not_run.append(f"{d}: not run: gensets knows no Hub copy of its real test images "
                           f"(gensets/data/genbench/hub_copies.json); give them with --source {d}=FOLDER|hf:ORG/NAME")
    if run.datasets and not_run:
        raise GensetsError(not_run[0].replace(": not run: ", ": ", 1))
    return runnable, not_run


def _check(table: Table, run: Run) -> None:
    if not run.smoke:
        table2_datasets(run)


def _plan(table: Table, run: Run) -> list[str]:
    runnable, not_run = table2_datasets(run)
    return [f"{d}: build {ws} from {run.configs / table.config} ({', '.join(_table2_overrides(d))}); CLER of its 20 "
            f"shots against {test}" for d, test, ws in runnable] + not_run


TABLE = Table(
    "genbench-table2", "GenBench (Li et al. 2023)",
    "CLER of 20-shot Stable Diffusion sets under ST, CE, DT, NP, NP+RD per dataset, beside Table 2",
    "the Hub (Stable Diffusion, CLIP, the test sets) and GPUs: per dataset, its classes x 20+ images x 5 "
    "strategies (ImageNet-1K: 100,000+ images, ~2 GPU-hours per 1,000 classes x 20 shots per strategy on an "
    "A100)", _genbench_table2, config="genbench.yaml", smoke_config="genbench.smoke.yaml", sources=True,
    options={"--dataset": "a Table 2 dataset (repeatable; default: all 22)",
             "--workspace": "OUT/genbench-DATASET",
             "--source": "DATASET=SOURCE (repeatable), the real test images of a dataset (a folder of class "
                         "folders, hf:ORG/NAME), needed where gensets knows no Hub copy"},
    check=_check, plan=_plan, builds=_builds)
