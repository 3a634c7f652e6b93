"""``gensets reproduce TABLE``: one command per paper table: build (or read) the data, score it with the paper's
settings, and print gensets' numbers beside the published ones (gensets/data/<paper>/published.json).

Each table is a :class:`Table`: the configs and models of the paper run, and of ``--smoke``, the same path on
gensets' tiny random models offline (its numbers are meaningless; the output says so). Everything goes into
``--out`` (default ``out/reproduce/<table>[-smoke]``): the workspace(s), ``results.duckdb``, the report folder and
``reproduce.md`` / ``reproduce.json``; running the command again resumes the build and skips finished evaluations.

- ``imagenet-d-table`` (Zhang et al. 2024): the released ImageNet-D (``hf:zcs15/ImageNet-D``) scored with the
  paper's model families under their protocols (``imagenet``, ``zero-shot``, ``two-way``); ``gensets report
  imagenet-d``. Smoke: the smoke build of ``configs/imagenet_d.smoke.yaml``.
- ``genbench-table2`` (Li et al. 2023): per dataset, Table 2's Stable Diffusion strategies (ST, CE, DT, NP, NP+RD)
  built from ``configs/genbench.yaml``, CLER of their 20 shots (``gensets report genbench``). Smoke:
  ``configs/genbench.smoke.yaml`` against its synthetic test images.
- ``borji-fig2`` / ``borji-vqa`` (Borji 2022): the recognition set with the paper's ten classifiers (protocol
  ``wordset``), and the VQA set (protocol ``vqa``).

Variance: every gensets number has its 95% interval over images (a bootstrap: ImageNet-D's
:data:`~gensets.evaluation.reports.imagenet_d.INTERVAL`, GenBench's
:data:`~gensets.evaluation.reports.genbench.CLER_INTERVAL`) and, with ``--seeds N`` where the number depends on
generation (a built dataset: ``--smoke``'s, GenBench's), the range of N builds at seeds config seed + 0 .. N-1
(:func:`over_seeds`); the published number is called ``within`` or ``outside`` each. Smoke runs set tiny models
beside the paper's families (:attr:`Table.stand_ins`), each row naming its stand-in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .errors import GensetsError
from .output import claim, claimable, files

# the paper configs gensets ships (package data), read unless --configs names another folder: copies of a
# checkout's configs/, the source of truth that make and the golden builds read (tests/test_reproduce.py holds
# them byte for byte equal), with the folders they name (genbench.smoke-refs/)
CONFIGS = Path(__file__).parent / "data" / "configs"

SMOKE_NOTE = ("smoke run: tiny random models built offline; the numbers are meaningless, the path (build, settings, "
              "scoring, report) is the paper table's")


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
    sources: tuple[str, ...] = ()  # --source: imagenet-d-table: PATH; genbench-table2: DATASET=SOURCE
    dry_run: bool = False
    log: Callable[[str], None] = field(default=print)
    seeds: int = 1  # --seeds: builds at seeds config seed + 0 .. N-1, their range beside each number

    @property
    def db(self) -> Path:
        return self.out / "results.duckdb"

    @property
    def ws(self) -> Path:
        return self.workspace or self.out / "workspace"


def _config(table: Table, run: Run) -> Path:
    path = run.configs / (table.smoke_config if run.smoke else table.config)
    if not path.is_file():
        raise GensetsError(f"{path}: the config of {table.name} is missing (leave out --configs to read the "
                           "ones gensets ships)")
    return path


def _build(table: Table, run: Run, workspace: Path, overrides: tuple[str, ...] = (), finalize: bool = True) -> Path:
    """Build (resume) the table's config into ``workspace`` and, if asked, finalize it with pending images."""
    from .builders.runner import build
    from .builders.runner import finalize as finalize_ws

    config = _config(table, run)
    run.log(f"building {workspace} from {config.name}" + (f" ({', '.join(overrides)})" if overrides else ""))
    r = build(config, workspace, quiet=run.quiet, overrides=overrides)
    run.log(f"  {r['units']} units ({r['done_before']} done before, {r['units_run']} run now)")
    if finalize:
        finalize_ws(workspace, include_pending=True)
    return workspace


