"""A storage scheme is one file: `toy://`, defined in this test file alone (no edit of the package) on fsspec's
memory filesystem, is a workspace for `gensets build --out toy://...`, `finalize` and `verify`, with the bytes of
the same build in a local folder."""

from __future__ import annotations

import hashlib

import pytest

from gensets.cli import main
from gensets.registry import STORES
from gensets.store import Store

from .conftest import SMALL, SMOKE
from .test_imagenet_d import shards_digest, tree_digest


class ToyStore(Store):
    """toy://BUCKET/PREFIX: objects under /toy/BUCKET/PREFIX of this process's fsspec memory filesystem."""

    def filesystem(self):
        import fsspec

        return fsspec.filesystem("memory"), f"/toy/{self.url.split('://', 1)[1]}"

    def _look_for_bucket(self, bucket: str) -> None:
        if not self.fs.exists(f"/toy/{self.url.split('://', 1)[1].split('/')[0]}"):
            raise FileNotFoundError("the specified bucket does not exist")


@pytest.fixture
def toy():
    import fsspec

    STORES.register("toy", ToyStore)
    memory = fsspec.filesystem("memory")
    memory.mkdir("/toy/bucket")
    yield memory
    STORES.unregister("toy")
    memory.rm("/toy", recursive=True)


def test_a_store_from_a_test_file_builds_finalizes_and_verifies(toy, small, capsys):
    url = "toy://bucket/ws"
    assert isinstance(Store(url), ToyStore)
    assert main(["build", str(SMOKE), "--out", url, "--quiet", *SMALL]) == 0
    assert main(["finalize", url, "--include-pending"]) == 0
    objects = {p[len("/toy/bucket/ws/"):]: hashlib.sha256(toy.cat_file(p)).hexdigest()
               for p in toy.find("/toy/bucket/ws")}
    shards = {k.split("/")[1]: v for k, v in objects.items() if k.startswith("candidates/") and k.count("/") == 1}
    assert shards == shards_digest(small) and shards
    dataset = {k[len("dataset/"):]: v for k, v in objects.items() if k.startswith("dataset/")}
    assert dataset == tree_digest(small / "dataset")
    markers = [k for k in objects if k.startswith("candidates/_committed/")]
    assert len(markers) == len(shards) and "_lock.json" not in objects  # the lease let go at the end
    capsys.readouterr()
    assert main(["verify", url]) == 0
    assert capsys.readouterr().out.strip() == f"{url}: ok"


def test_a_scheme_nobody_registered_is_one_line(capsys, tmp_path):
    assert main(["build", str(SMOKE), "--out", "toy://bucket/ws", "--quiet", *SMALL]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown storage scheme 'toy://'" in err and "s3://" in err, err
