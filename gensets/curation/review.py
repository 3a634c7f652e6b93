"""The review queue: kept images wait as ``pending`` until a person accepts, rejects or relabels them.

Every decision updates ``reviews`` and is appended to ``review_log`` (the audit trail), in one
transaction, with the reviewer and the time.

Double review (``gensets review serve --double``, recorded in state.duckdb: a workspace stays in it until
``gensets review mode WORKSPACE single`` switches it off, every decision kept: :func:`set_mode`)
does not take the latest decision: :func:`verdicts` gives each image the decision its first two
reviewers agree on; when they disagree, the later reviewers (adjudicators) settle it if their latest
decisions all agree, and until then the image is ``disputed`` and ``finalize`` holds it back. An image
one reviewer rejected is ``held``: never published, not even with ``--include-pending``.

:func:`undo` takes back a reviewer's latest decisions one by one, each as a new decision that restores the state
before it (logged, with the undone row recorded in ``review_undo``); nothing is ever deleted from the log.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence

from ..db import transaction
from ..errors import GensetsError, did_you_mean
from . import queue, state

STATUSES = ("pending", "accepted", "rejected", "relabeled")
ACTIONS = {"accept": "accepted", "reject": "rejected", "relabel": "relabeled"}  # what a reviewer does -> status
UNDO_DEPTH = 1000  # undo looks this many of a reviewer's latest log rows back (an undo and what it undid: two)
MODE = "review_mode"  # the state.duckdb setting: "double" once a workspace is served with --double ("single" after)
MODES = ("single", "double")

LATEST = queue.LATEST.format(where="")  # every reviewer's latest decision per image


REVIEWER_ENV = "GENSETS_REVIEWER"  # the reviewer name of commands and pages that are given none


def configured_reviewer() -> str | None:
    """The reviewer name configured for whoever runs gensets here (:data:`REVIEWER_ENV`), else None: a name is
    published with every decision, so it is chosen, never the login name."""
    return (os.environ.get(REVIEWER_ENV) or "").strip() or None


def chosen_reviewer(name: str | None) -> str:
    """``name``, else the configured one (:func:`configured_reviewer`); none: an error saying how to name one."""
    name = name or configured_reviewer()
    if not name:
        raise GensetsError(f"who decides? name the reviewer: --reviewer NAME (or set {REVIEWER_ENV}=NAME); the "
                           "name is published with each decision in the dataset")
    return name


def check_reviewer(name) -> str:
    """A reviewer name as stored: a string of 1 to 64 printable characters without surrounding spaces."""
    if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable() or name != name.strip():
        raise GensetsError(f"reviewer name must be 1 to 64 printable characters, got {str(name)[:40]!r}"
                           + ("..." if len(str(name)) > 40 else ""))
    return name


def list_queue(con, status: str | None = "pending", label: str | None = None,
               config: str | None = None, limit: int | None = None) -> list[dict]:
    q = """SELECT r.key, r.status, s.config, s.label, r.label AS review_label, s.nuisance,
                  s.surrogate_failures, r.reviewer, r.time, r.note, s.prompt
           FROM reviews r JOIN samples s USING (key) WHERE 1=1"""
    args: list = []
    if status:
        q += " AND r.status = ?"
        args.append(status)
    if label:
        q += " AND s.label = ?"
        args.append(label)
    if config:
        q += " AND s.config = ?"
        args.append(config)
    q += " ORDER BY s.config, r.key"
    if limit:
        q += " LIMIT ?"
        args.append(int(limit))
    cur = con.execute(q, args)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def list_outcomes(con, status: str | None = "pending", label: str | None = None,
                  config: str | None = None, limit: int | None = None) -> list[dict]:
    """:func:`list_queue` as ``finalize`` sees it (``review list``): in double review each image's status, class,
    reviewer and time are its :func:`verdicts`' (``pending`` until two reviewers decided, ``disputed``, ``held``),
    not its last decision, which may be one reviewer's of two who disagree."""
    if not is_double(con):
        return list_queue(con, status=status, label=label, config=config, limit=limit)
    verdict, out = verdicts(con), []
    for r in list_queue(con, status=None, label=label, config=config):
        if r["key"] in verdict:
            s, lb, who, time = verdict[r["key"]]
            r.update(status=s, review_label=lb if s == "relabeled" else r["label"], reviewer=who, time=time)
        if status is None or r["status"] == status:
            out.append(r)
        if limit and len(out) == limit:
            break
    return out


