"""Review decisions in and out: CSV and Label Studio.

CSV: one row per sample, ``key,status,label,reviewer,note`` (status pending / accepted / rejected /
relabeled; ``label`` is the new class of a relabel; the note ``several objects`` is the page's flag).
A cell that a spreadsheet would run as a formula (starting with ``= + - @``, or a quote) is written with
a leading ``'``, which import takes off again: a round trip is lossless.

Label Studio: ``export`` writes a JSON list of tasks whose ``data.image`` is the image itself as a
``data:`` URI (base64: self-contained, but ~10 KB a small image), or a URL of ``gensets review serve``'s image
route, or a ``/data/local-files/?d=`` path of Label Studio's local-files storage (:class:`Images`: a few hundred
bytes a task), whose ``data.comment`` is the review's comment on it (its note but the flag), and whose ``predictions`` carry each surrogate's top-1 ImageNet class as a pre-annotation, one per surrogate
and, last, one holding every surrogate's line (model version :data:`ALL_SURROGATES`: Label Studio shows only
the last imported model version's prediction while annotating). The labeling config that matches it is
written beside it (``<file>.label_config.xml``): choices ``verdict`` (accept / reject / relabel), ``class``
(the new class of a relabel) and ``flags`` (several objects).

``import`` reads Label Studio 1.23's JSON export of such a project (it writes it on one line, so errors name
the task: its id and key). Every annotation that was not cancelled becomes one decision by its annotator:
  * who: the snapshot export (``POST /api/projects/{id}/exports/`` with ``{"serialization_options":
    {"annotations__completed_by": {"only_id": false}}}``; 1.23 ignores the option at the top level) gives each
    annotator's email; the UI's Export -> JSON gives only a numeric user id,
    mapped through ``users`` (``--users``: the JSON of ``GET /api/users``, or ``{"1": "a@b.c"}``), else kept
    as ``label-studio:<id>`` (and said so). Once an import learns whom an id names (``--users``, or the
    snapshot), ``label-studio:<id>`` is an alias of that reviewer in the workspace (``reviewer_aliases``): the
    decisions logged under it are theirs, and later imports name the id without ``--users``;
  * when: the annotation's ``updated_at`` (else ``created_at``) is the decision's time;
  * re-imports: each annotation is remembered by (project, annotation id, ``updated_at``) in
    ``label_studio_annotations`` (append-only). The same annotation again changes nothing; an edited one (another
    ``updated_at``) is a new decision; an annotation of the export's project that is no longer there (deleted,
    or now skipped) is withdrawn by a decision back to ``pending`` for its reviewer (note :data:`WITHDRAWN`),
    unless that reviewer decided the image since. Nothing is ever deleted from the log;
  * one project of one server (:func:`_bind`): an export's id is in every task (``data.gensets_export``) and
    recorded with the project it is for (``--project``, else its first import's); tasks of another project, of no
    export of this workspace, or of another server (a task id read before that is another task, or no task read
    before) are refused, nothing changed. Tasks a storage Sync made (an image, no key) are skipped, said so;
  * one annotator twice on a task (Label Studio allows it): their latest annotation by ``updated_at`` (said so);
  * several annotators on a task: double review's rules (:func:`review.verdicts`; disputed images held back),
    so the workspace must be in double review, or the import is asked to put it there (``double=True``).

``export --status disputed`` (double review) writes the images whose reviewers disagree, each pending, with their
decisions in a ``disagreement`` column (CSV; ignored on import) or task field the labeling config shows (Label
Studio), for a second opinion: imported back, its decisions adjudicate.

The export is read a task at a time (:func:`iter_json_list`: memory of one task, not of the file). Imports check
every row first and name the first bad one (``file:line``, or the task); then all decisions are written in one
transaction (all or none). A row equal to its reviewer's latest decision is skipped, so re-importing is harmless.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from .. import recordio
from ..db import transaction
from ..errors import DataError, GensetsError, did_you_mean
from ..labels.imagenet import imagenet_names
from ..output import atomic_open
from ..safety import csv_cell, csv_value, no_symlink, writable_inside
from ..shards import read_at
from ..workspace import Workspace
from . import queue, review, state, team
from .queue import DISPUTED, FLAG, comment_of, has_flag, with_flag
from .review_state import MIME
from .reviewers import images_link

FORMATS = ("csv", "label-studio")
CSV_COLUMNS = ("key", "status", "label", "reviewer", "note")
DISAGREEMENT = "disagreement"  # --status disputed: the reviewers' decisions, for a second opinion (read, ignored)
ALL_SURROGATES = "gensets: all surrogates"  # the model version of the combined prediction
WITHDRAWN = "withdrawn: no longer in Label Studio"  # the note of a decision that withdraws a deleted annotation's
EXPORT_FIELD = "gensets_export"  # the task's data field that holds the id of the export that made it
IMAGES = ("base64", "url", "local-files")  # how exported tasks hold their images (:class:`Images`)
@dataclass
class Decision:
    key: str
    status: str
    label: str | None
    reviewer: str
    note: str | None
    where: str  # file:line, or file: task <id> (<key>)
    time: dt.datetime | None = None  # when it was made, if the file says (naive UTC); else the import's clock
    source: tuple[str, str] | None = None  # Label Studio (project, annotation id)
    decided: dt.datetime | None = None  # the time of the logged decision an annotation stands for, if not its own


def _queue(con, status: str | None = None) -> list[dict]:
    """The rows an export writes: every image of ``status`` (None: all); ``disputed``: double review's disputes,
    each pending for a second opinion, with its reviewers' decisions in ``disagreement`` (:func:`team.disputes`)."""
    if status != DISPUTED:
        return review.list_queue(con, status=status)
    if not review.is_double(con):
        raise GensetsError("--status disputed is double review's: this workspace is in single review, where the "
                           "latest decision counts (gensets review mode WORKSPACE)")
    disputes = team.disputes(con)
    rows = [r for r in review.list_queue(con, status=None) if r["key"] in disputes]
    for r in rows:
        r.update(status="pending", reviewer=None, note=None, review_label=r["label"],
                 **{DISAGREEMENT: team.disagreement(disputes[r["key"]])})
    return rows


