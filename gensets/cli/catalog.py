"""gensets list: what gensets has (gensets.catalog), as text or JSON."""

from __future__ import annotations

import json
import sys

from ..catalog import LISTS, catalog, configs_folder


def add_parser(sub) -> None:
    ls = sub.add_parser("list", help="what gensets has: builders, configs, protocols, metrics, reports, models, tables",
                        description="List the registered builders, evaluation protocols, quality metrics and reports, "
                        "the tiny: and random: models, the configs under ./configs (else the paper configs gensets "
                        "ships), and the papers' published tables packaged for comparison. Alone: the lists.")
    ls.add_argument("what", choices=LISTS, nargs="?", help="the list to print (none: the lists there are)")
    ls.add_argument("--json", action="store_true", help="a JSON list of {name, description, ...}")
    ls.set_defaults(func=_list)


def _list(a) -> int:
    rows = catalog(a.what or "lists")
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:  # the text listing keeps each description to one line; --json has them whole
        d = r["description"]
        print(f"{r['name']:<{width}}  {d if len(d) <= 110 else d[:107] + '...'}")
    if not a.what:
        print("gensets list WHAT prints one (--json: as JSON)", file=sys.stderr)
    elif a.what == "configs" and rows and not rows[0]["name"].startswith("configs/"):
        print(f"(no ./configs here: the paper configs gensets ships, in {configs_folder()})", file=sys.stderr)
    return 0
