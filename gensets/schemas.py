"""The typed schemas of the records gensets reads (pydantic v2; read through :mod:`gensets.recordio`, which says
why pydantic): what gensets writes, with a bound on every number and no control character in any string.

Each schema says what it checks; a field a later gensets added is optional, so that records written by an earlier
one still read. Fields the readers do not use are typed :data:`Plain` (JSON of bounded numbers and strings without
control characters), never left unchecked.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, RootModel

from .compare import AGGREGATIONS, POPULATIONS, QUANTITIES
from .config import control_char


def _no_control(s: str) -> str:
    bad = control_char(s)  # the one definition of what no string may hold, a config's too (gensets.config)
    if bad:
        raise ValueError(f"a control character ({bad})")
    return s


MAX_COUNT = 1 << 40  # more samples, bytes or images than any shard or dataset has: a corrupt number
MAX_THREADS = 4096  # more threads than any machine gensets builds on has cores
MAX_SECONDS = 1e9  # ~30 years

Text = Annotated[str, Field(max_length=1 << 26), AfterValidator(_no_control)]
Name = Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_no_control)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
Int = Annotated[int, Field(ge=-(1 << 63), le=(1 << 63) - 1)]


def _plain(value):
    """``value`` when it is JSON of bounded numbers and strings (keys too) without control characters; ValueError
    naming where in it otherwise (walked without recursion)."""
    todo = [(value, "")]
    while todo:
        v, at = todo.pop()
        where = f" at {at.lstrip('.')}" if at else ""
        if isinstance(v, str):
            bad = control_char(v)
            if bad:
                raise ValueError(f"a control character ({bad}){where}")
        elif isinstance(v, bool) or v is None:
            pass
        elif isinstance(v, int):
            if not -(1 << 63) <= v < 1 << 63:
                raise ValueError(f"a number out of bounds{where}")
        elif isinstance(v, float):
            if not -1e300 <= v <= 1e300:  # NaN and the infinities fail too
                raise ValueError(f"a number out of bounds ({v}){where}")
        elif isinstance(v, list):
            todo.extend((x, f"{at}[{i}]") for i, x in enumerate(v))
        elif isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str) or control_char(k):
                    raise ValueError(f"a key with a control character ({ascii(k)[:40]}){where}")
                todo.append((x, f"{at}.{k}" if k.isidentifier() else f"{at}[{ascii(k)[:40]}]"))
        else:
            raise ValueError(f"not JSON ({type(v).__name__}){where}")
    return value


# any JSON value of bounded numbers and strings without control characters (a field the readers pass on)
Plain = Annotated[Any, AfterValidator(_plain)]


class Record(BaseModel):
    """A record gensets wrote: strict (no coercion), nothing beyond its fields."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, hide_input_in_errors=True)
    WHAT: ClassVar[str] = "a record"
    MAX_BYTES: ClassVar[int] = 16 << 20


