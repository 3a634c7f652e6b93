#!/usr/bin/env python
"""Evaluate a list of models on a dataset and write the leaderboard (markdown + CSV).

    python scripts/leaderboard.py configs/leaderboard.smoke.yaml --out out/leaderboard [--eval-results]

MODELS.yaml::

    dataset: out/demo/imagenet-d        # a workspace, a repo folder, a hub id or a shard glob
    db: out/leaderboard/results.duckdb
    split: test                          # optional; also config, protocol, batch_size, limit, allow_pickle
    models:
      - spec: timm:hf-hub:timm/resnet50.a1_in1k
        hub_id: timm/resnet50.a1_in1k    # optional: where the .eval_results entry belongs
      - spec: open_clip:ViT-B-32/openai
    models_from: recognition.yaml        # or/and: the eval.models of a build config (path relative to this file)

With --eval-results, one Hub ``.eval_results/<dataset>.yaml`` per model (top-1 per config and split)
is written under OUT/eval_results/<model>/, ready to upload to that model's repo.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from gensets.config import load_config
from gensets.errors import GensetsError
from gensets.papers.imagenet_d import report as imagenet_d
from gensets.records import slug


@dataclass(frozen=True)
class ModelEntry:
    spec: str
    hub_id: str | None = None


@dataclass(frozen=True)
class LeaderboardConfig:
    dataset: str
    models: tuple[ModelEntry, ...] = ()
    models_from: str | None = None  # a build config whose eval.models are (more) models, relative to this file
    db: str = "out/leaderboard/results.duckdb"
    config: str | None = None
    split: str | None = None
    protocol: str | None = None
    batch_size: int = 32
    limit: int | None = None
    allow_pickle: bool = False  # pickle weights (e.g. torchvision's), as gensets eval --allow-pickle
    dataset_hub_id: str | None = None  # the dataset's id on the Hub, for .eval_results


def eval_results(cfg: LeaderboardConfig, rows: list[dict]) -> dict[str, list[dict]]:
    """Hub .eval_results entries per model: one per (config, split), top-1 in percent."""
    today = dt.date.today().isoformat()
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["model"], []).append({
            "dataset": {"id": cfg.dataset_hub_id or cfg.dataset, "task_id": f"{r['config']}/{r['split']}"},
            "value": round(100 * r["top1"], 2),
            "date": today,
            "notes": f"top-1, protocol {r['protocol']}, n={r['n']}",
            "source": {"name": "gensets eval", "url": f"https://huggingface.co/datasets/{cfg.dataset_hub_id}"
                       if cfg.dataset_hub_id else None},
        })
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models_yaml")
    p.add_argument("--out", default="out/leaderboard", help="folder for leaderboard.md / .csv")
    p.add_argument("--eval-results", action="store_true", help="also write Hub .eval_results YAML per model")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    try:
        from gensets.evaluation import store
        from gensets.evaluation.runner import EvalConfig, evaluate

        cfg = load_config(LeaderboardConfig, a.models_yaml)
        if a.eval_results and not cfg.dataset_hub_id:
            if not cfg.dataset.startswith("hf:"):
                raise GensetsError(f"{a.models_yaml}: --eval-results needs dataset_hub_id: (the dataset's id on the "
                                   f"Hub, which each entry names; {cfg.dataset!r} is not one)")
            cfg = replace(cfg, dataset_hub_id=cfg.dataset[3:].split("@")[0])
        if cfg.models_from:
            from gensets.workspace import load_build_config

            _, build = load_build_config(Path(a.models_yaml).parent / cfg.models_from)
            listed = build.eval.models if getattr(build, "eval", None) else ()
            if not listed:
                raise GensetsError(f"{a.models_yaml}: models_from: {cfg.models_from} lists no eval.models")
            cfg = replace(cfg, models=cfg.models + tuple(ModelEntry(m) for m in listed))
        first: dict[str, ModelEntry] = {}  # a spec listed twice is one model: the first entry wins
        for m in cfg.models:  # (so a hub_id given under models: wins over the same spec from models_from)
            first.setdefault(m.spec, m)
        cfg = replace(cfg, models=tuple(first.values()))
        if not cfg.models:
            raise GensetsError(f"{a.models_yaml}: no models (give models: or models_from:)")
        results = evaluate(EvalConfig(cfg.dataset, [m.spec for m in cfg.models], cfg.db, config=cfg.config,
                                      split=cfg.split, protocol=cfg.protocol, batch_size=cfg.batch_size,
                                      limit=cfg.limit, quiet=a.quiet, allow_pickle=cfg.allow_pickle))
        con = store.connect(cfg.db, read_only=True)
        cols, rows = store.leaderboard(con, split=cfg.split, config=cfg.config)
        con.close()
    except GensetsError as e:
        print(f"leaderboard: error: {e}", file=sys.stderr)
        return e.exit_code
    # only the runs just made: a shared database also holds these models on other datasets or protocols
    # (the dataset as the runner records it: open_source(cfg.dataset).id)
    ident = ("dataset", "revision", "config", "split", "model", "protocol")
    # (a run row's protocol names the variant: the summary's "variant")
    done = {tuple(r["variant" if k == "protocol" else k] for k in ident) for r in results}
    rows = [d for d in (dict(zip(cols, r, strict=True)) for r in rows) if tuple(d[k] for k in ident) in done]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    shown = ["config", "split", "model", "protocol", "n", "counted", "top1", "top1_lo", "top1_hi", "two_way_all",
             "top5", "mean_per_class", "random_weights"]
    with open(out / "leaderboard.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)

    def cell(v):
        return f"{100 * v:.2f}" if isinstance(v, float) else str(v)

    noise = [f"**Random weights** ({', '.join(sorted({r['model'] for r in rows if r['random_weights']}))}): these "
             "numbers are noise, a test of the path only.", ""] if any(r["random_weights"] for r in rows) else []
    lines = [f"# Leaderboard: {cfg.dataset}", "", *noise, "Accuracy in %, 95% bootstrap interval for top-1; counted: "
             "the answers top-1 counts of n (two-way leaves out those naming both options or neither).", "",
             "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(r[c]) for c in shown) + " |" for r in rows]
    if rows and {r["config"] for r in rows} <= set(imagenet_d.NUISANCES):  # an ImageNet-D: the paper beside
        try:
            rep = imagenet_d.compute(cfg.db, dataset=rows[0]["dataset"])
        except GensetsError:  # no run of the paper's protocols (e.g. only wordset): nothing to set beside
            rep = None
        if rep is not None:
            lines += ["", *imagenet_d.published_markdown(rep)]
    (out / "leaderboard.md").write_text("\n".join(lines) + "\n")
    print(f"{out / 'leaderboard.md'}, {out / 'leaderboard.csv'}: {len(rows)} rows")
    if a.eval_results:
        hub = {m.spec: m.hub_id for m in cfg.models}
        for spec, entries in eval_results(cfg, rows).items():
            folder = out / "eval_results" / slug(hub[spec] or spec) / ".eval_results"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{slug(cfg.dataset_hub_id or Path(cfg.dataset).name)}.yaml"
            path.write_text(yaml.safe_dump(entries, sort_keys=False))
            print(f"{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
