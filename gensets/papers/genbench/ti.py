"""TI's training stage: one unit per selected class trains the class's token on its reference images
(gensets.models.textual_inversion): the first ``ti.references`` of a folder:/hf: reference source, or
(``reference.source: retrieval``) the retrieval data type's best ``ti.references`` pool images, each checked
against the sha256 its pool entry was planned with; the unit's id then holds the pool's identity (settings and
content), as RA's do, so a changed pool retrains. It keeps, in the workspace, ``ti/<class>.safetensors``
(``{token: tensor}``, what ``pipe.load_textual_inversion`` reads), ``ti/<class>.json`` (its training provenance:
references and their sha256, the settings, seed, base model and revision, the loss and its CLIP model, the loss
(and CLIP term) of every step) and ``ti/<class>.ckpt.safetensors`` (the last checkpoint: a killed training
resumes from it). The unit commits an empty candidate shard, so a resumed build never retrains a class it
finished; the generation stage is planned from the committed embeddings (their sha256 goes into the TI units' ids
and every TI image's provenance), its images sampled with ``ti.scheduler``."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ...builders.base import PlannedLater
from ...builders.common import Unit
from ...config import to_dict
from ...errors import DataError, GensetsError
from ...models import load_classifier
from ...models import textual_inversion as ti
from ...models.captioner import load_captioner
from ...models.text import load_text_encoder
from ...output import atomic_open
from ...records import content_id, derive_seed, slug
from ...safety import inside, read_regular, writable_inside
from ...shards import Manifest
from ...sources.classes import plain_name, source_name
from .config import GenBenchConfig, selected
from .pool import pool_identity
from .references import reference_files
from .strategies import TI_VARIANTS as VARIANTS
from .strategies import compose

STAGE = "ti"


def uses_ti(cfg: GenBenchConfig) -> bool:
    return any("ti" in compose(cfg.parts(s)).needs for s in cfg.strategies)


def files_of(name: str) -> dict[str, str]:
    """A class's files in the workspace, relative to its root."""
    base = f"ti/{slug(name)}"
    return {"embedding": f"{base}.safetensors", "provenance": f"{base}.json", "checkpoint": f"{base}.ckpt.safetensors"}


def training(cfg: GenBenchConfig) -> dict:
    """The resolved training settings of every class (what the units' ids hash)."""
    t = cfg.ti
    settings = {k: v for k, v in to_dict(t).items() if (k != "filter" or v is not None) and k != "scheduler"
                and (t.loss == "clip" or k not in ("clip", "clip_lambda"))}  # off / unused: ids as before them
    return {**settings, "resolution": t.resolution or cfg.generator.width,
            "applied_learning_rate": t.learning_rate * (t.batch_size if t.scale_lr else 1)}


def plan_training(cfg: GenBenchConfig) -> list[Unit]:
    """One unit per selected class when a strategy uses TI (none otherwise)."""
    if not uses_ti(cfg):
        return []
    ref = {"source": source_name(cfg.reference.source), "split": cfg.reference.split,
           "hf_config": cfg.reference.hf_config, "per_class": cfg.reference.per_class}
    if cfg.reference.source == "retrieval":  # as RA's units: the pool's identity (settings and content) in the id
        pool = pool_identity(cfg)
        ref, files = {**ref, "source": f"retrieval:{pool['pool']}", "retrieval": pool}, None
    else:
        files = reference_files(cfg)
    units = []
    for index, name in selected(cfg):
        payload = {"builder": "genbench", "stage": STAGE, "dataset": source_name(cfg.dataset), "class": name,
                   "label_index": index, "token": cfg.ti.token_of(cfg.dataset_name, name),
                   "initializer": cfg.ti.initializer_of(name), "templates": list(cfg.templates),
                   "training": training(cfg), "seed": cfg.seed, "model": cfg.generator.model,
                   "reference": {**ref, "files": files[name][:cfg.ti.references] if files else None}}
        units.append(Unit(id=content_id(payload), payload=payload))
    return units


def embeddings(cfg: GenBenchConfig, workspace) -> dict[str, dict]:
    """Each selected class's committed embedding: token, file (relative to the workspace) and sha256."""
    if workspace is None:
        raise PlannedLater("TI: its images are planned from the embeddings a build trained in its workspace; "
                           "run `gensets build`")
    done = Manifest(workspace.manifest_path).done("unit")
    out = {}
    for u in plan_training(cfg):
        name = u.payload["class"]
        path = inside(workspace.root, files_of(name)["embedding"])  # no symlink out of the workspace
        if u.id not in done or not os.path.lexists(path):
            raise DataError(f"{workspace.root}: the TI embedding of class {name!r} is not trained yet "
                            f"({files_of(name)['embedding']}); run `gensets build` again")
        out[name] = {"token": u.payload["token"], "embedding": files_of(name)["embedding"],
                     "embedding_sha256": hashlib.sha256(read_regular(path)).hexdigest()}
    return out