class Open(Record):
    """A record whose further fields are passed on as they are (each still :data:`Plain`)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, Plain] = Field(init=False)


# ------------------------------------------------------------------------------------------ environments
class Cpu(Record):
    machine: Name
    vendor: Name | None = None  # since sqrt_misses
    model: Name
    torch_capability: Name | None
    sqrt_misses: Name | None = None
    pins: dict[Name, Text | None]


class Gpu(Record):
    name: Name
    capability: Name
    cuda: Name | None
    cudnn: Count | None
    driver: Count | None
    cublas_workspace: Text | None


class Environment(Record):
    """An environment record (environments/<id>.json: gensets.determinism.describe)."""

    WHAT: ClassVar[str] = "an environment record"
    MAX_BYTES: ClassVar[int] = 1 << 20
    gensets: Name
    gensets_commit: Name | None
    python: Name
    libraries: dict[Name, Name | None]
    reproducible: Literal["strict", "fast"]
    device: Literal["cpu", "cuda"]
    threads: Annotated[int, Field(ge=1, le=MAX_THREADS)]
    deterministic_algorithms: bool
    cpu: Cpu
    gpu: Gpu | None


# ------------------------------------------------------------------------------------------ manifests
class Skipped(Open):
    path: Text
    reason: Text


class CandidateRow(Open):
    """A row of candidates/manifest.jsonl (a build's committed unit)."""

    WHAT: ClassVar[str] = "a manifest row"
    unit: Name
    shard: Name
    sha256: Name
    n: Count
    nbytes: Count | None = None
    kept: Count | None = None
    skipped: list[Skipped] | None = None
    env: Name | None = None
    rank: Count | None = None
    world: Annotated[int, Field(ge=1, le=1 << 20)] | None = None


class DatasetShard(Open):
    path: Name
    config: Name
    split: Name
    sha256: Name
    n: Count
    nbytes: Count


class EnvironmentUse(Record):
    id: Name | None
    units: Count
    environment: Environment | None


class DatasetManifest(Open):
    """A dataset's manifest.json (gensets finalize)."""

    WHAT: ClassVar[str] = "a dataset manifest.json"
    MAX_BYTES: ClassVar[int] = 256 << 20
    builder: Name | None = None
    build: Name
    counts: dict[Name, Count] = {}
    funnel: dict[Name, dict[Name, Count]] | None = None
    shards: list[DatasetShard]
    environments: list[EnvironmentUse] | None = None
    random_models: list[Name] | None = None


class AnyRecord(RootModel[Plain]):
    """A JSON record of unknown layout (a manifest verify walks): bounded, no control characters."""

    WHAT: ClassVar[str] = "a JSON record"
    MAX_BYTES: ClassVar[int] = 256 << 20


# ------------------------------------------------------------------------------------------ object stores
class Member(Record):
    """Where one sample's members lie in its shard: ``__key__`` and ext -> [offset, size]."""

    model_config = ConfigDict(extra="allow", populate_by_name=False)
    key: Name = Field(alias="__key__")
    __pydantic_extra__: dict[Name, Annotated[list[Count], Field(min_length=2, max_length=2)]] = Field(init=False)


class CommitMarker(Record):
    """A commit marker (candidates/committed/<unit>.json: Workspace.commit)."""

    WHAT: ClassVar[str] = "a commit marker"
    MAX_BYTES: ClassVar[int] = 256 << 20
    row: CandidateRow
    members: list[Member]
    # key -> [its json member's text, its cls member's text]
    meta: dict[Name, Annotated[list[Text], Field(min_length=2, max_length=2)]] | None = None


class Lease(Open):
    """A store's lease object (.gensets-lease.json: Store.lease)."""

    WHAT: ClassVar[str] = "a lease"
    what: Name
    pid: Annotated[int, Field(ge=1, le=1 << 22)]
    host: Name
    lease: Name | None = None  # a lease from before its token
    time: Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]


class ConfigDir(Record):
    """Where a workspace's frozen config's relative paths lead (.config-dir.json: Workspace.record_config_dir)."""

    WHAT: ClassVar[str] = "a workspace's config folder"
    MAX_BYTES: ClassVar[int] = 1 << 16
    config_dir: Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_no_control)]


# ------------------------------------------------------------------------------------------ the cache, servers
class Timing(Record):
    """A timings record (timings/<build>/<unit>.json under the cache: gensets.timings.record_timing)."""

    WHAT: ClassVar[str] = "a timings record"
    MAX_BYTES: ClassVar[int] = 1 << 16
    unit: Name
    images: Count
    generator_seconds: Seconds
    expansion_seconds: Seconds | None = None
    device: Name


class ReviewServer(Record):
    pid: Annotated[int, Field(ge=1, le=1 << 22)]
    url: Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_no_control)]
    started: Count
    release: Name | None = None


class ReviewServers(RootModel[list[ReviewServer]]):
    """A workspace's .review-server.json (the running review servers: gensets.curation.shared)."""

    WHAT: ClassVar[str] = "a review-server record"
    MAX_BYTES: ClassVar[int] = 1 << 16


class TIState(Record):
    """A TI checkpoint's training state (its safetensors metadata ``state``: gensets.models.textual_inversion)."""

    WHAT: ClassVar[str] = "a TI checkpoint's state"
    MAX_BYTES: ClassVar[int] = 64 << 20
    key: Name
    step: Annotated[int, Field(ge=0, le=1 << 24)]
    losses: Annotated[list[float], Field(max_length=1 << 24)]
    clip_losses: Annotated[list[float], Field(max_length=1 << 24)] = []


# ------------------------------------------------------------------------------------------ Label Studio
class UserRef(Open):
    id: Int | Name | None = None
    email: Text | None = None
    username: Text | None = None


class Annotation(Open):
    id: Int | Name | None = None
    completed_by: Int | Name | UserRef | None = None
    was_cancelled: bool | None = None
    created_at: Text | None = None
    updated_at: Text | None = None


class TaskData(Open):
    key: Name


class LabelStudioTask(Open):
    """A task of a Label Studio export (Export -> JSON) of a gensets review queue."""

    WHAT: ClassVar[str] = "a Label Studio task of a gensets export"
    id: Int | Name | None = None
    project: Int | Name | None = None
    data: TaskData
    annotations: list[Annotation] | None = None


# ------------------------------------------------------------------------------------------ published numbers
# gensets/data/<paper>/published.json: every number a paper published that gensets sets beside its own, as a typed
# quantity (gensets.compare: the vocabularies, and the one function that compares)
Arxiv = Annotated[str, Field(pattern=r"^\d{4}\.\d{4,5}(v\d+)?$")]
Value = Annotated[float, Field(ge=-1e12, le=1e12, allow_inf_nan=False)]


class PaperSource(Record):
    """Where a published number is read: the paper (its arXiv id), the place in it, the words it is read from
    (tests/test_published.py finds them in the paper's text) and any further evidence."""

    arxiv: Arxiv
    where: Name  # "abstract", "Table 2", "Figure 5's caption", "Sec. 3"
    quote: Text
    also: list[Text] = []


class ModelRef(Record):
    """The model a published number is of: an exact ``checkpoint`` (``checkpoints``: the ids gensets' specs have
    when they are it, :func:`gensets.compare.checkpoint_id`) or only a ``family`` (compared, never judged)."""

    name: Name
    level: Literal["checkpoint", "family"]
    checkpoints: list[Name] = []


class Precision(Record):
    """How precisely a number is printed: ``exact`` to ``digits`` decimals (of the printed percent, or of the
    mantissa of a number printed as a power of ten), or ``approximate`` ("about 60%")."""

    kind: Literal["exact", "approximate"]
    digits: Count | None = None


class Definition(Record):
    """What a published number is: its quantity (and the gensets protocol whose top-1 it is), its aggregation, the
    images it was measured on, its classes (all, or a subset), how precisely it is printed, its n where the paper
    gives it, its unit, and which of these fields are gensets' reading where the paper leaves them open
    (``assumed``). Every field but ``protocol``, ``n``, ``unit`` and ``assumed`` is required."""

    quantity: Literal[tuple(QUANTITIES)]
    protocol: Name | None = None
    aggregation: Literal[tuple(AGGREGATIONS)]
    population: Literal[tuple(POPULATIONS)]
    classes: Literal["all"] | list[Name]
    precision: Precision
    n: Count | None = None
    unit: Literal["fraction", "percent", "USD", "count"] = "fraction"
    assumed: list[Literal["quantity", "protocol", "aggregation", "population", "classes", "n"]] = []


class PublishedNumber(Definition):
    """One published number: its :class:`Definition`, what it is (for a reader), the model it is of (None: no
    model, e.g. a cost), its value (in ``unit``) and its :class:`PaperSource`."""

    what: Text
    model: ModelRef | None
    value: Value
    source: PaperSource
    note: Text | None = None


class ImageNetDPublished(Record):
    """gensets/data/imagenet_d/published.json: the five headline drops, and the abstract's "up to 60%"."""

    WHAT: ClassVar[str] = "ImageNet-D's published numbers"
    paper: Text
    checked: Text
    numbers: list[PublishedNumber]
    drop_up_to: PublishedNumber


class BorjiVQANumber(PublishedNumber):
    images: Count


class BorjiPublished(Record):
    """gensets/data/borji/published.json: the recognition numbers (Sec. 2) and OFA's VQA accuracy (Sec. 3)."""

    WHAT: ClassVar[str] = "Borji's published numbers"
    paper: Text
    url: Text
    checked: Text
    recognition: list[PublishedNumber]
    vqa: list[BorjiVQANumber]


class WilesNumber(PublishedNumber):
    label: Name
    caption: Text
    target: Name | None


class WilesPublished(Record):
    """gensets/data/failure_modes/published.json: Figure 5's failure rates."""

    WHAT: ClassVar[str] = "Wiles et al.'s published numbers"
    paper: Text
    checked: Text
    figure5: list[WilesNumber]


class GenBenchTable(Open):
    """A table of gensets/data/genbench/published.json: its source, the :class:`Definition` of its numbers (every
    number of its rows is one entry: the definition, the row's model from ``models``, the value), and its rows (as
    the paper prints them)."""

    source: PaperSource
    definition: Definition
    models: dict[Name, ModelRef] | None = None
    rows: list[Plain]


class GenBenchPublished(Record):
    """gensets/data/genbench/published.json: Tables 1-5."""

    WHAT: ClassVar[str] = "GenBench's published numbers"
    MAX_BYTES: ClassVar[int] = 1 << 20
    paper: Text
    note: Text
    tables: dict[Literal["1", "2", "3", "4", "5"], GenBenchTable]


__all__ = ["AnyRecord", "BorjiPublished", "CandidateRow", "CommitMarker", "DatasetManifest", "Definition", "Environment",
           "GenBenchPublished", "ImageNetDPublished", "LabelStudioTask", "Lease", "PublishedNumber", "ReviewServers",
           "TIState", "Timing", "WilesPublished"]
