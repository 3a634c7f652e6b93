"""Visual question answering models behind one interface: answer(images, questions) -> answers.

    ViLT question answering   the argmax over the model's answer vocabulary (config.id2label)
    BLIP question answering   generate + decode
    image-text-to-text        (LLaVA, Idefics3/SmolVLM, PaliGemma, Qwen2-VL, ...) the processor's chat
                              template with one image and the question, greedy decoding, new text only
LLaVA models (config model_type ``llava``) run as the ImageNet-D authors ran LLaVA-1.5 (chenshuang-zhang/imagenet_d,
``LLaVA/llava/serve/eval_imagenet_d.py``: ``load_pretrained_model`` in fp16 and ``process_images`` then
``image_tensor.to(model.device, dtype=torch.float16)``), unless told otherwise (``load_vqa(dtype=, aspect=)``):

- dtype: fp16 on CUDA; on any other device fp32 (fp16 matmuls on CPU are slow or missing), named in
  :attr:`VQAModel.variant` as ``fp32 on cpu``;
- images padded to a square (LLaVA's ``expand2square``, haotian-liu/LLaVA ``llava/mm_utils.py``: ``process_images``
  with ``image_aspect_ratio: pad``, LLaVA-1.5's setting, fills the short side with the image processor's mean,
  ``tuple(int(x * 255) for x in image_processor.image_mean)``, and centres the image) before the processor resizes
  it; ``aspect="crop"`` keeps the Hugging Face processor's resize-and-centre-crop (gensets' earlier reading).

Both are part of the variant the run row records (``pad-square`` / ``crop``, the dtype). Other VQA models keep
fp32 and their processor's preprocessing; their variant is empty.
Specs: `hf:<repo or local path>[@rev]` (the kind is read from the config's architectures / model_type)
or `tiny:vilt-vqa`, `tiny:blip-vqa`, `tiny:vlm` (gensets.models.tiny.vqa). Hub repos go through
gensets.models.loading: offline and not cached fails at once in one ModelError line. Weights are
safetensors only unless allow_pickle=True.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gensets.errors import ModelError
from gensets.models import hub, loading
from gensets.models.device import default_device
from gensets.models.spec import ModelSpec, parse_spec
from gensets.models.tiny import tiny_kinds

if TYPE_CHECKING:
    from PIL import Image

VQA_KINDS = ("vilt", "blip", "image-text-to-text")


class VQAModel:
    """A loaded VQA model; answer() takes one question per image."""

    kind: str = ""

    def __init__(self, *, spec: str, model_id: str, revision: str | None, model, processor, device: str,
                 aspect: str = "processor"):
        self.spec = spec
        self.model_id = model_id
        self.revision = revision
        self.model = model.to(device).eval()
        self.processor = processor
        self.device = device
        self.aspect = aspect  # "pad-square" (LLaVA's expand2square), "crop" or "processor" (not a LLaVA model)

    @property
    def variant(self) -> str:
        """How a LLaVA model runs, for the run row (``fp16, pad-square``; ``fp32 on cpu, pad-square``; ``fp32,
        crop``); empty for other models (see the module docstring)."""
        if self.aspect == "processor":
            return ""
        dtype = str(self.model.dtype).removeprefix("torch.").replace("float", "fp")
        on = "" if dtype == "fp16" or str(self.device).startswith("cuda") else f" on {self.device}"
        return f"{dtype}{on}, {self.aspect}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(spec={self.spec!r}, kind={self.kind!r})"

    def answer(self, images: list[Image.Image], questions: list[str], max_new_tokens: int = 10, *,
               temperature: float | None = None, seeds: list[int] | None = None, prompt: str = "chat") -> list[str]:
        """One answer per (image, question) pair. Greedy in one batch by default; with ``temperature`` a
        generative model samples, each pair in its own ``generate`` call after ``torch.manual_seed`` of its
        ``seeds`` entry (the answers do not depend on the batch). ``prompt``: ``chat`` (the processor's chat
        template) or ``llava_v1`` (the LLaVA-1.5 conversation of LLaVA's own code, for LLaVA models; others keep
        their chat template). A classification model (ViLT) has one answer per question and ignores all three."""
        import torch

        if len(images) != len(questions):
            raise ValueError(f"{len(images)} images but {len(questions)} questions")
        if temperature is not None and (seeds is None or len(seeds) != len(images)):
            raise ValueError("sampling needs one seed per image")
        if not images:
            return []
        images = [im.convert("RGB") for im in images]
        with torch.inference_mode():
            if temperature is None or not self.generative:
                answers = self._answer(images, list(questions), max_new_tokens, {"do_sample": False}, prompt)
            else:
                answers = []
                for im, q, seed in zip(images, questions, seeds, strict=True):
                    torch.manual_seed(seed)
                    answers += self._answer([im], [q], max_new_tokens,
                                            {"do_sample": True, "temperature": temperature}, prompt)
        return [a.strip() for a in answers]

    generative = True

    def _answer(self, images, questions, max_new_tokens, sampling: dict, prompt: str) -> list[str]:
        raise NotImplementedError


class ViltVQA(VQAModel):
    kind = "vilt"
    generative = False

    def _answer(self, images, questions, max_new_tokens, sampling, prompt):
        inputs = self.processor(
            images=images, text=questions, padding=True, truncation=True, return_tensors="pt"
        )
        logits = self.model(**inputs.to(self.device)).logits
        id2label = self.model.config.id2label
        return [str(id2label[i]) for i in logits.argmax(-1).tolist()]


class BlipVQA(VQAModel):
    kind = "blip"

    def _answer(self, images, questions, max_new_tokens, sampling, prompt):
        inputs = self.processor(
            images=images, text=questions, padding=True, truncation=True, return_tensors="pt"
        )
        inputs.pop("token_type_ids", None)
        out = self.model.generate(**inputs.to(self.device), max_new_tokens=max_new_tokens, **sampling)
        return self.processor.batch_decode(out, skip_special_tokens=True)


class ChatVQA(VQAModel):
    kind = "image-text-to-text"

    def __init__(self, **kw):
        super().__init__(**kw)
        tok = self.processor.tokenizer
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        self.pad_token_id = self.model.generation_config.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = tok.pad_token_id

    def _answer(self, images, questions, max_new_tokens, sampling, prompt):
        if self.aspect == "pad-square":
            mean = getattr(self.processor.image_processor, "image_mean", None) or (0.0, 0.0, 0.0)
            images = [expand2square(im, tuple(int(x * 255) for x in mean)) for im in images]
        if prompt == "llava_v1" and self.model.config.model_type == "llava":
            token = getattr(self.processor, "image_token", "<image>")
            inputs = self.processor(images=images, text=[llava_v1_prompt(q, token) for q in questions],
                                    padding=True, padding_side="left", return_tensors="pt"
                                    ).to(self.device, dtype=self.model.dtype)
        else:
            conversations = [
                [{"role": "user", "content": [{"type": "image", "image": im}, {"type": "text", "text": q}]}]
                for im, q in zip(images, questions, strict=True)
            ]
            inputs = self.processor.apply_chat_template(
                conversations,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
                return_tensors="pt",
                processor_kwargs={"padding": True, "padding_side": "left"},
            ).to(self.device, dtype=self.model.dtype)  # floating tensors only: the pixels
        out = self.model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            num_beams=1,
            pad_token_id=self.pad_token_id,
            **sampling,
        )
        new = out[:, inputs["input_ids"].shape[1] :]
        return self.processor.batch_decode(new, skip_special_tokens=True)


# LLaVA's conv_templates["llava_v1"] (llava/conversation.py, conv_llava_v1: SeparatorStyle.TWO, sep " "), as the
# ImageNet-D authors' eval_imagenet_d.py uses it for LLaVA-1.5: system, then "USER: <image>\n{q} ASSISTANT:"
LLAVA_V1_SYSTEM = ("A chat between a curious human and an artificial intelligence assistant. The assistant gives "
                   "helpful, detailed, and polite answers to the human's questions.")


def expand2square(image: Image.Image, background: tuple[int, ...]) -> Image.Image:
    """LLaVA's ``expand2square`` (haotian-liu/LLaVA, ``llava/mm_utils.py``): the image centred on a square of
    ``background`` whose side is its longer side (the offset of the short side rounded down)."""
    from PIL import Image

    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    out = Image.new(image.mode, (side, side), background)
    out.paste(image, ((side - width) // 2, (side - height) // 2))
    return out


def llava_v1_prompt(question: str, image_token: str = "<image>") -> str:
    """The prompt LLaVA's ``llava_v1`` conversation builds for one question about one image."""
    return f"{LLAVA_V1_SYSTEM} USER: {image_token}\n{question} ASSISTANT:"


