"""``gensets report failure-modes WORKSPACE``: the discovered failure modes as markdown and figures.

Reads the workspace's ``modes.json`` (written at the end of ``gensets build``) and the images in its
candidate shards. Figures: per label, the baseline failure rate beside every mode's regenerated
failure rate (discovered modes highlighted); the top confusions of the baseline; per discovered mode, its
cluster (medoid first) and misclassified regenerated images; per discovered mode, its target labels (true ->
target pairs tested against the baseline rate of the same confusion). Every number is named by the build's
variant: baseline template, regeneration form, k of the top-k failure rule. With ``--db``, a transfer check: the
finalized set scored by other classifiers with ``gensets eval`` (the fraction of these failures that
they fail too). PNGs are drawn with the object API and no metadata, so a rebuild gives the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ... import recordio
from ...cards.figures import PALETTE, figure, save
from ...cards.markdown import table
from ...compare import Measured, compare
from ...curation import state
from ...errors import DataError, GensetsError
from ...evaluation import store
from ...evaluation.reports.base import Report, add_precision, random_weights_note
from ...images import decode_image
from ...models.spec import random_weights
from ...output import files
from ...registry import REPORTS
from ...shards import read_at
from ...sources.packaged import wiles_published
from ...workspace import Workspace

PUBLISHED = ("Wiles et al. (2022) publish failure rates of a ResNet-50 on Imagen images generated from two captions of "
             "Persian cat (Figure 5): \"... it is walking in the snow.\" and the automatically found \"... the "
             "background is green.\"; neither model is available, so no gensets configuration is the paper's. "
             "gensets' number beside each is the same rate of this build's images regenerated from a caption of the "
             "label that contains the paper's caption (a failure mode's), left empty where the build has no such "
             "caption; but its images are another generator's, not the paper's Imagen ones, so it is never compared "
             "(gensets.compare: not comparable: population) and no difference is printed. Beside it, for context "
             "only, this build's baseline rate of the label (its images without a caption).")


def _rate(images: dict | None, row: dict) -> float | None:
    """``row``'s metric over ``images`` ({"n", "failures", and "confusions": [{"name", "count"}] or a mode's
    "confusion_name" / "confused"}): the failure rate, or the rate of images classified as the row's target."""
    if not images or not images.get("n"):
        return None
    if row["metric"] == "failure_rate":
        return images["failures"] / images["n"]
    if "confusions" in images:
        return sum(c["count"] for c in images["confusions"] if c["name"] == row["target"]) / images["n"]
    # a mode records its own confusion only: another target's rate is unknown
    return images["confused"] / images["n"] if images.get("confusion_name") == row["target"] else None


def published(rep: dict) -> dict:
    """Figure 5's rates (gensets/data/failure_modes/published.json), each beside the same rate of this build's images
    regenerated from a caption of the label containing the paper's (a mode's; ``gensets``, ``gensets_caption``),
    compared by :func:`gensets.compare.compare` (another generator's images: not comparable, no difference), and,
    for context, the label's baseline rate (``baseline``: images without a caption)."""
    pub = wiles_published()
    noise = random_weights(rep.get("classifier")) or random_weights(rep.get("generator"))
    rows = []
    for p in pub["figure5"]:
        b = (rep.get("baseline") or {}).get(p["label"])
        mode = next((m for m in rep.get("modes") or () if m.get("label") == p["label"] and m.get("n")
                     and p["caption"].lower() in str(m.get("caption") or "").lower()), None)
        value = _rate(mode, {"metric": p["quantity"].replace("-", "_"), "target": p["target"]})
        c = compare(p, Measured(value, p["quantity"], "pooled-images", "other", classes=(p["label"],),
                                protocol="imagenet", model=rep.get("classifier"), random_weights=noise,
                                n=mode["n"] if value is not None else None, note="no such caption in this build"))
        rows.append({"what": p["what"], "metric": p["quantity"].replace("-", "_"), "value": p["value"],
                     "label": p["label"], "caption": p["caption"], "target": p["target"], "gensets": value,
                     "gensets_images": mode["n"] if value is not None else None,
                     "gensets_caption": mode["caption"] if value is not None else None,
                     "difference": c.difference, "comparison": c.as_dict(),
                     "baseline": _rate(b, {"metric": p["quantity"].replace("-", "_"), "target": p["target"]}),
                     "baseline_images": b.get("n") if b else None})
    return {"paper": pub["paper"], "checked": pub["checked"], "note": PUBLISHED, "random_weights": noise,
            "numbers": rows}