# ---------------------------------------------------------------------------------------- export
def export_csv(con, path: Path, status: str | None = None) -> int:
    """The rows of ``status`` (:func:`_queue`) as CSV; ``disputed`` adds the column :data:`DISAGREEMENT` (each
    row pending: a second opinion fills in status, label, reviewer and note, and the file imports as it is)."""
    rows = _queue(con, status)
    extra = (DISAGREEMENT,) if status == DISPUTED else ()
    with atomic_open(no_symlink(path, "the export file")) as raw:  # as the Label Studio export: whole or not at all
        f = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS + extra)
        for r in rows:
            label = r["review_label"] if r["status"] == "relabeled" else ""
            w.writerow([csv_cell(c) for c in (r["key"], r["status"], label, r["reviewer"] or "", r["note"] or "",
                                              *(r[x] for x in extra))])
        f.detach()
    return len(rows)


def label_config(class_names: list[str], disputed: bool = False) -> str:
    """The Label Studio labeling config that matches the exported tasks. The ``class`` choices show, and are
    required, only when the verdict is relabel (Label Studio checks a required tag only while it is visible), so a
    relabel without its class is refused while annotating, not only at import. ``disputed``: the tasks of
    double review's disputes, each showing its reviewers' decisions (``$disagreement``) for a second opinion."""
    classes = "\n".join(f"      <Choice value={quoteattr(c)}/>" for c in class_names)
    dispute = '\n  <Text name="disagreement" value="$disagreement"/>' if disputed else ""
    return f"""<View>
  <Header value="$class · $config: $nuisance"/>{dispute}
  <Image name="image" value="$image" zoom="true"/>
  <Text name="prompt" value="$prompt"/>
  <Choices name="verdict" toName="image" choice="single-radio" showInline="true" required="true">
    <Choice value="accept" hotkey="a"/>
    <Choice value="reject" hotkey="r"/>
    <Choice value="relabel" hotkey="l"/>
  </Choices>
  <View visibleWhen="choice-selected" whenTagName="verdict" whenChoiceValue="relabel">
    <Header value="new class"/>
  </View>
  <Choices name="class" toName="image" choice="single" showInline="true" required="true"
           requiredMessage="relabel: pick the new class" visibleWhen="choice-selected" whenTagName="verdict"
           whenChoiceValue="relabel">
{classes}
  </Choices>
  <Choices name="flags" toName="image" choice="multiple">
    <Choice value={quoteattr(FLAG)} hotkey="s"/>
  </Choices>
  <Header value="surrogates' top-1 (pre-annotation)"/>
  <TextArea name="surrogate_top1" toName="image" editable="false" rows="3"/>
</View>
"""


@dataclass(frozen=True)
class Images:
    """How exported tasks hold their images. ``base64``: the image itself as a ``data:`` URI (self-contained; ~10 KB
    per 64 px image, gigabytes for 100k full-size ones). ``url``: ``<base_url>/image/<key>``, the route of
    ``gensets review serve`` (so Label Studio's browser loads each image from the review server). ``local-files``:
    each image written to ``<root>/gensets-images/<key>.<ext>`` and referenced as
    ``/data/local-files/?d=gensets-images/<key>.<ext>``, what Label Studio serves with
    ``LOCAL_FILES_SERVING_ENABLED=true`` and ``LOCAL_FILES_DOCUMENT_ROOT=<root>`` (and a local storage on that
    folder). A task is then a few hundred bytes: 10k tasks in a few MB."""
    mode: str = "base64"
    base_url: str | None = None
    root: Path | None = None
    token: str | None = None  # url: the images-only link's token (reviewers.images_link), in every address

    FOLDER = "gensets-images"

    def __post_init__(self):
        if self.mode not in IMAGES:
            raise GensetsError(f"--images must be one of {', '.join(IMAGES)}, got {self.mode!r}")
        if self.mode == "url" and not re.match(r"https?://[^/\s]+", self.base_url or ""):
            raise GensetsError("--images url needs --base-url http(s)://HOST[:PORT] (where `gensets review serve` "
                               f"answers), got {self.base_url!r}")
        if self.mode == "local-files" and (self.root is None or not self.root.is_dir()):
            raise GensetsError(f"--images local-files needs --root DIR, an existing folder (Label Studio's "
                               f"LOCAL_FILES_DOCUMENT_ROOT), got {str(self.root) if self.root else None!r}")

    def reference(self, key: str, ext: str, read) -> str:
        """The task's ``data.image`` for an image; ``read()`` gives its bytes."""
        from urllib.parse import quote

        if self.mode == "url":
            link = f"?token={quote(self.token, safe='')}" if self.token else ""
            return f"{self.base_url.rstrip('/')}/image/{quote(key, safe='')}{link}"
        if self.mode == "local-files":
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", key):
                raise GensetsError(f"sample key {key[:100]!r} is not a plain file name: export it with --images url")
            if ext not in MIME:
                raise DataError(f"sample {key!r}: image type {str(ext)[:20]!r} is not one Label Studio shows")
            name = f"{self.FOLDER}/{key}.{ext}"
            path = writable_inside(self.root, name)  # no symlink under --root written through or replaced
            path.parent.mkdir(exist_ok=True)
            with atomic_open(path) as f:
                f.write(read())
            return f"/data/local-files/?d={quote(name)}"
        return f"data:{MIME[ext]};base64,{base64.b64encode(read()).decode()}"


