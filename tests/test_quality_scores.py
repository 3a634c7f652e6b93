"""The quality metrics of gensets.quality (issue 14): each on tiny stand-ins loaded through the real loaders, equal to
torchmetrics / torch-fidelity where they implement it, else to a hand computation or an independent implementation."""

import numpy as np
import pytest
import torch
from PIL import Image

from gensets.errors import DataError, ModelError
from gensets.quality import functional as F
from gensets.quality.metrics import Models
from gensets.registry import QUALITY_METRICS


def images(n, seed, size=64):
    """``n`` fixed random RGB images (noise over a colour ramp, so they differ in more than noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ramp = np.linspace(0, 255, size)[None, :, None] * rng.uniform(0.2, 1.0, 3)[None, None, :]
        a = np.clip(ramp + rng.normal(0, 40, (size, size, 3)), 0, 255).astype(np.uint8)
        out.append(Image.fromarray(a))
    return out


def metric(name, **specs):
    return QUALITY_METRICS.get(name)(Models(device="cpu"), specs)


PROMPTS = ["a photo of a red mug", "a blue backpack on a street", "a green chair in a bedroom", "a cat", "a ship"]


# ------------------------------------------------------------------ arithmetic, by hand or against scipy
def test_fid_equals_the_scipy_sqrtm_formula_on_small_gaussians():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(0)
    a = rng.normal(size=(60, 4)) @ rng.normal(size=(4, 4))
    b = rng.normal(1.0, 2.0, size=(50, 4))
    # the definition: |mu_a - mu_b|^2 + Tr(S_a + S_b - 2 sqrtm(S_a S_b)), unbiased covariances
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    d = a.mean(0) - b.mean(0)
    want = d @ d + np.trace(sa + sb - 2 * sqrtm(sa @ sb).real)
    assert F.fid(a, b) == pytest.approx(want, rel=1e-9)
    assert F.fid(a, a) == pytest.approx(0, abs=1e-9)


def test_psnr_and_ssim_by_hand():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (16, 16, 3)).astype(np.uint8)
    y = np.clip(x.astype(int) + rng.integers(-20, 21, x.shape), 0, 255).astype(np.uint8)
    mse = ((x.astype(float) - y.astype(float)) ** 2).mean()
    assert F.psnr(x, y) == pytest.approx(10 * np.log10(255 ** 2 / mse), rel=1e-6)  # torchmetrics: float32
    assert F.ssim(x, x) == pytest.approx(1.0, abs=1e-9)
    # constant images a and b: every local variance and covariance is 0, so SSIM = (2ab + C1) / (a^2 + b^2 + C1),
    # C1 = (0.01 * 255)^2
    a, b, c1 = 100.0, 140.0, (0.01 * 255) ** 2
    const_a, const_b = np.full((16, 16, 3), a, np.uint8), np.full((16, 16, 3), b, np.uint8)
    assert F.ssim(const_a, const_b) == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-6)


def test_clip_iqa_and_yes_probability_by_hand():
    # image (1, 0); anchors: good (0.6, 0.8), bad (0.8, 0.6): logits 100 * (0.6, 0.8) -> softmax of the good one
    # = 1 / (1 + e^20)
    assert F.clip_iqa([[1.0, 0.0]], [[0.6, 0.8], [0.8, 0.6]])[0] == pytest.approx(1 / (1 + np.exp(20)), rel=1e-6)
    # logits (0, ln 3): P(token 1) = 3 / 4
    assert F.yes_probability([[0.0, np.log(3)]], 1)[0] == pytest.approx(0.75)
    assert F.cosine([[3.0, 4.0]], [[4.0, 3.0]], scale=10)[0] == pytest.approx(10 * 24 / 25)
    assert F.clip_scores([[1.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [-1.0, 0.0]]).tolist() == pytest.approx(
        [100 / np.sqrt(2), 0.0])  # cos 0.7071 -> 70.71; cos -1 -> clipped to 0


# ------------------------------------------------------------------ Inception metrics against torchmetrics
class Pool3(torch.nn.Module):
    """torch-fidelity's extractor as torchmetrics' custom ``feature`` (a tensor out: one of its outputs), image by
    image, each image's outputs remembered (the three torchmetrics metrics see the same images: one forward each)."""

    seen: dict = {}

    def __init__(self, net, which):
        super().__init__()
        self.net, self.which = net, which
        self.num_features = (2048, 1008)[which]  # torchmetrics then skips its trial forward

    def forward(self, x):
        out = []
        for img in x:
            key = img.numpy().tobytes()
            if key not in Pool3.seen:
                Pool3.seen[key] = self.net(img[None])
            out.append(Pool3.seen[key][self.which])
        return torch.cat(out)