def decide(con, keys: Sequence[str], status: str, *, label: str | None = None,
           reviewer: str | None = None, note: str | None = None, valid_labels: Sequence[str] = ()) -> int:
    """Record one decision for each key. Unknown keys are refused before anything is written."""
    if status not in STATUSES:
        raise GensetsError(f"unknown review status '{status}' (known: {', '.join(STATUSES)})")
    if status == "relabeled":
        if not label:
            raise GensetsError("relabel needs the new class (--to CLASS)")
        if valid_labels and label not in valid_labels:
            raise GensetsError(f"unknown class '{label}' for relabel{did_you_mean(label, valid_labels)}")
    keys = list(dict.fromkeys(keys))
    if not keys:
        raise GensetsError("no sample keys given")
    known = {r[0] for r in con.execute(
        "SELECT key FROM reviews WHERE list_contains(?, key)", [keys]).fetchall()}
    missing = [k for k in keys if k not in known]
    if missing:
        raise GensetsError(f"sample '{missing[0]}' is not in the review queue")
    if status == "relabeled":  # a relabel to the class a sample already has is no relabel
        same = [k for k, lab in con.execute("SELECT key, label FROM samples WHERE list_contains(?, key)",
                                            [keys]).fetchall() if lab == label]
        if same:
            raise GensetsError(f"sample '{same[0]}' is a {label} already: relabel it to another class, or accept it")
    reviewer = check_reviewer(chosen_reviewer(reviewer))
    record(con, [(key, status, label, reviewer, note) for key in keys])
    return len(keys)


def record(con, decisions: Sequence[tuple[str, str, str | None, str, str | None]],
           times: Sequence[dt.datetime | None] | None = None) -> None:
    """Write checked decisions ``(key, status, label, reviewer, note)`` in one transaction: all or none, with
    the review page's tables (:func:`queue.refresh`). ``times``: when each was made (naive UTC) where another tool
    says so (a Label Studio annotation's ``updated_at``); None, or a None in it, is now."""
    with transaction(con):
        record_in(con, decisions, times)