def _parse(spec: str) -> ModelSpec:
    kind, sep, name = spec.strip().partition(":") if isinstance(spec, str) else ("", "", "")
    if kind == "tiny" and sep:
        if name.strip() not in tiny_kinds("vqa"):
            raise ModelError(
                f"bad model spec {spec!r}: unknown tiny VQA model {name.strip()!r}"
                f" (expected one of {', '.join(tiny_kinds('vqa'))})"
            )
        return ModelSpec(kind="tiny", name=name.strip(), revision=None, raw=spec)
    s = parse_spec(spec)
    if s.kind != "hf" and s.family.loader("vqa") is None:
        raise ModelError(
            f"model {spec!r} is not a visual question answering model: use hf:<repo or path> or"
            f" tiny:<{' | '.join(tiny_kinds('vqa'))}>"
        )
    return s


def _vqa_kind(spec: ModelSpec, config) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    archs = list(getattr(config, "architectures", None) or [])
    if "ViltForQuestionAnswering" in archs:
        return "vilt"
    if "BlipForQuestionAnswering" in archs:
        return "blip"
    if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return "image-text-to-text"
    raise ModelError(
        f"model {spec.raw!r} is not a visual question answering model (model_type {config.model_type!r},"
        f" architectures {archs}); expected ViLT or BLIP question answering or an image-text-to-text model"
    )


