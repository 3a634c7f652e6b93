"""A tiny VLM whose answer is known: ``vlm-chair``, the tiny LLaVA of :mod:`gensets.models.tiny.vqa` (same
config, processor and chat template, saved the same way and loaded through the same ``from_pretrained`` path)
with three sets of weights fixed at build time so that greedy decoding spells :data:`ANSWER` and stops:

- every decoder layer's output projections (attention ``o_proj``, MLP ``down_proj``) are zero, so the last
  hidden state is the current token's embedding (the image and the question do not change the answer);
- the embedding of ``:`` (the last prompt token of both the chat template's and LLaVA-1.5's ``ASSISTANT:``) and of
  each letter of the answer is a unit vector of its own;
- the LM head maps each of those vectors to the next token: ``:`` -> ``c``, ``c`` -> ``h``, ... ``r`` -> ``</s>``.

So the answer is "chair" for every image and every question, at any temperature that is not huge. It is the
smoke stand-in for LLaVa in ``gensets reproduce imagenet-d-table --smoke``, whose classes are backpack, chair and
mug: a two-way question is TRUE when the image is a chair, FALSE when chair is its wrong option and left out
otherwise (the authors' TRUE / (TRUE + FALSE)), so the row has a number a test can count by hand. The letters of
the answer must not repeat (each letter has one successor).
"""

from __future__ import annotations

from pathlib import Path

from gensets.models.tiny import TinyModel
from gensets.models.tiny.vqa import TinyLlava, llama_char_tokenizer
from gensets.registry import TINY_MODELS

ANSWER = "chair"
_SCALE = 20.0


@TINY_MODELS.register("vlm-chair")
class TinyLlavaChair(TinyModel):
    loaders = ("vqa",)
    quiet = ("transformers",)

    @staticmethod
    def build(folder: Path) -> None:
        import torch
        from transformers import LlavaForConditionalGeneration

        assert len(set(ANSWER)) == len(ANSWER), "each letter of the answer has one successor"
        TinyLlava.build(folder)
        model = LlavaForConditionalGeneration.from_pretrained(folder)
        ids = llama_char_tokenizer().convert_tokens_to_ids
        chain = [ids(":"), *(ids(c) for c in ANSWER), ids("</s>")]
        embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("o_proj.weight", "down_proj.weight")) and "language_model" in name:
                    p.zero_()
            for k, (token, successor) in enumerate(zip(chain[:-1], chain[1:], strict=True)):
                embed[token] = 0.0
                embed[token, k] = 1.0
                head[:, k] = 0.0
                head[successor, k] = _SCALE
        model.save_pretrained(folder, safe_serialization=True)
