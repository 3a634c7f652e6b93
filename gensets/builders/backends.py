"""Where a build's units run: in this process (``--backend local``, the default; under ``accelerate launch``
each process runs its share), or on a Ray cluster (``--backend ray``: workers pull units).

A unit's work is the same on every backend (:class:`UnitWorker`): generate, score, write the shard under its
content-derived name ``candidates/<unit>.tar`` (atomically; the same bytes on any attempt, so a retried or
duplicated attempt is harmless) and return the manifest row. The runner (the driver) alone appends rows to
``candidates/manifest.jsonl`` and ingests ``state.duckdb``.

Ray is imported only by :class:`RayPool`, when a ``--backend ray`` build has a unit to run: the default path never
imports it. A Ray worker holds one :class:`UnitWorker` (its models loaded once) and takes the next unit when it
finished one; the unit of a worker that died goes to the next free worker, and Ray restarts the dead one wherever
there is room. The workspace is a path every worker can write (one machine, or a shared filesystem).

The pools run other workers too: the audit's (:class:`gensets.audit.features.EmbedWorker`, :func:`embedding_pool`)
decodes, hashes and embeds chunks of images the same way. A pool's worker class takes its arguments, answers
``ping`` and ``run(unit)`` (a unit: ``id`` and ``payload``) and says, in ``ranked(args, rank, world)``, the arguments
of its worker ``rank`` of ``world`` and the :class:`BuildEnvironment` it computes in (None: Ray's defaults).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from pathlib import Path

from .. import notices
from ..audit.features import EmbedWorker
from ..errors import GensetsError
from ..models.device import distributed
from ..quality.thresholds import QualityFilter
from ..registry import load_plugins
from ..shards import write_shard
from ..workspace import Workspace
from . import faults
from .base import PromptTooLong
from .environment import BuildEnvironment

BACKENDS = ("local", "ray")
TASK_RETRIES = 3  # a unit whose worker died is run again at most this many times (then the build stops, naming it)
NICENESS = "RAY_worker_niceness"
"""How much lower than its node's processes Ray runs a worker (``nice`` increment). Ray's default, 15, gave the units
a sliver of the CPU beside any other busy process (the smoke build on two workers beside two busy loops: 556 s, against
21 s on the idle machine and 25 s for the one-process build beside the same loops). A build's workers get 0, the
node's own priority, as Ray's job supervisor gives its driver, unless this is set where the build runs."""


def unit_name(unit) -> str:
    """A unit as an error names it: its id, and what its payload says it makes (config, class, ...)."""
    p = unit.payload
    about = [str(p[k]) for k in ("config", "class", "label", "mode", "stage") if isinstance(p.get(k), str)]
    return f"{unit.id} ({' / '.join(about)})" if about else unit.id


@contextlib.contextmanager
def naming(config_path: str, unit):
    """A prompt too long (``long_prompts: error``) as one line naming the config file and the unit."""
    try:
        yield
    except PromptTooLong as e:
        raise GensetsError(f"{config_path}: unit {unit_name(unit)}: {e}") from None


class UnitWorker:
    """One process's share of a build: the builder's context (models loaded once, at the first unit), and the
    units it is given, each written as its candidate shard; ``run`` returns the manifest row and what the unit's
    samples say was cut to the text encoder's window."""

    def __init__(self, builder, cfg, root: str, environment: BuildEnvironment, rank: int, world: int,
                 config_path: str):
        load_plugins()  # a Ray worker is a process of its own: the plugins the driver's CLI loaded, here too
        notices.inherit()  # and its notices on stderr (which Ray forwards to the driver) when the driver prints its own
        self.builder, self.cfg, self.environment = builder, cfg, environment
        self.rank, self.world, self.config_path = rank, world, config_path
        self.ws = Workspace(root)  # created by the driver
        self.ctx = builder.Context(cfg)
        self.ctx.workspace = self.ws  # staged builders read the shards of earlier stages
        self.quality = None  # the config's quality: thresholds (gensets.quality.thresholds), scored after each unit
        if getattr(cfg, "quality", None):
            self.quality = QualityFilter(cfg.quality)
        self.env = None  # the recorded environment's id in the workspace (BuildEnvironment.record), once loaded
        self.build_id = None
        self.faults = faults.injected()  # the tests' fault hooks (gensets.builders.faults), None in a real build

    def load(self) -> None:
        """torch and every model, once, when there is work: a missing model fails now, in one line."""
        if self.env is not None:
            return
        self.ws.pull_config()  # on a store: into this node's cache of the URL workspace
        if not self.ws.config_path.is_file():  # a Ray worker on a node that does not see the driver's folder
            import socket

            raise GensetsError(f"{self.ws.root}: no workspace there on {socket.gethostname()}, where a Ray worker "
                               "runs: the workspace must be a path every node of the cluster can write (a shared "
                               "filesystem)")
        self.build_id = self.ws.fingerprint
        self.environment.start()  # a fresh worker process: pinned before torch first runs, its threads, switches
        self.ctx.load()
        if self.quality:
            self.quality.load()
        self.env = self.ws.record_environment(self.environment.record())

    @staticmethod
    def ranked(args: tuple, rank: int, world: int) -> tuple[tuple, BuildEnvironment]:
        """The arguments of a pool's worker ``rank`` of ``world``, and the environment it builds in."""
        builder, cfg, root, environment, _rank, _world, config_path = args
        return (builder, cfg, root, environment, rank, world, config_path), environment

    def ping(self) -> bool:
        """A restarted Ray worker's first answer (it loads its context at its next unit)."""
        return True

    def check(self, units: list) -> None:
        """``long_prompts: error``: every unit to run is checked before any image."""
        if units:
            self.load()
        for unit in units:
            with naming(self.config_path, unit):
                self.builder.check_prompts(unit, self.ctx)

    def run(self, unit) -> dict:
        self.load()
        if self.faults:
            self.faults.before_unit(self.rank)
        ctx = self.ctx
        ctx.skipped = []  # inputs a unit refused (an import's corrupt files), each with its reason
        with naming(self.config_path, unit):
            samples = self.builder.run_unit(unit, ctx, self.build_id)
        cut = {"prompts": 0, "negative_prompts": 0, "windows": []}  # texts cut to the text encoder's window
        for s in samples:
            for name in ("prompt", "negative_prompt"):
                if s.meta.get(f"{name}_received") is not None:
                    cut[f"{name}s"] += 1
                    cut["windows"].append((s.meta.get("generator") or {}).get("text_window"))
        if self.quality:
            self.quality.apply(samples)
        name = f"{unit.id}.tar"
        if self.faults:
            self.faults.before_shard(unit.id, self.ws.candidates / name, self.ws.store)
        info = write_shard(self.ws.candidates / name, [s.to_wds() for s in samples])
        row = {"unit": unit.id, "shard": name, "sha256": info.sha256, "n": info.n, "nbytes": info.nbytes,
               "kept": sum(bool(s.meta.get("kept")) for s in samples), "skipped": ctx.skipped,
               "rank": self.rank, "world": self.world, "env": self.env}
        self.ws.commit(self.ws.candidates / name, row)  # on a store: the shard uploaded, then its marker, last
        return {"row": row, "cut": cut}


