"""idealo's imagededup (and faiss-cpu) in an environment of their own, next to gensets', for the audit's parity test
and benchmark, built the way tests/clip_benchmark_env.py builds clip_benchmark's: a small venv holding only
``imagededup``, ``PyWavelets`` and ``faiss-cpu``, installed with ``--no-deps``, plus a ``.pth`` file that appends this
interpreter's site-packages (numpy, scipy, PIL, torch, torchvision, scikit-learn, matplotlib, tqdm: gensets' own,
never reinstalled). Built once under ``<gensets cache>/imagededup-venv-<hash>`` (or ``$GENSETS_IMAGEDEDUP_VENV``)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .clip_benchmark_env import Unavailable, env_vars, host_site_packages, python_of

PACKAGES = ["imagededup==0.3.3.post2", "PyWavelets", "faiss-cpu"]
_STAMP = ".gensets-ready"
_PROBE = ("import json, imagededup, faiss, numpy; from imagededup.methods import PHash, DHash; "
          "print(json.dumps({'imagededup': imagededup.__file__, 'faiss': faiss.__version__, 'numpy': numpy.__file__}))")


def default_dir() -> Path:
    if os.environ.get("GENSETS_IMAGEDEDUP_VENV"):
        return Path(os.environ["GENSETS_IMAGEDEDUP_VENV"]).expanduser()
    cache = Path(os.environ.get("GENSETS_CACHE") or Path.home() / ".cache" / "gensets").expanduser()
    tag = hashlib.sha256("\n".join(host_site_packages() + PACKAGES).encode()).hexdigest()[:10]
    return cache / f"imagededup-venv-{tag}"


def probe(venv: Path) -> dict:
    p = subprocess.run([str(python_of(venv)), "-c", _PROBE], capture_output=True, text=True, env=env_vars(), timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"imagededup environment {venv} does not work:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def ensure_env(venv: Path | None = None) -> Path:
    """The python of a working imagededup environment, built on first use; Unavailable when pip cannot install."""
    venv = Path(venv) if venv else default_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _STAMP).is_file():
            try:
                probe(venv)
                return python_of(venv)
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
                pass
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        site = Path(subprocess.run([str(python_of(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
        p = subprocess.run([sys.executable, "-m", "pip", "--python", str(python_of(venv)), "install", "-q", "--no-deps",
                            "--disable-pip-version-check", "--no-input", *PACKAGES],
                           capture_output=True, text=True, env=env_vars(), timeout=600)
        if p.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            raise Unavailable(f"pip cannot install {' '.join(PACKAGES)}: "
                              + " ".join((p.stderr or p.stdout).strip().splitlines()[-3:]))
        (site / "zz-gensets-host.pth").write_text("\n".join(host_site_packages()) + "\n")
        info = probe(venv)
        (venv / _STAMP).write_text(json.dumps(info) + "\n")
        return python_of(venv)


HASHES = """
import json, sys
import numpy as np
from PIL import Image
from imagededup.methods import PHash, DHash
files = json.loads(sys.argv[1])
p, d = PHash(verbose=False), DHash(verbose=False)
print(json.dumps({f: [p.encode_image(image_file=f), d.encode_image(image_file=f)] for f in files}))
"""


def imagededup_hashes(python: Path, files: list[str]) -> dict[str, tuple[str, str]]:
    """imagededup's own PHash and DHash (hex strings) of each file, computed in its environment."""
    p = subprocess.run([str(python), "-c", HASHES, json.dumps(files)], capture_output=True, text=True, env=env_vars(),
                       timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"imagededup failed:\n{p.stderr[-3000:]}")
    return {k: tuple(v) for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}
