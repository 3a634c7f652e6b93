"""Where workspaces are kept: a local folder (local.py: LocalFolder) or an object store, one class per URL scheme, one
file each (gensets.store.Store is what they share), declared here as ``"module:Class"`` targets: imported when a URL
of that scheme is first opened. Each is a :class:`gensets.store.WorkspaceStore`; :func:`open_store` gives a
workspace's."""

from pathlib import Path

from gensets.registry import STORES
from gensets.store import Store, WorkspaceStore, is_url
from gensets.stores.local import LocalFolder

for _scheme, _target in (
    ("s3", "gensets.stores.s3:S3Store"),
    ("s3a", "gensets.stores.s3:S3Store"),
    ("gs", "gensets.stores.gcs:GcsStore"),
    ("gcs", "gensets.stores.gcs:GcsStore"),
    ("memory", "gensets.stores.memory:MemoryStore"),
):
    STORES.register(_scheme, _target)


def open_store(root: str | Path) -> WorkspaceStore:
    """The store of the workspace ``root``: for a URL (a str: a Path has lost the '//' of one), the class of its
    scheme (:data:`gensets.registry.STORES`); else the local folder."""
    return Store(root) if is_url(root) else LocalFolder(root)