# an image fails a model as it failed the classifier under test: no target among its top-k (k = the build's top_k)
TRANSFER = """
SELECT r.model, r.config, count(*) AS n,
       count(*) FILTER (WHERE NOT list_has_any(list_slice(p.top5, 1, $k), p.target_ids)) AS failed
FROM predictions p JOIN runs r USING (run_id)
WHERE r.dataset_revision = $build AND r.protocol = 'imagenet' AND coalesce(r.autocast, r.precision, 'fp32') = $precision
GROUP BY ALL ORDER BY r.model, r.config
"""


def compute(workspace: str | Path, db: str | Path | None = None, precision: str = "fp32") -> dict:
    ws = Workspace(workspace)
    builder, cfg = ws.load()
    if builder.name != "failure-modes":
        raise GensetsError(f"{ws.root}: a {builder.name} build, not failure-modes")
    path = ws.root / "modes.json"
    if not path.exists():
        raise GensetsError(f"{ws.root}: no modes.json yet; run `gensets build` on it to the end")
    rep = recordio.read("modes.json", "AnyRecord", ws.root)
    if not isinstance(rep, dict):
        raise DataError(f"{path}: not the modes.json a failure-modes build writes (not an object)")
    rep["workspace"] = str(ws.root)
    rep["published"] = published(rep)
    if db is not None:
        rep["transfer"] = transfer(db, ws.fingerprint, rep["classifier"], cfg.top_k, precision)
        rep["transfer_precision"] = precision
    return rep


def transfer(db: str | Path, build: str, classifier: str, top_k: int = 1, precision: str = "fp32") -> list[dict]:
    """Per model and config of the finalized set: images, how many it fails (its label's class not in its
    top-``top_k``, the build's failure rule), the transfer rate; of the runs at ``precision`` (``gensets eval
    --precision``), so a model scored in fp32 and under autocast is not counted twice."""
    con = store.connect(db, read_only=True)
    try:
        rows = con.execute(TRANSFER, {"k": top_k, "build": build, "precision": precision}).fetchall()
    finally:
        con.close()
    if not rows:
        raise GensetsError(f"{db}: no {precision} imagenet-protocol runs of this build ({build}); "
                           "run `gensets finalize` and `gensets eval WORKSPACE --model ...` first")
    return [{"model": m, "config": c, "n": n, "failed": f, "transfer": f / n, "under_test": m == classifier}
            for m, c, n, f in rows]


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if v < 0.001 else f"{v:.3f}"
    return str(v).replace("|", "\\|")


def _images(ws_root: Path, keys: list[str]) -> dict:
    """key -> PIL image, each read at its offset in its candidate shard (recorded in state.duckdb)."""
    if not keys:
        return {}
    ws = Workspace(ws_root)
    con = state.connect(ws.state_path, read_only=True)
    try:
        where = state.images_of(con, keys, ws.candidate)
    finally:
        con.close()
    return {key: decode_image(read_at(path, offset, size)) for key, (path, offset, size, _) in sorted(where.items())}


def _rates_figure(rep: dict, path: Path) -> None:
    labels = rep["labels"]
    bars = []  # (x, height, colour)
    ticks, x = [], 0.0
    for label in labels:
        b = rep["baseline"][label]
        modes = [m for m in rep["modes"] if m["label"] == label and m["regenerated"]]
        start = x
        bars.append((x, b["rate"] or 0.0, PALETTE[0]))
        for m in modes:
            x += 1
            bars.append((x, m["failures"] / m["n"], PALETTE[1] if m["discovered"] else "#adb5bd"))
        ticks.append(((start + x) / 2, label))
        x += 2
    width = max(6.0, 0.3 * len(bars) + 4)
    fig = figure(width, 3.4)
    ax = fig.add_axes((0.6 / width, 0.12, 1 - 2.4 / width, 0.76))
    ax.bar([b[0] for b in bars], [100 * b[1] for b in bars], color=[b[2] for b in bars], width=0.8)
    ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel(f"top-{rep['top_k']} failure rate (%)")
    ax.set_title(f"Baseline vs regenerated top-{rep['top_k']} failure rate per label", fontsize=10)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=PALETTE[0], label="baseline"), Patch(color=PALETTE[1], label="discovered mode"),
                       Patch(color="#adb5bd", label="other mode")],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    save(fig, path)


def _confusions_figure(rep: dict, path: Path, top: int = 12) -> None:
    rows = sorted(((c["count"], label, c["name"]) for label, b in rep["baseline"].items() for c in b["confusions"]),
                  key=lambda r: (-r[0], r[1], r[2]))[:top]
    height = 1.2 + 0.28 * max(len(rows), 1)
    fig = figure(7, height)
    ax = fig.add_axes((0.42, 0.6 / height, 0.53, 1 - 1.1 / height))
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [r[0] for r in rows], color=PALETTE[2], height=0.7)
    ax.set_yticks(y, [f"{r[1]} -> {r[2]}" for r in rows], fontsize=8)
    ax.set_xlabel("baseline images")
    ax.set_title("Top confusions (label -> predicted class)", fontsize=10)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.spines[["top", "right"]].set_visible(False)
    save(fig, path)


