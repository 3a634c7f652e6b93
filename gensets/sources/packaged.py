"""The class lists packaged with gensets (gensets/data/): ImageNet-D's 113 classes and nuisances, and the
22 GenBench datasets (class names, CLIP templates, group, metric), ImageNet-1k among them; Borji (2022)'s
published numbers, and GenBench's (Tables 1-5); the WordNet superclass of each ImageNet-1k class."""

from __future__ import annotations

import csv
import json
from functools import cache
from importlib import resources

from .. import recordio


@cache
def _data_text(package: str, name: str) -> str:
    return resources.files(f"gensets.data.{package}").joinpath(name).read_text(encoding="utf-8")


@cache
def genbench_datasets() -> dict:
    """The 22 GenBench datasets (+ ImageNet-1k): name -> {classes, templates, group, metric, metric_source}
    (metric_source: the authors' Elevater dataset config that sets the metric)."""
    return json.loads(_data_text("genbench", "datasets.json"))["datasets"]


@cache
def genbench_hub_copies() -> dict[str, list[str]]:
    """Hub repos known to hold a packaged GenBench dataset's own images: name -> [repo id] (hub_copies.json)."""
    return json.loads(_data_text("genbench", "hub_copies.json"))["copies"]


@cache
def imagenet_d_classes() -> dict[str, dict]:
    """ImageNet-D's 113 classes: folder name -> {"index", "name", "imagenet_ids"} in index order."""
    classes = json.loads(_data_text("imagenet_d", "classes.json"))
    ids = json.loads(_data_text("imagenet_d", "class_to_imagenet_ids.json"))
    rows = sorted(classes.items(), key=lambda kv: kv[1]["index"])
    return {k: {"index": v["index"], "name": v["name"], "imagenet_ids": list(ids[k])} for k, v in rows}


def imagenet_d_class_names() -> list[str]:
    return [c["name"] for c in imagenet_d_classes().values()]


def is_imagenet_d_class_list(names) -> bool:
    """Whether ``names`` is ImageNet-D's class list, in index order: its 113 names ("binder_(closed)") or its
    folder names ("binder_closed"). A dataset with this list is ImageNet-D whatever wrote it (its card, the
    released layout), not only when its samples' provenance names gensets' builder."""
    names = list(names or ())
    classes = imagenet_d_classes()
    return names in ([c["name"] for c in classes.values()], list(classes))


def imagenet_d_class_map() -> dict[int, list[int]]:
    """ImageNet-D class index -> the ImageNet-1k indices it maps to."""
    return {v["index"]: v["imagenet_ids"] for v in imagenet_d_classes().values()}


@cache
def imagenet_d_two_way_synonyms() -> dict[str, list[str]]:
    """The words the authors' two-way answer parser also accepts for a class (normalised name -> words)."""
    return json.loads(_data_text("imagenet_d", "two_way_synonyms.json"))["synonyms"]


def imagenet_d_nuisances(kind: str) -> list[str]:
    """The packaged nuisance names of one kind (background, texture, material), in file order."""
    rows = csv.DictReader(_data_text("imagenet_d", f"{kind}.csv").splitlines())
    return [r["name"] for r in rows]


def _published(package: str, schema: str) -> dict:
    """A paper's packaged published numbers, read through the records door against their schema
    (:mod:`gensets.schemas`: every number a typed quantity, :class:`~gensets.schemas.PublishedNumber`)."""
    return recordio.parse(_data_text(package, "published.json"), schema, f"gensets/data/{package}/published.json")


@cache
def genbench_published() -> dict:
    """GenBench's published numbers (Li et al.: Tables 1-5 of shared/papers/001_f04b4de81b95e690.txt): {"paper",
    "note", "tables": {"1": costs per image, "2": CLER of 20-shot GLIDE / SD sets per dataset x strategy, "3":
    Textual Inversion, "4": the datasets, "5": the cost breakdown}}, each table with its ``source`` (arxiv, where,
    quote), the ``definition`` of its numbers and (2, 3) its ``models``; dataset columns by gensets' packaged ids."""
    return _published("genbench", "GenBenchPublished")


@cache
def imagenet_d_published() -> dict:
    """ImageNet-D's published accuracy drops (Zhang et al. 2024, from the summary shared/papers/004_bd0ce56ed9367d6b.txt):
    {"paper", "checked", "numbers": [PublishedNumber, one per model family], "drop_up_to"}; each number's
    ``source.quote`` is the phrase it was read from (tests/test_published.py finds it in the paper's text)."""
    return _published("imagenet_d", "ImageNetDPublished")


@cache
def wiles_published() -> dict:
    """Wiles et al. (2022)'s published failure rates (Figure 5's caption, from the summary
    shared/papers/002_c8f194d3454d00cb.txt): {"paper", "checked", "figure5": [PublishedNumber + label, caption,
    target]}; ``source.quote`` is the phrase each was read from."""
    return _published("failure_modes", "WilesPublished")


@cache
def borji_published() -> dict:
    """Borji (2022)'s published numbers for what gensets can run, with their source: {"paper", "url", "checked",
    "recognition": [PublishedNumber], "vqa": [PublishedNumber + images]}."""
    return _published("borji", "BorjiPublished")


@cache
def imagenet_superclasses() -> tuple[str, ...]:
    """The WordNet 3.0 superclass of each ImageNet-1k class, in class-index order: the grandparent rule of
    gensets/data/wordnet/imagenet_superclasses.json (WordNet 3.0 licence, see its LICENSE)."""
    rows = json.loads(_data_text("wordnet", "imagenet_superclasses.json"))["classes"]
    assert [r["index"] for r in rows] == list(range(1000))
    return tuple(r["superclass"] for r in rows)


@cache
def imagenet_wnids() -> tuple[str, ...]:
    """The WordNet ids (``n01440764``) of the ImageNet-1k classes, in class-index order: the folder names of an
    ImageNet validation folder (gensets/data/wordnet/imagenet_lemmas.json, from timm's synset files)."""
    rows = json.loads(_data_text("wordnet", "imagenet_lemmas.json"))["classes"]
    assert [r["index"] for r in rows] == list(range(1000))
    return tuple(r["wnid"] for r in rows)


@cache
def imagenet_lemmas() -> tuple[str, ...]:
    """The WordNet 3.0 lemma list of each ImageNet-1k class, in class-index order ("loggerhead, loggerhead turtle,
    Caretta caretta"): gensets/data/wordnet/imagenet_lemmas.json (from timm's synset files; WordNet 3.0 licence).
    The first lemma of each is the class's label name as PyTorch's classifiers list it ("loggerhead")."""
    rows = json.loads(_data_text("wordnet", "imagenet_lemmas.json"))["classes"]
    assert [r["index"] for r in rows] == list(range(1000))
    return tuple(r["lemmas"] for r in rows)


@cache
def model_licences() -> dict:
    """The licences of known generators (gensets/data/licenses/models.json): {"licences": {id: {name, url,
    use_restrictions, compatible}}, "models": {Hub model id: licence id}}."""
    return json.loads(_data_text("licenses", "models.json"))
