"""The dataset card: a YAML header the Hub and ``load_dataset`` read as declared, and a body for people."""

from __future__ import annotations

import html
import re
import sys
from collections import Counter
from pathlib import Path

import yaml

from .. import determinism, notices
from ..config import to_dict
from ..errors import GensetsError
from ..labels.imagenet import imagenet_names
from ..models.spec import parse_spec
from ..output import files
from ..records import AUDIT, FIELD_DOCS, QUALITY, features, schema
from ..safety import inside
from ..shards import ShardSamples, read_dataset_manifest
from ..workspace import Workspace
from . import audit, figures, licensing
from . import quality as q
from .markdown import table, text


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


# a builder's task categories -> the Hub's task_ids where one fits (the classification sets: one class per image)
TASK_IDS = {"image-classification": "multi-class-image-classification"}
# the load snippet's dataset until `gensets publish` names the repo: the folder the card is in, the snippet run there
# (a path of this machine would make the dataset's bytes depend on where it was built; datasets refuses ".")
HERE = "import os\n\nREPO, REVISION = os.getcwd(), None  # this folder: run it here (published: the repo and revision)"


def annotators(manifest: dict) -> list[str]:
    """``annotations_creators``: the labels are the classes the prompts named (machine-generated); where people
    decided images in the review queue (the manifest's review summary) they are expert-generated too (a build's
    own reviewers, not a crowd: gensets records no crowd platform)."""
    decided = (manifest.get("review") or {}).get("decided") or 0
    return ["expert-generated", "machine-generated"] if decided else ["machine-generated"]


def default_config(builder, cfg, manifest: dict) -> str | None:
    """The config ``load_dataset(repo, split=...)`` loads without a config name: the builder's first published
    one (its natural default). An ``all`` config over every shard was not chosen: ``gensets eval`` of a repo reads
    every config of the card, and would count each image twice."""
    names = [c for c in builder.config_names(cfg) if manifest["counts"].get(c)]
    return (names or [c for c, n in manifest["counts"].items() if n] or [None])[0]


def header(builder, cfg, manifest: dict) -> dict:
    """The YAML header, as ``huggingface_hub.DatasetCardData`` writes it (its key order, no empty keys)."""
    from huggingface_hub import DatasetCardData

    class_names = builder.class_names(cfg)
    fields = sample_fields(builder, cfg, manifest)
    default = default_config(builder, cfg, manifest)
    configs, infos = [], []
    for config, n in manifest["counts"].items():
        if not n:
            continue
        split = builder.split
        nbytes = sum(s["nbytes"] for s in manifest["shards"] if s["config"] == config)
        configs.append({"config_name": config,
                        "data_files": [{"split": split, "path": f"{config}/{split}-*.tar"}],
                        **({"default": True} if config == default else {})})
        # every config repeats the features, class names included: a config's dataset_info must carry them all
        # (datasets reads no shared features), and YAML anchors, which would state them once, are bounded by
        # gensets' own card reader (config.BoundedLoader: 10,000 nodes against alias bombs) below what a 1000-class
        # set with a few configs needs
        feats = features(class_names, cfg.image.format, fields)._to_yaml_list()
        infos.append({"config_name": config, "features": feats,
                      "splits": [{"name": split, "num_bytes": nbytes, "num_examples": n}],
                      "download_size": nbytes, "dataset_size": nbytes})
    total = sum(manifest["counts"].values())
    task_ids = [TASK_IDS[c] for c in builder.task_categories if c in TASK_IDS]
    data = DatasetCardData(
        pretty_name=" ".join(cfg.pretty_name.split()), license=cfg.license, language=["en"],
        task_categories=list(builder.task_categories), task_ids=task_ids or None,
        size_categories=[size_category(total)], annotations_creators=annotators(manifest),
        source_datasets=["original"], tags=["synthetic", "webdataset", "benchmark", "gensets", builder.name],
        configs=configs, dataset_info=infos)
    return data.to_dict()


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
    mode = determinism.mode_of(cfg)
    promise = ("the CPU kernels were pinned (`reproducible: strict`), so a CPU rebuild with the same library "
               "versions gives the same bytes on any x86-64 CPU of the same vendor (between Intel and AMD a few images may "
               "differ: torch's elementwise math runs other kernels on each); on GPUs, the same GPU model, driver and "
               "versions do"
               if mode == "strict" else
               "the libraries chose their own kernels (`reproducible: fast`), so only the same machine with the same "
               "versions gives the same bytes")
    gen = getattr(cfg, "generator", None)
    if getattr(gen, "compile", False):
        promise += (" (this build ran its generator under `torch.compile` (`generator.compile: true`, the UNet and the "
                    "VAE's decoder): compiled kernels round differently from an eager run, so only a rebuild that also "
                    "compiles, on the same GPU model and versions, can give the same bytes)")
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
        cpu = env["cpu"]
        kernels = [cpu.get("vendor"), cpu["machine"], f"torch kernels {cpu['torch_capability']}",
                   cpu.get("sqrt_misses") and f"torch.sqrt rounds {cpu['sqrt_misses']} probes wrongly"]
        where = (f"GPU {env['gpu']['name']} (CUDA {env['gpu']['cuda']}, driver {env['gpu']['driver']})" if env.get("gpu")
                 else f"CPU {cpu['model']} ({', '.join(k for k in kernels if k)}), {env['threads']} thread(s)")
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
            f"`{r['model']}`" + (" (random weights)" if r.get("random_weights") else ""), r["config"], r["split"],
            r["protocol"], r["n"], pct(r["top1"]) + ci, pct(r.get("top5")), pct(r.get("mean_per_class"))])
    head = (["dataset"] if many else []) + ["model", "config", "split", "protocol", "images",
                                             "top-1 % (95% CI)", "top-5 %", "mean per class %"]
    noise = [f"`{r['model']}`" for r in rows if r.get("random_weights")]
    warn = (f"**Random weights**: {', '.join(dict.fromkeys(noise))} (or the images they scored) had random weights: "
            "their numbers are noise.\n\n" if noise else "")
    return warn + table(head, out)


