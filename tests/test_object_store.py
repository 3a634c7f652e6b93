"""Workspaces on object storage: `gensets build --out s3://...` against a real S3 API (moto's server on 127.0.0.1,
dummy credentials from the environment), with the default backend and with `--backend ray` (24 units on 4 workers,
also with a worker killed between its shard and its marker): the candidate shards and the finalized dataset are the
bytes of a local build; a killed driver resumes from the commit markers on a fresh machine (no local cache); the
lease refuses a second driver, and its conditional writes (If-Match) keep a taken-over lease and one of two
takeovers; no credential is ever written. Needs the distributed extra (ray, s3fs, moto)."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import HANG, ROOT, SMALL, SMOKE, module_fork_server, run_cli
from .test_imagenet_d import shards_digest, tree_digest

pytestmark = pytest.mark.slow  # `make test-slow` and CI: the S3 server, local and Ray builds

BUCKET = "gensets-test"
KEY_ID, SECRET = "GENSETSDUMMYKEY0042", "gensets-dummy-secret-9c1f77e0b5d2"  # found nowhere but in os.environ


@pytest.fixture(scope="module")
def moto_s3():
    """A moto S3 server on loopback with one bucket; the module's environment names it (AWS_ENDPOINT_URL) with
    dummy credentials, as a user's environment would."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its buckets in this process, not per server: a second setup of this module in the same xdist worker
    # (worksteal can hand it the module's tests in two rounds) must start from an empty store, as the first did
    reset = urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")
    urllib.request.urlopen(reset, timeout=60).close()
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        urllib.request.urlopen(reset, timeout=60).close()  # nothing left for the next module set up in this process
        server.stop()


@pytest.fixture(scope="module")
def s3(reference, moto_s3):
    """The S3 server, the module's commands forked from a server with its environment. (``reference``, the local
    build, is built before.)"""
    with module_fork_server():
        yield moto_s3


