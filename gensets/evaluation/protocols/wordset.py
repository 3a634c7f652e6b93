"""``wordset`` (Borji 2022): a prediction hits when the target word, or one of its synonyms, is one of the
words of the predicted label name (the rules of :mod:`gensets.labels.wordset`).

- ``wordset`` (default) is the paper's rule (Borji 2022, Sec. 2): the words of each predicted label's NAME (its
  examples "wall clock", "toilet seat", "pick": the first name of a model's lemma-list label), the target
  exactly one of them, and rabbit ~ hare the only synonym.
- ``wordset-plural`` (gensets' lenient reading, a named option): the same, but a trailing "s" / "es" is optional
  on either side ("sunglass" hits "sunglasses", "clock" hits "clocks").
- ``wordset-lemmas`` (a named option): the words of the label's whole WordNet lemma list ("loggerhead, loggerhead
  turtle, Caretta caretta" is hit by "turtle"), the paper's synonyms.
- ``wordset-gensets`` (gensets' reading before issue #24, a named option): the lemma lists and gensets' extra
  synonyms (sunglass -> sunglasses, teddy -> teddy bear).

Every variant also counts the dataset's own synonyms of a category (a sample's ``json.synonyms``). The run row's
protocol names the variant.
"""

from __future__ import annotations

from ...labels.names import readable
from ...labels.wordset import label_words, synonyms_of, wordset_targets
from ...registry import PROTOCOLS
from .base import ClassifierProtocol, class_names_of


class WordSet(ClassifierProtocol):
    plural = False
    words = "names"  # the paper's label names, or "lemmas"
    extra_synonyms = False  # gensets' EXTRA_SYNONYMS beside the paper's rabbit ~ hare

    def __init__(self, model, split, **kw):
        super().__init__(model, split, **kw)

        self.names = class_names_of(split, self.name)
        self.synonyms = synonyms_of(self.extra_synonyms)
        self.labels = label_words(self.model.label_names, self.words)
        self._targets: dict[int, list[int]] = {}

    def targets(self, record):
        t = record["target"]
        if t not in self._targets:
            word = readable(self.names[int(t)])
            syn = dict(self.synonyms)  # and the dataset's own synonyms of the label (json.synonyms)
            syn[word] = [*syn.get(word, []), *(record["meta"].get("synonyms") or [])]
            self._targets[t] = wordset_targets(word, self.labels, syn, plural=self.plural)
        return self._targets[t]


@PROTOCOLS.register("wordset")
class WordSetExact(WordSet):
    """wordset (Borji 2022), the paper's rule: the target word (or rabbit ~ hare) is exactly one of the words of
    the predicted label's name."""


@PROTOCOLS.register("wordset-plural")
class WordSetPlural(WordSet):
    """wordset, plural-lenient (gensets' reading): as the paper's rule, a trailing "s" / "es" optional on either
    side ("sunglass" hits "sunglasses")."""

    plural = True


@PROTOCOLS.register("wordset-lemmas")
class WordSetLemmas(WordSet):
    """wordset over WordNet lemmas: the words of the label's whole lemma list ("loggerhead turtle" is hit by
    "turtle"), the paper's synonyms."""

    words = "lemmas"


@PROTOCOLS.register("wordset-gensets")
class WordSetGensets(WordSet):
    """wordset as gensets first read it: the lemma lists and gensets' extra synonyms (sunglass -> sunglasses,
    teddy -> teddy bear)."""

    words = "lemmas"
    extra_synonyms = True
