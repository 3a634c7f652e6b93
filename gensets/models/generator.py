"""Text-to-image (and image-to-image) generation with a diffusers pipeline, deterministic per (prompt, seed).

Each image gets its own `torch.Generator("cpu").manual_seed(seed)`. Measured on CPU (tiny:sd, 64x64):
a batched pipeline call changes the pixels of a (prompt, seed) compared with that prompt alone (1-2
pixels off by one, from ~3e-6 float differences of batched kernels). So generate() keeps the batched API
but runs the pipeline one image at a time: an image never depends on the other prompts of the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gensets.errors import ModelError
from gensets.models import hub, loading
from gensets.models.spec import parse_spec

if TYPE_CHECKING:
    from PIL import Image

DTYPES = ("float32", "float16", "bfloat16")


class Generator:
    """A loaded diffusers pipeline: generate(prompts, seeds, ...) -> PIL images, one per prompt."""

    def __init__(self, *, spec: str, model_id: str, revision: str | None, pipe):
        self.spec = spec
        self.model_id = model_id
        self.revision = revision
        self.pipe = pipe
        self._img2img = None

    @property
    def pipeline(self) -> str:
        return type(self.pipe).__name__

    @property
    def scheduler(self) -> str:
        return type(self.pipe.scheduler).__name__

    def __repr__(self) -> str:
        return f"Generator(spec={self.spec!r}, pipeline={self.pipeline!r}, scheduler={self.scheduler!r})"

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
    ) -> list[Image.Image]:
        """One image per (prompt, seed). With init_images: image-to-image from those images, resized to
        width x height, at `strength`. The result for a (prompt, seed) does not depend on the batch."""
        n = len(prompts)
        if len(seeds) != n:
            raise ValueError(f"generate: {n} prompts but {len(seeds)} seeds")
        if negative_prompts is not None and len(negative_prompts) != n:
            raise ValueError(f"generate: {n} prompts but {len(negative_prompts)} negative prompts")
        if init_images is not None and len(init_images) != n:
            raise ValueError(f"generate: {n} prompts but {len(init_images)} init images")
        import torch

        images = []
        for i in range(n):
            kwargs = dict(
                prompt=[prompts[i]],
                negative_prompt=[negative_prompts[i]] if negative_prompts is not None else None,
                num_inference_steps=steps,
                guidance_scale=guidance,
                generator=[torch.Generator("cpu").manual_seed(int(seeds[i]))],
                output_type="pil",
            )
            if init_images is None:
                out = self.pipe(width=width, height=height, **kwargs)
            else:
                init = init_images[i].convert("RGB")
                if init.size != (width, height):
                    init = init.resize((width, height), resample=3)  # bicubic
                out = self.img2img_pipe()(image=[init], strength=strength, **kwargs)
            images.extend(out.images)
        return images


def load_generator(
    spec: str,
    *,
    scheduler: str | None = None,
    torch_dtype: str = "float32",
    device: str | None = None,
    allow_pickle: bool = False,
) -> Generator:
    """Load the diffusers pipeline named by `spec` (`diffusers:<repo or path>[@rev]` or `tiny:sd`).

    `scheduler` is a diffusers scheduler class name (e.g. "EulerDiscreteScheduler"), configured from
    the pipeline's own scheduler config.
    """
    s = parse_spec(spec)
    loading.expect(s, "diffusers", "diffusers", "an image generator")
    if torch_dtype not in DTYPES:
        raise ModelError(
            f"model {spec!r}: unknown torch_dtype {torch_dtype!r} (expected one of {', '.join(DTYPES)})"
        )
    source = loading.resolve(s, allow_pickle)

    import diffusers
    import torch

    scheduler_cls = None
    if scheduler is not None:
        scheduler_cls = getattr(diffusers, scheduler, None)
        if not (isinstance(scheduler_cls, type) and issubclass(scheduler_cls, diffusers.SchedulerMixin)):
            raise ModelError(f"model {spec!r}: unknown diffusers scheduler {scheduler!r}")
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
        from .device import default_device

        device = default_device()
    pipe = pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return Generator(spec=s.raw, model_id=source.model_id, revision=source.commit(), pipe=pipe)
