"""`gensets card`: the YAML header the Hub and load_dataset read, the body, figures and a leaderboard."""

import datetime as dt
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from .conftest import run_cli


def make_results_db(path: Path, configs=("background", "texture", "material"), *, dataset="gensets/imagenet-d-smoke",
                    revision=None, top1=(0.25, 0.5)) -> Path:
    """A results database with two fake runs per config (no model is run)."""
    from gensets.evaluation import store

    con = store.connect(path)
    now = dt.datetime(2026, 1, 1)
    for i, model in enumerate(("timm:resnet50.a1_in1k", "open_clip:ViT-B-32/openai")):
        for config in configs:
            run = {"dataset": dataset, "dataset_revision": revision, "config": config,
                   "split": "test", "model": model, "model_id": model, "model_revision": None,
                   "protocol": "imagenet", "label_space": "model (1000)", "n": 12, "started": now,
                   "finished": now, "seconds": 1.0, "images_per_second": 12.0, "versions": {}}
            store.write_run(con, run, [], [{"name": "top1", "value": top1[i], "lo": top1[i] - 0.1, "hi": top1[i] + 0.1},
                                           {"name": "top5", "value": 0.9, "lo": None, "hi": None}])
    con.close()
    return path


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_card_header_body_and_figures(reference, tmp_path):
    import datasets
    from huggingface_hub import DatasetCard
    from PIL import Image

    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    folder = ws / "dataset"
    before = digest(folder)
    r = run_cli("card", ws, check=0)
    assert "README.md" in r.stdout
    assert digest(folder) == before  # the same renderer as finalize: byte-identical, figures included
    assert {"figures/images_per_class.png", "figures/samples.png"} <= set(before)

    card = DatasetCard.load(folder / "README.md")
    data = card.data.to_dict()
    assert data["pretty_name"].startswith("ImageNet-D smoke test")
    assert data["license"] == "mit"
    assert data["task_categories"] == ["image-classification"]
    assert data["size_categories"] == ["n<1K"]
    assert data["annotations_creators"] == ["machine-generated"]
    assert data["source_datasets"] == ["original"]
    assert {"synthetic", "webdataset", "benchmark"} <= set(data["tags"])
    assert [c["config_name"] for c in data["configs"]] == ["background", "texture", "material"]
    sizes = {i["config_name"]: i["splits"][0]["num_examples"] for i in data["dataset_info"]}
    assert sizes == {"background": 18, "texture": 12, "material": 12}
    body = card.text
    for section in ("#### Data Collection and Processing (how it was built)", "#### Curation funnel",
                    "## Images per class", "## Sample images",
                    "## How to load", "## Citation", "zhang2024imagenetd", "figures/images_per_class.png",
                    "figures/samples.png", "`tiny:resnet`", "| surrogate |", "a photo of a {cls} in the {nuisance}"):
        assert section in body, section
    assert "Baseline leaderboard" not in body
    for rel in ("figures/images_per_class.png", "figures/samples.png"):
        with Image.open(folder / rel) as im:
            assert im.format == "PNG" and im.width >= 600 and "Software" not in im.info

    # load_dataset honours the configs and features the card declares
    assert datasets.get_dataset_config_names(str(folder)) == ["background", "texture", "material"]
    ds = datasets.load_dataset(str(folder), "material", split="test")
    assert len(ds) == 12 and isinstance(ds.features["cls"], datasets.ClassLabel)
    assert len(ds.features["cls"].names) == 113 and isinstance(ds.features["jpg"], datasets.Image)


def test_card_with_leaderboard(reference, tmp_path):
    from huggingface_hub import DatasetCard

    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    build = json.loads((ws / "dataset" / "manifest.json").read_text())["build"]
    db = tmp_path / "results.duckdb"
    # `gensets eval WS` records the dataset folder with the build's fingerprint as its revision; another
    # dataset with the same config names, and another build at the same path, must not leak in
    make_results_db(db, dataset=str(ws / "dataset"), revision=build)
    make_results_db(db, dataset="org/other-imagenet-d", revision="0" * 16, top1=(0.99, 0.98))
    make_results_db(db, dataset=str(ws / "dataset"), revision="f" * 16, top1=(0.97, 0.96))
    run_cli("card", ws, "--db", db, check=0)
    text = (ws / "dataset" / "README.md").read_text()
    assert "## Baseline leaderboard" in text
    board = text.split("## Baseline leaderboard")[1].split("\n## ")[0]
    rows = [line for line in board.splitlines() if line.startswith("| `")]
    assert len(rows) == 6 and not any(x in board for x in ("other-imagenet-d", "99.0", "97.0", "| dataset |"))
    assert rows[0].startswith("| `open_clip:ViT-B-32/openai` | background | test | imagenet | 12 | 50.0 (40.0-60.0) | 90.0 |")
    assert DatasetCard.load(ws / "dataset" / "README.md").data.to_dict()["configs"]  # the header is untouched
    again = run_cli("card", ws, check=0)  # without --db the leaderboard goes away again
    assert again.returncode == 0 and "Baseline leaderboard" not in (ws / "dataset" / "README.md").read_text()