def project_of(url: str) -> tuple[str, str]:
    """``(server, project id)`` of a Label Studio project's address (``http(s)://HOST[:PORT]/projects/ID``, as the
    browser shows it, anything after the id ignored)."""
    m = re.fullmatch(r"(https?://[^/\s?#]+)/projects/(\d{1,18})(?:[/?#]\S*)?", str(url).strip())
    if not m:
        raise GensetsError("--project must be the Label Studio project's address, http(s)://HOST[:PORT]/projects/ID, "
                           f"got {str(url)[:100]!r}")
    return m.group(1).lower(), m.group(2)


def export_label_studio(ws, con, path: Path, class_names: list[str], status: str | None = None,
                        images: Images = Images(), project: str | None = None) -> int:
    """Write the tasks (and their labeling config); the export is recorded in ``label_studio_exports`` under a new
    id that every task carries (``data.gensets_export``), with the project (``project``: its address) the tasks
    are for, else the project of their first import: an import of them from another project is refused."""
    import secrets

    server, pid = project_of(project) if project else (None, None)
    export_id = secrets.token_hex(8)
    if images.mode == "url" and images.token is None:  # the review server asks every request for a link
        from dataclasses import replace

        images = replace(images, token=images_link(con))

    rows = _queue(con, status)
    keys = [r["key"] for r in rows]
    index = state.images_of(con, keys, ws.candidate)
    names = imagenet_names()
    top1 = {}
    for key, model, idx, score in con.execute(
            "SELECT key, model, class_index, score FROM surrogate_predictions "
            "WHERE rank = 1 AND list_contains(?, key) ORDER BY key, model", [keys]).fetchall():
        top1.setdefault(key, []).append((model, names[idx] if 0 <= idx < len(names) else str(idx), score))

    def tasks():
        for r in rows:
            spath, offset, size, ext = index[r["key"]]
            image = images.reference(r["key"], ext, lambda: read_at(spath, offset, size, r["key"]))  # noqa: B023
            yield label_studio_task(r, image, top1.get(r["key"], []), each=images.mode == "base64",
                                    export=export_id)

    config = no_symlink(f"{path}.label_config.xml", "the labeling config")  # before the tasks are written
    n = write_json_list(path, tasks(), indent=1 if images.mode == "base64" else None)
    with atomic_open(config) as f:
        f.write(label_config(class_names, disputed=status == DISPUTED).encode("utf-8"))
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    con.execute("INSERT INTO label_studio_exports VALUES (?, ?, ?, ?, ?, ?)",
                [export_id, now, n, images.mode, pid, server])
    return n


def label_studio_task(r: dict, image: str, preds: list[tuple[str, str, float]], each: bool = True,
                      export: str | None = None) -> dict:
    """One queue row as a Label Studio task: ``image`` (a data: URI or a URL), the row's fields, and each
    surrogate's top-1 ``(model, class name, score)`` as a prediction (unless not ``each``), then one with all of
    them (the one Label Studio shows). An export that references its images leaves out the per-surrogate ones
    (the same lines, a third of a task's bytes): 10k tasks stay under 10 MB. ``export``: the export's id
    (``data.gensets_export``), which binds the tasks to the project they are imported into."""
    def prediction(version, lines, score=None):
        return {"model_version": version, **({"score": score} if score is not None else {}),
                "result": [{"from_name": "surrogate_top1", "to_name": "image", "type": "textarea",
                            "value": {"text": lines}}]}

    lines = [f"{model}: {name} ({score:.3f})" for model, name, score in preds]
    return {
        "data": {"image": image, "key": r["key"], "class": r["label"], "config": r["config"],
                 "nuisance": r["nuisance"], "prompt": r["prompt"], "status": r["status"],
                 "comment": comment_of(r.get("note")), **({EXPORT_FIELD: export} if export else {}),
                 **({DISAGREEMENT: r[DISAGREEMENT]} if DISAGREEMENT in r else {})},
        "predictions": [prediction(model, [line], round(float(score), 6))
                        for (model, _, score), line in zip(preds, lines, strict=True) if each]
                       + ([prediction(ALL_SURROGATES, lines)] if lines else []),
    }


def write_json_list(path: Path, items, indent: int | None = 1) -> int:
    """``json.dumps(list(items), indent=1, ensure_ascii=False)`` and a newline, byte for byte, written one item at a
    time (a Label Studio export holds one image in memory, not all), into a temporary file renamed at the end.
    ``indent=None``: each item compact on a line of its own (an export at scale). Returns the number of items."""
    n = 0
    compact = {"separators": (",", ":")} if indent is None else {"indent": indent}
    # the temporary sibling is opened O_NOFOLLOW (a symlink placed there is refused); a symlink at ``path`` is
    # refused, not replaced
    with atomic_open(no_symlink(path, "the export file")) as raw:
        f = io.TextIOWrapper(raw, encoding="utf-8")
        for item in items:
            text = json.dumps(item, ensure_ascii=False, **compact)  # newlines in strings are escaped
            f.write(("[\n" if n == 0 else ",\n") + "\n".join(" " + line for line in text.split("\n")))
            n += 1
        f.write("\n]\n" if n else "[]\n")
        f.detach()  # flushed into raw, which atomic_open closes
    return n


# ---------------------------------------------------------------------------------------- streamed JSON
CHUNK = 1 << 16  # characters read at a time
MAX_ITEM = 1 << 28  # a list item (a task) longer than this is refused instead of read whole
_SPACE = re.compile(r"[ \t\n\r]*")