def _seeded(table: Table, run: Run, workspace: Path, overrides: tuple[str, ...] = ()) -> list[tuple[Path, tuple]]:
    """The (workspace, overrides) of each of ``run.seeds`` builds: ``workspace`` at the config's seed, then
    ``workspace-seedS`` at seed S = the config's seed + 1, ..."""
    import yaml

    base = int(yaml.safe_load(_config(table, run).read_text(encoding="utf-8")).get("seed", 0))
    return [(workspace, overrides)] + [(workspace.with_name(f"{workspace.name}-seed{base + i}"),
                                        (*overrides, f"seed={base + i}")) for i in range(1, run.seeds)]


def over_seeds(results: list[dict]) -> dict:
    """The first result (the config's seed) with, in each row, the range of its gensets number over every result
    (rows matched by what and model): ``seeds`` {n, values, range, verdict}; none where a seed lacks the number."""
    from .evaluation.reports.base import verdict

    if len(results) < 2:
        return results[0]
    values: dict[tuple, list] = {}
    for res in results:
        for r in res["rows"]:
            values.setdefault((r["what"], r["model"]), []).append(r["gensets"])
    rows = []
    for r in results[0]["rows"]:
        v = values[(r["what"], r["model"])]
        ok = len(v) == len(results) and None not in v
        span = [min(v), max(v)] if ok else None
        rows.append({**r, "seeds": {"n": len(results), "values": v if ok else None, "range": span,
                                    "verdict": verdict(r["published"], span)}})
    return {**results[0], "rows": rows}


def _evaluations(table: Table, run: Run) -> tuple[Evaluation, ...]:
    return table.smoke_evaluations if run.smoke else table.evaluations


def _evaluate(table: Table, run: Run, dataset: str) -> str | None:
    """Score ``dataset`` with the table's evaluations; the dataset's name in the results (None: no run)."""
    from .evaluation.runner import EvalConfig, evaluate

    names = set()
    for e in _evaluations(table, run):
        run.log(f"scoring {dataset} with {', '.join(e.models)} (protocol {e.protocol})")
        names |= {s["dataset"] for s in evaluate(EvalConfig(
            dataset, e.models, run.db, protocol=e.protocol, clip=e.clip, batch_size=run.batch_size,
            allow_pickle=e.allow_pickle, quiet=run.quiet, decoding=e.decoding))}
    return names.pop() if len(names) == 1 else None


RELEASED = "hf:zcs15/ImageNet-D"


def _released(run: Run) -> str:
    """The released ImageNet-D the paper run scores: --source PATH (a local copy in the authors' layout), else the
    Hub's."""
    if not run.sources:
        return RELEASED
    from .evaluation.released import looks_released

    if len(run.sources) > 1 or not looks_released(Path(run.sources[0])):
        raise GensetsError(f"--source {run.sources[-1]}: not a copy of the released ImageNet-D in its authors' layout "
                           "(background/, texture/, material/ holding its class folders); give one folder")
    return run.sources[0]


def _imagenet_d(table: Table, run: Run) -> dict:
    if not run.smoke:  # the released images: no generation to vary (--seeds refused by _check_sources)
        return imagenet_d_rows(run.db, run.out / "report", _evaluate(table, run, _released(run)))
    results = []
    for i, (ws, overrides) in enumerate(_seeded(table, run, run.ws)):
        # the dataset this run scored: --out's database may hold another (an earlier run with --workspace)
        dataset = _evaluate(table, run, str(_build(table, run, ws, overrides)))
        results.append(imagenet_d_rows(run.db, run.out / ("report" if i == 0 else f"report-{ws.name}"), dataset,
                                       table.stand_ins))
    return over_seeds(results)


# the papers as the tables' outputs cite them (the numbers: gensets/data/<paper>/published.json)
IMAGENET_D_PAPER = ("Zhang et al., \"ImageNet-D: Benchmarking Neural Network Robustness on Diffusion Synthetic "
                    "Object\", CVPR 2024 (arXiv:2403.18775): the per-family accuracies as a summary of its key results gives "
                    "them (the paper's tables were not available to check)")
