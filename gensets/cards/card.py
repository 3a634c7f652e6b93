"""The dataset card: a YAML header the Hub and ``load_dataset`` read as declared, and a body for people."""

from __future__ import annotations

import html
import os
import re
from collections import Counter
from pathlib import Path

import yaml

from ..config import to_dict
from ..records import QUALITY, features
from .markdown import table


class _Dumper(yaml.SafeDumper):
    """Plain YAML: no anchors or aliases (the features repeat per config)."""

    def ignore_aliases(self, data) -> bool:
        return True


def dump(obj) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def size_category(n: int) -> str:
    for bound, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M")):
        if n < bound:
            return name
    return "1M<n<10M"


def header(builder, cfg, manifest: dict) -> dict:
    class_names = builder.class_names(cfg)
    fields = builder.fields + ((QUALITY,) if getattr(cfg, "quality", None) else ())
    feats = features(class_names, cfg.image.format, fields)._to_yaml_list()
    configs, infos = [], []
    for config, n in manifest["counts"].items():
        if not n:
            continue
        split = builder.split
        nbytes = sum(s["nbytes"] for s in manifest["shards"] if s["config"] == config)
        configs.append({"config_name": config,
                        "data_files": [{"split": split, "path": f"{config}/{split}-*.tar"}]})
        infos.append({"config_name": config, "features": feats,
                      "splits": [{"name": split, "num_bytes": nbytes, "num_examples": n}],
                      "download_size": nbytes, "dataset_size": nbytes})
    total = sum(manifest["counts"].values())
    return {
        "pretty_name": cfg.pretty_name,
        "license": cfg.license,
        "task_categories": list(builder.task_categories),
        "size_categories": [size_category(total)],
        "annotations_creators": ["machine-generated"],
        "source_datasets": ["original"],
        "tags": ["synthetic", "webdataset", "benchmark", "gensets", builder.name],
        "configs": configs,
        "dataset_info": infos,
    }


def _short_config(cfg) -> dict:
    """The build config for the card: every long list cut to its first few (nuisance names, questions),
    and local absolute paths (imports, image folders, ``folder:`` datasets) cut to their last part, so a
    published card does not show the builder's home folders."""

    def short(v):
        if isinstance(v, dict):
            return {k: short(x) for k, x in v.items()}
        if isinstance(v, list):
            return [short(x) for x in v[:8]] + ([f"... ({len(v)} in all)"] if len(v) > 8 else [])
        if isinstance(v, str):
            m = re.fullmatch(r"([a-z_-]+:)?(/.+)", v)
            if m and "://" not in v:
                return f"{m.group(1) or ''}.../{Path(m.group(2)).name}"
        return v

    return short(to_dict(cfg))


FIGURES = {"classes": "figures/images_per_class.png", "samples": "figures/samples.png"}
SAMPLES_PER_CONFIG = 4  # images of each config in the sample grid


def models_md(builder, cfg, samples) -> str:
    """Every model the build used (``builder.models``), with its id and revision (pinned in the spec, or
    recorded: the generator's, in the samples' provenance)."""
    from ..models.spec import parse_spec

    def line(role: str, m: str, recorded: dict | None = None) -> str:
        spec = parse_spec(m)
        rev = (recorded or {}).get("revision") or spec.revision
        rev = (f"revision `{rev}`" if rev else "built locally (a tiny random model)" if spec.is_tiny
               else "built locally: the full-size architecture with RANDOM weights (timing only; its images are"
                    " noise)" if spec.kind == "random"
               else "revision not pinned (the default branch at build time)")
        return f"| {role} | `{m}` | `{(recorded or {}).get('id') or spec.name}` | {rev} |"

    recorded = {"generator": samples[0].meta.get("generator") if samples else None}
    rows = [line(role, spec, recorded.get(role)) for role, spec in builder.models(cfg)]
    if not rows:
        return ""
    return "\n".join(["| role | spec | id | revision |", "|---|---|---|---|", *rows]) + "\n"


