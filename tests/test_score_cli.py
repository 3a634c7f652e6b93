"""``gensets score``, the quality: thresholds of a build, the card's quality section and ``gensets report quality``
(issue 14), run as a user runs them: the CLI in a subprocess, offline, on tiny models."""

import json
import signal
import subprocess
import sys

import duckdb
import numpy as np
import pytest
from PIL import Image

from .conftest import ROOT, run_cli

CLIP = ["--metric", "clip_score", "--model", "clip_score=tiny:hf-clip"]


def rows(db, sql):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def one_line_error(p, *fragments, code=2):
    """A non-zero exit (2: bad input; 1: bad data), one line on stderr naming what went wrong, no traceback."""
    assert p.returncode == code, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gensets: error: "), p.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def image_folder(path, n, seed=0, size=48):
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size, 3)).astype(np.uint8)).save(path / f"r{i}.png")
    return path


@pytest.mark.slow
def test_score_writes_per_image_rows_and_a_second_run_replaces_them(reference, tmp_path):
    db = tmp_path / "results.duckdb"
    p = run_cli("score", reference, *CLIP, "--db", db, "--json", "--quiet", check=0)
    summaries = json.loads(p.stdout)
    per_image = rows(db, "SELECT config, key, value, models, variant FROM scores ORDER BY config, key")
    published = json.loads((reference / "dataset" / "manifest.json").read_text())["counts"]
    assert len(per_image) == sum(s["n"] for s in summaries) == sum(published.values())
    assert len({(c, k) for c, k, *_ in per_image}) == len(per_image)  # one row per image
    assert {json.loads(m)["clip"] for *_, m, _ in per_image} == {"tiny:hf-clip"}
    for s in summaries:  # the summary is the mean of the config's rows, inside its bootstrap interval
        values = [v for c, _, v, *_ in per_image if c == s["config"]]
        assert s["value"] == pytest.approx(np.mean(values))
        assert s["lo"] <= s["value"] <= s["hi"] and s["lo"] < s["hi"]
        assert s["models"] == {"clip": "tiny:hf-clip"} and s["variant"].startswith("100*max(cos,0)")
    run_cli("score", reference, *CLIP, "--db", db, "--quiet", check=0)
    assert rows(db, "SELECT config, key, value, models, variant FROM scores ORDER BY config, key") == per_image
    assert rows(db, "SELECT count(*) FROM score_summaries")[0][0] == len(summaries)

    # a run that fails after scoring (LPIPS diversity of one image per config) writes nothing
    p = run_cli("score", reference, *CLIP, "--metric", "lpips_diversity", "--model", "lpips_diversity=tiny:lpips",
                "--limit", "1", "--db", db, "--quiet")
    one_line_error(p, "lpips_diversity", "at least two images")
    assert rows(db, "SELECT config, key, value, models, variant FROM scores ORDER BY config, key") == per_image

    # a killed run: stopped while it scores (its progress bar is up), the previous rows stay whole
    proc = subprocess.Popen([sys.executable, "-m", "gensets.cli", "score", str(reference), *CLIP, "--db", str(db)],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seen = ""
    while "score " not in seen:
        ch = proc.stderr.read(1)
        assert ch, f"the run ended before scoring: {seen}"
        seen += ch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert rows(db, "SELECT config, key, value, models, variant FROM scores ORDER BY config, key") == per_image


@pytest.mark.slow
def test_set_metrics_against_a_reference_folder(reference, tmp_path):
    db, ref = tmp_path / "r.duckdb", image_folder(tmp_path / "real", 5)
    p = run_cli("score", reference, "--config", "texture", "--limit", "6", "--reference", ref, "--db", db, "--json",
                "--quiet", "--metric", "fid", "--model", "fid=tiny:inception", "--metric", "precision_recall",
                "--model", "precision_recall=tiny:inception", "--metric", "lpips_diversity",
                "--model", "lpips_diversity=tiny:lpips", check=0)
    out = {s["name"]: s for s in json.loads(p.stdout)}
    assert set(out) == {"fid", "precision", "recall", "lpips_diversity"}
    assert out["fid"]["value"] > 0 and out["fid"]["n"] == 6 and out["fid"]["reference"] == str(ref)
    assert out["fid"]["lo"] is None and out["fid"]["models"] == {"inception": "tiny:inception"}
    assert 0 <= out["precision"]["value"] <= 1 and out["recall"]["details"] == {"k": 3}
    assert out["lpips_diversity"]["reference"] is None and out["lpips_diversity"]["details"]["pairs"] > 0
    assert rows(db, "SELECT count(*) FROM scores")[0][0] == 0  # set-level metrics: summaries only


@pytest.mark.slow
def test_psnr_ssim_compare_each_image_with_its_init_image(tmp_path):
    """A shard of img2img samples (json.prompting.init_image, as GenBench RA records it) and the folder of init
    images: each image scored against its own, resized to its size; a changed init image is refused."""
    import hashlib

    from gensets.images import encode_image
    from gensets.quality import functional as F
    from gensets.records import Sample
    from gensets.shards import write_shard

    refs = image_folder(tmp_path / "refs", 2, seed=3, size=32)
    gen = [Image.open(refs / "r0.png").convert("RGB").resize((64, 64)), Image.open(refs / "r1.png").convert("RGB")]
    samples = []
    for i, im in enumerate(gen):
        data = (refs / f"r{i}.png").read_bytes()
        meta = {"prompt": "x", "prompting": {"init_image": f"r{i}.png",
                                             "init_image_sha256": hashlib.sha256(data).hexdigest()}}
        samples.append(Sample(f"s{i}", encode_image(im, "png", 100), "png", 0, meta))
    samples.append(Sample("s2", encode_image(gen[1], "png", 100), "png", 0, {"prompt": "no init image"}))
    (tmp_path / "d").mkdir()
    write_shard(tmp_path / "d" / "test-00000.tar", [s.to_wds() for s in samples])
    db = tmp_path / "p.duckdb"
    run_cli("score", tmp_path / "d" / "*.tar", "--metric", "psnr", "--metric", "ssim", "--pairs", refs, "--db", db,
            "--quiet", check=0)
    got = dict(((k, m), v) for k, m, v in rows(db, "SELECT key, metric, value FROM scores"))
    assert set(got) == {("s0", "psnr"), ("s0", "ssim"), ("s1", "psnr"), ("s1", "ssim")}  # s2 has no init image
    init0 = np.asarray(Image.open(refs / "r0.png").convert("RGB").resize((64, 64), Image.LANCZOS))
    assert got[("s0", "psnr")] == pytest.approx(F.psnr(np.asarray(gen[0]), init0))
    assert got[("s1", "ssim")] == pytest.approx(1.0)  # the image is its init image
    image_folder(tmp_path / "other", 2, seed=4, size=32)
    p = run_cli("score", tmp_path / "d" / "*.tar", "--metric", "psnr", "--pairs", tmp_path / "other", "--db", db,
                "--quiet")
    one_line_error(p, "sample s0", "sha256 differs", code=1)


@pytest.mark.slow
def test_real_metric_models_fail_fast_offline_in_one_line(reference, tmp_path):
    ref = image_folder(tmp_path / "real", 2)
    db = tmp_path / "x.duckdb"
    one_line_error(run_cli("score", reference, "--metric", "clip_score", "--db", db),
                   "'hf:openai/clip-vit-large-patch14@32bd64288804d66eefd0ccbe215aa642df71cc41' is not available",
                   "offline", code=3)  # exit 3: the environment (offline), not the command
    one_line_error(run_cli("score", reference, "--metric", "aesthetic", "--model", "aesthetic.clip=tiny:hf-clip",
                           "--db", db), "hf:ttj/sac-logos-ava1-l14-linearMSE@1e77fa0", "not available", code=3)
    one_line_error(run_cli("score", reference, "--metric", "fid", "--reference", ref, "--db", db),
                   "torch-fidelity:inception-v3-compat", "pickle", "--allow-pickle")
    one_line_error(run_cli("score", reference, "--metric", "fid", "--reference", ref, "--allow-pickle", "--db", db),
                   "torch-fidelity:inception-v3-compat", "not available", "offline", code=3)
    one_line_error(run_cli("score", reference, "--metric", "hps_v2", "--db", db), "hps_v2", "pickle checkpoints")
    one_line_error(run_cli("score", reference, "--metric", "fid", "--db", db), "--reference")
    one_line_error(run_cli("score", reference, *CLIP, "--model", "fid=tiny:inception", "--db", db), "--metric fid")
    assert not db.exists()  # nothing was scored


@pytest.mark.slow
def test_quality_thresholds_keep_images_out_of_the_queue_and_the_card_counts_them(tmp_path):
    ws = tmp_path / "ws"
    run_cli("build", ROOT / "configs" / "imagenet_d.quality.smoke.yaml", "--out", ws, "--quiet", check=0)
    samples = rows(ws / "state.duckdb", "SELECT s.key, s.kept, r.status, s.meta FROM samples s "
                                        "LEFT JOIN reviews r USING (key) ORDER BY key")
    below = set()
    for key, kept, status, meta in samples:
        q = json.loads(meta)["quality"]
        clip = next(s for s in q["scores"] if s["metric"] == "clip_score")
        assert clip["min"] == 25 and clip["passed"] == (clip["value"] >= 25)  # the threshold, with its value
        assert q["passed"] == all(s["passed"] for s in q["scores"])
        assert {(s["metric"], s["role"], s["spec"]) for s in q["scorers"]} == {
            ("clip_score", "clip", "tiny:hf-clip"), ("aesthetic", "clip", "tiny:hf-clip"),
            ("aesthetic", "head", "tiny:aesthetic-head")}
        if kept and not q["passed"]:
            below.add(key)
            assert status == "below-quality"
        elif kept:
            assert status == "pending"
    assert 0 < len(below) < sum(k for _, k, _, _ in samples)  # some images below, some above
    queue = {r["key"] for r in json.loads(run_cli("review", "list", ws, "--json", check=0).stdout)}
    assert queue and not queue & below
    listed = json.loads(run_cli("review", "list", ws, "--status", "below-quality", "--json", check=0).stdout)
    assert {r["key"] for r in listed} == below
    from gensets.curation.review_state import ReviewState

    for double in (False, True):  # the review page's queue, in single and in double review
        page = ReviewState(ws, reviewer="ana", double=double, hand_out=60)  # the whole queue on one page
        try:
            assert {r["key"] for r in page.page("ana", status="todo")["items"]} == queue
        finally:
            page.close()

    run_cli("finalize", ws, "--include-pending", check=0)
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    assert sum(f["below_quality"] for f in manifest["funnel"].values()) == len(below)
    published = {k for sh in manifest["shards"] for k in _keys(ws / "dataset" / sh["path"])}
    assert published == queue  # pending images published with --include-pending, the below-quality ones not
    card = (ws / "dataset" / "README.md").read_text()
    assert "| config | generated | kept by the filters | below quality | accepted | pending | rejected |" in card
    for config, f in manifest["funnel"].items():
        assert f"| {config} | {f['generated']} | {f['kept']} | {f['below_quality']} | 0 | {f['pending']} | 0 |" in card
    assert "## Quality scores" in card and "| clip_score | >= 25 | clip | `tiny:hf-clip` |" in card
    assert "name: quality" in card  # the card declares json.quality among the features
    for config in manifest["counts"]:
        assert (ws / "dataset" / "figures" / f"quality_{config}.png").is_file()

    # kept out by default only: a reviewer may still accept one, and finalize then publishes it
    key = sorted(below)[0]
    run_cli("review", "accept", ws, key, "--reviewer", "ana", check=0)
    run_cli("finalize", ws, check=0)
    assert {k for sh in json.loads((ws / "dataset" / "manifest.json").read_text())["shards"]
            for k in _keys(ws / "dataset" / sh["path"])} == {key}


def _keys(tar):
    from gensets.shards import iter_shard

    return [d["__key__"] for d in iter_shard(tar)]


def test_quality_config_errors_name_file_line_and_key(tmp_path):
    base = (ROOT / "configs" / "imagenet_d.smoke.yaml").read_text()
    for quality, fragments in [("quality:\n  fid: {min: 1}\n", ["quality.fid", "expected one of", "'clip_score'"]),
                               ("quality:\n  clip_score: {}\n", ["quality.clip_score", "give min, max or both"]),
                               ("quality:\n  clip_score: {min: 3, max: 1}\n", ["min 3.0 is above max 1.0"])]:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(base + quality)
        line = len(base.splitlines()) + 2
        p = run_cli("build", cfg, "--out", tmp_path / "ws", "--quiet")
        one_line_error(p, f"c.yaml:{line}: ", *fragments)
    assert not (tmp_path / "ws").exists()


@pytest.mark.slow
def test_card_tables_generators_and_the_quality_report(reference, tmp_path):
    rec = tmp_path / "rec"
    run_cli("build", ROOT / "configs" / "recognition.smoke.yaml", "--out", rec, "--quiet", check=0)
    run_cli("finalize", rec, check=0)
    db = tmp_path / "results.duckdb"
    run_cli("score", rec, *CLIP, "--metric", "pickscore", "--model", "pickscore=tiny:hf-clip", "--db", db, "--quiet",
            check=0)
    run_cli("score", reference, *CLIP, "--config", "texture", "--limit", "4", "--db", db, "--quiet", check=0)
    run_cli("card", rec, "--db", db, check=0)
    card = (rec / "dataset" / "README.md").read_text()
    per_image = rows(db, f"SELECT generator, metric, avg(value) FROM scores WHERE dataset = '{rec / 'dataset'}' "
                         "GROUP BY ALL ORDER BY ALL")
    assert [g for g, m, _ in per_image if m == "clip_score"] == ["tiny:sd (2 steps)", "tiny:sd (4 steps)"]
    assert "By generator (mean per image):" in card and "| generator | clip_score | pickscore |" in card
    for g in ("tiny:sd (2 steps)", "tiny:sd (4 steps)"):
        means = {m: v for gg, m, v in per_image if gg == g}
        assert f"| {g} | {means['clip_score']:.4g} | {means['pickscore']:.4g} |" in card
    for config in ("sd_2_steps", "sd_4_steps"):
        assert (rec / "dataset" / "figures" / f"quality_{config}.png").is_file()

    out = tmp_path / "report"
    run_cli("report", "quality", rec, reference, "--db", db, "--out", out, check=0)
    rep = json.loads((out / "report.json").read_text())
    got = {(r["name"], r["config"]): r["cells"]["clip_score"]["value"] for r in rep["rows"]}
    assert set(got) == {("rec", "sd_2_steps"), ("rec", "sd_4_steps"), ("ws", "texture")}
    best = max(got.values())
    md = (out / "report.md").read_text()
    table_rows = [line for line in md.split("## What computed")[0].splitlines() if line.startswith("|")]
    assert "\n".join(table_rows).count("**") == 2 * 2  # one bold cell per column (clip_score, pickscore)
    assert f"**{best:.4g}**" in md and "tiny:sd (4 steps)" in md
    assert (out / "quality.png").is_file()
    one_line_error(run_cli("report", "quality", "--db", db, "--metric", "fid", "--out", out), "no quality scores")


def test_quality_key_is_frozen_only_when_set():
    """Builds without quality: keep their config dict and fingerprint (the key is left out at its default);
    with it, the frozen config holds the thresholds and the build has another id."""
    from gensets.config import fingerprint, to_dict
    from gensets.workspace import load_build_config

    _, plain = load_build_config(ROOT / "configs" / "imagenet_d.smoke.yaml")
    _, same = load_build_config(ROOT / "configs" / "imagenet_d.smoke.yaml", ["quality=null"])
    _, with_q = load_build_config(ROOT / "configs" / "imagenet_d.smoke.yaml", ["quality.clip_score.min=25"])
    assert "quality" not in to_dict(plain) and fingerprint(same) == fingerprint(plain)
    assert to_dict(with_q)["quality"] == {"clip_score": {"min": 25.0, "max": None, "models": {}}}
    assert fingerprint(with_q) != fingerprint(plain)