def objects(client, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix/``, by its path relative to it."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        for o in page.get("Contents", []):
            out[o["Key"][len(prefix) + 1:]] = client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
    return out


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rows(ws):
    return [json.loads(line) for line in (ws / "candidates" / "manifest.jsonl").read_text().splitlines()]


def _samples(db, table: str = "samples"):
    """Every row of one of state.duckdb's per-sample tables (samples, images), by key."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM {table} ORDER BY key").fetchall()
    finally:
        con.close()


def _cache(url: str):
    from gensets.store import local_root

    return local_root(url)


def same_bytes(client, prefix: str, reference, *, finalized: bool = True, workers: int | None = None):
    """The workspace at ``prefix`` holds exactly what the layout says, with the bytes of the local build: config,
    one environment, each unit's shard (same sha256) and its commit marker (the local manifest row, but for the
    rank / world of the worker that ran it under Ray with ``workers`` workers), the dataset; no lease, no temporary
    object."""
    objs = objects(client, prefix)
    ref_rows = {r["unit"]: r for r in _rows(reference)}
    shards = {k.split("/")[1]: sha(v) for k, v in objs.items() if k.startswith("candidates/") and k.count("/") == 1}
    assert shards == shards_digest(reference)
    markers = {k.split("/")[2][:-5]: json.loads(v) for k, v in objs.items() if k.startswith("candidates/_committed/")}
    assert sorted(markers) == sorted(ref_rows) and len(markers) >= 12
    strip = lambda r: {k: v for k, v in r.items() if not workers or k not in ("rank", "world")}  # noqa: E731
    for unit, m in markers.items():
        assert strip(m["row"]) == strip(ref_rows[unit])
        assert [e["__key__"] for e in m["members"]] == sorted(e["__key__"] for e in m["members"])  # offsets, by key
    if workers:
        assert {m["row"]["world"] for m in markers.values()} == {workers}
        assert {m["row"]["rank"] for m in markers.values()} <= set(range(workers))
    dataset = {k[len("dataset/"):]: sha(v) for k, v in objs.items() if k.startswith("dataset/")}
    if finalized:
        assert dataset == tree_digest(reference / "dataset")
    envs = [k for k in objs if k.startswith("environments/")]
    assert len(envs) == 1 and objs["config.yaml"] == (reference / "config.yaml").read_bytes()
    assert len(objs) == 1 + len(envs) + 2 * len(markers) + len(dataset)  # nothing else: no _lock.json, no temp object
    assert not [k for k in objs if ".tmp-" in k or k.endswith("_lock.json")]


@pytest.fixture(scope="module")
def local_on_s3(s3):
    url = f"s3://{BUCKET}/local"
    r = run_cli("build", SMOKE, "--out", url, "--quiet", check=0)
    assert f"{url}: 12 units (0 done before, 12 run here)" in r.stdout, r.stdout
    run_cli("finalize", url, "--include-pending", check=0)
    return url


def test_a_build_on_s3_gives_the_bytes_of_the_local_build(s3, local_on_s3, reference):
    same_bytes(s3, "local", reference)
    assert _samples(_cache(local_on_s3) / "state.duckdb") == _samples(reference / "state.duckdb")
    r = run_cli("verify", local_on_s3, check=0)
    assert r.stdout.strip() == f"{local_on_s3}: ok"
    # the same command again: every unit is committed; nothing runs
    again = run_cli("build", SMOKE, "--out", local_on_s3, "--quiet", check=0)
    assert "12 units (12 done before, 0 run here)" in again.stdout


def test_a_fresh_driver_rebuilds_its_state_from_the_markers(s3, local_on_s3, reference):
    """No local cache (another machine): the same build command runs nothing and rebuilds state.duckdb from the
    commit markers alone (each sample's json and cls members, where its image lies), downloading no shard; finalize
    then reads the shards whole from the store and gives the same dataset."""
    shutil.rmtree(_cache(local_on_s3))
    r = run_cli("build", SMOKE, "--out", local_on_s3, "--quiet", check=0)
    assert "12 units (12 done before, 0 run here)" in r.stdout, r.stdout
    cache = _cache(local_on_s3)
    assert _samples(cache / "state.duckdb") == _samples(reference / "state.duckdb")
    assert _samples(cache / "state.duckdb", "images") == _samples(reference / "state.duckdb", "images")
    assert not list((cache / "candidates").glob("*.tar"))  # no shard downloaded
    run_cli("finalize", local_on_s3, "--include-pending", check=0)
    assert _samples(cache / "state.duckdb") == _samples(reference / "state.duckdb")
    same_bytes(s3, "local", reference)


def test_a_marker_whose_samples_are_not_its_rows_is_one_line(s3, local_on_s3, tmp_path):
    """A commit marker whose meta does not match its members (written by hand, or by another tool) stops the
    driver's ingest in one line naming the marker (exit 1, as a corrupt shard does)."""
    url = f"s3://{BUCKET}/hostile-marker"
    r = run_cli("build", SMOKE, "--out", url, "--quiet", *SMALL, check=0)
    assert "(0 done before" in r.stdout, r.stdout
    key = sorted(k for k in objects(s3, "hostile-marker") if k.startswith("candidates/_committed/"))[0]
    marker = json.loads(objects(s3, "hostile-marker")[key])
    first = marker["members"][0]["__key__"]
    marker["meta"][first + "x"] = marker["meta"].pop(first)
    s3.put_object(Bucket=BUCKET, Key=f"hostile-marker/{key}", Body=json.dumps(marker).encode())
    shutil.rmtree(_cache(url))
    r = run_cli("build", SMOKE, "--out", url, "--quiet", *SMALL)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"gensets: error: {url}/{key}: not a commit marker gensets wrote (sample "), lines


# the scale: 24 units of one image each (one nuisance per unit: 4 + 2 + 2 of them for each of 3 classes), on
# 4 Ray workers
SCALE = ("--set", "unit_size=1", "--set", "images_per_pair=1", "--set", "nuisances.background.limit=4")
RAY4 = ("--backend", "ray", "--workers", "4")


