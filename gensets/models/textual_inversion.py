"""Textual Inversion (Gal et al., 2022): one new token's embedding learned on a few images of a concept, with the
rest of a Stable Diffusion pipeline frozen. The loop of GenBench's trainer (Luodian/GenBench
train_textual_inversion.py, diffusers' examples/textual_inversion/textual_inversion.py with a CLIP loss added):

- the placeholder token is added to a copy of the pipeline's tokenizer and text encoder (the pipeline itself is
  left as it was), its row initialised from the initializer token's (``convert_tokens_to_ids(initializer)`` as
  the authors' script does; diffusers' example encodes it and requires one token);
- only the token embeddings train (AdamW, betas 0.9 / 0.999, weight decay 1e-2, eps 1e-8: the script's defaults),
  every other row is put back after each step; gradients clipped to norm 1.0 (the authors' script; the diffusers
  example does not clip);
- a step's batch is the DataLoader's ``shuffle=True`` over images x repeats, each image resized (bicubic) to the
  resolution, optionally centre-cropped first, flipped with p 0.5, scaled to [-1, 1]; its text a template drawn
  at random, filled with ``"<token> <concept>"`` (the script's ``placeholder_string``);
- the loss (:func:`ti_loss`) is the DDPM noise-prediction MSE (v-prediction target where the scheduler says so)
  on the VAE latents scaled by ``vae.config.scaling_factor`` (0.18215 in the script), plus, with ``loss="clip"``
  (the default: the script's ``--clip_guidance text_sim``, ``--lambda_clip_guidance 1.0``), lambda x the CLIP
  text-similarity term exactly as the script computes it: for each image i, ``DDPMScheduler.step(pred[i], t[i],
  latents[i]).prev_sample`` (one DDPM step applied to the *clean* latents, as the script passes them, its
  variance noise drawn for t > 0), decoded by the VAE (``latents / scaling_factor``, not clamped), resized
  (bicubic, no antialias: torchvision's tensor default before 0.17) and centre-cropped to the CLIP's input size,
  *not* normalised (the script applies ``preprocess.transforms[:2]`` only), embedded by CLIP's image tower; the
  batch's texts embedded by CLIP's text tower (its own tokenizer); both L2-normalised; ``logits = exp(logit_scale)
  x image @ text.T`` over every (image, text) pair of the batch, and the term is ``mean(1 - logits / 100)``.
  The script's CLIP is OpenAI's ViT-B/16 (``clip.load("ViT-B/16")``, float16 on a GPU); gensets loads it as
  ``open_clip:ViT-B-16/openai`` (the same weights) in float32. Gradients reach the token through the UNet's
  prediction, the VAE decoder and CLIP's image tower; both towers stay frozen. ``loss="mse"`` is plain Textual
  Inversion (Gal et al.; diffusers' example), a named variant.

Paper and code: the paper (shared/papers/001_f04b4de81b95e690.txt, Sec. 4) says only "Textual Inversion [18]",
"1000 steps for each category"; the published trainer adds the CLIP term by default, and the per-class command of
textual_inversion/example.sh passes ``--lambda_global_clip_loss 1.0`` (an argument the published script does not
have; its ``--lambda_clip_guidance`` defaults to the same 1.0) with ``--max_train_steps=500``.

Deterministic and resumable: every random draw of step s (batch order, flips, templates, latent sample, noise,
timesteps, the CLIP term's DDPM step noise) comes from seeds derived from (seed, s), so nothing but the token's
row, its AdamW moments and the losses so far needs saving; a checkpoint every ``checkpoint_every`` steps holds
exactly those, and a training killed at any point resumes from the last one and ends with the same bytes as one
never interrupted (CPU, same number of threads). Moments of other rows are not kept: those rows are reset every
step, and AdamW is element-wise, so they never reach the token's row.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gensets import recordio
from gensets.errors import ModelError
from gensets.records import derive_seed

from ..errors import DataError
from ..output import atomic_open
from ..safety import check_regular, no_symlink

if TYPE_CHECKING:
    from PIL import Image

ADAM = {"betas": (0.9, 0.999), "weight_decay": 1e-2, "eps": 1e-8}  # train_textual_inversion.py parse_args
MAX_GRAD_NORM = 1.0  # train_textual_inversion.py: --max_grad_norm 1.0, clip_grad_norm_ each step
LOSSES = ("clip", "mse")  # the script's --clip_guidance text_sim (its default) and none (plain Textual Inversion)


@dataclass(frozen=True)
class Training:
    """How one embedding trains (the learning rate as applied: already scaled, if it is)."""

    steps: int
    learning_rate: float
    batch_size: int
    lr_scheduler: str = "constant"
    warmup_steps: int = 0
    repeats: int = 100
    flip_p: float = 0.5
    resolution: int = 512
    center_crop: bool = False
    checkpoint_every: int = 100
    seed: int = 0
    loss: str = "clip"  # LOSSES: the noise MSE + clip_lambda x the CLIP text-similarity term, or the MSE alone
    clip_lambda: float = 1.0  # --lambda_clip_guidance 1.0


class ClipGuidance:
    """The script's ``text_sim`` term (see the module docstring) on an open_clip CLIP loaded by
    :func:`gensets.models.load_classifier` (its spec, id and revision are kept for provenance); frozen."""

    def __init__(self, clf):
        if getattr(clf, "kind", "") != "open_clip":
            raise ModelError(f"textual inversion: the CLIP loss needs an open_clip CLIP model (e.g. "
                             f"open_clip:ViT-B-16/openai, tiny:clip), got {clf.spec!r}")
        self.model, self.tokenizer = clf.model.eval().requires_grad_(False), clf.tokenizer
        size = self.model.visual.image_size
        self.size = size if isinstance(size, int) else size[0]  # clip.load's n_px: input_resolution
        self.spec, self.model_id, self.revision = clf.spec, clf.model_id, clf.revision

    def __call__(self, images, texts: list[str]):
        """``mean(1 - exp(logit_scale) x cos(image_i, text_j) / 100)`` over every pair; ``images`` as the VAE
        decodes them ([B, 3, H, W], about [-1, 1])."""
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as TF

        x = TF.resize(images, self.size, interpolation=InterpolationMode.BICUBIC, antialias=False)
        x = TF.center_crop(x, self.size)  # clip's preprocess.transforms[:2]: Resize(n_px, BICUBIC), CenterCrop(n_px)
        img = self.model.encode_image(x)
        txt = self.model.encode_text(self.tokenizer(texts).to(x.device))
        img, txt = img / img.norm(dim=1, keepdim=True), txt / txt.norm(dim=1, keepdim=True)
        logits = self.model.logit_scale.exp() * img @ txt.t()
        return (1.0 - logits / 100).mean()


def ti_loss(unet, vae, noise_scheduler, hidden, latents, noise, timesteps, *, clip: ClipGuidance | None = None,
            texts: list[str] | None = None, clip_lambda: float = 1.0, generator=None) -> dict:
    """One batch's loss: ``{"loss", "mse", "clip"}`` (``clip`` None without a CLIP). ``latents`` are the scaled
    VAE latents, ``hidden`` the text encoder's states of ``texts``; ``generator`` draws the CLIP term's DDPM
    step noise (one [C, H, W] draw per image with t > 0, in batch order)."""
    import torch
    import torch.nn.functional as F

    noisy = noise_scheduler.add_noise(latents, noise, timesteps)
    pred = unet(noisy, timesteps, hidden).sample
    kind = noise_scheduler.config.prediction_type
    if kind not in ("epsilon", "v_prediction"):
        raise ModelError(f"textual inversion: unknown prediction type {kind!r}")
    target = noise if kind == "epsilon" else noise_scheduler.get_velocity(latents, noise, timesteps)
    mse = F.mse_loss(pred.float(), target.float(), reduction="mean")
    if clip is None:
        return {"loss": mse, "mse": mse, "clip": None}
    stepped = torch.stack([noise_scheduler.step(pred[i], int(timesteps[i]), latents[i], generator=generator
                                                ).prev_sample for i in range(len(pred))])
    images = vae.decode(stepped / vae.config.scaling_factor).sample
    term = clip(images.float(), texts)
    return {"loss": mse + clip_lambda * term, "mse": mse, "clip": term}


def _pixels(image: Image.Image, size: int, center_crop: bool, flip: bool):
    """The script's ``__getitem__``: RGB, optional centre crop, bicubic resize, flip, [-1, 1], CHW."""
    import numpy as np
    import torch
    from PIL import Image as PILImage

    img = np.array(image.convert("RGB")).astype(np.uint8)
    if center_crop:
        c = min(img.shape[0], img.shape[1])
        h, w = img.shape[0], img.shape[1]
        img = img[(h - c) // 2:(h + c) // 2, (w - c) // 2:(w + c) // 2]
    im = PILImage.fromarray(img).resize((size, size), resample=PILImage.Resampling.BICUBIC)
    if flip:
        im = im.transpose(PILImage.Transpose.FLIP_LEFT_RIGHT)
    arr = (np.array(im).astype(np.uint8) / 127.5 - 1.0).astype(np.float32)
    return torch.from_numpy(arr).permute(2, 0, 1)


def _batch(step: int, n: int, t: Training) -> list[int]:
    """The image indices of step ``step``: DataLoader(shuffle=True) over n x repeats, one permutation per epoch."""
    import torch

    length = n * t.repeats
    per_epoch = -(-length // t.batch_size)
    epoch, b = divmod(step, per_epoch)
    order = torch.randperm(length, generator=torch.Generator().manual_seed(derive_seed(t.seed, "epoch", epoch)))
    return [int(i) % n for i in order[b * t.batch_size:(b + 1) * t.batch_size]]


def _save_atomic(tensors: dict, path: Path, metadata: dict[str, str]) -> None:
    """One metadata key only: safetensors writes several in no fixed order (a hash map)."""
    import safetensors.torch

    data = safetensors.torch.save({k: v.contiguous() for k, v in tensors.items()}, metadata=metadata)
    with atomic_open(no_symlink(path, "a TI file")) as f:  # neither written through a symlink nor replacing one
        f.write(data)


def _resume(checkpoint: Path, key: str, steps: int) -> tuple[int, list, list, tuple | None]:
    """The step, losses, CLIP terms (with the CLIP loss) and (embedding row, exp_avg, exp_avg_sq) a checkpoint of
    the same ``key`` holds ((0, [], [], None) for another key's). DataError naming the file for one that is not a
    regular file, not safetensors, or whose state is not what :func:`train_textual_inversion` writes."""
    import safetensors

    check_regular(no_symlink(checkpoint, "a TI checkpoint"))
    try:
        with safetensors.safe_open(str(checkpoint), "pt") as f:
            state = (f.metadata() or {}).get("state")
            if state is None:
                return 0, [], [], None
            # the TI state schema (gensets.recordio): a key, a bounded step, lists of numbers
            meta = recordio.parse(state, "TIState", f"{checkpoint}: state")
            if meta["key"] != key:
                return 0, [], [], None
            step, losses, clip_losses = meta["step"], meta["losses"], meta.get("clip_losses", [])
            if not (step <= steps and len(losses) == step and len(clip_losses) in (0, step)):
                raise ValueError(f"state: step {str(step)[:20]} and {len(losses) if isinstance(losses, list) else 'no'}"
                                 f" losses, for a training of {steps} steps")
            return step, losses, clip_losses, tuple(f.get_tensor(k) for k in ("embedding", "exp_avg", "exp_avg_sq"))
    except recordio.RecordError as e:  # names the file, the field and the problem
        raise DataError(f"{e}; remove it to train this class from the start") from None
    except Exception as e:  # noqa: BLE001 - safetensors' own errors, JSON, a missing tensor: one line naming the file
        raise DataError(f"{checkpoint}: not a readable TI checkpoint ({' '.join(f'{type(e).__name__}: {e}'.split())[:200]}); "
                        "remove it to train this class from the start") from None


def save_embedding(path: Path, token: str, embedding) -> None:
    """``{token: tensor}`` in safetensors with ``{"format": "pt"}``, as diffusers' example saves it
    (``learned_embeds.safetensors``); ``pipe.load_textual_inversion(path, token=token)`` reads it."""
    _save_atomic({token: embedding.detach().cpu()}, Path(path), {"format": "pt"})


def train_textual_inversion(pipe, images: list, *, token: str, initializer: str, templates: list[str], concept: str,
                            training: Training, checkpoint: Path, key: str, clip: ClipGuidance | None = None,
                            on_step: Callable[[int], None] | None = None) -> dict:
    """Train ``token`` on ``images`` with ``pipe``'s (frozen) UNet, VAE and text encoder (and, with
    ``training.loss == "clip"``, the frozen ``clip``); returns the embedding (shape (1, dim), as diffusers saves
    it), the loss of every step (and its CLIP term), the initializer's id and the step training resumed from.
    ``checkpoint`` (a safetensors file) is written every ``checkpoint_every`` steps and at the end; one there with
    the same ``key`` is resumed from. ``on_step(step)`` is called after each step is complete."""
    import copy

    import torch
    from diffusers import DDPMScheduler
    from diffusers.optimization import get_scheduler

    t = training
    if not images:
        raise ModelError(f"textual inversion of {token!r}: no images to train on")
    if t.loss not in LOSSES:
        raise ModelError(f"textual inversion: unknown loss {t.loss!r} (one of {', '.join(LOSSES)})")
    if t.loss == "clip" and clip is None:
        raise ModelError("textual inversion: the CLIP loss needs a CLIP model (clip=ClipGuidance(...))")
    tokenizer, text_encoder = copy.deepcopy(pipe.tokenizer), copy.deepcopy(pipe.text_encoder)
    if tokenizer.add_tokens(token) == 0:
        raise ModelError(f"textual inversion: the tokenizer already holds {token!r}; name another token")
    init_id = tokenizer.convert_tokens_to_ids(initializer)
    tid = tokenizer.convert_tokens_to_ids(token)
    text_encoder.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    text_encoder.requires_grad_(False)
    emb = text_encoder.get_input_embeddings()
    emb.weight.requires_grad_(True)
    with torch.no_grad():
        emb.weight[tid] = emb.weight[init_id]
    unet, vae = pipe.unet, pipe.vae
    unet.requires_grad_(False)
    vae.requires_grad_(False)
    text_encoder.train()
    noise_scheduler = DDPMScheduler.from_config(pipe.scheduler.config)
    optimizer = torch.optim.AdamW(emb.parameters(), lr=t.learning_rate, **ADAM)
    lr_scheduler = get_scheduler(t.lr_scheduler, optimizer=optimizer, num_warmup_steps=t.warmup_steps,
                                 num_training_steps=t.steps)
    original = emb.weight.detach().clone()
    keep = torch.arange(len(tokenizer)) != tid

    start, losses, clip_losses = 0, [], []
    if os.path.lexists(checkpoint):
        start, losses, clip_losses, saved = _resume(Path(checkpoint), key, t.steps)
        if start:
            row, m, v = saved
            if not all(x.shape == emb.weight[tid].shape for x in saved):
                raise DataError(f"{checkpoint}: its tensors are not of the token embedding's shape "
                                f"{tuple(emb.weight[tid].shape)}; remove it to train this class from the start")
    if start:
        with torch.no_grad():
            emb.weight[tid] = row
        state = {"step": torch.tensor(float(start)), "exp_avg": torch.zeros_like(emb.weight),
                 "exp_avg_sq": torch.zeros_like(emb.weight)}
        state["exp_avg"][tid], state["exp_avg_sq"][tid] = m, v
        sd = optimizer.state_dict()
        optimizer.load_state_dict({**sd, "state": {0: state}})
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": replaying its steps
            warnings.simplefilter("ignore")
            for _ in range(start):
                lr_scheduler.step()

    def save(step: int) -> None:
        st = optimizer.state[emb.weight]
        _save_atomic({"embedding": emb.weight[tid].detach(), "exp_avg": st["exp_avg"][tid],
                      "exp_avg_sq": st["exp_avg_sq"][tid]}, Path(checkpoint),
                     {"state": json.dumps({"key": key, "step": step, "losses": losses,
                                             **({"clip_losses": clip_losses} if clip_losses else {})}, sort_keys=True)})

    device = unet.device
    for step in range(start, t.steps):
        g = torch.Generator("cpu").manual_seed(derive_seed(t.seed, "step", step))
        pick = random.Random(derive_seed(t.seed, "templates", step))
        idx = _batch(step, len(images), t)
        flips = (torch.rand(len(idx), generator=g) < t.flip_p).tolist()
        pixels = torch.stack([_pixels(images[i], t.resolution, t.center_crop, f) for i, f in zip(idx, flips, strict=True)])
        texts = [pick.choice(templates).format(f"{token} {concept}") for _ in idx]
        ids = tokenizer(texts, padding="max_length", truncation=True, max_length=tokenizer.model_max_length,
                        return_tensors="pt").input_ids.to(device)
        with torch.no_grad():
            latents = vae.encode(pixels.to(device, vae.dtype)).latent_dist.sample(generator=g)
            latents = latents * vae.config.scaling_factor
        noise = torch.randn(latents.shape, generator=g).to(device)
        steps_t = torch.randint(0, noise_scheduler.config.num_train_timesteps, (len(idx),), generator=g).to(device)
        hidden = text_encoder(ids)[0]
        out = ti_loss(unet, vae, noise_scheduler, hidden, latents, noise, steps_t,
                      clip=clip if t.loss == "clip" else None, texts=texts, clip_lambda=t.clip_lambda, generator=g)
        loss = out["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(text_encoder.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
        with torch.no_grad():
            emb.weight[keep] = original[keep]
        losses.append(float(loss.detach()))
        if out["clip"] is not None:
            clip_losses.append(float(out["clip"].detach()))
        done = step + 1
        if done % t.checkpoint_every == 0 or done == t.steps:
            save(done)
        if on_step is not None:
            on_step(done)
    return {"embedding": emb.weight[tid:tid + 1].detach().clone().cpu(), "losses": losses, "clip_losses": clip_losses,
            "initializer_id": int(init_id), "initializer_unknown": init_id == tokenizer.unk_token_id,
            "resumed_from": start}
