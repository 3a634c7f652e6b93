"""A tiny image captioning model:

    blip-caption  transformers BlipForConditionalGeneration + BlipProcessor, shaped like
                  Salesforce/blip-image-captioning-*: a BERT word-piece vocab plus [DEC] (the decoder
                  start / bos token), [SEP] ends a caption; 32 px images
It loads back through the same AutoConfig / BlipForConditionalGeneration / AutoProcessor path as a Hub
BLIP captioner (gensets.models.captioner).
"""

from __future__ import annotations

from pathlib import Path

from gensets.models.tiny import TinyModel, vision_config
from gensets.models.tiny.vqa import bert_config, bert_tokenizer
from gensets.registry import TINY_MODELS

# weights drawn 10x wider than BERT's 0.02: at 0.02 a random BLIP gives every image the same caption, at
# 0.2 the caption depends on the image (measured), which is what clustering + captioning needs to show
INIT_RANGE = 0.2


@TINY_MODELS.register("blip-caption")
class TinyBlipCaption(TinyModel):
    loaders = ("caption",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

        tokenizer = bert_tokenizer(("[DEC]",), bos_token="[DEC]", model_max_length=64)
        ids = tokenizer.convert_tokens_to_ids
        text_config = bert_config(len(tokenizer), max_position_embeddings=64, encoder_hidden_size=32,
                                  bos_token_id=ids("[DEC]"), sep_token_id=ids("[SEP]"), pad_token_id=ids("[PAD]"),
                                  eos_token_id=ids("[SEP]"), initializer_range=INIT_RANGE)
        config = BlipConfig(text_config=text_config, vision_config=vision_config(initializer_range=INIT_RANGE),
                            projection_dim=32)
        BlipForConditionalGeneration(config).save_pretrained(folder, safe_serialization=True)
        BlipProcessor(image_processor=BlipImageProcessor(size={"height": 32, "width": 32}),
                      tokenizer=tokenizer).save_pretrained(folder)
