"""What a team lead reads of a review: progress per reviewer, and the disputes of double review.

:func:`progress` is ``gensets review progress`` and the page's team panel: per reviewer, the images their latest
decisions decide (by status, and flagged "several objects"), the decisions they made (undos included), when they
made their first and latest one and their rate, and the images handed to them now (:mod:`.leases`); with the
queue's totals (in double review: the verdicts, disputed and held images). :func:`disputes` lists the images whose
two reviewers disagree and nobody settled yet, with every reviewer's decision and note: the adjudication queue of
the page (disputes first, both decisions side by side), and what ``review export --status disputed`` writes for a
second opinion (:func:`disagreement`). Agreement itself (kappa, per class, per nuisance, the confusion table) is
:func:`gensets.curation.review.agreement`.
"""

from __future__ import annotations

from . import leases, queue, review
from .queue import has_flag

RATE_MIN_S = 60.0  # a rate per hour is counted over at least this long (two decisions a second apart: not 7200/h)


def progress(con) -> dict:
    """``{"reviewers": [...], "totals": {...}}``: per reviewer (by name, aliases resolved) ``decided`` (images their
    latest decision decides), ``accepted`` / ``rejected`` / ``relabeled``, ``flagged``, ``decisions`` (log rows,
    undos included), ``undos``, ``first`` / ``last`` (times, UTC, as text), ``rate`` (decisions per hour from the first to the
    last, over at least :data:`RATE_MIN_S`) and ``leased`` (images handed to them now); totals: ``images`` (in the
    review queue), the images by status (in double review by verdict: pending, accepted, rejected, relabeled,
    disputed, held) and, in double review, ``double_reviewed`` (images two reviewers or more decided)."""
    double = review.is_double(con)
    latest = con.execute(f"SELECT reviewer, status, note FROM ({queue.LATEST.format(where='')})").fetchall()
    log = con.execute(f"SELECT reviewer, count(*), min(time), max(time) FROM ({queue.LOG}) GROUP BY reviewer"
                      ).fetchall()
    undos = dict(con.execute("SELECT coalesce(a.reviewer, u.reviewer), count(*) FROM review_undo u LEFT JOIN "
                             "reviewer_aliases a ON a.alias = u.reviewer GROUP BY 1").fetchall())
    held = leases.held(con, leases.now())
    people: dict[str, dict] = {}

    def person(name: str) -> dict:
        return people.setdefault(name, {"reviewer": name, "decided": 0, "accepted": 0, "rejected": 0, "relabeled": 0,
                                        "flagged": 0, "decisions": 0, "undos": 0, "first": None, "last": None,
                                        "rate": None, "leased": 0})

    for who, status, note in latest:
        p = person(who)
        if status in review.STATUSES[1:]:
            p["decided"] += 1
            p[status] += 1
        p["flagged"] += has_flag(note)
    for who, n, first, last in log:
        p = person(who)
        span = max((last - first).total_seconds(), RATE_MIN_S) if first and last else RATE_MIN_S
        p.update(decisions=n, undos=undos.get(who, 0), first=None if first is None else str(first),
                 last=None if last is None else str(last), rate=round(n / span * 3600, 1))
    for who, n in held.items():
        person(who)["leased"] = n
    totals = {"images": 0, **{s: 0 for s in review.STATUSES}}
    rows = con.execute("SELECT key, status FROM reviews").fetchall()
    verdicts = review.verdicts(con) if double else {}
    for key, status in rows:
        status = verdicts.get(key, (status,))[0] if double and status != queue.BELOW else status
        totals["images"] += 1
        totals[status] = totals.get(status, 0) + 1
    if double:
        totals.update(disputed=totals.get("disputed", 0), held=totals.get("held", 0),
                      double_reviewed=sum(len(d) >= 2 for d in review.decisions(con).values()))
    return {"double": double, "reviewers": sorted(people.values(), key=lambda p: p["reviewer"]), "totals": totals}


def disputes(con, keys: list[str] | None = None) -> dict[str, list[dict]]:
    """Double review: every image whose verdict is disputed (:func:`review.verdict`), or those of ``keys`` ->
    each reviewer's latest decision on it ``{reviewer, status, label, note}``, in the order of their first decision
    (the first two disagree; a later one is an adjudication that did not settle it)."""
    where = "WHERE list_contains(?, key)" if keys is not None else ""
    rows = con.execute(f"SELECT key, reviewer, status, label, time, note FROM ({queue.LATEST.format(where=where)}) "
                       "WHERE status <> 'pending' AND key IN (SELECT key FROM queue WHERE n >= 2) "
                       "ORDER BY key, first_seq", [keys] if keys is not None else []).fetchall()
    by_key: dict[str, list] = {}
    for key, *d in rows:
        by_key.setdefault(key, []).append(tuple(d))
    return {key: [{"reviewer": r, "status": s, "label": lb if s == "relabeled" else None, "note": note}
                  for r, s, lb, _, note in ds]
            for key, ds in by_key.items() if review.outcome(ds)[0] == "disputed"}


def disagreement(decisions: list[dict]) -> str:
    """A dispute in one line, for a second opinion (the CSV's and Label Studio's ``disagreement``): ``ana:
    accepted; ben: relabeled -> mug (several objects)``."""
    def one(d):
        what = d["status"] + (f" -> {d['label']}" if d["label"] else "")
        note = (d["note"] or "").strip()
        return f"{d['reviewer']}: {what}" + (f" ({note})" if note else "")

    return "; ".join(one(d) for d in decisions)

