"""ImageNet's validation images under ImageNet-D's 113 classes: the ImageNet side of ImageNet-D's accuracy drops.

ImageNet-D's headline numbers (gensets/data/imagenet_d/published.json) are drops, a model's ImageNet accuracy minus
its ImageNet-D accuracy. gensets measures the first on a local copy of ImageNet's validation set named as a dataset
``imagenet-val:DIR`` (an entry of :data:`gensets.registry.RELEASED_DATASETS`, read only when named so: a folder of
class folders is never taken for it by its looks). ``DIR`` holds one folder per ImageNet-1k class named by its
WordNet id (``n01440764/ILSVRC2012_val_00000293.JPEG``: the usual layout of the validation set once sorted into
class folders); a class folder is mapped to the ImageNet-D class whose ImageNet-1k ids hold its index (the packaged
class map, gensets/data/imagenet_d/class_to_imagenet_ids.json, as the released ImageNet-D's folders are: 125
ImageNet classes to 113), and the images of the 875 other classes are left out. A folder that is not a WordNet id
of ImageNet-1k is refused in one line (``DataError``).

Each record is scored exactly as an ImageNet-D image (its builder is ImageNet-D's: ``imagenet`` counts a hit on any
of its class's ids, ``zero-shot`` prompts the 113 names, ``two-way`` asks between its class and CLIP's top wrong
one), so the two accuracies are the same model under the same protocol and classes. One config ``imagenet-val``,
one split ``test``; its identity in results: the dataset ``imagenet-val`` at ``files-<digest>`` of its listing
(each image's relative path and size), never the folder's path.

What the paper leaves open, and gensets' reading: the paper (as the summary gives it) names neither the ImageNet
split nor the classes of its ImageNet accuracy; the authors' figure (images/imagenet.png) sets each model's
"ImageNet" accuracy on its x-axis. gensets reads the validation split restricted to the 113 classes, under the
protocol the ImageNet-D number uses, so that the drop compares like with like.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import DataError, GensetsError, did_you_mean
from ...evaluation.splits import Source, Split
from ...images import IMAGE_SUFFIXES, decode_image
from ...labels.twoway import IMAGENET_D_BUILDER
from ...records import content_id
from ...registry import RELEASED_DATASETS
from ...safety import check_regular, inside, read_regular
from ...sources.packaged import imagenet_d_class_names, imagenet_d_classes, imagenet_wnids

PREFIX = "imagenet-val:"
DATASET = "imagenet-val"  # the dataset's name in results
CONFIG = "imagenet-val"
_WNID = re.compile(r"^n\d{8}$")


def class_of_wnid() -> dict[str, dict]:
    """Each ImageNet-1k WordNet id that an ImageNet-D class counts -> that class ({"index", "name", "imagenet_id",
    "imagenet_ids"})."""
    wnids = imagenet_wnids()
    out = {}
    for info in imagenet_d_classes().values():
        for i in info["imagenet_ids"]:
            out[wnids[i]] = {"index": info["index"], "name": info["name"], "imagenet_id": i,
                             "imagenet_ids": list(info["imagenet_ids"])}
    return out


def matches(dataset: str) -> bool:
    return dataset.startswith(PREFIX)


def _entries(root: Path) -> list[tuple[str, str, Path]]:
    """(key, wnid, path) of every image of the 113 classes' ImageNet folders, sorted by key."""
    known, mapped = set(imagenet_wnids()), class_of_wnid()
    out = []
    for name in sorted(os.listdir(root)):
        if name.startswith("."):
            continue
        folder = inside(root, name)
        if not folder.is_dir():
            continue
        if not _WNID.match(name) or name not in known:
            raise DataError(f"{folder}: {name!r} is not the WordNet id of an ImageNet-1k class"
                            f"{did_you_mean(name, known)} (an ImageNet validation folder has one folder per class, "
                            "named like n01440764); refusing the folder")
        if name not in mapped:
            continue
        for file in sorted(os.listdir(folder)):
            if file.startswith(".") or Path(file).suffix.lower() not in IMAGE_SUFFIXES:
                continue
            key = f"{name}/{file}"
            out.append((key, name, check_regular(inside(root, key))))
    return out


def read_entries(entries: list[tuple]) -> list[dict]:
    """The records of these entries ``(root, key, wnid)``, each image read inside ``root`` and decoded by gensets
    (a module-level function: the loader's worker processes call it)."""
    mapped = class_of_wnid()
    out = []
    for root, key, wnid in entries:
        path = inside(root, key)
        try:
            image = decode_image(read_regular(path))
        except Exception as e:  # one bad image names itself, the run stops cleanly
            raise DataError(f"{path}: cannot decode image: {' '.join(str(e).split())[:200]}") from None
        c = mapped[wnid]
        meta = {"label": c["name"], "label_index": c["index"], "imagenet_ids": c["imagenet_ids"],
                "imagenet_id": c["imagenet_id"], "path": key}
        out.append({"key": key, "image": image, "target": c["index"], "meta": meta})
    return out


def read(dataset: str, config: str | None, split: str | None) -> Source:
    """``imagenet-val:DIR`` as a :class:`Source` (the module docstring)."""
    folder = Path(dataset[len(PREFIX):]).expanduser()
    if not folder.is_dir():
        raise GensetsError(f"{dataset}: no such folder (give an ImageNet validation folder of class folders named "
                           "by WordNet id, e.g. n01440764/)")
    if config not in (None, CONFIG):
        raise GensetsError(f"{dataset}: no config {config!r} (config: {CONFIG})")
    if split not in (None, "test"):
        raise GensetsError(f"{dataset}: no split {split!r} (split: test)")
    entries = _entries(folder)
    if not entries:
        raise DataError(f"{folder}: no image of any of ImageNet-D's 113 classes (their ImageNet-1k class folders)")
    rows = [(str(folder), key, wnid) for key, wnid, _ in entries]

    def records():
        for row in rows:
            yield from read_entries([row])

    out = Source(DATASET, f"files-{content_id(sorted((k, p.stat().st_size) for k, _, p in entries))}")
    out.splits = [Split(CONFIG, "test", imagenet_d_class_names(), records, n=len(rows), builder=IMAGENET_D_BUILDER,
                        entries=rows, read=read_entries)]
    return out


@RELEASED_DATASETS.register("imagenet-val")
class ImageNetVal:
    """ImageNet's validation folder under ImageNet-D's classes, read when named ``imagenet-val:DIR`` only."""

    looks = staticmethod(lambda folder: False)
    read_folder = staticmethod(lambda folder, config, split: read(f"{PREFIX}{folder}", config, split))
    matches_id = staticmethod(matches)
    read_hub = staticmethod(read)
