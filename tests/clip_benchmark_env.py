"""clip_benchmark 1.6.2 in its own environment, next to gensets', for parity tests and benchmarks.

clip_benchmark's ``accuracy()`` crashes on numpy 2.4, so it cannot run in gensets' venv. Its environment
is a small venv that holds only clip_benchmark, numpy<2.4, requests and pycocoevalcap (imported by its
CLI, unused for classification), installed with ``--no-deps``, plus a ``.pth`` file that appends this
interpreter's site-packages: torch, torchvision, open_clip, webdataset, scikit-learn ... are gensets'
own, never reinstalled, and the venv's numpy shadows the 2.4 one because the venv's own site-packages
come first on ``sys.path``.

Built once (about 20 s) under ``$GENSETS_CLIP_BENCHMARK_VENV`` or ``<gensets cache>/clip-benchmark-venv-<hash>``
(one per gensets venv), reused while a probe imports everything from the right places.

Also here, shared by tests/test_clip_benchmark_parity.py and benchmarks/eval_throughput.py:
a dataset in clip_benchmark's wds layout that is at the same time a gensets Hub-style folder
(``write_dataset``), open_clip ``local-dir:`` models built from configs (``make_open_clip``), and a
driver that runs clip_benchmark's own code inside its environment (``run_driver``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
from pathlib import Path

CLIP_BENCHMARK = "clip_benchmark==1.6.2"
# --no-deps: clip_benchmark's own deps (torch, open_clip, webdataset, sklearn, transformers) are gensets';
# pycocoevalcap (104 MB, java jars) is only imported by its captioning metric, at CLI import time.
PACKAGES = [CLIP_BENCHMARK, "numpy<2.4", "requests", "pycocoevalcap"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
_STAMP = ".gensets-ready"


class Unavailable(RuntimeError):
    """pip could not install clip_benchmark (no registry, no such version): callers skip."""


def host_site_packages() -> list[str]:
    """This interpreter's site-packages (purelib, platlib, site's list), in order, without repeats."""
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    out: list[str] = []
    for p in paths:
        p = str(Path(p).resolve())
        if p not in out and Path(p).is_dir():
            out.append(p)
    return out


def default_dir(cache: str | os.PathLike | None = None) -> Path:
    """Where the environment lives: $GENSETS_CLIP_BENCHMARK_VENV, else one per host venv in the cache."""
    if os.environ.get("GENSETS_CLIP_BENCHMARK_VENV"):
        return Path(os.environ["GENSETS_CLIP_BENCHMARK_VENV"]).expanduser()
    if cache is None:
        cache = os.environ.get("GENSETS_CACHE") or Path.home() / ".cache" / "gensets"
    tag = hashlib.sha256("\n".join(host_site_packages() + [CLIP_BENCHMARK]).encode()).hexdigest()[:10]
    return Path(cache).expanduser() / f"clip-benchmark-venv-{tag}"


def env_vars(**extra: str) -> dict:
    env = {**os.environ, **OFFLINE, **extra}
    env.pop("PYTHONPATH", None)  # the .pth decides what the venv sees
    env.pop("PYTHONHOME", None)
    return env


_PROBE = textwrap.dedent("""
    import json, sys
    import numpy, torch, open_clip, webdataset, sklearn.metrics, requests
    import clip_benchmark.cli
    from clip_benchmark.metrics import zeroshot_classification
    print(json.dumps({"numpy": numpy.__version__, "numpy_file": numpy.__file__, "torch": torch.__version__,
                      "torch_file": torch.__file__, "open_clip": open_clip.__version__,
                      "clip_benchmark": clip_benchmark.cli.__file__, "prefix": sys.prefix}))