class _JsonStream:
    """A JSON text read a buffer at a time: whitespace skipped and values decoded at the buffer's start with
    ``json.JSONDecoder.raw_decode``; a value cut by the buffer's end is decoded again once more text is read
    (the read doubling, so a long value costs a few passes, not one per chunk). Only the unread rest of the
    buffer is kept: memory is one value and a chunk, not the file."""

    def __init__(self, f, path: Path):
        self.f, self.path, self.buf, self.pos, self.line, self.eof = f, path, "", 0, 1, False
        self.decoder = json.JSONDecoder()

    def where(self, pos: int | None = None) -> str:
        return f"{self.path}:{self.line + self.buf.count(chr(10), 0, self.pos if pos is None else pos)}"

    def more(self, n: int = CHUNK) -> bool:
        """Read up to ``n`` more characters; False at the end of the file."""
        self.line += self.buf.count("\n", 0, self.pos)
        self.buf, self.pos = self.buf[self.pos:], 0
        try:
            text = self.f.read(n)
        except UnicodeDecodeError as e:
            raise DataError(f"{self.where(len(self.buf))}: not UTF-8 text ({e.reason})") from None
        self.eof = not text
        self.buf += text
        return bool(text)

    def peek(self) -> str:
        """The next character after whitespace ('' at the end of the file)."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def value(self):
        n = CHUNK
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof or isinstance(value, (dict, list, str)):
                    self.pos = end  # a number or literal at the buffer's end may go on in the next read
                    return value
            except json.JSONDecodeError as e:
                if self.eof or len(self.buf) - self.pos > MAX_ITEM:
                    why = e.msg if self.eof else f"an item of more than {MAX_ITEM >> 20} MiB"
                    raise DataError(f"{self.where(e.pos)}: not valid JSON ({why})") from None
            except (ValueError, RecursionError) as e:  # a number of 4300+ digits, nesting deeper than Python recurses
                raise DataError(f"{self.where()}: not valid JSON "
                                f"({' '.join(str(e).split())[:200] or 'nested too deeply'})") from None
            self.more(n)
            n *= 2


def iter_json_list(path: Path, what: str = "a JSON list"):
    """The items of the JSON list that ``path`` holds, one at a time (:class:`_JsonStream`): a Label Studio export
    of 100k tasks with their images is read in the memory of one task. A syntax error is raised when the reader
    gets to it, so items before it have been yielded. GensetsError (``file:line``) for anything not a list."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        s = _JsonStream(f, path)
        c = s.peek()
        if c != "[":
            if not c:
                raise DataError(f"{s.where()}: not valid JSON (an empty file)")
            raise GensetsError(f"{s.where()}: expected {what}")
        s.pos += 1
        if s.peek() == "]":
            s.pos += 1
        else:
            while True:
                yield s.value()
                c = s.peek()
                s.pos += 1
                if c == "]":
                    break
                if c != ",":
                    raise DataError(f"{s.where(s.pos - 1)}: not valid JSON ("
                                       + ("expecting ',' or ']'" if c else "the list is not closed") + ")")
        if s.peek():
            raise DataError(f"{s.where()}: not valid JSON (extra data after the list)")


# ---------------------------------------------------------------------------------------- import
def _text(path: Path) -> str:
    """The file as UTF-8 text (a BOM dropped); GensetsError naming the line of the first byte that is not."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text ({e.reason})") from None


def _read_csv(path: Path, default_reviewer: str) -> list[Decision]:
    reader = csv.reader(io.StringIO(_text(path), newline=""))
    try:
        return _csv_rows(path, reader, default_reviewer)
    except csv.Error as e:  # e.g. a cell over the csv module's field size limit
        raise DataError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None


def _csv_rows(path: Path, reader, default_reviewer: str) -> list[Decision]:
    out = []
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise DataError(f"{path}:1: empty file (expected the header {','.join(CSV_COLUMNS)})") from None
    unknown = [h for h in header if h not in (*CSV_COLUMNS, DISAGREEMENT)]
    missing = [h for h in ("key", "status") if h not in header]
    if unknown or missing:
        raise GensetsError(f"{path}:1: header must hold key,status[,label,reviewer,note]; "
                           + (f"unknown column '{unknown[0]}'" if unknown else f"missing '{missing[0]}'"))
    line = reader.line_num
    for row in reader:
        where, line = f"{path}:{line + 1}", reader.line_num
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise GensetsError(f"{where}: {len(row)} fields, the header has {len(header)}")
        d = {h: csv_value(c.strip()) for h, c in zip(header, row, strict=True)}
        status = review.ACTIONS.get(d["status"].lower(), d["status"].lower())
        out.append(Decision(d["key"], status, d.get("label") or None, d.get("reviewer") or default_reviewer,
                            d.get("note") or None, where))
    return out


def _load_json(path: Path):
    """The whole file as JSON; GensetsError (file:line) if it is not."""
    return recordio.loads(_text(path), str(path))  # bounded: size, depth (gensets.recordio); a DataError (exit 1)


def read_users(path: Path) -> dict[str, str]:
    """Label Studio user id -> reviewer name, from ``--users``: the JSON list ``GET /api/users`` returns
    (``[{"id": 1, "email": ...}, ...]``) or an object ``{"1": "a@b.c"}``."""
    if not path.is_file():
        raise GensetsError(f"{path}: no such file")
    users = _load_json(path)
    if isinstance(users, list):
        users = {u.get("id"): u.get("email") or u.get("username") for u in users if isinstance(u, dict)}
    if not isinstance(users, dict) or not all(isinstance(v, str) and v for v in users.values()):
        raise GensetsError(f"{path}: expected Label Studio's user list (GET /api/users) or {{\"<id>\": \"<name>\"}}")
    return {str(k): v for k, v in users.items()}


def _user_id(v) -> bool:
    return isinstance(v, (int, str)) and not isinstance(v, bool) and str(v).isdecimal()


def _annotator(a: dict, default: str, users: dict[str, str], unknown: set[str], learned: dict[str, str]) -> str:
    """Who made an annotation: the snapshot's email, or the numeric id named by ``users``, else
    ``label-studio:<id>``. What an id turned out to name goes into ``learned`` (``label-studio:<id>`` -> name): the
    alias that makes an earlier import under the bare id the same reviewer."""
    who = a.get("completed_by")
    if isinstance(who, dict):  # the snapshot export with emails
        uid = who.get("id")
        who = who.get("email") or who.get("username") or uid
        if not isinstance(who, (int, str)) or isinstance(who, bool) or who == "":
            return default
        if isinstance(who, str) and not who.isdecimal():
            if _user_id(uid):
                learned[f"label-studio:{uid}"] = who
            return who
    if who is None or who == "":
        return default
    if str(who) in users:
        learned[f"label-studio:{who}"] = users[str(who)]
        return users[str(who)]
    unknown.add(f"label-studio:{who}")
    return f"label-studio:{who}"


def _when(a: dict, key: str) -> dt.datetime:
    """An annotation's ``updated_at`` / ``created_at`` (ISO 8601, as Label Studio writes it); earliest if absent."""
    try:
        t = dt.datetime.fromisoformat(str(a.get(key)))
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _made(a: dict) -> dt.datetime | None:
    """When Label Studio says an annotation was last made (``updated_at``, else ``created_at``), as the log stores
    times (naive UTC); None if it says neither."""
    for key in ("updated_at", "created_at"):
        t = _when(a, key)
        if t.year > 1:
            return t.astimezone(dt.UTC).replace(tzinfo=None)
    return None


