"""gensets review: the queue (list, accept, reject, relabel), the page in the browser and its personal links
(serve, invite, revoke), single / double review (mode), CSV and Label Studio files (export, import); a team
lead's view (progress, agreement) is review_lead.py, registered here."""

from __future__ import annotations

import json
import os
import sys

from ..config import page_size, port, positive_int
from ..curation import interchange, leases, reviewers, reviewing
from ..curation.serving import serve
from ..errors import GensetsError
from . import review_lead
from .common import argument


def add_parser(sub) -> None:
    r = sub.add_parser("review", help="the review queue (list, accept, reject, relabel), its page (serve, invite, "
                       "revoke), double review (mode, agreement), a lead's view (progress), files (export, import)")
    rsub = r.add_subparsers(dest="action", required=True, metavar="ACTION")
    rl = rsub.add_parser("list", help="list the samples still to review (--status all: every sample, with "
                         "its reviewer and note)", description="The pending samples by default (those finalize "
                         "leaves out until decided); --status picks another outcome, all lists every sample. "
                         "Columns: key, status, label, nuisance, reviewer, note, prompt.")
    rl.add_argument("workspace")
    rl.add_argument("--status", default=None,
                    choices=["pending", "accepted", "rejected", "relabeled", "below-quality", "disputed", "held",
                             "all"], help="default pending (with --by reviewer: all); in double review, the outcome "
                    "finalize sees (disputed: the reviewers disagree; held: rejected by its one reviewer so far), not "
                    "each image's last decision")
    rl.add_argument("--by", choices=["reviewer"], help="reviewer: every reviewer's own latest decision on each image "
                    "they decided, by reviewer (columns: reviewer, key, status, label, note, time); --status "
                    "filters their decisions")
    rl.add_argument("--label", help="only this class")
    rl.add_argument("--config", help="only this config (nuisance kind)")
    rl.add_argument("--limit", type=positive_int)
    rl.add_argument("--json", action="store_true")
    rl.add_argument("--history", metavar="KEY", help="instead: every decision on sample KEY, oldest first (seq, "
                    "time, reviewer, what, undo / override, note)")
    for action, text in (("accept", "accept samples"), ("reject", "reject samples"),
                         ("relabel", "give samples another class (and accept them)")):
        ra = rsub.add_parser(action, help=text)
        ra.add_argument("workspace")
        ra.add_argument("keys", nargs="*", metavar="KEY")
        if action == "relabel":
            ra.add_argument("--to", required=True, metavar="CLASS", help="the new class name")
        else:
            ra.add_argument("--all-pending", action="store_true", help=f"{action} every pending sample")
        ra.add_argument("--reviewer", help="who decides, published with the decision (default: $GENSETS_REVIEWER; "
                        "one of them is needed)")
        ra.add_argument("--note")
    r.set_defaults(func=_review)
    _add_team(rsub)
    md = rsub.add_parser("mode", help="show or switch single / double review (decisions kept)",
                         description="Without MODE: the workspace's review mode. single: each image's latest "
                         "decision counts again (whoever made it); double: two reviewers per image (as serve "
                         "--double). Nothing logged is changed, so switching back and forth loses no decision.")
    md.add_argument("workspace")
    md.add_argument("mode", nargs="?", choices=["single", "double"])
    md.set_defaults(func=_mode)
    review_lead.add_parser(rsub)
    _add_exchange(rsub)


