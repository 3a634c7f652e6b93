"""Text-to-image (and image-to-image) generation with a diffusers pipeline, deterministic per call.

Each image gets its own `torch.Generator("cpu").manual_seed(seed)` (diffusers takes one generator per image of
a call), so an image's initial noise depends only on its seed. The denoising of a batched call still differs
from the same image alone by float rounding (measured on CPU, tiny:sd at 64x64: 1-2 pixel values off by one,
from ~3e-6 float differences of batched kernels): the same call always gives the same bytes, and
``generate(..., one_per_call=True)`` runs the pipeline image by image for an image reproducible alone.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from gensets.errors import ModelError
from gensets.models import hub, loading
from gensets.models.spec import parse_spec
from gensets.registry import FAMILIES

from .device import default_device

if TYPE_CHECKING:
    from PIL import Image

DTYPES = ("float32", "float16", "bfloat16")
ATTENTION = ("sdpa", "eager")


class Generator:
    """A loaded diffusers pipeline: generate(prompts, seeds, ...) -> PIL images, one per prompt."""

    def __init__(self, *, spec: str, model_id: str, revision: str | None, pipe, settings: dict | None = None):
        self.spec = spec
        self.model_id = model_id
        self.revision = revision
        self.pipe = pipe
        self.settings = dict(settings or {})  # how it runs: dtype, attention, compile, channels_last, device
        self._img2img = None

    @property
    def pipeline(self) -> str:
        return type(self.pipe).__name__

    @property
    def scheduler(self) -> str:
        return type(self.pipe.scheduler).__name__

    def __repr__(self) -> str:
        return f"Generator(spec={self.spec!r}, pipeline={self.pipeline!r}, scheduler={self.scheduler!r})"

    @property
    def tokenizers(self) -> list:
        """The pipeline's text tokenizers: ``tokenizer``, and SDXL's ``tokenizer_2`` (its second text encoder)."""
        return [t for t in (getattr(self.pipe, "tokenizer", None), getattr(self.pipe, "tokenizer_2", None))
                if t is not None]

    @property
    def text_window(self) -> int | None:
        """The text encoders' window in tokens (BOS and EOS included): the smallest ``model_max_length`` of
        :attr:`tokenizers` (77 for Stable Diffusion's CLIP); None for a pipeline without a tokenizer."""
        return min((t.model_max_length for t in self.tokenizers), default=None)

    def measure(self, text: str) -> tuple[int | None, str | None]:
        """``(tokens, received)`` of a prompt or negative prompt as the pipeline reads it.

        ``tokens``: the untruncated token count of ``text``, BOS and EOS included (CLIP's window of 77 holds
        75 of the text's own tokens), with each of :attr:`tokenizers`; with two (SDXL) the larger count.
        ``received``: None when the text fits; else the text the text encoder actually received: ``text``
        tokenized as diffusers' ``StableDiffusionPipeline.encode_prompt`` (and SDXL's, per tokenizer) does it,
        ``tokenizer(text, padding="max_length", max_length=tokenizer.model_max_length, truncation=True)``,
        and the kept ids decoded back without special tokens (so in the tokenizer's normal form: CLIP
        lowercases and spaces out punctuation; a word cut inside ends with its first pieces), from the first
        tokenizer that cuts it. diffusers warns of a cut prompt ("The following part of your input was
        truncated") but cuts a negative prompt silently, at the prompt's length (diffusers 0.42:
        ``encode_prompt`` of ``pipeline_stable_diffusion.py``, and of ``pipeline_stable_diffusion_xl.py`` per
        tokenizer)."""
        counts, received = [], None
        with _quiet_cut_warnings():
            for tok in self.tokenizers:
                n = len(tok(text).input_ids)
                counts.append(n)
                if n > tok.model_max_length and received is None:
                    kept = tok(text, padding="max_length", max_length=tok.model_max_length, truncation=True)
                    received = tok.decode(kept.input_ids, skip_special_tokens=True)
        return max(counts, default=None), received

    @contextlib.contextmanager
    def use_scheduler(self, name: str | None, what: str | None = None):
        """For a block, the pipelines' scheduler replaced by the diffusers scheduler class ``name`` configured
        from the pipeline's own (``Class.from_config(pipe.scheduler.config)``, as GenBench's TI sampling does);
        None or the class already in use: nothing changes."""
        if name is None or name == self.scheduler:
            yield
            return
        pipes = [p for p in (self.pipe, self._img2img) if p is not None]
        old = [p.scheduler for p in pipes]
        new = scheduler_class(name, what or f"model {self.spec!r}").from_config(self.pipe.scheduler.config)
        for p in pipes:
            p.scheduler = new
        try:
            yield
        finally:
            for p, s in zip(pipes, old, strict=True):
                p.scheduler = s

    def img2img_pipe(self):
        if self._img2img is None:
            from diffusers import AutoPipelineForImage2Image

            try:
                self._img2img = AutoPipelineForImage2Image.from_pipe(self.pipe)
            except Exception as e:
                raise ModelError(
                    f"model {self.spec!r}: no image-to-image variant of {self.pipeline} ({hub.one_line(e)})"
                ) from None
            self._img2img.set_progress_bar_config(disable=True)
        return self._img2img

    def generate(
        self,
        prompts: list[str],
        seeds: list[int],
        *,
        negative_prompts: list[str] | None = None,
        steps: int = 50,
        guidance: float = 7.5,
        width: int = 512,
        height: int = 512,
        init_images: list[Image.Image] | None = None,
        strength: float = 0.75,
        one_per_call: bool = False,
    ) -> list[Image.Image]:
        """One image per (prompt, seed), all in one pipeline call (or, with ``one_per_call``, one call per
        image). With init_images: image-to-image from those images, resized to width x height, at `strength`."""
        n = len(prompts)
        if len(seeds) != n:
            raise ValueError(f"generate: {n} prompts but {len(seeds)} seeds")
        if negative_prompts is not None and len(negative_prompts) != n:
            raise ValueError(f"generate: {n} prompts but {len(negative_prompts)} negative prompts")
        if init_images is not None and len(init_images) != n:
            raise ValueError(f"generate: {n} prompts but {len(init_images)} init images")
        import torch

        calls = [range(i, i + 1) for i in range(n)] if one_per_call else [range(n)] if n else []
        images = []
        for call in calls:
            kwargs = dict(
                prompt=[prompts[i] for i in call],
                negative_prompt=[negative_prompts[i] for i in call] if negative_prompts is not None else None,
                num_inference_steps=steps,
                guidance_scale=guidance,
                generator=[torch.Generator("cpu").manual_seed(int(seeds[i])) for i in call],
                output_type="pil",
            )
            pipe = self.pipe if init_images is None else self.img2img_pipe()
            with _quiet_cut_warnings(pipe):  # a cut is measured and recorded (measure)
                if init_images is None:
                    out = pipe(width=width, height=height, **kwargs)
                else:
                    inits = [init_images[i].convert("RGB") for i in call]
                    inits = [im if im.size == (width, height) else im.resize((width, height), resample=3)  # bicubic
                             for im in inits]
                    out = pipe(image=inits, strength=strength, **kwargs)
            images.extend(out.images)
        return images


class _CutWarnings(logging.Filter):
    """Drops transformers' and diffusers' warnings about a text longer than the tokenizer's window:
    :meth:`Generator.measure` counts every prompt and a build records the cut (and, with
    ``long_prompts: error``, refuses it), so the warnings only repeat it, once per call."""

    MESSAGES = ("Token indices sequence length is longer than",
                "The following part of your input was truncated")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.MESSAGES)