def record_in(con, decisions, times=None) -> None:
    """:func:`record` inside the caller's transaction (an import that writes more in the same one). Each
    statement finds its rows by key (indexed)."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    times = [t or now for t in times] if times is not None else [now] * len(decisions)
    keys = list(dict.fromkeys(d[0] for d in decisions))
    for key, _, _, reviewer, _ in decisions:
        if not reviewer:
            raise GensetsError(f"sample '{key}': a decision needs a reviewer name")
    if len(keys) == len(decisions):  # one decision per image (e.g. accept --all-pending): two statements
        _record_set(con, decisions, times)
    else:  # an image decided twice: in order, each decision logged
        labels = dict(con.execute("SELECT key, label FROM samples WHERE list_contains(?, key)",
                                  [keys]).fetchall())
        for (key, status, label, reviewer, note), time in zip(decisions, times, strict=True):
            new_label = label if status == "relabeled" else None
            con.execute("UPDATE reviews SET status = ?, label = ?, reviewer = ?, time = ?, note = ? WHERE key = ?",
                        [status, labels.get(key) if new_label is None else new_label, reviewer, time, note, key])
            con.execute("INSERT INTO review_log SELECT key, status, label, reviewer, time, note "
                        "FROM reviews WHERE key = ?", [key])
    queue.refresh(con, keys)


def add_aliases(con, aliases: dict[str, str]) -> None:
    """Record that decisions logged under each alias (e.g. ``label-studio:1``) are the named reviewer's (inside the
    caller's transaction); the log is not rewritten, its readers join the aliases (``queue.LATEST``). The page's
    tables of every image such a name decided are brought up to date."""
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    known = dict(con.execute("SELECT alias, reviewer FROM reviewer_aliases").fetchall())
    new = {a: r for a, r in aliases.items() if known.get(a) != r}
    for alias, reviewer in new.items():
        if alias in known:
            raise GensetsError(f"reviewer '{alias}' is '{known[alias]}' in this workspace, not '{reviewer}'")
        con.execute("INSERT INTO reviewer_aliases VALUES (?, ?, ?)", [alias, check_reviewer(reviewer), now])
    if new:
        keys = [k for (k,) in con.execute("SELECT DISTINCT key FROM review_log WHERE list_contains(?, reviewer)",
                                          [list(new)]).fetchall()]
        queue.refresh(con, keys)


def aliases(con) -> dict[str, str]:
    """alias -> reviewer (:func:`add_aliases`)."""
    return dict(con.execute("SELECT alias, reviewer FROM reviewer_aliases").fetchall())


def _record_set(con, decisions, times) -> None:
    """Decisions on distinct images as one UPDATE and one INSERT over an Arrow table of them (the log in their
    order): what the per-decision statements write, in two statements whatever their number."""
    import pyarrow as pa

    if not decisions:
        return
    cols = list(zip(*decisions, strict=True))
    con.register("_decisions", pa.table({
        "seq": pa.array(range(len(decisions)), pa.int64()), "key": pa.array(cols[0], pa.string()),
        "status": pa.array(cols[1], pa.string()), "label": pa.array(cols[2], pa.string()),
        "reviewer": pa.array(cols[3], pa.string()), "note": pa.array(cols[4], pa.string()),
        "time": pa.array(times, pa.timestamp("us"))}))
    try:
        con.execute("""
            UPDATE reviews SET status = d.status, reviewer = d.reviewer, time = d.time, note = d.note,
                   label = CASE WHEN d.status = 'relabeled' THEN d.label ELSE s.label END
            FROM _decisions d LEFT JOIN samples s USING (key) WHERE reviews.key = d.key""")
        con.execute("INSERT INTO review_log SELECT r.key, r.status, r.label, r.reviewer, r.time, r.note "
                    "FROM reviews r JOIN _decisions d USING (key) ORDER BY d.seq")
    finally:
        con.unregister("_decisions")


def category(status: str, label: str | None) -> str:
    """What a decision says, for agreement: accepted, rejected or relabeled:<class>."""
    return f"relabeled:{label}" if status == "relabeled" else status


def is_double(con) -> bool:
    return state.setting(con, MODE) == "double"


def set_double(con) -> None:
    state.set_setting(con, MODE, "double")


def set_mode(con, mode: str) -> None:
    """Put the workspace in single or double review. Nothing in ``reviews`` or ``review_log`` changes: back in
    single review each image's latest decision counts (whoever made it), as before double review began; in double
    review again, each reviewer's latest decision, the ones made meanwhile included (:func:`verdicts`)."""
    if mode not in MODES:
        raise GensetsError(f"unknown review mode '{str(mode)[:20]}' (known: {', '.join(MODES)})")
    state.set_setting(con, MODE, mode)


def history(con, key: str, reviewer: str | None = None) -> list[dict]:
    """Every decision logged on ``key``, oldest first: ``time``, ``reviewer`` (an alias resolved), ``status``,
    ``label`` (a relabel's class), ``note`` (the comment, the "several objects" flag), ``undoes`` (the ``seq`` of
    the decision an undo took back), ``undone`` (this one was taken back) and ``overrides`` (single review: the
    other reviewer whose decision this one replaced). ``reviewer``: only theirs (double review's blind page)."""
    if not con.execute("SELECT count(*) FROM reviews WHERE key = ?", [key]).fetchall()[0][0]:
        raise GensetsError(f"sample '{str(key)[:200]}' is not in the review queue")
    undo = {u: d for u, d in con.execute("SELECT undo_seq, undone_seq FROM review_undo WHERE key = ?",
                                         [key]).fetchall()}
    double, out, before = is_double(con), [], None
    for seq, who, status, label, note, time in con.execute(
            f"SELECT seq, reviewer, status, label, note, time FROM ({queue.LOG} WHERE l.key = ?) ORDER BY seq",
            [key]).fetchall():
        over = None if double or before is None or before[0] == who or before[1] == "pending" else before[0]
        before = (who, status)
        if reviewer is None or who == reviewer:
            out.append({"seq": seq, "time": time, "reviewer": who, "status": status,
                        "label": label if status == "relabeled" else None, "note": note,
                        "undoes": undo.get(seq), "undone": seq in undo.values(), "overrides": over})
    return out


