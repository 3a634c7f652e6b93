"""GenBench's other data types on tiny models: the original-data baseline (a seeded draw, nested over K), the
retrieval baseline (CLIP ranking, MTS), built like a generated set and scored in one report with costs."""

import json
import random
import textwrap

import numpy as np
import pytest
from PIL import Image

from gensets.builders.genbench import plan
from gensets.builders.genbench.baselines import original_order, rank_pool
from gensets.errors import ConfigError
from gensets.metrics import mean_text_similarity
from gensets.records import derive_seed
from gensets.workspace import load_build_config

from .conftest import run_cli

CLASSES = ("airplane", "cat", "ship")
CAPTIONS = {"airplane": ["a jet airplane in the sky", "an airplane on the runway", "a red car on a road"],
            "cat": ["a cat asleep on a sofa", "a small cat", "a bowl of soup"],
            "ship": ["a ship at sea", "a cargo ship in a port", "a mountain at dawn"]}


@pytest.fixture()
def files(tmp_path):
    """A train folder (5 images per class), a test folder (2 per class) and a pool of 9 captioned images."""
    rng = np.random.default_rng(0)

    def img(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(path)

    for c in CLASSES:
        for i in range(5):
            img(tmp_path / "train" / c / f"{i}.png")
        for i in range(2):
            img(tmp_path / "test" / c / f"{i}.png")
        for i, cap in enumerate(CAPTIONS[c]):
            img(tmp_path / "pool" / f"{c}{i}.png")
            (tmp_path / "pool" / f"{c}{i}.txt").write_text(cap + "\n")
    return tmp_path


def config_text(shots=3, strategies="[ST, original, retrieval]", extra=""):
    return textwrap.dedent(f"""\
        builder: genbench
        name: baselines
        dataset: cifar-10
        classes: [airplane, cat, ship]
        shots: {shots}
        images_per_prompt: 1
        strategies: {strategies}
        original: {{source: "folder:train"}}
        retrieval: {{pool: "folder:pool", clip: "tiny:clip", neighbours: 4, mts_shot: 2}}
        generator: {{model: "tiny:sd", steps: 2, width: 64, height: 64}}
        cost: {{price_per_hour: 0.1, labelling: {{per_image: 0.05, source: "a test figure"}}}}
        resize: 32
        image: {{format: png}}
        unit_size: 2
        """) + textwrap.dedent(extra)


def load(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return load_build_config(p)[1]


def test_original_draw_is_a_seeded_shuffle_and_nested(files):
    cfg3 = load(files, config_text(shots=3, strategies="[original]"))
    cfg2 = load(files, config_text(shots=2, strategies="[original]"), "c2.yaml")
    for c in CLASSES:
        # by hand: the class folder's files sorted, shuffled with random.Random(seed), the first K
        seed = derive_seed(0, "cifar-10", "original", c)
        order = [f"{c}/{i}.png" for i in range(5)]
        random.Random(seed).shuffle(order)
        got3 = [f for u in plan(cfg3) if u.payload["class"] == c for f, _ in u.payload["original"]["items"]][:3]
        got2 = [f for u in plan(cfg2) if u.payload["class"] == c for f, _ in u.payload["original"]["items"]][:2]
        assert got3 == order[:3] and got2 == order[:2]  # K=2 is a prefix of K=3
    assert original_order([1, 2, 3], 5) == original_order([1, 2, 3], 5)


def test_rank_pool_by_hand():
    # 2 queries x 4 items; neighbours 2: q0 keeps items 2 (0.9) and 0 (0.5); q1 keeps items 1 (0.8) and 2 (0.7)
    sims = [[0.5, 0.1, 0.9, 0.2], [0.3, 0.8, 0.7, 0.0]]
    assert rank_pool(sims, 2) == [(1, 0.8, 1), (2, pytest.approx(0.8), 0), (0, 0.5, 0)]


def test_mts_is_the_authors_mean():
    # per class: the mean of its best 2 scores; dataset: the sum of the positive class means / number of classes
    per, total = mean_text_similarity({"a": [0.9, 0.7, 0.1], "b": [-0.2, -0.4]}, top=2)
    assert per == {"a": pytest.approx(0.8), "b": pytest.approx(-0.3)}
    assert total == pytest.approx(0.8 / 2)


def test_data_types_do_not_combine_and_need_their_inputs(files):
    with pytest.raises(ConfigError, match="data type of its own"):
        load(files, config_text(strategies="[original+RD]"))
    with pytest.raises(ConfigError, match="cost.labelling"):
        load(files, config_text(strategies="[original]").replace(
            ', labelling: {per_image: 0.05, source: "a test figure"}', ""))


def test_build_and_report_every_data_type(files):
    """One build: generated (ST), original and retrieved sets of 3 classes x 3 shots; one report compares them at
    equal K with a cost each, MTS from the retrieval's own scores, and rows per K of nested subsets."""
    import torch

    from gensets.models import load_classifier

    (files / "c.yaml").write_text(config_text())
    run_cli("build", files / "c.yaml", "--out", files / "ws", "--quiet", check=0)
    out = files / "r"
    r = run_cli("report", "genbench", files / "ws", "--test", files / "test", "--clip", "tiny:clip",
                "--shots", "1,2,3", "--out", out, check=0)
    rep = json.loads((out / "report.json").read_text())
    rows = {(x["strategy"], x["shots"]): x for x in rep["rows"]}
    assert {x["data_type"] for x in rep["rows"]} == {"generated", "original", "retrieval"}
    for s in ("ST", "original", "retrieval"):
        assert [rows[s, k]["generated"] for k in (1, 2, 3)] == [3, 6, 9]
        assert rows[s, 3]["cler"] is not None
    assert rows["original", 3]["cost_per_image"] == 0.05 and rows["original", 3]["cost_source"] == "a test figure"
    assert rows["original", 2]["cost_total"] == pytest.approx(0.05 * 6)
    assert rows["retrieval", 3]["cost_per_image"] is not None and rows["ST", 3]["cost_per_image"] is not None
    assert "retrieval" in r.stdout and "original" in r.stdout

    # the retrieval by hand: tiny:clip text embeddings of the queries and captions, cosine, 4 nearest per query
    from gensets.builders.genbench.baselines import pool_entries

    cfg = load(files, config_text())
    entries = pool_entries(cfg)
    clf = load_classifier("tiny:clip", labels=list(CLASSES), templates=list(cfg.templates))
    with torch.no_grad():
        caps = torch.nn.functional.normalize(clf.embed_text([c for _, _, c in entries]).float(), dim=-1).numpy()
        scores = {}
        for c in CLASSES:
            q = torch.nn.functional.normalize(clf.embed_text([t.format(c) for t in cfg.templates]).float(),
                                              dim=-1).numpy()
            sims = q @ caps.T
            found = {}
            for qi in range(len(q)):
                for j in np.argsort(-sims[qi], kind="stable")[:4]:
                    found.setdefault(int(j), []).append(sims[qi, j])
            scores[c] = sorted((float(np.mean(v)) for v in found.values()), reverse=True)
    # the samples' recorded scores are the best three of each class, and MTS is their mean over the best 2
    from gensets.evaluation.reports.genbench import read_workspace

    _, _, by_config = read_workspace(files / "ws")
    for c in CLASSES:
        got = [s.meta["data"]["score"] for s in by_config["cifar-10-retrieval"] if s.meta["label"] == c]
        assert got == pytest.approx(scores[c][:3], abs=1e-5)
        assert rows["retrieval", 3]["mts_per_class"][c] == pytest.approx(np.mean(scores[c][:2]), abs=1e-5)
    for s in by_config["cifar-10-retrieval"]:
        d = s.meta["data"]
        assert d["type"] == "retrieval" and d["item"].startswith("folder:pool/") and d["query"] and d["caption"]
    for s in by_config["cifar-10-original"]:
        assert s.meta["data"]["item"].startswith(f"folder:train/{s.meta['label']}/")
