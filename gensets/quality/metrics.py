"""The image-quality and alignment metrics, one registered class each (``@QUALITY_METRICS.register(name)``).

A metric names the models it needs by role (``roles``: role -> (loader, default spec, pinned to a Hub commit
where one is known)); ``--model METRIC.ROLE=SPEC`` or a config's ``models:`` replaces a default. Two kinds:

    level "image"  ``score(images, metas) -> [value per image]`` (``needs`` "prompt": the sample's prompt;
                   "pair": each image's reference image, given in ``metas[i]["pair"]``)
    level "set"    ``extract(images) -> {name: array}`` batch by batch (metrics with the same ``feature_key`` share
                   what was extracted), then ``compute(gen, labels, ref) -> {row name: value}`` (``needs``
                   "reference": a reference set of real images)

Left out, for want of a safetensors or transformers-loadable checkpoint:
    - ImageReward (THUDM/ImageReward: ImageReward.pt, a pickle of their own BLIP-based code, not transformers);
    - HPS v2's default: the authors' checkpoints (xswu/HPSv2: HPS_v2_compressed.pt, HPS_v2.1_compressed.pt) are
      pickle files of an open_clip ViT-H-14. ``hps_v2`` computes their score on any CLIP the loaders read, e.g.
      ``--model hps_v2.model=open_clip:ViT-H-14/<path>/HPS_v2.1_compressed.pt --allow-pickle``;
    - CLIP-IQA's own weights (torchmetrics' "clip_iqa", via piq: a pickle ResNet-50 from GitHub): ``clip_iqa``
      is the CLIP-IQA prompt method on a transformers / open_clip CLIP (torchmetrics' other option);
    - VQAScore's CLIP-FlanT5 (their own code): ``vqascore`` runs any transformers image-text-to-text model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import DataError, ModelError
from ..models import load_classifier, load_vqa, scorers
from ..registry import QUALITY_METRICS
from . import functional as F

if TYPE_CHECKING:
    import numpy as np

CLIP_L14 = "hf:openai/clip-vit-large-patch14@32bd64288804d66eefd0ccbe215aa642df71cc41"
# OpenAI's ViT-B/32 through open_clip's "openai" tag (open_clip maps it to a Hub repo; no commit looked up: unpinned)
CLIP_B32 = "open_clip:ViT-B-32/openai"
INCEPTION = "torch-fidelity:inception-v3-compat"  # torch-fidelity's release v0.2.0 (not on the Hub: no commit)
LPIPS = "lpips:alex"  # torchvision's AlexNet + the lpips package's linear layers v0.1 (no Hub commit)
AESTHETIC_HEAD = "hf:ttj/sac-logos-ava1-l14-linearMSE@1e77fa05081323d99725fc40a9bf9f88180490e7"
PICKSCORE = "hf:yuvalkirstain/PickScore_v1@a4e4367c6dfa7288a00c550414478f865b875800"
# t2v_metrics' LLaVA-OneVision (lmms-lab/llava-onevision-qwen2-7b-ov) as transformers reads it; no commit of the
# llava-hf port could be looked up offline: unpinned (the default branch when loaded; the commit is recorded)
VQA_VLM = "hf:llava-hf/llava-onevision-qwen2-7b-ov-hf"


CLIP_IQA_PROMPTS = ("Good photo.", "Bad photo.")  # torchmetrics CLIP-IQA's "quality" prompt pair

class Models:
    """The models of one scoring run, each loaded once and shared by the metrics that name it (a CLIP used by
    CLIPScore, CLIP-IQA and the aesthetic predictor is loaded once)."""

    def __init__(self, *, allow_pickle: bool = False, trust_remote_code: bool = False, device: str | None = None):
        self.allow_pickle, self.trust_remote_code, self.device = allow_pickle, trust_remote_code, device
        self._loaded: dict[tuple[str, str], Any] = {}

    def get(self, loader: str, spec: str):
        key = (loader, spec)
        if key not in self._loaded:
            self._loaded[key] = self._load(loader, spec)
        return self._loaded[key]

    def _load(self, loader: str, spec: str):
        kw = dict(allow_pickle=self.allow_pickle, device=self.device)
        if loader == "clip":
            model = load_classifier(spec, labels=["image"], trust_remote_code=self.trust_remote_code, **kw)
            if not hasattr(model, "embed_text"):
                raise ModelError(f"model {spec!r} is not a CLIP model (use open_clip:..., hf:<a CLIP repo>, tiny:clip "
                                 "or tiny:hf-clip)")
            return model
        if loader == "vlm":
            model = load_vqa(spec, trust_remote_code=self.trust_remote_code, **kw)
            if model.kind != "image-text-to-text":
                raise ModelError(f"model {spec!r} is a {model.kind} VQA model; VQAScore needs an image-text-to-text "
                                 "model (hf:<repo>, tiny:vlm)")
            return model
        return {"inception": scorers.load_inception, "lpips": scorers.load_lpips,
                "aesthetic-head": scorers.load_aesthetic_head}[loader](spec, **kw)


class Metric:
    name: ClassVar[str] = ""  # set by the registry
    level: ClassVar[str] = "image"
    needs: ClassVar[tuple[str, ...]] = ()
    roles: ClassVar[dict[str, tuple[str, str | None]]] = {}
    no_default: ClassVar[str] = ""  # why a role has no default spec
    higher_is_better: ClassVar[bool] = True
    variant: ClassVar[str] = ""  # what computes it, recorded with every value
    description: ClassVar[str] = ""

    def __init__(self, models: Models, specs: dict[str, str] | None = None):
        specs = dict(specs or {})
        unknown = sorted(set(specs) - set(self.roles))
        if unknown:
            raise ModelError(f"metric {self.name!r} has no model role {unknown[0]!r} (roles: {', '.join(self.roles)})")
        self.models = models
        self.specs = {role: specs.get(role) or default for role, (_, default) in self.roles.items()}
        for role, spec in self.specs.items():
            if not spec:
                raise ModelError(f"metric {self.name!r} has no default for its model role {role!r} ({self.no_default}):"
                                 f" pass --model {self.name}.{role}=SPEC")

    def model(self, role: str):
        return self.models.get(self.roles[role][0], self.specs[role])

    def load(self) -> None:
        """Load every model now, so a missing one fails in one line before any work."""
        for role in self.roles:
            self.model(role)

    def provenance(self) -> dict:
        """What computed the values: the metric, its variant, each role's spec and the commit loaded."""
        return {"metric": self.name, "variant": self.variant, "models": dict(self.specs),
                "commits": {role: getattr(self.model(role), "revision", None) for role in self.roles}}

    # level "image"
    def score(self, images: list, metas: list[dict]) -> list[float]:
        raise NotImplementedError

    # level "set"
    def feature_key(self) -> tuple:
        return (self.name, tuple(sorted(self.specs.items())))

    def extract(self, images: list) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def compute(self, gen: dict[str, np.ndarray], labels: list, ref: dict[str, np.ndarray] | None) -> dict[str, dict]:
        """``{row name: {"value": v, **details}}`` (FID: one row; precision / recall: two) from what ``extract``
        gave for the generated set (``labels``: each image's class) and the reference set."""
        raise NotImplementedError