# Ray's sockets live under <temp>/ray/session_<date>_<time>_<micros>_<pid>/sockets/: a Unix socket's path has at
# most 107 bytes, which a long TMPDIR (a CI runner's, a test's) exceeds; then a short folder of this user in /tmp
SOCKET_SUFFIX = len("/ray/session_2026-11-27_04-10-24_483061_4194304/sockets/plasma_store")


def _ray_temp_dir() -> str | None:
    """Where a local cluster keeps its sessions: Ray's default (RAY_TMPDIR or the temp folder), unless its socket
    paths would be too long."""
    import tempfile  # Ray's own choice: RAY_TMPDIR, TMPDIR on Linux, else the temp folder

    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()
    if len(base) + SOCKET_SUFFIX <= 107:
        return None
    short = Path("/tmp") / f"gensets-ray-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    return str(short)


@functools.cache
def _token() -> str:
    """This process's token for the local clusters it starts: one per process (Ray reads it once, when imported)."""
    import secrets

    return secrets.token_hex(32)


def cpu_share(nodes: list, gpus_per_worker: float) -> int:
    """The CPUs a Ray worker asks for: on CPU (``gpus_per_worker`` 0) one, its unit's torch threads being
    ``--threads``; on GPU its share of the cores of the GPU node that has the fewest cores per GPU (floored, at
    least 1), so that every GPU worker fits on any GPU node. ``nodes`` is ``ray.nodes()``.

    Ray sets a worker's ``OMP_NUM_THREADS`` (and so torch's CPU threads) to the CPUs it asked for: a GPU worker that
    asked for one ran its unit's CPU work (the pipeline's float-to-uint8 postprocessing, image encoding) on one
    thread, where the one-process build uses every core."""
    if not gpus_per_worker:
        return 1
    per_gpu = [n["Resources"].get("CPU", 0) / n["Resources"]["GPU"] for n in nodes
               if n.get("Alive", True) and n.get("Resources", {}).get("GPU")]
    return max(1, math.floor(min(per_gpu) * gpus_per_worker)) if per_gpu else 1


