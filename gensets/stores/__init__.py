"""The built-in storage schemes of URL workspaces, one class per scheme, one file each (gensets.store.Store is what
they share), declared here as ``"module:Class"`` targets: imported when a URL of that scheme is first opened."""

from gensets.registry import STORES

for _scheme, _target in (
    ("s3", "gensets.stores.s3:S3Store"),
    ("s3a", "gensets.stores.s3:S3Store"),
    ("gs", "gensets.stores.gcs:GcsStore"),
    ("gcs", "gensets.stores.gcs:GcsStore"),
    ("memory", "gensets.stores.memory:MemoryStore"),
):
    STORES.register(_scheme, _target)
