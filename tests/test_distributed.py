"""`gensets build --backend ray`: a real local Ray cluster (started and stopped by each build, on 127.0.0.1, two
workers) gives the bytes of the one-process build, also when a worker dies mid-unit; the default path never
imports Ray. Needs the distributed extra (`make venv-distributed`)."""

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import HANG, ROOT, SMALL, SMOKE, run_cli
from .test_imagenet_d import shards_digest, temp_files, tree_digest

pytestmark = pytest.mark.slow  # `make test-slow` and CI: each test starts a Ray cluster and builds

RAY = ("--backend", "ray", "--workers", "2")


def _rows(ws):
    """The manifest's complete lines (one being appended meanwhile is not one yet)."""
    text = (ws / "candidates" / "manifest.jsonl").read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def _samples(ws):
    import duckdb

    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    try:
        return con.execute("SELECT * FROM samples ORDER BY key").fetchall()
    finally:
        con.close()


def _same_bytes(ws, reference):
    """Every unit exactly once, each shard the bytes of the local build, the manifest rows equal but for the
    rank / world of the process (here: the Ray worker) that ran it, state.duckdb's samples equal."""
    rows, ref = _rows(ws), _rows(reference)
    assert sorted(r["unit"] for r in rows) == sorted(r["unit"] for r in ref)
    assert len({r["unit"] for r in rows}) == len(rows) == 12
    assert {r["world"] for r in rows} == {2} and {r["rank"] for r in rows} <= {0, 1}
    strip = lambda r: {k: v for k, v in r.items() if k not in ("rank", "world")}  # noqa: E731
    assert sorted(map(strip, rows), key=lambda r: r["unit"]) == sorted(map(strip, ref), key=lambda r: r["unit"])
    assert shards_digest(ws) == shards_digest(reference)
    assert _samples(ws) == _samples(reference)
    assert temp_files(ws) == []


def test_ray_build_gives_the_bytes_of_the_local_build(reference, tmp_path):
    ws = tmp_path / "ws"
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *RAY, check=0)
    assert "12 units (0 done before, 12 run here)" in r.stdout
    assert "Ray: 2 workers; 0 units run again after their worker died" in r.stdout
    _same_bytes(ws, reference)
    run_cli("finalize", ws, "--include-pending", check=0)
    assert tree_digest(ws / "dataset") == tree_digest(reference / "dataset")
    # the same command again: nothing to run (no cluster is started for it)
    again = run_cli("build", SMOKE, "--out", ws, "--quiet", *RAY, check=0)
    assert "12 units (12 done before, 0 run here)" in again.stdout


def test_a_worker_killed_mid_unit_is_replaced_and_its_unit_run_again(reference, tmp_path):
    """The test hook makes the first attempt at one unit leave a shard cut short and end its worker process
    (os._exit): Ray restarts the worker and runs the unit again; the build ends with no user action. With --json,
    stdout is the result alone (Ray's "(raylet) A worker died ..." goes to stderr)."""
    ws, marker = tmp_path / "ws", tmp_path / "killed"
    unit = sorted(r["unit"] for r in _rows(reference))[5]
    r = run_cli("build", SMOKE, "--out", ws, *RAY, "--json", env={"GENSETS_TEST_EXIT_UNIT": f"{unit}:{marker}"},
                check=0)
    assert marker.exists(), "the hook never ran: the unit's worker was not killed"
    out = json.loads(r.stdout)
    assert (out["units"], out["done_before"], out["units_run"]) == (12, 0, 12), out
    assert (out["workers"], out["units_retried"]) == (2, 1), out
    _same_bytes(ws, reference)  # the cut-short temporary shard is gone, the unit committed once


SLOW = ("--set", "generator.steps=25")  # units of a second or more: the build outlasts the test's look at it