def _latest_order(a: dict) -> tuple:
    """Orders one annotator's annotations of a task: by ``updated_at``, then by annotation id."""
    aid = a.get("id")
    return _when(a, "updated_at"), aid if isinstance(aid, int) and not isinstance(aid, bool) else -1


def _choices(a: dict, where: str) -> dict[str, list]:
    """from_name -> chosen values of an annotation's ``choices`` results."""
    results = a.get("result") if a.get("result") is not None else []
    if not isinstance(results, list):
        raise GensetsError(f"{where}: annotation 'result' is not a list")
    out = {}
    for res in results:
        if isinstance(res, dict) and res.get("type") == "choices":
            if not isinstance(res.get("from_name"), str):
                raise GensetsError(f"{where}: a choices result's 'from_name' is not a name, got "
                                   f"{type(res.get('from_name')).__name__}")
            value = res.get("value")
            chosen = value.get("choices") if isinstance(value, dict) else None
            if not isinstance(chosen, list) or not all(isinstance(c, str) for c in chosen):
                raise GensetsError(f"{where}: the {str(res.get('from_name'))[:40]!r} choices are not a list of strings")
            out[res.get("from_name")] = chosen
    return out


@dataclass
class _Export:
    """What a Label Studio export said: its decisions, who its user ids are, which projects it covers."""
    decisions: list[Decision]
    aliases: dict[str, str]  # label-studio:<id> -> name
    projects: set[str]  # withdrawals are looked for in these only
    tasks: dict | None = None  # (project, task id) -> (key, created_at, where): which server's tasks these are
    exports: dict | None = None  # the gensets export ids its tasks carry ('' for none) -> the first task's where


def _read_label_studio(path: Path, default_reviewer: str, users: dict[str, str] | None = None,
                       notes: list[str] | None = None) -> _Export:
    users, notes = users or {}, notes if notes is not None else []
    read = _Export([], {}, set(), {}, {})
    unknown, superseded, synced = set(), [], [0, 0]
    for i, task in enumerate(iter_json_list(path, "a JSON list of tasks (Label Studio: Export -> JSON)"), start=1):
        tid = task.get("id") if isinstance(task, dict) else None
        name = f"task {tid}" if isinstance(tid, (int, str)) and str(tid).isdecimal() else f"task #{i} of the list"
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            if isinstance(task, dict) and "key" in task and "annotations" not in task:  # JSON_MIN: flat rows
                raise GensetsError(f"{path}: {name}: a JSON_MIN export (flat rows, no annotators); export JSON, "
                                   "or the snapshot with emails, instead")
            if isinstance(data, dict) and "key" not in data and isinstance(data.get("image"), str):
                # a storage Sync's task: one per image file, not one of gensets' tasks (no key, no predictions)
                annotations = task.get("annotations")
                synced[0] += 1
                synced[1] += isinstance(annotations, list) and any(
                    isinstance(a, dict) and not a.get("was_cancelled") for a in annotations)
                continue
            raise GensetsError(f"{path}: {name}: no data.key (was it exported by gensets?)")
        where = f"{path}: {name} ({data['key'][:100]})"
        recordio.check(task, "LabelStudioTask", where)  # the task's shape, its strings, its numbers
        project = str(task["project"]) if _user_id(task.get("project")) else None
        if project:
            read.projects.add(project)
            if _user_id(tid):
                created = task.get("created_at")
                read.tasks.setdefault((project, str(tid)), (data["key"], str(created)[:40] if created else "", where))
        export = data.get(EXPORT_FIELD)
        read.exports.setdefault(export if isinstance(export, str) else "", where)
        annotations = task.get("annotations") if task.get("annotations") is not None else []
        if not isinstance(annotations, list) or not all(isinstance(a, dict) for a in annotations):
            raise GensetsError(f"{where}: 'annotations' is not a list of annotations")
        latest: dict[str, dict] = {}  # annotator -> their latest annotation of the task (by updated_at)
        first: dict[str, dt.datetime] = {}  # annotator -> when they first annotated it
        for a in annotations:
            if a.get("was_cancelled"):
                continue
            who = _annotator(a, default_reviewer, users, unknown, read.aliases)
            first[who] = min(first.get(who, _when(a, "created_at")), _when(a, "created_at"))
            if who in latest:
                superseded.append(f"{name} ({data['key'][:100]}) by {who}")
                if _latest_order(a) < _latest_order(latest[who]):
                    continue
            latest[who] = a
        # in the order the annotators first annotated: double review's first two reviewers
        for who, a in sorted(latest.items(), key=lambda wa: first[wa[0]]):
            read.decisions.append(_decision(a, data["key"], who, where, project))
    if synced[0]:
        notes.append(f"{synced[0]} task(s) without data.key skipped ({synced[1]} annotated): tasks a storage Sync made "
                     "(one per image file, not gensets' tasks); annotate the imported tasks, and do not Sync the "
                     "local storage")
    if superseded:
        notes.append(f"{len(superseded)} annotator(s) annotated a task twice; their latest annotation "
                     f"(updated_at) was taken: {'; '.join(superseded[:5])}" + ("; ..." if len(superseded) > 5 else ""))
    unknown -= set(read.aliases)
    if unknown:
        notes.append(f"annotators known only by their Label Studio id ({', '.join(sorted(unknown))}): pass --users "
                     "(the JSON of GET /api/users) or import the snapshot export with emails to name them")
    return read