def prompts_of(metas: list[dict]) -> list[str]:
    out = []
    for m in metas:
        p = m.get("prompt")
        if not isinstance(p, str):
            raise DataError(f"sample {m.get('key')!r} has no prompt: a text-image metric needs one")
        out.append(p)
    return out


def _clip_embed(clip, images: list) -> np.ndarray:
    return clip.embed(clip.preprocess(images)).cpu().numpy()


def _text_embed(clip, texts: list[str]) -> np.ndarray:
    return clip.embed_text(texts).cpu().numpy()


# ------------------------------------------------------------------ per image
@QUALITY_METRICS.register("clip_score")
class ClipScore(Metric):
    """CLIPScore of an image and its prompt, ``100 * max(cos(image, text), 0)`` (:func:`gensets.metrics.clip_score`),
    as torchmetrics' CLIPScore computes it, with its default model (openai/clip-vit-large-patch14). Hessel et al.
    (2021, Sec. 3) define it as ``2.5 * max(cos, 0)`` on ViT-B/32; text-to-image papers report torchmetrics' scale."""

    needs = ("prompt",)
    roles = {"clip": ("clip", CLIP_L14)}
    variant = "100*max(cos,0) (torchmetrics CLIPScore)"
    description = "text-image alignment: CLIP cosine of image and prompt x 100"

    def score(self, images, metas):
        clip = self.model("clip")
        return F.clip_scores(_clip_embed(clip, images), _text_embed(clip, prompts_of(metas))).tolist()