GENBENCH_PAPER = ("Li et al., \"Benchmarking and Analyzing Generative Data for Visual Recognition\" (GenBench, "
                  "arXiv:2307.13697)")


def imagenet_d_rows(db: Path, report_dir: Path, dataset: str | None = None,
                    stand_ins: dict[str, str] | None = None) -> dict:
    """``gensets report imagenet-d`` on ``db`` (written to ``report_dir``; ``dataset``: the one of the database's
    ImageNet-D datasets, None: its only one; ``stand_ins``: tiny models beside families) as the table's rows: each
    family's top-1 under the report's default reading of overall (pooled over the subsets' images), named in the
    row, with its interval over images and the published number's verdict."""
    from .evaluation.reports import imagenet_d

    rep = imagenet_d.compute(db, dataset, stand_ins=stand_ins)
    report = imagenet_d.write(rep, report_dir)
    rows = [{"what": r["family"], "protocol": f"{r['protocol']}, top-1 {r['overall']}", "published": r["published"],
             "model": r["model"],
             "variant": None if r["model"] is None else r["variant"]
             + ("" if r["stand_in"] is None else f"; stand-in for {r['family']}")
             + ("" if r["gensets"] is not None else f"; {r['counted']} of {r['n']} answers name one option: no "
                                                    "TRUE / (TRUE + FALSE)"),
             "gensets": r["gensets"], "difference": r["difference"], "interval": r["interval"],
             "interval_kind": "images", "verdict": r["verdict"]}
            for r in rep["published"]["rows"]]
    overall = f"top-1 {rep['overall']}: {imagenet_d.OVERALL[rep['overall']]}"
    return {"rows": rows, "report": str(report), "source": IMAGENET_D_PAPER, "interval": rep["interval"],
            "note": f"{rep['published']['checked']} gensets' {overall} (the report has each subset and the mean of "
                    "subsets too; two-way counts TRUE / (TRUE + FALSE), as the authors' compute_accuracy.py)."}


TABLE2_STRATEGIES = ("ST", "CE", "DT", "NP", "NP+RD")  # Table 2's Stable Diffusion rows (published.json)


def _genbench_table2(table: Table, run: Run) -> dict:
    from .evaluation.reports import genbench

    not_run: list[str] = []
    if run.smoke:  # the smoke config's strategies, and Table 2's composed NP+RD in a workspace of its own
        builds = [(run.ws, ()), (run.ws.with_name(f"{run.ws.name}-np-rd"), ("strategies=[NP+RD]",))]
        tests = [str(run.configs / "genbench.smoke-refs")]
        clip, selection_clip = "tiny:clip", None
    else:
        runnable, not_run = table2_datasets(run)
        for line in not_run:
            run.log(line)
        builds = [(ws, _table2_overrides(d)) for d, _, ws in runnable]
        tests = [f"{d}={test}" for d, test, _ in runnable]
        clip, selection_clip = "open_clip:ViT-B-32/openai", genbench.SELECTION_CLIP
    seeded = [_seeded(table, run, ws, overrides) for ws, overrides in builds]  # [build][seed]
    results = []
    for i in range(run.seeds):
        workspaces = [str(_build(table, run, *b[i], finalize=False)) for b in seeded]
        run.log(f"scoring CLER of {len(workspaces)} workspace(s) with {clip}")
        rep = genbench.compute(workspaces, tests, clip, batch_size=run.batch_size, selection_clip=selection_clip,
                               intervals=True)
        report = genbench.write(rep, run.out / ("report" if i == 0 else f"report-seed{i}"))
        pub = rep["published"]
        rows = [{"what": f"{r['dataset']} {r['strategy']}", "protocol": f"CLER, K={r['shots']}",
                 "published": r["published"], "model": r["generator_spec"],
                 "variant": f"{r['generator']} row" + (f"; {r['note']}" if r["note"] else ""),
                 "gensets": r["gensets"], "difference": r["difference"], "interval": r["interval"],
                 "interval_kind": "test images", "verdict": r["verdict"]} for r in pub["rows"]]
        results.append({"rows": rows, "report": str(report), "source": f"{GENBENCH_PAPER}, Sec. 3.2, {pub['table']}",
                        "interval": genbench.CLER_INTERVAL, "note": pub["strategy_note"],
                        **({"not_run": not_run} if not_run else {})})
    return over_seeds(results)