def _decision(a: dict, key: str, who: str, where: str, project: str | None) -> Decision:
    """One annotation as a decision, made when Label Studio says; its source (project, annotation id) when both are
    known, so that a re-import sees it edited (another ``updated_at``) or deleted (absent)."""
    choices = _choices(a, where)
    verdict = (choices.get("verdict") or [None])[0]
    if verdict not in review.ACTIONS:
        raise GensetsError(f"{where}: annotation by {who} without a verdict (accept, reject or relabel), "
                           f"got {str(verdict)[:40]!r}")
    label = (choices.get("class") or [None])[0] if verdict == "relabel" else None
    note = FLAG if FLAG in (choices.get("flags") or []) else None
    aid = a.get("id")
    source = (project, str(aid)) if project and _user_id(aid) else None
    return Decision(key, review.ACTIONS[verdict], label, who, note, where, _made(a), source)


def _latest(con, keys: list[str]) -> dict[tuple[str, str], tuple]:
    """(key, reviewer) -> that reviewer's latest decision ``(status, label, note, time)``, aliases resolved."""
    return {(k, r): (s, lb, n, t) for k, r, s, lb, n, t in con.execute(
        "SELECT key, reviewer, status, label, note, time FROM ("
        + queue.LATEST.format(where="WHERE list_contains(?, key)") + ")", [keys]).fetchall()}


def _imported(con) -> dict[tuple[str, str], tuple]:
    """(project, annotation) -> the last import's row of it ``(key, reviewer, updated_at, decided, withdrawn)``."""
    return {(p, a): rest for p, a, *rest in con.execute(
        "SELECT project, annotation, arg_max(key, t.rowid), arg_max(coalesce(al.reviewer, t.reviewer), t.rowid), "
        "arg_max_null(updated_at, t.rowid), arg_max_null(decided, t.rowid), arg_max(withdrawn, t.rowid) "
        "FROM label_studio_annotations t LEFT JOIN reviewer_aliases al ON al.alias = t.reviewer "
        "GROUP BY project, annotation").fetchall()}


def _validate(con, decisions: list[Decision], class_names: list[str],
              notes: list[str] | None = None) -> tuple[list[Decision], list[Decision]]:
    """Check every decision; returns those that change something, and the Label Studio annotations to remember as
    imported (:func:`_remember`). Raises on the first bad one.

    A Label Studio annotation already imported with the same ``updated_at`` changes nothing; one with another
    (edited in Label Studio) is a new decision whatever it says; one never imported is a decision unless it equals
    its reviewer's latest (an import from before annotations were remembered). A relabel to the image's own class
    is an acceptance (said in ``notes``): it agrees with another reviewer's accept."""
    keys = [d.key for d in decisions]
    labels = dict(con.execute("SELECT s.key, s.label FROM reviews JOIN samples s USING (key) "
                              "WHERE list_contains(?, key)", [keys]).fetchall())
    latest, imported = _latest(con, keys), _imported(con)
    valid, seen, todo, remember, own = set(class_names), {}, [], [], []
    for d in decisions:
        if d.key not in labels:
            raise GensetsError(f"{d.where}: sample '{d.key}' is not in the review queue")
        if d.status not in review.STATUSES:
            raise GensetsError(f"{d.where}: unknown status '{d.status}' "
                               f"(known: {', '.join(review.STATUSES)})")
        if d.status == "relabeled":
            if not d.label:
                raise GensetsError(f"{d.where}: relabeled needs the new class in 'label'")
            if d.label not in valid:
                raise GensetsError(f"{d.where}: unknown class '{d.label}'{did_you_mean(d.label, valid)}")
            if d.label == labels[d.key]:  # "relabel" to the class it has: nothing changes, it is accepted
                d.status = "accepted"
                own.append(d.where)
        elif d.label and d.label != labels[d.key]:
            raise GensetsError(f"{d.where}: label '{d.label}' differs from the sample's class "
                               f"'{labels[d.key]}': use status relabeled")
        try:
            review.check_reviewer(d.reviewer)
        except GensetsError as e:
            raise GensetsError(f"{d.where}: {e}") from None
        if (d.key, d.reviewer) in seen:
            raise GensetsError(f"{d.where}: sample '{d.key}' by reviewer '{d.reviewer}' again "
                               f"(first at {seen[d.key, d.reviewer]})")
        seen[d.key, d.reviewer] = d.where
        d.label = d.label if d.status == "relabeled" else None
        d.note = with_flag(d.note, True) if has_flag(d.note) else d.note
        if d.status == "pending":
            continue  # nothing decided
        before, known = latest.get((d.key, d.reviewer)), imported.get(d.source)
        if known and not known[4] and known[2] == d.time:
            continue  # this annotation, as it was imported
        if not known and before and before[0] == d.status and (before[1] if d.status == "relabeled" else None) \
                == d.label and (before[2] or None) == d.note:
            if d.source:
                remember.append(Decision(**{**vars(d), "time": d.time, "decided": before[3]}))
            continue  # the same decision again
        todo.append(d)
        if d.source:
            remember.append(d)
    if own and notes is not None:
        notes.append(f"{len(own)} relabel(s) to the image's own class taken as accept: {'; '.join(own[:5])}"
                     + ("; ..." if len(own) > 5 else ""))
    return todo, remember


