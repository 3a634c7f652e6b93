"""Where evaluation images come from: a workspace, a local repo folder, a hub id or a WebDataset glob, and a
dataset as its authors release it (a folder in their layout, or their Hub id: an entry of
:data:`gensets.registry.RELEASED_DATASETS`, declared by its paper, e.g. the released ImageNet-D).

Every source yields the same records, in a stable order, one image decoded once::

    {"key": str, "image": PIL.Image, "target": int | None, "meta": dict}

A split of tar shards (a workspace, a repo folder, a glob) also lists its ``shards``: :func:`index_split` says
where each sample lies and :func:`read_records` reads any slice of it, so worker processes can decode batches
in parallel (:mod:`gensets.evaluation.loader`); ``records()`` streams the same records in the same order. A
split of image files (a released dataset) gives its ``entries`` and their ``read`` the same way.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from .. import recordio
from ..config import control_char, safe_load
from ..errors import DataError, GensetsError, Unavailable
from ..images import IMAGE_EXTS, decode_image
from ..registry import RELEASED_DATASETS
from ..safety import check_regular, inside, no_symlink, parts_of, read_text
from ..shards import index_shard, iter_shard, read_members
from ..store import is_url
from ..workspace import Workspace
from .splits import Source, Split

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*(@[\w.\-/]+)?$")


def _meta_and_class(path: Path, d: dict) -> tuple[dict, int | None]:
    """A sample's .json (an object) and .cls (an integer); DataError naming the shard and key if bad."""
    key = d["__key__"]
    try:
        meta = json.loads(d["json"].decode("utf-8")) if "json" in d else {}
    except ValueError as e:  # bad UTF-8 or bad JSON
        raise DataError(f"{path}: {key}.json: not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: {key}.json: expected a JSON object, got {type(meta).__name__}")
    try:
        cls = int(d["cls"].decode("ascii")) if "cls" in d else None
    except ValueError as e:
        raise DataError(f"{path}: {key}.cls: not an integer class index ({e})") from None
    return meta, cls


def _record(path: Path, d: dict) -> dict | None:
    """A shard sample as a record (None: it holds no image); DataError naming the shard and key if bad."""
    ext = next((e for e in IMAGE_EXTS if e in d), None)
    if ext is None:
        return None
    meta, cls = _meta_and_class(path, d)
    try:
        image = decode_image(d[ext])
    except Exception as e:  # one bad image names itself, the run stops cleanly
        raise DataError(f"{path}: {d['__key__']}.{ext}: cannot decode image: {e}") from None
    return {"key": d["__key__"], "image": image, "target": cls, "meta": meta}


def _tar_records(paths: list[Path]) -> Callable[[], Iterator[dict]]:
    def records() -> Iterator[dict]:
        for path in paths:
            for d in iter_shard(path):
                if (r := _record(path, d)) is not None:
                    yield r

    return records


def index_split(split: Split) -> list[tuple[Path, dict]]:
    """(shard, index entry) of every sample with an image of a split of tar shards, in ``records()`` order."""
    return [(path, e) for path in split.shards for e in index_shard(path) if any(x in e for x in IMAGE_EXTS)]


def read_records(entries: list[tuple[Path, dict]]) -> list[dict]:
    """The records of these index entries (:func:`index_split`), read and decoded in this process."""
    return [_record(path, read_members(path, e)) for path, e in entries]


def _card_header(folder: Path) -> dict:
    readme = folder / "README.md"
    if not readme.exists():
        return {}
    text = read_text(inside(folder, "README.md"))
    if not text.startswith("---"):
        return {}
    import yaml

    try:
        header = safe_load(text.split("---", 2)[1]) or {}
    except (yaml.YAMLError, RecursionError) as e:
        raise DataError(f"{readme}: the card's YAML header does not parse: {' '.join(str(e).split())}") from None
    if not isinstance(header, dict):
        raise DataError(f"{readme}: the card's YAML header is not a mapping")
    return _checked_header(header, readme)