@pytest.fixture(scope="module")
def reference24(s3, tmp_path_factory):
    """The one-process local build of the 24-unit config, finalized; the Ray builds on S3 give its bytes."""
    ws = tmp_path_factory.mktemp("ref24") / "ws"
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *SCALE, check=0)
    assert "24 units (0 done before, 24 run here)" in r.stdout, r.stdout
    run_cli("finalize", ws, "--include-pending", check=0)
    return ws


def test_a_ray_build_on_s3_gives_the_bytes_of_the_local_build(s3, reference24):
    """24 units on 4 Ray workers into S3: the shards, markers (but for rank / world), dataset and samples of the
    one-process local build."""
    url = f"s3://{BUCKET}/ray"
    r = run_cli("build", SMOKE, "--out", url, "--quiet", *SCALE, *RAY4, check=0)
    assert "24 units (0 done before, 24 run here)" in r.stdout and "Ray: 4 workers" in r.stdout, r.stdout
    run_cli("finalize", url, "--include-pending", check=0)
    same_bytes(s3, "ray", reference24, workers=4)
    assert _samples(_cache(url) / "state.duckdb") == _samples(reference24 / "state.duckdb")


def test_a_ray_worker_killed_between_its_shard_and_its_marker_on_s3(s3, reference24, tmp_path):
    """The test hook makes the first attempt at one unit upload a shard cut short under the unit's name and end its
    worker process (os._exit) before the marker: Ray restarts the worker, the unit runs again (its shard
    overwritten, then its marker); the build ends with no user action, every unit committed once, no marker
    without its shard, the bytes of the local build."""
    from gensets.builders.faults import FAULT

    url, prefix, marker = f"s3://{BUCKET}/worker-killed", "worker-killed", tmp_path / "killed"
    unit = sorted(r["unit"] for r in _rows(reference24))[5]
    r = run_cli("build", SMOKE, "--out", url, "--quiet", *SCALE, *RAY4, env={FAULT: f"{unit}:{marker}"}, check=0)
    assert marker.exists(), "the hook never ran: the unit's worker was not killed"
    assert "24 units (0 done before, 24 run here)" in r.stdout, r.stdout
    assert "Ray: 4 workers; 1 unit run again after their worker died" in r.stdout, r.stdout
    rows = _rows(_cache(url))  # the driver's manifest: every unit exactly once
    assert sorted(r["unit"] for r in rows) == sorted(r["unit"] for r in _rows(reference24)) and len(rows) == 24
    same_bytes(s3, prefix, reference24, finalized=False, workers=4)  # the cut-short shard overwritten


def test_a_killed_driver_resumes_only_the_missing_units_and_a_second_driver_is_refused(s3, reference):
    """The driver SIGKILLed after a third of the units: on a fresh machine (its local cache gone) the same command
    runs exactly the units without a commit marker, over the lease the dead driver left; a truncated shard without a
    marker (a killed upload) is overwritten and `verify` passes. A second driver meanwhile: one line, exit 4."""
    url, prefix = f"s3://{BUCKET}/killed", "killed"
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", url, "--quiet"],
                         cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def committed():
        return {k.split("/")[2][:-5] for k in objects(s3, prefix) if k.startswith("candidates/_committed/")}

    try:
        deadline = time.monotonic() + HANG
        while len(committed()) < 4:
            assert p.poll() is None, p.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "4 units were not committed in time"
            time.sleep(0.3)
        # held where it is while a second driver tries (stopped, it is alive and holds its lease): left running, on
        # a loaded machine it committed every unit while the second one started
        os.killpg(p.pid, signal.SIGSTOP)
        second = run_cli("build", SMOKE, "--out", url, "--quiet")
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 4 and len(lines) == 1, second.stderr
    assert f"{url}: another gensets build (pid {p.pid} on " in lines[0], lines  # the holder
    done = committed()
    assert 4 <= len(done) < 12 and "_lock.json" in objects(s3, prefix)  # the dead driver's lease
    missing = sorted({r["unit"] for r in _rows(reference)} - done)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/candidates/{missing[0]}.tar", Body=b"cut short by a killed upload")
    shutil.rmtree(_cache(url))  # a fresh driver, on another machine
    r = json.loads(run_cli("build", SMOKE, "--out", url, "--json", check=0).stdout)
    assert r["done_before"] == len(done) and r["units_run"] == 12 - len(done), r
    same_bytes(s3, prefix, reference, finalized=False)
    assert run_cli("verify", url, check=0).stdout.strip() == f"{url}: ok"