@contextlib.contextmanager
def _quiet_cut_warnings(*pipes):
    """:class:`_CutWarnings` on the tokenizers' logger and the loggers of ``pipes``' modules, for a block."""
    names = ["transformers.tokenization_utils_base", *(type(p).__module__ for p in pipes if p is not None)]
    loggers, f = [logging.getLogger(n) for n in names], _CutWarnings()
    for lg in loggers:
        lg.addFilter(f)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(f)


def scheduler_class(name: str, what: str):
    """The diffusers scheduler class called ``name``; a ModelError naming ``what`` when there is none."""
    import diffusers

    cls = getattr(diffusers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, diffusers.SchedulerMixin)):
        raise ModelError(f"{what}: unknown diffusers scheduler {name!r}")
    return cls


def load_generator(
    spec: str,
    *,
    scheduler: str | None = None,
    torch_dtype: str = "float32",
    device: str | None = None,
    allow_pickle: bool = False,
    attention: str = "sdpa",
    compile: bool = False,
    channels_last: bool = False,
) -> Generator:
    """Load the diffusers pipeline named by `spec` (`diffusers:<repo or path>[@rev]` or `tiny:sd`).

    `scheduler` is a diffusers scheduler class name (e.g. "EulerDiscreteScheduler"), configured from
    the pipeline's own scheduler config. `attention`: "sdpa" (diffusers' default, torch's
    scaled_dot_product_attention) or "eager" (diffusers' AttnProcessor, for the UNet and the VAE);
    `compile`: `torch.compile` the UNet (CUDA graphs: mode "reduce-overhead") and the VAE's decoder, whose numerics
    differ from an eager run (a variant: recorded in provenance and on the card); `channels_last`: the UNet's and
    VAE's memory format. What was
    applied is the generator's `settings`, which every sample's provenance records.
    """
    s = parse_spec(spec)
    if s.is_built or s.family.loader("generator") is None:  # a built model read by diffusers, else a generator family
        loading.expect(s, "diffusers", "diffusers", "an image generator")
    if torch_dtype not in DTYPES:
        raise ModelError(
            f"model {spec!r}: unknown torch_dtype {torch_dtype!r} (expected one of {', '.join(DTYPES)})"
        )
    if attention not in ATTENTION:
        raise ModelError(f"model {spec!r}: unknown attention {attention!r} (expected one of {', '.join(ATTENTION)})")
    load = (FAMILIES.get("diffusers") if s.is_built else s.family).loader("generator")  # gensets.models.family
    return load(s, scheduler=scheduler, torch_dtype=torch_dtype, device=device, allow_pickle=allow_pickle,
                attention=attention, compile=compile, channels_last=channels_last)


