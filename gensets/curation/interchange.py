"""Review decisions in and out: CSV and Label Studio.

CSV: one row per sample, ``key,status,label,reviewer,note`` (status pending / accepted / rejected /
relabeled; ``label`` is the new class of a relabel; the note ``several objects`` is the page's flag).
A cell that a spreadsheet would run as a formula (starting with ``= + - @``, or a quote) is written with
a leading ``'``, which import takes off again: a round trip is lossless.

Label Studio: ``export`` writes a JSON list of tasks whose ``data.image`` is the image itself as a
``data:`` URI (base64), so the file is self-contained and needs no file server or local-files storage,
and whose ``predictions`` carry each surrogate's top-1 ImageNet class as a pre-annotation. The labeling
config that matches it is written beside it (``<file>.label_config.xml``): choices ``verdict``
(accept / reject / relabel), ``class`` (the new class of a relabel) and ``flags`` (several objects).
``import`` reads Label Studio's JSON export (Export -> JSON) of such a project: every annotation that
was not cancelled becomes one decision by its annotator (several annotators: double review).

Imports check every row first and name the first bad one as ``file:line``; then all decisions are
written in one transaction (all or none). A row equal to its reviewer's latest decision is skipped, so
re-importing is harmless.
"""

from __future__ import annotations

import base64
import csv
import getpass
import json
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ..errors import GensetsError
from . import review, state
from .queue import FLAG, has_flag, with_flag

FORMATS = ("csv", "label-studio")
CSV_COLUMNS = ("key", "status", "label", "reviewer", "note")
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
    where: str  # file:line


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
    index = state.images_of(con, keys, lambda shard: ws.candidates / shard)
    names = imagenet_names()
    top1 = {}
    for key, model, idx, score in con.execute(
            "SELECT key, model, class_index, score FROM surrogate_predictions "
            "WHERE rank = 1 AND list_contains(?, key) ORDER BY key, model", [keys]).fetchall():
        top1.setdefault(key, []).append((model, names[idx] if 0 <= idx < len(names) else str(idx), score))
    tasks = []
    for r in rows:
        spath, offset, size, ext = index[r["key"]]
        data = base64.b64encode(read_at(spath, offset, size)).decode()
        preds = top1.get(r["key"], [])
        tasks.append({
            "data": {"image": f"data:{MIME[ext]};base64,{data}", "key": r["key"], "class": r["label"],
                     "config": r["config"], "nuisance": r["nuisance"], "prompt": r["prompt"],
                     "status": r["status"]},
            "predictions": [{"model_version": model, "score": round(float(score), 6),
                             "result": [{"from_name": "surrogate_top1", "to_name": "image", "type": "textarea",
                                         "value": {"text": [f"{model}: {name} ({score:.3f})"]}}]}
                            for model, name, score in preds],
        })
    path.write_text(json.dumps(tasks, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    Path(f"{path}.label_config.xml").write_text(label_config(class_names), encoding="utf-8")
    return len(tasks)


# ---------------------------------------------------------------------------------------- import
def _read_csv(path: Path, default_reviewer: str) -> list[Decision]:
    out = []
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
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


def _json_items(path: Path) -> list[tuple[int, object]]:
    """The elements of a top-level JSON list, each with the line it starts on."""
    text = path.read_text(encoding="utf-8-sig")
    dec = json.JSONDecoder()
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        raise GensetsError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    i = len(text) - len(text.lstrip())
    if not text.startswith("[", i):
        raise GensetsError(f"{path}:1: expected a JSON list of tasks (Label Studio: Export -> JSON)")
    i += 1
    out = []
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if text[i] == "]":
            return out
        obj, end = dec.raw_decode(text, i)
        out.append((text.count("\n", 0, i) + 1, obj))
        i = end


def _annotator(a: dict, default: str) -> str:
    who = a.get("completed_by")
    if isinstance(who, dict):
        return str(who.get("email") or who.get("username") or who.get("id") or default)
    if who is not None and who != "":
        return f"label-studio:{who}"
    return default


def _read_label_studio(path: Path, default_reviewer: str) -> list[Decision]:
    out = []
    for line, task in _json_items(path):
        where = f"{path}:{line}"
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("key"), str):
            raise GensetsError(f"{where}: a task without data.key (was it exported by gensets?)")
        for a in task.get("annotations") or []:
            if not isinstance(a, dict) or a.get("was_cancelled"):
                continue
            choices = {}
            for res in a.get("result") or []:
                if isinstance(res, dict) and res.get("type") == "choices":
                    choices[res.get("from_name")] = list((res.get("value") or {}).get("choices") or [])
            verdict = (choices.get("verdict") or [None])[0]
            if verdict not in review.ACTIONS:
                raise GensetsError(f"{where}: task {data['key']}: annotation without a verdict "
                                   f"(accept, reject or relabel), got {verdict!r}")
            label = (choices.get("class") or [None])[0] if verdict == "relabel" else None
            note = FLAG if FLAG in (choices.get("flags") or []) else None
            out.append(Decision(data["key"], review.ACTIONS[verdict], label, _annotator(a, default_reviewer), note, where))
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
                raise GensetsError(f"{d.where}: unknown class '{d.label}'")
        elif d.label and d.label != labels[d.key]:
            raise GensetsError(f"{d.where}: label '{d.label}' differs from the sample's class "
                               f"'{labels[d.key]}': use status relabeled")
        if len(d.reviewer) > 64:
            raise GensetsError(f"{d.where}: reviewer name longer than 64 characters")
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


def import_(workspace, fmt: str, file, *, reviewer: str | None = None) -> dict:
    """Validate every row of ``file``, then record the decisions that change something."""
    path = Path(file)
    if not path.is_file():
        raise GensetsError(f"{path}: no such file")
    default = reviewer or getpass.getuser()
    read = _read_csv if fmt == "csv" else _read_label_studio
    _, class_names, con = _open(workspace, read_only=False)
    try:
        decisions = read(path, default)
        todo = _validate(con, decisions, class_names)
        review.record(con, [(d.key, d.status, d.label, d.reviewer, d.note) for d in todo])  # all or none
    finally:
        con.close()
    return {"rows": len(decisions), "recorded": len(todo), "unchanged": len(decisions) - len(todo)}
