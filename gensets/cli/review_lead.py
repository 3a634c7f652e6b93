"""gensets review, a team lead's view: progress per reviewer (progress), agreement per class and nuisance kind with
the confusion table of the two reviewers' decisions (agreement), and `review list --by reviewer`. Registered by
review.py."""

from __future__ import annotations

import json
import sys

from ..curation import reviewing


def add_parser(rsub) -> None:
    ag = rsub.add_parser("agreement", help="agreement of double review (Cohen's kappa, per class and nuisance kind, "
                         "confusion table)", description="Agreement of the first two reviewers of every image two "
                         "reviewers decided: Cohen's kappa and the observed agreement, per pair of reviewers, per "
                         "class and per nuisance kind (config), the confusion table of their decisions (rows: the "
                         "first reviewer's, columns: the second's) and the images they disagree on.")
    ag.add_argument("workspace")
    ag.add_argument("--json", action="store_true")
    ag.set_defaults(func=_agreement)
    pg = rsub.add_parser("progress", help="progress per reviewer: images decided, decisions, rate, images handed "
                         "out", description="Per reviewer: the images their latest decisions decide (accepted, "
                         "rejected, relabeled, flagged several objects), the decisions they made (undos included), "
                         "their first and latest, their rate per hour, and the images handed to them on an open page "
                         "now; then the queue's totals (in double review by verdict, with the disputed and held "
                         "images).")
    pg.add_argument("workspace")
    pg.add_argument("--json", action="store_true")
    pg.set_defaults(func=_progress)


def _table(rows: list[list]) -> None:
    for r in rows:
        print("\t".join("" if c is None else str(c) for c in r))


def _agreement(a) -> int:
    r = reviewing.agreement(a.workspace)
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    if not r["items"]:
        print(f"no image decided by two reviewers yet ({r['reviewed_once']} by one so far): no agreement to measure")
        return 0
    kappa = "undefined (one label only)" if r["kappa"] is None else r["kappa"]
    print(f"{r['items']} image(s) decided by two reviewers ({r['reviewed_once']} by one so far); "
          f"Cohen's kappa {kappa}; observed agreement {r['observed_agreement']}")
    for pair in r["pairs"]:
        print(f"  {' & '.join(pair['reviewers'])}: {pair['items']} image(s), kappa {pair['kappa']}")
    for name, title in (("by_class", "class"), ("by_nuisance", "nuisance kind")):
        if r[name]:
            print(f"per {title}:")
            _table([["", title, "images", "agreement", "kappa"],
                    *(["", g, s["items"], s["observed_agreement"], "undefined" if s["kappa"] is None else s["kappa"]]
                      for g, s in r[name].items())])
    c = r["confusion"]
    if c["labels"]:
        print("confusion table (rows: the first reviewer's decision, columns: the second's):")
        _table([["", "", *c["labels"]], *(["", lb, *row] for lb, row in zip(c["labels"], c["counts"], strict=True))])
    for d in r["disagreements"]:
        print(f"  disagree {d['key']}: " + ", ".join(f"{k} {v}" for k, v in d["decisions"].items()))
    return 0


def _progress(a) -> int:
    r = reviewing.progress(a.workspace)
    if a.json:
        print(json.dumps(r, default=str, indent=1))
        return 0
    cols = ["reviewer", "decided", "accepted", "rejected", "relabeled", "flagged", "decisions", "undos", "rate",
            "leased", "first", "last"]
    print("\t".join(c if c != "rate" else "rate/h" for c in cols))
    _table([[p[c] for c in cols] for p in r["reviewers"]])
    t = r["totals"]
    rest = ", ".join(f"{n} {k}" for k, n in t.items() if k not in ("images", "double_reviewed") and n)
    double = f"; double review: {t['double_reviewed']} image(s) decided by two reviewers or more" if r["double"] else ""
    print(f"{t['images']} image(s) in the review queue: {rest or 'none decided'}{double}", file=sys.stderr)
    return 0


def list_by_reviewer(a) -> int:
    """``review list --by reviewer``."""
    status = None if a.status in (None, "all") else a.status
    rows = reviewing.by_reviewer(a.workspace, status=status, label=a.label, config=a.config, limit=a.limit)
    if a.json:
        print(json.dumps(rows, default=str, indent=1))
        return 0
    if rows:
        print("reviewer\tkey\tstatus\tlabel\tnote\ttime")
    for r in rows:
        label = r["label"] if r["review_label"] is None else f"{r['label']} -> {r['review_label']}"
        print(f"{r['reviewer']}\t{r['key']}\t{r['status']}\t{label}\t{' '.join((r['note'] or '').split())}\t"
              f"{r['time']}")
    print(f"{len(rows)} decision(s) by {len({r['reviewer'] for r in rows})} reviewer(s)", file=sys.stderr)
    return 0
