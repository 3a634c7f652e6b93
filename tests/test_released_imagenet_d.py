"""The released ImageNet-D (gensets.papers.imagenet_d.released): a small folder in the authors' layout
(``background|texture/<class>/*.png`` + ``questions/<nuisance>.csv``), made here, is recognised by what it is,
read into the right records, and scored by ``imagenet``, ``zero-shot`` and ``two-way`` exactly as the same images
in a gensets-built ImageNet-D; hostile folders and the Hub offline fail in one line. Offline, CPU, seconds."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import run_cli
from .test_eval import fixed_classifier, query

CLASSES = ("alarm_clock", "banana", "binder_closed")  # ids [409, 530], [954], [446]
KINDS = ("background", "texture")
HEADER = "image_dir\tgt_category\ttop1_pred_cate\ttop2_pred_cate\n"


def _png(seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    from gensets.images import encode_image

    rng = np.random.default_rng(seed)
    return encode_image(Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)), "png")


def _released(tmp_path, name="ImageNet-D", questions=True):
    """The folder, and the wrong option (a class index) its questions CSV gives each background image: the next
    class of CLASSES; for each class's first image the CSV's top-1 is the true class, so its top-2 is the one."""
    from gensets.labels.twoway import official_name
    from gensets.sources.packaged import imagenet_d_classes

    classes = imagenet_d_classes()
    folder = tmp_path / name
    rows, wrong, seed = [], {}, 0
    for kind in KINDS:
        for c, cls in enumerate(CLASSES):
            (folder / kind / cls).mkdir(parents=True)
            for i in range(2):
                (folder / kind / cls / f"img{i}.png").write_bytes(_png(seed := seed + 1))
                if kind == "background":
                    other = CLASSES[(c + 1) % len(CLASSES)]
                    gt, w = official_name(classes[cls]["name"]), official_name(classes[other]["name"])
                    top1, top2 = (gt, w) if i == 0 else (w, official_name(classes["bench"]["name"]))
                    # the authors' image_dir: the last three parts of the path they read
                    rows.append(f"ImageNet-D/{kind}/{cls}/img{i}.png\t{gt}\t{top1}\t{top2}\n")
                    wrong[f"{kind}/{cls}/img{i}.png"] = classes[other]["index"]
    if questions:
        (folder / "questions").mkdir()
        (folder / "questions" / "background.csv").write_text(HEADER + "".join(rows))
    return folder, wrong


def _built(tmp_path, released, provenance=True):
    """The same images as a gensets-built ImageNet-D folder: shards whose samples' provenance names the builder,
    a card with the 113 class names. Returns the folder and {its key: the released key}. ``provenance=False``:
    a card only, naming the classes by their folder names ("binder_closed"), samples without json."""
    import yaml

    from gensets.shards import write_shard
    from gensets.sources.packaged import imagenet_d_class_names, imagenet_d_classes

    classes = imagenet_d_classes()
    folder, keys = tmp_path / ("built" if provenance else "card-only"), {}
    configs, infos = [], []
    for kind in KINDS:
        samples = []
        for cls in CLASSES:
            for i in range(2):
                key = f"{kind}-{cls}-{i}"
                keys[key] = f"{kind}/{cls}/img{i}.png"
                info = classes[cls]
                samples.append({"__key__": key, "png": (released / keys[key]).read_bytes(), "cls": info["index"]})
                if provenance:
                    samples[-1]["json"] = {"builder": "imagenet-d", "imagenet_ids": info["imagenet_ids"],
                                           "nuisance_kind": kind, "label": info["name"]}
        (folder / kind).mkdir(parents=True)
        write_shard(folder / kind / "test-00000.tar", samples)
        configs.append({"config_name": kind, "data_files": [{"split": "test", "path": f"{kind}/test-*.tar"}]})
        names = dict(enumerate(imagenet_d_class_names() if provenance else list(classes)))
        names = {str(i): n for i, n in names.items()}
        infos.append({"config_name": kind, "features": [{"name": "png", "dtype": "image"},
                                                        {"name": "cls", "dtype": {"class_label": {"names": names}}}]})
    (folder / "README.md").write_text("---\n" + yaml.safe_dump({"configs": configs, "dataset_info": infos}) + "---\n")
    return folder, keys


def _one_line_error(r, *words):
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("gensets: error:"), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_recognised_with_its_configs_classes_ids_and_questions(tmp_path):
    from gensets.evaluation.data import open_source
    from gensets.papers.imagenet_d.released import RELEASED_REPO
    from gensets.sources.packaged import imagenet_d_class_names, imagenet_d_classes

    folder, wrong = _released(tmp_path)
    (folder / "README.md").write_text("# no gensets card, no gensets provenance\n")
    (folder / "background" / "banana" / ".DS_Store").write_bytes(b"junk")  # hidden: skipped
    src = open_source(str(folder))
    assert (src.id, src.revision[:6]) == (RELEASED_REPO, "files-")  # named as the released set, not the path
    assert open_source(str(folder)).revision == src.revision  # stable
    assert [s.config for s in src.splits] == list(KINDS) and {s.split for s in src.splits} == {"test"}
    bg, tx = src.splits
    assert bg.class_names == imagenet_d_class_names() and len(bg.class_names) == 113
    assert bg.builder == "imagenet-d" and bg.n == 6
    assert bg.wrong_options == wrong and tx.wrong_options is None
    recs = list(bg.records())
    assert [r["key"] for r in recs] == [f"background/{c}/img{i}.png" for c in CLASSES for i in range(2)]
    classes = imagenet_d_classes()
    for r in recs:
        cls = r["key"].split("/")[1]
        assert r["target"] == classes[cls]["index"] and r["meta"]["label"] == classes[cls]["name"]
        assert r["meta"]["nuisance_kind"] == "background" and r["image"].size == (24, 24)
        assert r["meta"]["two_way_wrong"] == wrong[r["key"]]
    assert recs[0]["meta"]["imagenet_ids"] == [409, 530] and recs[4]["meta"]["imagenet_ids"] == [446]
    assert recs[4]["meta"]["label"] == "binder_(closed)"
    # --config / --split pick as on a gensets-built set
    assert [s.config for s in open_source(str(folder), "texture").splits] == ["texture"]
    with pytest.raises(Exception, match="no config 'material'"):
        open_source(str(folder), "material")


def test_imagenet_protocol_by_hand(tmp_path):
    """A model ranking 409 (analog clock), 954 (banana), 0, 1, 2 first for any image: alarm clock (409, 530) is a
    top-1 hit, banana a top-5 hit only, binder (446) neither: top1 2/6, top5 4/6; masked to ImageNet-D's mapped
    ids (0, 1, 2 are none of them) 409 is still first: masked top1 2/6. Chosen automatically from the model (1000 labels) and the records'
    imagenet_ids; the dataset recorded as the released ImageNet-D."""
    folder, _ = _released(tmp_path)
    spec = fixed_classifier(tmp_path / "m", [409, 954, 0, 1, 2])
    db = tmp_path / "r.duckdb"
    res = json.loads(run_cli("eval", folder, "--model", spec, "--db", db, "--config", "background", "--json",
                             check=0).stdout)
    (row,) = res
    assert row["dataset"] == "zcs15/ImageNet-D" and row["variant"] == "imagenet" and row["n"] == 6
    m = row["metrics"]
    assert (m["top1"], m["top5"]) == (pytest.approx(2 / 6), pytest.approx(4 / 6))
    assert m["masked_top1"] == pytest.approx(2 / 6)
    (run,) = query(db, "SELECT dataset, dataset_revision, config FROM runs")
    assert run["dataset"] == "zcs15/ImageNet-D" and run["dataset_revision"].startswith("files-")
    assert str(tmp_path) not in json.dumps(run)
    ids = {r["key"]: r["target_ids"] for r in query(db, "SELECT key, target_ids FROM predictions")}
    assert ids["background/alarm_clock/img0.png"] == [409, 530] and ids["background/banana/img1.png"] == [954]


@pytest.mark.slow
def test_resnet_and_clip_score_as_on_a_gensets_built_set(tmp_path):
    """tiny:resnet (imagenet) and tiny:clip (zero-shot, the authors' names and prompt) give the released folder
    the same predictions, row for row, as the same image bytes in a gensets-built ImageNet-D (the released images
    decoded in 2 worker processes, batches of 4: the loader reads them by entry as it reads shards), and as a
    card-only folder with ImageNet-D's class list (folder names) and no provenance: ImageNet-D by what it is."""
    folder, _ = _released(tmp_path, questions=False)
    built, keys = _built(tmp_path, folder)
    card_only, _ = _built(tmp_path, folder, provenance=False)
    got = {}
    for name, path, workers in (("released", folder, "2"), ("built", built, "0"), ("card-only", card_only, "0")):
        db = tmp_path / f"{name}.duckdb"
        res = json.loads(run_cli("eval", path, "--model", "tiny:resnet", "--model", "tiny:clip", "--db", db,
                                 "--json", "--quiet", "--workers", workers, "--batch-size", "4", check=0).stdout)
        runs = {(r["model"], r["config"]): (r["variant"], r["n"], r["metrics"]) for r in res}
        preds = query(db, "SELECT r.model, r.config, p.* EXCLUDE (run_id) FROM predictions p JOIN runs r "
                          "USING (run_id)")
        rows = {(p["model"], p["config"], keys.get(p["key"], p["key"])): {k: v for k, v in p.items() if k != "key"}
                for p in preds}
        got[name] = (runs, rows)
    assert got["released"] == got["built"] == got["card-only"]
    runs, rows = got["released"]
    assert {v[0] for (model, _), v in runs.items() if model == "tiny:clip"} == {"zero-shot (imagenet-d official)"}
    assert {v[0] for (model, _), v in runs.items() if model == "tiny:resnet"} == {"imagenet"}
    assert len(rows) == 2 * 2 * 6 and all(v[1] == 6 for v in runs.values())


def test_tiny_resnet_top1_checked_in_the_test(tmp_path):
    """One image's top-1 as the runner stored it == tiny:resnet's own argmax on the decoded PNG, here."""
    import torch

    from gensets.images import decode_image
    from gensets.models import load_classifier

    folder, _ = _released(tmp_path, questions=False)
    db = tmp_path / "r.duckdb"
    run_cli("eval", folder, "--model", "tiny:resnet", "--db", db, "--config", "texture", "--quiet", check=0)
    stored = {p["key"]: p["top5"][0] for p in query(db, "SELECT key, top5 FROM predictions")}
    model = load_classifier("tiny:resnet", device="cpu")
    key = "texture/banana/img1.png"
    with torch.no_grad():
        logits = model.logits(model.preprocess([decode_image((folder / key).read_bytes())]))
    assert stored[key] == int(logits[0].argmax())


class _EchoVLM:
    """Answers each question with its second option, and keeps the questions."""

    def __init__(self):
        self.questions = []

    def answer(self, images, questions, max_new_tokens=10, **decoding):
        self.questions += questions
        return [q.rsplit(", ", 1)[1].rstrip(".") for q in questions]


@pytest.mark.slow
def test_two_way_takes_the_wrong_option_from_the_questions_csv(tmp_path):
    from gensets.evaluation.data import open_source
    from gensets.evaluation.protocols.base import Models
    from gensets.evaluation.runner import EvalConfig
    from gensets.labels.twoway import official_name
    from gensets.registry import PROTOCOLS
    from gensets.sources.packaged import imagenet_d_class_names

    folder, wrong = _released(tmp_path)
    bg = open_source(str(folder), "background").splits[0]
    recs = list(bg.records())
    cfg = EvalConfig(str(folder), ("x",), tmp_path / "r.duckdb")  # no --clip: none is needed
    vlm = _EchoVLM()
    p = PROTOCOLS.get("two-way")(vlm, bg, first=recs[0], cfg=cfg, models=Models())
    assert p.clip is None and p.run_protocol == "two-way (wrong_option=released-csv)"
    scored = p.score([r["image"] for r in recs], recs)
    names = imagenet_d_class_names()
    for r, q, row in zip(recs, vlm.questions, scored.rows, strict=True):
        true, other = official_name(r["meta"]["label"]), official_name(names[wrong[r["key"]]])
        assert q == f"What is the main object in this image? Choose from the following list: {true}, {other}."
        assert row["top5"] == [wrong[r["key"]]] and row["correct1"] is False  # it answered the wrong option
    # the first image of each class: the CSV's top-1 is the true class, so its top-2 is the wrong option
    assert "binder (closed), alarm clock." in vlm.questions[4]

    # through the CLI: no --clip needed, the run named by where the wrong option came from; --clip overrides
    db = tmp_path / "r.duckdb"
    res = json.loads(run_cli("eval", folder, "--model", "tiny:vlm", "--protocol", "two-way", "--config",
                             "background", "--db", db, "--json", check=0).stdout)
    # a LLaVA model's dtype and image aspect are part of the variant (fp32 here: no CUDA; the authors ran fp16)
    assert [(r["variant"], r["n"]) for r in res] == [("two-way (wrong_option=released-csv; fp32 on cpu, pad-square)",
                                                      6)]
    res = json.loads(run_cli("eval", folder, "--model", "tiny:vlm", "--protocol", "two-way", "--clip", "tiny:clip",
                             "--decoding", "greedy", "--config", "background", "--db", db, "--json", check=0).stdout)
    assert [r["variant"] for r in res] == ["two-way (wrong_option=clip tiny:clip; decoding=greedy; fp32 on cpu, "
                                           "pad-square)"]
    # texture has no questions CSV: --clip is needed, in one line
    r = run_cli("eval", folder, "--model", "tiny:vlm", "--protocol", "two-way", "--config", "texture", "--db", db,
                "--quiet")
    _one_line_error(r, "--clip")


def test_hostile_folders_fail_in_one_line(tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(_png(99))
    cases = {}
    folder, _ = _released(tmp_path, "symlink")
    (folder / "background" / "banana" / "img9.png").symlink_to(outside)
    cases["symlink"] = (folder, ["img9.png", "leads out of"])
    folder, _ = _released(tmp_path, "unknown")
    (folder / "texture" / "hoverboard").mkdir()
    (folder / "texture" / "hoverboard" / "a.png").write_bytes(_png(5))
    cases["unknown"] = (folder, ["hoverboard", "not one of ImageNet-D's 113 classes"])
    folder, _ = _released(tmp_path, "corrupt")
    (folder / "texture" / "banana" / "img1.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    cases["corrupt"] = (folder, ["texture/banana/img1.png", "cannot decode image"])
    folder, _ = _released(tmp_path, "question")
    csv = folder / "questions" / "background.csv"
    csv.write_text(csv.read_text().replace("background/banana/img0.png\tbanana", "background/banana/img0.png\tbench"))
    cases["question"] = (folder, [f"{csv}:4", "gt_category 'bench'"])
    for name, (folder, words) in cases.items():
        r = run_cli("eval", folder, "--model", "tiny:resnet", "--db", tmp_path / f"{name}.duckdb", "--quiet")
        _one_line_error(r, *words)
        assert r.returncode == 1, (name, r.stderr)


def test_the_hub_copy_offline_fails_fast_in_one_line(tmp_path):
    t = time.monotonic()
    r = run_cli("eval", "hf:zcs15/ImageNet-D", "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet")
    assert time.monotonic() - t < 60
    line = _one_line_error(r, "hf:zcs15/ImageNet-D", "offline")
    assert r.returncode == 3, line


def test_the_hub_snapshot_is_read_from_the_cache_as_the_folder(tmp_path, monkeypatch):
    """``hf:zcs15/ImageNet-D`` offline, cached: the snapshot (files that link into the repo's blobs/, as the Hub's
    cache holds them) reads as the same folder, named by its commit; a file linking out of the repo is refused."""
    import hashlib
    import os

    from huggingface_hub import constants

    from gensets.errors import DataError
    from gensets.evaluation.data import open_source

    folder, _ = _released(tmp_path)
    repo = tmp_path / "hub" / "datasets--zcs15--ImageNet-D"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / commit
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(f.read_bytes())
        link = snap / f.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    hub, local = open_source("hf:zcs15/ImageNet-D"), open_source(str(folder))
    assert (hub.id, hub.revision) == ("zcs15/ImageNet-D", commit)
    assert [s.config for s in hub.splits] == [s.config for s in local.splits] == list(KINDS)
    for a, b in zip(hub.splits, local.splits, strict=True):
        assert a.wrong_options == b.wrong_options and a.class_names == b.class_names
        ra, rb = list(a.records()), list(b.records())
        assert [(r["key"], r["target"], r["meta"]) for r in ra] == [(r["key"], r["target"], r["meta"]) for r in rb]
        assert all(x["image"].tobytes() == y["image"].tobytes() for x, y in zip(ra, rb, strict=True))
    outside = tmp_path / "outside.png"
    outside.write_bytes(_png(7))
    (snap / "texture" / "banana" / "img1.png").unlink()
    (snap / "texture" / "banana" / "img1.png").symlink_to(outside)
    with pytest.raises(DataError, match="img1.png: a symlink along the way leads out of"):
        open_source("hf:zcs15/ImageNet-D")


def test_images_are_decoded_under_gensets_pixel_limit(tmp_path, monkeypatch):
    from PIL import Image

    from gensets.errors import DataError
    from gensets.evaluation.data import open_source

    folder, _ = _released(tmp_path)
    split = open_source(str(folder), "texture").splits[0]
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 300)  # 24x24 = 576 pixels: over it
    with pytest.raises(DataError, match=r"texture/alarm_clock/img0.png: cannot decode image: 24x24 = 576 pixels is "
                                        r"over the limit of 300"):
        next(split.records())
