"""What gensets has, as ``gensets list WHAT`` shows it: the registered builders, evaluation protocols, quality
metrics and reports, the tiny: and random: models, the configs under ./configs (else the packaged paper configs),
and every registered paper's published numbers and reproduce tables. Rows of name and description (and
kind-specific fields); ``lists``: the lists themselves (`gensets list` alone)."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

from .errors import GensetsError
from .models.random import packaged
from .models.tiny import built_kinds, built_model
from .registry import BUILDERS, PAPERS, PROTOCOLS, QUALITY_METRICS, REPORTS
from .reproduce import CONFIGS, tables

LISTS = ("builders", "configs", "protocols", "metrics", "reports", "models", "tables")
ABOUT = {"builders": "what a config's `builder` names: how a dataset is generated (gensets build)",
         "configs": "the configs under ./configs, else the paper configs gensets ships",
         "protocols": "how gensets eval scores a model (--protocol)",
         "metrics": "image-quality metrics (gensets score --metric)",
         "reports": "what gensets report KIND writes",
         "models": "tiny: and random: models, built offline (model specs)",
         "tables": "the papers' published numbers, and the tables of gensets reproduce"}


def doc(obj) -> str:
    """The first paragraph of an object's help, else its description, its docstring or its module's, for
    `gensets list`: Sphinx roles (:func:`x`) read as their names."""
    text = next((t for t in (getattr(obj, "help", None), getattr(obj, "description", None), obj.__doc__,
                             sys.modules[obj.__module__].__doc__) if isinstance(t, str) and t.strip()), "")
    line = " ".join(text.strip().split("\n\n")[0].replace("``", "").split())
    return re.sub(r":\w+:`~?([^`]*)`", r"\1", line)


def catalog(what: str) -> list[dict]:
    """What `gensets list WHAT` prints: rows of name and description (and kind-specific fields)."""
    if what == "builders":
        return [{"name": n, "description": doc(c)} for n, c in BUILDERS.items()]
    if what == "protocols":
        return [{"name": n, "description": doc(c)} for n, c in PROTOCOLS.items()]
    if what == "metrics":
        return [{"name": n, "description": doc(c), "variant": getattr(c, "variant", None)}
                for n, c in QUALITY_METRICS.items()]
    if what == "reports":
        return [{"name": n, "description": doc(c)} for n, c in REPORTS.items()]
    if what == "models":
        real = {**{k: packaged(k)["stands_for"] for k in ("sd2.1", "sd2.1-base", "sdxl")},
                **{k: v["stands_for"] for k, v in packaged("classifiers").items()}}
        return [{"name": f"{family}:{k}", "loaders": list(built_model(family, k).loaders),
                 "description": f"loaded by {', '.join(built_model(family, k).loaders)}"
                 + (f"; the architecture of {real[k]}, random weights (timing only)" if family == "random" else
                    "; small random weights, built offline (tests, demos)")}
                for family in ("tiny", "random") for k in built_kinds(family)]
    if what == "lists":  # `gensets list` alone: what it lists
        return [{"name": n, "description": ABOUT[n]} for n in LISTS]
    if what == "configs":
        return _configs(configs_folder())
    if what == "tables":  # every registered paper's published numbers, then its reproduce tables
        rows = [row for _, paper in PAPERS.items() for row in paper.published()]
        return rows + [{"name": f"reproduce:{t.name}", "description": f"gensets reproduce {t.name}: {t.what}"}
                       for t in tables().values()]
    raise GensetsError(f"gensets list: unknown {what!r} (expected one of {', '.join(LISTS)})")


def configs_folder() -> Path:
    """Where `gensets list configs` looks: ./configs (a checkout), else the paper configs gensets ships
    (:data:`gensets.reproduce.CONFIGS`, a checkout's configs/ copied into the package)."""
    here = Path.cwd() / "configs"
    return here if here.is_dir() and any(here.glob("*.yaml")) else CONFIGS


def _configs(folder: Path) -> list[dict]:
    """The configs of a folder, each named as `gensets build` takes it (relative to here when below it) with the
    first paragraph of its opening comment."""
    rows = []
    for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        lines = f.read_text(errors="replace").splitlines()
        head = [line.lstrip("#").strip() for line in itertools.takewhile(lambda t: t.startswith("#"), lines)]
        first = " ".join(itertools.takewhile(bool, head))  # the first paragraph of its opening comment
        name = f.relative_to(Path.cwd()) if f.is_relative_to(Path.cwd()) else f
        rows.append({"name": str(name), "description": first})
    return rows
