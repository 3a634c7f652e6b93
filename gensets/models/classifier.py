"""Image classifiers behind one interface: timm, transformers image-classification, torchvision, zero-shot CLIP.

Every classifier preprocesses with its model's OWN config (timm data config, the HF image processor,
torchvision's `weights.transforms()`, open_clip's eval transform) and returns logits over `label_names`. Zero-shot CLIP models (open_clip,
transformers CLIPModel) take the label space and prompt templates from the caller and build the
standard text classifier: per class, embed each template, L2-normalise, mean, renormalise;
logits = 100 * normalised image features @ classifier.
Weights are loaded from safetensors only, unless allow_pickle=True (pickle files are then still read with
torch.load(weights_only=True) by timm and open_clip, and by gensets before torchvision loads them).
torchvision's weights are pickle files only: a `torchvision:` spec always needs allow_pickle=True.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gensets.errors import ModelError, ModelUnavailable
from gensets.models import hub, loading
from gensets.models.device import default_device
from gensets.models.spec import ModelSpec, parse_spec
from gensets.models.tiny import built_model, tiny_path
from gensets.registry import FAMILIES, TINY_MODELS

from . import text_features as tf

if TYPE_CHECKING:
    import torch
    from PIL import Image

DEFAULT_TEMPLATES = ["a photo of a {}."]
NOT_A_CLASSIFIER = {  # what a model read by another loader is
    "text": "a text-to-text model (gensets.models.text.load_text2text)",
    "text-encoder": "a text encoder (gensets.models.text.load_text_encoder)",
    "vqa": "a visual question answering model (gensets.models.vlm.load_vqa)",
    "caption": "an image captioning model (gensets.models.captioner.load_captioner)",
    "diffusers": "an image generator",
    "inception": "a quality metric's network (gensets.models.scorers.load_inception)",
    "lpips": "a quality metric's network (gensets.models.scorers.load_lpips)",
    "aesthetic-head": "a quality metric's network (gensets.models.scorers.load_aesthetic_head)",
}


class Classifier:
    """A loaded classifier: preprocess(images) -> batch, logits(batch) -> [B, len(label_names)]."""

    kind: str = ""

    def __init__(
        self, *, spec: str, model_id: str, revision: str | None, label_names: list[str], model, device: str
    ):
        self.spec = spec
        self.model_id = model_id
        self.revision = revision
        self.label_names = list(label_names)
        self.model = model.to(device).eval()
        self.device = device

    def _cached(self, compute, templates, method: str, skip: tuple[str, ...]):
        """A zero-shot model's text classifier [dim, classes] on this classifier's device, computed by
        ``compute`` once and then read from the cache (gensets.models.text_features: keyed by the weights, every
        prompt, the method, the device and dtype)."""
        prompts = [[t(name) for t in templates] for name in self.label_names]
        dtype = str(next(self.model.parameters()).dtype)
        key = tf.cache_key(kind=self.kind, model_id=self.model_id, weights=tf.weights_id(self.revision, self.model, skip),
                           prompts=prompts, method=method, device=self.device, dtype=dtype)
        return tf.text_classifier(key, compute, len(self.label_names)).to(self.device)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(spec={self.spec!r}, kind={self.kind!r}, classes={len(self.label_names)})"
        )

    def preprocess(self, images: list[Image.Image]) -> torch.Tensor:
        raise NotImplementedError

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def logits(self, batch: torch.Tensor) -> torch.Tensor:
        import torch

        with torch.inference_mode():
            return self._forward(batch.to(self.device, non_blocking=True))  # pinned on CUDA: async

    def predict(self, images: list[Image.Image]) -> torch.Tensor:
        return self.logits(self.preprocess(images))

    def _embed(self, batch: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def embed(self, batch: torch.Tensor) -> torch.Tensor:
        """Image features before the classification head, [B, D] (CLIP models: L2-normalised)."""
        import torch

        with torch.inference_mode():
            return self._embed(batch.to(self.device, non_blocking=True)).float()


class TimmClassifier(Classifier):
    kind = "timm"

    def __init__(self, **kw):
        super().__init__(**kw)
        from timm.data import create_transform, resolve_model_data_config

        self.data_config = resolve_model_data_config(self.model)
        self.transform = create_transform(**self.data_config, is_training=False)

    def preprocess(self, images):
        import torch

        return torch.stack([self.transform(im.convert("RGB")) for im in images])

    def _forward(self, batch):
        return self.model(batch)

    def _embed(self, batch):
        return self.model.forward_head(self.model.forward_features(batch), pre_logits=True)


class HFClassifier(Classifier):
    kind = "hf"

    def __init__(self, *, image_processor, **kw):
        super().__init__(**kw)
        self.image_processor = image_processor

    def preprocess(self, images):
        return self.image_processor(images=[im.convert("RGB") for im in images], return_tensors="pt")[
            "pixel_values"
        ]

    def _forward(self, batch):
        return self.model(pixel_values=batch).logits

    def _embed(self, batch):
        out = self.model.base_model(pixel_values=batch)
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:  # e.g. ViT for classification (no pooler): the CLS token, as its head sees it
            hidden = out.last_hidden_state
            pooled = hidden[:, 0] if hidden.ndim == 3 else hidden.mean(dim=(2, 3))
        return pooled.flatten(1)


class TorchvisionClassifier(Classifier):
    kind = "torchvision"

    def __init__(self, *, transform, **kw):
        super().__init__(**kw)
        import torch

        self.transform = transform  # the weights' own: weights.transforms()
        self.head = [m for m in self.model.modules() if isinstance(m, torch.nn.Linear)][-1]

    def preprocess(self, images):
        import torch

        return torch.stack([self.transform(im.convert("RGB")) for im in images])

    def _forward(self, batch):
        return self.model(batch)

    def _embed(self, batch):
        """The input of the last linear layer (the classification head), as it sees it."""
        seen = []
        hook = self.head.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
        try:
            self.model(batch)
        finally:
            hook.remove()
        return seen[0].flatten(1)


class OpenClipClassifier(Classifier):
    kind = "open_clip"

    def __init__(self, *, transform, tokenizer, templates: list[Callable[[str], str]], **kw):
        super().__init__(**kw)
        import open_clip
        import torch

        self.transform = transform
        self.tokenizer = tokenizer

        def compute():
            with torch.inference_mode():
                return open_clip.build_zero_shot_classifier(
                    self.model,
                    tokenizer,
                    self.label_names,
                    templates,
                    num_classes_per_batch=10,
                    device=self.device,
                )

        self.text_classifier = self._cached(compute, templates, "open_clip.build_zero_shot_classifier/10",
                                            skip=("visual.",))

    def preprocess(self, images):
        import torch

        return torch.stack([self.transform(im.convert("RGB")) for im in images])

    def _forward(self, batch):
        features = self.model.encode_image(batch, normalize=True)
        return 100.0 * features @ self.text_classifier

    def _embed(self, batch):
        return self.model.encode_image(batch, normalize=True)

    def embed_text(self, texts: list[str]):
        """Normalised text features [N, D] (for CLIP score)."""
        import torch

        with torch.inference_mode():
            tokens = self.tokenizer(list(texts)).to(self.device)
            return self.model.encode_text(tokens, normalize=True).float()


class HFClipClassifier(Classifier):
    kind = "hf-clip"

    def __init__(self, *, processor, templates: list[Callable[[str], str]], **kw):
        super().__init__(**kw)
        import torch

        self.processor = processor

        def compute():
            rows = []
            with torch.inference_mode():
                for name in self.label_names:
                    texts = [t(name) for t in templates]
                    tokens = processor.tokenizer(texts, padding=True, truncation=True, return_tensors="pt").to(
                        self.device
                    )
                    emb = self.model.get_text_features(**tokens).pooler_output
                    emb = emb / emb.norm(dim=-1, keepdim=True)
                    emb = emb.mean(dim=0)
                    rows.append(emb / emb.norm())
                return torch.stack(rows, dim=1)  # [dim, classes]

        self.text_classifier = self._cached(compute, templates, "hf-clip: per class, the mean of normalised "
                                            "template embeddings, normalised", skip=("vision_model.", "visual_projection."))

    def preprocess(self, images):
        ip = self.processor.image_processor
        return ip(images=[im.convert("RGB") for im in images], return_tensors="pt")["pixel_values"]

    def _forward(self, batch):
        features = self.model.get_image_features(pixel_values=batch).pooler_output
        features = features / features.norm(dim=-1, keepdim=True)
        return 100.0 * features @ self.text_classifier

    def _embed(self, batch):
        features = self.model.get_image_features(pixel_values=batch).pooler_output
        return features / features.norm(dim=-1, keepdim=True)

    def embed_text(self, texts: list[str]):
        """Normalised text features [N, D] (for CLIP score)."""
        import torch

        with torch.inference_mode():
            tokens = self.processor.tokenizer(list(texts), padding=True, truncation=True,
                                              return_tensors="pt").to(self.device)
            emb = self.model.get_text_features(**tokens).pooler_output
            return (emb / emb.norm(dim=-1, keepdim=True)).float()


def _template_fns(spec: ModelSpec, templates: list[str] | None) -> list[Callable[[str], str]]:
    templates = list(templates) if templates else DEFAULT_TEMPLATES
    fns = []
    for t in templates:
        try:
            t.format("x", c="x")
        except (IndexError, KeyError, ValueError, AttributeError) as e:
            raise ModelError(
                f"model {spec.raw!r}: bad prompt template {t!r} ({hub.one_line(e)}); use {{}} or {{c}}"
            ) from None
        fns.append(lambda c, t=t: t.format(c, c=c))
    return fns


def _zero_shot_labels(spec: ModelSpec, labels: list[str] | None) -> list[str]:
    if not labels:
        raise ModelError(f"model {spec.raw!r} is a zero-shot CLIP model: pass the class names (labels)")
    return list(labels)


def _refuse_pickle(spec: ModelSpec, what: str) -> ModelError:
    return ModelError(
        f"model {spec.raw!r}: {what}; refusing pickle weights (pass allow_pickle=True to accept them)"
    )


# ---------------------------------------------------------------- timm
def _timm_label_names(model) -> list[str]:
    from timm.data import ImageNetInfo, infer_imagenet_subset

    n = model.num_classes
    subset = infer_imagenet_subset(model)
    if subset:
        names = ImageNetInfo(subset).label_descriptions()
        if len(names) == n:
            return names
    cfg = getattr(model, "pretrained_cfg", {}) or {}
    for key in ("label_descriptions", "label_names"):
        names = cfg.get(key)
        if names and len(names) == n:
            return list(names.values()) if isinstance(names, dict) else list(names)
    return [f"class_{i}" for i in range(n)]


def _timm_hub_safetensors(spec: ModelSpec, repo: str, filename: str | None) -> None:
    """Make sure a Hub timm repo has safetensors weights (and fetch them), else refuse."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    candidates = ["model.safetensors"]
    if filename and filename.endswith(".safetensors"):
        candidates.insert(0, filename)
    elif filename and filename.startswith("open_clip_"):
        candidates.insert(0, "open_clip_model.safetensors")
    not_cached = False
    for name in candidates:
        try:
            hf_hub_download(repo, name, revision=spec.revision)
            return
        except LocalEntryNotFoundError:  # offline, and this file is not in the cache
            not_cached = True
        except EntryNotFoundError:  # the Hub says the repo has no such file
            continue
        except Exception as e:
            raise loading.load_error(spec, e) from None
    if not_cached:
        raise ModelUnavailable(
            f"model {spec.raw!r} is not available: the Hub cannot be reached and the local cache of {repo}"
            " holds no safetensors weights; offline, `make demo` runs the same pipeline on tiny: models"
        )
    raise _refuse_pickle(spec, f"Hub repo {repo} has no safetensors weights")


