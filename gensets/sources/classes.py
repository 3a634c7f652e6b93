"""Class names of a dataset source: a packaged GenBench dataset, ``hf:<repo or path>[@rev]`` (its ClassLabel)
or ``folder:<path>`` (one sub-folder per class), and how another list of names is matched to them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .. import notices
from ..config import control_char
from ..records import slug
from .packaged import genbench_datasets


@dataclass(frozen=True)
class DatasetInfo:
    classes: tuple[str, ...]
    templates: tuple[str, ...] = ()
    metric: str = "accuracy"
    group: str = "custom"


def unique_names(names: list, where: str = "dataset") -> tuple[str, ...]:
    """Class names as the dataset lists them (first synonym of a list); a repeated name gets " (k)".
    ValueError ``"where: ..."`` for a name with a control character (NUL, newline, ESC: it would reach the
    card and the terminal)."""
    out, seen = [], {}
    for n in names:
        n = str(n[0] if isinstance(n, list) else n)
        bad = control_char(n)
        if bad:
            raise ValueError(f"{where}: class name {n[:80]!r} has control character {bad}; refusing it")
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return tuple(out)


def split_rev(name: str) -> tuple[str, str | None]:
    base, sep, rev = name.rpartition("@")
    return (base, rev) if sep and base and "/" not in rev else (name, None)


class NotReachable(ValueError):
    """A Hugging Face dataset that cannot be read from here (offline and not cached, no such repo)."""


def hf_label_feature(name: str, hf_config: str | None, label_column: str | None, split: str | None = None):
    """The ClassLabel feature of a Hugging Face dataset (repo id or local folder), read from its info."""
    import datasets

    repo, rev = split_rev(name)
    try:
        feats = datasets.load_dataset_builder(repo, hf_config, revision=rev).info.features
        if feats is None:  # e.g. bare parquet files: the schema holds the features
            feats = datasets.load_dataset(repo, hf_config, revision=rev, split=split or "train", streaming=True).features
    except Exception as e:
        raise NotReachable(f"dataset hf:{name} is not available: {str(e).strip().splitlines()[0][:200]}") from None
    labels = {k: f for k, f in (feats or {}).items() if isinstance(f, datasets.ClassLabel)}
    if not labels:
        raise ValueError(f"dataset hf:{name} has no ClassLabel feature (features: {', '.join(feats or {})})")
    if label_column:
        if label_column not in labels:
            raise ValueError(f"label_column: {label_column!r} is not a ClassLabel of hf:{name} "
                             f"(ClassLabels: {', '.join(labels)})")
        return label_column, labels[label_column]
    return next(iter(labels.items()))


def class_folders(root: Path) -> list[Path]:
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.name)


def source_name(source: str) -> str:
    """A dataset or reference source as seeds, unit ids and samples know it, never where it lies: a local
    folder (``folder:<path>``, or ``hf:<path>`` of a dataset saved on disk) by its last path component, e.g.
    ``folder:/data/pets`` -> ``folder:pets``; a packaged dataset or a Hub repo by itself."""
    kind, sep, rest = source.partition(":")
    if sep and (kind == "folder" or (kind == "hf" and Path(rest).exists())):
        return f"{kind}:{Path(rest.rstrip('/')).name or rest}"
    return source


def match_classes(names: list[str], class_names, *, by_index: bool = True) -> tuple[dict[int, int], str]:
    """A source's class names (a ClassLabel's names, or class folders) matched to the dataset's classes:
    ``({index in names: index in class_names}, "name" or "index")``.

    By name (exactly, else by slug when just one class has it) when every name matches a class of its own.
    Otherwise, with ``by_index``, exactly as many names as classes and every name that matches a class at
    that class's position, by position: the dataset's own order, whatever the spelling (the Hub's ImageNet says "tench, Tinca tinca" and "projectile, missile" where
    GenBench's CLIP names say "tench" and "missile (2)"). Otherwise by name, names without a class left out.
    """
    exact = {n: i for i, n in enumerate(class_names)}
    by_slug: dict[str, list[int]] = {}
    for i, n in enumerate(class_names):
        by_slug.setdefault(slug(n), []).append(i)
    matched = {}
    for j, n in enumerate(names):
        i = exact.get(n, by_slug[slug(n)][0] if len(by_slug.get(slug(n), ())) == 1 else None)
        if i is not None:
            matched[j] = i
    one_to_one = len(matched) == len(names) and len(set(matched.values())) == len(names)
    # by position only where every name that does match a class sits at that class's position: a list in
    # another order (STL-10's names against CIFAR-10's) stays matched by name, its other names left out
    agrees = all(i == j for j, i in matched.items())
    if not one_to_one and by_index and len(names) == len(class_names) and agrees:
        return {j: j for j in range(len(names))}, "index"
    return matched, "name"


def report_match(what: str, names: list[str], class_names, matched: dict[int, int], how: str) -> list[str]:
    """Say as notices (:mod:`gensets.notices`), one line each, when classes were matched by position and which names matched no class
    (those are left out); returns the unmatched names."""
    if how == "index":
        differ = [(n, class_names[j]) for j, n in enumerate(names) if n != class_names[j]]
        example = f"; e.g. {differ[0][0]!r} is {differ[0][1]!r}" if differ else ""
        notices.notice(f"gensets: {what}: its {len(names)} classes matched to the dataset's {len(class_names)} by "
                       f"position ({len(differ)} spelled differently{example})")
    unmatched = [n for j, n in enumerate(names) if j not in matched]
    if unmatched:
        more = f", ... ({len(unmatched)} in all)" if len(unmatched) > 5 else ""
        notices.warn(f"gensets: warning: {what}: {len(unmatched)} class(es) match no class of the dataset and are "
                     f"left out: {', '.join(map(repr, unmatched[:5]))}{more}")
    return unmatched


@cache
def dataset_info(dataset: str, base_dir: Path, hf_config: str | None = None,
                 label_column: str | None = None) -> DatasetInfo:
    """Class names (and, for the packaged datasets, templates, metric, group) of a dataset source."""
    table = genbench_datasets()
    if dataset in table:
        d = table[dataset]
        return DatasetInfo(unique_names(d["classes"]), tuple(d["templates"]), d["metric"], d["group"])
    kind, sep, rest = dataset.partition(":")
    if sep and kind == "hf" and rest:
        try:
            return DatasetInfo(unique_names(hf_label_feature(rest, hf_config, label_column)[1].names))
        except ValueError as e:  # name the key the problem is under
            raise ValueError(str(e) if str(e).startswith(("label_column:", "dataset:")) else f"dataset: {e}") from None
    if sep and kind == "folder" and rest:
        root = base_dir / rest
        if not root.is_dir():
            raise ValueError(f"dataset: folder not found: {root}")
        names = [p.name for p in class_folders(root)]
        if not names:
            raise ValueError(f"dataset: {root} has no class sub-folders")
        return DatasetInfo(unique_names(names))
    raise ValueError(f"dataset: unknown dataset {dataset!r} (one of the 22 packaged: {', '.join(table)}; "
                     "or hf:<repo or path>[@rev]; or folder:<path>)")



def plain_name(name: str) -> str:
    """A class name without the " (k)" that :func:`unique_names` gives a repeated name (as a prompt reads it)."""
    return re.sub(r" \(\d+\)$", "", name)
