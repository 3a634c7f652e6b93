"""``wordset`` (Borji 2022): a prediction hits when the target word, or one of its synonyms, is one of the
words of the predicted label name (the rules of :mod:`gensets.labels.wordset`).

- ``wordset`` (default) is the paper's rule: the target must be exactly one of the label's words.
- ``wordset-plural`` (gensets' lenient reading, a named option): a trailing "s" / "es" is optional on either
  side ("sunglass" hits "sunglasses", "clock" hits "clocks").

The run row's protocol names the variant.
"""

from __future__ import annotations

from ...labels.names import readable
from ...registry import PROTOCOLS
from .base import ClassifierProtocol, class_names_of


class WordSet(ClassifierProtocol):
    plural = False

    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)
        from ...labels.wordset import SYNONYMS

        self.names = class_names_of(split, self.name)
        self.synonyms = SYNONYMS
        self._targets: dict[int, list[int]] = {}

    def targets(self, record):
        from ...labels.wordset import wordset_targets

        t = record["target"]
        if t not in self._targets:
            word = readable(self.names[int(t)])
            syn = dict(self.synonyms)  # and the dataset's own synonyms of the label (json.synonyms)
            syn[word] = [*syn.get(word, []), *(record["meta"].get("synonyms") or [])]
            self._targets[t] = wordset_targets(word, self.model.label_names, syn, plural=self.plural)
        return self._targets[t]


@PROTOCOLS.register("wordset")
class WordSetExact(WordSet):
    plural = False


@PROTOCOLS.register("wordset-plural")
class WordSetPlural(WordSet):
    plural = True