def _add_team(rsub) -> None:
    rs = rsub.add_parser("serve", help="review in the browser: a page served on loopback",
                         description="Serve the review page: pending images in a grid with their class, "
                         "nuisance, prompt and the surrogates' top-5; keys a accept, r reject, l relabel, "
                         "s several objects, z undo, + zoom, arrows or j/k move, n/p page, ? every key; shift-click "
                         "a range and accept or reject it at once. Each decision is saved in state.duckdb at "
                         "once; the server gives it up whenever another gensets process asks, so review commands, "
                         "finalize and other servers work beside it. Every page needs a link, on loopback too: serve prints "
                         "yours (a secret for this run); others get theirs from gensets review invite.")
    rs.add_argument("workspace")
    rs.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (loopback only)")
    rs.add_argument("--port", type=port, default=8765, help="default 8765; 0 picks a free port")
    rs.add_argument("--reviewer", help="the default reviewer name on the page when nobody is invited (default: "
                    "$GENSETS_REVIEWER, else each reviewer types theirs)")
    rs.add_argument("--double", action="store_true",
                    help="double review: each image needs two reviewers; each sees their own decisions")
    rs.add_argument("--page-size", type=page_size, default=60,
                    metavar="N", help="images per page of a view that hands nothing out (all, accepted, ...; "
                    "default 60)")
    rs.add_argument("--hand-out", type=page_size, default=leases.HAND_OUT, metavar="N",
                    help=f"images handed to a reviewer at a time on the \"to review\" page (default "
                    f"{leases.HAND_OUT}: what one sees and decides in about a minute, at five seconds an image); "
                    "other reviewers' pages pass them over while the page is open, and get them "
                    f"{int(leases.LEASE_S)} s after it closes; n draws the next ones")
    rs.set_defaults(func=_serve)
    iv = rsub.add_parser("invite", help="a personal link to the review page for a reviewer",
                         description="Print a link with a secret token for reviewer NAME (state.duckdb keeps only "
                         "its sha256). Whoever opens it reviews as NAME (never a name typed on the page), in "
                         "NAME's role; pages already open, the owner's included, are unaffected. --list says who "
                         "holds which link (never a secret), --revoke NAME ends NAME's links.")
    iv.add_argument("workspace")
    iv.add_argument("name", metavar="NAME", nargs="?")
    iv.add_argument("--role", choices=["reviewer", "adjudicator"], help="reviewer (default) or adjudicator: in "
                    "double review only an adjudicator settles an image two reviewers disagree on")
    iv.add_argument("--expires", metavar="DURATION", help="the link ends after DURATION: 30m, 8h, 2d (default: "
                    "when revoked)")
    iv.add_argument("--url", type=argument(reviewing.page_url), help="the page's address as reviewers reach it "
                    "(default: the running server's, else http://127.0.0.1:8765/)")
    iv.add_argument("--list", action="store_true", help="list every link made: reviewer, role, created, expires, "
                    "state (valid, expired, revoked)")
    iv.add_argument("--revoke", metavar="NAME", help="end every link of reviewer NAME")
    iv.add_argument("--json", action="store_true", help="with --list: the links as a JSON list of {reviewer, role, "
                    "created, expires, state, revoked}")
    iv.set_defaults(func=_invite, action="invite")
    rv = rsub.add_parser("revoke", help="end every personal link of a reviewer (as review invite --revoke)")
    rv.add_argument("workspace")
    rv.add_argument("name", metavar="NAME")
    rv.set_defaults(func=_invite, action="revoke", revoke=None, list=False, role=None, expires=None, url=None)