def prompt_lengths_md(builder, samples) -> str:
    """Per config, the generated samples' prompt lengths and how many prompts and negative prompts were cut to
    the text encoder's window (``long_prompts: truncate``); empty when no sample records a token count."""
    rows: dict[str, list] = {}
    for s in samples:
        m = s.meta
        if m.get("prompt_tokens") is None:
            continue
        r = rows.setdefault(builder.config_of(m), [0, 0, 0, 0, 0, set()])
        r[0] += 1
        r[1] = max(r[1], m["prompt_tokens"])
        r[2] += m.get("prompt_received") is not None
        r[3] = max(r[3], m.get("negative_prompt_tokens") or 0)
        r[4] += m.get("negative_prompt_received") is not None
        r[5].add((m.get("generator") or {}).get("text_window"))
    if not rows:
        return ""
    body = [[c, n, longest, cut, longest_neg, cut_neg, "/".join(str(w) for w in sorted(windows, key=str))]
            for c, (n, longest, cut, longest_neg, cut_neg, windows) in rows.items()]
    return ("\nPrompt lengths, in tokens of the generator's tokenizer (BOS and EOS included); a longer text than the "
            "text encoder's window was cut as the pipeline cuts it, and its samples record what the encoder read "
            "(`prompt_received`, `negative_prompt_received`):\n\n"
            + table(["config", "generated images", "longest prompt", "prompts cut", "longest negative prompt",
                     "negative prompts cut", "window"], body) + "\n")


def reproducibility_md(cfg, manifest: dict) -> str:
    """What a rebuild gives, how to check one, and the environment(s) that built the images (between HTML
    comments, so that tools comparing cards across machines can set the machine's part aside)."""
    mode = getattr(cfg, "reproducible", "strict")
    promise = ("the CPU kernels were pinned (`reproducible: strict`), so a CPU rebuild with the same library "
               "versions gives the same bytes on any x86-64 CPU; on GPUs, the same GPU model, driver and versions do"
               if mode == "strict" else
               "the libraries chose their own kernels (`reproducible: fast`), so only the same machine with the same "
               "versions gives the same bytes")
    text = (f"Every image has a fixed seed and its provenance; {promise}. Rebuild the config below with "
            "`gensets build` and check units of it against the recorded bytes with "
            "`gensets verify WORKSPACE --rebuild 10`, which names what differs in the environment when a unit differs.")
    envs = manifest.get("environments") or []
    rows = []
    for e in envs:
        env = e["environment"]
        if env is None:
            rows.append([e["units"], "not recorded (built before gensets recorded environments)"])
            continue
        libs = ", ".join(f"{k} {v}" for k, v in env["libraries"].items() if v)
        c = env.get("gensets_commit")
        commit = f" ({c[:12]}{'+dirty' if c.endswith('+dirty') else ''})" if c else ""
        where = (f"GPU {env['gpu']['name']} (CUDA {env['gpu']['cuda']}, driver {env['gpu']['driver']})" if env.get("gpu")
                 else f"CPU {env['cpu']['model']} ({env['cpu']['machine']}, torch kernels "
                      f"{env['cpu']['torch_capability']}), {env['threads']} thread(s)")
        rows.append([e["units"], f"gensets {env['gensets']}{commit}, Python {env['python']}, {libs}; {where}; "
                                 f"reproducible: {env['reproducible']}"])
    if rows:
        text += ("\n\nBuilt in:\n\n<!-- environment -->\n" + table(["units", "environment"], rows)
                 + "\n<!-- /environment -->")
    return text


def _leaderboard_md(board) -> str:
    cols, rows = board
    if not rows:
        return "(the results database holds no run of this build's configs)"
    rows = [dict(zip(cols, r, strict=True)) for r in rows]
    many = len({r["dataset"] for r in rows}) > 1

    def pct(v):
        return "" if v is None else f"{100 * v:.1f}"

    out = []
    for r in rows:
        ci = f" ({pct(r['top1_lo'])}-{pct(r['top1_hi'])})" if r.get("top1_lo") is not None else ""
        out.append(([r["dataset"]] if many else []) + [
            f"`{r['model']}`", r["config"], r["split"], r["protocol"], r["n"], pct(r["top1"]) + ci,
            pct(r.get("top5")), pct(r.get("mean_per_class"))])
    head = (["dataset"] if many else []) + ["model", "config", "split", "protocol", "images",
                                             "top-1 % (95% CI)", "top-5 %", "mean per class %"]
    return table(head, out)