class LocalPool:
    """The units of this process, run here in plan order (today's path)."""

    retried = 0
    size = 1

    def __init__(self, worker: UnitWorker):
        self.worker = worker

    def alive(self) -> int:
        return 1

    def check(self, units: list) -> None:
        self.worker.check(units)

    def run(self, units: list):
        for unit in units:
            yield self.worker.run(unit)

    def close(self) -> None:
        pass


class RayPool:
    """A pool of Ray actors, each a ``worker`` (:class:`UnitWorker`); started at the first unit to run.

    ``address``: join that cluster (``ray start --head``, KubeRay, Slurm); None: start a local one for the run
    (``workers`` CPUs, on 127.0.0.1, no dashboard, no usage statistics) and stop it at the end. Units are handed
    out one at a time to whichever worker is free (no static split) and come back in the order they finish.

    A worker that dies (killed, out of memory, its node gone) loses only its unit: the unit goes back to the queue
    for whichever worker is free next (at most :data:`TASK_RETRIES` times), and Ray restarts the worker (on any node
    with room: ``max_restarts=-1``), which takes units again once it answers. A worker whose node never comes back
    is waited for by nothing."""

    def __init__(self, args: tuple, *, workers: int | None, address: str | None, quiet: bool,
                 gpus_per_worker: float | None = None, cpus_per_worker: int | None = None, worker=UnitWorker):
        self.args, self.workers, self.address, self.quiet, self.worker = args, workers, address, quiet, worker
        self.gpus = gpus_per_worker or 0.0
        self.cpus = cpus_per_worker  # None: cpu_share (a GPU worker's share of its node's cores; 1 on CPU)
        self.ray = None
        self.actors: list = []
        self.started = False  # this pool connected to Ray (and disconnects; a local cluster stops with it)
        self.retried = 0  # units run again because their worker died
        self.restarting: set = set()  # workers Ray is restarting (dead, not yet answering again)
        self.size = 0  # workers started
        self.env_before: dict = {}  # what _set_env changed in os.environ, restored by close
        self.stdout = None  # the driver's stdout while Ray's threads print to stderr instead (see _start)

    def _set_env(self, name: str, value: str) -> None:
        if name not in os.environ:
            self.env_before.setdefault(name, None)
            os.environ[name] = value

    def _start(self) -> None:
        if self.actors:
            return
        # before ray is imported: it reads its settings then
        self._set_env("RAY_USAGE_STATS_ENABLED", "0")  # never report to Ray's servers unasked
        # a task error whose ref is dropped (the other units running when one fails) is not printed with its worker's
        # traceback: the driver says the error that stops the build, in one line
        self._set_env("RAY_IGNORE_UNHANDLED_ERRORS", "1")
        if not self.address:
            # a cluster of one machine: without this Ray gives its workers the machine's outward address (its
            # processes then listen on every address and talk over that one), although the node is on 127.0.0.1
            self._set_env("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        if not self.address and "RAY_AUTH_MODE" not in os.environ:
            # a local cluster listens on loopback, which other users of the machine reach too: token
            # authentication, under a token made for this run, kept in this process's environment (inherited by
            # the cluster's processes) and never written to a file
            self._set_env("RAY_AUTH_MODE", "token")
            if not {"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(os.environ):
                self._set_env("RAY_AUTH_TOKEN", _token())
        try:
            import ray
        except ImportError as e:
            raise GensetsError(f"--backend ray needs the distributed extra (pip install 'gensets[distributed]'): {e}") \
                from None
        self.ray = ray
        # stdout carries the command's results only: Ray's driver threads print its messages ("(raylet) A worker died
        # ...", the workers' output) to whatever sys.stdout is when they print, from ray.init to ray.shutdown
        self.stdout, sys.stdout = sys.stdout, sys.stderr
        if not ray.is_initialized():
            if self.address:  # the cluster's own settings (its token: RAY_AUTH_TOKEN or ~/.ray/auth_token)
                ray.init(address=self.address, log_to_driver=not self.quiet, logging_level="WARNING")
            else:  # on 127.0.0.1 only (else Ray binds the machine's external address), no dashboard; a cluster of its
                # own (address "local"): without an address ray.init joins the cluster of RAY_ADDRESS or the one
                # `ray start` last recorded in the temp folder (someone else's), and refuses the CPU count given
                ray.init(address="local", num_cpus=max(self.workers or 0, os.cpu_count() or 1) if self.gpus else
                         self.workers or os.cpu_count() or 1, _temp_dir=_ray_temp_dir(), include_dashboard=False,
                         _node_ip_address="127.0.0.1", log_to_driver=not self.quiet, logging_level="WARNING")
            self.started = True
        have = ray.cluster_resources()
        if self.gpus and have.get("GPU", 0) < self.gpus:
            raise GensetsError(f"--gpus-per-worker {self.gpus:g}: the Ray cluster has {have.get('GPU', 0):g} GPUs")
        n = self.workers or (int(have["GPU"] / self.gpus) if self.gpus else max(1, int(have.get("CPU", 1))))
        environment = self.worker.ranked(self.args, 0, n)[1]
        # the pins of reproducible: strict, and the test hook, in every worker (on a cluster joined by --address too)
        env = environment.pins() if environment is not None else {}
        for hook in (faults.FAULT, faults.GATE):
            if os.environ.get(hook):
                env[hook] = os.environ[hook]
        if notices.shown():  # the driver prints its notices (the CLI): the workers print theirs
            env[notices.SHOWN] = "stderr"
        # workers at the node's priority, not Ray's 15 steps below it (NICENESS)
        env[NICENESS] = os.environ.get(NICENESS, "0")
        # a GPU worker sees only its share (Ray sets CUDA_VISIBLE_DEVICES); a CPU worker none
        self.cpus = self.cpus or cpu_share(ray.nodes(), self.gpus)
        actor = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=-1, max_task_retries=0)(self.worker)
        self.actors = [actor.options(runtime_env={"env_vars": env}).remote(*self.worker.ranked(self.args, i, n)[0])
                       for i in range(n)]
        self.size = n

    def alive(self) -> int:
        """Workers taking units now (those Ray is restarting are not)."""
        return len(self.actors) - len(self.restarting)

    def _get(self, ref):
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the unit raised: its own error, as in a local build (the CLI
            if isinstance(e.cause, (GensetsError, OSError)):  # says these in one line; anything else is a bug:
                raise e.cause from None  # Ray's error, with the worker's traceback)
            raise

    def check(self, units: list) -> None:
        if units:
            self._start()
            try:
                self._get(self.actors[0].check.remote(units))
            except self.ray.exceptions.RayActorError as e:
                raise GensetsError(f"a Ray worker died while it checked the units' prompts "
                                   f"({str(e).splitlines()[0][:200]}); run the same command again") from None

    def run(self, units: list):
        """Each unit's result, as it finishes: a free worker takes the next unit."""
        if not units:
            return
        self._start()
        ray = self.ray
        todo = list(reversed(units))
        tries = {u.id: 0 for u in units}
        free = list(self.actors)
        running: dict = {}  # ObjectRef -> (actor, unit); unit None: a restarted worker's first answer
        while todo or any(u is not None for _, u in running.values()):
            while todo and free:
                a, u = free.pop(), todo.pop()
                running[a.run.remote(u)] = (a, u)
            ready, _ = ray.wait(list(running), num_returns=1)
            a, u = running.pop(ready[0])
            try:
                result = self._get(ready[0])
            except ray.exceptions.RayActorError as e:  # the worker died: its unit goes to the next free one
                if u is not None:
                    tries[u.id] += 1
                    if tries[u.id] > TASK_RETRIES:
                        raise GensetsError(f"unit {unit_name(u)}: its Ray worker died {tries[u.id]} times "
                                           f"({str(e).splitlines()[0][:200]})") from None
                    self.retried += 1
                    todo.append(u)
                running[a.ping.remote()] = (a, None)  # back in the pool once Ray restarted it
                self.restarting.add(a)
                continue
            self.restarting.discard(a)
            free.append(a)
            if u is not None:
                yield result

    def close(self) -> None:
        if self.ray is None:
            return
        for a in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(a)
        self.actors = []
        if self.started:
            self.ray.shutdown()
        if self.stdout is not None:
            sys.stdout, self.stdout = self.stdout, None
        for name in self.env_before:
            os.environ.pop(name, None)
        self.env_before = {}


def pool(backend: str, args: tuple, *, workers: int | None = None, address: str | None = None, quiet: bool = False,
         gpus_per_worker: float | None = None, cpus_per_worker: int | None = None, worker=UnitWorker):
    """The pool that runs a build's units: ``args`` are :class:`UnitWorker`'s (or ``worker``'s)."""
    if backend == "local":
        return LocalPool(worker(*args))
    if backend == "ray":
        return RayPool(args, workers=workers, address=address, quiet=quiet, gpus_per_worker=gpus_per_worker,
                       cpus_per_worker=cpus_per_worker, worker=worker)
    raise GensetsError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def check_backend(backend: str, workers: int | None, address: str | None, gpus_per_worker: float | None,
                  world: int = 1) -> None:
    """A backend and its Ray options as a build (or an audit) is given them: one line for what does not go together."""
    if backend not in BACKENDS:
        raise GensetsError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend != "ray":
        for flag, value in (("--workers", workers), ("--address", address), ("--gpus-per-worker", gpus_per_worker)):
            if value is not None:
                raise GensetsError(f"{flag} is an option of --backend ray")
    if backend == "ray" and world > 1:
        raise GensetsError("--backend ray starts its own workers: run it as one process, not under accelerate launch")


def embedding_pool(spec: str | None, allow_pickle: bool, *, backend: str = "local", workers: int | None = None,
                   address: str | None = None, gpus_per_worker: float | None = None, quiet: bool = False):
    """Where an audit decodes, hashes and embeds the images its cache lacks (:func:`gensets.audit.features.extract`):
    None for ``local`` (this process, or each process's share under ``accelerate launch``), else a :class:`RayPool` of
    :class:`EmbedWorker` (the embedder ``spec``, None: hashes only), started at the first chunk."""
    check_backend(backend, workers, address, gpus_per_worker, distributed().world)
    if backend == "local":
        return None
    return pool(backend, (spec, allow_pickle), workers=workers, address=address, quiet=quiet,
                gpus_per_worker=gpus_per_worker, worker=EmbedWorker)

