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


def guide():
    """The CLIP of TI's loss, loaded as the build loads it (tiny:clip, open_clip)."""
    from gensets.models import load_classifier
    from gensets.models.textual_inversion import ClipGuidance

    return ClipGuidance(load_classifier("tiny:clip", labels=["cat"], templates=["{}"], device="cpu"))


def train(images, tmp, steps=5, on_step=None, loss="clip"):
    from gensets.models.textual_inversion import Training, train_textual_inversion

    t = Training(steps=steps, learning_rate=5e-2, batch_size=2, resolution=32, checkpoint_every=2, seed=7, loss=loss)
    return train_textual_inversion(pipe().pipe, images, token=TOKEN, initializer="cat", templates=TEMPLATES,
                                   concept="cat", training=t, checkpoint=tmp / "cat.ckpt.safetensors", key="k",
                                   clip=guide() if loss == "clip" else None, on_step=on_step)


def test_ti_loss_with_and_without_the_clip_term_worked_by_hand():
    """On a fixed batch (t = 0 and t = 500): the MSE, the DDPM step of the clean latents (Ho et al. eq. 7, noise
    drawn for t > 0), the VAE decode, the bicubic resize to the CLIP's 32 px, the all-pairs CLIP similarity with
    exp(logit_scale) / 100, all computed here from the same tiny models read by open_clip and diffusers directly."""
    import open_clip
    import torch
    import torch.nn.functional as F
    from diffusers import DDPMScheduler

    from gensets.models.textual_inversion import ti_loss
    from gensets.models.tiny import tiny_path

    p = pipe().pipe
    sched = DDPMScheduler.from_config(p.scheduler.config)
    assert sched.config.prediction_type == "epsilon" and not sched.config.clip_sample
    g = torch.Generator().manual_seed(0)
    side = 64 // 2 ** (len(p.vae.config.block_out_channels) - 1)  # the latents of 64 px images (resized to 32 for CLIP)
    shape = (2, p.vae.config.latent_channels, side, side)
    latents, noise, t = torch.randn(shape, generator=g), torch.randn(shape, generator=g), torch.tensor([0, 500])
    texts = ["a photo of a <cifar-10 cat> cat.", "a blurry photo of a <cifar-10 cat> cat."]
    ids = p.tokenizer(texts, padding="max_length", truncation=True, max_length=p.tokenizer.model_max_length,
                      return_tensors="pt").input_ids
    clip = guide()
    with torch.no_grad():
        hidden = p.text_encoder(ids)[0]
        plain = ti_loss(p.unet, p.vae, sched, hidden, latents, noise, t)
        both = ti_loss(p.unet, p.vae, sched, hidden, latents, noise, t, clip=clip, texts=texts, clip_lambda=0.5,
                       generator=torch.Generator().manual_seed(3))

        a = sched.alphas_cumprod.double()
        x, e = latents.double(), noise.double()
        noisy = a[t].sqrt().view(-1, 1, 1, 1) * x + (1 - a[t]).sqrt().view(-1, 1, 1, 1) * e
        eps = p.unet(noisy.float(), t, hidden).sample.double()
        mse = ((eps - e) ** 2).mean().item()
        z = torch.Generator().manual_seed(3)
        stepped = []
        for i, ti in enumerate(t.tolist()):  # the script steps the clean latents: sample = latents[i]
            at, prev = a[ti], (a[ti - 1] if ti > 0 else torch.tensor(1.0, dtype=torch.float64))
            beta = 1 - at / prev
            x0 = (x[i] - (1 - at).sqrt() * eps[i]) / at.sqrt()
            mean = prev.sqrt() * beta / (1 - at) * x0 + (at / prev).sqrt() * (1 - prev) / (1 - at) * x[i]
            var = (1 - prev) / (1 - at) * beta
            stepped.append(mean + (var.sqrt() * torch.randn(shape[1:], generator=z).double() if ti > 0 else 0))
        images = p.vae.decode(torch.stack(stepped).float() / p.vae.config.scaling_factor).sample
        assert images.shape[-1] == 64
        small = F.interpolate(images, size=(32, 32), mode="bicubic", align_corners=False)  # no normalisation
        model, _, _ = open_clip.create_model_and_transforms(f"local-dir:{tiny_path('clip')}")
        tok = open_clip.get_tokenizer(f"local-dir:{tiny_path('clip')}")
        img = model.eval().encode_image(small).double().numpy()
        txt = model.encode_text(tok(texts)).double().numpy()
        scale = model.logit_scale.exp().item()
    cos = (img / np.linalg.norm(img, axis=1, keepdims=True)) @ (txt / np.linalg.norm(txt, axis=1, keepdims=True)).T
    term = float(np.mean(1 - scale * cos / 100))
    diagonal = float(np.mean(1 - scale * np.diag(cos) / 100))

    assert plain["clip"] is None and plain["loss"].item() == plain["mse"].item() == pytest.approx(mse, rel=1e-5)
    assert both["mse"].item() == pytest.approx(mse, rel=1e-5)
    assert both["clip"].item() == pytest.approx(term, abs=1e-6)
    assert abs(term - diagonal) > 1e-6  # every (image, text) pair, as the script's mean of the B x B logits
    assert both["loss"].item() == pytest.approx(mse + 0.5 * term, rel=1e-5)
    assert scale == pytest.approx(1 / 0.07, rel=1e-5)  # tiny:clip's logit scale: not 100, so the /100 matters


