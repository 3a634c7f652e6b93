"""After the build: every mode against its label's baseline (Fisher or binomial, Holm or BH), the target labels
of each discovered mode (true -> target pairs against the baseline rate of the same confusion), modes.json and
the failure_* tables of state.duckdb. Every mode and pair row names the variant behind it (prompts.variant)."""

from __future__ import annotations

import json

from ...curation import state
from ...db import transaction
from ...labels.imagenet import imagenet_names
from ...shards import write_json_atomic
from . import prompts
from .config import CLUSTER_RULE
from .stages import top1


def tally(metas: list[dict]) -> dict:
    """Classified images (sample metadata): ``n``, ``failures`` and ``confusions`` ({top-1 class: count}).
    Only failed images are confusions, for a label's baseline and for a mode's regenerated images alike:
    with ``top_k`` > 1 an image whose top-1 is another class but whose label is in its top-k did not fail."""
    from collections import Counter

    failed = [m for m in metas if m["kept"]]
    return {"n": len(metas), "failures": len(failed), "confusions": Counter(top1(m) for m in failed)}


def analyze(ws) -> dict:
    """Every mode against its label's baseline; writes modes.json and the failure_* tables."""
    from collections import defaultdict

    from . import statistics as fm  # lazy: numpy, off the CLI parser's path (it lists the builders)

    _, cfg = ws.load()
    names = imagenet_names()
    con = state.connect(ws.state_path)
    try:
        rows = con.execute("SELECT key, config, shard, meta FROM samples ORDER BY key").fetchall()
        metas = [(key, config, shard, json.loads(meta)) for key, config, shard, meta in rows]
        baseline_images: dict[str, list] = {label: [] for label in cfg.labels}
        regen: dict[str, list] = defaultdict(list)
        clusters, seeds = [], {}
        for key, config, shard, m in metas:
            if config == "baseline":
                seeds[key] = m["seed"]
                baseline_images[m["label"]].append(m)
            elif config == "modes":
                regen[m["failure_mode"]["id"]].append((key, m))
            elif config == "clusters":
                clusters.append((key, shard, m))
        base = {label: tally(images) for label, images in baseline_images.items()}
        tested = []
        for key, _, m in clusters:
            mode = m["failure_mode"]
            images = regen.get(mode["id"], [])
            if not images:
                continue  # too small to regenerate
            t = tally([r for _, r in images])
            tested.append({"id": mode["id"], "label": m["label"], "record": key, "n": t["n"],
                           "failures": t["failures"], "confusion": mode["confusion"],
                           "confused": t["confusions"][mode["confusion"]], "confusions": t["confusions"]})
        stats = dict(test=cfg.test, correction=cfg.correction, alpha=cfg.alpha)
        compared = {c["id"]: c for c in fm.compare(tested, base, **stats)}
        variant = prompts.variant(cfg)
        targets = [{**r, "target_name": names[r["target"]], **variant} for r in
                   fm.compare_targets([c for c in compared.values() if c["discovered"]], base, **stats)]
        modes = []
        for key, _, m in clusters:
            mode = m["failure_mode"]
            c = compared.get(mode["id"], {})
            images = regen.get(mode["id"], [])
            modes.append({
                "id": mode["id"], "label": m["label"], "cluster": mode["cluster"], "k": mode["k"],
                "silhouette": mode["silhouette"], "size": mode["size"], "record": key,
                "medoid": mode["medoid"], "members": mode["members"],
                "member_seeds": [seeds[k] for k in mode["members"]], "captions": mode["captions"],
                "caption": mode["caption"], "description": mode["description"], "prompt": m["prompt"],
                "superclass": m["superclass"], "confusion": mode["confusion"],
                "confusion_name": names[mode["confusion"]] if mode["confusion"] is not None else None,
                "regenerated": bool(images), "images": [k for k, _ in images],
                "seeds": [r["seed"] for _, r in images],
                "failed": [k for k, r in images if r["kept"]],
                **{k: c.get(k) for k in ("n", "failures", "confused", "baseline_n", "baseline_failures",
                                         "baseline_confused", "p_failure", "p_failure_adjusted",
                                         "p_confusion", "p_confusion_adjusted")},
                "discovered": bool(c.get("discovered", False)),
                "targets": [t for t in targets if t["mode"] == mode["id"]], **variant,
            })
        baseline = {label: {"superclass": prompts.superclass(cfg, label),
                            "superclass_source": "config" if label in cfg.superclasses else "WordNet 3.0",
                            "prompt": prompts.baseline_prompt(cfg, label), "n": b["n"], "failures": b["failures"],
                            "rate": b["failures"] / b["n"] if b["n"] else None,
                            "confusions": [{"class": c, "name": names[c], "count": n}
                                           for c, n in sorted(b["confusions"].items(), key=lambda kv: (-kv[1], kv[0]))]}
                    for label, b in base.items()}
        report = {"builder": "failure-modes", "build": ws.fingerprint, "classifier": cfg.classifier,
                  "embedder": cfg.embedder, "captioner": cfg.captioner.model, "generator": cfg.generator.model,
                  "variant": variant, "template": cfg.template, "template_text": prompts.template_text(cfg),
                  "mode_template": cfg.mode_template, "mode_template_text": prompts.mode_template_text(cfg),
                  "test": cfg.test, "correction": cfg.correction, "alpha": cfg.alpha, "top_k": cfg.top_k,
                  "cluster_rule": CLUSTER_RULE, "labels": list(cfg.labels), "baseline": baseline, "modes": modes,
                  "discovered": [m["id"] for m in modes if m["discovered"]], "targets": targets}
        _write_tables(con, report)
    finally:
        con.close()
    write_json_atomic(ws.root / "modes.json", report)
    return report


