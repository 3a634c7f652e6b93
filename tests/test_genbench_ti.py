"""GenBench TI (Sec. 4, Table 3): Textual Inversion of a token per class on tiny:sd, its files, resume, generation."""

import hashlib
import json
import shutil
import textwrap

import numpy as np
import pytest

from gensets.builders.runner import build
from gensets.errors import ConfigError
from gensets.shards import iter_shard
from gensets.workspace import Workspace, load_build_config

from .conftest import ROOT

SMOKE = ROOT / "configs" / "genbench.ti.smoke.yaml"
TOKEN = "<cifar-10 cat>"
TEMPLATES = ["a photo of a {}.", "a blurry photo of a {}."]


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def images():
    from PIL import Image, ImageDraw

    out = []
    for colour in ("red", "blue"):
        im = Image.new("RGB", (40, 40), "white")
        ImageDraw.Draw(im).ellipse((8, 8, 32, 32), fill=colour)
        out.append(im)
    return out


def pipe():
    from gensets.models import load_generator

    return load_generator("tiny:sd", device="cpu")


def train(images, tmp, steps=5, on_step=None):
    from gensets.models.textual_inversion import Training, train_textual_inversion

    t = Training(steps=steps, learning_rate=5e-2, batch_size=2, resolution=32, checkpoint_every=2, seed=7)
    return train_textual_inversion(pipe().pipe, images, token=TOKEN, initializer="cat", templates=TEMPLATES,
                                   concept="cat", training=t, checkpoint=tmp / "cat.ckpt.safetensors", key="k",
                                   on_step=on_step)


def test_embedding_loads_back_and_changes_the_images(tmp_path, images):
    import torch

    from gensets.models.textual_inversion import save_embedding

    out = train(images, tmp_path, steps=3)
    assert len(out["losses"]) == 3 and out["resumed_from"] == 0
    path = tmp_path / "cat.safetensors"
    save_embedding(path, TOKEN, out["embedding"])
    gen = pipe()
    start = gen.pipe.text_encoder.get_input_embeddings().weight[out["initializer_id"]].detach().clone()
    gen.pipe.load_textual_inversion(str(path), token=TOKEN)
    tid = gen.pipe.tokenizer.convert_tokens_to_ids(TOKEN)
    row = gen.pipe.text_encoder.get_input_embeddings().weight[tid].detach()
    assert torch.equal(row, out["embedding"][0])  # what diffusers loads is the tensor saved, exactly
    assert not torch.equal(row, start)  # training moved it away from the initializer's row

    def image(prompt):
        return np.asarray(gen.generate([prompt], [3], steps=2, width=64, height=64)[0], dtype=np.int16)

    with_token, without = image(f"a photo of a {TOKEN} cat."), image("a photo of a cat.")
    assert np.abs(with_token - without).sum() > 0
    # the trained row, not just an extra token, changes the image: the initializer's row in its place differs
    with torch.no_grad():
        gen.pipe.text_encoder.get_input_embeddings().weight[tid] = start
    assert np.abs(with_token - image(f"a photo of a {TOKEN} cat.")).sum() > 0


def test_killed_training_resumes_byte_identical(tmp_path, images):
    from gensets.models.textual_inversion import save_embedding

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir(), cut.mkdir()
    ref = train(images, whole)
    save_embedding(whole / "e.safetensors", TOKEN, ref["embedding"])

    def kill_at_3(step):
        if step == 3:  # after step 3's update, before its checkpoint would come (every 2 steps): lost work
            raise Stop

    with pytest.raises(Stop):
        train(images, cut, on_step=kill_at_3)
    again = train(images, cut)
    assert again["resumed_from"] == 2  # the last checkpoint, not step 0 and not step 3
    save_embedding(cut / "e.safetensors", TOKEN, again["embedding"])
    assert again["losses"] == ref["losses"]
    assert (cut / "e.safetensors").read_bytes() == (whole / "e.safetensors").read_bytes()
    assert (cut / "cat.ckpt.safetensors").read_bytes() == (whole / "cat.ckpt.safetensors").read_bytes()