def _table2_overrides(dataset: str) -> tuple[str, ...]:
    return f"dataset={dataset}", "strategies=[" + ", ".join(TABLE2_STRATEGIES) + "]"


def table2_datasets(run: Run) -> tuple[list[tuple[str, str, Path]], list[str]]:
    """Table 2's paper run: (dataset, its real test images, its workspace) for each dataset (--dataset, default
    all) with test images (--source DATASET=SOURCE, else a known Hub copy), and one line per other dataset.
    GensetsError: a --dataset that is not a column, or one named but without test images."""
    from .sources.packaged import genbench_hub_copies, genbench_published

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


def plan(name: str, run: Run) -> list[str]:
    """What ``reproduce`` would build and score (``--dry-run``), one line a step; nothing is run."""
    table = with_variants(TABLES[name], run.variants)
    if name == "borji-fig2" and not run.smoke:
        table = replace(table, evaluations=(Evaluation("wordset", _recognition_models(run), allow_pickle=True),))
    _check_sources(table, run)
    config = table.smoke_config if run.smoke else table.config
    seeds = ([f"then {run.seeds - 1} more build(s) of each, at seeds config seed + 1 .. {run.seeds - 1} "
              "(WORKSPACE-seedS), scored the same way"] if run.seeds > 1 else [])
    if name == "genbench-table2" and not run.smoke:
        runnable, not_run = table2_datasets(run)
        return [f"{d}: build {ws} from {run.configs / config} ({', '.join(_table2_overrides(d))}); CLER of its 20 "
                f"shots against {test}" for d, test, ws in runnable] + not_run + seeds
    dataset = run.ws if config else _released(run)
    lines = [f"build {run.ws} from {run.configs / config}"] if config else []
    return lines + [f"score {dataset} with {', '.join(e.models)} (protocol {e.protocol})"
                    for e in _evaluations(table, run)] + seeds


def _check_sources(table: Table, run: Run) -> None:
    if run.seeds > 1 and (table.name.startswith("borji") or (table.name == "imagenet-d-table" and not run.smoke)):
        raise GensetsError(f"--seeds: {table.name}{' --smoke' if run.smoke else ''} "
                           + ("scores the released images, no generation or selection to vary"
                              if table.name == "imagenet-d-table" else "takes no seeds yet")
                           + " (imagenet-d-table --smoke and genbench-table2 do)")
    if run.sources and (run.smoke or table.name not in ("imagenet-d-table", "genbench-table2")):
        raise GensetsError(f"--source: {table.name}{' --smoke' if run.smoke else ''} reads no released or test "
                           "set (imagenet-d-table and genbench-table2's paper runs do)")
    if not run.smoke and table.name == "imagenet-d-table":
        _released(run)  # refused before --out is made
    elif not run.smoke and table.name == "genbench-table2":
        table2_datasets(run)


def _borji(kind: str) -> Callable[[Table, Run], dict]:
    """borji-fig2 (kind recognition, protocol wordset) and borji-vqa (kind vqa)."""

    def run_table(table: Table, run: Run) -> dict:
        from .evaluation.reports import recognition, vqa

        ws = _build(table, run, run.ws)
        _evaluate(table, run, str(ws))
        module = recognition if kind == "recognition" else vqa
        rep = module.compute(run.db)
        report = module.write(rep, run.out / "report")
        return {**borji_rows(rep, image_sources(ws) if kind == "recognition" else None), "report": str(report)}

    return run_table


PAPER_IMAGES = ("dall-e-2", "midjourney")  # Borji (2022) scored DALL-E 2 and Midjourney images (Fig. 2)