def _add_exchange(rsub) -> None:
    for action in ("export", "import"):
        rx = rsub.add_parser(action, help=f"{action} review decisions as CSV or Label Studio JSON",
                             description="CSV columns: key,status,label,reviewer,note. Label Studio: tasks with "
                             "the image as a data: URI and the surrogates' top-1 as predictions (+ a labeling "
                             "config beside the file); import reads Label Studio's JSON export: the snapshot "
                             "export with emails, or Export -> JSON with --users. Imports check every row first "
                             "and write nothing if one is bad (named as file:line, or the task).")
        rx.add_argument("workspace")
        rx.add_argument("--format", required=True, choices=["label-studio", "csv"])
        if action == "export":
            rx.add_argument("--file", "--output", dest="file", required=True, metavar="FILE",
                            help="where the export is written (--output: the same)")
            rx.add_argument("--status", default="all",
                            choices=["all", "pending", "accepted", "rejected", "relabeled", "disputed"],
                            help="disputed (double review): the images whose reviewers disagree, each pending with "
                            "their decisions in a column (CSV) or field (Label Studio) `disagreement`, for a second "
                            "opinion; imported back, its decisions adjudicate")
            rx.add_argument("--images", choices=["base64", "url", "local-files"], default="base64",
                            help="Label Studio: each image in its task as base64 (default: self-contained, ~10 KB "
                            "per small image), as a URL of `gensets review serve` (url, with --base-url), or "
                            "written under --root for Label Studio's local-files storage (local-files)")
            rx.add_argument("--base-url", metavar="URL", help="--images url: where `gensets review serve` answers, "
                            "e.g. http://127.0.0.1:8765")
            rx.add_argument("--root", metavar="DIR", help="--images local-files: Label Studio's "
                            "LOCAL_FILES_DOCUMENT_ROOT; images go to DIR/gensets-images/")
            rx.add_argument("--project", metavar="URL", help="Label Studio: the address of the project the tasks "
                            "are for (http://HOST:PORT/projects/ID), recorded with the export; without it, the "
                            "project of their first import. An import of them from another project is refused")
        else:
            rx.add_argument("--file", required=True, metavar="FILE", help="the file to import")
            rx.add_argument("--reviewer", help="for rows without one (default: $GENSETS_REVIEWER)")
            rx.add_argument("--users", metavar="FILE", help="Label Studio: who the numeric user ids of Export -> "
                            "JSON are: the JSON of GET /api/users, or {\"1\": \"a@b.c\"}")
            rx.add_argument("--double", action="store_true", help="put the workspace in double review (needed "
                            "when an image has decisions by several reviewers)")
        rx.set_defaults(func=_exchange)


def _review(a) -> int:
    if a.action == "list" and a.history:
        rows = reviewing.history(a.workspace, a.history)
        if a.json:
            print(json.dumps(rows, default=str, indent=1))
            return 0
        for r in rows:
            what = f"{r['status']} -> {r['label']}" if r["label"] else r["status"]
            why = [f"undoes #{r['undoes']}" if r["undoes"] is not None else "", "undone" if r["undone"] else "",
                   f"overrides {r['overrides']}" if r["overrides"] else ""]
            print(f"#{r['seq']}\t{r['time']}\t{r['reviewer']}\t{what}\t{'; '.join(w for w in why if w)}\t"
                  f"{' '.join((r['note'] or '').split())}")
        print(f"{len(rows)} decision(s) on {a.history}", file=sys.stderr)
        return 0
    if a.action == "list" and a.by:
        return review_lead.list_by_reviewer(a)
    if a.action == "list":
        status = a.status or "pending"
        rows = reviewing.outcomes(a.workspace, status=None if status == "all" else status, label=a.label,
                                  config=a.config, limit=a.limit)
        if a.json:
            print(json.dumps(rows, default=str, indent=1))
            return 0
        if rows:
            print("key\tstatus\tlabel\tnuisance\treviewer\tnote\tprompt")
        for r in rows:
            label = r["label"] if r["review_label"] == r["label"] else f"{r['label']} -> {r['review_label']}"
            print(f"{r['key']}\t{r['status']}\t{label}\t{r['nuisance']}\t{r['reviewer'] or ''}\t"
                  f"{' '.join((r['note'] or '').split())}\t{r['prompt']}")
        print(f"{len(rows)} sample(s)", file=sys.stderr)
        return 0
    all_pending = getattr(a, "all_pending", False)
    if all_pending and not a.keys and not reviewing.outcomes(a.workspace, status="pending", limit=1):
        print(f"nothing pending in {a.workspace}: every sample has a decision (gensets review list "
              f"{a.workspace} --status all)")
        return 0  # --all-pending run again: nothing left to do, not a mistake
    n, status = reviewing.decide(a.workspace, a.action, a.keys, all_pending=all_pending,
                                 label=getattr(a, "to", None), reviewer=a.reviewer, note=a.note)
    print(f"{n} sample(s) {status}")
    return 0