ASPECTS = ("pad-square", "crop")  # a LLaVA model's preprocessing; the first is the authors'


def load_vqa(
    spec: str, *, allow_pickle: bool = False, trust_remote_code: bool = False, device: str | None = None,
    dtype: str | None = None, aspect: str | None = None,
) -> VQAModel:
    """Load the VQA model named by `spec` (see the module docstring). For a LLaVA model: ``dtype`` ``fp16`` or
    ``fp32`` (None: fp16 on CUDA, else fp32) and ``aspect`` (:data:`ASPECTS`; None: ``pad-square``); other models
    refuse them."""
    if dtype not in (None, "fp16", "fp32"):
        raise ModelError(f"model {spec!r}: unknown dtype {dtype!r} (fp16 or fp32)")
    if aspect not in (None, *ASPECTS):
        raise ModelError(f"model {spec!r}: unknown image aspect {aspect!r} ({' or '.join(ASPECTS)})")
    s = _parse(spec)
    device = device or default_device()  # after the spec's grammar is checked; None: this process's GPU under accelerate, else cuda/cpu
    if not s.is_built and s.kind != "hf":  # another family's VQA loader (gensets.models.family)
        return s.family.loader("vqa")(s, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code,
                                      device=device)
    source = loading.resolve(s, allow_pickle)
    # always explicit: left unset, transformers asks on the terminal whether to run a repo's code
    kwargs: dict = {"trust_remote_code": trust_remote_code, **source.hub_kwargs()}
    src = source.location
    with loading.load_errors(s), source.offline(), hub.quiet_progress("transformers"):
        from transformers import AutoConfig, AutoProcessor

        config = AutoConfig.from_pretrained(src, **kwargs)
        kind = _vqa_kind(s, config)
        if kind == "vilt":
            from transformers import ViltForQuestionAnswering as model_cls
        elif kind == "blip":
            from transformers import BlipForQuestionAnswering as model_cls
        else:
            from transformers import AutoModelForImageTextToText as model_cls
        processor = AutoProcessor.from_pretrained(src, **kwargs)
        if kind == "image-text-to-text" and not getattr(processor, "chat_template", None):
            raise ModelError(f"model {s.raw!r}: its processor has no chat template")
        llava = config.model_type == "llava"
        if not llava and (dtype, aspect) != (None, None):
            raise ModelError(f"model {s.raw!r}: dtype and aspect are LLaVA models' settings (this is "
                             f"{config.model_type!r})")
        half = dtype == "fp16" or (dtype is None and llava and str(device).startswith("cuda"))
        if half:
            import torch

            kwargs["dtype"] = torch.float16
        model = model_cls.from_pretrained(src, use_safetensors=None if allow_pickle else True, **kwargs)
    cls = {"vilt": ViltVQA, "blip": BlipVQA, "image-text-to-text": ChatVQA}[kind]
    return cls(spec=s.raw, model_id=source.model_id, revision=source.commit(config), model=model,
               processor=processor, device=device, aspect=(aspect or ASPECTS[0]) if llava else "processor")
