"""A tiny random text-to-text (seq2seq) model, built offline from a config (seed 0), saved with safetensors.

    t5  transformers T5ForConditionalGeneration + a word-level fast tokenizer (tokenizer.json) whose
        vocabulary is every word of the packaged GenBench class names and prompt templates, so a class
        name such as "airplane", "British Shorthair" or "737-400" tokenizes without unknown words.
The tokenizer is built in memory with `tokenizers` (a WordLevel model, lowercase normalizer, whitespace
and punctuation pre-tokenizer, "</s>" appended) and saved as a PreTrainedTokenizerFast; the model and
tokenizer load back through AutoModelForSeq2SeqLM / AutoTokenizer like a Hub T5 (gensets.models.text).
Built once under $GENSETS_CACHE/tiny/<kind>-v1, in a temp folder renamed into place (as tiny.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from gensets.errors import ModelError
from gensets.models.tiny import _BUILD_LOCK, cache_root

VERSION = "v1"
TINY_TEXT_KINDS = ("t5",)
SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 as in T5: pad is also the decoder start token
_WORDS = (
    "a an the of in on at with and or is are it its this that photo picture image close up view side "
    "front small large big old new young one two three flying sitting standing parked running lying "
    "sleeping eating near over under through across next to sky blue green red white black brown field "
    "road street water grass tree house city runway airport park room table garden beach snow"
).split()
_DONE = ".complete"


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


def tiny_text_path(kind: str) -> Path:
    """The folder of tiny text model `kind`, built on first use."""
    if kind not in TINY_TEXT_KINDS:
        raise ModelError(f"model 'tiny:{kind}': unknown tiny text model (expected one of {', '.join(TINY_TEXT_KINDS)})")
    final = cache_root() / "tiny" / f"{kind}-{VERSION}"
    if (final / _DONE).is_file():
        return final
    with _BUILD_LOCK:  # shared with tiny.py: the global torch RNG is seeded while building
        if (final / _DONE).is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{VERSION}-", dir=final.parent))
        try:
            _build_t5(tmp)
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


def _build_t5(d: Path) -> None:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from gensets.models.hub import quiet_progress

    tokenizer = word_tokenizer()
    config = T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=2,
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    with torch.random.fork_rng(devices=[]), quiet_progress("transformers"):
        torch.manual_seed(0)
        T5ForConditionalGeneration(config).save_pretrained(d, safe_serialization=True)
    tokenizer.save_pretrained(d)
