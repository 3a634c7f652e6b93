"""Review decisions in and out: CSV and Label Studio.

CSV: one row per sample, ``key,status,label,reviewer,note`` (status pending / accepted / rejected /
relabeled; ``label`` is the new class of a relabel; the note ``several objects`` is the page's flag).
A cell that a spreadsheet would run as a formula (starting with ``= + - @``, or a quote) is written with
a leading ``'``, which import takes off again: a round trip is lossless.

Label Studio: ``export`` writes a JSON list of tasks whose ``data.image`` is the image itself as a
``data:`` URI (base64), so the file is self-contained and needs no file server or local-files storage,
and whose ``predictions`` carry each surrogate's top-1 ImageNet class as a pre-annotation, one per surrogate
and, last, one holding every surrogate's line (model version :data:`ALL_SURROGATES`: Label Studio shows only
the last imported model version's prediction while annotating). The labeling config that matches it is
written beside it (``<file>.label_config.xml``): choices ``verdict`` (accept / reject / relabel), ``class``
(the new class of a relabel) and ``flags`` (several objects).

``import`` reads Label Studio 1.23's JSON export of such a project (it writes it on one line, so errors name
the task: its id and key). Every annotation that was not cancelled becomes one decision by its annotator:
  * who: the snapshot export (``POST /api/projects/{id}/exports/`` with ``{"annotations__completed_by":
    {"only_id": false}}``) gives each annotator's email; the UI's Export -> JSON gives only a numeric user id,
    mapped through ``users`` (``--users``: the JSON of ``GET /api/users``, or ``{"1": "a@b.c"}``), else kept
    as ``label-studio:<id>`` (and said so);
  * one annotator twice on a task (Label Studio allows it): their latest annotation by ``updated_at`` (said so);
  * several annotators on a task: double review's rules (:func:`review.verdicts`; disputed images held back),
    so the workspace must be in double review, or the import is asked to put it there (``double=True``).

Imports check every row first and name the first bad one (``file:line``, or the task); then all decisions
are written in one transaction (all or none). A row equal to its reviewer's latest decision is skipped, so
re-importing is harmless.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import getpass
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ..errors import GensetsError, did_you_mean
from . import review, state
from .queue import FLAG, has_flag, with_flag

FORMATS = ("csv", "label-studio")
CSV_COLUMNS = ("key", "status", "label", "reviewer", "note")
ALL_SURROGATES = "gensets: all surrogates"  # the model version of the combined prediction
FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet may run a cell starting with one (OWASP)


def csv_cell(value: str) -> str:
    """``value`` safe to open in a spreadsheet: a leading quote when it starts a formula (or is a quote)."""
    return f"'{value}" if value.startswith((*FORMULA, "'")) else value


def csv_value(cell: str) -> str:
    """The inverse of :func:`csv_cell`."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith((*FORMULA, "'")) else cell


@dataclass
class Decision:
    key: str
    status: str
    label: str | None
    reviewer: str
    note: str | None
    where: str  # file:line, or file: task <id> (<key>)


def _queue(con, status: str | None = None) -> list[dict]:
    return review.list_queue(con, status=status)


# ---------------------------------------------------------------------------------------- export
def export_csv(con, path: Path, status: str | None = None) -> int:
    rows = _queue(con, status)
    notes = dict(con.execute("SELECT key, note FROM reviews").fetchall())
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            note = notes.get(r["key"])
            label = r["review_label"] if r["status"] == "relabeled" else ""
            w.writerow([csv_cell(c) for c in (r["key"], r["status"], label, r["reviewer"] or "", note or "")])
    return len(rows)


def label_config(class_names: list[str]) -> str:
    """The Label Studio labeling config that matches the exported tasks."""
    classes = "\n".join(f"      <Choice value={quoteattr(c)}/>" for c in class_names)
    return f"""<View>
  <Header value="$class · $config: $nuisance"/>
  <Image name="image" value="$image" zoom="true"/>
  <Text name="prompt" value="$prompt"/>
  <Choices name="verdict" toName="image" choice="single-radio" showInline="true" required="true">
    <Choice value="accept" hotkey="a"/>
    <Choice value="reject" hotkey="r"/>
    <Choice value="relabel" hotkey="l"/>
  </Choices>
  <View visibleWhen="choice-selected" whenTagName="verdict" whenChoiceValue="relabel">
    <Header value="new class"/>
    <Choices name="class" toName="image" choice="single" showInline="true">
{classes}
    </Choices>
  </View>
  <Choices name="flags" toName="image" choice="multiple">
    <Choice value={quoteattr(FLAG)} hotkey="s"/>
  </Choices>
  <Header value="surrogates' top-1 (pre-annotation)"/>
  <TextArea name="surrogate_top1" toName="image" editable="false" rows="3"/>
</View>
"""


