"""ImageNet-D end to end on tiny models: build, kill + resume, two processes, review, finalize, load."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import HANG, ROOT, SMOKE, run_cli

EXPECTED_IMAGES = 3 * (3 + 2 + 2) * 2  # classes x nuisances x images per pair in the smoke config


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def shards_digest(ws: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ws / "candidates").glob("*.tar"))}


def temp_files(ws: Path) -> list[str]:
    return [str(p) for p in ws.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]


def test_build_records_everything(reference):
    import duckdb

    con = duckdb.connect(str(reference / "state.duckdb"), read_only=True)
    n, kept = con.execute("SELECT count(*), count(*) FILTER (WHERE kept) FROM samples").fetchone()
    assert n == EXPECTED_IMAGES
    # every surrogate's top-5 for every image
    assert con.execute("SELECT count(*) FROM surrogate_predictions").fetchone()[0] == n * 3 * 5
    # the filter's verdict equals the rule applied to the stored top-1s (min_failures: 2 of 3)
    rows = con.execute("""
        SELECT s.key, s.kept, s.meta->>'imagenet_ids', list(p.class_index ORDER BY p.model)
        FROM samples s JOIN surrogate_predictions p USING (key) WHERE p.rank = 1
        GROUP BY ALL""").fetchall()
    for key, kept_, ids, top1s in rows:
        failures = sum(t not in json.loads(ids) for t in top1s)
        assert kept_ == (failures >= 2), key
    assert con.execute("SELECT count(*) FROM reviews WHERE status = 'pending'").fetchone()[0] == kept
    con.close()
    assert temp_files(reference) == []


def test_dataset_loads_with_declared_features(reference):
    import datasets

    folder = reference / "dataset"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert datasets.get_dataset_config_names(str(folder)) == ["background", "texture", "material"]
    for config in ("background", "texture", "material"):
        ds = datasets.load_dataset(str(folder), config, split="test")
        assert len(ds) == manifest["counts"][config] == sum(
            s["n"] for s in manifest["shards"] if s["config"] == config)
        assert isinstance(ds.features["jpg"], datasets.Image)
        assert isinstance(ds.features["cls"], datasets.ClassLabel)
        assert len(ds.features["cls"].names) == 113
        row = ds[0]
        meta = row["json"]
        assert row["jpg"].size == (64, 64)
        assert ds.features["cls"].int2str(row["cls"]) == meta["label"]
        assert meta["nuisance_kind"] == config and meta["key"] == row["__key__"]
        assert meta["generator"]["spec"] == "tiny:sd" and meta["generator"]["scheduler"]
        assert meta["steps"] == 2 and meta["guidance"] == 7.5 and meta["negative_prompt"] == "blurry, low quality"
        assert meta["prompt"].startswith("a photo of a ") and isinstance(meta["seed"], int)
        assert [s["model"] for s in meta["surrogates"]] == ["tiny:resnet", "tiny:vit", "tiny:clip"]
        assert all(len(s["top5"]) == 5 for s in meta["surrogates"])
        assert meta["review"]["status"] == "pending" and meta["kept"] is True
        assert meta["versions"]["torch"]
    card = (folder / "README.md").read_text()
    from huggingface_hub import DatasetCard

    data = DatasetCard(card).data.to_dict()
    assert [c["config_name"] for c in data["configs"]] == ["background", "texture", "material"]
    assert "Curation funnel" in card


def test_verify_cli_on_dataset_and_candidates(reference):
    r = run_cli("verify", reference / "dataset", check=0)
    assert "ok" in r.stdout
    run_cli("verify", reference / "candidates", check=0)


def test_rebuild_is_byte_identical(reference, tmp_path):
    ws = tmp_path / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, "--include-pending", check=0)
    assert shards_digest(ws) == shards_digest(reference)
    assert tree_digest(ws / "dataset") == tree_digest(reference / "dataset")


def _manifest_rows(ws: Path) -> int:
    m = ws / "candidates" / "manifest.jsonl"
    return m.read_text().count("\n") if m.exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_units", [0, 5])
def test_sigkill_and_resume(reference, tmp_path, kill_after_units):
    """SIGKILL during model loading / mid-build, run again: the same bytes, no temp files."""
    ws = tmp_path / "ws"
    cmd = [sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--quiet"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if kill_after_units == 0 and (ws / "config.yaml").exists():
            time.sleep(1.0)
            break
        if kill_after_units and _manifest_rows(ws) >= kill_after_units:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the build finished before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = _manifest_rows(ws)
    assert done < 12
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    assert f"({done} done before" in r.stdout
    run_cli("finalize", ws, "--include-pending", check=0)
    assert shards_digest(ws) == shards_digest(reference)
    assert tree_digest(ws / "dataset") == tree_digest(reference / "dataset")
    assert temp_files(ws) == []


@pytest.mark.slow
def test_two_processes_under_accelerate(reference, tmp_path):
    ws = tmp_path / "ws"
    accelerate = Path(sys.executable).with_name("accelerate")
    p = subprocess.run(
        [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no",
         "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=HANG)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (ws / "candidates" / "manifest.jsonl").read_text().splitlines()]
    assert {r["rank"] for r in rows} == {0, 1} and {r["world"] for r in rows} == {2}
    assert len(rows) == 12
    run_cli("finalize", ws, "--include-pending", check=0)
    assert shards_digest(ws) == shards_digest(reference)
    assert tree_digest(ws / "dataset") == tree_digest(reference / "dataset")


def test_review_then_finalize(reference, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(reference, ws)
    lines = run_cli("review", "list", ws, "--config", "texture", check=0).stdout.split("\n")
    assert lines[0] == "key\tstatus\tlabel\tnuisance\treviewer\tnote\tprompt"  # a header, then one row per sample
    keys = [line.split("\t")[0] for line in lines[1:] if line]
    labels = {line.split("\t")[0]: line.split("\t")[2] for line in lines[1:] if line}
    assert len(keys) == 12
    run_cli("review", "accept", ws, keys[0], keys[1], "--reviewer", "ana", check=0)
    run_cli("review", "reject", ws, keys[2], "--reviewer", "ben", check=0)
    run_cli("review", "relabel", ws, keys[3], "--to", "teapot", "--reviewer", "ana", check=0)
    bad = run_cli("review", "accept", ws, "no_such_key")
    assert bad.returncode == 2 and "no_such_key" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_cli("review", "relabel", ws, keys[4], "--to", "unicorn")
    assert bad.returncode == 2 and "unicorn" in bad.stderr
    bad = run_cli("review", "relabel", ws, keys[4], "--to", "teapt")  # a typo: the closest classes are offered
    assert bad.returncode == 2 and "did you mean 'teapot'" in bad.stderr, bad.stderr
    same = run_cli("review", "relabel", ws, keys[4], "--to", labels[keys[4]])  # no relabel "mug -> mug"
    assert same.returncode == 2 and f"is a {labels[keys[4]]} already" in same.stderr, same.stderr
    run_cli("finalize", ws, check=0)

    import datasets

    ds = datasets.load_dataset(str(ws / "dataset"), "texture", split="test")
    got = {r["__key__"]: r for r in ds}
    assert set(got) == {keys[0], keys[1], keys[3]}
    assert got[keys[0]]["json"]["review"]["reviewer"] == "ana"
    relabeled = got[keys[3]]
    assert ds.features["cls"].int2str(relabeled["cls"]) == "teapot" == relabeled["json"]["label"]
    assert relabeled["json"]["review"]["status"] == "relabeled"
    assert relabeled["json"]["review"]["label_before"] != "teapot"
    assert datasets.get_dataset_config_names(str(ws / "dataset")) == ["texture"]
    import duckdb

    con = duckdb.connect(str(ws / "state.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM review_log").fetchone()[0] == 4
    con.close()
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    assert manifest["funnel"]["texture"] == {"generated": 12, "kept": 12, "accepted": 3, "pending": 8,
                                             "rejected": 1}


def test_verify_reports_each_problem_in_one_line(reference, tmp_path):
    import io
    import tarfile

    d = tmp_path / "dataset"
    shutil.copytree(reference / "dataset", d)
    shard = sorted((d / "background").glob("*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte inside a member
    shard.write_bytes(bytes(data))
    other = sorted((d / "texture").glob("*.tar"))[0]
    other.write_bytes(other.read_bytes()[: 5000])  # truncated
    evil = d / "material" / "evil.tar"
    with tarfile.open(evil, "w") as t:
        info = tarfile.TarInfo("../x.txt")
        info.size = 2
        t.addfile(info, io.BytesIO(b"hi"))
    r = run_cli("verify", d)
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert any(str(shard) in line and "sha256" in line for line in lines), lines
    assert any(str(other) in line and "truncated" in line for line in lines), lines
    assert any(str(evil) in line and "../x.txt" in line and ".." in line for line in lines), lines
    assert "Traceback" not in r.stdout + r.stderr
    assert run_cli("verify", tmp_path / "nowhere").returncode == 2


def test_unknown_model_spec_fails_in_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(SMOKE.read_text().replace("[tiny:resnet, tiny:vit, tiny:clip]", "[tiny:resnet, timm:no_such_net_v9]"))
    r = run_cli("build", cfg, "--out", tmp_path / "ws", "--quiet")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "timm:no_such_net_v9" in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_surrogates_load_on_the_default_device_or_the_given_one():
    import torch

    from gensets.curation.surrogates import SurrogateFilter
    from gensets.models.device import default_device

    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert default_device() == want  # one process: no accelerate state
    f = SurrogateFilter(["tiny:resnet", "tiny:clip"])
    assert [m.device for m in f.models] == [want, want] and f.device == want
    given = SurrogateFilter(["tiny:resnet"], device="cpu").models[0]
    assert given.device == "cpu" and {p.device.type for p in given.model.parameters()} == {"cpu"}


# ---------------------------------------------------------------- zero-shot CLIP as the authors evaluate it
def test_zero_shot_prompting_follows_the_authors_on_imagenet_d_only():
    from gensets.evaluation.data import Split
    from gensets.registry import PROTOCOLS

    names = ["coffee/french press", "t-shirt", "binder_(closed)"]
    imagenet_d = Split("background", "test", names, lambda: iter(()), builder="imagenet-d")
    other = Split("default", "test", names, lambda: iter(()), builder="genbench")
    official, readable = PROTOCOLS.get("zero-shot"), PROTOCOLS.get("zero-shot-readable")
    # evaluate_vlm.py: replace('_', ' ').replace('-', ' ').replace('/', ' or ').lower(), "A photo of a {c}"
    assert official.prompting(imagenet_d) == (["coffee or french press", "t shirt", "binder (closed)"],
                                              ["A photo of a {}"])
    # gensets' readable names ('_' -> ' '), the loaders' default template (None)
    assert readable.prompting(imagenet_d) == (["coffee/french press", "t-shirt", "binder (closed)"], None)
    assert official.prompting(other) == readable.prompting(other)
    imagenet_d.templates = ["a sketch of a {}"]  # --template replaces the prompt, not the names
    assert official.prompting(imagenet_d) == (["coffee or french press", "t shirt", "binder (closed)"],
                                              ["a sketch of a {}"])


def test_zero_shot_eval_equals_the_authors_computation(reference, tmp_path):
    """gensets eval --protocol zero-shot on the smoke ImageNet-D set against evaluate_vlm.py's arithmetic,
    written out here with open_clip on the same tiny model: text features of "A photo of a {c}" normalised,
    image features normalised, argmax of their product. The readable variant prompts "a photo of a {}."."""
    import duckdb
    import open_clip
    import torch
    from PIL import Image

    from gensets.evaluation.data import open_source
    from gensets.models.tiny import tiny_path

    db = tmp_path / "r.duckdb"
    for protocol in ("zero-shot", "zero-shot-readable"):
        r = run_cli("eval", reference / "dataset", "--model", "tiny:clip", "--protocol", protocol, "--db", db,
                    "--config", "texture", "--json", "--quiet", check=0)
        (row,) = json.loads(r.stdout)
        assert row["variant"] == {"zero-shot": "zero-shot (imagenet-d official)",
                                  "zero-shot-readable": "zero-shot-readable"}[protocol]
    con = duckdb.connect(str(db), read_only=True)
    got = {p: dict(con.execute("SELECT p.key, p.top5[1] FROM predictions p JOIN runs r USING (run_id) "
                               "WHERE r.protocol = ?", [p]).fetchall())
           for p in ("zero-shot (imagenet-d official)", "zero-shot-readable")}
    con.close()

    folder = tiny_path("clip")
    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
    model.eval()
    (split,) = open_source(str(reference / "dataset"), "texture", "test").splits
    records = list(split.records())
    with torch.no_grad():
        images = torch.stack([preprocess(r["image"].convert("RGB") if isinstance(r["image"], Image.Image)
                                         else r["image"]) for r in records])
        img = model.encode_image(images)
        img = img / img.norm(dim=-1, keepdim=True)
        expected = {}
        official = [c.replace("_", " ").replace("-", " ").replace("/", " or ").lower() for c in split.class_names]
        readable = [c.replace("_", " ") for c in split.class_names]
        for protocol, prompts in (("zero-shot (imagenet-d official)", [f"A photo of a {c}" for c in official]),
                                  ("zero-shot-readable", [f"a photo of a {c}." for c in readable])):
            text = model.encode_text(tokenizer(prompts))
            text = text / text.norm(dim=-1, keepdim=True)
            expected[protocol] = dict(zip([r["key"] for r in records], (img @ text.T).argmax(-1).tolist(),
                                          strict=True))
    assert got == expected
    assert len(records) == 12 and got["zero-shot (imagenet-d official)"] != got["zero-shot-readable"]


def _samples(ws: Path) -> dict[str, dict]:
    """key -> {meta, image bytes} of every candidate sample."""
    from gensets.shards import iter_shard

    return {d["__key__"]: {"meta": json.loads(d["json"]), "jpg": d["jpg"]}
            for p in sorted((ws / "candidates").glob("*.tar")) for d in iter_shard(p)}


def test_provenance_names_each_images_call_and_reproduces_it(reference, tmp_path):
    """Batched generation (the default): a unit's images in calls of batch_size (3 here: calls of 3 + the rest),
    each image's provenance naming its call; regenerating a call from provenance alone gives the stored bytes.
    Against the reference build (batch_size 4) the split differs, and so may the pixels: provenance says which."""
    import torch

    from gensets.images import encode_image
    from gensets.models import load_generator

    ws = tmp_path / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", "--set", "generator.batch_size=3", check=0)
    ours, ref = _samples(ws), _samples(reference)
    assert ours.keys() == ref.keys()
    calls: dict[tuple, list] = {}
    for key, s in ours.items():
        g = s["meta"]["generator"]
        calls.setdefault((s["meta"]["unit"], g["batch_index"]), []).append((g["batch_position"], key))
        assert (g["batching"], g["dtype"], g["attention"], g["compile"], g["channels_last"], g["device"]) == (
            "batched", "float32", "sdpa", False, False, "cpu")
        assert ref[key]["meta"]["generator"]["batch_size"] in (2, 4)  # the reference's units: 2 or 4 images
    sizes = {(u, b): sorted(p for p, _ in v) for (u, b), v in calls.items()}
    assert set(map(tuple, sizes.values())) <= {(0, 1, 2), (0,), (0, 1)}  # 4 images: 3 + 1; 2 images: 2
    assert any(v == [0] for v in sizes.values())
    for members in calls.values():
        assert all(ours[k]["meta"]["generator"]["batch_size"] == len(members) for _, k in members)
    # regenerate the first unit's calls from provenance only, as the build ran them (one torch thread)
    unit = min(u for u, _ in calls)
    gen = load_generator("tiny:sd")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for (u, _), members in sorted(calls.items()):
            if u != unit:
                continue
            metas = [ours[k]["meta"] for _, k in sorted(members)]
            m = metas[0]
            images = gen.generate([x["prompt"] for x in metas], [x["seed"] for x in metas],
                                  negative_prompts=[x["negative_prompt"] for x in metas], steps=m["steps"],
                                  guidance=m["guidance"], width=m["width"], height=m["height"])
            for (_, key), im in zip(sorted(members), images, strict=True):
                assert encode_image(im, "jpg", 90) == ours[key]["jpg"], key
    finally:
        torch.set_num_threads(threads)
    moved = [k for k in ours if ours[k]["meta"]["generator"]["batch_size"] != ref[k]["meta"]["generator"]["batch_size"]]
    assert moved and any(ours[k]["jpg"] != ref[k]["jpg"] for k in moved)  # another split: other float rounding


def test_per_image_switch_makes_each_image_reproducible_alone(tmp_path):
    """``batching: per-image``: every image its own call (batch_size 1, position 0); one image generated alone
    gives the stored bytes."""
    import torch

    from gensets.images import encode_image
    from gensets.models import load_generator

    ws = tmp_path / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", "--set", "generator.batching=per-image", check=0)
    samples = _samples(ws)
    by_unit: dict[str, list] = {}
    for s in samples.values():
        g = s["meta"]["generator"]
        assert (g["batching"], g["batch_size"], g["batch_position"]) == ("per-image", 1, 0)
        by_unit.setdefault(s["meta"]["unit"], []).append(g["batch_index"])
    assert all(sorted(v) == list(range(len(v))) for v in by_unit.values())  # call i of a unit: its image i
    key = max(samples, key=lambda k: samples[k]["meta"]["generator"]["batch_index"])
    m = samples[key]["meta"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        im = load_generator("tiny:sd").generate([m["prompt"]], [m["seed"]], negative_prompts=[m["negative_prompt"]],
                                                steps=m["steps"], guidance=m["guidance"], width=m["width"],
                                                height=m["height"])[0]
    finally:
        torch.set_num_threads(threads)
    assert encode_image(im, "jpg", 90) == samples[key]["jpg"]