def write(folder, builder, cfg, manifest: dict, samples, build_id: str, *, leaderboard=None,
          scores=None) -> list[str]:
    """Write the card (README.md) and its figures (figures/) into ``folder``; returns the paths.

    ``samples`` is re-iterable (:class:`gensets.shards.ShardSamples`: each pass reads the provenance again,
    one sample at a time); the figures read the images of the few samples they show, nothing else.
    ``leaderboard(configs, build_id) -> (columns, rows)``, when given, adds a baseline leaderboard (the CLI
    passes :func:`gensets.evaluation.store.build_leaderboard` of a results database). ``scores(configs,
    build_id) -> [{config, key, metric, value, generator}]``, when given, are the per-image quality scores shown
    (the CLI passes :func:`gensets.evaluation.scoring.build_scores`); else the samples' own ``json.quality``."""
    from ..safety import writable_inside
    from . import figures
    from . import quality as q

    folder = Path(folder)
    for rel in [*FIGURES.values(), "README.md"]:  # nothing written, replaced or deleted through a symlink
        writable_inside(folder, rel)
    configs = [c for c, n in manifest["counts"].items() if n]
    counts = {c: Counter() for c in configs}
    pickers = {c: figures.Picker(SAMPLES_PER_CONFIG) for c in configs}
    for s in samples:
        c = builder.config_of(s.meta)
        if c in counts:
            counts[c][s.meta["label"]] += 1
            pickers[c].add(s)
    written = []
    for name, rel in FIGURES.items():
        path = folder / rel
        path.unlink(missing_ok=True)
        if len(samples):
            if name == "classes":
                figures.class_counts(counts, path)
            else:
                figures.sample_grid({c: p.picked() for c, p in pickers.items()}, path)
        if path.exists():
            written.append(rel)
    board = leaderboard(configs, build_id) if leaderboard else None
    rows = scores(configs, build_id) if scores else q.rows_of_samples(samples, builder.config_of)
    quality_figures = q.write_figures(folder, rows, configs, getattr(cfg, "quality", None))
    written += quality_figures
    text = render(builder, cfg, manifest, samples, build_id, figures=written, leaderboard=board,
                  quality=q.section(rows, quality_figures, cfg, samples))
    tmp = folder / f".README.md.tmp-{os.getpid()}"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / "README.md")
    return [*written, "README.md"]


def rerender(workspace, *, leaderboard=None, scores=None) -> list[str]:
    """``gensets card``: the card and figures of a finalized workspace, from its dataset/ folder."""

    from ..errors import GensetsError
    from ..shards import ShardSamples
    from ..workspace import Workspace

    ws = Workspace(workspace)
    builder, cfg = ws.load()
    mpath = ws.dataset / "manifest.json"
    if not mpath.exists():
        raise GensetsError(f"{ws.root}: no dataset/manifest.json; run `gensets finalize {ws.root}` first")
    from ..shards import read_dataset_manifest

    manifest = read_dataset_manifest(mpath)
    counts = manifest["counts"]  # manifest.json has sorted keys: back to the builder's config order
    order = [c for c in builder.config_names(cfg) if c in counts] + sorted(set(counts) - set(builder.config_names(cfg)))
    manifest["counts"] = {c: counts[c] for c in order}
    from ..safety import inside

    samples = ShardSamples([inside(ws.dataset, sh["path"], str(mpath)) for sh in manifest["shards"]],
                           n=sum(sh["n"] for sh in manifest["shards"]))
    return write(ws.dataset, builder, cfg, manifest, samples, manifest["build"], leaderboard=leaderboard,
                 scores=scores)


def shard_pattern(paths: list[str]) -> str:
    """The brace pattern webdataset expands to exactly ``paths`` (one config's shards): "background/test-00000.tar"
    and "background/test-00001.tar" -> "background/test-{00000..00001}.tar"; a single shard is its path; shards
    not numbered one after the other from a common prefix are listed ("{a,b}")."""
    paths = sorted(paths)
    if len(paths) == 1:
        return paths[0]
    parsed = [re.fullmatch(r"(.*-)(\d+)(\.tar)", p) for p in paths]
    if all(parsed) and len({(m[1], m[3], len(m[2])) for m in parsed}) == 1:
        nums = [int(m[2]) for m in parsed]
        if nums == list(range(nums[0], nums[0] + len(nums))):
            m0, m1 = parsed[0], parsed[-1]
            return f"{m0[1]}{{{m0[2]}..{m1[2]}}}{m0[3]}"
    return "{" + ",".join(paths) + "}"