def test_build_trains_generates_and_resumes_without_retraining(tmp_path):
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    shutil.copy(SMOKE, cfg_dir / SMOKE.name)
    shutil.copytree(ROOT / "configs" / "genbench.smoke-refs", cfg_dir / "genbench.smoke-refs")
    out = tmp_path / "ws"
    first = build(cfg_dir / SMOKE.name, out, quiet=True)
    assert first["units"] == 2 + 4 and first["samples_written"] == 8  # 2 trainings, 2 classes x (ST, TI) units
    ti = out / "ti"
    prov = json.loads((ti / "cat.json").read_text())
    assert prov["token"] == TOKEN and len(prov["losses"]) == 4 and prov["training"]["applied_learning_rate"] == 1e-3
    assert [r["id"] for r in prov["references"]] == ["cat/0.png", "cat/1.png"]
    cat_sha = hashlib.sha256((ti / "cat.safetensors").read_bytes()).hexdigest()
    assert prov["embedding_sha256"] == cat_sha
    ti_samples = [d for shard in sorted((out / "candidates").glob("*.tar")) for d in iter_shard(shard)
                  if json.loads(d["json"])["strategy"] == "TI"]
    assert len(ti_samples) == 4
    for d in ti_samples:
        meta = json.loads(d["json"])
        name = meta["label"]
        assert meta["prompt"].startswith("a ") and f"<cifar-10 {name}> {name}" in meta["prompt"]
        assert meta["prompting"]["embedding"] == f"ti/{name}.safetensors"
        assert meta["prompting"]["embedding_sha256"] == hashlib.sha256((ti / f"{name}.safetensors").read_bytes()
                                                                       ).hexdigest()

    # forget the cat's training (as if killed before its unit was committed): only it trains again, to the same bytes
    ws = Workspace(out)
    cat_unit = prov["unit"]
    lines = ws.manifest_path.read_text().splitlines(keepends=True)
    ws.manifest_path.write_text("".join(ln for ln in lines if json.loads(ln)["unit"] != cat_unit))
    (ti / "cat.safetensors").unlink()
    airplane = (ti / "airplane.safetensors").stat().st_mtime_ns, (ti / "airplane.ckpt.safetensors").stat().st_mtime_ns
    again = build(cfg_dir / SMOKE.name, out, quiet=True)
    assert again["units_run"] == 1 and again["samples_written"] == 0  # the same embedding: the same TI units
    assert hashlib.sha256((ti / "cat.safetensors").read_bytes()).hexdigest() == cat_sha
    assert ((ti / "airplane.safetensors").stat().st_mtime_ns, (ti / "airplane.ckpt.safetensors").stat().st_mtime_ns
            ) == airplane


def test_ti_needs_references_and_float32(tmp_path):
    def cfg(extra):
        p = tmp_path / "c.yaml"
        p.write_text(textwrap.dedent("""\
            builder: genbench
            dataset: cifar-10
            classes: [cat]
            strategies: [TI]
            generator: {model: "tiny:sd", steps: 2, width: 64, height: 64%s}
            """) % extra)
        return p

    with pytest.raises(ConfigError, match="reference.source: TI trains a token per class"):
        load_build_config(cfg(""))
    (tmp_path / "refs" / "cat").mkdir(parents=True)
    p = cfg(", dtype: float16")
    p.write_text(p.read_text() + "reference: {source: folder:refs}\n")
    with pytest.raises(ConfigError, match="generator.dtype: TI trains in float32"):
        load_build_config(p)
    p.write_text(p.read_text().replace("strategies: [TI]", "strategies: [TI+CE]"))
    with pytest.raises(ConfigError, match="combines 2 prompt sources"):
        load_build_config(p)


RETRIEVAL_TI = textwrap.dedent("""\
    builder: genbench
    name: ti-retrieval
    seed: 0
    dataset: cifar-10
    classes: [cat]
    shots: 2
    images_per_prompt: 2
    strategies: [TI]
    reference: {source: retrieval, per_class: 2}
    retrieval: {pool: "folder:genbench.smoke-pool", clip: "tiny:clip"}
    ti: {steps: 2, batch_size: 2, checkpoint_every: 2}
    generator: {model: "tiny:sd", steps: 2, width: 64, height: 64, batch_size: 4}
    resize: 32
    unit_size: 2
    """)