def test_a_node_lost_mid_build_strands_nothing(tmp_path):
    """A two-node cluster (`ray.cluster_utils.Cluster`, one CPU each, on 127.0.0.1) joined with --address; the
    second node is removed once both workers have committed a unit: the unit it ran goes to the other worker,
    and the build completes with the bytes of a local build. The workers start their first unit together (the
    test hook GENSETS_TEST_GATE): on a loaded machine one worker could otherwise run every unit before the other
    has imported torch. The workers run at the priority of the node's processes."""
    reference = tmp_path / "reference"
    run_cli("build", SMOKE, "--out", reference, "--quiet", *SLOW, check=0)
    # Ray turns a 127.0.0.1 address into the machine's outward one unless told it is a one-machine cluster
    os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
                      RAY_AUTH_TOKEN=secrets.token_hex(32))  # conftest restores the environment after the test
    from gensets.builders.backends import _ray_temp_dir

    if short := _ray_temp_dir():  # the tests' TMPDIR is too long for Ray's socket paths
        os.environ["RAY_TMPDIR"] = short
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1"})
    ws = tmp_path / "ws"
    try:
        node = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        gate = tmp_path / "gate"
        gate.mkdir()
        p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--json",
                              *SLOW, *RAY, "--address", cluster.address], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "GENSETS_TEST_GATE": str(gate)})
        try:
            deadline = time.monotonic() + HANG
            while not ((gate / "rank-0").exists() and (gate / "rank-1").exists()):
                assert p.poll() is None, p.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "the two workers did not both start"
                time.sleep(0.1)
            for rank in (0, 1):  # at the node's priority, not Ray's default 15 lower (starved beside busy processes)
                pid = int((gate / f"rank-{rank}").read_text())
                assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0), rank
            (gate / "go").touch()
            while not ((ws / "candidates" / "manifest.jsonl").exists() and {r["rank"] for r in _rows(ws)} == {0, 1}):
                assert p.poll() is None, p.stderr.read()[-3000:]
                assert time.monotonic() < deadline, "the two workers did not both commit a unit"
                time.sleep(0.1)
            done = len(_rows(ws))
            cluster.remove_node(node)
            out, err = p.communicate(timeout=HANG)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    finally:
        cluster.shutdown()
    assert p.returncode == 0, err[-3000:]
    r = json.loads(out)
    assert r["units_run"] == 12 and done < 12 and r["units_retried"] == 1  # the unit the lost node ran
    assert r["workers"] == 2
    _same_bytes(ws, reference)