def _load_diffusers(s, *, scheduler, torch_dtype, device, allow_pickle, attention, compile, channels_last,
                    **_) -> Generator:
    """A diffusers pipeline (diffusers:<repo or path>, tiny:sd): the diffusers family's generator loader."""
    source = loading.resolve(s, allow_pickle)

    import diffusers
    import torch

    scheduler_cls = scheduler_class(scheduler, f"model {s.raw!r}") if scheduler is not None else None
    kwargs: dict = dict(dtype=getattr(torch, torch_dtype), **source.hub_kwargs())
    if not allow_pickle:
        kwargs["use_safetensors"] = True
    if s.is_tiny:
        kwargs["low_cpu_mem_usage"] = False
    with loading.load_errors(s), source.offline(), hub.quiet_progress("diffusers", "transformers"):
        pipe = diffusers.DiffusionPipeline.from_pretrained(source.location, **kwargs)
    if scheduler_cls is not None:
        pipe.scheduler = scheduler_cls.from_config(pipe.scheduler.config)
    if device is None:  # under accelerate launch, this process's GPU (not every process on GPU 0)
        device = default_device()
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    _speed_settings(pipe, attention=attention, compile=compile, channels_last=channels_last)
    settings = {"dtype": torch_dtype, "attention": attention, "compile": compile, "channels_last": channels_last,
                "device": torch.device(device).type}
    return Generator(spec=s.raw, model_id=source.model_id, revision=source.commit(), pipe=pipe, settings=settings)


def _speed_settings(pipe, *, attention: str, compile: bool, channels_last: bool) -> None:
    """Apply the attention implementation and the memory format to the pipeline's UNet and VAE, and torch.compile
    to its UNet and to its VAE's decode (the VAE's share of a 20-step 512-px SD image is ~10% on a GPU: once the UNet
    is compiled, an eager decode is what is left). The compile happens on the first call (the build's first unit
    pays it); on CPU it needs a C++ compiler (torch inductor)."""
    import torch

    parts = [m for m in (getattr(pipe, "unet", None), getattr(pipe, "vae", None)) if m is not None]
    if attention == "eager":
        for m in parts:
            if hasattr(m, "set_default_attn_processor"):
                m.set_default_attn_processor()
    if channels_last:
        for m in parts:
            m.to(memory_format=torch.channels_last)
    if compile:
        if getattr(pipe, "unet", None) is None:
            raise ModelError(f"compile: {type(pipe).__name__} has no UNet to compile")
        pipe.unet = torch.compile(pipe.unet, mode="reduce-overhead", fullgraph=True)
        vae = getattr(pipe, "vae", None)
        if vae is not None:
            vae.decode = torch.compile(vae.decode, fullgraph=True)