def _write_json(path: Path, obj: dict) -> None:
    with atomic_open(path) as f:  # a symlink at the temporary name is refused, not written through
        f.write((json.dumps(obj, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def filter_references(f: dict, name: str, refs: list, models: dict) -> tuple[list, list[dict]]:
    """``ti.filter`` (an option; see TIFilterConfig): each reference captioned, the caption and the class name
    embedded by the text model (mean token state), kept when their cosine >= the threshold. ``models`` caches the
    loaded captioner and text encoder. The kept references, and each reference's caption, similarity and kept flag."""
    import torch

    if "captioner" not in models:
        models["captioner"], models["text"] = load_captioner(f["captioner"]), load_text_encoder(f["text_model"])
    captions = models["captioner"].caption([r.image().convert("RGB") for r in refs])
    vectors = models["text"].embed([plain_name(name), *captions])
    sims = torch.nn.functional.cosine_similarity(vectors[1:], vectors[:1]).tolist()
    rows = [{"id": r.id, "caption": c, "similarity": s, "kept": s >= f["threshold"]}
            for r, c, s in zip(refs, captions, sims, strict=True)]
    kept = [r for r, row in zip(refs, rows, strict=True) if row["kept"]]
    if not kept:
        raise DataError(f"ti.filter: no reference image of class {name!r} has a caption similarity >= "
                        f"{f['threshold']} (best {max(sims):.3f}); lower ti.filter.threshold or add references")
    return kept, rows


def train_unit(unit: Unit, ctx, build_id: str) -> list:
    """Train (or resume) one class's token; write its embedding and provenance; no samples."""
    from PIL import Image

    p, cfg = unit.payload, ctx.cfg
    if ctx.workspace is None:
        raise GensetsError("TI: training writes its embeddings into a workspace; run `gensets build`")
    name, t = p["class"], p["training"]
    refs = ctx.references[name][:t["references"]]
    if p["reference"]["files"] not in (None, [[r.id, r.sha256] for r in refs]):
        raise DataError(f"reference {cfg.reference.source}: the images of class {name!r} changed while building; "
                        "run the build again")
    screened = None
    if t.get("filter"):
        refs, screened = filter_references(t["filter"], name, refs, ctx.ti_filter_models)
    images = [r.image().convert("RGB") for r in refs]
    if t["prepare_size"]:  # textual_inversion_prepare_images: Image.open(...).resize((224, 224))
        images = [im.resize((t["prepare_size"],) * 2, resample=Image.Resampling.BICUBIC) for im in images]
    root = ctx.workspace.root
    # ti/ and its files: never a symlink, so nothing is written through one or replaces one
    files = {k: writable_inside(root, v) for k, v in files_of(name).items()}
    files["embedding"].parent.mkdir(parents=True, exist_ok=True)
    seed = derive_seed(p["seed"], p["dataset"], "TI", name)  # each class its own draws
    settings = ti.Training(steps=t["steps"], learning_rate=t["applied_learning_rate"], batch_size=t["batch_size"],
                        lr_scheduler=t["lr_scheduler"], warmup_steps=t["warmup_steps"], repeats=t["repeats"],
                        flip_p=t["flip_p"], resolution=t["resolution"], center_crop=t["center_crop"],
                        checkpoint_every=t["checkpoint_every"], seed=seed, loss=t["loss"],
                        clip_lambda=t.get("clip_lambda", 0.0))
    gen = ctx.generator
    clip = None
    if t["loss"] == "clip":
        if t["clip"] not in ctx.ti_clip:
            clf = load_classifier(t["clip"], labels=[plain_name(name)], templates=["{}"],
                                  device=str(gen.pipe.unet.device))
            ctx.ti_clip[t["clip"]] = ti.ClipGuidance(clf)
        clip = ctx.ti_clip[t["clip"]]
    out = ti.train_textual_inversion(gen.pipe, images, token=p["token"], initializer=p["initializer"],
                                  templates=p["templates"], concept=plain_name(name), training=settings,
                                  checkpoint=files["checkpoint"], key=unit.id, clip=clip,
                                  on_step=getattr(ctx, "ti_step", None))
    ti.save_embedding(files["embedding"], p["token"], out["embedding"])

    _write_json(files["provenance"], {
        "class": name, "label_index": p["label_index"], "token": p["token"], "unit": unit.id, "build": build_id,
        "variant": VARIANTS[t["loss"]], "loss": t["loss"], "initializer": p["initializer"],
        "initializer_id": out["initializer_id"], "initializer_unknown": out["initializer_unknown"],
        "references": [{"id": r.id, "sha256": r.sha256} for r in refs],
        "reference_source": cfg.reference.source, "training": t, "adam": ti.ADAM, "max_grad_norm": ti.MAX_GRAD_NORM,
        "seed": seed, "base_model": {"spec": cfg.generator.model, "id": gen.model_id, "revision": gen.revision},
        "embedding": files_of(name)["embedding"],
        "embedding_sha256": hashlib.sha256(read_regular(files["embedding"])).hexdigest(),
        "losses": out["losses"],
        **({"clip": {"spec": clip.spec, "id": clip.model_id, "revision": clip.revision, "lambda": t["clip_lambda"],
                     "input_size": clip.size}, "clip_losses": out["clip_losses"]} if clip is not None else {}),
        **({"retrieval": p["reference"]["retrieval"]} if "retrieval" in p["reference"] else {}),
        **({"filter": {"screened": screened, "captioner": ctx.ti_filter_models["captioner"].model_id,
                       "text_model": ctx.ti_filter_models["text"].model_id}} if screened is not None else {})})
    return []
