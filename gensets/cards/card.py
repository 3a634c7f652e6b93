"""The dataset card: a YAML header the Hub and ``load_dataset`` read as declared, and a body for people."""

from __future__ import annotations

from collections import Counter

import yaml

from ..config import to_dict
from ..records import features


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
    feats = features(class_names, cfg.image.format)._to_yaml_list()
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
        "task_categories": ["image-classification"],
        "size_categories": [size_category(total)],
        "annotations_creators": ["machine-generated"],
        "source_datasets": ["original"],
        "tags": ["synthetic", "webdataset", "benchmark", "gensets", builder.name],
        "configs": configs,
        "dataset_info": infos,
    }


def _table(headers: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _short_config(cfg) -> dict:
    """The build config for the card, with long name lists cut to their first few."""
    d = to_dict(cfg)
    for n in d.get("nuisances", {}).values():
        if len(n["names"]) > 8:
            n["names"] = n["names"][:8] + [f"... ({len(n['names'])} in all)"]
    return d


def render(builder, cfg, manifest: dict, samples: list, build_id: str) -> str:
    """The card: the YAML header, then generic sections around the builder's own ``card_body``."""
    head = dump(header(builder, cfg, manifest))
    funnel = manifest["funnel"]
    funnel_rows = [[c, f["generated"], f["kept"], f["accepted"], f["pending"], f["rejected"]]
                   for c, f in funnel.items()]
    per_class = Counter(s.meta["label"] for s in samples)
    class_rows = [[name, n] for name, n in sorted(per_class.items(), key=lambda kv: (-kv[1], kv[0]))]
    reviewed = "accepted and pending (a smoke build)" if manifest["include_pending"] else "accepted"
    included = f"{reviewed} by review" if builder.needs_review else "all kept"
    first = next((c["config_name"] for c in header(builder, cfg, manifest)["configs"]), "default")
    configs = ", ".join(f"`{c}`" for c in builder.config_names(cfg))
    body = f"""
# {cfg.pretty_name}

{builder.description}

This folder was built with [gensets](https://github.com/gensets/gensets) (build `{build_id}`): it holds
{sum(manifest['counts'].values())} images ({included}), as WebDataset shards in the configs {configs},
each with a `{builder.split}` split. Every sample carries its provenance in its `json` field.

## How it was built

{builder.card_body(cfg, manifest, samples).strip()}

## Curation funnel

{_table(["config", "generated", "kept by the filters", "accepted", "pending", "rejected"], funnel_rows)}

## Images per class

{_table(["class", "images"], class_rows) if class_rows else "(no images)"}

## How to load

```python
from datasets import load_dataset

ds = load_dataset("path/or/org/name", "{first}", split="{builder.split}")
ds[0]["{cfg.image.format}"], ds.features["cls"].int2str(ds[0]["cls"]), ds[0]["json"]["prompt"]
```

With `webdataset`: `webdataset.WebDataset("{first}/{builder.split}-{{00000..N}}.tar").decode("pil")`.
Evaluate a model on it with `gensets eval`.

## Citation

```bibtex
{builder.citation.strip()}
```

## Build config

```yaml
{dump(_short_config(cfg))}```
"""
    return f"---\n{head}---\n{body}"
