"""Issue 55's faults, each reproduced by a test that failed on the code before its fix: a manifest linked out of its
dataset, a query time limit too large for a timer, a missing output folder, a full disk, a store out of reach."""

import shutil

import pytest

from .conftest import run_cli
from .test_hardening import one_line_error


def test_verify_and_card_refuse_a_manifest_linked_out_of_the_dataset(reference, tmp_path):
    """`publish` and `eval` refuse a dataset whose manifest.json is a symlink out of it: `verify`, the check run
    before publishing, finds it (and never reads the file outside), and `card` refuses to re-render from it."""
    ws = shutil.copytree(reference, tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "dataset" / "manifest.json").rename(outside / "manifest.json")
    (ws / "dataset" / "manifest.json").symlink_to(outside / "manifest.json")
    for target in (ws, ws / "dataset"):
        r = run_cli("verify", target)
        assert r.returncode == 1 and f"{ws / 'dataset' / 'manifest.json'}: a symlink along the way leads out" \
            in r.stdout, r.stdout
    before = (outside / "manifest.json").read_bytes()
    one_line_error(run_cli("card", ws), f"{ws / 'dataset' / 'manifest.json'}", "symlink", "refusing it", code=1)
    one_line_error(run_cli("publish", ws, "--repo", f"file://{tmp_path / 'repo'}"), "manifest.json", "symlink")
    assert (outside / "manifest.json").read_bytes() == before and not (outside / "README.md").exists()


def test_a_query_time_limit_too_long_for_a_timer_is_refused_in_one_line(tmp_path):
    """`--timeout 1e308` ended in an OverflowError traceback from the timer, then a C++ abort from DuckDB's thread:
    now argparse's usage error (exit 2), before any query runs; the library waits no longer than a timer can."""
    from gensets.db import interruptible

    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb")
    r = run_cli("query", "--db", db, "--timeout", "1e308", "SELECT count(*) FROM runs")
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.strip().splitlines()[-1] == ("gensets query: error: argument --timeout: expected a number of "
                                                 "seconds from 0 to 1e9, got '1e308'"), r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr
    import duckdb

    assert interruptible(duckdb.connect(), "SELECT 42", 1e308) == (["42"], [(42,)])