def test_default_path_never_imports_ray_or_s3fs(tmp_path):
    """`gensets build --help` and a local build (a unit run) import neither Ray nor the object-store clients."""
    ws = tmp_path / "ws"
    code = ("import sys\nfrom gensets.cli import main\n"
            "try:\n    main(['build', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('help', 'ray' in sys.modules, 's3fs' in sys.modules, file=sys.stderr)\n"
            f"assert main(['build', {str(SMOKE)!r}, '--out', {str(ws)!r}, '--quiet', *{list(SMALL)!r}]) == 0\n"
            "print('build', 'ray' in sys.modules, 's3fs' in sys.modules, 'torch' in sys.modules, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG)
    assert r.returncode == 0, r.stderr
    assert "--backend {local,ray}" in r.stdout and "1 run here" in r.stdout
    lines = [line for line in r.stderr.splitlines() if line.endswith(("True", "False"))]
    assert lines == ["help False False", "build False False True"]  # torch: the unit did run here


def test_ray_options_without_the_ray_backend_are_refused(tmp_path):
    for args in (("--workers", "2"), ("--address", "auto"), ("--backend", "local", "--workers", "2"),
                 ("--gpus-per-worker", "1")):
        r = run_cli("build", SMOKE, "--out", tmp_path / "ws", "--quiet", *args)
        assert r.returncode == 2 and "is an option of --backend ray" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ws").exists()


def test_without_ray_installed_the_ray_backend_says_what_to_install(tmp_path):
    """Ray made unimportable (as where the extra is not installed): one line naming the extra, exit 2."""
    code = ("import sys\nsys.modules['ray'] = None\nfrom gensets.cli import main\n"
            f"sys.exit(main(['build', {str(SMOKE)!r}, '--out', {str(tmp_path / 'ws')!r}, '--quiet', "
            f"*{list(SMALL)!r}, '--backend', 'ray']))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG)
    assert r.returncode == 2, r.stderr
    assert "pip install 'gensets[distributed]'" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_error_in_a_ray_worker_is_the_one_line_of_a_local_build(tmp_path):
    """`long_prompts: error` raised in a worker (checking the units before any image) comes back as the same one
    line a local build prints (tests/test_prompt_length.py), exit 2, and no shard is written."""
    genbench = ROOT / "configs" / "genbench.smoke.yaml"
    small = ("--set", "strategies=[ST,NP]", "--set", "classes=[airplane,cat]", "--set", "generator.long_prompts=error")
    ws = tmp_path / "ws"
    r = run_cli("build", genbench, "--out", ws, "--quiet", *small, *RAY)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert re.fullmatch(rf"gensets: error: {re.escape(str(genbench))}: unit [0-9a-f]{{16}} \(cifar-10-np / "
                        r"(airplane|cat)\): negative prompt of \d+ tokens exceeds the text encoder's 77 "
                        r"\(long_prompts: error\)", lines[0]), lines
    assert not list((ws / "candidates").glob("*.tar"))


def test_more_gpus_per_worker_than_the_cluster_has_is_one_line(tmp_path):
    """--gpus-per-worker on a cluster without that many GPUs (this machine has none): one line, before any image."""
    ws = tmp_path / "ws"
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL, "--backend", "ray", "--gpus-per-worker", "0.5")
    lines = r.stderr.strip().splitlines()
    assert r.returncode not in (0, 1) and len(lines) == 1, r.stderr
    assert lines[0] == "gensets: error: --gpus-per-worker 0.5: the Ray cluster has 0 GPUs", lines
    assert not list((ws / "candidates").glob("*.tar"))


def test_a_gpu_worker_asks_for_its_share_of_the_nodes_cores(tmp_path):
    """Ray sets a worker's OMP_NUM_THREADS, and so torch's CPU threads, to the CPUs the worker asked for. A GPU
    worker asks for its share of its node's cores (the GPU node poorest in cores per GPU), not one: with one, its
    unit's CPU work ran on one thread where the one-process build uses every core. Checked on a real local cluster
    that declares 4 CPUs and 2 GPUs: two 1-GPU workers take 2 CPUs each."""
    from gensets.builders.backends import cpu_share

    def node(cpus, gpus, alive=True):
        return {"Alive": alive, "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {})}}

    assert cpu_share([node(16, 1)], 1.0) == 16 and cpu_share([node(16, 1)], 0.5) == 8
    assert cpu_share([node(16, 1)], 1 / 3) == 5  # floored: three such workers fit on the node
    assert cpu_share([node(64, 8), node(16, 4), node(32, 0)], 1.0) == 4  # fits on every GPU node
    assert cpu_share([node(16, 4), node(64, 8, alive=False)], 2.0) == 8
    assert cpu_share([node(64, 8)], 0.0) == 1 and cpu_share([node(2, 1)], 0.1) == 1 and cpu_share([], 1.0) == 1

    # in a process of its own: Ray keeps the token of an earlier cluster of this process (another test's)
    r = subprocess.run([sys.executable, "-c", CPU_SHARE, str(SMOKE), str(tmp_path / "ws")], cwd=ROOT, text=True,
                       capture_output=True, timeout=HANG,
                       env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"cpus": 2, "free_cpu": 0, "free_gpu": 0}, got


CPU_SHARE = """
import json, sys
import ray
from gensets.builders.backends import _ray_temp_dir, pool
from gensets.builders.environment import BuildEnvironment
from gensets.workspace import Workspace, load_build_config
ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=_ray_temp_dir(),
         log_to_driver=False, logging_level="WARNING")
builder, cfg = load_build_config(sys.argv[1])
ws = Workspace.create(sys.argv[2], builder, cfg)
p = pool("ray", (builder, cfg, ws.where, BuildEnvironment.of(cfg), 0, 1, sys.argv[1]), workers=2, quiet=True, gpus_per_worker=1.0)
try:
    p._start()
    ray.get([a.ping.remote() for a in p.actors])
    free = ray.available_resources()
    got = {"cpus": p.cpus, "free_cpu": free.get("CPU", 0), "free_gpu": free.get("GPU", 0)}
finally:
    p.close()
    ray.shutdown()
print(json.dumps(got))  # after close: while the pool runs, stdout is stderr (Ray's messages keep off it)
"""


def test_without_address_a_build_starts_its_own_cluster_beside_a_running_one(tmp_path):
    """A cluster already running on this machine (as `ray start --head` leaves one: its address recorded in Ray's
    temp folder; here also in RAY_ADDRESS) is not the build's: ray.init() without an address would find and join
    it, and refuse the build's CPU count (a traceback before). A build without --address starts a cluster of its own and leaves the other one running. The other
    cluster runs in a process of its own (Ray keeps an earlier in-process cluster's token), under a temp folder of
    its own that this build shares."""
    temp = Path(tempfile.mkdtemp(prefix="gensets-ray-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    other = subprocess.Popen([sys.executable, "-c", OTHER_CLUSTER], env=env, text=True, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        ready = other.stdout.readline()
        assert ready.startswith("ready "), other.stderr.read()[-3000:] if other.poll() is not None else ready
        assert (temp / "ray" / "ray_current_cluster").read_text().strip() == ready.split()[1]
        r = run_cli("build", SMOKE, "--out", tmp_path / "ws", "--json", *SMALL, "--backend", "ray", "--workers", "1",
                    env={**{k: env[k] for k in ("RAY_TMPDIR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_TOKEN")},
                         "RAY_ADDRESS": ready.split()[1]})  # joined by `--address auto` only
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads(r.stdout)["workers"] == 1
        other.stdin.write("alive?\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "nodes 1", "the running cluster was disturbed"
    finally:
        other.stdin.close()  # it shuts its cluster down and ends
        try:
            other.wait(timeout=120)
        except subprocess.TimeoutExpired:
            other.kill()
        shutil.rmtree(temp, ignore_errors=True)


OTHER_CLUSTER = """
import sys
import ray
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                        "node_ip_address": "127.0.0.1"})
print("ready", cluster.address, flush=True)
for line in sys.stdin:
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    print("nodes", sum(n["Alive"] for n in ray.nodes()), flush=True)
    ray.shutdown()
cluster.shutdown()
"""


def test_a_killed_driver_resumes_only_the_missing_units_and_a_second_driver_is_refused(reference, tmp_path):
    """The driver (with its local cluster) killed after a third of the units: the same command runs exactly the
    missing ones and gives the local bytes; a truncated shard a killed writer left for a missing unit, with no
    manifest row, is overwritten and `verify` passes. A second driver while the first runs: one line, exit 4."""
    import contextlib
    import signal

    ws = tmp_path / "ws"
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--quiet", *RAY],
                         cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + HANG
        while not ((ws / "candidates" / "manifest.jsonl").exists() and len(_rows(ws)) >= 4):
            assert p.poll() is None, p.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "4 units were not committed in time"
            time.sleep(0.2)
        # the driver (it alone commits units) held where it is while a second driver tries: left running, on a
        # loaded machine it could commit every unit while the second one started
        os.killpg(p.pid, signal.SIGSTOP)
        second = run_cli("build", SMOKE, "--out", ws, "--quiet", *RAY)
        p.kill()  # the driver, SIGKILLed
        p.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):  # and what it started: the local cluster's processes
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 4 and len(lines) == 1, second.stderr
    assert f"another gensets build (pid {p.pid}) is running on this workspace" in lines[0], lines  # the holder
    committed = {r["unit"] for r in _rows(ws)}
    assert 4 <= len(committed) < 12
    missing = sorted({r["unit"] for r in _rows(reference)} - committed)
    (ws / "candidates" / f"{missing[0]}.tar").write_bytes(b"cut short by a killed writer")
    r = json.loads(run_cli("build", SMOKE, "--out", ws, "--json", *RAY, check=0).stdout)
    assert r["done_before"] == len(committed) and r["units_run"] == 12 - len(committed), r
    _same_bytes(ws, reference)
    run_cli("verify", ws, check=0)


def _descendants(pid: int) -> set[int]:
    """``pid`` and every process below it (Ray's GCS, raylet, agents and workers are the build's children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo += children.get(p, [])
    return out


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return inodes


def _addr(hexaddr: str) -> str:
    """An address of /proc/net/tcp(6) (little-endian hex words) as text."""
    import ipaddress

    host, port = hexaddr.split(":")
    raw = bytes.fromhex(host)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return f"{ip}:{int(port, 16)}"


def tcp_sockets(pids: set[int]) -> list[tuple[str, str]]:
    """(local, remote) of every TCP socket the processes ``pids`` hold, from /proc/net/tcp and /proc/net/tcp6."""
    mine, out = _socket_inodes(pids), []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[9] in mine:
                out.append((_addr(f[1]), _addr(f[2])))
    return out


def _loopback(address: str) -> bool:
    import ipaddress

    host = address.rsplit(":", 1)[0]
    ip = ipaddress.ip_address(host)
    return ip.is_loopback or (ip.is_unspecified and address.endswith(":0"))  # a remote end not yet connected


def test_a_ray_build_and_the_review_server_listen_and_talk_on_loopback_only(tmp_path):
    """README: a local cluster is on 127.0.0.1 only, and so is the review page by default. Every TCP socket of the
    build's processes (driver, GCS, raylet, agents, workers), read from /proc/net/tcp and tcp6 while both workers wait
    at the start gate and again while units run, has a loopback address at both ends: none listens on every address
    (0.0.0.0 / ::) or on the machine's outward one. (Ray, unless it is told the cluster is one machine, uses the
    outward address for its workers even when the driver's node is on 127.0.0.1.) Then the same for `gensets review
    serve` on the built workspace, with a client connected."""
    ws, gate = tmp_path / "ws", tmp_path / "gate"
    gate.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}  # gensets' own setting
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--quiet",
                          *RAY], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**env, "GENSETS_TEST_GATE": str(gate)})
    seen: set = set()
    try:
        deadline = time.monotonic() + HANG
        while not ((gate / "rank-0").exists() and (gate / "rank-1").exists()):
            assert p.poll() is None, p.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the two workers did not both start"
            time.sleep(0.1)
        seen.update(tcp_sockets(_descendants(p.pid)))
        (gate / "go").touch()
        while p.poll() is None and time.monotonic() < deadline:
            seen.update(tcp_sockets(_descendants(p.pid)))
            time.sleep(0.5)
        out, err = p.communicate(timeout=HANG)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err[-3000:]
    listening = [a for a, b in seen if b.endswith(":0")]
    assert len(listening) >= 3, seen  # GCS, raylet, workers: the look saw the cluster
    outside = sorted({f"{a} -> {b}" for a, b in seen if not (_loopback(a) and _loopback(b))})
    assert not outside, f"{len(outside)} sockets off loopback: {outside[:20]}"
    # the review server of the same workspace, with a client connected: loopback at both ends too
    import socket

    from .conftest import stop_server

    serve = subprocess.Popen([sys.executable, "-m", "gensets.cli", "review", "serve", str(ws), "--port", "0",
                              "--reviewer", "ci"], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", serve.stdout.readline())
        assert m, serve.stderr.read()[-2000:] if serve.poll() is not None else "no address printed"
        with socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=HANG) as client:
            client.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            client.recv(1)
            served = tcp_sockets(_descendants(serve.pid))
    finally:
        stop_server(serve)
    assert any(b.endswith(":0") for a, b in served) and any(not b.endswith(":0") for a, b in served), served
    assert all(_loopback(a) and _loopback(b) for a, b in served), served


def test_a_ray_workers_notices_reach_the_drivers_stderr(tmp_path):
    """A worker's notices (gensets.notices: here the line of each model it loads) go to its stderr, which Ray forwards
    to the driver's, when the driver prints its own (the CLI): the worker process has no CLI of its own."""
    r = run_cli("build", SMOKE, "--out", tmp_path / "ws", *SMALL, "--backend", "ray", "--workers", "1",
                env={"GENSETS_ANNOUNCE": "always"}, check=0)
    forwarded = [line for line in r.stderr.splitlines() if "pid=" in line and "loading tiny:" in line]
    assert forwarded, r.stderr