def _mode_figure(mode: dict, images: dict, path: Path, per_row: int = 6) -> None:
    cluster = [mode["medoid"]] + [k for k in mode["members"] if k != mode["medoid"]]
    rows = [("cluster (medoid first)", cluster[:per_row]), ("regenerated, misclassified", mode["failed"][:per_row])]
    fig = figure(1.4 * per_row, 3.6)
    rates = (f"top-{mode['top_k']} failure rate {mode['failures']}/{mode['n']} vs baseline {mode['baseline_failures']}/"
             f"{mode['baseline_n']}, adjusted p = {_fmt(mode['p_failure_adjusted'])}")
    fig.suptitle(f"{mode['id']}: \"{mode['caption'][:70]}\"\n{rates}", fontsize=8)
    for r, (title, keys) in enumerate(rows):
        for c in range(per_row):
            ax = fig.add_axes((c / per_row + 0.005, 0.44 - r * 0.42, 1 / per_row - 0.01, 0.36))
            ax.set_axis_off()
            if c < len(keys) and keys[c] in images:
                ax.imshow(images[keys[c]])
            if c == 0:
                ax.set_title(title, fontsize=7, loc="left")
    save(fig, path)


def _targets_md(rep: dict) -> list[str]:
    """The target labels of the discovered modes: true -> target pairs against the baseline's same confusion."""
    rows = [[t["mode"], f"{t['label']} -> {t['target_name']}", t["confused"], t["n"], t["confused"] / t["n"],
             t["baseline_confused"], t["baseline_n"], t["baseline_confused"] / t["baseline_n"], t["p"], t["p_adjusted"],
             "**yes**" if t["significant"] else "no"] for t in rep.get("targets", [])]
    head = ["## Target labels", "", f"Each discovered mode's regenerated images that failed (top-{rep['top_k']}), by "
            "top-1 class: the true -> target pair's rate against the baseline rate of the same confusion, one-sided "
            f"{rep['test']}, {rep['correction']}-corrected over the {len(rows)} pair(s), alpha {rep['alpha']}.", ""]
    if not rows:
        return [*head, "(no mode discovered: no pair tested)", ""]
    return [*head, table(["mode", "true -> target", "confused", "images", "rate", "baseline confused",
                          "baseline images", "baseline rate", "p", "adjusted p", "significant"], rows, _fmt), ""]


def write(rep: dict, out: str | Path) -> Path:
    with files(out, "gensets report failure-modes") as staged:
        return _write(rep, Path(out), staged)