def licence_warning(message: str) -> None:
    """A conflict between the dataset's licence and a generator's, as a warning (:mod:`gensets.notices`)."""
    notices.warn(f"warning: {message}")


def write(folder, builder, cfg, manifest: dict, samples, build_id: str, *, leaderboard=None,
          scores=None, warn=licence_warning, progress: bool = False) -> list[str]:
    """Write the card (README.md) and its figures (figures/) into ``folder``; returns the paths.

    ``samples`` is re-iterable (:class:`gensets.shards.ShardSamples`: each pass reads the provenance again,
    one sample at a time); the figures read the images of the few samples they show, nothing else.
    ``leaderboard(configs, build_id) -> (columns, rows)``, when given, adds a baseline leaderboard (the CLI
    passes :func:`gensets.evaluation.store.build_leaderboard` of a results database). ``scores(configs,
    build_id) -> [{config, key, metric, value, generator}]``, when given, are the per-image quality scores shown
    (the CLI passes :func:`gensets.evaluation.scoring.build_scores`); else the samples' own ``json.quality``.
    ``warn(line)`` gets each conflict between the dataset's licence and a generator's (default: :func:`licence_warning`).
    ``progress``: a bar over the pass through the samples' provenance, on a terminal (millions at paper scale)."""
    from tqdm.auto import tqdm

    folder = Path(folder)
    configs = [c for c, n in manifest["counts"].items() if n]
    counts = {c: Counter() for c in configs}
    pickers = {c: figures.Picker(SAMPLES_PER_CONFIG) for c in configs}
    for s in tqdm(samples, total=len(samples), desc="card", unit="sample", disable=None if progress else True,
                  leave=False, file=sys.stderr):
        c = builder.config_of(s.meta)
        if c in counts:
            counts[c][s.meta["label"]] += 1
            pickers[c].add(s)
    # README.md and its figures published together, nothing written, replaced or deleted through a symlink
    with files(folder) as staged:
        written = []
        for name, rel in FIGURES.items():
            staged.remove(rel)
            if len(samples):
                path = staged.path(rel)
                if name == "classes":
                    figures.class_counts(counts, path)
                else:
                    figures.sample_grid({c: p.picked() for c, p in pickers.items()}, path)
                if path.exists():
                    written.append(rel)
        board = leaderboard(configs, build_id) if leaderboard else None
        rows = scores(configs, build_id) if scores else q.rows_of_samples(samples, builder.config_of)
        quality_figures = q.write_figures(staged, rows, configs, getattr(cfg, "quality", None))
        written += quality_figures
        stats = collect(builder, samples)
        for conflict in licensing.check(cfg.license, stats["generators"])[1]:
            warn(conflict)
        text = render(builder, cfg, manifest, samples, build_id, figures=written, leaderboard=board,
                      quality=q.section(rows, quality_figures, cfg, samples), stats=stats)
        staged.write("README.md", text)
    return [*written, "README.md"]