def decisions(con) -> dict[str, list[tuple[str, str, str | None, dt.datetime]]]:
    """Every decided image -> each reviewer's latest decision ``(reviewer, status, label, time)``, in the
    order of the reviewers' first decisions on it (pending is no decision)."""
    rows = con.execute(f"SELECT key, reviewer, status, label, time FROM ({LATEST}) "
                       "WHERE status <> 'pending' ORDER BY key, first_seq").fetchall()
    by_key: dict[str, list] = {}
    for key, *decision in rows:
        by_key.setdefault(key, []).append(tuple(decision))
    return by_key


def verdicts(con) -> dict[str, tuple[str, str | None, str | None, dt.datetime | None]]:
    """Double review: ``key -> (status, label, reviewer, time)`` of every image someone decided.

    The first two reviewers of an image (in the order of their first decision) settle it when their
    latest decisions agree (reviewer ``"ana & ben"``, the later time). When they disagree, the reviewers
    after them (adjudicators: on the page or with ``gensets review accept|reject|relabel --reviewer
    NAME``) settle it when all their latest decisions agree; until then the status is ``disputed``.
    An image decided by one reviewer only is ``pending`` (accepted or relabeled) or ``held`` (rejected:
    counted as pending, but never published).
    """
    return {key: outcome(ds) for key, ds in decisions(con).items()}


def outcome(ds: Sequence[tuple]) -> tuple[str, str | None, str | None, dt.datetime | None]:
    """The outcome of one image (:func:`verdicts`) from its reviewers' latest decisions ``(reviewer, status, label,
    time, ...)`` in the order of their first decision on it (:func:`decisions`; pending is no decision)."""
    if len(ds) < 2:
        return ("held" if ds[0][1] == "rejected" else "pending", None, None, None)
    deciders = ds[:2] if category(*ds[0][1:3]) == category(*ds[1][1:3]) else ds[2:]
    if not deciders or len({category(d[1], d[2]) for d in deciders}) > 1:
        return ("disputed", None, None, None)
    status, label = deciders[-1][1:3]
    return (status, label, " & ".join(d[0] for d in deciders), max(d[3] for d in deciders))


def summary(con) -> dict:
    """What the dataset card says about the review (finalize records it in manifest.json, so the card never
    opens a database): how many people decided how many images, in double review how many images two reviewers
    decided and their agreement (observed, and Cohen's kappa of the first two decisions; null when undefined),
    and the decisions by kind (latest per reviewer and image); in double review also ``agreement``: per class
    and per nuisance kind, with the confusion table of the two reviewers' decisions (:func:`agreement`)."""
    ds = decisions(con)
    a = agreement(con, ds)
    kinds: dict[str, int] = {}
    for d in ds.values():
        for _, status, _, _ in d:
            kinds[status] = kinds.get(status, 0) + 1
    double = is_double(con)
    out = {"double": double, "reviewers": len({r for d in ds.values() for r, *_ in d}),
           "decided": len(ds), "decisions": dict(sorted(kinds.items())), "double_reviewed": a["items"],
           "observed_agreement": a["observed_agreement"], "kappa": a["kappa"]}
    if double and a["items"]:
        out["agreement"] = {k: a[k] for k in ("confusion", "by_class", "by_nuisance")}
    return out