def export_label_studio(ws, con, path: Path, class_names: list[str], status: str | None = None) -> int:
    from ..labels.imagenet import imagenet_names
    from ..shards import read_at
    from .review_server import MIME

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
            yield task(r)

    def task(r):
        spath, offset, size, ext = index[r["key"]]
        data = base64.b64encode(read_at(spath, offset, size, r["key"])).decode()
        preds = top1.get(r["key"], [])

        def prediction(version, lines, score=None):
            return {"model_version": version, **({"score": score} if score is not None else {}),
                    "result": [{"from_name": "surrogate_top1", "to_name": "image", "type": "textarea",
                                "value": {"text": lines}}]}

        lines = [f"{model}: {name} ({score:.3f})" for model, name, score in preds]
        return {
            "data": {"image": f"data:{MIME[ext]};base64,{data}", "key": r["key"], "class": r["label"],
                     "config": r["config"], "nuisance": r["nuisance"], "prompt": r["prompt"],
                     "status": r["status"]},
            "predictions": [prediction(model, [line], round(float(score), 6))
                            for (model, _, score), line in zip(preds, lines, strict=True)]
                           + ([prediction(ALL_SURROGATES, lines)] if lines else []),
        }

    n = write_json_list(path, tasks())
    Path(f"{path}.label_config.xml").write_text(label_config(class_names), encoding="utf-8")
    return n


def write_json_list(path: Path, items) -> int:
    """``json.dumps(list(items), indent=1, ensure_ascii=False)`` and a newline, byte for byte, written one item at a
    time (a Label Studio export holds one image in memory, not all), into a temporary file renamed at the end.
    Returns the number of items."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for item in items:
                text = json.dumps(item, indent=1, ensure_ascii=False)  # newlines in strings are escaped
                f.write(("[\n" if n == 0 else ",\n") + "\n".join(" " + line for line in text.split("\n")))
                n += 1
            f.write("\n]\n" if n else "[]\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


# ---------------------------------------------------------------------------------------- import
def _text(path: Path) -> str:
    """The file as UTF-8 text (a BOM dropped); GensetsError naming the line of the first byte that is not."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise GensetsError(f"{path}:{line}: not UTF-8 text ({e.reason})") from None


def _read_csv(path: Path, default_reviewer: str) -> list[Decision]:
    reader = csv.reader(io.StringIO(_text(path), newline=""))
    try:
        return _csv_rows(path, reader, default_reviewer)
    except csv.Error as e:  # e.g. a cell over the csv module's field size limit
        raise GensetsError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None


def _csv_rows(path: Path, reader, default_reviewer: str) -> list[Decision]:
    out = []
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise GensetsError(f"{path}:1: empty file (expected the header {','.join(CSV_COLUMNS)})") from None
    unknown = [h for h in header if h not in CSV_COLUMNS]
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
    try:
        return json.loads(_text(path))
    except json.JSONDecodeError as e:
        raise GensetsError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    except (ValueError, RecursionError) as e:  # a number of 4300+ digits, nesting deeper than Python recurses
        raise GensetsError(f"{path}: not valid JSON ({' '.join(str(e).split())[:200] or 'nested too deeply'})") \
            from None


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


def _annotator(a: dict, default: str, users: dict[str, str], unknown: set[str]) -> str:
    who = a.get("completed_by")
    if isinstance(who, dict):  # the snapshot export with emails
        who = who.get("email") or who.get("username") or who.get("id")
        if not isinstance(who, (int, str)) or isinstance(who, bool) or who == "":
            return default
        if isinstance(who, str) and not who.isdecimal():
            return who
    if who is None or who == "":
        return default
    if str(who) in users:
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