def test_card_errors_in_one_line(tmp_path, reference):
    ws = tmp_path / "ws"
    shutil.copytree(reference, ws, ignore=shutil.ignore_patterns("dataset"))
    r = run_cli("card", ws)
    assert r.returncode == 2 and "gensets finalize" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    shutil.copytree(reference / "dataset", ws / "dataset")
    r = run_cli("card", ws, "--db", tmp_path / "missing.duckdb")
    assert r.returncode == 2 and "missing.duckdb" in r.stderr and "Traceback" not in r.stderr


def test_task_categories_come_from_the_builder():
    """A VQA set is declared visual-question-answering; ImageNet-D (above) image-classification."""
    from gensets.cards.card import header
    from gensets.workspace import load_build_config

    from .conftest import ROOT

    builder, cfg = load_build_config(ROOT / "configs" / "vqa.smoke.yaml")
    manifest = {"counts": {"default": 2}, "shards": [{"config": "default", "nbytes": 10}]}
    assert header(builder, cfg, manifest)["task_categories"] == ["visual-question-answering"]


@pytest.mark.parametrize("n, name", [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (250_000, "100K<n<1M")])
def test_size_category(n, name):
    from gensets.cards.card import size_category

    assert size_category(n) == name


def test_card_config_shows_no_local_paths_and_cuts_long_lists():
    from gensets.cards.card import _short_config

    cfg = {"imports": [{"path": "/home/ana/photos/clocks", "source": "people"}],
           "dataset": "folder:/home/ana/refs", "reference": {"source": "hf:org/refs"},
           "questions_data": [{"q": i} for i in range(241)], "url": "https://example.org/a/b", "n": 3}
    out = _short_config(cfg)
    assert "/home/ana" not in repr(out)
    assert out["imports"][0] == {"path": ".../clocks", "source": "people"}
    assert out["dataset"] == "folder:.../refs" and out["reference"] == {"source": "hf:org/refs"}
    assert out["questions_data"][:8] == [{"q": i} for i in range(8)]
    assert out["questions_data"][8:] == ["... (241 in all)"]
    assert out["url"] == "https://example.org/a/b" and out["n"] == 3


@pytest.mark.parametrize("paths, pattern", [
    (["background/test-00000.tar"], "background/test-00000.tar"),
    (["b/test-00001.tar", "b/test-00000.tar"], "b/test-{00000..00001}.tar"),
    ([f"b/train-{i:05d}.tar" for i in range(12)], "b/train-{00000..00011}.tar"),
    (["b/test-00000.tar", "b/test-00002.tar"], "{b/test-00000.tar,b/test-00002.tar}"),  # a gap: listed
])
def test_shard_pattern(paths, pattern):
    from gensets.cards.card import shard_pattern

    assert shard_pattern(paths) == pattern


def test_card_names_the_real_shards(reference):
    """The smoke build's background config has two shards, texture and material one each (manifest.json):
    the card's webdataset line names them, and webdataset reads every sample of the config from it."""
    import webdataset as wds

    card = (reference / "dataset" / "README.md").read_text()
    assert ('`webdataset.WebDataset("background/test-{00000..00001}.tar").decode("pil")` (the shards of each '
            'config: `background/test-{00000..00001}.tar`, `texture/test-00000.tar`, `material/test-00000.tar`)'
            ) in card
    manifest = json.loads((reference / "dataset" / "manifest.json").read_text())
    n = sum(s["n"] for s in manifest["shards"] if s["config"] == "background")
    url = str(reference / "dataset" / "background" / "test-{00000..00001}.tar")
    assert sum(1 for _ in wds.WebDataset(url, shardshuffle=False)) == n


def test_card_verify_and_finalize_show_a_bar_on_a_terminal_only(small, tmp_path, monkeypatch):
    """Each long pass has a tqdm bar on a terminal (card: over the samples' provenance, with their count; verify:
    per shard; finalize: images written), and none when stderr is not one or progress is off."""
    import io
    import sys

    from gensets.builders.finalize import finalize
    from gensets.cards.card import rerender
    from gensets.shards.verify import verify

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    n = json.loads((ws / "dataset" / "manifest.json").read_text())["shards"]
    images, shards = sum(s["n"] for s in n), len(n)
    for stream, progress, shown in ((Terminal, True, True), (Terminal, False, False), (io.StringIO, True, False)):
        err = stream()
        monkeypatch.setattr(sys, "stderr", err)
        finalize(ws, include_pending=True, progress=progress)
        rerender(ws, progress=progress)
        assert verify(ws / "dataset", progress=progress) == []
        out = err.getvalue()
        found = [re.search(rf"{what}: +\d+%\|[^|]*\| *\d+/{total} ", out) is not None
                 for what, total in (("card", images), ("verify", shards))] + ["finalize: " in out]
        assert found == [shown] * 3, out