@pytest.fixture(scope="module")
def inception_sets():
    m = metric("fid", inception="tiny:inception")
    gen, ref = images(4, 1), images(5, 2)
    return m, gen, ref, m.extract(gen), m.extract(ref)


@pytest.mark.slow
def test_fid_kid_is_equal_torchmetrics_on_the_tiny_inception(inception_sets):
    from torchmetrics.image.fid import FrechetInceptionDistance
    from torchmetrics.image.inception import InceptionScore
    from torchmetrics.image.kid import KernelInceptionDistance

    m, gen, ref, g, r = inception_sets
    net = m.model("inception").model

    def u8(ims):
        return torch.stack([torch.as_tensor(np.asarray(im)).permute(2, 0, 1) for im in ims])

    fid = FrechetInceptionDistance(feature=Pool3(net, 0))
    fid.update(u8(ref), real=True)
    fid.update(u8(gen), real=False)
    ours = m.compute(g, [0] * 4, r)["fid"]["value"]
    assert ours == pytest.approx(float(fid.compute()), rel=1e-4)
    assert ours > 0
    # KID with one subset as large as both sets (4 and 4): every row on both sides, so no random draw matters
    kid_all = KernelInceptionDistance(feature=Pool3(net, 0), subsets=1, subset_size=4)
    kid_all.update(u8(ref[:4]), real=True)
    kid_all.update(u8(gen), real=False)
    r4 = {"2048": r["2048"][:4]}
    ours_kid = metric("kid", inception="tiny:inception").compute(g, [0] * 4, r4)["kid"]
    one = F.kid(g["2048"], r4["2048"], subsets=1, subset_size=4)[0]
    assert one == pytest.approx(float(kid_all.compute()[0]), abs=1e-5)  # both float32 kernels
    x, y = g["2048"].astype(np.float64), r4["2048"].astype(np.float64)  # the unbiased MMD^2 with (a.b / D + 1)^3
    kxx, kyy, kxy = ((u @ v.T / x.shape[1] + 1) ** 3 for u, v in ((x, x), (y, y), (x, y)))
    mmd = (kxx.sum() - np.trace(kxx) + kyy.sum() - np.trace(kyy)) / (4 * 3) - 2 * kxy.mean()
    assert one == pytest.approx(mmd, abs=1e-5)  # torch-fidelity's float32 kernels
    assert ours_kid["subset_size"] == 4 and ours_kid["value"] == pytest.approx(one, abs=1e-5)  # 100 subsets, each all rows
    isc = InceptionScore(feature=Pool3(net, 1), splits=1)
    isc.update(u8(gen))
    mean, _, splits = F.inception_score(g["logits_unbiased"], splits=1)
    assert mean == pytest.approx(float(isc.compute()[0]), rel=1e-5)
    logits = g["logits_unbiased"].astype(np.float64)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)  # exp(mean KL(p(y|x) || p(y))), by hand
    assert mean == pytest.approx(np.exp((probs * np.log(probs / probs.mean(0))).sum(1).mean()), rel=1e-6)
    assert splits == 1


def test_precision_recall_equals_a_knn_computation(inception_sets):
    from scipy.spatial.distance import cdist

    m, gen, ref, g, r = inception_sets
    out = metric("precision_recall", inception="tiny:inception").compute(g, [0] * 4, r)
    x, y = g["2048"].astype(np.float64), r["2048"].astype(np.float64)
    # a ball around each point, radius its 3rd nearest neighbour in its own set (column 0: itself)
    rx, ry = np.sort(cdist(x, x), axis=1)[:, 3], np.sort(cdist(y, y), axis=1)[:, 3]
    d = cdist(x, y)
    want = ((d <= ry[None, :]).any(axis=1).mean(), (d.T <= rx[None, :]).any(axis=1).mean())
    assert (out["precision"]["value"], out["recall"]["value"]) == pytest.approx(want)
    assert out["precision"]["k"] == 3


@pytest.mark.slow
def test_inception_features_do_not_depend_on_batching(inception_sets):
    m, gen, ref, g, r = inception_sets
    small = images(1, 9, size=48)
    f = m.extract(gen[:2] + small + gen[2:3])["2048"]  # two sizes in one batch: one forward per size
    assert np.allclose(f[[0, 1, 3]], g["2048"][:3], atol=1e-5)
    assert np.allclose(f[2], m.extract(small)["2048"][0], atol=1e-5)