def _withdrawals(con, read: _Export, path: Path) -> list[Decision]:
    """A decision back to pending for each imported annotation of the export's projects that Label Studio no longer
    has (deleted, or now skipped) while its reviewer has no other annotation of that task there, provided that
    reviewer's latest decision is still the one it made (not one made since, e.g. on the page)."""
    present = {(p, d.key, d.reviewer) for d in read.decisions if d.source for p in [d.source[0]]}
    gone: dict[tuple[str, str], list] = {}
    for (project, annotation), (key, reviewer, _, decided, withdrawn) in _imported(con).items():
        if project in read.projects and not withdrawn and (project, key, reviewer) not in present:
            gone.setdefault((key, reviewer), []).append((project, annotation, decided))
    latest = _latest(con, sorted({k for k, _ in gone}))
    out = []
    for (key, reviewer), sources in sorted(gone.items()):
        now = latest.get((key, reviewer))
        if now is None or now[0] == "pending" or now[3] not in {decided for *_, decided in sources}:
            continue
        for project, annotation, _ in sources:
            out.append(Decision(key, "pending", None, reviewer, WITHDRAWN,
                                f"{path}: annotation {annotation} of project {project}", None, (project, annotation)))
    return out


REFUSED = "refused, nothing changed"


def _bind(con, read: _Export, path: Path) -> None:
    """Refuse an export of another project or another Label Studio server; bind this one's tasks to its project.

    * project: the tasks of an export (their ``data.gensets_export``; '' for tasks exported before exports had ids)
      are for the project its ``--project`` named, else the project of their first import;
    * server: a task id of that project read before must be the same task (key and ``created_at``), and a file of
      a project read before must share a task with it: another server's project of the same id holds other tasks
      (its withdrawals would take back this server's decisions, its user ids name other people)."""
    if read.exports is None:  # not a Label Studio export (CSV)
        return
    if len(read.projects) > 1:
        raise GensetsError(f"{path}: tasks of several Label Studio projects ({', '.join(sorted(read.projects))}): "
                           f"import one project's export at a time; {REFUSED}")
    known = {e: (p, srv) for e, p, srv in con.execute("SELECT export, project, server FROM label_studio_exports")
             .fetchall()}
    if "" not in known:  # a workspace from before exports had ids: its first import's project
        first = con.execute("SELECT project FROM label_studio_annotations ORDER BY rowid LIMIT 1").fetchall()
        if first:
            known[""] = (first[0][0], None)
            con.execute("INSERT INTO label_studio_exports VALUES ('', NULL, NULL, NULL, ?, NULL)", [first[0][0]])
    project = next(iter(read.projects), None)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    for export, where in read.exports.items():
        if export and export not in known:
            raise GensetsError(f"{where}: made by another workspace's export ({EXPORT_FIELD} {export[:40]!r} is "
                               f"none of this workspace's); {REFUSED}")
        bound, server = known.get(export, (None, None))
        if project is None:
            continue
        if bound is not None and bound != project:
            raise GensetsError(f"{where}: these tasks were exported for Label Studio project {bound}"
                               + (f" of {server}" if server else "") + f", this file is project {project}'s; "
                               f"{REFUSED} (a project's tasks come from their own `gensets review export`)")
        if bound is None:
            if export in known:
                con.execute("UPDATE label_studio_exports SET project = ? WHERE export = ?", [project, export])
            else:
                con.execute("INSERT INTO label_studio_exports VALUES (?, ?, NULL, NULL, ?, NULL)",
                            [export, now, project])
    if project is None:
        return
    seen = {t: (k, c) for t, k, c in con.execute(
        "SELECT task, key, created FROM label_studio_tasks WHERE project = ?", [project]).fetchall()}
    new, same = [], 0
    for (_, tid), (key, created, where) in read.tasks.items():
        before = seen.get(tid)
        if before is None:
            new.append((project, tid, key, created))
        elif before != (key, created):
            raise GensetsError(f"{where}: not the task {tid} of project {project} imported before ({before[0][:100]}, "
                               f"created {before[1] or '?'}): this file comes from another Label Studio server (or "
                               f"a project made again); {REFUSED}")
        else:
            same += 1
    if seen and read.tasks and not same:
        raise GensetsError(f"{path}: none of its {len(read.tasks)} task(s) is one of the {len(seen)} imported before "
                           f"from project {project}: it comes from another Label Studio server; {REFUSED} (an "
                           "export of only new tasks of the same project: export all its tasks, the snapshot)")
    if new:
        con.executemany("INSERT INTO label_studio_tasks VALUES (?, ?, ?, ?)", new)


