"""Tiny random visual question answering models, built offline from configs (seed 0), saved with safetensors.

    vilt-vqa  transformers ViltForQuestionAnswering + ViltProcessor (answers: config.id2label)
    blip-vqa  transformers BlipForQuestionAnswering + BlipProcessor (generates its answer)
    vlm       transformers LlavaForConditionalGeneration + LlavaProcessor with a chat template, for
              AutoModelForImageTextToText and the `image-text-to-text` pipeline
Tokenizers are built in memory: a BertTokenizer from a small word-piece vocab (ViLT, BLIP) and a
character-level LlamaTokenizer (LLaVA). Each kind is built once, like tiny.py's
models, under $GENSETS_CACHE/tiny/<kind>-v1 (a temp folder renamed into place).
"""

from __future__ import annotations

import os
import shutil
import string
import tempfile
from pathlib import Path

from gensets.errors import ModelError
from gensets.models.tiny import _BUILD_LOCK, cache_root

VERSION = "v1"
TINY_VLM_KINDS = ("vilt-vqa", "blip-vqa", "vlm")
VQA_ANSWERS = ("yes", "no", "a", "b", "red", "green", "blue", "dog", "cat", "1", "2", "none")
_DONE = ".complete"
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


def tiny_vlm_path(kind: str) -> Path:
    """The folder of tiny VQA model `kind`, built on first use."""
    if kind not in TINY_VLM_KINDS:
        raise ModelError(
            f"model 'tiny:{kind}': unknown tiny VQA model (expected one of {', '.join(TINY_VLM_KINDS)})"
        )
    final = cache_root() / "tiny" / f"{kind}-{VERSION}"
    if (final / _DONE).is_file():
        return final
    with _BUILD_LOCK:  # shared with tiny.py: the global torch RNG is seeded while building
        if (final / _DONE).is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{VERSION}-", dir=final.parent))
        try:
            _build(kind, tmp)
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


def _build(kind: str, folder: Path) -> None:
    import torch

    from gensets.models.hub import quiet_progress

    with torch.random.fork_rng(devices=[]), quiet_progress("transformers"):
        torch.manual_seed(0)
        _BUILDERS[kind](folder)


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


def _tiny_bert(vocab_size: int, **kw) -> dict:
    return dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        **kw,
    )


def _build_vilt(d: Path) -> None:
    from transformers import ViltConfig, ViltForQuestionAnswering, ViltImageProcessor, ViltProcessor

    tokenizer = bert_tokenizer(model_max_length=40)
    id2label = dict(enumerate(VQA_ANSWERS))
    config = ViltConfig(
        **_tiny_bert(len(tokenizer), max_position_embeddings=40, image_size=32, patch_size=8),
        max_image_length=-1,
        num_labels=len(id2label),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    ViltForQuestionAnswering(config).save_pretrained(d, safe_serialization=True)
    image_processor = ViltImageProcessor(size={"shortest_edge": 32}, size_divisor=8)
    ViltProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(d)


def _build_blip(d: Path) -> None:
    from transformers import BlipConfig, BlipForQuestionAnswering, BlipImageProcessor, BlipProcessor

    # as Salesforce/blip-vqa-*: a BERT vocab plus [DEC] (decoder start, the bos token); [SEP] ends answers
    tokenizer = bert_tokenizer(("[DEC]",), bos_token="[DEC]", model_max_length=64)
    ids = tokenizer.convert_tokens_to_ids
    text_config = _tiny_bert(
        len(tokenizer),
        max_position_embeddings=64,
        encoder_hidden_size=32,
        bos_token_id=ids("[DEC]"),
        sep_token_id=ids("[SEP]"),
        pad_token_id=ids("[PAD]"),
        eos_token_id=ids("[SEP]"),
    )
    vision_config = dict(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    config = BlipConfig(text_config=text_config, vision_config=vision_config, projection_dim=32)
    BlipForQuestionAnswering(config).save_pretrained(d, safe_serialization=True)
    image_processor = BlipImageProcessor(size={"height": 32, "width": 32})
    BlipProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(d)


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


def _build_llava(d: Path) -> None:
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
    image_size, patch = 32, 8
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=patch,
        projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
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
    model.save_pretrained(d, safe_serialization=True)
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
    ).save_pretrained(d)


_BUILDERS = {"vilt-vqa": _build_vilt, "blip-vqa": _build_blip, "vlm": _build_llava}
