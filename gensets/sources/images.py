"""Images read when used (:class:`Images`): real test sets, a folder of class sub-folders or a Hugging Face
dataset (``hf:``, :func:`hf_split`), their classes matched to a dataset's (:func:`load_test_set`), and the
``--test [DATASET=]SOURCE`` options that name them (:func:`parse_tests`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..config import control_char
from ..errors import GensetsError, Unavailable
from ..images import decode_image, is_image_file
from .classes import NotReachable, hf_label_feature, match_classes, report_match, split_rev


class Images(Sequence):
    """Images read on access, a batch at a time (``images[i:j]``), so a large set is never all in memory:
    ``read(items) -> [PIL image]`` reads a list of items (file paths, dataset rows, encoded bytes)."""

    def __init__(self, items: list, read):
        self.items, self.read = items, read

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.read(self.items[i]) if isinstance(i, slice) else self.read([self.items[i]])[0]

    def subset(self, indices) -> Images:
        return Images([self.items[i] for i in indices], self.read)


def _read_files(paths: list[Path]) -> list:
    out = []
    for f in paths:
        try:
            out.append(decode_image(Path(f).read_bytes()))
        except Exception as e:
            raise GensetsError(f"test set {f}: cannot read image: {e}") from None
    return out


def hf_split(name: str, split: str, *, what: str, hf_config: str | None = None, label_column: str | None = None):
    """A split of a Hugging Face dataset (a repo id or a local folder, ``name[@rev]``) with its ClassLabel and
    Image columns, nothing decoded: ``(dataset, label column, ClassLabel feature, image column)``. GensetsError
    naming ``what`` when the split is not available or holds no Image feature."""
    import datasets

    try:
        column, feature = hf_label_feature(name, hf_config, label_column, split)
    except ValueError as e:  # not reachable (offline, not cached), or no ClassLabel: named with what asked
        raise (Unavailable if isinstance(e, NotReachable) else GensetsError)(f"{what}: {e}") from None
    repo, rev = split_rev(name)
    try:
        ds = datasets.load_dataset(repo, hf_config, split=split, revision=rev)
    except Exception as e:
        raise Unavailable(f"{what}: split {split!r} is not available: "
                           f"{str(e).strip().splitlines()[0][:200]}") from None
    image_col = next((k for k, f in ds.features.items() if isinstance(f, datasets.Image)), None)
    if image_col is None:
        raise GensetsError(f"{what} has no Image feature")
    return ds, column, feature, image_col


def load_test_set(source: str, class_names: list[str], split: str = "test") -> tuple[Images, list[int], dict]:
    """Real test images ``(images, label indices into class_names, info)`` from a folder or hf: dataset.

    The images are read batch by batch when used (:class:`Images`). Class folders are matched to the classes
    by name; a ClassLabel's names by position when it has as many as the dataset has classes (and they do
    not all match one-to-one by name), else by name (:func:`gensets.sources.classes.match_classes`);
    classes that match none are left out and named on stderr."""
    if source.startswith("hf:"):
        ds, column, feature, image_col = hf_split(source[len("hf:"):], split, what=f"test set {source}")
        names = list(feature.names)
        matched, how = match_classes(names, class_names)
        rows = [(i, matched[y]) for i, y in enumerate(ds[column]) if y in matched]  # labels only: no image read
        pixels = ds.select_columns([image_col])
        images = Images([i for i, _ in rows],
                        lambda idx: [im.convert("RGB") for im in pixels.select(idx)[image_col]])
        labels = [y for _, y in rows]
    else:
        root = Path(source)
        if not root.is_dir():
            raise GensetsError(f"test set {source}: no such folder (give a folder of class sub-folders or hf:<dataset>)")
        folders = sorted(p for p in root.iterdir() if p.is_dir())
        names = [p.name for p in folders]
        matched, how = match_classes(names, class_names, by_index=False)
        files = [(f, matched[j]) for j, folder in enumerate(folders) if j in matched
                 for f in sorted(folder.iterdir()) if is_image_file(f) and f.is_file()]
        images, labels = Images([f for f, _ in files], _read_files), [y for _, y in files]
    bad = next((str(n) for n in names if control_char(str(n))), None)
    if bad is not None:  # it would reach the terminal (the unmatched classes) and the report
        raise GensetsError(f"test set {source}: class name {bad[:80]!r} has control character "
                           f"{control_char(bad)}; refusing it")
    unmatched = report_match(f"test set {source}", names, class_names, matched, how)
    if not labels:
        raise GensetsError(f"test set {source}: no images of any of the classes")
    return images, labels, {"source": source, "match": how, "unmatched": sorted(unmatched)}


def parse_tests(tests: list[str] | None) -> dict[str, str]:
    """``--test [DATASET=]SOURCE`` options -> {dataset name or "": source}."""
    out = {}
    for t in tests or []:
        name, sep, src = t.partition("=")
        if sep and not name.startswith(("hf:", "/", ".")) and "/" not in name:
            out[name] = src
        else:
            out[""] = t
    return out
