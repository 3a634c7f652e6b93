"""Tiny text models:

    t5    transformers T5ForConditionalGeneration + a word-level fast tokenizer (tokenizer.json) whose
          vocabulary is every word of the packaged GenBench class names and prompt templates, so a class
          name such as "airplane", "British Shorthair" or "737-400" tokenizes without unknown words.
    bert  a text encoder (transformers BertModel from a BertConfig) with the same tokenizer, read by
          gensets.models.text.load_text_encoder (AutoModel) like a Hub BERT.
The tokenizer is built in memory with `tokenizers` (a WordLevel model, lowercase normalizer, whitespace
and punctuation pre-tokenizer, "</s>" appended) and saved as a PreTrainedTokenizerFast; the model and
tokenizer load back through AutoModelForSeq2SeqLM / AutoTokenizer like a Hub T5 (gensets.models.text).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from gensets.models.tiny import TinyModel, transformer_config
from gensets.registry import TINY_MODELS

SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in T5: pad is also the decoder start token
_WORDS = (
    "a an the of in on at with and or is are it its this that photo picture image close up view side "
    "front small large big old new young one two three flying sitting standing parked running lying "
    "sleeping eating near over under through across next to sky blue green red white black brown field "
    "road street water grass tree house city runway airport park room table garden beach snow"
).split()


def vocabulary() -> list[str]:
    """Specials, then every lowercase word and punctuation run of the packaged GenBench datasets."""
    text = resources.files("gensets.data.genbench").joinpath("datasets.json").read_text(encoding="utf-8")
    words = dict.fromkeys(_WORDS)
    for d in json.loads(text)["datasets"].values():
        names = [n for c in d["classes"] for n in ([c] if isinstance(c, str) else c)]
        for s in names + d["templates"]:
            words.update(dict.fromkeys(re.findall(r"\w+|[^\w\s]+", s.replace("{}", " ").lower())))
    return [*SPECIALS, *sorted(words)]


def word_tokenizer(max_length: int = 64):
    """A PreTrainedTokenizerFast over :func:`vocabulary` (unknown words -> <unk>)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", model_max_length=max_length)


@TINY_MODELS.register("t5")
class TinyT5(TinyModel):
    loaders = ("text",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import T5Config, T5ForConditionalGeneration

        tokenizer = word_tokenizer()
        config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=2,
                          decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        T5ForConditionalGeneration(config).save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)


@TINY_MODELS.register("bert")
class TinyBert(TinyModel):
    loaders = ("text-encoder",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        from transformers import BertConfig, BertModel

        tokenizer = word_tokenizer()
        config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=64, pad_token_id=0,
                            **transformer_config())
        BertModel(config).save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