def _serve(a) -> int:
    try:
        serve(a.workspace, host=a.host, port=a.port, reviewer=a.reviewer, double=a.double, page_size=a.page_size,
              hand_out=a.hand_out)
    except KeyboardInterrupt:  # a signal during start-up
        pass
    print("review page stopped; every decision is in state.duckdb", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # serve() closed the database and the listening socket: end here, without the interpreter's teardown (a
    # second or more on a loaded machine) and whatever request threads still wait on open connections
    os._exit(0)


def _invite(a) -> int:
    """A personal link to the review page for reviewer NAME (its token stored hashed), their links revoked
    (``review revoke``, ``invite --revoke``), or every link listed (``invite --list``: never a secret)."""
    action = a.action if a.action == "revoke" else "revoke" if a.revoke else "list" if a.list else "invite"
    name = a.revoke or a.name
    if action == "invite" and not name:
        raise GensetsError("review invite: give the reviewer's NAME (or --list, or --revoke NAME)")
    if action != "invite" and a.action != "revoke" and (a.name or a.role or a.expires or a.url):
        raise GensetsError("review invite: --list and --revoke take no NAME, --role, --expires or --url")
    if getattr(a, "json", False) and action != "list":
        raise GensetsError("review invite: --json goes with --list (a new link is printed as it is)")
    expires = reviewers.duration(a.expires) if getattr(a, "expires", None) else None
    if action == "revoke":
        n = reviewing.revoke(a.workspace, name)
        print(f"{name}: {n} link(s) revoked (a running review page refuses them from now on)")
        return 0
    if action == "list":
        rows = reviewing.links(a.workspace)
        if a.json:
            print(json.dumps(rows, indent=1, default=str))
            return 0
        print("reviewer\trole\tcreated\texpires\tstate")
        for r in rows:
            print(f"{r['reviewer']}\t{r['role']}\t{r['created']}\t{r['expires'] or 'never'}\t{r['state']}"
                  + (f" {r['revoked']}" if r["revoked"] else ""))
        if not rows:
            print(f"nobody invited (gensets review invite {a.workspace} NAME)", file=sys.stderr)
        return 0
    print(reviewing.invite(a.workspace, name, role=a.role or "reviewer", expires=expires, url=a.url))
    until = f", valid for {a.expires}" if expires else ""
    print(f"the link above is {name}'s alone ({a.role or 'reviewer'}{until}): whoever opens it reviews as {name}; "
          f"`gensets review invite {a.workspace} --revoke {name}` ends it; pages already open are unaffected",
          file=sys.stderr)
    return 0


def _mode(a) -> int:
    """Show, or switch, the workspace's review mode (single or double); every decision is kept."""
    mode = reviewing.mode(a.workspace, a.mode)
    print(f"{mode} review" + ("" if a.mode is None else " (every decision kept; a running review page follows "
                              "it, reload it)"))
    return 0


def _exchange(a) -> int:
    if a.action == "export":
        n = reviewing.export(a.workspace, a.format, a.file, status=None if a.status == "all" else a.status,
                             images=a.images, base_url=a.base_url, root=a.root, project=a.project)
        extra = f" (+ {a.file}.label_config.xml)" if a.format == "label-studio" else ""
        print(f"{a.file}: {n} sample(s){extra}")
        return 0
    r = interchange.import_(a.workspace, a.format, a.file, reviewer=a.reviewer, users=a.users, double=a.double)
    withdrawn = f", {r['withdrawn']} withdrawn" if r["withdrawn"] else ""
    print(f"{a.file}: {r['rows']} row(s): {r['recorded']} decision(s) recorded, {r['unchanged']} unchanged"
          + withdrawn)
    for note in r["notes"]:
        print(f"note: {note}", file=sys.stderr)
    return 0
