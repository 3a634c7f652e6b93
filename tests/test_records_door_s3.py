"""Issue 45, item 2, on object storage: a commit marker is checked against its shard (sha256, where its members lie,
the provenance and class it carries) before anything of it is published. A marker forged beside its true shard (a
prompt, a class, an offset changed) stops ``finalize`` before it writes a dataset, ``verify`` says it is not ok, and
``publish`` has nothing to publish. A real S3 API (moto's server, as tests/test_object_store.py)."""

import json
import shutil

import pytest

from .conftest import SMALL, SMOKE, run_cli
from .test_object_store import BUCKET, _cache, moto_s3, objects, s3  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(s3):  # noqa: F811
    url = f"s3://{BUCKET}/forged"
    r = run_cli("build", SMOKE, "--out", url, "--quiet", *SMALL, check=0)
    assert "(0 done before" in r.stdout, r.stdout
    return url


def _prompt(m):
    key = m["members"][0]["__key__"]
    meta = json.loads(m["meta"][key][0])
    field = next(k for k in ("prompt", "text", "class_name") if isinstance(meta.get(k), str))
    meta[field] = "a forged prompt"
    m["meta"][key][0] = json.dumps(meta)


def _cls(m):
    key = m["members"][0]["__key__"]
    m["meta"][key][1] = str(int(m["meta"][key][1]) + 1)


def _offset(m):
    e = m["members"][0]
    ext = next(k for k in e if k != "__key__")
    e[ext] = [e[ext][0] + 512, e[ext][1]]


FORGERIES = [("prompt", _prompt), ("class", _cls), ("offsets", _offset)]


@pytest.mark.parametrize("name, forge", FORGERIES, ids=[f[0] for f in FORGERIES])
def test_a_forged_commit_marker_is_refused_before_anything_is_published(s3, built, tmp_path, name, forge):  # noqa: F811
    key = sorted(k for k in objects(s3, "forged") if k.startswith("candidates/_committed/"))[0]
    true = objects(s3, "forged")[key]
    m = json.loads(true)
    forge(m)
    s3.put_object(Bucket=BUCKET, Key=f"forged/{key}", Body=json.dumps(m).encode())
    try:
        shutil.rmtree(_cache(built), ignore_errors=True)  # another machine: ingest reads the markers
        r = run_cli("finalize", built, "--include-pending")
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1, r.stdout + r.stderr
        assert f"{built}/{key}" in lines[0] and "refusing the unit" in lines[0], lines
        assert not [k for k in objects(s3, "forged") if k.startswith("dataset/")]  # nothing published
        v = run_cli("verify", built)
        assert v.returncode == 1 and f"{built}/{key}" in v.stdout + v.stderr, v.stdout + v.stderr
        assert f"{built}: ok" not in v.stdout
        p = run_cli("publish", built, "--repo", f"file://{tmp_path / 'repo'}")
        assert p.returncode != 0 and not list((tmp_path / "repo").rglob("*.tar")), p.stdout + p.stderr
    finally:
        s3.put_object(Bucket=BUCKET, Key=f"forged/{key}", Body=true)
    shutil.rmtree(_cache(built), ignore_errors=True)
    run_cli("finalize", built, "--include-pending", check=0)  # the true marker: finalized as ever
    assert run_cli("verify", built, check=0).stdout.strip() == f"{built}: ok"
    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": f"forged/{k}"} for k in objects(s3, "forged")
                                                         if k.startswith("dataset/")]})