def image_sources(ws: Path) -> tuple[str, ...]:
    """Who made a recognition workspace's images: each generate source's name, each import's source."""
    from .workspace import load_build_config

    _, cfg = load_build_config(ws / "config.yaml", frozen=True)
    return (*(g.name or g.config_name for g in cfg.generate), *(i.source or i.config_name for i in cfg.imports))


def borji_rows(rep: dict, sources: tuple[str, ...] | None) -> dict:
    """A Borji report's best model per published number. ``sources``: the images' makers (recognition); unless
    they are the paper's (:data:`PAPER_IMAGES`) the row says so and has no difference: another generator's images
    are not the paper's measurement. Each row carries its model's 95% interval over images (the report's
    ``interval``) and the published number's verdict against it (none on images other than the paper's)."""
    from .evaluation.reports.base import verdict

    other = sources is not None and not (sources and set(sources) <= set(PAPER_IMAGES))
    images = f"; images: {', '.join(sources)}, not the paper's DALL-E 2 / Midjourney" if other else ""
    rows = []
    for p in rep["published"]["numbers"]:
        metric = p["metric"]
        best = max(rep["per_model"], key=lambda r: r[metric] if r[metric] is not None else -1)
        value = best[metric]
        rows.append({"what": p["what"], "protocol": f"{rep['protocol']} {metric}"
                     + (" (approximate)" if p.get("approximate") else ""),
                     "published": p["value"], "model": best["model"], "variant": rep["protocol"] + images,
                     "gensets": value, "difference": None if value is None or other else value - p["value"],
                     "interval": (ci := best.get(f"{metric}_interval")), "interval_kind": "images" if ci else None,
                     "verdict": None if other else verdict(p["value"], ci)})
    note = rep["published"]["checked"]
    if other:
        note += (f" No difference is printed: these are {', '.join(sources)} images, the paper scored DALL-E 2 and "
                 "Midjourney images (bring them as configs/recognition.yaml's imports, sources dall-e-2 and "
                 "midjourney, and leave out its generate sources).")
    return {"rows": rows, "source": rep["published"]["source"], "note": note, "interval": rep["interval"]}


def _recognition_models(run: Run) -> tuple[str, ...]:
    """The paper's ten classifiers: configs/recognition.yaml's eval.models."""
    import yaml

    return tuple(yaml.safe_load((run.configs / "recognition.yaml").read_text())["eval"]["models"])


# ImageNet-D's ResNet and ViT-L/16 as the authors load models: torchvision's ImageNet-1k weights (timm has no
# tv_in1k tag for vit_large_patch16_224); the paper does not say which ResNet, ResNet-50 is gensets' reading
RESNET50 = "torchvision:resnet50@IMAGENET1K_V1"
VIT_L16 = "torchvision:vit_l_16@IMAGENET1K_V1"

