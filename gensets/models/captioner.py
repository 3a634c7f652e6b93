"""Image captioning models behind one interface: caption(images) -> one sentence per image.

    BLIP / BLIP-2 captioning     BlipForConditionalGeneration, Blip2ForConditionalGeneration (e.g.
                                 Salesforce/blip-image-captioning-large); an optional text prefix makes
                                 it conditional captioning ("a photography of ...")
    vision-encoder-decoder       VisionEncoderDecoderModel (e.g. nlpconnect/vit-gpt2-image-captioning)
    image-text-to-text           chat models (LLaVA, SmolVLM, ...): asked `prompt` with the image
Decoding is deterministic (greedy or beam search, never sampled), so a caption depends only on the
model, the image and the settings. Specs: `hf:<repo or local path>[@rev]`, `tiny:blip-caption`
(gensets.models.tiny.caption) or `tiny:vlm` (a chat model). Hub repos go through gensets.models.loading
(offline and not cached: one ModelError line); weights are safetensors only unless allow_pickle=True.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gensets.errors import ModelError
from gensets.models import hub, loading
from gensets.models.device import default_device
from gensets.models.spec import parse_spec
from gensets.models.vlm import load_vqa

if TYPE_CHECKING:
    from PIL import Image

CAPTION_KINDS = ("blip", "vision-encoder-decoder", "image-text-to-text")
CHAT_PROMPT = "Describe this image in one sentence."


class Captioner:
    """A loaded captioning model; caption() returns one whitespace-normalised sentence per image."""

    def __init__(self, *, spec: str, model_id: str, revision: str | None, kind: str, model, processor,
                 tokenizer=None, device: str = "cpu"):
        self.spec = spec
        self.model_id = model_id
        self.revision = revision
        self.kind = kind
        self.model = model if kind == "image-text-to-text" else model.to(device).eval()  # chat: a VQAModel
        self.processor = processor
        self.tokenizer = tokenizer
        self.device = device

    def __repr__(self) -> str:
        return f"Captioner(spec={self.spec!r}, kind={self.kind!r})"

    def caption(self, images: list[Image.Image], *, prompt: str | None = None, max_new_tokens: int = 30,
                num_beams: int = 1, batch_size: int = 8) -> list[str]:
        """One caption per image. ``prompt``: BLIP's caption prefix, or the question asked a chat model
        (default: "Describe this image in one sentence."); vision-encoder-decoder models take none."""
        import torch

        out = []
        for start in range(0, len(images), batch_size):
            batch = [im.convert("RGB") for im in images[start : start + batch_size]]
            with torch.inference_mode():
                out += self._caption(batch, prompt, dict(max_new_tokens=max_new_tokens, num_beams=num_beams,
                                                         do_sample=False))
        return [" ".join(c.split()) for c in out]

    def _caption(self, images, prompt, gen) -> list[str]:
        if self.kind == "blip":
            texts = {"text": [prompt] * len(images)} if prompt else {}
            inputs = self.processor(images=images, return_tensors="pt", **texts).to(self.device)
            return self.processor.batch_decode(self.model.generate(**inputs, **gen), skip_special_tokens=True)
        if self.kind == "vision-encoder-decoder":
            if prompt:
                raise ModelError(f"model {self.spec!r}: a vision-encoder-decoder captioner takes no prompt")
            pixels = self.processor(images=images, return_tensors="pt")["pixel_values"].to(self.device)
            return self.tokenizer.batch_decode(self.model.generate(pixel_values=pixels, **gen),
                                               skip_special_tokens=True)
        return self.model.answer(images, [prompt or CHAT_PROMPT] * len(images), gen["max_new_tokens"])


def _caption_kind(raw: str, config) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    archs = list(getattr(config, "architectures", None) or [])
    if config.model_type in ("blip", "blip-2"):
        if any("QuestionAnswering" in a for a in archs):
            raise ModelError(f"model {raw!r} is a BLIP question answering model, not a captioner "
                             "(use a BLIP captioning model, e.g. hf:Salesforce/blip-image-captioning-large)")
        return "blip"
    if config.model_type == "vision-encoder-decoder":
        return "vision-encoder-decoder"
    if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return "image-text-to-text"
    raise ModelError(f"model {raw!r} is not an image captioning model (model_type {config.model_type!r}, "
                     f"architectures {archs}); expected BLIP captioning, a vision-encoder-decoder or an "
                     "image-text-to-text model")


def load_captioner(spec: str, *, allow_pickle: bool = False, trust_remote_code: bool = False,
                   device: str | None = None) -> Captioner:
    """Load the captioning model named by `spec` (`hf:<repo or path>[@rev]`, `tiny:blip-caption`
    or `tiny:vlm`, a chat model)."""
    s = parse_spec(spec)
    device = device or default_device()  # after the spec's grammar is checked; None: this process's GPU under accelerate, else cuda/cpu
    own = None if s.is_built or s.kind == "hf" else s.family.loader("caption")  # another family's (gensets.models.family)
    if own is not None:
        return own(s, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, device=device)
    loading.expect(s, "hf", "caption", "a captioning model")
    source = loading.resolve(s, allow_pickle)
    # always explicit: left unset, transformers asks on the terminal whether to run a repo's code
    kwargs: dict = {"trust_remote_code": trust_remote_code, **source.hub_kwargs()}
    src = source.location
    tokenizer = None
    load_errors = loading.load_errors(s, " as a captioning model")
    with load_errors, source.offline(), hub.quiet_progress("transformers"):
        import transformers
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(src, **kwargs)
        kind = _caption_kind(s.raw, config)
        weights = dict(use_safetensors=None if allow_pickle else True)
        if kind == "vision-encoder-decoder":
            model = transformers.VisionEncoderDecoderModel.from_pretrained(src, **weights, **kwargs)
            processor = transformers.AutoImageProcessor.from_pretrained(src, **kwargs)
            tokenizer = transformers.AutoTokenizer.from_pretrained(src, **kwargs)
        elif kind == "blip":
            model = transformers.AutoModelForImageTextToText.from_pretrained(src, **weights, **kwargs)
            processor = transformers.AutoProcessor.from_pretrained(src, **kwargs)
    if kind == "image-text-to-text":  # a chat model asked for a caption: the VQA adapter's chat path
        vqa = load_vqa(spec, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, device=device)
        return Captioner(spec=s.raw, model_id=vqa.model_id, revision=vqa.revision, kind=kind, model=vqa,
                         processor=vqa.processor, device=device)
    return Captioner(spec=s.raw, model_id=source.model_id, revision=source.commit(config), kind=kind,
                     model=model, processor=processor, tokenizer=tokenizer, device=device)