def _write(rep: dict, out: Path, staged) -> Path:
    figures = ["rates.png", "confusions.png"]
    _rates_figure(rep, staged.path(figures[0]))
    _confusions_figure(rep, staged.path(figures[1]))
    discovered = [m for m in rep["modes"] if m["discovered"]]
    images = _images(Path(rep["workspace"]),
                     sorted({k for m in discovered for k in [*m["members"], *m["failed"]]}))
    for m in discovered:
        _mode_figure(m, images, out / f"mode_{m['id']}.png")
    k = rep["top_k"]
    base_rows = [[label, b.get("superclass"), b.get("prompt"), b["n"], b["failures"], b["rate"],
                  ", ".join(f"{c['name']} ({c['count']})" for c in b["confusions"][:3])]
                 for label, b in rep["baseline"].items()]
    mode_rows = [[m["id"], m["label"], m["size"], m.get("description", m["caption"]), m["n"], m["failures"],
                  m["failures"] / m["n"] if m["n"] else None, m["baseline_failures"], m["confusion_name"],
                  m["confused"], m["p_failure"], m["p_failure_adjusted"], m["p_confusion_adjusted"],
                  "**yes**" if m["discovered"] else "no"] for m in rep["modes"]]
    md = [f"# Failure modes of `{rep['classifier']}`", "",
          *random_weights_note([m for m in (rep.get("classifier"), rep.get("generator")) if random_weights(m)]),
          f"Build `{rep['build']}`. Generator `{rep['generator']}`, "
          f"embedder `{rep['embedder']}`, captioner `{rep['captioner']}`.", "",
          f"Variant: baseline template `{rep['template']}`, regeneration `{rep['mode_template']}`, top-{k} failures "
          "(every rate below).", "",
          f"- Baseline prompt: `{rep.get('template_text', rep['template'])}` (superclass: WordNet 3.0 grandparent "
          "unless the config names one); regeneration prompt: "
          f"`{rep.get('mode_template_text', rep['mode_template'])}` (description: the medoid's caption without "
          "the captioner's prompt, lower case, ending in one full stop).",
          f"- An image fails when its label's class is not among the classifier's top {k}; it is confused with its "
          "top-1 class.",
          f"- Clusters: {rep['cluster_rule']}.",
          f"- Test: one-sided {rep['test']} (mode's failure rate > its label's baseline), "
          f"{rep['correction']}-corrected over the {sum(m['regenerated'] for m in rep['modes'])} regenerated "
          f"mode(s), alpha {rep['alpha']}. **{len(discovered)} mode(s) discovered.**", "",
          "## Baseline", "", table(["label", "superclass", "prompt", "images", f"failed (top-{k})", "failure rate",
                                    "top confusions"], base_rows, _fmt),
          "", "![rates](rates.png)", "", "![confusions](confusions.png)", "",
          "## Modes", "",
          table(["mode", "label", "cluster size", "description (medoid)", "images", f"failed (top-{k})", "rate",
                  "baseline failed", "confusion", "confused", "p", "adjusted p", "adjusted p (confusion)",
                  "discovered"], mode_rows, _fmt), "", *_targets_md(rep)]
    for m in discovered:
        md += [f"### {m['id']}", "", f"Caption: \"{m['caption']}\" (prompt `{m['prompt']}`); cluster of "
               f"{m['size']} (medoid `{m['medoid']}`); {m['failures']}/{m['n']} regenerated images misclassified "
               f"(baseline {m['baseline_failures']}/{m['baseline_n']}), most often as {m['confusion_name']}.", "",
               f"![{m['id']}](mode_{m['id']}.png)", "", "Captions of the other members (for review):", ""]
        md += [f"- `{c['key']}`: {c['caption']}" for c in m["captions"] if c["key"] != m["medoid"]] + [""]
    if rep.get("transfer") is not None:
        rows = [[t["model"] + (" (under test)" if t["under_test"] else ""), t["config"], t["n"], t["failed"],
                 t["transfer"]] for t in rep["transfer"]]
        md += ["## Transfer", "", "The finalized set (every image misclassified by the classifier under test) "
               f"scored by other classifiers with `gensets eval`: the fraction they fail too (label not in their "
               f"top-{k}, as for the classifier under test); runs at `{rep.get('transfer_precision', 'fp32')}`.", "",
               table(["model", "config", "images", "failed", "transfer"], rows, _fmt), ""]
    pub = rep["published"]
    rows = [[p["what"], p["metric"], f"{100 * p['value']:.4g}%",
             "no such caption" if p["gensets"] is None else f"{100 * p['gensets']:.4g}% of {p['gensets_images']}",
             "-" if p["difference"] is None else f"{100 * p['difference']:+.4g} points", p["comparison"]["text"],
             "not built" if p["baseline"] is None else f"{100 * p['baseline']:.4g}% of {p['baseline_images']}"]
            for p in pub["numbers"]]
    md += ["## Published numbers (Wiles et al. 2022, Figure 5)", "", pub["note"], "",
           table(["published (Figure 5)", "metric", "paper", "gensets, same caption", "difference", "comparison",
                  "gensets baseline (no caption, context)"], rows), "",
           f"Source: {pub['paper']}. {pub['checked']}", "",
           "Everything above is in the workspace: `modes.json`, and the tables `failure_baseline`, "
           "`failure_modes`, `failure_mode_targets`, `failure_mode_members`, `failure_mode_images` of "
           "`state.duckdb`."]
    path = staged.write("report.md", "\n".join(md) + "\n")
    # everything but where the workspace lies, so two builds of one config give the same bytes
    data = {k: v for k, v in rep.items() if k != "workspace"}
    staged.write("report.json", json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


@REPORTS.register("failure-modes")
class FailureModes(Report):
    help = "discovered failure modes of a failure-modes build"
    description = ("Per label the baseline failure rate and top confusions; per mode its cluster, caption, "
                   "regenerated failure rate, p-values and whether it was discovered; the target labels of each "
                   "discovered mode; sample images of each discovered mode; every number named by the build's "
                   "variant (template, regeneration, top-k). Markdown, JSON and PNG figures.")

    def add_arguments(self, parser):
        parser.add_argument("workspace", help="a failure-modes workspace (after gensets build)")
        parser.add_argument("--out", "--output", required=True, metavar="DIR", help="folder for report.md, report.json and the figures")
        parser.add_argument("--db", help="a results database of `gensets eval` on the finalized set: adds the "
                            "transfer check (how often other classifiers fail these images too)")
        add_precision(parser, "the transfer check's runs")

    def run(self, args):
        rep = compute(args.workspace, args.db, args.precision)
        path = write(rep, args.out)
        print(f"{path}: {len(rep['discovered'])} of {len(rep['modes'])} mode(s) discovered "
              f"(+ figures in {path.parent})")
        return 0