def _kappa(a: list, b: list) -> float | None:
    from ..metrics import (
        cohen_kappa,  # lazy: numpy, off the build command's path (strict pins numpy's kernels before it loads)
    )

    k = cohen_kappa(a, b)
    return None if k != k else round(k, 4)  # NaN (one label only) -> null


def _agreeing(cats: list[tuple[str, str]]) -> dict:
    """Two reviewers' decisions ``(first, second)`` on some images: how many, the share they agree on, Cohen's
    kappa (null when undefined) and the confusion table (``labels``; ``counts[i][j]``: the images the first
    reviewer decided ``labels[i]`` and the second ``labels[j]``)."""
    labels = sorted({c for pair in cats for c in pair})
    index = {c: i for i, c in enumerate(labels)}
    counts = [[0] * len(labels) for _ in labels]
    for a, b in cats:
        counts[index[a]][index[b]] += 1
    return {"items": len(cats), "observed_agreement": round(sum(a == b for a, b in cats) / len(cats), 4),
            "kappa": _kappa([a for a, _ in cats], [b for _, b in cats]), "confusion": {"labels": labels,
                                                                                   "counts": counts}}


def agreement(con, ds: dict | None = None) -> dict:
    """Agreement of the first two reviewers (in the order of their first decision) of every image decided by at
    least two: ``items``, ``reviewed_once`` (decided by one so far), Cohen's ``kappa`` and ``observed_agreement``
    with the ``confusion`` table of their decisions (accepted, rejected, relabeled:<class>; :func:`_agreeing`),
    the same per pair of reviewers (``pairs``), per class (``by_class``: the prompted class) and per nuisance kind
    (``by_nuisance``: the config), and the ``disagreements`` (key -> each reviewer's decision). ``ds``: the
    :func:`decisions` already read."""
    ds = decisions(con) if ds is None else ds
    by_key = {key: [(reviewer, category(status, label)) for reviewer, status, label, _ in d] for key, d in ds.items()}
    pairs = {k: v[:2] for k, v in by_key.items() if len(v) >= 2}
    out = {"items": len(pairs), "reviewed_once": sum(len(v) == 1 for v in by_key.values()), "kappa": None,
           "observed_agreement": None, "confusion": {"labels": [], "counts": []}, "pairs": [], "by_class": {},
           "by_nuisance": {}, "disagreements": []}
    if not pairs:
        return out
    cats = {k: (v[0][1], v[1][1]) for k, v in pairs.items()}
    whole = _agreeing(list(cats.values()))
    out.update({k: whole[k] for k in ("kappa", "observed_agreement", "confusion")})
    by_pair: dict[tuple, list] = {}
    for v in pairs.values():
        (ra, ca), (rb, cb) = sorted(v)
        by_pair.setdefault((ra, rb), []).append((ca, cb))
    out["pairs"] = [{"reviewers": [ra, rb], "items": len(c), "kappa": _kappa([x for x, _ in c], [y for _, y in c])}
                    for (ra, rb), c in sorted(by_pair.items())]
    facts = con.execute("SELECT key, label, config FROM samples WHERE list_contains(?, key)", [list(pairs)]).fetchall()
    for name, column in (("by_class", 1), ("by_nuisance", 2)):
        groups: dict[str, list] = {}
        for row in facts:
            groups.setdefault(str(row[column]), []).append(cats[row[0]])
        out[name] = {g: _agreeing(c) for g, c in sorted(groups.items())}
    out["disagreements"] = [{"key": k, "decisions": dict(v)} for k, v in sorted(pairs.items()) if v[0][1] != v[1][1]]
    return out


