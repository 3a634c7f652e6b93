"""The Sample record and its provenance schema: the one shape that flows everywhere.

A sample is stored in a WebDataset shard as ``<key>.<ext>`` (the encoded image), ``<key>.cls``
(the class index) and ``<key>.json`` (the provenance below). The same provenance struct is declared in
the dataset card so that ``datasets.load_dataset`` never has to guess its type.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from . import __version__
from .images import IMAGE_EXTS

# name -> datasets dtype, in the order of the card. Nested: ("struct", [...]) and ("list", inner).
_GEN = [("spec", "string"), ("id", "string"), ("revision", "string"), ("pipeline", "string"),
        ("scheduler", "string"), ("dtype", "string"), ("attention", "string"), ("compile", "bool"),
        ("channels_last", "bool"), ("device", "string"), ("batching", "string"), ("batch_index", "int64"),
        ("batch_size", "int64"), ("batch_position", "int64"), ("text_window", "int64")]
# several_objects: the review flagged the image as showing several objects (the page's "s", Label Studio's flags)
_REVIEW = [("status", "string"), ("reviewer", "string"), ("time", "string"), ("label_before", "string"),
           ("several_objects", "bool")]
LIBRARIES = ("gensets", "torch", "diffusers", "transformers", "timm", "open_clip_torch", "webdataset")
# The provenance every builder's samples carry; a builder adds its own fields (``Builder.fields``) between
# the two parts: a sample's json holds COMMON + the fields of the builder that made it, nothing else.
COMMON_HEAD = [("key", "string"), ("builder", "string"), ("build", "string"), ("unit", "string"),
               ("config", "string"), ("label", "string"), ("label_index", "int64")]
# prompt_tokens / negative_prompt_tokens: the texts' untruncated token counts (BOS and EOS included) with the
# generator's tokenizer(s); prompt_received / negative_prompt_received: what its text encoder received when the text
# was longer than its window (generator.text_window), else null (gensets.models.generator.Generator.measure)
COMMON_TAIL = [("prompt", "string"), ("negative_prompt", "string"), ("prompt_tokens", "int64"),
               ("negative_prompt_tokens", "int64"), ("prompt_received", "string"),
               ("negative_prompt_received", "string"), ("seed", "int64"), ("steps", "int64"),
               ("guidance", "float64"), ("width", "int64"), ("height", "int64"), ("generator", ("struct", _GEN)),
               ("source", "string"), ("kept", "bool"), ("review", ("struct", _REVIEW)),
               ("versions", ("struct", [(name, "string") for name in LIBRARIES]))]


# What each provenance field means, for the card's Data Fields (gensets.cards.card.fields_md): keyed by the field's
# dotted path ("generator.spec"; a list's items as "name[]"); a builder documents its own fields in ``field_docs``.
FIELD_DOCS = {
    "key": "the sample's key (also `__key__`): unique in the dataset, made from its content",
    "builder": "the gensets builder that made the sample",
    "build": "the build's fingerprint (a hash of its frozen config)",
    "unit": "the id of the work unit that made the sample (a hash of the unit's content)",
    "config": "the published config the sample belongs to",
    "label": "the class name; after a reviewer's relabel, the new one (`review.label_before` keeps the old)",
    "label_index": "the class index, the same as `cls` (an index into the class names of the header's `cls` feature)",
    "prompt": "the text prompt the generator received (null for an imported image)",
    "negative_prompt": "the negative prompt (empty: none)",
    "prompt_tokens": "the prompt's length in tokens of the generator's tokenizer, BOS and EOS included, before any cut",
    "negative_prompt_tokens": "the negative prompt's length in tokens, BOS and EOS included",
    "prompt_received": "what the text encoder read when the prompt was longer than its window (else null)",
    "negative_prompt_received": "what the text encoder read of a negative prompt longer than its window (else null)",
    "seed": "the image's seed (derived from the unit's content; one seeded generator per image)",
    "steps": "the number of denoising steps",
    "guidance": "the classifier-free guidance scale",
    "width": "the generated image's width in pixels",
    "height": "the generated image's height in pixels",
    "generator": "how the generator ran (null for an imported image)",
    "generator.spec": "the model spec of the build config (kind:name@revision)",
    "generator.id": "the resolved model id",
    "generator.revision": "the model's commit as loaded (null for a model built locally)",
    "generator.pipeline": "the diffusers pipeline class",
    "generator.scheduler": "the scheduler class",
    "generator.dtype": "the weights' dtype",
    "generator.attention": "the attention implementation (sdpa or eager)",
    "generator.compile": "whether the UNet was compiled with torch.compile",
    "generator.channels_last": "whether the UNet and VAE ran in channels-last memory format",
    "generator.device": "the device that generated the image",
    "generator.batching": "batched (several images per pipeline call) or per-image",
    "generator.batch_index": "which pipeline call of the unit made the image",
    "generator.batch_size": "how many images that call made",
    "generator.batch_position": "the image's place in that call",
    "generator.text_window": "the text encoder's window in tokens",
    "source": "where the image came from: the generator spec, or the source an import names",
    "kept": "whether the build's filters kept the image (every published image: true)",
    "review": "the review decision that let the image in",
    "review.status": "accepted, relabeled or pending (pending: published unreviewed, a smoke build)",
    "review.reviewer": "who decided (two names joined by ` & ` when two reviewers agreed; null: no review)",
    "review.time": "when the decision was made (UTC)",
    "review.label_before": "the class before a relabel (else null)",
    "versions": "the versions of the libraries that built the image (null: not installed)",
    **{f"versions.{name}": f"the version of {name}" for name in LIBRARIES},
    "quality": "the build's quality thresholds on this image (`quality:` of the build config)",
    "quality.passed": "whether every threshold passed",
    "quality.scores": "one entry per metric",
    "quality.scores[].metric": "the metric's name",
    "quality.scores[].value": "the image's score",
    "quality.scores[].min": "the lower bound (null: none)",
    "quality.scores[].max": "the upper bound (null: none)",
    "quality.scores[].passed": "whether the score is within its bounds",
    "quality.scorers": "the models that scored the image",
    "quality.scorers[].metric": "the metric the model scored",
    "quality.scorers[].variant": "the metric's variant",
    "quality.scorers[].role": "the model's role in the metric",
    "quality.scorers[].spec": "the model spec",
    "quality.scorers[].commit": "the model's commit as loaded",
    "audit": "the duplicate and contamination audit of this image (see the card's Duplicates and contamination)",
    "audit.flagged": "whether a neighbour is within a threshold (a near-duplicate in the set, or a copy of a "
                     "reference image)",
    "audit.neighbours": "the image's nearest neighbour per reference and method: by exact pixels and perceptual "
                        "hashes only those within the threshold, by embedding always",
    "audit.neighbours[].reference": "`self` (another image of this dataset) or the reference set's name",
    "audit.neighbours[].method": "exact (the same pixels), phash, dhash (Hamming distance) or embedding (cosine)",
    "audit.neighbours[].key": "the neighbour's key (in this dataset) or its path / id in the reference set",
    "audit.neighbours[].hamming": "the hashes' Hamming distance in bits (0 for exact; null: embedding)",
    "audit.neighbours[].cosine": "the embeddings' cosine similarity (null: a hash)",
    "audit.neighbours[].duplicate": "whether the pair is within the method's threshold",
}


# what a builder config's ``quality:`` thresholds add to each sample (gensets.quality.thresholds), declared on the card
# of such a build only
QUALITY = ("quality", ("struct", [
    ("passed", "bool"),
    ("scores", ("list", ("struct", [("metric", "string"), ("value", "float64"), ("min", "float64"),
                                    ("max", "float64"), ("passed", "bool")]))),
    ("scorers", ("list", ("struct", [("metric", "string"), ("variant", "string"), ("role", "string"),
                                     ("spec", "string"), ("commit", "string")])))]))


# what finalize's audit stage (gensets.audit) adds to each published sample, declared on the card of a dataset that was
# audited (manifest.json's audit): its nearest neighbour per reference and method, those within the thresholds
AUDIT = ("audit", ("struct", [
    ("flagged", "bool"),
    ("neighbours", ("list", ("struct", [("reference", "string"), ("method", "string"), ("key", "string"),
                                        ("hamming", "int64"), ("cosine", "float64"), ("duplicate", "bool")])))]))


def generator_label(meta: dict) -> str:
    """Which generator made a sample, for tables by generator: its spec and step count (two configs of one
    pipeline at different step counts are two generators), or the source of an imported image."""
    g = meta.get("generator") or {}
    if not g.get("spec"):
        return str(meta.get("source") or "unknown")
    return f"{g['spec']} ({meta['steps']} steps)" if meta.get("steps") else g["spec"]


def schema(fields=()) -> list[tuple[str, Any]]:
    """The provenance fields of a builder's samples: the common ones with the builder's ``fields`` inside."""
    out = [*COMMON_HEAD, *fields, *COMMON_TAIL]
    names = [name for name, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"provenance fields declared twice: {sorted({n for n in names if names.count(n) > 1})}")
    return out


@dataclass
class Sample:
    key: str
    image: bytes
    ext: str
    cls: int
    meta: dict[str, Any] = field(default_factory=dict)

    def to_wds(self) -> dict[str, Any]:
        return {"__key__": self.key, self.ext: self.image, "cls": self.cls, "json": self.meta}

    @classmethod
    def from_wds(cls, d: dict[str, Any]) -> Sample:
        ext = next(e for e in IMAGE_EXTS if e in d)
        meta = d["json"]
        meta = json.loads(meta) if isinstance(meta, (bytes, str)) else meta
        c = d["cls"]
        c = int(c.decode() if isinstance(c, bytes) else c)
        return cls(key=d["__key__"], image=d[ext], ext=ext, cls=c, meta=meta)


def provenance_of(fields, **values: Any) -> dict[str, Any]:
    """A builder's complete sample provenance: :func:`schema` ``(fields)``, every field present (None where
    unknown), no others; library versions filled in."""
    names = [name for name, _ in schema(fields)]
    unknown = set(values) - set(names)
    if unknown:
        raise KeyError(f"unknown provenance fields: {sorted(unknown)}")
    out = {name: values.get(name) for name in names}
    out["versions"] = out["versions"] or library_versions()
    return out


_VERSIONS: dict[str, str] | None = None


def library_versions() -> dict[str, str]:
    global _VERSIONS
    if _VERSIONS is None:
        _VERSIONS = {}
        for name in LIBRARIES:
            if name == "gensets":
                _VERSIONS[name] = __version__
                continue
            try:
                _VERSIONS[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                _VERSIONS[name] = None
    return dict(_VERSIONS)


def features(class_names: list[str], image_ext: str, fields=()):
    """The ``datasets.Features`` of a gensets shard: image, ``cls`` as ClassLabel, the json provenance of a
    builder with these ``fields``."""
    import datasets

    def build(dtype):
        if isinstance(dtype, str):
            return datasets.Value(dtype)
        kind, inner = dtype
        if kind == "list":
            return datasets.List(build(inner))
        return {name: build(t) for name, t in inner}

    return datasets.Features({
        "__key__": datasets.Value("string"),
        "__url__": datasets.Value("string"),
        image_ext: datasets.Image(),
        "cls": datasets.ClassLabel(names=list(class_names)),
        "json": build(("struct", schema(fields))),
    })


_SLUG = re.compile(r"[^a-z0-9]+")


def slug(text: str) -> str:
    """A key-safe form of a name: lowercase letters, digits and single underscores (never a dot)."""
    return _SLUG.sub("_", text.lower()).strip("_") or "x"


def content_id(payload: Any, n: int = 16) -> str:
    """A stable id from content (never from a counter)."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


def derive_seed(*parts: Any) -> int:
    """A per-image seed from its content, in [0, 2**31): independent of order and process count."""
    blob = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF
