"""The locks (requirements/*lock.txt, written by `make lock`) are what `make venv` installs: every line pinned with
== and hashed, once; every requirement of pyproject.toml (and of requirements/lock.in) met by its pinned version;
lock.txt the subset of distributed.lock.txt at the same versions; and the environment `make venv` installed still
holds exactly the lock's versions (a stale .venv says so, and how to fix it). Offline and fast: nothing is resolved.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .conftest import ROOT

REQS = ROOT / "requirements"
LOCK, DISTRIBUTED = REQS / "lock.txt", REQS / "distributed.lock.txt"
# the stamp each `make venv*` target leaves in the venv it installed, and the lock it installed
STAMPS = {".gensets-distributed-installed": DISTRIBUTED, ".gensets-installed": LOCK}


def lock_extras() -> dict[Path, list[str]]:
    """The extras `make lock` compiles into each lock, read from its `$(COMPILE) ... --extra X -o FILE` lines."""
    lines = (ROOT / "Makefile").read_text().replace("$(LOCK)", "requirements/lock.txt").splitlines()
    return {ROOT / m.group(1): re.findall(r"--extra (\S+)", line)
            for line in lines if line.lstrip().startswith("$(COMPILE)") and (m := re.search(r" -o (\S+)", line))}


def read_lock(path: Path) -> list[tuple[Requirement, list[str]]]:
    """(requirement, its sha256 hashes) per entry, in file order; continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        spec, *hashes = line.split(" --hash=")
        out.append((Requirement(spec.strip()), [h.strip() for h in hashes]))
    return out


def pins(path: Path) -> dict[str, Version]:
    return {canonicalize_name(r.name): Version(next(iter(r.specifier)).version) for r, _ in read_lock(path)}


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def required(extras: list[str]) -> list[Requirement]:
    """What a lock covering ``extras`` must satisfy: pyproject's dependencies, those extras, its build system
    (`make venv` installs gensets with --no-build-isolation) and requirements/lock.in."""
    project = pyproject()
    lines = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    lines += [x for e in extras for x in project["project"]["optional-dependencies"][e]]
    lines += [x.split("#")[0].strip() for x in (REQS / "lock.in").read_text().splitlines()]
    return [Requirement(x) for x in lines if x]


def test_make_lock_writes_both_locks_and_every_extra():
    assert lock_extras() == {DISTRIBUTED: ["dev", "distributed", "distributed-dev"], LOCK: ["dev"]}
    assert set(lock_extras()[DISTRIBUTED]) == set(pyproject()["project"]["optional-dependencies"])


@pytest.mark.parametrize("path", [LOCK, DISTRIBUTED], ids=lambda p: p.name)
def test_every_line_is_pinned_and_hashed_once(path):
    entries = read_lock(path)
    assert len(entries) > 50
    bad = [str(r) for r, _ in entries
           if r.url or r.marker or len(r.specifier) != 1 or next(iter(r.specifier)).operator != "=="
           or "*" in str(r.specifier)]
    assert not bad, f"{path.name}: not pinned with == (one exact version, no marker): {bad}"
    unhashed = [str(r) for r, hashes in entries
                if not hashes or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes)]
    assert not unhashed, f"{path.name}: without sha256 hashes (pip --require-hashes refuses the lock): {unhashed}"
    names = [canonicalize_name(r.name) for r, _ in entries]
    assert len(names) == len(set(names)), f"{path.name}: listed twice: {sorted({n for n in names if names.count(n) > 1})}"


@pytest.mark.parametrize("path", [LOCK, DISTRIBUTED], ids=lambda p: p.name)
def test_the_lock_satisfies_pyproject(path):
    locked = pins(path)
    missing, outside = [], []
    for req in required(lock_extras()[path]):
        if req.marker and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        if name not in locked:
            missing.append(str(req))
        elif not req.specifier.contains(locked[name], prereleases=True):
            outside.append(f"{req} (locked {locked[name]})")
    assert not missing and not outside, (
        f"{path.name} does not satisfy pyproject.toml / requirements/lock.in: missing {missing}, outside "
        f"the specifier {outside}: run `make lock`")


def test_lock_is_the_subset_of_the_distributed_lock_at_the_same_versions():
    base, dist = {r.name: (str(r), h) for r, h in read_lock(LOCK)}, {r.name: (str(r), h) for r, h in read_lock(DISTRIBUTED)}
    differ = [base[n][0] for n in base if base[n] != dist.get(n)]
    assert not differ, f"lock.txt pins that distributed.lock.txt lacks or pins otherwise: {differ}: run `make lock`"
    assert {"ray", "s3fs", "moto"} <= set(dist) - set(base)


def test_the_installed_environment_is_the_lock():
    """In a venv `make venv` installed (its stamp is there), every locked package at the lock's version."""
    stamp = next((s for s in STAMPS if (Path(sys.prefix) / s).exists()), None)
    if stamp is None:
        pytest.skip(f"{sys.prefix} is not a venv `make venv` installed (no {' or '.join(STAMPS)} in it)")
    lock = STAMPS[stamp]
    stale = []
    for name, version in pins(lock).items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed) != version:
            stale.append(f"{name} {installed or 'missing'} (locked {version})")
    assert not stale, (
        f"{sys.prefix} differs from {lock.relative_to(ROOT)} in {len(stale)} package(s): {', '.join(stale)}. "
        f"The venv is stale: `make venv` reinstalls it from the lock (first `rm {Path(sys.prefix) / stamp}` if "
        f"make finds it up to date: a package was installed by hand).")
