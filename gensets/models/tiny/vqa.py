"""Tiny visual question answering models:

    vilt-vqa  transformers ViltForQuestionAnswering + ViltProcessor (answers: config.id2label)
    blip-vqa  transformers BlipForQuestionAnswering + BlipProcessor (generates its answer)
    vlm       transformers LlavaForConditionalGeneration + LlavaProcessor with a chat template, for
              AutoModelForImageTextToText and the `image-text-to-text` pipeline
Tokenizers are built in memory: a BertTokenizer from a small word-piece vocab (ViLT, BLIP; the tiny BLIP
captioner uses it too) and a character-level LlamaTokenizer (LLaVA).
"""

from __future__ import annotations

import string
from pathlib import Path

from gensets.models.tiny import TinyModel, transformer_config, vision_config
from gensets.registry import TINY_MODELS

VQA_ANSWERS = ("yes", "no", "a", "b", "red", "green", "blue", "dog", "cat", "1", "2", "none")
_WORDS = (
    "a an the is are in on of this these that what which who how many color colour image picture photo "
    "answer with one option only or and there it to yes no red green blue yellow black white dog cat car "
    "bird fish tree house person man woman"
).split()
# LLaVA-1.5 style: "USER: <image>\n{question} ASSISTANT:"
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% for c in message['content'] %}{% if c['type'] == 'image' %}{{ '<image>\n' }}"
    "{% elif c['type'] == 'text' %}{{ c['text'] + ' ' }}{% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def bert_tokenizer(extra_specials: tuple[str, ...] = (), **kw):
    """A BertTokenizer over a small vocab: specials, common words, and single characters (also as
    `##` continuations) so that any lowercase ASCII word splits into known pieces."""
    from transformers import BertTokenizer

    chars = string.ascii_lowercase + string.digits + string.punctuation
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *extra_specials]
    tokens += list(
        dict.fromkeys([*_WORDS, *chars, *(f"##{c}" for c in string.ascii_lowercase + string.digits)])
    )
    return BertTokenizer(vocab={t: i for i, t in enumerate(tokens)}, **kw)


def bert_config(vocab_size: int, **kw) -> dict:
    """A tiny BERT text config's arguments (see transformer_config), plus `kw`."""
    return transformer_config(vocab_size=vocab_size, **kw)


@TINY_MODELS.register("vilt-vqa")
class TinyViltVQA(TinyModel):
    loaders = ("vqa",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import ViltConfig, ViltForQuestionAnswering, ViltImageProcessor, ViltProcessor

        tokenizer = bert_tokenizer(model_max_length=40)
        id2label = dict(enumerate(VQA_ANSWERS))
        config = ViltConfig(
            **bert_config(len(tokenizer), max_position_embeddings=40, image_size=32, patch_size=8),
            max_image_length=-1,
            num_labels=len(id2label),
            id2label=id2label,
            label2id={v: k for k, v in id2label.items()},
        )
        ViltForQuestionAnswering(config).save_pretrained(folder, safe_serialization=True)
        image_processor = ViltImageProcessor(size={"shortest_edge": 32}, size_divisor=8)
        ViltProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)


@TINY_MODELS.register("blip-vqa")
class TinyBlipVQA(TinyModel):
    loaders = ("vqa",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import BlipConfig, BlipForQuestionAnswering, BlipImageProcessor, BlipProcessor

        # as Salesforce/blip-vqa-*: a BERT vocab plus [DEC] (decoder start, the bos token); [SEP] ends answers
        tokenizer = bert_tokenizer(("[DEC]",), bos_token="[DEC]", model_max_length=64)
        ids = tokenizer.convert_tokens_to_ids
        text_config = bert_config(
            len(tokenizer),
            max_position_embeddings=64,
            encoder_hidden_size=32,
            bos_token_id=ids("[DEC]"),
            sep_token_id=ids("[SEP]"),
            pad_token_id=ids("[PAD]"),
            eos_token_id=ids("[SEP]"),
        )
        config = BlipConfig(text_config=text_config, vision_config=vision_config(), projection_dim=32)
        BlipForQuestionAnswering(config).save_pretrained(folder, safe_serialization=True)
        image_processor = BlipImageProcessor(size={"height": 32, "width": 32})
        BlipProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)


def llama_char_tokenizer():
    """A character-level LlamaTokenizer (BPE without merges) over printable ASCII, with an <image> token.

    No byte tokens, so a random model generates printable text; other characters are dropped."""
    from transformers import LlamaTokenizer

    specials = ["<unk>", "<s>", "</s>", "<pad>", "<image>"]
    chars = ["▁", "\n", *string.ascii_letters, *string.digits, *string.punctuation]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    return LlamaTokenizer(
        vocab=vocab,
        merges=[],
        pad_token="<pad>",
        add_prefix_space=False,
        model_max_length=512,
        extra_special_tokens={"image_token": "<image>"},
    )


@TINY_MODELS.register("vlm")
class TinyLlava(TinyModel):
    loaders = ("vqa", "caption")
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import (
            CLIPImageProcessor,
            CLIPVisionConfig,
            LlamaConfig,
            LlavaConfig,
            LlavaForConditionalGeneration,
            LlavaProcessor,
        )

        tokenizer = llama_char_tokenizer()
        ids = tokenizer.convert_tokens_to_ids
        vision = CLIPVisionConfig(**vision_config(projection_dim=32))
        image_size, patch = vision.image_size, vision.patch_size
        text = LlamaConfig(
            **transformer_config(vocab_size=len(tokenizer)),
            num_key_value_heads=2,
            max_position_embeddings=512,
            bos_token_id=ids("<s>"),
            eos_token_id=ids("</s>"),
            pad_token_id=ids("<pad>"),
        )
        config = LlavaConfig(
            vision_config=vision,
            text_config=text,
            image_token_index=ids("<image>"),
            image_seq_length=(image_size // patch) ** 2,
            vision_feature_select_strategy="default",
            vision_feature_layer=-2,
        )
        model = LlavaForConditionalGeneration(config)
        model.generation_config.pad_token_id = ids("<pad>")
        model.generation_config.eos_token_id = ids("</s>")
        model.save_pretrained(folder, safe_serialization=True)
        image_processor = CLIPImageProcessor(
            size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
        )
        LlavaProcessor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            patch_size=patch,
            vision_feature_select_strategy="default",
            num_additional_image_tokens=1,
            chat_template=CHAT_TEMPLATE,
        ).save_pretrained(folder)