def test_ti_trains_on_the_retrievals_best_images_and_replans_with_the_pool(tmp_path):
    from gensets.builders.genbench import plan
    from gensets.builders.genbench.baselines import pool_identity, retrieve
    from gensets.builders.genbench.references import retrieved_references

    def config_dir(name):
        d = tmp_path / name
        d.mkdir()
        (d / "c.yaml").write_text(RETRIEVAL_TI)
        shutil.copytree(ROOT / "configs" / "genbench.smoke-pool", d / "genbench.smoke-pool")
        return d

    first = config_dir("a")
    build(first / "c.yaml", tmp_path / "ws", quiet=True)
    prov = json.loads((tmp_path / "ws" / "ti" / "cat.json").read_text())
    cfg = load_build_config(first / "c.yaml")[1]
    expected = retrieved_references(cfg, retrieve(cfg, ["cat"]))["cat"]
    assert len(expected) == 2
    assert prov["references"] == [{"id": r.id, "sha256": r.sha256} for r in expected]
    pool = first / "genbench.smoke-pool"
    for r in prov["references"]:  # the ids name pool files; their sha256 is the file's, recomputed here
        assert r["id"].startswith("folder:genbench.smoke-pool/")
        path = pool / r["id"].split("/", 1)[1]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == r["sha256"]
    assert prov["reference_source"] == "retrieval" and prov["retrieval"] == pool_identity(cfg)

    def training_ids(d):
        return [u.id for u in plan(load_build_config(d / "c.yaml")[1], stage="ti")]

    assert training_ids(config_dir("same")) == training_ids(first)  # the pool's location is not in the ids
    changed = config_dir("changed")
    from PIL import Image

    Image.new("RGB", (32, 32), "green").save(changed / "genbench.smoke-pool" / "tree0.png")  # not even a top hit
    assert training_ids(changed) != training_ids(first)


def test_caption_similarity_filter(tmp_path):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from gensets.errors import DataError
    from gensets.models.tiny import tiny_path

    cfg_dir = tmp_path / "cfg"
    shutil.copytree(ROOT / "configs" / "genbench.smoke-refs", cfg_dir / "genbench.smoke-refs")
    text = SMOKE.read_text().replace("classes: [airplane, cat]", "classes: [cat]").replace(
        "strategies: [ST, TI]", "strategies: [TI]")

    def config(threshold):
        p = cfg_dir / f"t{threshold}.yaml"
        p.write_text(text.replace("  checkpoint_every: 2\n", "  checkpoint_every: 2\n  filter: {captioner: "
                                  f"\"tiny:blip-caption\", text_model: \"tiny:bert\", threshold: {threshold}}}\n"))
        return p

    build(config(-1), tmp_path / "ws", quiet=True)
    prov = json.loads((tmp_path / "ws" / "ti" / "cat.json").read_text())
    screened = prov["filter"]["screened"]
    assert [r["id"] for r in screened] == ["cat/0.png", "cat/1.png"] and all(r["kept"] for r in screened)
    assert [r["id"] for r in prov["references"]] == ["cat/0.png", "cat/1.png"]

    folder = tiny_path("bert")  # the same tiny BERT, read here by transformers; mean pooling and cosine by hand
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()

    def mean_state(s):
        with torch.no_grad():
            return model(**tok(s, return_tensors="pt")).last_hidden_state[0].numpy().astype(np.float64).mean(0)

    cls = mean_state("cat")
    for r in screened:
        cap = mean_state(r["caption"])
        assert r["caption"] and r["similarity"] == pytest.approx(
            cap @ cls / np.linalg.norm(cap) / np.linalg.norm(cls), abs=1e-5)

    with pytest.raises(DataError, match=r"^ti.filter: no reference image of class 'cat' .*>= 1.01") as e:
        build(config(1.01), tmp_path / "ws2", quiet=True)
    assert "\n" not in str(e.value)


def test_the_cards_ti_line_names_the_training_variant():
    """The card's TI line says which Textual Inversion trained the tokens (plain, without the authors' CLIP loss),
    as each class's ti/<class>.json does."""
    from gensets.builders.genbench.ti import VARIANT
    from gensets.registry import STRATEGIES

    _, cfg = load_build_config(SMOKE)
    line = STRATEGIES.get("TI")().details(cfg)
    assert f"variant: {VARIANT}" in line and "no CLIP loss" in VARIANT