def _checked_header(header: dict, readme: Path) -> dict:
    """The card header's ``configs`` and ``dataset_info`` in the shapes read below (a Hub card may give one
    config's ``dataset_info`` as a mapping); DataError naming the card and the key otherwise."""

    def bad(key: str, want: str):
        return DataError(f"{readme}: {key}: expected {want}; the card's header is not a dataset card's")

    def name(v) -> bool:
        return isinstance(v, str) and bool(v) and control_char(v) is None

    configs = header.get("configs") or []
    if not isinstance(configs, list):
        raise bad("configs", "a list")
    for i, c in enumerate(configs):
        if not isinstance(c, dict) or not name(c.get("config_name")):
            raise bad(f"configs[{i}].config_name", "a name")
        files = c.get("data_files") or []
        if not isinstance(files, list):
            raise bad(f"configs[{i}].data_files", "a list")
        for j, df in enumerate(files):
            path = df.get("path") if isinstance(df, dict) else None
            paths = path if isinstance(path, list) else [path]
            if not isinstance(df, dict) or not name(df.get("split")) or not paths or not all(map(name, paths)):
                raise bad(f"configs[{i}].data_files[{j}]", "{split: name, path: pattern or list of patterns}")
    infos = header.get("dataset_info") or []
    infos = [infos] if isinstance(infos, dict) else infos
    if not isinstance(infos, list) or not all(isinstance(i, dict) for i in infos):
        raise bad("dataset_info", "a list of mappings")
    for i, info in enumerate(infos):
        for key in ("features", "splits"):
            if not isinstance(info.get(key) or [], list) or not all(isinstance(x, dict) for x in info.get(key) or []):
                raise bad(f"dataset_info[{i}].{key}", "a list of mappings")
        try:
            names = _class_names(info)
        except (AttributeError, TypeError, ValueError):
            raise bad(f"dataset_info[{i}].features.cls", "class_label names") from None
        if names is not None and (not isinstance(names, list) or not all(map(name, names))):
            bad_name = next((n for n in names if not name(n)), None) if isinstance(names, list) else names
            raise bad(f"dataset_info[{i}].features.cls", f"class names without control characters, got "
                      f"{str(bad_name)[:60]!r}")
    return {**header, "configs": configs, "dataset_info": infos}


def _class_names(info: dict) -> list[str] | None:
    for feat in info.get("features", []):
        if feat.get("name") == "cls":
            labels = (feat.get("dtype") or {}).get("class_label", {}).get("names")
            if isinstance(labels, dict):
                return [labels[k] for k in sorted(labels, key=int)]
            return labels
    return None


def _data_files(folder: Path, patterns: list, where: str) -> list[Path]:
    """The shards a card's ``data_files`` patterns match: each pattern relative, without ``..`` (else DataError
    naming the card and the pattern), each match a regular file inside ``folder`` (a symlink out of it is refused),
    the folder's glob characters taken literally."""
    out = []
    for pat in patterns:
        try:
            parts_of(pat, folder, where)
        except DataError:
            raise DataError(f"{folder / 'README.md'}: configs: data_files: path {str(pat)[:200]!r} leads out of "
                            f"{folder} (absolute or '..'); refusing it") from None
        for p in glob.glob(str(pat), root_dir=folder):
            out.append(check_regular(inside(folder, p, where), where))
    return out


def local_folder(folder: Path, config: str | None, split: str | None) -> Source:
    """A Hub-style repo folder: configs and class names from its card, shards from its data_files."""
    header = _card_header(folder)
    manifest = folder / "manifest.json"
    revision = recordio.read("manifest.json", "AnyRecord", folder) if manifest.exists() else {"build": None}
    revision = revision.get("build", ...) if isinstance(revision, dict) else ...
    if revision is not None and not (isinstance(revision, str) and revision.isprintable() and 0 < len(revision) <= 200):
        raise DataError(f"{manifest}: not a gensets manifest.json (its 'build' is not a build id); refusing it")
    infos = {i.get("config_name"): i for i in header.get("dataset_info") or []}
    out = Source(str(folder), revision)
    configs = header.get("configs") or []
    if not configs:  # a bare folder of shards: one config, split from the folder name
        tars = sorted(check_regular(inside(folder, p.relative_to(folder))) for p in folder.rglob("*.tar"))
        if not tars:
            raise GensetsError(f"{folder}: no dataset card configs and no .tar shards")
        out.splits.append(Split("default", split or "test", None, _tar_records(tars), shards=tars))
        return out
    for c in configs:
        name = c["config_name"]
        if config and name != config:
            continue
        for df in c.get("data_files", []):
            if split and df["split"] != split:
                continue
            patterns = df["path"] if isinstance(df["path"], list) else [df["path"]]
            tars = sorted(_data_files(folder, patterns, f"README.md: configs: {name}: data_files"))
            n = next((s.get("num_examples") for s in infos.get(name, {}).get("splits", [])
                      if s.get("name") == df["split"]), None)
            out.splits.append(Split(name, df["split"], _class_names(infos.get(name, {})),
                                    _tar_records(tars), n=n, shards=tars))
    if not out.splits:
        have = ", ".join(f"{c['config_name']}" for c in configs)
        raise GensetsError(f"{folder}: no config {config!r} / split {split!r} (configs: {have})")
    return out