# ------------------------------------------------------------------ CLIP metrics
class HFAdapter(torch.nn.Module):
    """A transformers 5 CLIPModel as torchmetrics (written for transformers 4) calls it: features as tensors."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config

    def get_image_features(self, pixel_values):
        return self.model.get_image_features(pixel_values=pixel_values).pooler_output

    def get_text_features(self, input_ids, attention_mask=None):
        return self.model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output


def test_clip_score_equals_torchmetrics_clipscore_per_image():
    from torchmetrics.multimodal.clip_score import CLIPScore

    m = metric("clip_score", clip="tiny:hf-clip")
    ims = images(5, 3)
    ours = m.score(ims, [{"prompt": p} for p in PROMPTS])
    clf = m.model("clip")
    for im, p, v in zip(ims, PROMPTS, ours, strict=True):
        tm = CLIPScore(model_name_or_path=lambda: (HFAdapter(clf.model), clf.processor))
        tm.update(torch.as_tensor(np.asarray(im)).permute(2, 0, 1), p)
        assert v == pytest.approx(float(tm.compute()), abs=1e-3)
    assert any(v > 0 for v in ours)


def test_clip_score_hessel_is_the_papers_scale_with_its_prefix():
    # the same CLIP: 2.5 / 100 of torchmetrics' scale, on "A photo depicts " + the prompt (clipscore.py)
    ims = images(3, 3)
    ours = metric("clip_score_hessel", clip="tiny:hf-clip").score(ims, [{"prompt": p} for p in PROMPTS[:3]])
    tm_scale = metric("clip_score", clip="tiny:hf-clip").score(ims, [{"prompt": f"A photo depicts {p}"}
                                                                      for p in PROMPTS[:3]])
    assert ours == pytest.approx([2.5 * v / 100 for v in tm_scale])
    assert any(v > 0 for v in ours)


def test_clip_iqa_equals_torchmetrics_functions_on_the_same_model():
    from torchmetrics.functional.multimodal.clip_iqa import (
        _clip_iqa_compute,
        _clip_iqa_format_prompts,
        _clip_iqa_get_anchor_vectors,
        _clip_iqa_update,
    )

    m = metric("clip_iqa", clip="tiny:hf-clip")
    ims = images(4, 4)
    clf = m.model("clip")
    prompts, names = _clip_iqa_format_prompts(("quality",))
    from gensets.quality.metrics import CLIP_IQA_PROMPTS

    assert list(CLIP_IQA_PROMPTS) == prompts  # gensets' copy of torchmetrics' "quality" pair
    model = HFAdapter(clf.model)
    anchors = _clip_iqa_get_anchor_vectors("hf", model, clf.processor, prompts, "cpu")
    pixels = torch.stack([torch.as_tensor(np.asarray(im)).permute(2, 0, 1).float() for im in ims])
    feats = _clip_iqa_update("hf", pixels, model, clf.processor, data_range=1.0, device="cpu")  # 0-255 kept
    want = _clip_iqa_compute(feats, anchors, names).reshape(-1).tolist()
    assert m.score(ims, [{}] * 4) == pytest.approx(want, abs=1e-4)


def test_aesthetic_equals_the_mlp_computed_in_numpy():
    from safetensors.numpy import load_file

    from gensets.models import tiny_path

    m = metric("aesthetic", clip="tiny:hf-clip", head="tiny:aesthetic-head")
    ims = images(3, 5)
    ours = m.score(ims, [{}] * 3)
    clf = m.model("clip")
    emb = clf.embed(clf.preprocess(ims)).numpy().astype(np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)  # improved-aesthetic-predictor: normalized(encode_image)
    w = load_file(str(tiny_path("aesthetic-head") / "model.safetensors"))
    x = emb
    for i in (0, 2, 4, 6, 7):  # five linear layers, no activations (the dropouts are off at inference)
        x = x @ w[f"layers.{i}.weight"].T.astype(np.float64) + w[f"layers.{i}.bias"]
    assert ours == pytest.approx(x[:, 0].tolist(), abs=1e-5)


def test_pickscore_equals_clipmodel_logits_per_image():
    m = metric("pickscore", model="tiny:hf-clip")
    ims = images(3, 6)
    ours = m.score(ims, [{"prompt": p} for p in PROMPTS[:3]])
    clf = m.model("model")
    inputs = clf.processor(images=ims, text=PROMPTS[:3], padding=True, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        logits = clf.model(**inputs).logits_per_image  # logit_scale.exp() * cos, transformers' own computation
    assert ours == pytest.approx(torch.diagonal(logits).tolist(), rel=1e-4)


def test_hps_v2_is_the_cosine_of_open_clip_features():
    m = metric("hps_v2", model="tiny:clip")
    ims = images(3, 7)
    ours = m.score(ims, [{"prompt": p} for p in PROMPTS[:3]])
    clf = m.model("model")
    with torch.inference_mode():
        a = clf.model.encode_image(clf.preprocess(ims))
        b = clf.model.encode_text(clf.tokenizer(PROMPTS[:3]))
    a, b = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    assert ours == pytest.approx((a * b).sum(-1).tolist(), abs=1e-5)
    with pytest.raises(ModelError, match="no default for its model role .*HPS_v2.1_compressed.pt"):
        metric("hps_v2")


def test_vqascore_equals_the_first_generated_tokens_yes_probability():
    from gensets.quality.metrics import VQA_QUESTION, vqa_inputs

    m = metric("vqascore", vlm="tiny:vlm")
    ims = images(2, 8, size=32)
    ours = m.score(ims, [{"prompt": p} for p in PROMPTS[:2]])
    vlm = m.model("vlm")
    yes = vlm.processor.tokenizer.encode("Yes", add_special_tokens=False)[0]
    for im, p, v in zip(ims, PROMPTS[:2], ours, strict=True):  # one at a time, as t2v_metrics: generate 1 token
        inputs = vqa_inputs(vlm, [im], [VQA_QUESTION.format(p)])
        out = vlm.model.generate(**inputs, max_new_tokens=1, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=vlm.pad_token_id)
        assert v == pytest.approx(float(torch.softmax(out.scores[0].double(), -1)[0, yes]), rel=1e-4)
    assert VQA_QUESTION.format("x") == 'Does this figure show "x"? Please answer yes or no.'
    with pytest.raises(ModelError, match="image-text-to-text"):
        metric("vqascore", vlm="tiny:vilt-vqa").load()


def test_lpips_diversity_equals_the_lpips_formula_by_hand():
    m = metric("lpips_diversity", lpips="tiny:lpips")
    ims = images(5, 9, size=32)
    labels = ["a", "a", "a", "b", "b"]
    out = m.compute(m.extract(ims), labels, None)["lpips_diversity"]
    net = m.model("lpips").model

    def lpips(x, y):  # Zhang et al. 2018: sum over layers of the spatial mean of w_l . (f^x_l - f^y_l)^2,
        # features unit-normalised along channels; inputs scaled to [-1, 1], then the network's shift / scale
        t = [(torch.as_tensor(np.asarray(i)).permute(2, 0, 1)[None].float() / 255) * 2 - 1 for i in (x, y)]
        fx, fy = (net.net(net.scaling_layer(v)) for v in t)
        total = 0.0
        for k in range(len(fx)):
            a = fx[k] / (fx[k].norm(dim=1, keepdim=True) + 1e-10)
            b = fy[k] / (fy[k].norm(dim=1, keepdim=True) + 1e-10)
            w = net.lins[k].model[-1].weight  # [1, C, 1, 1]
            total += float(((a - b) ** 2 * w).sum(1).mean())
        return total

    with torch.inference_mode():
        class_a = np.mean([lpips(ims[0], ims[1]), lpips(ims[0], ims[2]), lpips(ims[1], ims[2])])
        class_b = lpips(ims[3], ims[4])
    assert out["value"] == pytest.approx((class_a + class_b) / 2, rel=1e-4)  # mean of the two class means
    assert out["pairs"] == 4
    with pytest.raises(DataError, match="differ in size"):
        m.extract(images(1, 1, 32) + images(1, 1, 48))


def test_pair_metrics_resize_the_reference_and_compare():
    ims = images(2, 10, size=32)
    ref = ims[0].resize((16, 16), Image.LANCZOS)
    psnr = metric("psnr").score([ims[0]], [{"pair": ref}])[0]
    want = F.psnr(np.asarray(ims[0]), np.asarray(ref.resize((32, 32), Image.LANCZOS)))
    assert psnr == pytest.approx(want)
    assert metric("ssim").score([ims[1]], [{"pair": ims[1]}])[0] == pytest.approx(1.0)


def test_metric_roles_are_checked():
    with pytest.raises(ModelError, match="has no model role 'head'"):
        metric("clip_score", head="tiny:clip")
    with pytest.raises(ModelError, match="not a CLIP model"):
        metric("clip_score", clip="tiny:resnet").load()
    with pytest.raises(ModelError, match="not inception weights"):
        metric("fid", inception="tiny:lpips").load()


def test_lpips_library_specs_are_the_lpips_package_and_fail_offline_in_one_line(monkeypatch, tmp_path):
    """lpips:<net> (and its earlier name torchmetrics:lpips-<net>) is the authors' package's network: refused without
    allow_pickle, and offline without torchvision's backbone in the torch hub cache, one ModelError line."""
    from gensets.models import scorers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # an empty torch hub cache
    for spec in ("lpips:alex", "torchmetrics:lpips-vgg"):
        with pytest.raises(ModelError, match="pickle files; refusing pickle weights") as e:
            scorers.load_lpips(spec)
        assert "\n" not in str(e.value)
        with pytest.raises(ModelError, match="not in the torch hub cache; offline, use tiny:lpips") as e:
            scorers.load_lpips(spec, allow_pickle=True)
        assert "\n" not in str(e.value)
    import lpips

    assert isinstance(scorers.load_lpips("tiny:lpips", device="cpu").model, lpips.LPIPS)
