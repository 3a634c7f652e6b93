"""Borji (2022) word-set matching of predicted ImageNet label names."""

import subprocess
import sys

import pytest

from gensets.labels import BORJI_CATEGORIES, borji_category_ids, wordset_hit, wordset_targets
from gensets.labels.imagenet import imagenet_names
from gensets.labels.wordset import (
    EXTRA_SYNONYMS,
    SYNONYMS,
    imagenet_label_words,
    label_name,
    label_words,
    synonyms_of,
)


@pytest.fixture(scope="module")
def names():
    """The ImageNet-1k label names as the paper reads them (the first lemma of each class)."""
    return imagenet_label_words("names")


# -- wordset_hit -------------------------------------------------------------

def test_required_cases():
    assert wordset_hit("clock", ["wall clock"])
    assert not wordset_hit("clock", ["wall"])
    assert not wordset_hit("toilet seat", ["toilet tissue", "seat belt"])
    assert wordset_hit("toilet seat", ["toilet seat"])
    assert wordset_hit("rabbit", ["hare"], {"rabbit": ["hare"]})
    assert not wordset_hit("rabbit", ["hare"])


def test_phrase_does_not_span_the_comma_separated_names_of_one_label():
    label = "toilet tissue, toilet paper, bathroom tissue"  # one timm label, three names
    assert not wordset_hit("paper bathroom", [label])
    assert not wordset_hit("tissue toilet", [label])
    assert wordset_hit("toilet paper", [label]) and wordset_hit("bathroom tissue", [label])
    assert wordset_hit("paper", [label])
    assert wordset_targets("paper bathroom", [label, "paper towel"]) == []


def test_whole_words_only():
    assert not wordset_hit("clock", ["clockwork"])
    assert not wordset_hit("glass", ["hourglass"])
    assert not wordset_hit("cat", ["catamaran", "oystercatcher"])


def test_any_of_the_top_k():
    assert wordset_hit("clock", ["wall", "chair", "digital clock"])
    assert not wordset_hit("clock", [])


def test_case_insensitive():
    assert wordset_hit("CLOCK", ["Wall Clock"])
    assert wordset_hit("rabbit", ["Angora rabbit"])
    assert wordset_hit("Rabbit", ["HARE"], {"rabbit": ["Hare"]})


@pytest.mark.parametrize("name", ["wall,clock", "wall-clock", "wall_clock", "wall/clock", "wall (clock)",
                                  "wall  clock", "clock.", "wall\tclock"])
def test_separators(name):
    assert wordset_hit("clock", [name])


def test_apostrophe_stays_in_word():
    assert wordset_hit("slipper", ["yellow lady's slipper"])
    assert not wordset_hit("lady", ["yellow lady's slipper"])


@pytest.mark.parametrize("target, name", [("sunglass", "sunglasses"), ("sunglasses", "sunglass"),
                                          ("clock", "clocks"), ("bus", "buses"), ("buses", "school bus"),
                                          ("parallel bar", "parallel bars")])
def test_trailing_s_or_es_counts_only_under_the_plural_rule(target, name):
    """The paper's rule (the default): the target is exactly one of the words; wordset-plural's rule: a trailing
    "s" / "es" is optional on either side."""
    assert not wordset_hit(target, [name])
    assert wordset_hit(target, [name], plural=True)
    assert wordset_targets(target, ["wall", name]) == [] and wordset_targets(target, ["wall", name], plural=True) == [1]


def test_exact_rule_still_matches_the_same_word():
    assert wordset_hit("sunglass", ["sunglass"]) and wordset_hit("bus", ["school bus"])
    assert wordset_hit("sunglasses", ["sunglasses, dark glasses, shades"])


def test_plural_rule_is_only_s_or_es():
    assert not wordset_hit("sunglass", ["sunglassy"], plural=True)
    assert not wordset_hit("clock", ["clockss"], plural=True)
    assert not wordset_hit("mouse", ["mice"], plural=True)


def test_phrase_is_contiguous_within_one_name():
    assert wordset_hit("toilet seat", ["a toilet seat cover"])
    assert wordset_hit("toilet-seat", ["toilet seat"])
    assert not wordset_hit("toilet seats", ["toilet seat"])
    assert wordset_hit("toilet seats", ["toilet seat"], plural=True)
    assert not wordset_hit("toilet seat", ["toilet paper seat"])
    assert not wordset_hit("toilet seat", ["seat toilet"])
    assert not wordset_hit("wall clock", ["clock"])