def hub_dataset(repo: str, config: str | None, split: str | None) -> Source:
    """A dataset on the Hub, streamed with ``datasets`` (one image decoded once per record)."""
    import datasets

    name, _, revision = repo.partition("@")
    revision = revision or None
    try:
        configs = [config] if config else datasets.get_dataset_config_names(name, revision=revision)
    except Exception as e:
        raise Unavailable(f"dataset {repo!r} is not available: {str(e).splitlines()[0][:200]}") from None
    out = Source(name, revision)
    for c in configs:
        builder = datasets.load_dataset_builder(name, c, revision=revision)
        feats = builder.info.features
        if feats is None:  # a builder that infers its features from the files (an image folder): ask the stream
            first = split or next(iter(builder.info.splits or {"test": None}))
            feats = datasets.load_dataset(name, c, split=first, revision=revision, streaming=True).features or {}
        image_col = next((k for k, f in feats.items() if isinstance(f, datasets.Image)), None)
        label_col = next((k for k, f in feats.items() if isinstance(f, datasets.ClassLabel)), None)
        names = feats[label_col].names if label_col else None
        for s in [split] if split else list((builder.info.splits or {"test": None}).keys()):
            def records(c=c, s=s, image_col=image_col, label_col=label_col):
                ds = datasets.load_dataset(name, c, split=s, revision=revision, streaming=True)
                # the image bytes, decoded by gensets (its pixel limit, one line per bad image), not by datasets
                ds = ds.cast_column(image_col, datasets.Image(decode=False))
                for i, row in enumerate(ds):
                    meta = row.get("json") or {}
                    key = row.get("__key__") or f"{i:08d}"
                    yield {"key": key, "image": _hub_image(repo, c, s, key, row[image_col]),
                           "target": row[label_col] if label_col else None, "meta": meta}
            out.splits.append(Split(c, s, names, records))
    return out


def _hub_image(repo: str, config: str, split: str, key: str, cell: dict):
    """A datasets Image cell ({bytes, path}, not decoded) as an RGB image, through gensets.images.decode_image."""
    data = cell.get("bytes") if isinstance(cell, dict) else None
    try:
        if data is None:
            path = cell.get("path") if isinstance(cell, dict) else None
            if not path:
                raise ValueError("no image bytes or path")
            with open(path, "rb") as f:  # a local dataset's file, as datasets itself would open it
                data = f.read()
        return decode_image(data)
    except Exception as e:
        raise DataError(f"dataset {repo} {config}/{split}: {key}: cannot decode image: {e}") from None


def open_source(dataset: str, config: str | None = None, split: str | None = None) -> Source:
    """A workspace, a local repo folder, a WebDataset glob / tar, or a hub id ``[hf:]org/name[@rev]``; a folder in
    a released dataset's layout, and its Hub id, are read by its entry of :data:`~gensets.registry.RELEASED_DATASETS`.

    A name that does not exist here is a Hub id only when it has the shape ``org/name[@rev]`` and ``org`` is not a
    folder here (``out/nope`` beside ``out/`` is a mistyped path: GensetsError, exit 2, no Hub call); ``hf:`` always
    means the Hub. Anything else that does not exist (``./x``, ``/x``, ``~/x``, ``a/b/c``) is a GensetsError too."""
    if is_url(dataset):  # a workspace on a store: its dataset/ read once into the local cache, named by its URL
        src = local_folder(Workspace(dataset).pull_dataset(), config, split)
        src.id = dataset
        return src
    path = Path(dataset).expanduser()
    if path.is_dir():
        if (path / "config.yaml").exists() and (path / "dataset").is_dir():
            return local_folder(no_symlink(path / "dataset", "the workspace's dataset folder"), config, split)
        for _, released in RELEASED_DATASETS.items():
            if released.looks(path):
                return released.read_folder(path, config, split)
        return local_folder(path, config, split)
    if not path.exists():
        for _, released in RELEASED_DATASETS.items():
            if released.matches_id(dataset):
                return released.read_hub(dataset, config, split)
    if any(ch in dataset for ch in "*?[{") or dataset.endswith(".tar"):
        import braceexpand

        paths = sorted({Path(p) for pat in braceexpand.braceexpand(dataset) for p in glob.glob(pat)})
        if not paths:
            raise GensetsError(f"{dataset}: no shard matches")
        src = Source(dataset, None)
        src.splits.append(Split(config or "default", split or "test", None, _tar_records(paths), shards=paths))
        return src
    if dataset.startswith("hf:") and _HUB_ID.match(dataset[3:]):
        return hub_dataset(dataset[3:], config, split)
    if _HUB_ID.match(dataset) and not path.exists():
        first = dataset.split("/", 1)[0]
        if Path(first).is_dir():  # out/nope where out/ is a folder here: a mistyped path, not a Hub id
            raise GensetsError(f"{dataset}: no such workspace or folder ({first}/ is a folder here, so this is read "
                               f"as a path; the Hub dataset of that name: hf:{dataset})")
        try:
            return hub_dataset(dataset, config, split)
        except Unavailable as e:  # a mistyped path reads as org/name too: say both what was looked for and where
            raise type(e)(f"{dataset}: no such folder here (in {Path.cwd()}), so it was tried as a Hub dataset id: "
                          f"{e}") from None
    raise GensetsError(f"{dataset}: no such workspace, folder, shard glob or hub dataset id")