@QUALITY_METRICS.register("clip_score_hessel")
class ClipScoreHessel(ClipScore):
    """CLIPScore as its paper's code computes it (Hessel et al. 2021, Sec. 3; jmhessel/clipscore clipscore.py):
    ``2.5 * max(cos(image, "A photo depicts " + prompt), 0)`` on OpenAI's CLIP ViT-B/32 (its own preprocessing).
    A named variant of ``clip_score`` (torchmetrics' scale, which text-to-image results report)."""

    roles = {"clip": ("clip", CLIP_B32)}
    variant = "2.5*max(cos,0), 'A photo depicts ' prefix (clipscore.py)"
    description = "CLIPScore as Hessel et al.'s code (w = 2.5, ViT-B/32, 'A photo depicts' prefix)"

    def score(self, images, metas):
        clip = self.model("clip")
        texts = [f"A photo depicts {p}" for p in prompts_of(metas)]
        return (F.clip_scores(_clip_embed(clip, images), _text_embed(clip, texts)) * 2.5 / 100).tolist()


@QUALITY_METRICS.register("clip_iqa")
class ClipIQA(Metric):
    """CLIP-IQA (Wang et al. 2023): how much closer an image's CLIP embedding is to "Good photo." than to "Bad
    photo." (torchmetrics' prompt pair "quality", ``_clip_iqa_compute``). The authors' ResNet-50 weights (torchmetrics'
    "clip_iqa" via piq) are a pickle file from GitHub: this runs on a transformers / open_clip CLIP, torchmetrics'
    other option, by default openai/clip-vit-large-patch14."""

    roles = {"clip": ("clip", CLIP_L14)}
    variant = "prompts ('Good photo.', 'Bad photo.'), CLIP from the spec (torchmetrics CLIP-IQA)"
    # torchmetrics' "quality" pair (tests/test_quality_scores.py checks it against torchmetrics' own table)
    description = "no-reference image quality: P('Good photo.' vs 'Bad photo.') under CLIP"

    def score(self, images, metas):
        clip = self.model("clip")
        if not hasattr(self, "_anchors"):
            self._anchors = _text_embed(clip, list(CLIP_IQA_PROMPTS))
        return F.clip_iqa(_clip_embed(clip, images), self._anchors).tolist()


@QUALITY_METRICS.register("aesthetic")
class Aesthetic(Metric):
    """LAION aesthetic predictor v2 (christophschuhmann/improved-aesthetic-predictor, simple_inference.py): its MLP
    (sac+logos+ava1-l14-linearMSE) on the L2-normalised CLIP ViT-L/14 image embedding; about 1-10. The authors load
    OpenAI's ``clip`` package; openai/clip-vit-large-patch14 holds the same weights."""

    roles = {"clip": ("clip", CLIP_L14), "head": ("aesthetic-head", AESTHETIC_HEAD)}
    variant = "sac+logos+ava1-l14-linearMSE MLP on normalised CLIP image embeddings"
    description = "LAION aesthetic score v2 (1-10)"

    def score(self, images, metas):
        import torch

        head = self.model("head")
        emb = torch.as_tensor(_clip_embed(self.model("clip"), images), dtype=torch.float32)  # already normalised
        if emb.shape[1] != head.model.input_size:
            raise ModelError(f"metric 'aesthetic': the CLIP gives {emb.shape[1]}-d embeddings, the head "
                             f"{self.specs['head']!r} takes {head.model.input_size}")
        with torch.inference_mode():
            return head.model(emb.to(head.device)).reshape(-1).double().cpu().tolist()