def rerender(workspace, *, leaderboard=None, scores=None, progress: bool = False) -> list[str]:
    """``gensets card``: the card and figures of a finalized workspace, from its dataset/ folder (``progress``: a
    bar over its samples, on a terminal)."""

    ws = Workspace(workspace)
    builder, cfg = ws.load()
    if ws.store.remote:  # rendered from a copy of <url>/dataset/, the files it changed uploaded back
        with ws.lock("card"):
            ws.pull_dataset()
            files = rerender(ws.root, leaderboard=leaderboard, scores=scores, progress=progress)
            ws.push_dataset()
            return files
    mpath = ws.dataset / "manifest.json"
    if not mpath.exists():
        raise GensetsError(f"{ws.root}: no dataset/manifest.json; run `gensets finalize {ws.root}` first")

    manifest = read_dataset_manifest(mpath)
    counts = manifest["counts"]  # manifest.json has sorted keys: back to the builder's config order
    order = [c for c in builder.config_names(cfg) if c in counts] + sorted(set(counts) - set(builder.config_names(cfg)))
    manifest["counts"] = {c: counts[c] for c in order}

    samples = ShardSamples([inside(ws.dataset, sh["path"], str(mpath)) for sh in manifest["shards"]],
                           n=sum(sh["n"] for sh in manifest["shards"]))
    return write(ws.dataset, builder, cfg, manifest, samples, manifest["build"], leaderboard=leaderboard,
                 scores=scores, progress=progress)


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


def collect(builder, samples) -> dict:
    """One pass over the published samples' provenance: images per class, each class's ImageNet ids, the
    generators ``(spec, id)``, the sources of imported images, and the review statuses and relabels."""
    per_class, statuses, relabels = Counter(), Counter(), Counter()
    ids, generators, imported = {}, {}, set()
    for s in samples:
        m = s.meta
        per_class[m["label"]] += 1
        if m.get("imagenet_ids") is not None:
            ids.setdefault(m["label"], m["imagenet_ids"])
        g = m.get("generator") or {}
        if g.get("spec"):
            generators.setdefault(g["spec"], g.get("id"))
        elif m.get("source"):
            imported.add(str(m["source"]))
        r = m.get("review") or {}
        statuses[r.get("status") or "none"] += 1
        if r.get("label_before"):
            relabels[(r["label_before"], m["label"])] += 1
    return {"per_class": per_class, "imagenet_ids": ids, "generators": sorted(generators.items()),
            "imported": sorted(imported), "statuses": statuses, "relabels": relabels}


def _dtype(dtype) -> str:
    if isinstance(dtype, str):
        return dtype
    kind, inner = dtype
    return f"list of {_dtype(inner)}" if kind == "list" else "struct"


def sample_fields(builder, cfg, manifest: dict) -> tuple:
    """The fields a published sample's json holds beside the common ones: the builder's, ``quality`` (a build with
    quality: thresholds) and ``audit`` (a dataset finalize audited)."""
    return (builder.fields + ((QUALITY,) if getattr(cfg, "quality", None) else ())
            + ((AUDIT,) if manifest.get("audit") else ()))


