"""A tiny random image captioning model, built offline from a config (seed 0), saved with safetensors.

    blip-caption  transformers BlipForConditionalGeneration + BlipProcessor, shaped like
                  Salesforce/blip-image-captioning-*: a BERT word-piece vocab plus [DEC] (the decoder
                  start / bos token), [SEP] ends a caption; 32 px images
It loads back through the same AutoConfig / BlipForConditionalGeneration / AutoProcessor path as a Hub
BLIP captioner (gensets.models.captioner). Built once under $GENSETS_CACHE/tiny/<kind>-v1, in a temp
folder renamed into place (as tiny.py).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from gensets.errors import ModelError
from gensets.models.tiny import _BUILD_LOCK, cache_root

VERSION = "v1"
TINY_CAPTION_KINDS = ("blip-caption",)
_DONE = ".complete"
# weights drawn 10x wider than BERT's 0.02: at 0.02 a random BLIP gives every image the same caption, at
# 0.2 the caption depends on the image (measured), which is what clustering + captioning needs to show
INIT_RANGE = 0.2


def tiny_caption_path(kind: str) -> Path:
    """The folder of tiny captioning model `kind`, built on first use."""
    if kind not in TINY_CAPTION_KINDS:
        raise ModelError(f"model 'tiny:{kind}': unknown tiny captioning model "
                         f"(expected one of {', '.join(TINY_CAPTION_KINDS)})")
    final = cache_root() / "tiny" / f"{kind}-{VERSION}"
    if (final / _DONE).is_file():
        return final
    with _BUILD_LOCK:  # shared with tiny.py: the global torch RNG is seeded while building
        if (final / _DONE).is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{VERSION}-", dir=final.parent))
        try:
            _build_blip_caption(tmp)
            (tmp / _DONE).write_text(f"tiny:{kind} {VERSION}\n")
            if final.exists() and not (final / _DONE).is_file():
                shutil.rmtree(final, ignore_errors=True)
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / _DONE).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _build_blip_caption(d: Path) -> None:
    import torch
    from transformers import BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

    from gensets.models.hub import quiet_progress
    from gensets.models.tiny_vlm import _tiny_bert, bert_tokenizer

    tokenizer = bert_tokenizer(("[DEC]",), bos_token="[DEC]", model_max_length=64)
    ids = tokenizer.convert_tokens_to_ids
    text_config = _tiny_bert(len(tokenizer), max_position_embeddings=64, encoder_hidden_size=32,
                             bos_token_id=ids("[DEC]"), sep_token_id=ids("[SEP]"), pad_token_id=ids("[PAD]"),
                             eos_token_id=ids("[SEP]"), initializer_range=INIT_RANGE)
    vision_config = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                         image_size=32, patch_size=8, initializer_range=INIT_RANGE)
    config = BlipConfig(text_config=text_config, vision_config=vision_config, projection_dim=32)
    with torch.random.fork_rng(devices=[]), quiet_progress("transformers"):
        torch.manual_seed(0)
        BlipForConditionalGeneration(config).save_pretrained(d, safe_serialization=True)
    BlipProcessor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                  tokenizer=tokenizer).save_pretrained(d)