def test_objects_removed_mid_build_are_noticed_and_finalize_refuses_the_partial_build(s3, reference):
    """The candidates/ objects removed while the build runs (a lifecycle rule, an rm): the build says so in one line,
    exit 1, instead of reporting every unit done; finalize then refuses the build of which units are missing, in one
    line naming how many and which, and publishes nothing."""
    url, prefix = f"s3://{BUCKET}/vanished", "vanished"
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", url, "--quiet"],
                         cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + HANG
        while len([k for k in objects(s3, prefix) if k.startswith("candidates/_committed/")]) < 3:
            assert p.poll() is None, p.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "3 units were not committed in time"
            time.sleep(0.3)
        os.killpg(p.pid, signal.SIGSTOP)  # held while the objects go: it has more units to commit after
        gone = sorted(k for k in objects(s3, prefix) if k.startswith("candidates/"))
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": f"{prefix}/{k}"} for k in gone]})
        os.killpg(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=HANG)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (out, err)
    assert f"{url}: the store lost " in err and "committed units' markers" in err, err
    assert "units (" not in out, out  # nothing reported done
    r = run_cli("finalize", url, "--include-pending")
    err = r.stderr.strip()
    assert r.returncode == 1 and len(err.splitlines()) == 1 and "units of the build are not committed" in err, err
    missing = sorted(k.split("/")[2][:-5] for k in gone if k.startswith("candidates/_committed/"))
    named = err.split("not committed (", 1)[1].split(")", 1)[0].split(", ")  # the first few, in plan order
    assert f"{len(missing)} of 12 units" in err and set(named) - {"..."} <= set(missing), (missing, err)
    assert not [k for k in objects(s3, prefix) if k.startswith("dataset/")]


def test_a_short_outage_of_the_store_is_one_line_per_retry(s3):
    """The store unreachable for longer than its client's own retries (nothing listens on its endpoint for 12 s,
    then the S3 server does): the command tries again, one line each time, no traceback, and ends as it would have
    without the outage."""
    import socket

    from moto.server import ThreadedMotoServer

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "verify", f"s3://{BUCKET}/no-workspace"], cwd=ROOT,
                         env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(12)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)  # the same buckets (one process)
    server.start()
    try:
        out, err = p.communicate(timeout=HANG)
    finally:
        server.stop()
    lines = err.strip().splitlines()
    assert "Traceback" not in err and p.returncode == 2, (p.returncode, out, err)
    retries = [x for x in lines if "the store cannot be reached while looking for its bucket" in x
               and x.endswith(("trying again in 1 s", "trying again in 2 s", "trying again in 4 s"))]
    assert retries and lines[:-1] == retries and lines[-1].endswith("not a gensets workspace (no config.yaml)"), err


def test_a_corrupt_object_is_found_by_verify(s3, local_on_s3):
    """verify reads the store's objects, not a local copy: a dataset shard changed on the store is named by its URL."""
    key = next(k for k in objects(s3, "local") if k.startswith("dataset/") and k.endswith(".tar"))
    good = s3.get_object(Bucket=BUCKET, Key=f"local/{key}")["Body"].read()
    s3.put_object(Bucket=BUCKET, Key=f"local/{key}", Body=good[:-1024])
    try:
        r = run_cli("verify", local_on_s3)
        assert r.returncode == 1 and f"{local_on_s3}/{key}: " in r.stdout, r.stdout + r.stderr
    finally:
        s3.put_object(Bucket=BUCKET, Key=f"local/{key}", Body=good)