def field_rows(builder, cfg, manifest: dict | None = None) -> list[list[str]]:
    """(field, type, meaning) of every feature and every key of ``json`` (nested keys as dotted paths, a list's
    items as ``name[]``), from the provenance schema the builder declares and the docs beside it."""
    docs = {**FIELD_DOCS, **builder.field_docs}
    fmt = cfg.image.format
    rows = [["`__key__`", "string", "the sample's key (its file name in the shard, without the extension)"],
            ["`__url__`", "string", "the shard the sample was read from"],
            [f"`{fmt}`", "image", f"the image ({fmt}; `width` x `height` of `json` as generated)"],
            ["`cls`", "class label", "the class index; its names are the `cls` feature's (`ds.features['cls'].int2str`)"],
            ["`json`", "struct", "the sample's provenance: the keys below"]]
    fields = sample_fields(builder, cfg, manifest or {})

    def walk(prefix: str, items) -> None:
        for name, dtype in items:
            path = f"{prefix}{name}"
            rows.append([f"`json.{path}`", _dtype(dtype), docs.get(path) or docs.get(path.split(".")[0], "")
                         if "." not in path else docs.get(path) or f"part of `{path.rsplit('.', 1)[0]}`"])
            inner = dtype
            suffix = ""
            while not isinstance(inner, str) and inner[0] == "list":
                inner, suffix = inner[1], suffix + "[]"
            if not isinstance(inner, str) and inner[0] == "struct":
                walk(f"{path}{suffix}.", inner[1])

    walk("", schema(fields))
    return rows


def structure_md(builder, cfg, manifest: dict, stats: dict) -> str:
    """Dataset Structure: configs and splits, the default config, every field, and what the class ids name."""
    default = default_config(builder, cfg, manifest)
    configs = [c for c, n in manifest["counts"].items() if n]
    out = [f"One WebDataset shard folder per config ({', '.join(f'`{c}`' for c in configs) or 'none'}), each with a "
           f"`{builder.split}` split of `{builder.split}-NNNNN.tar` shards; a sample is an image, its class index "
           f"(`cls`) and its provenance (`json`). The default config (loaded when none is named) is `{default}`.",
           "", "### Data Fields", "", table(["field", "type", "meaning"], field_rows(builder, cfg, manifest)), "",
           "Class ids: `cls` and `json.label_index` index the class names of the `cls` feature in the header above "
           f"({len(builder.class_names(cfg))} classes)."]
    if stats["imagenet_ids"] or builder.selected_against(cfg):
        names = imagenet_names()
        out[-1] += (" `json.imagenet_ids` and `json.surrogates[].top5` are indices into the ImageNet-1k class list "
                    f"(the order of torchvision and timm: 0 = {names[0]}, 999 = {names[999]}).")
        rows = [[text(label), ", ".join(f"{i} ({text(names[i])})" for i in ids if 0 <= i < 1000)]
                for label, ids in sorted(stats["imagenet_ids"].items())]
        if rows:
            out += ["", "The ImageNet-1k classes that count as each class here:", "",
                    table(["class", "ImageNet-1k ids (names)"], rows)]
    return "\n".join(out) + "\n"


def uses_md(builder, cfg) -> str:
    """Uses: Direct Use and Out-of-Scope Use, from the builder's task and split."""
    tasks = ", ".join(builder.task_categories)
    if builder.split == "train":
        direct = (f"Training or few-shot adaptation data for {tasks} models, to compare how data made in different "
                  "ways (prompt strategies, generators) helps a model on the real test set of the task.")
    else:
        direct = (f"A test set for {tasks} models on generated images: score a model with `gensets eval` (its "
                  "protocols reproduce the papers' scoring) and compare it with others on the same configs, or "
                  "study which nuisances and classes models fail on.")
    against = builder.selected_against(cfg)
    out_of_scope = [
        "Training a model that is then evaluated on this same set, or tuning on it and reporting its score.",
        "Estimating accuracy on photographs: the images are synthetic and their distribution is the prompts', not "
        "the world's.",
        "Drawing conclusions about people or groups from the images (the generator's depictions are not data about "
        "anyone), or any use that the generators' licences restrict (see Licensing).",
    ]
    if against:
        out_of_scope.insert(0, "Comparing the classifiers that selected the images ("
                            + ", ".join(f"`{m}`" for m in against) + ") with other models: they were chosen to "
                            "fail here (see Bias, Risks, and Limitations).")
    return ("### Direct Use\n\n" + direct + "\n\n### Out-of-Scope Use\n\n"
            + "\n".join(f"- {x}" for x in out_of_scope) + "\n")