TABLES: dict[str, Table] = {t.name: t for t in (
    Table("imagenet-d-table", "ImageNet-D (Zhang et al. 2024)",
          "accuracy of ResNet, ViT-L/16, CLIP, LLaVA on the released ImageNet-D, beside the paper's",
          "the Hub (the released dataset, ~4,800 images; the models) and a GPU for LLaVA-1.5-13B (~1 hour on one "
          "A100; the rest minutes)", _imagenet_d,
          smoke_config="imagenet_d.smoke.yaml",
          # the authors' loader (chenshuang-zhang/imagenet_d, utils/models.py): a torchvision model with its
          # ImageNet-1k weights and weights.transforms(); pinned by the weights' file (its sha256 prefix, checked)
          evaluations=(Evaluation("imagenet", (RESNET50, VIT_L16), allow_pickle=True),
                       Evaluation("zero-shot", ("open_clip:ViT-B-16/openai",)),
                       Evaluation("two-way", ("hf:llava-hf/llava-1.5-13b-hf",))),
          smoke_evaluations=(Evaluation("imagenet", ("tiny:resnet", "tiny:vit")),
                             Evaluation("zero-shot", ("tiny:clip",)),
                             # tiny:vlm-chair answers "chair" to every question (gensets.models.tiny.spelled):
                             # TRUE on a chair, FALSE where chair is the wrong option, else left out. Greedy: the
                             # authors' decoding (512 sampled tokens) is tested in tests/test_vlm.py
                             Evaluation("two-way", ("tiny:vlm-chair",), clip="tiny:clip", decoding="greedy")),
          variants={"vit-l16-augreg-in21k": (
              "ViT-L/16 pretrained on ImageNet-21k (AugReg) and fine-tuned on 1k: gensets' earlier choice",
              {VIT_L16: "timm:hf-hub:timm/vit_large_patch16_224.augreg_in21k_ft_in1k"}),
                    "resnet50-timm": ("ResNet-50 with torchvision's weights through timm (its preprocessing)",
                                      {RESNET50: "timm:hf-hub:timm/resnet50.tv_in1k"})},
          # every family with a runnable model (MiniGPT-4 has none in gensets) has a tiny stand-in
          stand_ins={"tiny:resnet": "ResNet", "tiny:vit": "ViT-L/16", "tiny:clip": "CLIP", "tiny:vlm-chair": "LLaVa"}),
    Table("genbench-table2", "GenBench (Li et al. 2023)",
          "CLER of 20-shot Stable Diffusion sets under ST, CE, DT, NP, NP+RD per dataset, beside Table 2",
          "the Hub (Stable Diffusion, CLIP, the test sets) and GPUs: per dataset, its classes x 20+ images x 5 "
          "strategies (ImageNet-1K: 100,000+ images, ~2 GPU-hours per 1,000 classes x 20 shots per strategy on an "
          "A100)", _genbench_table2, config="genbench.yaml", smoke_config="genbench.smoke.yaml"),
    Table("borji-fig2", "Borji (2022)",
          "top-1 / top-5 of the paper's ten ImageNet classifiers on generated images (word-set matching)",
          "the Hub (SD 2.1, SDXL, ten classifiers) and a GPU (~1 hour)", _borji("recognition"),
          config="recognition.yaml", smoke_config="recognition.smoke.yaml",
          smoke_evaluations=(Evaluation("wordset", ("tiny:resnet", "tiny:torchvision-googlenet"),
                                        allow_pickle=True),)),
    Table("borji-vqa", "Borji (2022)", "binary VQA accuracy on generated images, beside OFA's",
          "the paper's 50 images and 241 questions under data/vqa/ (see configs/vqa.yaml), the Hub, a GPU",
          _borji("vqa"), config="vqa.yaml", smoke_config="vqa.smoke.yaml",
          evaluations=(Evaluation("vqa", ("hf:Salesforce/blip-vqa-base", "hf:dandelin/vilt-b32-finetuned-vqa",
                                          "hf:llava-hf/llava-1.5-7b-hf")),),
          smoke_evaluations=(Evaluation("vqa", ("tiny:blip-vqa",)),)),
)}


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
    table = with_variants(TABLES[name], run.variants)
    if name == "borji-fig2" and not run.smoke:
        table = replace(table, evaluations=(Evaluation("wordset", _recognition_models(run), allow_pickle=True),))
    claimable(run.out, f"gensets reproduce {name}")
    _check_sources(table, run)
    claim(run.out, f"gensets reproduce {name}")  # a user's non-empty folder is refused before anything runs
    result = table.run(table, run)
    result = {"table": name, "paper": table.paper, "what": table.what, "smoke": run.smoke,
              **({"smoke_note": SMOKE_NOTE} if run.smoke else {}), **result}
    with files(run.out) as staged:  # both or neither
        staged.write("reproduce.json", json.dumps(result, indent=1) + "\n")
        staged.write("reproduce.md", markdown(result))
    return result


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def _interval(ci, kind: str | None) -> str:
    return "-" if ci is None else f"[{100 * ci[0]:.2f}, {100 * ci[1]:.2f}] ({kind})"


def markdown(result: dict) -> str:
    from .cards.markdown import code, table

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