@QUALITY_METRICS.register("pickscore")
class PickScore(Metric):
    """PickScore (Kirstain et al. 2023): CLIP-H fine-tuned on Pick-a-Pic; ``logit_scale.exp() * cos(image, text)``
    as the authors' README computes it. They load the processor from laion/CLIP-ViT-H-14-laion2B-s32B-b79K; the
    PickScore_v1 repo carries the processor its authors uploaded with the model, used here."""

    needs = ("prompt",)
    roles = {"model": ("clip", PICKSCORE)}
    variant = "logit_scale.exp() * cos (PickScore README)"
    description = "human preference (Pick-a-Pic)"

    def score(self, images, metas):
        import torch

        clip = self.model("model")
        with torch.inference_mode():
            scale = float(clip.model.logit_scale.exp())
        return F.cosine(_clip_embed(clip, images), _text_embed(clip, prompts_of(metas)), scale).tolist()


@QUALITY_METRICS.register("hps_v2")
class HPSv2(Metric):
    """HPS v2 (Wu et al. 2023): an open_clip ViT-H-14 fine-tuned on HPD v2; the score is the cosine of the
    normalised image and prompt features (hpsv2/img_score.py: ``diagonal(image_features @ text_features.T)``).
    The authors' checkpoints are pickle files only: no default; pass one with --allow-pickle."""

    needs = ("prompt",)
    roles = {"model": ("clip", None)}
    no_default = "xswu/HPSv2 holds pickle checkpoints only, e.g. open_clip:ViT-H-14/<path>/HPS_v2.1_compressed.pt"
    higher_is_better = True
    variant = "cos(image, text) (hpsv2 img_score.py)"
    description = "human preference (HPD v2)"

    def score(self, images, metas):
        clip = self.model("model")
        return F.cosine(_clip_embed(clip, images), _text_embed(clip, prompts_of(metas))).tolist()


VQA_QUESTION = 'Does this figure show "{}"? Please answer yes or no.'


@QUALITY_METRICS.register("vqascore")
class VQAScore(Metric):
    """VQAScore (Lin et al. 2024): P("Yes") of a VLM asked ``Does this figure show "{prompt}"? Please answer yes or
    no.``, the softmax of the first answer token at the token of "Yes", as t2v_metrics' chat-model scorers
    compute it (t2v_metrics/models/vqascore_models/llavaov_model.py: question in double quotes, ``tokenizer.encode(
    "Yes")[0]``; here without special tokens, which is that id for their Qwen tokenizer). The paper's own
    CLIP-FlanT5 is their code, not transformers: the default is the LLaVA-OneVision they also support."""

    needs = ("prompt",)
    roles = {"vlm": ("vlm", VQA_VLM)}
    variant = 'P(Yes | Does this figure show "{prompt}"? Please answer yes or no.) (t2v_metrics)'
    description = "text-image alignment: P(Yes) of a VLM"

    def score(self, images, metas):
        import torch

        vlm = self.model("vlm")
        yes = vlm.processor.tokenizer.encode("Yes", add_special_tokens=False)[0]
        with torch.inference_mode():
            inputs = vqa_inputs(vlm, images, [VQA_QUESTION.format(p) for p in prompts_of(metas)])
            logits = vlm.model(**inputs).logits[:, -1, :]  # left padding: the last position of every row
        return F.yes_probability(logits, yes).tolist()


