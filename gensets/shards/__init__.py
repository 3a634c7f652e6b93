"""WebDataset shards: atomic writing, manifests, safe reading, verification.

Light to import: webdataset (which imports torch) is only loaded inside `write_shard`.
"""

from gensets.shards.manifest import (
    Manifest,
    check_candidate_row,
    clean_temp,
    read_dataset_manifest,
    write_json_atomic,
)
from gensets.shards.reader import (
    ShardSamples,
    StoredSample,
    index_shard,
    iter_index,
    iter_shard,
    iter_shards,
    read_at,
    read_members,
    stored_samples,
)
from gensets.shards.verify import Problem, verify
from gensets.shards.writer import ShardInfo, sha256_file, write_shard

__all__ = [
    "write_shard",
    "ShardInfo",
    "sha256_file",
    "Manifest",
    "check_candidate_row",
    "read_dataset_manifest",
    "write_json_atomic",
    "clean_temp",
    "iter_shard",
    "iter_shards",
    "iter_index",
    "read_at",
    "ShardSamples",
    "StoredSample",
    "stored_samples",
    "index_shard",
    "read_members",
    "verify",
    "Problem",
]