""")


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def probe(venv: Path) -> dict:
    """Import everything clip_benchmark needs in the venv; raise RuntimeError (with stderr) if it fails."""
    p = subprocess.run([str(python_of(venv)), "-c", _PROBE], capture_output=True, text=True,
                       env=env_vars(), timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"clip_benchmark environment {venv} does not work:\n{p.stderr[-3000:]}")
    info = json.loads(p.stdout.strip().splitlines()[-1])
    numpy_ver = tuple(int(x) for x in info["numpy"].split(".")[:2])
    if numpy_ver >= (2, 4) or not info["numpy_file"].startswith(str(venv.resolve())):
        raise RuntimeError(f"{venv}: numpy {info['numpy']} from {info['numpy_file']}, wanted <2.4 from the venv")
    host = host_site_packages()
    if not any(info["torch_file"].startswith(h) for h in host):
        raise RuntimeError(f"{venv}: torch comes from {info['torch_file']}, not from {host}")
    return info


def ensure_env(venv: str | os.PathLike | None = None, *, log=print) -> Path:
    """The python of a working clip_benchmark environment, built on first use (under a file lock).

    Raises Unavailable when pip cannot install the packages, RuntimeError when the built environment
    does not work (a real problem, not a reason to skip).
    """
    import fcntl

    venv = Path(venv) if venv else default_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _STAMP).is_file():
            try:
                probe(venv)
                return python_of(venv)
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                log(f"rebuilding {venv}: {str(e).splitlines()[0]}")
        shutil.rmtree(venv, ignore_errors=True)
        _build(venv, log)
        info = probe(venv)
        (venv / _STAMP).write_text(json.dumps(info, indent=1) + "\n")
        return python_of(venv)


def _build(venv: Path, log) -> None:
    log(f"building the clip_benchmark environment in {venv}")
    # venv of the same base interpreter; pip is this venv's (pip --python), no ensurepip needed
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True, text=True)
    new_site = Path(subprocess.run(
        [str(python_of(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # install BEFORE the .pth exists: pip then sees an empty environment and touches nothing of the host's
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(python_of(venv)), "install", "-q",
                        "--no-deps", "--disable-pip-version-check", "--no-input", *PACKAGES],
                       capture_output=True, text=True, env=env_vars(), timeout=600)
    if p.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-5:])
        raise Unavailable(f"pip cannot install {' '.join(PACKAGES)}: {tail}")
    (new_site / "zz-gensets-host.pth").write_text("\n".join(host_site_packages()) + "\n")


# ---------------------------------------------------------------- data and models

def write_dataset(root: str | os.PathLike, images, labels: list[int], class_names: list[str], *,
                  templates: list[str], shards: int = 2, extra: list[dict] | None = None,
                  name: str = "gensets-parity") -> Path:
    """``images`` (encoded webp bytes) as clip_benchmark's wds layout that is also a gensets card folder.

    clip_benchmark: ``root/test/{0..shards-1}.tar``, ``test/nshards.txt``, ``classnames.txt``,
    ``zeroshot_classification_templates.txt``. gensets: ``root/README.md`` declares one config whose
    test split is ``test/*.tar`` and whose ``cls`` is a class_label with ``class_names``.
    Samples are ``<key>.webp``, ``<key>.cls`` (and ``<key>.json`` from ``extra``), keys ``s00000``...
    """
    root = Path(root)
    (root / "test").mkdir(parents=True, exist_ok=True)
    if shards > 10:
        raise ValueError("at most 10 shards: gensets sorts shard names as text")
    n = len(images)
    per = -(-n // shards)
    for s in range(shards):
        with tarfile.open(root / "test" / f"{s}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(s * per, min(n, (s + 1) * per)):
                members = {"webp": images[i], "cls": str(labels[i]).encode()}
                if extra:
                    members["json"] = json.dumps(extra[i], sort_keys=True).encode()
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"s{i:05d}.{ext}")
                    info.size, info.mtime, info.mode = len(data), 0, 0o444
                    tf.addfile(info, io.BytesIO(data))
    (root / "test" / "nshards.txt").write_text(f"{shards}\n")
    (root / "classnames.txt").write_text("".join(c + "\n" for c in class_names))
    (root / "zeroshot_classification_templates.txt").write_text("".join(t + "\n" for t in templates))
    import yaml

    features = [{"name": "__key__", "dtype": "string"}, {"name": "webp", "dtype": "image"}]
    if extra:
        features.append({"name": "json", "struct": [{"name": "imagenet_ids", "sequence": "int64"}]})
    features.append({"name": "cls", "dtype": {"class_label": {"names": {str(i): c for i, c in enumerate(class_names)}}}})
    header = {
        "configs": [{"config_name": "default", "data_files": [{"split": "test", "path": "test/*.tar"}]}],
        "dataset_info": [{"config_name": "default", "features": features,
                          "splits": [{"name": "test", "num_bytes": 0, "num_examples": n}]}],
    }
    (root / "README.md").write_text(f"---\n{yaml.safe_dump(header, sort_keys=False)}---\n\n# {name}\n")
    return root


def tinted_images(n: int, n_classes: int, size: tuple[int, int], seed: int = 0):
    """(webp bytes, labels): each class a colour tint (plus a class-dependent gradient) with noise."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    tints = rng.uniform(30, 225, size=(n_classes, 3))
    labels = [int(c) for c in rng.permutation(np.arange(n) % n_classes)]
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    for c in labels:
        angle = 2 * np.pi * c / n_classes
        grad = (np.cos(angle) * xx / w + np.sin(angle) * yy / h)[..., None] * 60
        img = tints[c] + grad + rng.normal(0, 25, size=(h, w, 3))
        buf = io.BytesIO()
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "WEBP", quality=90)
        out.append(buf.getvalue())
    return out, labels


TINY_CLIP = {  # gensets.models.tiny's tiny:clip
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 8},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
SMALL_CLIP = {  # a small ViT at 96 px: the image tower costs more than decoding
    "embed_dim": 64,
    "vision_cfg": {"image_size": 96, "layers": 4, "width": 128, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


def make_open_clip(folder: str | os.PathLike, model_cfg: dict, seed: int = 0) -> Path:
    """A random open_clip model from ``model_cfg`` as a ``local-dir:`` folder (config + safetensors)."""
    import torch
    from open_clip.constants import OPENAI_DATASET_MEAN, OPENAI_DATASET_STD
    from open_clip.model import CLIP
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CLIP(**model_cfg)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "open_clip_model.safetensors"))
    preprocess = {"mean": list(OPENAI_DATASET_MEAN), "std": list(OPENAI_DATASET_STD),
                  "interpolation": "bicubic", "resize_mode": "shortest"}
    (folder / "open_clip_config.json").write_text(
        json.dumps({"model_cfg": model_cfg, "preprocess_cfg": preprocess}, indent=1) + "\n")
    return folder


# ---------------------------------------------------------------- clip_benchmark's own code, in its venv

DRIVER = textwrap.dedent('''
    """Run inside the clip_benchmark venv. argv[1]: JSON request; prints one JSON line."""
    import json, sys, time
    req = json.loads(sys.argv[1])
    import torch
    if req.get("threads"):
        torch.set_num_threads(req["threads"])
    import webdataset as wds
    from clip_benchmark import cli
    from clip_benchmark.datasets.builder import build_dataset
    from clip_benchmark.metrics import zeroshot_classification as zsc
    from clip_benchmark.models import load_clip

    out = {}
    if req["mode"] == "predictions":
        # clip_benchmark's own loader, dataset, text classifier and classification loop, kept per image
        model, transform, tokenizer = load_clip("open_clip", req["model"], "none", None, device="cpu")
        model.eval()
        ds = build_dataset(dataset_name="wds/" + req["name"], root=req["root"], transform=transform,
                           split="test", download=True, task="zeroshot_classification")
        loader = torch.utils.data.DataLoader(ds.batched(req["batch_size"]), batch_size=None, shuffle=False,
                                             num_workers=0)
        clf = zsc.zero_shot_classifier(model, tokenizer, ds.classes, ds.templates, "cpu", amp=False)
        logits, target = zsc.run_classification(model, clf, loader, "cpu", amp=False)
        # the keys in the order webdataset read them (no shard shuffle, one worker): checked on the labels
        raw = wds.WebDataset(req["root"] + "/test/{0..%d}.tar" % (req["shards"] - 1), shardshuffle=False)
        keys, cls = zip(*[(s["__key__"], int(s["cls"])) for s in raw])
        assert list(cls) == target.tolist(), "clip_benchmark read the samples in another order"
        acc1, = zsc.accuracy(logits, target, topk=(1,))
        out = {"keys": list(keys), "target": target.tolist(), "pred": logits.argmax(1).tolist(),
               "probs": torch.softmax(logits, 1).tolist(), "classes": ds.classes, "templates": ds.templates,
               "acc1": acc1}
    elif req["mode"] == "cli":
        # the CLI's own main_eval with its own arguments, timed without interpreter start-up and imports
        # (a warm-up run first when asked: lazy imports, allocator, thread pools)
        sys.argv = ["clip_benchmark", *req["argv"]]
        _, base = cli.get_parser_args()
        seconds = []
        for i in range(req.get("warmup", 0) + req.get("repeats", 1)):
            t = time.perf_counter()
            cli.main_eval(base)
            seconds.append(time.perf_counter() - t)
        out = {"seconds": seconds[req.get("warmup", 0):]}
    print(json.dumps(out))
''')


def run_driver(python: Path, request: dict, workdir: Path, timeout: float = 900) -> dict:
    script = Path(workdir) / "clip_benchmark_driver.py"
    script.write_text(DRIVER)
    p = subprocess.run([str(python), str(script), json.dumps(request)], capture_output=True, text=True,
                       env=env_vars(), cwd=workdir, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"clip_benchmark driver failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_cli(python: Path, args: list[str], workdir: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """``clip_benchmark ARGS`` as a user runs it (python -m clip_benchmark.cli), in its environment."""
    p = subprocess.run([str(python), "-m", "clip_benchmark.cli", *args], capture_output=True, text=True,
                       env=env_vars(), cwd=workdir, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"clip_benchmark {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return p

