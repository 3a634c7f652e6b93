"""What an audit reads: a set of images, each with its key and config, read when used (:class:`ImageSet`), from a
finalized dataset folder (its manifest.json's shards), a workspace (its dataset/ when finalized, else its committed
candidates), a folder of image files (a real test set: class sub-folders or not), or a Hugging Face dataset's split
(``hf:NAME[@REV]``, ``split`` its test split by default)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from .. import recordio
from ..errors import DataError, GensetsError, Unavailable
from ..images import encode_image, is_image_file
from ..safety import check_regular, inside
from ..shards import iter_index, read_at, read_dataset_manifest
from ..sources.images import hf_split
from ..workspace import Workspace, is_workspace


@dataclass
class ImageSet:
    """``name`` (``self`` for the audited set, else the reference's name), ``source`` (what was named), and per
    image its ``keys[i]``, ``configs[i]`` (None: a set without configs), ``read(i)`` -> its encoded bytes and
    ``where(i)``: where it is, for a message about it (its shard and member where ``located`` says, else the
    source and its key)."""

    name: str
    source: str
    keys: list[str]
    configs: list[str | None]
    reader: Callable[[int], bytes] = field(repr=False)
    located: Callable[[int], str] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.keys)

    def read(self, i: int) -> bytes:
        return self.reader(i)

    def where(self, i: int) -> str:
        return self.located(i) if self.located else f"{self.source}: {self.keys[i]}"


def _shards(name: str, source: str, shards: list[tuple[Path, str | None]]) -> ImageSet:
    """The images of tar shards, each with the config it belongs to (else its json's ``config``)."""
    keys, configs, where = [], [], []
    for path, config in shards:
        for d in iter_index(path, read=("json",)):
            image = next((ext for ext in d["__members__"] if ext in ("jpg", "jpeg", "png", "webp")), None)
            if image is None:
                continue
            if config is None and "json" in d:
                meta = recordio.loads(d["json"], f"{path}: {d['__key__']}.json")
                config = meta.get("config") if isinstance(meta, dict) else None
            keys.append(d["__key__"])
            configs.append(config)
            where.append((path, *d["__members__"][image], d["__key__"], image))
    return ImageSet(name, source, keys, configs, lambda i: read_at(*where[i][:4]),
                    lambda i: f"{where[i][0]}: {where[i][3]}.{where[i][4]}")


def dataset_folder(folder: Path, name: str = "self", source: str | None = None) -> ImageSet:
    """A finalized dataset folder: the shards its manifest.json lists, config by config."""
    mpath = folder / "manifest.json"
    manifest = read_dataset_manifest(mpath)
    return _shards(name, source or str(folder),
                   [(inside(folder, s["path"], str(mpath)), s["config"]) for s in manifest["shards"]])


def candidates(ws: Workspace, name: str = "self") -> ImageSet:
    """A workspace's committed candidate shards (every generated image, kept or not), in manifest order."""
    return _shards(name, ws.where, [(ws.candidate(r["shard"]), None) for r in ws.manifest().iter_rows()])


def image_folder(folder: Path, name: str, source: str | None = None) -> ImageSet:
    """Every image file under ``folder`` (sorted by path); a file's key is its path inside the folder, its config the
    first folder of that path (a class folder of a test set), else None."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and is_image_file(p)
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    rels = [p.relative_to(folder).as_posix() for p in files]
    return ImageSet(name, source or str(folder), rels, [r.split("/")[0] if "/" in r else None for r in rels],
                    lambda i: _read_file(files[i]))


def _read_file(path: Path) -> bytes:
    try:
        return check_regular(path, where=str(path.parent)).read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None


def hf_images(spec: str, name: str, split: str = "test") -> ImageSet:
    """A Hugging Face dataset's split (``NAME[@REV]``, a repo or a local folder), its images encoded losslessly
    (PNG) when read; keys are ``<split>-<row>``."""
    ds, _, _, column = hf_split(spec, split, what=f"reference {name} (hf:{spec})")
    pixels = ds.select_columns([column])
    return ImageSet(name, f"hf:{spec}", [f"{split}-{i:06d}" for i in range(len(ds))], [None] * len(ds),
                    lambda i: encode_image(pixels[i][column], "png"))


def open_set(source: str, name: str, bases: tuple[Path, ...] = ()) -> ImageSet:
    """What ``source`` names: ``hf:NAME[@REV]`` (its test split), a workspace, a finalized dataset folder, or a
    folder of images (``folder:PATH`` too); a relative path is looked for under each of ``bases`` in turn (the
    config's folder, ...), then as it is (the working folder)."""
    if source.startswith("hf:"):
        return hf_images(source[len("hf:"):], name)
    raw = source[len("folder:"):] if source.startswith("folder:") else source
    path = Path(raw)
    if not path.is_absolute():
        path = next((b / path for b in bases if (b / path).is_dir()), path)
    if not path.is_dir():
        raise GensetsError(f"{source}: no such folder (give a workspace, a dataset folder, a folder of images or "
                           "hf:<dataset>)")
    if is_workspace(path):
        ws = Workspace(path)
        return dataset_folder(ws.dataset, name, source) if (ws.dataset / "manifest.json").is_file() \
            else candidates(ws, name)
    if (path / "manifest.json").is_file():
        return dataset_folder(path, name, source)
    return image_folder(path, name, source)


def config_bases(cfg) -> tuple[Path, ...]:
    """Where a build config's relative reference paths may lead: its folder when the config was read from its file in
    this process (``base_dir``), and gensets' packaged configs (a workspace's frozen copy of a packaged smoke config
    names its reference folders relative to them: ``folder:genbench.smoke-refs``)."""
    base = getattr(cfg, "base_dir", None)
    return tuple(b for b in (base if base not in (None, Path(".")) else None,
                             Path(str(files("gensets.data") / "configs"))) if b is not None)


def content_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = ["ImageSet", "open_set", "dataset_folder", "candidates", "image_folder", "hf_images", "Unavailable"]
