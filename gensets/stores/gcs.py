"""``gs://`` (and ``gcs://``): Google Cloud Storage through gcsfs. gcsfs offers a create-only precondition
(``ifGenerationMatch=0``, which Store.create uses) but no generation match through its public calls: no
conditional replacement (the lease then overwrites on renewal; see gensets.store.Store.lease)."""

from __future__ import annotations

from gensets.store import Store


class GcsStore(Store):
    package = "gcsfs"