# the file timm loads from a local-dir: folder, in its order (timm/models/_hub.py, load_state_dict_from_path,
# timm 1.0.31): the first of these names that exists, else the first file by extension in this order
_TIMM_LOCAL_FILES = ("model.safetensors", "pytorch_model.bin", "pytorch_model.pth", "model.pth",
                     "open_clip_model.safetensors", "open_clip_pytorch_model.safetensors",
                     "open_clip_pytorch_model.bin", "open_clip_pytorch_model.pth")
_TIMM_LOCAL_EXTS = (".safetensors", ".pth", ".pth.tar", ".bin")


def _timm_local_weights(path: Path) -> Path | None:
    """The weights file ``timm.create_model("local-dir:<path>", pretrained=True)`` reads (None: none)."""
    found = next((path / f for f in _TIMM_LOCAL_FILES if (path / f).exists()), None)
    return found or next((f for ext in _TIMM_LOCAL_EXTS for f in sorted(path.glob(f"*{ext}"))), None)


def _load_timm(spec: ModelSpec, *, allow_pickle: bool, device: str, **_) -> Classifier:
    if not (spec.is_built or spec.name.startswith("local-dir:")):
        hub.start_probe()  # overlaps the probe with the slow import below
    import timm

    name, filename = spec.name, None
    if spec.is_built or name.startswith(("local-dir:", "hf-hub:")):
        source = loading.resolve(spec, allow_pickle)
        if source.path:
            weights = _timm_local_weights(source.path)
            if weights is not None and weights.suffix != ".safetensors" and not allow_pickle:
                # a safetensors file elsewhere in the folder does not stop timm from reading this one
                raise _refuse_pickle(spec, f"timm would load the pickle file {weights}")
            model_name = f"local-dir:{source.path}"
        else:
            model_name = name + (f"@{spec.revision}" if spec.revision else "")
    else:
        if not timm.is_model(name):
            raise ModelError(f"model {spec.raw!r}: unknown timm model {name!r}")
        try:
            cfg = timm.models.get_pretrained_cfg(name, allow_unregistered=False)
        except RuntimeError as e:
            raise ModelError(
                f"model {spec.raw!r}: no pretrained weights for timm model {name!r} ({hub.one_line(e)})"
            ) from None
        repo = cfg.hf_hub_id.rstrip("/") if cfg.hf_hub_id else None
        if repo is None and not allow_pickle:
            raise _refuse_pickle(
                spec, f"the weights of {name!r} are a pickle file at {cfg.url or cfg.file!r}"
            )
        model_id = f"{cfg.architecture}.{cfg.tag}" if cfg.tag else cfg.architecture
        source = loading.resolve(spec, allow_pickle, repo=repo, model_id=model_id)
        model_name = f"hf-hub:{repo}@{spec.revision}" if repo and spec.revision else name
        filename = cfg.hf_hub_filename
    if source.repo and not allow_pickle:
        with source.offline():
            _timm_hub_safetensors(spec, source.repo, filename)
    with loading.load_errors(spec), source.offline():
        model = timm.create_model(model_name, pretrained=True)
    return TimmClassifier(
        spec=spec.raw,
        model_id=source.model_id,
        revision=source.commit(),
        label_names=_timm_label_names(model),
        model=model,
        device=device,
    )