@pytest.mark.parametrize("url, code, says", [
    ("ftp2://bucket/ws", 2, "unknown storage scheme 'ftp2://'"),
    ("hf://datasets/me/ws", 2, "a Hugging Face Hub repo is not a workspace"),
    ("s3://gensets-no-such-bucket/ws", 2, "no such bucket"),
    ("s3://KEY:SECRET@bucket/ws", 2, "credentials or a port in the URL are refused"),
])
def test_bad_urls_are_one_line(s3, url, code, says):
    for args in (("build", SMOKE, "--out", url, "--quiet"), ("finalize", url), ("verify", url)):
        r = run_cli(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == code and len(lines) == 1 and says in lines[0], (args, r.stderr)
        assert "SECRET" not in r.stderr and "Traceback" not in r.stderr


def test_verify_of_a_prefix_that_holds_no_workspace_is_one_line(s3):
    r = run_cli("verify", f"s3://{BUCKET}/nothing-here")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"gensets: error: s3://{BUCKET}/nothing-here: not a gensets workspace (no config.yaml)"], r.stderr


def test_the_lease_refuses_a_live_holder_and_takes_over_a_dead_ones():
    """In this process, on fsspec's memory store: a second lease names the holder (Busy, exit 4); a lease left by a
    process that is gone is taken over; the lease object is removed at the end."""
    from gensets.errors import Busy
    from gensets.store import LOCK, Store

    store = Store(f"memory://leases/{os.getpid()}")
    with store.lease("build"):
        with pytest.raises(Busy) as e, store.lease("finalize"):
            pass
        assert e.value.exit_code == 4 and f"another gensets build (pid {os.getpid()} on " in str(e.value)
    assert not store.exists(LOCK)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    store.write(LOCK, json.dumps({"what": "build", "pid": int(dead.stdout), "host": socket.gethostname(),
                                  "time": time.time()}).encode())
    with store.lease("build"):
        assert json.loads(store.read(LOCK))["pid"] == os.getpid()
    assert not store.exists(LOCK)


def test_card_eval_and_publish_take_the_url(s3, local_on_s3, reference, tmp_path):
    """`gensets card URL` re-renders the card from <url>/dataset/ and uploads it (the bytes of a local re-render);
    `gensets eval URL` scores the dataset the URL holds (the metrics of the local dataset, the source named by its
    URL); `publish` uploads it from its URL."""
    from gensets.publish import LocalTarget, publish

    from .test_eval import fixed_classifier

    local = tmp_path / "ws"
    shutil.copytree(reference, local)
    run_cli("card", local, check=0)
    r = run_cli("card", local_on_s3, check=0)
    assert f"in {local_on_s3}/dataset" in r.stdout
    got = {k[len("dataset/"):]: sha(v) for k, v in objects(s3, "local").items() if k.startswith("dataset/")}
    assert got == tree_digest(local / "dataset")

    spec = fixed_classifier(tmp_path / "m", [0, 504])
    res = [json.loads(run_cli("eval", ws, "--model", spec, "--db", tmp_path / f"{i}.duckdb", "--config", "texture",
                              "--json", check=0).stdout)[0] for i, ws in enumerate((reference, local_on_s3))]
    assert res[1]["metrics"] == res[0]["metrics"] and res[0]["metrics"]["top5"] > 0
    assert local_on_s3 in json.dumps(res[1]) and str(_cache(local_on_s3)) not in json.dumps(res[1])

    target = LocalTarget(tmp_path / "repo")
    publish(local_on_s3, "file://" + str(tmp_path / "repo"), target=target, out=lambda line: None)
    assert len(target.commits) == 4 and target.commits[-1]["files"][-1] == "README.md"


def _stale_lease(client, prefix: str) -> None:
    """A lease a driver on another host left and stopped renewing longer than the time to live ago."""
    from gensets.store import LEASE_TTL

    old = {"what": "build", "pid": 4242, "host": "gone.example", "time": time.time() - LEASE_TTL - 60}
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/_lock.json", Body=json.dumps(old).encode())


def _lease(client, prefix: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=f"{prefix}/_lock.json")["Body"].read()


