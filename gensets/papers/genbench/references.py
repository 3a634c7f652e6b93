"""RA's reference images: the first ``per_class`` images of each selected class, from a folder of class
folders (``folder:<path>``, relative to the config) or a Hugging Face dataset (``hf:<repo or path>[@rev]``), or
(``source: retrieval``) the best ``per_class`` images the retrieval data type ranks for the class from its pool.
A folder's files are known by their path inside the folder and their sha256 (they go into the RA units' ids),
never by where the folder lies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import DataError, GensetsError
from ...images import decode_image, is_image_file
from ...shards import sha256_file
from ...sources.classes import class_folders, match_classes, report_match, source_name
from ...sources.images import hf_split
from .config import GenBenchConfig, selected
from .pool import pool_entries, pool_images, pool_item


@dataclass(frozen=True)
class Reference:
    id: str  # the file's path inside the reference folder, or hf:<dataset>/<split>#<row> (source_name)
    sha256: str
    data: bytes

    def image(self):
        return decode_image(self.data)


def reference_root(cfg: GenBenchConfig) -> Path:
    """The folder of a folder: reference source, on this machine (relative paths: to the config's folder)."""
    return cfg.base_dir / cfg.reference.source[len("folder:"):]


def _reference_paths(cfg: GenBenchConfig) -> tuple[dict[str, list[Path]], list[str]]:
    """Each selected class's reference files (the first ``per_class`` by file name in its class folder, class
    folders matched to the dataset's classes by name) and the folders that match no class."""
    root = reference_root(cfg)
    if not root.is_dir():
        raise GensetsError(f"reference: folder not found: {root}")
    folders = class_folders(root)
    matched, _ = match_classes([p.name for p in folders], cfg.class_names, by_index=False)
    folder_of: dict[str, Path] = {}
    for j, i in sorted(matched.items()):
        folder_of.setdefault(cfg.class_names[i], folders[j])
    out = {}
    for _, name in selected(cfg):
        folder = folder_of.get(name)
        files = sorted(f for f in folder.iterdir() if is_image_file(f) and f.is_file()) if folder else []
        out[name] = files[: cfg.reference.per_class]
    return out, [p.name for j, p in enumerate(folders) if j not in matched]


def reference_files(cfg: GenBenchConfig) -> dict[str, list[list[str]]] | None:
    """folder: references of each selected class as ``[path inside the folder, sha256]``: they go into the RA
    units' ids (changed images make new units; the folder's location does not). None for hf: references
    (rows named by dataset, split and row; pin the dataset with @rev)."""
    if not (cfg.reference.source or "").startswith("folder:"):
        return None
    root = reference_root(cfg)
    paths, _ = _reference_paths(cfg)
    return {n: [[f.relative_to(root).as_posix(), sha256_file(f)] for f in fs] for n, fs in paths.items()}


def _folder_references(cfg: GenBenchConfig) -> dict[str, list[Reference]]:
    import hashlib

    root = reference_root(cfg)
    paths, unmatched = _reference_paths(cfg)
    report_match(f"reference {cfg.reference.source}", unmatched, cfg.class_names, {}, "name")
    out = {}
    for name, files in paths.items():
        out[name] = []
        for f in files:
            data = f.read_bytes()
            out[name].append(Reference(f.relative_to(root).as_posix(), hashlib.sha256(data).hexdigest(), data))
    return out


def _hf_references(cfg: GenBenchConfig) -> dict[str, list[Reference]]:
    """The first ``per_class`` rows of each selected class: rows are picked from the label column alone, then
    only their images are read."""
    import hashlib

    import datasets

    ref = cfg.reference
    name = ref.source[len("hf:"):]
    ds, column, label, image_col = hf_split(name, ref.split, what=f"reference {ref.source}", hf_config=ref.hf_config,
                                            label_column=ref.label_column)
    matched, how = match_classes(label.names, cfg.class_names)
    report_match(f"reference {ref.source}", label.names, cfg.class_names, matched, how)
    wanted = {i: n for i, n in selected(cfg)}
    rows: dict[str, list[int]] = {n: [] for n in wanted.values()}
    for i, y in enumerate(ds[column]):  # the label column only: no image is read here
        n = wanted.get(matched.get(y, -1))
        if n is not None and len(rows[n]) < ref.per_class:
            rows[n].append(i)
    picked = sorted(i for r in rows.values() for i in r)
    images = ds.select_columns([image_col]).cast_column(image_col, datasets.Image(decode=False)).select(picked)
    data = {}
    for i, img in zip(picked, images[image_col], strict=True):
        data[i] = img["bytes"] if img.get("bytes") else Path(img["path"]).read_bytes()
    where = f"{source_name(ref.source)}/{ref.split}"
    return {n: [Reference(f"{where}#{i}", hashlib.sha256(data[i]).hexdigest(), data[i]) for i in r]
            for n, r in rows.items()}


def retrieved_references(cfg: GenBenchConfig, ranked: dict[str, dict]) -> dict[str, list[Reference]]:
    """``source: retrieval``: each class's best ``per_class`` pool items as the retrieval data type ranks them
    (``ranked``: :func:`baselines.retrieve`), as the authors' RA does (tools/prep_retrieval.py ``--ref_image=retrieval
    --ref_shot=20``: the 20 best retrieved images per class, by ``avg_dist``). Each image is checked against the
    sha256 its pool entry was planned with."""
    import hashlib

    entries = pool_entries(cfg)
    out = {}
    for name, got in ranked.items():
        hits = [j for j, _, _ in got["hits"][: cfg.reference.per_class]]
        out[name] = []
        for j, data in zip(hits, pool_images(cfg, hits), strict=True):
            sha = hashlib.sha256(data).hexdigest()
            if entries[j][1] not in (None, sha):
                raise DataError(f"retrieval {cfg.retrieval.pool}: {entries[j][0]} changed since the build was "
                                "planned; run it again")
            out[name].append(Reference(pool_item(cfg, j), sha, data))
        if not out[name]:
            raise GensetsError(f"reference: the retrieval ranked no pool image for class {name!r}")
    return out


def load_references(cfg: GenBenchConfig) -> dict[str, list[Reference]]:
    """Each selected class's reference images (the first ``per_class``, in file-name / dataset order)."""
    refs = _folder_references(cfg) if cfg.reference.source.startswith("folder:") else _hf_references(cfg)
    missing = [n for n in refs if not refs[n]]
    if missing:
        raise GensetsError(f"reference: no reference images for class {missing[0]!r} in {cfg.reference.source} "
                           f"({len(missing)} class(es) without any)")
    return refs