# ---------------------------------------------------------------- transformers
def _load_hf(spec: ModelSpec, *, labels, templates, allow_pickle: bool, trust_remote_code: bool, device: str, **_):
    source = loading.resolve(spec, allow_pickle)
    # always explicit: left unset, transformers asks on the terminal whether to run a repo's code
    kwargs: dict = {"trust_remote_code": trust_remote_code, **source.hub_kwargs()}
    src = source.location
    weights = dict(use_safetensors=None if allow_pickle else True)
    with loading.load_errors(spec), source.offline(), hub.quiet_progress("transformers"):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(src, **kwargs)
        if config.model_type == "clip":
            from transformers import CLIPModel, CLIPProcessor

            fns = _template_fns(spec, templates)
            names = _zero_shot_labels(spec, labels)
            model = CLIPModel.from_pretrained(src, **weights, **kwargs)
            processor = CLIPProcessor.from_pretrained(src, **kwargs)
        else:
            from transformers import AutoImageProcessor, AutoModelForImageClassification

            model = AutoModelForImageClassification.from_pretrained(src, **weights, **kwargs)
            image_processor = AutoImageProcessor.from_pretrained(src, **kwargs)
    common = dict(spec=spec.raw, model_id=source.model_id, revision=source.commit(config), model=model,
                  device=device)
    if config.model_type == "clip":
        return HFClipClassifier(processor=processor, templates=fns, label_names=names, **common)
    id2label = model.config.id2label
    names = [str(id2label[i]) for i in range(len(id2label))]
    return HFClassifier(image_processor=image_processor, label_names=names, **common)


