"""The released ImageNet-D (Zhang et al., CVPR 2024), as its authors publish it (an entry of
:data:`gensets.registry.RELEASED_DATASETS`, which :func:`gensets.evaluation.data.open_source` asks): ``hf:zcs15/ImageNet-D`` (the
Hub's snapshot) or the same layout in a local folder (their Google Drive tar, a ``git lfs clone``)::

    background/<class folder>/*.png      texture/<class folder>/*.png      material/<class folder>/*.png
    questions/background.csv   questions/texture.csv   questions/material.csv      (optional)

One config per nuisance folder present (background, texture, material: gensets' ImageNet-D configs), one
``test`` split each. A class folder is one of the 113 ImageNet-D classes by its folder name (the keys of
gensets/data/imagenet_d/classes.json, the authors' ``preprocessing/imgnet_d_dir2imgnet_d_id.txt``); its index,
its name and the ImageNet-1k ids that count as it come from the packaged table, so ``imagenet``, ``zero-shot``
(the authors' names and "A photo of a {}") and ``two-way`` score a released image exactly as the same image
in a gensets-built ImageNet-D.

The dataset is recognised by what it is, not by gensets provenance (it has none): a folder with a nuisance
folder holding at least one ImageNet-D class folder (:func:`looks_released`). Once recognised it is read
strictly: a class folder that is not one of the 113, a symlink leading out of the folder, a file that is not a
regular file or an image that does not decode is one line naming it (``DataError``). Files without an image
suffix and hidden entries are skipped, as the Hub's own files (``.gitattributes``, ``README.md``) are.

Each record: ``key`` is the image's path relative to the dataset folder (``background/alarm_clock/x.png``: the
authors' ``image_dir``), ``target`` the class index, and ``meta`` {``nuisance_kind``, ``label``,
``label_index``, ``imagenet_ids``, ``path``} plus ``two_way_wrong`` (a class index) when a questions CSV gives
the image's wrong option. A split's images are read by entry (``Split.entries``, :func:`read_entries`), so
``--workers`` processes decode its batches as they decode a gensets set's shards. Its identity in results: the dataset ``zcs15/ImageNet-D`` (whatever folder it was
read from) at the Hub commit of the snapshot, or for a local folder ``files-<digest>`` of its listing (each
image's relative path and size).

The questions CSVs. Not read here from the release itself (gensets downloads no dataset to be specified); their
layout is the one the authors' code writes and reads (chenshuang-zhang/imagenet_d: ``evaluate_vlm.py`` writes
``image_dir, gt_category, top1_pred_cate, top2_pred_cate``, tab-separated, ``image_dir`` the last three parts
of the image's path; ``LLaVA/llava/serve/eval_imagenet_d.py`` reads ``questions/{nuisance}.csv`` with
``delimiter='\\t'``, and the wrong option is ``top1_pred_cate`` unless it is ``gt_category``, then
``top2_pred_cate``). Category names are the authors' normalised names (:func:`gensets.labels.twoway.official_name`).
Assumed beyond that code: a header row with those four column names (others ignored); a file whose header
has no tab but commas is read as comma-separated. A row's ``gt_category`` must be the class of the folder its
image lies in, its wrong option one of the 113 names; rows whose image the folder does not hold are ignored
(nothing is opened from a CSV's paths).
"""

from __future__ import annotations

import csv
import io
import os
import re
from pathlib import Path

from ...errors import DataError, GensetsError, Unavailable, did_you_mean
from ...evaluation.splits import Source, Split
from ...images import IMAGE_SUFFIXES, decode_image
from ...labels.twoway import IMAGENET_D_BUILDER, official_name
from ...models.hub import hub_endpoint, offline_env, reachable
from ...records import content_id
from ...registry import RELEASED_DATASETS
from ...safety import check_regular, inside, read_regular, read_text
from ...sources.packaged import imagenet_d_class_names, imagenet_d_classes

RELEASED_REPO = "zcs15/ImageNet-D"  # the authors' Hub dataset
NUISANCES = ("background", "texture", "material")
QUESTION_COLUMNS = ("image_dir", "gt_category", "top1_pred_cate", "top2_pred_cate")
# what a snapshot needs of the repo (the images and the questions)
_ALLOW = [f"{k}/**" for k in NUISANCES] + ["questions/*.csv"]
_RELEASED_ID = re.compile(r"^(hf:)?zcs15/imagenet-d(@[\w.\-/]+)?$", re.I)