def test_synonyms():
    syn = {"rabbit": ["hare"], "teddy": "teddy bear"}  # a bare string is one synonym, not its letters
    assert wordset_hit("teddy", ["teddy bear"], syn)
    assert not wordset_hit("teddy", ["e"], syn)
    assert not wordset_hit("hare", ["cottontail rabbit"], syn)  # not symmetric
    assert not wordset_hit("clock", ["hare"], syn)              # only synonyms[target] apply
    assert wordset_hit("rabbit", ["arctic hare"], syn)          # synonyms follow the same rules
    assert not wordset_hit("rabbit", ["arctic hares"], syn)
    assert wordset_hit("rabbit", ["arctic hares"], syn, plural=True)


def test_empty_target_rejected():
    with pytest.raises(ValueError):
        wordset_hit(" , ", ["clock"])


# -- wordset_targets ---------------------------------------------------------

def test_targets_clock(names):
    ids = wordset_targets("clock", names)
    assert [names[i] for i in ids] == ["analog clock", "digital clock", "wall clock"]
    assert ids == [409, 530, 892]


def test_targets_rabbit(names):
    assert [names[i] for i in wordset_targets("rabbit", names)] == ["wood rabbit"]
    ids = wordset_targets("rabbit", names, {"rabbit": ["hare"]})
    assert ids == [330, 331]
    assert [names[i] for i in ids] == ["wood rabbit", "hare"]
    clip = imagenet_names()  # CLIP's names: "cottontail rabbit", "Angora rabbit"
    assert wordset_targets("rabbit", clip, {"rabbit": ["hare"]}) == [330, 331, 332]


def test_targets_phrase(names):
    assert [names[i] for i in wordset_targets("toilet seat", names)] == ["toilet seat"]
    assert wordset_targets("no such thing", names) == []


@pytest.mark.parametrize("target", ["clock", "toilet seat", "bear", "glass", "rabbit"])
def test_targets_agree_with_hit(names, target):
    syn = {"rabbit": ["hare"]}
    ids = set(wordset_targets(target, names, syn))
    for i, name in enumerate(names):
        assert wordset_hit(target, [name], syn) == (i in ids), name


# -- Borji categories ----------------------------------------------------------

def test_categories_shape():
    assert {"bagel", "clock", "elephant", "helmet", "kite", "mushroom", "pizza", "pretzel", "rabbit",
            "squirrel", "sunglass", "teddy", "tractor", "turtle", "umbrella", "vase"} <= set(BORJI_CATEGORIES)
    for spec in BORJI_CATEGORIES.values():
        assert spec["words"] and all(isinstance(w, str) for w in spec["words"])
        assert isinstance(spec["synonyms"], list)


# the paper's rule (Borji 2022, Sec. 2): the words of each label's NAME ("wall clock", "toilet seat", "pick")
EXPECTED = {
    "bagel": ["bagel"],
    "clock": ["analog clock", "digital clock", "wall clock"],
    "elephant": ["Indian elephant", "African elephant"],
    "helmet": ["crash helmet", "football helmet"],
    "kite": ["kite"],
    "mushroom": ["mushroom"],
    "pizza": ["pizza"],
    "pretzel": ["pretzel"],
    "rabbit": ["wood rabbit", "hare"],
    "squirrel": ["fox squirrel", "squirrel monkey"],
    "sunglass": ["sunglass"],
    "teddy": ["teddy"],
    "tractor": ["tractor"],
    "turtle": ["leatherback turtle", "mud turtle", "box turtle"],
    "umbrella": ["umbrella"],
    "vase": ["vase"],
}


@pytest.mark.parametrize("category", sorted(EXPECTED))
def test_category_ids_on_imagenet(names, category):
    ids = borji_category_ids(category)
    assert ids == sorted(ids)
    assert [names[i] for i in ids] == EXPECTED[category]


def test_category_ids_spot_indices():
    assert borji_category_ids("clock") == [409, 530, 892]
    assert borji_category_ids("sunglass") == [836]
    assert borji_category_ids("kite") == [21]
    assert borji_category_ids("rabbit") == [330, 331]


def test_label_names_are_the_papers_examples():
    """The paper's examples are label names: 714 is "pick, plectrum, plectron" as a lemma list, "pick" as a name."""
    names, lemmas = imagenet_label_words("names"), imagenet_label_words("lemmas")
    assert (names[714], names[892], names[861], names[33]) == ("pick", "wall clock", "toilet seat", "loggerhead")
    assert lemmas[714] == "pick, plectrum, plectron" and lemmas[33] == "loggerhead, loggerhead turtle, Caretta caretta"
    assert label_name("sunglasses, dark glasses, shades") == "sunglasses" and label_name("hare") == "hare"
    assert label_words(["a, b", "c"], "lemmas") == ["a, b", "c"] and label_words(["a, b", "c"]) == ["a", "c"]
    with pytest.raises(ValueError, match="words must be one of"):
        label_words(["a"], "synsets")