def test_clip_loss_adds_its_term_and_moves_the_token(tmp_path, images):
    """Step 1 draws the same batch with either loss: the CLIP run's loss is the MSE run's plus its CLIP term, and
    the term's gradient reaches the token (the two embeddings differ after the step)."""
    import torch

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    clip, mse = train(images, tmp_path / "a", steps=1), train(images, tmp_path / "b", steps=1, loss="mse")
    assert mse["clip_losses"] == [] and len(clip["clip_losses"]) == 1
    assert clip["losses"][0] == pytest.approx(mse["losses"][0] + clip["clip_losses"][0], rel=1e-5)
    assert not torch.equal(clip["embedding"], mse["embedding"])


def test_ti_defaults_follow_the_paper_and_the_authors_trainer(tmp_path):
    from gensets.papers.genbench.config import TIConfig

    t = TIConfig()
    assert t.steps == 1000  # Sec. 4; example.sh's 500 is the option
    assert t.references == 5  # Table 3's FT Shot; pipeline.py --ref_shot 5
    assert (t.loss, t.clip, t.clip_lambda) == ("clip", "open_clip:ViT-B-16/openai", 1.0)
    assert t.scheduler == "DPMSolverMultistepScheduler"  # textual_inversion_sampling
    assert (t.batch_size, t.learning_rate, t.scale_lr, t.lr_scheduler) == (4, 5e-4, True, "constant")

    _, cfg = load_build_config(SMOKE)
    assert (cfg.ti.loss, cfg.ti.clip, cfg.ti.references) == ("clip", "tiny:clip", 2)
    p = tmp_path / "c.yaml"
    shutil.copytree(ROOT / "configs" / "genbench.smoke-refs", tmp_path / "genbench.smoke-refs")
    p.write_text(SMOKE.read_text().replace("  references: 2\n", ""))  # 5 of reference.per_class 2
    with pytest.raises(ConfigError, match="ti.references: 5 reference images per class, but reference.per_class "
                                          "takes 2"):
        load_build_config(p)


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


@pytest.mark.slow
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
    assert again["losses"] == ref["losses"] and again["clip_losses"] == ref["clip_losses"]
    assert len(ref["clip_losses"]) == 5  # the CLIP loss (the default) and its seeded DDPM-step noise resume too
    assert (cut / "e.safetensors").read_bytes() == (whole / "e.safetensors").read_bytes()
    assert (cut / "cat.ckpt.safetensors").read_bytes() == (whole / "cat.ckpt.safetensors").read_bytes()


@pytest.mark.slow
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
    assert prov["loss"] == "clip" and len(prov["clip_losses"]) == 4 and all(c > 0 for c in prov["clip_losses"])
    assert prov["clip"] == {"spec": "tiny:clip", "id": "tiny:clip", "revision": None, "lambda": 1.0, "input_size": 32}
    assert [r["id"] for r in prov["references"]] == ["cat/0.png", "cat/1.png"]
    cat_sha = hashlib.sha256((ti / "cat.safetensors").read_bytes()).hexdigest()
    assert prov["embedding_sha256"] == cat_sha
    ti_samples = [d for shard in sorted((out / "candidates").glob("*.tar")) for d in iter_shard(shard)
                  if json.loads(d["json"])["strategy"] == "TI"]
    assert len(ti_samples) == 4
    st_samples = [d for shard in sorted((out / "candidates").glob("*.tar")) for d in iter_shard(shard)
                  if json.loads(d["json"])["strategy"] == "ST"]
    assert {json.loads(d["json"])["generator"]["scheduler"] for d in st_samples} == {"DDIMScheduler"}
    for d in ti_samples:
        meta = json.loads(d["json"])
        assert meta["generator"]["scheduler"] == "DPMSolverMultistepScheduler"  # ti.scheduler, TI's images only
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
    ti: {steps: 2, batch_size: 2, checkpoint_every: 2, references: null, clip: "tiny:clip"}
    generator: {model: "tiny:sd", steps: 2, width: 64, height: 64, batch_size: 4}
    resize: 32
    unit_size: 2
    """)


@pytest.mark.slow
def test_ti_trains_on_the_retrievals_best_images_and_replans_with_the_pool(tmp_path):
    from gensets.papers.genbench import plan
    from gensets.papers.genbench.baselines import pool_identity, retrieve
    from gensets.papers.genbench.references import retrieved_references

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
    """The card's TI line says which Textual Inversion trained the tokens (the authors' CLIP loss, or plain), as
    each class's ti/<class>.json does, and how its images were sampled."""
    from dataclasses import replace

    from gensets.papers.genbench.ti import VARIANTS
    from gensets.registry import STRATEGIES

    _, cfg = load_build_config(SMOKE)
    line = STRATEGIES.get("TI")().details(cfg)
    assert f"loss: {VARIANTS['clip']}; CLIP `tiny:clip`, lambda 1.0" in line and "text-similarity" in VARIANTS["clip"]
    assert "the first 2 reference images" in line and "sampled with DPMSolverMultistepScheduler" in line
    plain = STRATEGIES.get("TI")().details(replace(cfg, ti=replace(cfg.ti, loss="mse")))
    assert f"loss: {VARIANTS['mse']})" in plain and "no CLIP loss" in VARIANTS["mse"]


def test_use_scheduler_swaps_for_a_block_and_restores():
    from gensets.errors import ModelError

    g = pipe()
    before = g.pipe.scheduler
    with g.use_scheduler("DPMSolverMultistepScheduler", "ti.scheduler"):
        assert g.scheduler == "DPMSolverMultistepScheduler"
        assert dict(g.pipe.scheduler.config)["beta_schedule"] == before.config.beta_schedule  # from the pipeline's
    assert g.pipe.scheduler is before
    with pytest.raises(Stop), g.use_scheduler("DPMSolverMultistepScheduler"):
        raise Stop
    assert g.pipe.scheduler is before
    with pytest.raises(ModelError, match=r"^ti.scheduler: unknown diffusers scheduler 'Nope'$"), \
            g.use_scheduler("Nope", "ti.scheduler"):
        pass
