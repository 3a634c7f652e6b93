"""Text-to-text (seq2seq) models behind one interface: generate(inputs, seeds) -> one text per input.

Used by GenBench's category enhancement (CE): a class name, put into an input template, is expanded into
a sentence. Specs: `hf:<repo or local path>[@rev]` (any AutoModelForSeq2SeqLM: T5, Flan-T5, BART, ...)
or `tiny:t5` (gensets.models.tiny.text). Each input is sampled on its own, under its own seed
(``torch.manual_seed(seed)`` in a forked RNG), so a text depends only on (model, input, seed, settings),
never on the other inputs of the call or on the number of processes.
"""

from __future__ import annotations

from gensets.models import hub, loading
from gensets.models.device import default_device
from gensets.models.spec import parse_spec


class _TextModel:
    """A loaded transformers model and its tokenizer, on its device, in eval mode."""

    def __init__(self, *, spec: str, model_id: str, revision: str | None, model, tokenizer, device: str):
        self.spec = spec
        self.model_id = model_id
        self.revision = revision
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = device

    def __repr__(self) -> str:
        return f"{type(self).__name__}(spec={self.spec!r}, model={type(self.model).__name__})"


def _load(cls, spec: str, auto: str, kind: str, what: str, allow_pickle: bool, device: str | None):
    """``cls`` over transformers' ``auto`` class (e.g. ``AutoModel``) and AutoTokenizer from ``spec`` (``hf:`` or a
    ``tiny:`` model of ``kind``); load errors name ``what``."""
    s = parse_spec(spec)
    device = device or default_device()  # after the spec's grammar is checked; None: this process's GPU under accelerate, else cuda/cpu
    loading.expect(s, "hf", kind, what)
    source = loading.resolve(s, allow_pickle)
    kwargs = source.hub_kwargs()
    src = source.location
    with loading.load_errors(s, f" as {what}"), source.offline(), hub.quiet_progress("transformers"):
        import transformers

        config = transformers.AutoConfig.from_pretrained(src, **kwargs)
        model = getattr(transformers, auto).from_pretrained(src, use_safetensors=None if allow_pickle else True,
                                                            **kwargs)
        tokenizer = transformers.AutoTokenizer.from_pretrained(src, **kwargs)
    return cls(spec=s.raw, model_id=source.model_id, revision=source.commit(config), model=model,
               tokenizer=tokenizer, device=device)


class Text2Text(_TextModel):
    """A loaded seq2seq model and its tokenizer."""

    def generate(self, inputs: list[str], seeds: list[int], *, max_new_tokens: int = 40, do_sample: bool = True,
                 top_p: float = 0.95, temperature: float = 1.0, top_k: int = 0, min_new_tokens: int = 2) -> list[str]:
        """One text per (input, seed): sampled when ``do_sample`` (else greedy, the seed unused); ``top_k`` 0
        keeps every token."""
        import torch

        if len(inputs) != len(seeds):
            raise ValueError(f"generate: {len(inputs)} inputs but {len(seeds)} seeds")
        out = []
        for text, seed in zip(inputs, seeds, strict=True):
            enc = self.tokenizer([text], return_tensors="pt", truncation=True).to(self.device)
            kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, do_sample=do_sample)
            if do_sample:
                kwargs.update(top_p=top_p, temperature=temperature, top_k=top_k)
            with torch.inference_mode(), torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                ids = self.model.generate(**enc, **kwargs)
            out.append(" ".join(self.tokenizer.decode(ids[0], skip_special_tokens=True).split()))
        return out


def load_text2text(spec: str, *, allow_pickle: bool = False, device: str | None = None) -> Text2Text:
    """Load the seq2seq model named by `spec` (`hf:<repo or path>[@rev]` or `tiny:t5`)."""
    return _load(Text2Text, spec, "AutoModelForSeq2SeqLM", "text", "a text-to-text model", allow_pickle, device)


class TextEncoder(_TextModel):
    """A loaded text encoder (BERT-style) and its tokenizer: embed() gives each text's mean token state."""

    def embed(self, texts: list[str]):
        """One vector per text: the last hidden states averaged over its tokens (the attention mask's), float32."""
        import torch

        enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True).to(self.device)
        with torch.inference_mode():
            hidden = self.model(**enc).last_hidden_state.float()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        return ((hidden * mask).sum(1) / mask.sum(1)).cpu()


def load_text_encoder(spec: str, *, allow_pickle: bool = False, device: str | None = None) -> TextEncoder:
    """Load the text encoder named by `spec` (`hf:<repo or path>[@rev]`, any AutoModel, or `tiny:bert`)."""
    return _load(TextEncoder, spec, "AutoModel", "text-encoder", "a text encoder", allow_pickle, device)