def _read_label_studio(path: Path, default_reviewer: str, users: dict[str, str] | None = None,
                       notes: list[str] | None = None) -> list[Decision]:
    users, notes = users or {}, notes if notes is not None else []
    tasks = _load_json(path)
    if not isinstance(tasks, list):
        raise GensetsError(f"{path}:1: expected a JSON list of tasks (Label Studio: Export -> JSON)")
    out, unknown, superseded = [], set(), []
    for i, task in enumerate(tasks, start=1):
        tid = task.get("id") if isinstance(task, dict) else None
        name = f"task {tid}" if isinstance(tid, (int, str)) and str(tid).isdecimal() else f"task #{i} of the list"
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            if isinstance(task, dict) and "key" in task and "annotations" not in task:  # JSON_MIN: flat rows
                raise GensetsError(f"{path}: {name}: a JSON_MIN export (flat rows, no annotators); export JSON, "
                                   "or the snapshot with emails, instead")
            raise GensetsError(f"{path}: {name}: no data.key (was it exported by gensets?)")
        where = f"{path}: {name} ({data['key'][:100]})"
        annotations = task.get("annotations") if task.get("annotations") is not None else []
        if not isinstance(annotations, list) or not all(isinstance(a, dict) for a in annotations):
            raise GensetsError(f"{where}: 'annotations' is not a list of annotations")
        latest: dict[str, dict] = {}  # annotator -> their latest annotation of the task (by updated_at)
        first: dict[str, dt.datetime] = {}  # annotator -> when they first annotated it
        for a in annotations:
            if a.get("was_cancelled"):
                continue
            who = _annotator(a, default_reviewer, users, unknown)
            first[who] = min(first.get(who, _when(a, "created_at")), _when(a, "created_at"))
            if who in latest:
                superseded.append(f"{name} ({data['key'][:100]}) by {who}")
                if _latest_order(a) < _latest_order(latest[who]):
                    continue
            latest[who] = a
        # in the order the annotators first annotated: double review's first two reviewers
        for who, a in sorted(latest.items(), key=lambda wa: first[wa[0]]):
            choices = _choices(a, where)
            verdict = (choices.get("verdict") or [None])[0]
            if verdict not in review.ACTIONS:
                raise GensetsError(f"{where}: annotation by {who} without a verdict (accept, reject or relabel), "
                                   f"got {str(verdict)[:40]!r}")
            label = (choices.get("class") or [None])[0] if verdict == "relabel" else None
            note = FLAG if FLAG in (choices.get("flags") or []) else None
            out.append(Decision(data["key"], review.ACTIONS[verdict], label, who, note, where))
    if superseded:
        notes.append(f"{len(superseded)} annotator(s) annotated a task twice; their latest annotation "
                     f"(updated_at) was taken: {'; '.join(superseded[:5])}" + ("; ..." if len(superseded) > 5 else ""))
    if unknown:
        notes.append(f"annotators known only by their Label Studio id ({', '.join(sorted(unknown))}): pass --users "
                     "(the JSON of GET /api/users) or import the snapshot export with emails to name them")
    return out


def _validate(con, decisions: list[Decision], class_names: list[str]) -> list[Decision]:
    """Check every decision; returns those that change something. Raises on the first bad one."""
    keys = [d.key for d in decisions]
    labels = dict(con.execute("SELECT s.key, s.label FROM reviews JOIN samples s USING (key) "
                              "WHERE list_contains(?, key)", [keys]).fetchall())
    latest = {(k, r): (s, lb, n) for k, r, s, lb, n in con.execute(
        "SELECT key, reviewer, arg_max(status, rowid), arg_max(label, rowid), arg_max(note, rowid) "
        "FROM review_log WHERE list_contains(?, key) GROUP BY key, reviewer", [keys]).fetchall()}
    valid, seen, todo = set(class_names), {}, []
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
        before = latest.get((d.key, d.reviewer))
        if before and before[0] == d.status and (before[1] if d.status == "relabeled" else None) == d.label \
                and (before[2] or None) == d.note:
            continue  # the same decision again
        todo.append(d)
    return todo


def _open(workspace, read_only: bool):
    from ..workspace import Workspace

    ws = Workspace(workspace)
    builder, cfg = ws.load()
    if not ws.state_path.exists():
        raise GensetsError(f"{ws.root}: nothing built yet (no state.duckdb)")
    return ws, list(builder.class_names(cfg)), state.connect(ws.state_path, read_only=read_only)


def export(workspace, fmt: str, file, *, status: str | None = None) -> int:
    ws, class_names, con = _open(workspace, read_only=True)
    try:
        if fmt == "csv":
            return export_csv(con, Path(file), status)
        return export_label_studio(ws, con, Path(file), class_names, status)
    finally:
        con.close()


def _several_reviewers(decisions: list[Decision]) -> list[Decision]:
    """The first decision of each image that the file has decisions of two or more reviewers for."""
    reviewers: dict[str, set[str]] = {}
    for d in decisions:
        reviewers.setdefault(d.key, set()).add(d.reviewer)
    return list({d.key: d for d in reversed(decisions) if len(reviewers[d.key]) > 1}.values())[::-1]


def import_(workspace, fmt: str, file, *, reviewer: str | None = None, users=None, double: bool = False) -> dict:
    """Validate every row of ``file``, then record the decisions that change something.

    ``users``: a Label Studio user list (see :func:`read_users`). An image with decisions by several reviewers
    needs double review (else the last would silently win): in a workspace not yet in it, ``double=True`` puts
    it there (recorded in state.duckdb, as ``review serve --double`` does), otherwise nothing is written. The
    result's ``notes`` say what was read in a way worth knowing (an annotator's superseded annotation, ids
    without a name)."""
    path = Path(file)
    if not path.is_file():
        raise GensetsError(f"{path}: no such file")
    default = reviewer or getpass.getuser()
    notes: list[str] = []
    names = read_users(Path(users)) if users else {}
    _, class_names, con = _open(workspace, read_only=False)
    try:
        decisions = _read_csv(path, default) if fmt == "csv" else _read_label_studio(path, default, names, notes)
        todo = _validate(con, decisions, class_names)
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
        review.record(con, [(d.key, d.status, d.label, d.reviewer, d.note) for d in todo])  # all or none
    finally:
        con.close()
    return {"rows": len(decisions), "recorded": len(todo), "unchanged": len(decisions) - len(todo), "notes": notes}