def test_a_lease_taken_over_is_left_alone_and_its_old_holders_next_commit_fails(moto_s3, tmp_path, monkeypatch):
    """A driver stalled past the lease's time to live, its lease taken over by another driver meanwhile (here: the
    other's lease object written over it): its renewal (If-Match on the ETag it last wrote) is refused (412) and
    leaves the new holder's lease as it is, and its next commit fails with Busy (exit 4), in one line naming the new
    holder, before the unit's marker is written; at its end it removes nothing."""
    from gensets import lease
    from gensets.errors import Busy
    from gensets.shards import write_shard
    from gensets.workspace import Workspace

    s3 = moto_s3

    monkeypatch.setattr(lease, "LEASE_RENEW", 0.05)
    prefix = "taken"
    ws = Workspace(f"s3://{BUCKET}/{prefix}")
    info = write_shard(tmp_path / "u.tar", [{"__key__": "a", "json": {"k": 1}}])
    row = {"unit": "u", "shard": "u.tar", "sha256": info.sha256, "n": 1}
    theirs = json.dumps({"what": "finalize", "pid": 4242, "host": "other.example", "time": time.time()}).encode()
    deadline = time.monotonic() + 60
    with ws.store.lease("build"):
        first = _lease(s3, prefix)
        while _lease(s3, prefix) == first:  # renewed: a conditional renewal of its own lease succeeds
            assert time.monotonic() < deadline, "the lease was never renewed"
            time.sleep(0.02)
        assert json.loads(_lease(s3, prefix))["lease"] == json.loads(first)["lease"]
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/_lock.json", Body=theirs)  # the takeover
        while True:  # the next renewal finds the lease taken: check_lease says so from then on
            try:
                ws.store.check_lease()
            except Busy:
                break
            assert time.monotonic() < deadline, "the renewal never found its lease taken over"
            time.sleep(0.02)
        time.sleep(0.3)  # several renewal periods more
        assert _lease(s3, prefix) == theirs
        with pytest.raises(Busy) as e:
            ws.commit(tmp_path / "u.tar", row)
    assert _lease(s3, prefix) == theirs  # not removed at the end either
    msg = str(e.value)
    assert e.value.exit_code == 4 and "\n" not in msg and msg.startswith(f"s3://{BUCKET}/{prefix}: this build lost ")
    assert "to another gensets finalize (pid 4242 on other.example)" in msg and "run the same command again" in msg
    assert "candidates/_committed/u.json" not in objects(s3, prefix)


@pytest.fixture
def racing_takeovers(monkeypatch):
    """moto's server as S3 behaves, and the race forced: its PUTs run one at a time (moto checks a PUT's If-Match and
    then writes the object, two steps between which another request's thread may run; S3 does both at once), and
    a PUT with If-Match (a takeover) waits, up to 10 s, until a second one has arrived: both takers judged the stale
    lease before either replaces it."""
    import contextlib
    import threading

    from moto.s3.responses import S3Response

    lock, put, both = threading.Lock(), S3Response.put_object, threading.Barrier(2, timeout=10)

    def put_object(self):
        if self.headers.get("If-Match"):
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
        with lock:
            return put(self)

    monkeypatch.setattr(S3Response, "put_object", put_object)
    return both