def bias_md(builder, cfg, stats: dict) -> str:
    """Bias, Risks, and Limitations: the selection bias of a surrogate filter, and generated-image caveats."""
    out = []
    against = builder.selected_against(cfg)
    if against:
        names = ", ".join(f"`{m}`" for m in against)
        out.append(f"**Selection bias.** The images were kept because the named classifiers fail on them: {names} "
                   "(the build's surrogate filter: an image is kept when these models miss its class). Their scores "
                   "on this set are biased low by construction (near zero where every one of them had to fail), so "
                   "they say nothing about those models' robustness; models of the same family or training data "
                   "share part of that bias. Compare models that played no part in the selection, and report which "
                   "surrogates built the set beside any number measured on it.")
    gens = [spec for spec, _ in stats["generators"]]
    shown = ", ".join(f"`{g}`" for g in gens) or "the generators named above"
    out.append(f"**Generated images.** The images come from {shown}: they carry the biases of the generator's "
               "training data (web image-text pairs) in how objects, places and people are drawn, and its failure "
               "modes (malformed objects, text, counts). A label is the class the prompt named; the image may not "
               "show it" + (" unless a reviewer accepted it (see Annotations)" if builder.needs_review else "")
               + ". A model's accuracy here measures the shift to generated images, not accuracy on photographs.")
    if any(parse_spec(g).is_tiny or parse_spec(g).kind == "random" for g in gens):
        out.append("**Test build.** Some images come from tiny or random-weight models built locally: they are "
                   "noise, for testing the pipeline only.")
    if stats["statuses"].get("pending"):
        out.append(f"**Unreviewed images.** {stats['statuses']['pending']} image(s) were published before review "
                   "(`finalize --include-pending`, a smoke build): their labels were not checked.")
    recs = ("Report results per config and with the `json` provenance (generator, seed) in mind; keep the "
            "selection models out of comparisons; check a sample of images yourself before relying on the labels.")
    return "\n\n".join(out) + "\n\n### Recommendations\n\n" + recs + "\n"


def personal_md(manifest: dict) -> str:
    """What the dataset holds of people: the reviewers' names in ``json.review.reviewer``, whose emails finalize
    published as pseudonyms (the default) or as they are (``--publish-emails``: then the card says so)."""
    emails = (manifest.get("review") or {}).get("emails")
    if emails == "published":
        return ("The images are generated from prompts that name objects and scenes, not people. Personal data: each "
                "sample's `json.review.reviewer` names its reviewers, some by their email address (published with "
                "`gensets finalize --publish-emails`).")
    if emails == "pseudonymised":
        return ("The images are generated from prompts that name objects and scenes, not people; no personal data is "
                "published. Reviewers known by an email address appear in `json.review.reviewer` as a pseudonym "
                "(`reviewer-` and 10 hex digits, keyed by a secret of the build's workspace), other reviewer names as "
                "given.")
    return ("The images are generated from prompts that name objects and scenes, not people; no personal data was "
            "collected.\nReviewer names, where there was review, are in `json.review.reviewer`.")


def annotation_md(builder, manifest: dict, stats: dict) -> str:
    """Annotations: who labelled the images and how (the review summary finalize recorded in the manifest)."""
    if not builder.needs_review:
        return ("#### Annotation process\n\nNo person annotated the images: each label is the class its prompt (or "
                "an import's folder) named, machine-generated.\n\n#### Who are the annotators?\n\nNone (the labels "
                "are machine-generated).\n")
    r = manifest.get("review")
    lines = ["Each image the filters kept entered a review queue (`gensets review`): a person accepts it, rejects "
             "it or relabels it with another class of the list; only accepted and relabelled images are published."]
    if r is None:
        lines.append("The review statistics were not recorded (finalized before gensets recorded them).")
    else:
        kinds = ", ".join(f"{n} {k}" for k, n in r["decisions"].items()) or "none"
        lines.append(f"{r['reviewers']} reviewer(s) decided {r['decided']} image(s) (decisions: {kinds}).")
        if r["double"] and not r["double_reviewed"]:
            lines.append("Double review: no image decided by two reviewers yet, so no agreement measured; an image "
                         "is published when its two reviewers agree, or later reviewers settle it.")
        elif r["double"]:
            kappa = "undefined (one answer only)" if r["kappa"] is None else r["kappa"]
            lines.append(f"Double review: {r['double_reviewed']} image(s) decided by two reviewers, observed "
                         f"agreement {r['observed_agreement']}, Cohen's kappa {kappa}; an image is published when its "
                         "two reviewers agree, or later reviewers settle it.")
        else:
            lines.append("Single review: one reviewer's latest decision counts (no agreement measured).")
    st = stats["statuses"]
    lines.append(f"In this dataset: {st.get('accepted', 0)} accepted, {st.get('relabeled', 0)} relabelled, "
                 f"{st.get('pending', 0)} pending (unreviewed).")
    out = "#### Annotation process\n\n" + " ".join(lines) + "\n" + _agreement_md((r or {}).get("agreement"))
    if stats["relabels"]:
        rows = [[text(a), text(b), n] for (a, b), n in sorted(stats["relabels"].items())]
        out += "\nRelabelled by reviewers:\n\n" + table(["prompted class", "class after review", "images"], rows) + "\n"
    who = ("The build's own reviewers (named in each sample's `json.review.reviewer`), judging against the class "
           "list; the filters and the prompts made the rest of the labels (machine-generated)."
           if (r or {}).get("decided") else "No person has decided an image yet; the labels are machine-generated.")
    return out + "\n#### Who are the annotators?\n\n" + who + "\n"


