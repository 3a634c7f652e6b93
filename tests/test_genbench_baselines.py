"""GenBench's other data types on tiny models: the original-data baseline (a seeded draw, nested over K), the
retrieval baseline (CLIP ranking, MTS), built like a generated set and scored in one report with costs."""

import json
import random
import textwrap

import numpy as np
import pytest
from PIL import Image

from gensets.errors import ConfigError
from gensets.metrics import mean_text_similarity
from gensets.papers.genbench import plan
from gensets.papers.genbench.baselines import original_order, rank_pool
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
    # no labelling price: the paper's (Table 5, USD); in another currency one must be given
    no_price = config_text(strategies="[original]").replace(', labelling: {per_image: 0.05, source: "a test figure"}',
                                                          "")
    cost = load(files, no_price).cost
    assert cost.labelling is None and cost.labelling_price.per_image == 0.012
    assert "Table 5: Original, Human Labeling" in cost.labelling_price.source
    with pytest.raises(ConfigError, match="cost.labelling.*currency EUR"):
        load(files, no_price.replace("price_per_hour: 0.1", "price_per_hour: 0.1, currency: EUR"))


def test_build_and_report_every_data_type(files):
    """One build: generated (ST), original and retrieved sets of 3 classes x 3 shots; one report compares them at
    equal K with a cost each, MTS from the retrieval's own scores, and rows per K of nested subsets."""
    import torch

    from gensets.models import load_classifier

    (files / "c.yaml").write_text(config_text())
    run_cli("build", files / "c.yaml", "--out", files / "ws", "--quiet", check=0)
    out = files / "r"
    r = run_cli("report", "genbench", files / "ws", "--test", files / "test", "--clip", "tiny:clip",
                "--selection-clip", "same", "--shots", "1,2,3", "--out", out, check=0)
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
    from gensets.papers.genbench.baselines import pool_entries

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
    from gensets.papers.genbench.report import read_workspace

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


# ------------------------------------------------------------------ issue #16: RA from retrieval, the smoke run,
# correlations, evaluation time
def test_correlation_by_hand_and_against_scipy():
    from scipy.stats import pearsonr, spearmanr

    from gensets.metrics import correlation

    # by hand: x = 1,2,3, y = 1,3,2: deviations (-1,0,1) and (-1,1,0), sum of products 1, sums of squares 2 and 2,
    # r = 1/2; the ranks are the values, so rho = 1/2 too. p: t = r sqrt(n-2) / sqrt(1-r^2) = 1/sqrt(3) with one
    # degree of freedom (a Cauchy): P(|T| > t) = 1 - (2/pi) atan(1/sqrt(3)) = 1 - (2/pi)(pi/6) = 2/3
    c = correlation([1, 2, 3], [1, 3, 2])
    assert c["n"] == 3
    assert c["pearson"] == pytest.approx(0.5) and c["spearman"] == pytest.approx(0.5)
    assert c["pearson_p"] == pytest.approx(2 / 3) and c["spearman_p"] == pytest.approx(2 / 3)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=9), rng.normal(size=9)
    c = correlation(x, y)
    assert (c["pearson"], c["pearson_p"]) == pytest.approx(tuple(pearsonr(x, y)))
    assert (c["spearman"], c["spearman_p"]) == pytest.approx(tuple(spearmanr(x, y)))
    assert correlation([1, 2], [2, 1]) is None and correlation([1, 1, 1], [1, 2, 3]) is None  # n/a, never NaN


def _row(dataset, strategy, shots, cler, lp, clip_score=None, fd=None, mts=None):
    data_type = strategy if strategy in ("original", "retrieval") else "generated"
    return {"dataset": dataset, "config": f"{dataset}-{strategy.lower()}", "strategy": strategy, "shots": shots,
            "data_type": data_type, "cler": cler, "linear_probe": lp, "clip_score": clip_score, "fd": fd, "mts": mts}


def test_report_correlations_are_scipy_on_the_rows_at_the_largest_k():
    from scipy.stats import pearsonr, spearmanr

    from gensets.papers.genbench.analysis import correlations

    rows = []
    gen = {("a", "ST"): (0.5, 0.6, 20.0, 3.0), ("a", "DT"): (0.7, 0.65, 21.0, 2.0), ("b", "ST"): (0.2, 0.3, 19.0, 5.0),
           ("b", "DT"): (0.4, 0.35, 22.0, 4.5), ("c", "ST"): (0.9, 0.8, 25.0, 1.0), ("c", "DT"): (0.6, 0.7, 18.0, 2.5)}
    for (d, s), (cler, lp, cs, fd) in gen.items():
        rows.append(_row(d, s, 4, cler, lp, cs, fd))
        rows.append(_row(d, s, 2, 1.0 - cler, 0.0, 0.0, 9.0))  # a smaller K: not a point (it would change r)
    retrieval = {"a": (0.7, 0.3), "b": (0.1, 0.5), "c": (0.95, 0.2)}  # CLER, MTS
    for d, (cler, mts) in retrieval.items():
        rows.append(_row(d, "retrieval", 4, cler, 0.5, mts=mts))
        rows.append(_row(d, "original", 4, 0.99, 0.99))  # a data type: not a point of Fig. 4
    c = correlations(rows)
    assert c["n_points"] == 6
    for key, i in (("cler", 0), ("clip_score", 2), ("fd", 3)):
        x, y = [v[i] for v in gen.values()], [v[1] for v in gen.values()]
        got = c["with_linear_probe"][key]
        assert (got["pearson"], got["spearman"]) == pytest.approx((pearsonr(x, y)[0], spearmanr(x, y)[0]))
    # Fig. 6: CLER(retrieval) - CLER(ST) at K=4 per dataset: a 0.2, b -0.1, c 0.05, against MTS 0.3, 0.5, 0.2
    d = c["cler_delta_with_mts"]
    assert [p["cler_delta"] for p in d["points"]] == pytest.approx([0.2, -0.1, 0.05])
    got = d["correlation"]
    assert got["pearson"] == pytest.approx(pearsonr([0.3, 0.5, 0.2], [0.2, -0.1, 0.05])[0])
    assert got["spearman"] == pytest.approx(-0.5)  # ranks (2,3,1) and (3,1,2): 1 - 6*(1+4+1)/(3*8) = -0.5
    assert correlations([r for r in rows if r["dataset"] != "c"])["cler_delta_with_mts"]["correlation"] is None