def _closed_port() -> int:
    """A loopback port nothing listens on (a connection to it is refused at once)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_gcs_store_out_of_reach_is_one_line_per_retry_then_exit_3():
    """GCS's endpoint refusing connections: gcsfs retried each request six times, up to 32 s apart, logging each
    failure with a traceback, and its error was "failed" (exit 1) after about 70 s. Now gensets' own retries only,
    one line each (1, 2, 4 s), then one line, exit 3, no traceback."""
    pytest.importorskip("gcsfs")
    url = "gs://gensets-test/ws"
    r = run_cli("verify", url, env={"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{_closed_port()}"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and "Traceback" not in r.stderr and r.stdout == "", r.stderr
    said = f"{url}: the store cannot be reached while looking for its bucket"
    assert len(lines) == 4 and all(said in x for x in lines), r.stderr
    assert [x.rsplit("; ", 1)[-1] for x in lines[:3]] == [f"trying again in {s} s" for s in (1, 2, 4)], lines
    assert lines[3].startswith(f"gensets: error: {said}"), lines


def test_a_store_clients_unretrieved_connection_errors_are_not_logged(caplog):
    """s3fs's event loop (one per process; a Ray worker's too) logged "Task exception was never retrieved" with a
    traceback for every concurrent request a connection reset failed, beside the one whose failure gensets retries
    in one line. Once a store is opened, a task failed by the connection is not logged; any other still is."""
    import asyncio
    import gc
    import logging

    pytest.importorskip("s3fs")
    from fsspec.asyn import sync

    from gensets.store import Store

    fs = Store("s3://gensets-test/ws").fs  # opening it makes no request

    def orphan(error: BaseException) -> None:
        async def fail():
            raise error

        async def leave_it():  # a task that fails while nobody awaits it, then is dropped
            task = asyncio.ensure_future(fail())
            await asyncio.sleep(0.05)
            del task
            gc.collect()

        sync(fs.loop, leave_it)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        orphan(ConnectionResetError(104, "Connection reset by peer"))
        orphan(ValueError("not the store's outage"))
    said = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert len(said) == 1 and "ValueError" in repr(said[0].exc_info or said[0].getMessage()), caplog.records


def _full_disk_command(folder, argv: list[str]):
    """``argv`` (a gensets command writing into ``folder``) run where ``folder`` is full, and how: on a 64 KiB tmpfs
    mounted there in a mount namespace of its own (``unshare -rm``: a real ENOSPC), else, where namespaces are not
    allowed, under a 64 KiB file size limit (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG, the same path through the write
    door, but not a full disk). ``folder`` first holds ``out.csv`` = "old"; stderr ends with what it holds after."""
    import shutil as sh
    import subprocess
    import sys

    from .conftest import ROOT

    tail = 'rc=$?; printf "\\nleft: %s" "$(cat "$0/out.csv")" >&2; exit $rc'
    probe = ["unshare", "-rm", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$0"', str(folder)]
    if sh.which("unshare") and subprocess.run(probe, capture_output=True).returncode == 0:
        script = f'mount -t tmpfs -o size=64k tmpfs "$0" && printf old > "$0/out.csv" && "$@"; {tail}'
        return "tmpfs", subprocess.run(["unshare", "-rm", "sh", "-c", script, str(folder), sys.executable, "-m",
                                        "gensets.cli", *argv], capture_output=True, text=True, cwd=ROOT)
    import resource
    import signal

    (folder / "out.csv").write_text("old")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    return "rlimit", subprocess.run(["sh", "-c", f'"$@"; {tail}', str(folder), sys.executable, "-m", "gensets.cli",
                                     *argv], capture_output=True, text=True, cwd=ROOT, preexec_fn=limit)


def test_a_full_disk_names_the_file_being_written(tmp_path):
    """A write the disk cannot take was a bare "[Errno 28] No space left on device", naming no file: now one line
    naming the file, exit 1, and the file as it was (written whole or not at all)."""
    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb")
    folder = tmp_path / "full"
    folder.mkdir()
    how, r = _full_disk_command(folder, ["query", "--db", str(db), "SELECT repeat('x', 200000) AS x",
                                         "--output", str(folder / "out.csv")])
    print(f"the disk was full by {how}")
    err, left = r.stderr.rsplit("\nleft: ", 1)
    lines = err.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in err, (how, r.stderr)
    said = "No space left on device (errno ENOSPC)" if how == "tmpfs" else "File too large (errno EFBIG)"
    assert lines[0].startswith(f"gensets: error: {folder / 'out.csv'}: cannot write it: {said}"), (how, lines)
    assert left == "old"


def test_a_missing_output_folder_is_named_in_one_line_exit_2(tmp_path):
    """`--output no/such/folder/out.csv` named gensets' temporary file (`.out.csv.tmp-PID`), hinted at a symlink or
    FIFO that is not there, and exited 1: now the folder that is missing, exit 2."""
    from .test_card import make_results_db

    db = make_results_db(tmp_path / "r.duckdb")
    out = tmp_path / "no" / "such" / "folder" / "out.csv"
    r = run_cli("query", "--db", db, "SELECT 1", "--output", out)
    one_line_error(r, f"{out}: no such folder {out.parent}", code=2)
    assert ".tmp-" not in r.stderr and "symlink" not in r.stderr and not (tmp_path / "no").exists()


FORBIDDEN = ["\u202e", "\u202a", "\u2066", "\u2069", "\u0000", "\u001b", "\u007f", "\u0085", "\u2028", "\u2029"]


def test_config_strings_and_records_refuse_the_same_characters(tmp_path):
    """A bidi override (U+202E) in a config's pretty_name reached the card raw while every record refused it: the
    config's check and the records' were two definitions. Now one: every forbidden character is refused by both, in
    a config as one line naming its key (exit 2), and any other character is accepted by both."""
    import json

    from gensets import recordio
    from gensets.config import control_char
    from gensets.errors import DataError

    for ch in FORBIDDEN + ["é", "\u200b", " ", "日本"]:
        forbidden = ch in FORBIDDEN
        assert (control_char(f"a{ch}b") is not None) == forbidden, ascii(ch)
        record = json.dumps({"what": "build", "pid": 1, "host": f"h{ch}", "time": 1.0}).encode()
        if forbidden:
            with pytest.raises(DataError, match=rf"control character \(U\+{ord(ch):04X}\)"):
                recordio.parse(record, "Lease", "lease")
        else:
            recordio.parse(record, "Lease", "lease")
    config = tmp_path / "bidi.yaml"
    config.write_text("builder: imagenet-d\npretty_name: \"ImageNet-D \u202egnp.exe\"\n", encoding="utf-8")
    r = run_cli("build", config, "--out", tmp_path / "ws")
    one_line_error(r, "pretty_name", "U+202E", code=2)
    assert not (tmp_path / "ws").exists()


class _FlakyEndpoint:
    """A TCP proxy on loopback in front of the S3 server: it forwards, but during :meth:`outage` it resets every
    connection it holds and every new one (RST: "connection reset by peer"), as an endpoint going through a restart."""

    def __init__(self, port: int):
        import socket
        import threading

        self.upstream, self.resetting, self.lock, self.live = port, threading.Event(), threading.Lock(), set()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @staticmethod
    def _reset(s) -> None:
        import contextlib
        import socket
        import struct

        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if self.resetting.is_set():
                self._reset(client)
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                self._reset(client)
                continue
            with self.lock:
                self.live |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a, b) -> None:
        try:
            while data := a.recv(1 << 16):
                if self.resetting.is_set():
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            self._reset(s)
        with self.lock:
            self.live -= {a, b}

    def outage(self, seconds: float) -> None:
        import time

        self.resetting.set()
        with self.lock:
            for s in list(self.live):
                self._reset(s)
        time.sleep(seconds)
        self.resetting.clear()

    def close(self) -> None:
        self._reset(self.sock)


@pytest.mark.slow
def test_a_ray_build_on_s3_rides_out_connection_resets_without_tracebacks(tmp_path):
    """The S3 endpoint resets every connection for 10 s while a Ray build runs: the build rides it out (each retry
    one line), and no worker's "Task exception was never retrieved" traceback reaches stderr through Ray's log
    forwarding."""
    import os
    import secrets
    import subprocess
    import sys
    import time

    pytest.importorskip("ray")
    pytest.importorskip("moto")
    import boto3
    from moto.server import ThreadedMotoServer

    from .conftest import HANG, ROOT, SMOKE

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    creds = {"AWS_ACCESS_KEY_ID": "GENSETSDUMMYKEY0042", "AWS_SECRET_ACCESS_KEY": "gensets-dummy-secret",
             "AWS_DEFAULT_REGION": "us-east-1"}
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", **{k.lower(): v for k, v in creds.items()
                                                                          if k != "AWS_DEFAULT_REGION"},
                          region_name="us-east-1")
    client.create_bucket(Bucket="flaky")
    proxy = _FlakyEndpoint(port)
    env = {**os.environ, **creds, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}", "GENSETS_TEST_FORK": "0",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "GENSETS_CACHE": str(tmp_path / "cache")}
    args = ["build", str(SMOKE), "--out", "s3://flaky/ws", "--backend", "ray", "--workers", "2", "--set",
            "unit_size=1", "--set", "images_per_pair=1", "--set", "nuisances.background.limit=4"]
    p = subprocess.Popen([sys.executable, "-m", "gensets.cli", *args], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + HANG
        while not client.list_objects_v2(Bucket="flaky", Prefix="ws/candidates/_committed/").get("KeyCount"):
            assert p.poll() is None and time.monotonic() < deadline, "the build ended before its first commit"
            time.sleep(0.2)
        proxy.outage(10)  # mid-build: units are being written
        out, err = p.communicate(timeout=HANG)
    finally:
        if p.poll() is None:
            p.kill()
        proxy.close()
        server.stop()
    assert p.returncode == 0, (out, err[-4000:])
    assert "never retrieved" not in err and "Traceback" not in err, err[-4000:]
    assert "units (0 done before, " in out, out