def _agreement_md(a: dict | None) -> str:
    """Double review's agreement as finalize recorded it: per class and per nuisance kind (images, observed
    agreement, Cohen's kappa), and the confusion table of the two reviewers' decisions."""
    if not a:
        return ""
    out = ""
    for name, title in (("by_class", "class"), ("by_nuisance", "nuisance kind")):
        rows = [[text(g), s["items"], s["observed_agreement"], "undefined" if s["kappa"] is None else s["kappa"]]
                for g, s in a.get(name, {}).items()]
        if rows:
            out += f"\nAgreement of the two reviewers per {title}:\n\n" + table(
                [title, "images", "observed agreement", "Cohen's kappa"], rows) + "\n"
    c = a.get("confusion") or {}
    if c.get("labels"):
        out += ("\nThe two reviewers' decisions (rows: the first reviewer's, columns: the second's):\n\n"
                + table(["", *map(text, c["labels"])], [[text(lb), *row] for lb, row in
                                                         zip(c["labels"], c["counts"], strict=True)]) + "\n")
    return out


def load_md(builder, cfg, manifest: dict, patterns: dict, repo: str | None = None,
            revision: str | None = None) -> str:
    """How to load: the default config without a name, another by name; from the folder the card is in (run
    there), and from the repo and revision once published (:func:`for_repo` fills them in)."""
    default = default_config(builder, cfg, manifest)
    other = next((c for c, n in manifest["counts"].items() if n and c != default), None)
    split, fmt = builder.split, cfg.image.format
    named = (f'\nds = load_dataset(REPO, "{other}", split="{split}", revision=REVISION)  # another config'
             if other else "")
    return f"""<!-- load -->
```python
from datasets import load_dataset

{repo_line(repo, revision)}
ds = load_dataset(REPO, split="{split}", revision=REVISION)  # the default config, `{default}`{named}
ds[0]["{fmt}"], ds.features["cls"].int2str(ds[0]["cls"]), ds[0]["json"]["prompt"]
```
<!-- /load -->

With `webdataset`: `webdataset.WebDataset("{patterns.get(default, default)}").decode("pil")` (the shards of each config: {", ".join(f"`{p}`" for p in patterns.values())}).
Evaluate a model on it with `gensets eval`."""


def repo_line(repo: str | None, revision: str | None) -> str:
    if repo is None:
        return HERE
    return f"REPO, REVISION = {repo!r}, {revision!r}  # published with gensets publish".replace("'", '"')


def repository_line(repo: str | None, revision: str | None) -> str:
    if repo is None:
        return "<!-- repo -->not published yet (a local folder: `gensets publish` fills this in)<!-- /repo -->"
    where = repo if repo.startswith("/") else f"https://huggingface.co/datasets/{repo}"
    return f"<!-- repo -->{where}" + (f", revision `{revision}`" if revision else "") + "<!-- /repo -->"