def test_ra_from_retrieval_plans_from_the_pools_content(files):
    import shutil

    extra = 'reference: {source: retrieval, per_class: 2}\n'
    ids = {u.id for u in plan(load(files, config_text(strategies="[RA]", extra=extra)))}
    # the same pool, copied under another parent (so read afresh) with one image changed
    other = files / "other"
    shutil.copytree(files / "pool", other / "pool")
    Image.new("RGB", (24, 24), (1, 2, 3)).save(other / "pool" / "cat0.png")
    cfg = load(other, config_text(strategies="[RA]", extra=extra))
    changed = {u.id for u in plan(cfg)}
    assert ids.isdisjoint(changed)  # every RA unit re-plans: the pool's content is in its id
    u = plan(cfg)[0]
    assert u.payload["reference"]["source"] == "retrieval:folder:pool"
    assert u.payload["reference"]["retrieval"]["pool_content"] != plan(load(files, config_text(
        strategies="[RA]", extra=extra), "d.yaml"))[0].payload["reference"]["retrieval"]["pool_content"]
    with pytest.raises(ConfigError, match="retrieval.pool"):
        load(files, config_text(strategies="[RA]", extra=extra).replace('pool: "folder:pool", ', ""), "e.yaml")


@pytest.mark.slow
def test_smoke_run_compares_every_data_type_at_equal_k_with_costs_and_times(tmp_path):
    """configs/genbench.baselines.smoke.yaml: ST, RA (from the retrieved images), original and retrieval for 3
    classes; one report at K=2 and K=4 with a cost per row, the correlations and the time per metric."""
    from gensets.papers.genbench.report import read_workspace

    ws, out = tmp_path / "ws", tmp_path / "rep"
    run_cli("build", "configs/genbench.baselines.smoke.yaml", "--out", ws, "--quiet", check=0)
    run_cli("report", "genbench", ws, "--test", "configs/genbench.smoke-refs", "--clip", "tiny:clip",
            "--selection-clip", "same", "--shots", "2,4", "--out", out, check=0)
    rep = json.loads((out / "report.json").read_text())
    rows = {(r["strategy"], r["shots"]): r for r in rep["rows"]}
    assert set(rows) == {(s, k) for s in ("ST", "RA", "original", "retrieval") for k in (2, 4)}
    for (_, k), r in rows.items():
        assert r["generated"] == 3 * k and r["cost_per_image"] is not None and r["cost_total"] is not None
        for what in ("embed", "cler", "fd", "linear_probe"):
            assert r[f"{what}_seconds"] >= 0
        assert (r["clip_score_seconds"] is None) == (r["data_type"] != "generated")
    # the smoke config gives no labelling price: the paper's (Table 5), with its source
    assert rows["original", 4]["cost_per_image"] == 0.012
    assert "Table 5: Original, Human Labeling" in rows["original", 4]["cost_source"]
    assert rows["original", 2]["cost_total"] == pytest.approx(0.012 * 6)
    md = (out / "report.md").read_text()
    equal_k = md.split("## Data types at equal K")[1].split("## Correlations")[0]
    for (s, k), r in rows.items():  # one table: a line per (K, strategy), its data type, cost per image and cost
        chosen = f"clip: {r['selected_by']}"  # the K of a generated set by CLIP score, the others' first K
        assert f"| cifar-10 | {k} | {chosen} | {s} | {r['data_type']} | {3 * k} |" in equal_k
        assert r["selected_by"] == ("every shot built" if k == 4 else {
            "generated": "top K by CLIP score against 'a photo of a {class}'", "original": "first K: the seeded draw",
            "retrieval": "first K: the retrieval's ranking"}[r["data_type"]])
    assert "Evaluation time per metric" in md and "| MTS | CLER change (retrieval - ST) | 1 | n/a | n/a |" in md
    assert (out / "correlations.png").stat().st_size and (out / "shots.png").stat().st_size
    # RA's init images are the retrieval's best 2 of the class: the retrieved set's shots 0 and 1
    _, _, by_config = read_workspace(ws)
    for c in CLASSES:
        best = {s.meta["data"]["item"] for s in by_config["cifar-10-retrieval"]
                if s.meta["label"] == c and int(s.key.rsplit("_", 1)[1]) < 2}
        used = {s.meta["prompting"]["init_image"] for s in by_config["cifar-10-ra"] if s.meta["label"] == c}
        assert used <= best and used
    run_cli("finalize", ws, "--include-pending", check=0)
    card = (ws / "dataset" / "README.md").read_text()
    cost = card.split("### Cost")[1]
    assert "- Generated images: Measured while building" in cost and "retrieval query seconds per image" in cost
    assert "- Original images: labelled at **0.012 USD per image**" in cost and "Table 5: Original" in cost