def vqa_inputs(vlm, images: list, questions: list[str]):
    """The chat-template inputs of (image, question) pairs, left-padded, as gensets.models.vlm.ChatVQA builds them."""
    conversations = [[{"role": "user", "content": [{"type": "image", "image": im.convert("RGB")},
                                                   {"type": "text", "text": q}]}]
                     for im, q in zip(images, questions, strict=True)]
    return vlm.processor.apply_chat_template(conversations, add_generation_prompt=True, tokenize=True,
                                             return_dict=True, return_tensors="pt",
                                             processor_kwargs={"padding": True, "padding_side": "left"}
                                             ).to(vlm.device, dtype=vlm.model.dtype)  # a LLaVA-1.5 runs fp16 on CUDA


class _PairMetric(Metric):
    """A full-reference metric: each image against its own reference image (RA / image-to-image: the init image),
    resized to the image's size as diffusers' VaeImageProcessor resizes an init image (PIL Lanczos)."""

    needs = ("pair",)
    function = "psnr"  # the function of gensets.quality.functional

    def score(self, images, metas):
        import numpy as np
        from PIL import Image

        out = []
        for im, m in zip(images, metas, strict=True):
            ref = m["pair"].convert("RGB").resize(im.size, Image.LANCZOS)
            out.append(getattr(F, self.function)(np.asarray(im.convert("RGB")), np.asarray(ref)))
        return out


@QUALITY_METRICS.register("psnr")
class PSNR(_PairMetric):
    variant = "torchmetrics peak_signal_noise_ratio, data_range 255, reference resized (Lanczos)"
    description = "PSNR (dB) against the image's reference image"
    function = "psnr"


@QUALITY_METRICS.register("ssim")
class SSIM(_PairMetric):
    variant = "torchmetrics structural_similarity_index_measure, data_range 255, reference resized (Lanczos)"
    description = "SSIM against the image's reference image"
    function = "ssim"


# ------------------------------------------------------------------ per set
def _uint8_batch(images: list):
    """Images of one size as a uint8 tensor [B, 3, H, W] (torch-fidelity's input)."""
    import numpy as np
    import torch

    return torch.stack([torch.as_tensor(np.array(im.convert("RGB"))).permute(2, 0, 1) for im in images])


class _InceptionMetric(Metric):
    """A metric on torch-fidelity's Inception-v3 features (pool3 "2048", "logits_unbiased") of uint8 images at their
    own size (the network resizes to 299 px as TensorFlow 1 did, like torch-fidelity and torchmetrics)."""

    level = "set"
    roles = {"inception": ("inception", INCEPTION)}

    def feature_key(self):
        return ("inception", self.specs["inception"])

    def extract(self, images):
        import numpy as np
        import torch

        net = self.model("inception")
        by_size: dict = {}
        for i, im in enumerate(images):
            by_size.setdefault(im.size, []).append(i)
        out = {"2048": np.empty((len(images), 2048), np.float32), "logits_unbiased": np.empty((len(images), 1008), np.float32)}
        with torch.inference_mode():
            for idx in by_size.values():  # one forward per image size
                f, g = net.model(_uint8_batch([images[i] for i in idx]).to(net.device))
                out["2048"][idx], out["logits_unbiased"][idx] = f.cpu().numpy(), g.cpu().numpy()
        return out


def _ref(ref, name):
    if ref is None:
        raise DataError(f"metric {name!r} compares with real images: pass --reference")
    return ref


@QUALITY_METRICS.register("fid")
class FID(_InceptionMetric):
    """FID (Heusel et al. 2017) on torch-fidelity's Inception-v3 pool3 features (torch-fidelity / torchmetrics)."""

    needs = ("reference",)
    higher_is_better = False
    variant = "torch-fidelity inception-v3-compat pool3 (2048), fid_statistics_to_metric"
    description = "Fréchet Inception Distance to the reference set"

    def compute(self, gen, labels, ref):
        return {"fid": {"value": F.fid(gen["2048"], _ref(ref, self.name)["2048"])}}