def test_loggerhead_turtle_names_vs_lemmas():
    """By hand: 33 "loggerhead, loggerhead turtle, Caretta caretta": its name "loggerhead" has no word "turtle"
    (the paper's rule: a miss), its lemma list has "loggerhead turtle" (wordset-lemmas: a hit)."""
    label = "loggerhead, loggerhead turtle, Caretta caretta"
    assert not wordset_hit("turtle", [label_name(label)]) and wordset_hit("turtle", [label])
    assert borji_category_ids("turtle") == [34, 35, 37]
    assert borji_category_ids("turtle", words="lemmas") == [33, 34, 35, 37]
    # 332 "Angora, Angora rabbit" likewise: rabbit hits it by its lemmas only
    assert borji_category_ids("rabbit", words="lemmas") == [330, 331, 332]


def test_sunglasses_paper_vs_extra_synonyms():
    """By hand: 836 "sunglass", 837 "sunglasses, dark glasses, shades". The paper's rule: "sunglass" is a word of
    836 only (exact words, rabbit ~ hare the only synonym). gensets' extra synonym sunglass -> sunglasses (a
    named variant) adds 837, by names or lemmas; so does the plural rule."""
    assert SYNONYMS == {"rabbit": ["hare"]} and "sunglass" in EXTRA_SYNONYMS
    assert synonyms_of() == {"rabbit": ["hare"]}
    assert synonyms_of(extra=True)["sunglass"] == ["sunglasses"]
    assert borji_category_ids("sunglass") == [836] == borji_category_ids("sunglass", words="lemmas")
    assert borji_category_ids("sunglass", extra_synonyms=True) == [836, 837]
    assert borji_category_ids("sunglass", words="lemmas", extra_synonyms=True) == [836, 837]
    assert borji_category_ids("sunglass", plural=True) == [836, 837]
    assert not wordset_hit("sunglass", ["sunglasses"], synonyms_of())
    assert wordset_hit("sunglass", ["sunglasses"], synonyms_of(extra=True))


def test_clip_names_are_not_the_label_names(names):
    """CLIP's readable names (zero-shot) are not the names the paper's classifiers give: 33 "loggerhead sea
    turtle" there; the word rule reads the classifiers' names."""
    assert imagenet_names()[33] == "loggerhead sea turtle" and names[33] == "loggerhead"


def test_category_ids_returns_a_copy():
    borji_category_ids("clock").append(0)
    assert borji_category_ids("clock") == [409, 530, 892]


def test_category_ids_custom_label_names():
    # the paper's rule reads each label's first name: "Angora, Angora rabbit" is "Angora"
    assert borji_category_ids("rabbit", ["hare", "tench", "Angora, Angora rabbit"]) == [0]
    assert borji_category_ids("rabbit", ["hare", "tench", "Angora, Angora rabbit"], words="lemmas") == [0, 2]


def test_category_ids_exact_and_plural_differ_on_plural_names():
    # by hand: "clock" is a word of "wall clock" only; "clocks" and "cuckoo clocks" end in "s" (plural rule);
    # "clockwork" is another word under both rules
    names = ["clocks", "wall clock", "clockwork", "cuckoo clocks"]
    assert borji_category_ids("clock", names) == [1]
    assert borji_category_ids("clock", names, plural=True) == [0, 1, 3]


def test_only_sunglass_needs_the_plural_rule_on_imagenet(names):
    """On ImageNet-1k's label names only the sunglass category hits other classes under the plural rule (837
    "sunglasses"), so the other categories' imagenet_ids are the same under both rules."""
    differ = [c for c in BORJI_CATEGORIES if borji_category_ids(c) != borji_category_ids(c, plural=True)]
    assert differ == ["sunglass"]


def test_kite_documented():
    assert "bird of prey" in BORJI_CATEGORIES["kite"]["note"]


def test_unknown_category():
    with pytest.raises(KeyError):
        borji_category_ids("toaster oven")


def test_package_import_is_light():
    code = ("import sys, gensets.labels; "
            "bad = [m for m in ('torch', 'timm', 'transformers', 'numpy') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
