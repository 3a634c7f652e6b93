"""The review commands' work on a workspace (``gensets review list / accept / reject / relabel / mode /
agreement / progress / invite / revoke / export``): the workspace loaded, its state.duckdb required, opened
(read-only where nothing is written) and closed again; each function returns what the command prints."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from urllib.parse import urlsplit

from ..errors import GensetsError
from ..workspace import Workspace, refuse_own_file
from . import interchange, queue, review, reviewers, shared, state, team

PAGE = "http://127.0.0.1:8765/"  # the review page's address when no server runs and none is given


def page_url(value: str) -> str:
    """A review page's address as reviewers' browsers open it (``invite --url``): http(s), a host, no query or
    fragment."""
    u = urlsplit(value)
    if u.scheme not in ("http", "https") or not u.netloc or u.query or u.fragment:
        raise GensetsError(f"not an http(s) address of the review page: {value[:80]!r}")
    return value


def _workspace(workspace) -> tuple[Workspace, object, object]:
    """The workspace, its builder and config, once its state.duckdb is known to be there."""
    ws = Workspace(workspace)
    builder, cfg = ws.load()
    ws.require_state()
    return ws, builder, cfg


def history(workspace, key: str) -> list[dict]:
    """Every decision on sample ``key``, oldest first (``review list --history KEY``)."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path, read_only=True)
    try:
        return review.history(con, key)
    finally:
        con.close()


def outcomes(workspace, *, status: str | None, label: str | None = None, config: str | None = None,
             limit: int | None = None) -> list[dict]:
    """The samples of one outcome (every one: ``status`` None), as ``review list`` shows them."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path, read_only=True)
    try:
        return review.list_outcomes(con, status=status, label=label, config=config, limit=limit)
    finally:
        con.close()


def by_reviewer(workspace, *, status: str | None = None, label: str | None = None, config: str | None = None,
                limit: int | None = None) -> list[dict]:
    """``review list --by reviewer``: every reviewer's latest decision on each image they decided (aliases
    resolved), by reviewer then key: reviewer, key, status, label (a relabel's class), note, time, the sample's
    class and config; ``status``: only that decision."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path, read_only=True)
    try:
        q = (f"SELECT l.reviewer, l.key, l.status, CASE WHEN l.status = 'relabeled' THEN l.label END, l.note, l.time, "
             f"s.label, s.config FROM ({queue.LATEST.format(where='')}) l JOIN samples s USING (key) "
             "WHERE l.status <> 'pending' AND (? IS NULL OR l.status = ?) AND (? IS NULL OR s.label = ?) "
             "AND (? IS NULL OR s.config = ?) ORDER BY l.reviewer, l.key" + (" LIMIT ?" if limit else ""))
        rows = con.execute(q, [status, status, label, label, config, config, *([limit] if limit else [])]).fetchall()
    finally:
        con.close()
    cols = ("reviewer", "key", "status", "review_label", "note", "time", "label", "config")
    return [dict(zip(cols, r, strict=True)) for r in rows]


def progress(workspace) -> dict:
    """``review progress``: per reviewer and in all (:func:`team.progress`)."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path, read_only=True)
    try:
        return team.progress(con)
    finally:
        con.close()


def decide(workspace, action: str, keys: Sequence[str], *, all_pending: bool = False, label: str | None = None,
           reviewer: str | None = None, note: str | None = None) -> tuple[int, str]:
    """``review accept / reject / relabel``: (the samples decided, the status they got)."""
    ws, builder, cfg = _workspace(workspace)
    con = state.connect(ws.state_path)
    try:
        status = review.ACTIONS[action]
        keys = list(keys)
        if all_pending:
            keys += [r["key"] for r in review.list_queue(con, status="pending")]
        n = review.decide(con, keys, status, label=label, reviewer=reviewer, note=note,
                          valid_labels=builder.class_names(cfg))
    finally:
        con.close()
    return n, status


def mode(workspace, switch: str | None = None) -> str:
    """The workspace's review mode (single or double), after switching it to ``switch`` if given; every
    decision is kept."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path, read_only=switch is None)
    try:
        if switch is not None:
            review.set_mode(con, switch)
        return "double" if review.is_double(con) else "single"
    finally:
        con.close()


def agreement(workspace) -> dict:
    """Double review's agreement (Cohen's kappa, per pair, class and nuisance kind, the confusion table, the
    disagreements: :func:`review.agreement`)."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path, read_only=True)
    try:
        return review.agreement(con)
    finally:
        con.close()


def invite(workspace, name: str, *, role: str = "reviewer", expires: dt.timedelta | None = None,
           url: str | None = None) -> str:
    """A personal link to the review page for reviewer ``name`` (its token stored hashed): ``url``, else the
    running server's address, else :data:`PAGE`, with the token. A server bound to every address that found no
    address others reach recorded ``0.0.0.0``: the line says, after the link, that ``--url`` is needed."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path)
    try:
        token = reviewers.invite(con, name, role=role, expires=expires)
    finally:
        con.close()
    running = [s["url"] for s in shared.servers(ws.root)]
    base = url or (running[0] if running else PAGE)
    link = f"{base.rstrip('/')}/?token={token}"
    host = urlsplit(base).hostname or ""
    if host in ("0.0.0.0", "::"):
        link += (f"  (0.0.0.0 is no address a reviewer can open: give the one they reach, `gensets review invite "
                 f"{workspace} {name} --url http://ADDRESS:{urlsplit(base).port}/`)")
    return link


def revoke(workspace, name: str) -> int:
    """End every link of reviewer ``name``: how many there were."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path)
    try:
        return reviewers.revoke(con, name)
    finally:
        con.close()


def links(workspace) -> list[dict]:
    """Every link made: reviewer, role, created, expires, state (never a secret)."""
    ws, _, _ = _workspace(workspace)
    con = state.connect(ws.state_path)
    try:
        return reviewers.listing(con)
    finally:
        con.close()


def export(workspace, fmt: str, file: str, **options) -> int:
    """``review export``: the decisions written to ``file`` (and Label Studio's labeling config beside it),
    neither of them one of a workspace's own files; how many samples."""
    refuse_own_file(file, "--file")
    if fmt == "label-studio":
        refuse_own_file(f"{file}.label_config.xml", "--file")
    return interchange.export(workspace, fmt, file, **options)