# the failure_* tables of state.duckdb: name -> "column:type ..." (S string, I int64, F float64, B bool)
TABLES = {
    "failure_baseline": "label:S superclass:S prompt:S n:I failures:I rate:F",
    "failure_modes": "id:S label:S cluster:I k:I silhouette:F size:I medoid:S caption:S description:S prompt:S "
                     "confusion:I confusion_name:S n:I failures:I confused:I baseline_n:I baseline_failures:I "
                     "baseline_confused:I p_failure:F p_failure_adjusted:F p_confusion:F p_confusion_adjusted:F "
                     "discovered:B template:S regeneration:S top_k:I",
    "failure_mode_targets": "mode:S label:S target:I target_name:S n:I confused:I baseline_n:I baseline_confused:I "
                            "p:F p_adjusted:F significant:B template:S regeneration:S top_k:I",
    "failure_mode_members": "mode:S key:S seed:I caption:S medoid:B",
    "failure_mode_images": "mode:S key:S seed:I failed:B",
}


def _write_tables(con, report: dict) -> None:
    """The TABLES, from the report, replaced together in one transaction."""
    import pyarrow as pa

    types = {"S": pa.string(), "I": pa.int64(), "F": pa.float64(), "B": pa.bool_()}
    modes = report["modes"]
    failed = {k for m in modes for k in m["failed"]}
    data = {
        "failure_baseline": [{"label": k, **v} for k, v in report["baseline"].items()],
        "failure_modes": modes,
        "failure_mode_targets": report["targets"],
        "failure_mode_members": [{"mode": m["id"], "key": c["key"], "caption": c["caption"],
                                  "seed": m["member_seeds"][m["members"].index(c["key"])],
                                  "medoid": c["key"] == m["medoid"]} for m in modes for c in m["captions"]],
        "failure_mode_images": [{"mode": m["id"], "key": k, "seed": s, "failed": k in failed}
                                for m in modes for k, s in zip(m["images"], m["seeds"], strict=True)],
    }
    tables = {}
    for name, spec in TABLES.items():
        schema = pa.schema([(col, types[t]) for col, t in (c.split(":") for c in spec.split())])
        tables[name] = pa.Table.from_pylist([{c: row[c] for c in schema.names} for row in data[name]], schema=schema)
    with transaction(con):
        for name, table in tables.items():
            con.register("_incoming", table)
            con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _incoming")
            con.unregister("_incoming")