def _remember(con, decisions: list[Decision], withdrawn: list[Decision]) -> None:
    """Append the imported (and withdrawn) Label Studio annotations to ``label_studio_annotations``."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    rows = [(*d.source, d.key, d.reviewer, d.time, d.decided or d.time, False, now) for d in decisions]
    rows += [(*d.source, d.key, d.reviewer, None, None, True, now) for d in withdrawn]
    if rows:
        con.executemany("INSERT INTO label_studio_annotations VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _open(workspace, read_only: bool):
    ws = Workspace(workspace)
    builder, cfg = ws.load()
    ws.require_state()
    return ws, list(builder.class_names(cfg)), state.connect(ws.state_path, read_only=read_only)


def export(workspace, fmt: str, file, *, status: str | None = None, images: str = "base64",
           base_url: str | None = None, root=None, project: str | None = None) -> int:
    """``project``: Label Studio's address of the project the tasks are for (recorded with the export)."""
    if project and fmt != "label-studio":
        raise GensetsError("--project is for --format label-studio (the project the tasks are for)")
    if project:
        project_of(project)  # before anything is opened or written
    ws, class_names, con = _open(workspace, read_only=fmt == "csv")  # a Label Studio export is recorded
    try:
        if fmt == "csv":
            return export_csv(con, Path(file), status)
        where = Images(images, base_url, Path(root) if root else None)
        return export_label_studio(ws, con, Path(file), class_names, status, where, project)
    finally:
        con.close()


def _several_reviewers(decisions: list[Decision]) -> list[Decision]:
    """The first decision of each image that the file has decisions of two or more reviewers for."""
    reviewers: dict[str, set[str]] = {}
    for d in decisions:
        reviewers.setdefault(d.key, set()).add(d.reviewer)
    return list({d.key: d for d in reversed(decisions) if len(reviewers[d.key]) > 1}.values())[::-1]


def _known_ids(con, users: dict[str, str]) -> dict[str, str]:
    """Label Studio user id -> name: what earlier imports learned (``reviewer_aliases``), then ``--users``."""
    ids = {a.split(":", 1)[1]: r for a, r in review.aliases(con).items() if a.startswith("label-studio:")}
    return {**ids, **users}


def import_(workspace, fmt: str, file, *, reviewer: str | None = None, users=None, double: bool = False) -> dict:
    """Validate every row of ``file``, then record the decisions that change something.

    ``users``: a Label Studio user list (see :func:`read_users`). An image with decisions by several reviewers
    needs double review (else the last would silently win): in a workspace not yet in it, ``double=True`` puts
    it there (recorded in state.duckdb, as ``review serve --double`` does), otherwise nothing is written. The
    result's ``notes`` say what was read in a way worth knowing (an annotator's superseded annotation, ids
    without a name, annotations withdrawn because Label Studio no longer has them).

    Aliases learned (a user id's name), decisions, withdrawals and the annotations imported are written in one
    transaction, the checks run inside it (so they see the aliases): all or none."""
    path = Path(file)
    if not path.is_file():
        raise GensetsError(f"{path}: no such file")
    default = reviewer or review.configured_reviewer() or ""  # chosen, never the login name
    notes: list[str] = []
    names = read_users(Path(users)) if users else {}
    _, class_names, con = _open(workspace, read_only=False)
    try:
        if fmt == "csv":
            read = _Export(_read_csv(path, default), {}, set())
        else:
            read = _read_label_studio(path, default, _known_ids(con, names), notes)
        with transaction(con):
            try:
                review.add_aliases(con, read.aliases)
            except GensetsError as e:
                raise GensetsError(f"{path}: {e} (Label Studio user ids name one person per workspace)") from None
            nameless = next((d for d in read.decisions if not d.reviewer and d.status != "pending"), None)
            if nameless is not None:
                raise GensetsError(f"{nameless.where}: no reviewer: name one for such rows with --reviewer NAME "
                                   f"(or set {review.REVIEWER_ENV}=NAME)")
            _bind(con, read, path)
            todo, remember = _validate(con, read.decisions, class_names, notes)
            withdrawn = _withdrawals(con, read, path)
            _double(con, read.decisions, double, notes)
            review.record_in(con, [(d.key, d.status, d.label, d.reviewer, d.note) for d in todo + withdrawn],
                             [d.time for d in todo + withdrawn])
            _remember(con, remember, withdrawn)
    finally:
        con.close()
    if withdrawn:
        notes.append(f"{len(withdrawn)} annotation(s) imported before are no longer in Label Studio: withdrawn "
                     f"(back to pending for their reviewer): {'; '.join(d.where for d in withdrawn[:5])}")
    return {"rows": len(read.decisions), "recorded": len(todo), "unchanged": len(read.decisions) - len(todo),
            "withdrawn": len(withdrawn), "notes": notes}


def _double(con, decisions: list[Decision], double: bool, notes: list[str]) -> None:
    """Refuse decisions by several reviewers on one image in single review, unless ``double`` puts the workspace
    in double review."""
    several = _several_reviewers(decisions)
    if several and not review.is_double(con):
        if not double:
            d = several[0]
            raise GensetsError(f"{d.where}: {len(several)} image(s) have decisions by several reviewers, but this "
                               "workspace is in single review, where the last decision would win; import with "
                               "--double to apply double review (an image lands when its reviewers agree, "
                               "disputed ones are held back)")
        review.set_double(con)
        notes.append("the workspace is now in double review")