# ---------------------------------------------------------------- torchvision
def _torchvision_label_names(weights) -> list[str]:
    """ImageNet-1k weights (IMAGENET1K_*, 1000 categories): the synsets' WordNet lemma lists, as timm models
    carry them ("wood rabbit, cottontail, cottontail rabbit"), so the word sets of the wordset protocol are
    the same for every classifier; torchvision's own categories are their first lemmas ("wood rabbit").
    Other weights: their categories."""
    categories = list(weights.meta["categories"])
    if weights.name.startswith("IMAGENET1K_") and len(categories) == 1000:
        from timm.data import ImageNetInfo

        return list(ImageNetInfo("imagenet-1k").label_descriptions())
    return categories


def _load_torchvision(spec: ModelSpec, *, allow_pickle: bool, device: str, **_) -> Classifier:
    """`torchvision:<arch>@<WEIGHTS>` through torchvision.models.get_model(arch, weights=WEIGHTS) (the weights'
    own transforms and categories), its checkpoint found in the torch hub cache first (offline and absent: one
    line) and read with weights_only=True before torchvision loads it. A tiny stand-in (`stands_for` a
    torchvision spec) is the same architecture and weights enum, its random checkpoint in its own folder."""
    import torch
    import torchvision
    from torchvision.models import get_model, get_model_weights, list_models

    real = parse_spec(TINY_MODELS.get(spec.name).stands_for) if spec.is_tiny else spec
    arch, name = real.name, real.revision
    if arch not in list_models(module=torchvision.models):
        raise ModelError(f"model {spec.raw!r}: unknown torchvision classification model {arch!r}")
    members = get_model_weights(arch).__members__
    if name not in members:
        raise ModelError(f"model {spec.raw!r}: torchvision {torchvision.__version__} has no weights {name!r} for "
                         f"{arch!r} (it has {', '.join(members)})")
    weights = members[name]
    home = tiny_path(spec.name) if spec.is_tiny else None
    checkpoint = loading.torch_checkpoint(spec, weights.url, home)
    if not allow_pickle:
        raise _refuse_pickle(spec, f"torchvision weights are a pickle file ({checkpoint.name})")
    with loading.load_errors(spec), loading.torch_home(home):
        # tensors only (downloaded and hash-checked when not cached), then torchvision's own loading path
        torch.hub.load_state_dict_from_url(weights.url, map_location="cpu", check_hash=True, weights_only=True)
        model = get_model(arch, weights=weights)
    return TorchvisionClassifier(
        spec=spec.raw,
        model_id=spec.raw if spec.is_tiny else f"{arch}.{weights.name}",
        revision=None if spec.is_tiny else checkpoint.name,  # the file name carries its sha256's first digits
        label_names=_torchvision_label_names(weights),
        model=model,
        device=device,
        transform=weights.transforms(),
    )