def is_released_id(dataset: str) -> bool:
    """``hf:zcs15/ImageNet-D[@rev]`` (or without ``hf:``): the released ImageNet-D on the Hub."""
    return bool(_RELEASED_ID.match(dataset))


def looks_released(folder: Path) -> bool:
    """Whether ``folder`` is in the released layout: a nuisance folder holding an ImageNet-D class folder."""
    classes = imagenet_d_classes()
    for kind in NUISANCES:
        try:
            names = os.listdir(folder / kind)
        except OSError:
            continue
        if any(n in classes and (folder / kind / n).is_dir() for n in names):
            return True
    return False


def _entries(root: Path, base: str, kind: str) -> list[tuple[str, str, Path]]:
    """(key, class folder, path) of every image of one nuisance folder, sorted by key; DataError naming a
    class folder that is not one of the 113 or a symlink out of ``root``."""
    classes = imagenet_d_classes()
    kind_dir = inside(root, f"{base}{kind}")
    out = []
    for name in sorted(os.listdir(kind_dir)):
        if name.startswith("."):
            continue
        cls_dir = inside(root, f"{base}{kind}/{name}")
        if not cls_dir.is_dir():
            continue
        if name not in classes:
            raise DataError(f"{cls_dir}: class folder {name!r} is not one of ImageNet-D's 113 classes"
                            f"{did_you_mean(name, classes)}; refusing the folder")
        for file in sorted(os.listdir(cls_dir)):
            if file.startswith(".") or Path(file).suffix.lower() not in IMAGE_SUFFIXES:
                continue
            key = f"{kind}/{name}/{file}"
            out.append((key, name, check_regular(inside(root, base + key))))
    return out


def read_questions(path: Path, text: str, keys: dict[str, str]) -> dict[str, int]:
    """A questions CSV (the module's layout) -> {image key: class index of its wrong option}; ``keys`` maps the
    folder's image keys to their class folders. DataError naming ``file:line`` and the value otherwise."""
    classes = imagenet_d_classes()
    index = {official_name(c["name"]): c["index"] for c in classes.values()}
    text = text.removeprefix("\ufeff")  # a byte-order mark, as a spreadsheet writes it
    head = text.split("\n", 1)[0]
    delimiter = "\t" if "\t" in head or "," not in head else ","
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        missing = [c for c in QUESTION_COLUMNS if c not in (reader.fieldnames or [])]
    except csv.Error as e:
        raise DataError(f"{path}:1: not a questions CSV ({e})") from None
    if missing:
        raise DataError(f"{path}:1: not a questions CSV: no column {', '.join(missing)} (columns: "
                        f"{', '.join(map(str, reader.fieldnames or []))[:200]}; expected {', '.join(QUESTION_COLUMNS)})")
    out = {}
    try:
        for row in reader:
            where = f"{path}:{reader.line_num}"
            image = str(row.get("image_dir") or "").strip().replace("\\", "/")
            key = "/".join(image.split("/")[-3:])  # as the authors write it: nuisance/class/file
            if key not in keys:
                continue
            gt, top1, top2 = (str(row.get(c) or "").strip() for c in QUESTION_COLUMNS[1:])
            if gt != official_name(classes[keys[key]]["name"]):
                raise DataError(f"{where}: gt_category {gt[:80]!r} is not the class of {key} "
                                f"({official_name(classes[keys[key]]['name'])!r})")
            wrong = top1 if top1 != gt else top2
            if wrong not in index:
                column = "top1_pred_cate" if top1 != gt else "top2_pred_cate"
                raise DataError(f"{where}: {column} {wrong[:80]!r} is not one of ImageNet-D's class names"
                                f"{did_you_mean(wrong, index)}")
            if wrong == gt:
                raise DataError(f"{where}: top1_pred_cate and top2_pred_cate are both the true class {gt!r}")
            out[key] = index[wrong]
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: not a questions CSV ({e})") from None
    return out