@QUALITY_METRICS.register("kid")
class KID(_InceptionMetric):
    """KID (Bińkowski et al. 2018): torch-fidelity's defaults (100 subsets of 1000, cubic kernel, seed 2020); the
    subset size is clipped to the smaller set (recorded in the variant row as kid_subset_size)."""

    needs = ("reference",)
    higher_is_better = False
    variant = "torch-fidelity kid_features_to_metric, 100 subsets, poly kernel degree 3, seed 2020"
    description = "Kernel Inception Distance to the reference set"

    def compute(self, gen, labels, ref):
        mean, std, size = F.kid(gen["2048"], _ref(ref, self.name)["2048"])
        return {"kid": {"value": mean, "std": std, "subset_size": size}}


@QUALITY_METRICS.register("inception_score")
class InceptionScore(_InceptionMetric):
    """Inception Score (Salimans et al. 2016) on torch-fidelity's unbiased logits, 10 splits (clipped to N), rows
    shuffled with seed 2020 (torch-fidelity's defaults)."""

    variant = "torch-fidelity isc_features_to_metric, logits_unbiased, 10 splits, seed 2020"
    description = "Inception Score of the generated set"

    def compute(self, gen, labels, ref):
        mean, std, splits = F.inception_score(gen["logits_unbiased"])
        return {"inception_score": {"value": mean, "std": std, "splits": splits}}


@QUALITY_METRICS.register("precision_recall")
class PrecisionRecall(_InceptionMetric):
    """Improved precision / recall (Kynkäänniemi et al. 2019), k = 3, on Inception pool3 features (torch-fidelity)."""

    needs = ("reference",)
    variant = "torch-fidelity prc_features_to_metric, k=3, pool3 (2048)"
    description = "precision (fidelity) and recall (coverage) against the reference set"

    def compute(self, gen, labels, ref):
        p, r = F.precision_recall(gen["2048"], _ref(ref, self.name)["2048"])
        return {"precision": {"value": p, "k": 3}, "recall": {"value": r, "k": 3}}


@QUALITY_METRICS.register("lpips_diversity")
class LPIPSDiversity(Metric):
    """Diversity within a class: the mean LPIPS distance over every pair of images of a class, averaged over the
    classes (torchmetrics' LPIPS network, AlexNet, inputs in [0, 1]). Images of a class must share one size."""

    level = "set"
    roles = {"lpips": ("lpips", LPIPS)}
    variant = "mean pairwise LPIPS (torchmetrics, alex) within each class, mean over classes"
    description = "mean pairwise LPIPS within a class (higher: more diverse)"

    def extract(self, images):
        import numpy as np

        sizes = sorted({im.size for im in images})
        if len(sizes) > 1:
            raise DataError(f"metric 'lpips_diversity': the images of a config differ in size ({sizes[0]}, {sizes[1]})")
        return {"pixels": np.stack([np.asarray(im.convert("RGB")) for im in images])}

    def compute(self, gen, labels, ref):
        import torch

        net = self.model("lpips")
        by_class: dict = {}
        for i, y in enumerate(labels):
            by_class.setdefault(y, []).append(i)
        distances = {}
        with torch.inference_mode():
            for y, idx in by_class.items():
                pairs = [(a, b) for n, a in enumerate(idx) for b in idx[n + 1 :]]
                distances[y] = []
                for start in range(0, len(pairs), 32):  # 32 pairs at a time
                    chunk = pairs[start : start + 32]
                    a, b = (torch.as_tensor(gen["pixels"][[p[j] for p in chunk]]).permute(0, 3, 1, 2).float() / 255
                            for j in (0, 1))
                    # lpips.LPIPS's forward on images in [0, 1] (normalize=True scales them to [-1, 1])
                    d = net.model(a.to(net.device), b.to(net.device), normalize=True)
                    distances[y] += d.reshape(-1).double().cpu().tolist()
        value, n_pairs = F.lpips_diversity(distances)
        return {"lpips_diversity": {"value": value, "pairs": n_pairs}}