# ---------------------------------------------------------------- open_clip
def _load_open_clip(spec: ModelSpec, *, labels, templates, allow_pickle: bool, device: str, **_) -> Classifier:
    if not (spec.is_built or spec.name.startswith("local-dir:")):
        hub.start_probe()  # overlaps the probe with the slow import below
    import open_clip
    from open_clip.factory import _find_checkpoint_in_dir
    from open_clip.pretrained import download_pretrained, download_pretrained_from_hf, get_pretrained_cfg

    names = _zero_shot_labels(spec, labels)
    fns = _template_fns(spec, templates)
    extra = {}
    with loading.load_errors(spec):
        if spec.is_built or spec.name.startswith(("hf-hub:", "local-dir:")):
            # no check of the folder's weights here: the one checkpoint open_clip loads is checked below
            source = loading.resolve(spec, allow_pickle, check_weights=False)
            path = source.path
            if source.repo:
                # the repo's snapshot at the pinned revision, loaded as a local folder: open_clip's own
                # hf-hub: loader takes no revision
                from huggingface_hub import snapshot_download

                # everything but pickle weights: the config, the safetensors, and an HF tokenizer's files
                # (SigLIP, multilingual CLIPs), which open_clip reads from the same folder
                pickles = None if allow_pickle else [f"*{suffix}" for suffix in hub.PICKLE_SUFFIXES]
                with source.offline():
                    path = Path(snapshot_download(source.repo, revision=spec.revision, ignore_patterns=pickles))
            model_name = f"local-dir:{path}"
        else:
            arch, _, tag = spec.name.partition("/")
            if arch not in open_clip.list_models():
                raise ModelError(f"model {spec.raw!r}: unknown open_clip architecture {arch!r}")
            cfg = {} if os.path.isfile(tag) else get_pretrained_cfg(arch, tag)
            if not (cfg or os.path.isfile(tag)):
                raise ModelError(f"model {spec.raw!r}: unknown open_clip pretrained tag {tag!r} for {arch!r}")
            # "org/repo/" or "org/repo/file", as open_clip
            repo, filename = os.path.split(cfg["hf_hub"]) if cfg.get("hf_hub") else (None, "")
            source = loading.resolve(spec, allow_pickle, repo=repo, model_id=spec.name)
            model_name = arch
            if os.path.isfile(tag):
                ckpt = tag
            elif source.repo:
                with source.offline():
                    ckpt = download_pretrained_from_hf(source.repo, filename=filename or None,
                                                       revision=spec.revision)
            elif spec.revision:
                raise ModelError(f"model {spec.raw!r}: a revision applies to Hub weights, and the tag "
                                 f"{tag!r} downloads from {cfg.get('url')!r}")
            elif not allow_pickle:
                raise _refuse_pickle(spec, f"the weights are a pickle file at {cfg.get('url')!r}")
            else:
                ckpt = download_pretrained(cfg)
            # the weights go in as a file (so the pinned revision is the one loaded); the tag's own
            # preprocessing and activation go in explicitly. open_clip only warns when a QuickGELU-trained
            # tag (OpenAI's) meets a GELU architecture config: force QuickGELU instead of scoring wrongly.
            quick = bool(cfg.get("quick_gelu")) and not open_clip.get_model_config(arch).get("quick_gelu")
            extra = dict(pretrained=str(ckpt), force_quick_gelu=quick, image_mean=cfg.get("mean"),
                         image_std=cfg.get("std"), image_interpolation=cfg.get("interpolation"),
                         image_resize_mode=cfg.get("resize_mode"))
        if model_name.startswith("local-dir:"):
            ckpt = _find_checkpoint_in_dir(Path(model_name[len("local-dir:") :]))
            if not ckpt:
                raise ModelError(f"model {spec.raw!r}: no weights in {model_name[len('local-dir:'):]!r}"
                                 + ("" if allow_pickle else " (safetensors; pickle needs allow_pickle)"))
        if not str(ckpt).endswith(".safetensors") and not allow_pickle:
            raise _refuse_pickle(
                spec, f"the checkpoint {os.path.basename(str(ckpt))!r} is pickle, not safetensors"
            )
        with source.offline():
            model, _, transform = open_clip.create_model_and_transforms(model_name, device=device, **extra)
            tokenizer = open_clip.get_tokenizer(model_name)
    return OpenClipClassifier(
        spec=spec.raw,
        model_id=source.model_id,
        revision=source.commit(),
        label_names=names,
        model=model,
        device=device,
        transform=transform,
        tokenizer=tokenizer,
        templates=fns,
    )


def load_classifier(
    spec: str,
    labels: list[str] | None = None,
    templates: list[str] | None = None,
    *,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    device: str | None = None,
) -> Classifier:
    """Load the classifier named by `spec` (see gensets.models.spec).

    `labels` and `templates` ({} or {c} placeholders) define the label space of zero-shot CLIP
    models and are required/used only for them; other models keep their own label space.
    """
    s = parse_spec(spec)
    device = device or default_device()  # after the spec's grammar is checked; None: this process's GPU under accelerate, else cuda/cpu
    kind = s.kind
    if s.is_built:  # read by the first of its loaders that is a classifier, else it is not one
        loaders = built_model(s.kind, s.name).loaders
        kind = next((k for k in loaders if k in FAMILIES and FAMILIES.get(k).loader("classifier")),
                    loaders[0] if loaders else "")
    load = FAMILIES.get(kind).loader("classifier") if kind in FAMILIES else None  # the family's (gensets.models.family)
    if load is not None:
        return load(s, labels=labels, templates=templates, allow_pickle=allow_pickle,
                    trust_remote_code=trust_remote_code, device=device)
    raise ModelError(f"model {spec!r} is {NOT_A_CLASSIFIER.get(kind, 'another kind of model')}, not a classifier")