def test_of_two_drivers_taking_over_one_stale_lease_one_wins(moto_s3, racing_takeovers):
    """A stale lease (its holder on another host silent for longer than the time to live), two drivers taking it
    over at once, each having judged it stale: the takeover replaces it only if it is still the object the taker
    judged (If-Match on its ETag), so one driver holds the lease and the other is refused in one line naming it."""
    import threading

    from gensets.errors import Busy
    from gensets.store import Store

    s3, prefix = moto_s3, "stale"
    _stale_lease(s3, prefix)
    start, results = threading.Barrier(2), {}

    def take(name):
        start.wait()
        try:
            with Store(f"s3://{BUCKET}/{prefix}").lease(name):
                results[name] = json.loads(_lease(s3, prefix))
                time.sleep(1)  # held while the other one looks
        except Busy as e:
            results[name] = e

    threads = [threading.Thread(target=take, args=(name,)) for name in ("build", "finalize")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not racing_takeovers.broken, "the two takeovers did not race: one driver never tried"
    won = {n: r for n, r in results.items() if isinstance(r, dict)}
    assert len(results) == 2 and len(won) == 1, results
    (winner, held), = won.items()
    busy = next(r for n, r in results.items() if n != winner)
    assert held["what"] == winner and held["pid"] == os.getpid()
    assert f"another gensets {winner} (pid {os.getpid()} on " in str(busy) and "\n" not in str(busy), busy
    assert "_lock.json" not in objects(s3, prefix)  # the winner removed its lease at its end


def test_a_lease_of_this_host_with_a_live_pid_expires_by_time(moto_s3):
    """A restarted container's driver has the same hostname and (pid 1) the same pid as the one that left the lease:
    a lease expires by time whoever wrote it, so a lease of this host whose pid is alive but silent for longer than
    the time to live is taken over; a fresh one of the same host and pid is still refused."""
    import socket

    from gensets.errors import Busy
    from gensets.store import LEASE_TTL, Store

    s3, prefix = moto_s3, "restarted"
    mine = {"what": "build", "pid": os.getpid(), "host": socket.gethostname()}
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/_lock.json", Body=json.dumps({**mine, "time": time.time()}).encode())
    with pytest.raises(Busy), Store(f"s3://{BUCKET}/{prefix}").lease("build"):
        pass
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/_lock.json",
                  Body=json.dumps({**mine, "time": time.time() - LEASE_TTL - 60}).encode())
    with Store(f"s3://{BUCKET}/{prefix}").lease("finalize"):
        assert json.loads(_lease(s3, prefix))["what"] == "finalize"
    assert "_lock.json" not in objects(s3, prefix)


def test_a_lease_dated_ahead_by_more_than_its_time_to_live_is_taken_over_on_s3(moto_s3):
    """A copied _lock.json, or a driver whose clock ran an hour ahead: the lease is stale (taken over, the
    conditional takeover on the ETag read), not a lock for good."""
    from gensets.store import LEASE_TTL, Store

    s3, prefix = moto_s3, "ahead"
    ahead = {"what": "build", "pid": 4242, "host": "ahead.example", "time": time.time() + 12 * LEASE_TTL}
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/_lock.json", Body=json.dumps(ahead).encode())
    with Store(f"s3://{BUCKET}/{prefix}").lease("finalize"):
        assert json.loads(_lease(s3, prefix))["what"] == "finalize"
    assert "_lock.json" not in objects(s3, prefix)


@pytest.mark.parametrize("creds, says", [
    ({"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}, "no credentials found"),
    ({"AWS_ACCESS_KEY_ID": "GENSETSWRONGKEY", "AWS_SECRET_ACCESS_KEY": "wrong"}, "wrong credentials"),
])
def test_missing_or_wrong_credentials_are_one_line_that_says_so(moto_s3, tmp_path, monkeypatch, creds, says):
    """No credentials anywhere (environment, config files), or a key the server does not know (moto checks keys
    once its authentication is on): one line that says so, exit 3; never "no such bucket" (the bucket exists)."""
    import moto.settings

    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # the server (this process) checks keys
    env = {**creds, "HOME": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    r = run_cli("verify", f"s3://{BUCKET}/any", env=env)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and says in lines[0] and "no such bucket" not in r.stderr, r.stderr


def test_credentials_are_never_written(s3, local_on_s3):
    """Neither the dummy key id nor the secret is in any object of the bucket or any file of the local caches (after
    every other test of the module: the local and Ray builds, the killed one, card, eval)."""
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for o in page.get("Contents", []):
            data = s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            if KEY_ID.encode() in data or SECRET.encode() in data:
                found.append(o["Key"])
    caches = _cache(local_on_s3).parent
    files = [p for p in caches.rglob("*") if p.is_file()]
    assert len(files) > 10
    found += [str(p) for p in files if KEY_ID.encode() in p.read_bytes() or SECRET.encode() in p.read_bytes()]
    assert found == []