def read_entries(entries: list[tuple]) -> list[dict]:
    """The records of these entries ``(root, base, key, class folder, nuisance, wrong option or None)``, each
    image read inside ``root`` again and decoded by gensets (its pixel limit): a module-level function, so that
    the loader's worker processes read batches of a released split as they read shards."""
    classes = imagenet_d_classes()
    out = []
    for root, base, key, name, kind, wrong in entries:
        path = inside(root, base + key)
        data = read_regular(path)
        try:
            image = decode_image(data)
        except Exception as e:  # one bad image names itself, the run stops cleanly
            raise DataError(f"{path}: cannot decode image: {' '.join(str(e).split())[:200]}") from None
        info = classes[name]
        meta = {"nuisance_kind": kind, "label": info["name"], "label_index": info["index"],
                "imagenet_ids": list(info["imagenet_ids"]), "path": key}
        if wrong is not None:
            meta["two_way_wrong"] = wrong
        out.append({"key": key, "image": image, "target": info["index"], "meta": meta})
    return out


def _records(entries: list[tuple]):
    def records():
        for entry in entries:
            yield from read_entries([entry])

    return records


def released_folder(folder: Path, config: str | None, split: str | None, *, root: Path | None = None,
                    revision: str | None = None) -> Source:
    """The released ImageNet-D in ``folder`` (the module's layout); every path read stays inside ``root``
    (default: ``folder``; a Hub snapshot's is its repo cache folder, whose ``blobs/`` its files link to)."""
    root = Path(root or folder)
    base = folder.relative_to(root).as_posix() + "/" if Path(folder) != root else ""
    kinds = [k for k in NUISANCES if (folder / k).is_dir()]
    if config is not None and config not in kinds:
        raise GensetsError(f"{folder}: the released ImageNet-D has no config {config!r} (configs: {', '.join(kinds)})")
    if split is not None and split != "test":
        raise GensetsError(f"{folder}: the released ImageNet-D has no split {split!r} (splits: test)")
    listing, splits = [], []
    for kind in kinds:  # every nuisance listed (and checked): the revision is the whole folder's
        entries = _entries(root, base, kind)
        listing += [(k, p.stat().st_size) for k, _, p in entries]
        if not entries or (config and kind != config):
            continue
        wrong = None
        csv_rel = f"{base}questions/{kind}.csv"
        if (root / csv_rel).exists():
            path = inside(root, csv_rel)
            wrong = read_questions(path, read_text(path), {k: name for k, name, _ in entries})
        rows = [(str(root), base, key, name, kind, (wrong or {}).get(key)) for key, name, _ in entries]
        splits.append(Split(kind, "test", imagenet_d_class_names(), _records(rows), n=len(rows),
                            builder=IMAGENET_D_BUILDER, wrong_options=wrong,
                            questions=f"questions/{kind}.csv" if wrong is not None else None,
                            entries=rows, read=read_entries))
    if not splits:
        raise DataError(f"{folder}: the released ImageNet-D layout, but no image in {config or ', '.join(kinds)}")
    out = Source(RELEASED_REPO, revision or f"files-{content_id(sorted(listing))}")
    out.splits = splits
    return out


def hub_released(dataset: str, config: str | None, split: str | None) -> Source:
    """``hf:zcs15/ImageNet-D[@rev]``: the Hub's snapshot (the local cache first; offline and not cached, or the
    Hub unreachable: one ``Unavailable`` line at once, exit 3), read as :func:`released_folder`."""
    revision = dataset.partition("@")[2] or None
    kw = {"repo_id": RELEASED_REPO, "repo_type": "dataset", "revision": revision, "allow_patterns": _ALLOW}
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(**kw, local_files_only=True)
    except Exception:  # not in the cache
        path = None
    if path is None:
        if not reachable(hub_endpoint()):
            why = "offline mode is set (HF_HUB_OFFLINE)" if offline_env() else f"no network access to {hub_endpoint()}"
            raise Unavailable(f"dataset hf:{RELEASED_REPO}{'@' + revision if revision else ''} is not in the local "
                              f"Hugging Face cache and the Hub cannot be reached ({why}); or give a local copy "
                              "(background|texture|material/<class>/*.png)")
        try:
            path = snapshot_download(**kw)
        except Exception as e:
            raise Unavailable(f"dataset hf:{RELEASED_REPO}: download failed: "
                              f"{' '.join(str(e).split())[:200]}") from None
    snapshot = Path(path)
    return released_folder(snapshot, config, split, root=snapshot.parent.parent, revision=snapshot.name)


@RELEASED_DATASETS.register("imagenet-d")
class Released:
    """The released ImageNet-D as :func:`gensets.evaluation.data.open_source` reads a released dataset."""

    looks = staticmethod(looks_released)
    read_folder = staticmethod(released_folder)
    matches_id = staticmethod(is_released_id)
    read_hub = staticmethod(hub_released)