def undo(con, reviewer: str, n: int = 1) -> list[tuple[str, str, str | None, str | None]]:
    """Take back ``reviewer``'s ``n`` latest decisions still in effect, latest first: each is answered by a new
    decision of theirs that restores the image's state just before it (``(key, status, label, note)`` each, in
    that order; where nothing came before, pending, or below-quality as ingest had it), in one transaction; the log keeps both rows and
    ``review_undo`` says which undid which, so a second undo goes one decision further back, never undoes an undo.

    Before means, in double review, this reviewer's own previous decision on the image (each reviewer's latest
    counts); in single review the image's previous decision, whoever made it (the latest counts). In single
    review a decision somebody else followed with one of theirs on the same image is no longer this reviewer's to
    undo: it is passed over. Fewer than ``n`` (none) when there is no more to undo within :data:`UNDO_DEPTH`."""
    reviewer = check_reviewer(reviewer)
    if not isinstance(n, int) or not 1 <= n <= UNDO_DEPTH:
        raise GensetsError(f"undo takes 1 to {UNDO_DEPTH} decisions, got {str(n)[:20]}")
    double = is_double(con)
    with transaction(con):
        skip = {seq for row in con.execute("SELECT undo_seq, undone_seq FROM review_undo").fetchall() for seq in row}
        mine = con.execute(f"SELECT seq, key FROM ({queue.LOG}) WHERE reviewer = ? ORDER BY seq DESC LIMIT ?",
                           [reviewer, UNDO_DEPTH]).fetchall()
        history: dict[str, list] = {}
        chosen = []
        for seq, key in mine:
            if len(chosen) == n:
                break
            if seq in skip:
                continue
            if key not in history:
                history[key] = con.execute(f"SELECT seq, reviewer, status, label, note FROM ({queue.LOG} "
                                           "WHERE l.key = ?) ORDER BY seq", [key]).fetchall()
            rows = history[key]
            if not double and any(s > seq and who != reviewer for s, who, *_ in rows):
                continue  # someone else decided this image since: theirs stands
            before = [r for r in rows if r[0] < seq and (not double or r[1] == reviewer)]
            status, label, note = before[-1][2:] if before else (_initial(con, key, double), None, None)
            chosen.append((seq, key, status, label if status == "relabeled" else None, note))
            skip.add(seq)
        if not chosen:
            return []
        # the rows this transaction appends get their rowids (queue.LOG's seq) at commit, after the log's last one
        first = con.execute("SELECT coalesce(max(rowid), -1) + 1 FROM review_log").fetchall()[0][0]
        record_in(con, [(key, status, label, reviewer, note) for _, key, status, label, note in chosen])
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
        con.executemany("INSERT INTO review_undo VALUES (?, ?, ?, ?, ?)",
                        [(first + i, seq, key, reviewer, now) for i, (seq, key, *_) in enumerate(chosen)])
    return [(key, status, label, note) for _, key, status, label, note in chosen]


def _initial(con, key: str, double: bool) -> str:
    """An image's status before anyone decided it: pending, or (single review) below-quality where its quality
    thresholds failed (state.ingest's rule)."""
    if double:
        return "pending"
    failed = con.execute("SELECT json_extract(meta, '$.quality.passed') = 'false' FROM samples WHERE key = ?",
                         [key]).fetchall()
    return state.BELOW_QUALITY if failed and failed[0][0] else "pending"


PSEUDONYM_KEY = "reviewer_pseudonym_key"  # the workspace's secret that pseudonyms of published emails are keyed by


def pseudonym_key(con) -> str:
    """The workspace's pseudonym key (a setting, made the first time): the same email gets the same pseudonym in
    every finalize of the workspace, and nobody without state.duckdb can tell whose it is."""
    import secrets

    key = state.setting(con, PSEUDONYM_KEY)
    if not key:
        key = secrets.token_hex(32)
        state.set_setting(con, PSEUDONYM_KEY, key)
    return key


def published_reviewer(name: str | None, key: str | None) -> str | None:
    """What a dataset publishes of a reviewer name (``"ana & ben"``: each part): an email (what identifies a person)
    as a pseudonym ``reviewer-<10 hex>`` (an HMAC under ``key``), unless ``key`` is None (``--publish-emails``);
    other names as they are."""
    import hashlib
    import hmac

    if not name or key is None:
        return name
    return " & ".join(
        f"reviewer-{hmac.new(key.encode(), part.encode(), hashlib.sha256).hexdigest()[:10]}" if "@" in part else part
        for part in name.split(" & "))