def _fenced(text: str, lang: str) -> str:
    """``text`` in a code block whose fence is longer than any run of backticks in it, so that no line of the
    text (a config value, say) can close the block early and be read as Markdown or HTML."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}{fence}"


def render(builder, cfg, manifest: dict, samples, build_id: str, *, figures=(),
           leaderboard: tuple | None = None, quality: str = "") -> str:
    """The card: the YAML header, then generic sections around the builder's own ``card_body``.

    ``figures`` lists the figure files written beside it (see :func:`write`); ``leaderboard`` is
    ``(columns, rows)`` of a leaderboard, shown when given.
    """
    head = dump(header(builder, cfg, manifest))
    funnel = manifest["funnel"]
    below = any("below_quality" in f for f in funnel.values())  # a build with quality: thresholds
    funnel_rows = [[c, f["generated"], f["kept"], *([f["below_quality"]] if below else []), f["accepted"],
                    f["pending"], f["rejected"]] for c, f in funnel.items()]
    per_class = Counter(s.meta["label"] for s in samples)
    class_rows = [[name, n] for name, n in sorted(per_class.items(), key=lambda kv: (-kv[1], kv[0]))]
    reviewed = "accepted and pending (a smoke build)" if manifest["include_pending"] else "accepted"
    included = f"{reviewed} by review" if builder.needs_review else "all kept"
    first = next((c["config_name"] for c in header(builder, cfg, manifest)["configs"]), "default")
    configs = ", ".join(f"`{c}`" for c in builder.config_names(cfg))
    by_config: dict[str, list[str]] = {}
    for sh in manifest["shards"]:
        by_config.setdefault(sh["config"], []).append(sh["path"])
    patterns = {c: shard_pattern(p) for c, p in by_config.items()}
    pattern_list = "the shards of each config: " + ", ".join(f"`{p}`" for p in patterns.values())
    models = models_md(builder, cfg, samples)
    models = f"\nModels (ids and revisions):\n\n{models}" if models else ""
    models += prompt_lengths_md(builder, samples)
    figs = {"classes": "", "samples": ""}
    if FIGURES["classes"] in figures:
        figs["classes"] = f"![Images per class, by config]({FIGURES['classes']})\n\n"
    if FIGURES["samples"] in figures:
        figs["samples"] = ("\n## Sample images\n\nA few images of each config, with their class and "
                           f"nuisance:\n\n![Sample images]({FIGURES['samples']})\n")
    board = ""
    if leaderboard is not None:
        board = ("\n## Baseline leaderboard\n\nAccuracy of baseline models on this dataset "
                 f"(`gensets eval`; 95% bootstrap interval in brackets):\n\n{_leaderboard_md(leaderboard)}\n")
    title = html.escape(" ".join(cfg.pretty_name.split()), quote=False)  # text, never markup, on one line
    body = f"""
# {title}

{builder.description}

This folder was built with [gensets](https://github.com/gensets/gensets) (build `{build_id}`): it holds
{sum(manifest['counts'].values())} images ({included}), as WebDataset shards in the configs {configs},
each with a `{builder.split}` split. Every sample carries its provenance in its `json` field.

## How it was built

{builder.card_body(cfg, manifest, samples).strip()}
{models}
## Curation funnel

{table(["config", "generated", "kept by the filters", *(["below quality"] if below else []), "accepted", "pending",
        "rejected"], funnel_rows)}
{quality}
## Images per class

{figs["classes"]}{table(["class", "images"], class_rows) if class_rows else "(no images)"}
{figs["samples"]}{board}
## How to load

```python
from datasets import load_dataset

ds = load_dataset("path/or/org/name", "{first}", split="{builder.split}")
ds[0]["{cfg.image.format}"], ds.features["cls"].int2str(ds[0]["cls"]), ds[0]["json"]["prompt"]
```

With `webdataset`: `webdataset.WebDataset("{patterns.get(first, first)}").decode("pil")` ({pattern_list}).
Evaluate a model on it with `gensets eval`.

## Reproducibility

{reproducibility_md(cfg, manifest)}

## Citation

```bibtex
{builder.citation.strip()}
```

## Build config

{_fenced(dump(_short_config(cfg)), "yaml")}
"""
    return f"---\n{head}---\n{body}"