def for_repo(text: str, repo: str, revision: str | None) -> str:
    """The card as published to ``repo`` at ``revision``: the load snippet's REPO / REVISION line and the
    Repository line filled in (``gensets publish`` uploads this text; the local card stays as written)."""
    text = re.sub(r"^(?:import os\n\n)?REPO, REVISION = .*$", lambda _: repo_line(repo, revision), text, count=1,
                  flags=re.M)
    return re.sub(r"<!-- repo -->.*?<!-- /repo -->", lambda _: repository_line(repo, revision), text, count=1)


def render(builder, cfg, manifest: dict, samples, build_id: str, *, figures=(),
           leaderboard: tuple | None = None, quality: str = "", stats: dict | None = None) -> str:
    """The card: the YAML header (``huggingface_hub.DatasetCardData``), then the sections of the Hub's dataset
    card template around the builder's own ``card_body``; parsed back by ``huggingface_hub.DatasetCard``.

    ``figures`` lists the figure files written beside it (see :func:`write`); ``leaderboard`` is
    ``(columns, rows)`` of a leaderboard, shown when given; ``stats``: :func:`collect` of the samples.
    """
    stats = stats if stats is not None else collect(builder, samples)
    head = dump(header(builder, cfg, manifest))
    funnel = manifest["funnel"]
    below = any("below_quality" in f for f in funnel.values())  # a build with quality: thresholds
    funnel_rows = [[c, f["generated"], f["kept"], *([f["below_quality"]] if below else []), f["accepted"],
                    f["pending"], f["rejected"]] for c, f in funnel.items()]
    class_rows = [[name, n] for name, n in sorted(stats["per_class"].items(), key=lambda kv: (-kv[1], kv[0]))]
    reviewed = "accepted and pending (a smoke build)" if manifest["include_pending"] else "accepted"
    included = f"{reviewed} by review" if builder.needs_review else "all kept"
    configs = ", ".join(f"`{c}`" for c in builder.config_names(cfg))
    by_config: dict[str, list[str]] = {}
    for sh in manifest["shards"]:
        by_config.setdefault(sh["config"], []).append(sh["path"])
    patterns = {c: shard_pattern(p) for c, p in by_config.items()}
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
    paper = next(iter(re.findall(r"title\s*=\s*\{(.+?)\},?\n", builder.citation)), "")
    producers = ("The generators named in Licensing and in each sample's `json.generator` (no person drew or "
                 "photographed an image)" if stats["generators"] else "")
    if stats["imported"]:
        producers = (producers + "; " if producers else "") + ("The imported images' sources (`json.source`): "
                                                               + ", ".join(f"`{s}`" for s in stats["imported"][:8]))
    body = f"""
# {title}

{builder.description}

## Dataset Details

### Dataset Description

This folder was built with [gensets](https://github.com/gensets/gensets) (build `{build_id}`): it holds
{sum(manifest['counts'].values())} images ({included}), as WebDataset shards in the configs {configs},
each with a `{builder.split}` split. Every sample carries its provenance in its `json` field.

- **Curated by:** the gensets build `{build_id}` (builder `{builder.name}`)
- **Language(s):** English (`en`: prompts, questions and class names)
- **License:** `{cfg.license}` (see Licensing)
- **Repository:** {repository_line(None, None)}
- **Paper:** {html.escape(paper, quote=False) or "(none)"}

## Uses

{uses_md(builder, cfg)}
## Dataset Structure

{structure_md(builder, cfg, manifest, stats)}
## Dataset Creation

### Curation Rationale

{builder.description}

### Source Data

#### Data Collection and Processing (how it was built)

{builder.card_body(cfg, manifest, samples).strip()}
{models}
#### Curation funnel

{table(["config", "generated", "kept by the filters", *(["below quality"] if below else []), "accepted", "pending",
        "rejected"], funnel_rows)}

#### Who are the source data producers?

{producers or "(none recorded)"}

### Annotations

{annotation_md(builder, manifest, stats)}
#### Personal and Sensitive Information

{personal_md(manifest)}

## Bias, Risks, and Limitations

{bias_md(builder, cfg, stats)}
## Licensing

{licensing.section(cfg.license, stats["generators"], stats["imported"])}{quality}{audit.section(manifest)}
## Images per class

{figs["classes"]}{table(["class", "images"], class_rows) if class_rows else "(no images)"}
{figs["samples"]}{board}
## How to load

{load_md(builder, cfg, manifest, patterns)}

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
