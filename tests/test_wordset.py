"""Borji (2022) word-set matching of predicted ImageNet label names."""

import subprocess
import sys

import pytest

from gensets.labels import BORJI_CATEGORIES, borji_category_ids, wordset_hit, wordset_targets
from gensets.labels.imagenet import imagenet_names


@pytest.fixture(scope="module")
def names():
    return imagenet_names()


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
    assert [names[i] for i in wordset_targets("rabbit", names)] == ["cottontail rabbit", "Angora rabbit"]
    ids = wordset_targets("rabbit", names, {"rabbit": ["hare"]})
    assert ids == [330, 331, 332]
    assert [names[i] for i in ids] == ["cottontail rabbit", "hare", "Angora rabbit"]


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


EXPECTED = {
    "bagel": ["bagel"],
    "clock": ["analog clock", "digital clock", "wall clock"],
    "elephant": ["Asian elephant", "African bush elephant"],
    "helmet": ["crash helmet", "football helmet"],
    "kite": ["kite (bird of prey)"],
    "mushroom": ["mushroom", "stinkhorn mushroom", "hen of the woods mushroom"],
    "pizza": ["pizza"],
    "pretzel": ["pretzel"],
    "rabbit": ["cottontail rabbit", "hare", "Angora rabbit"],
    "squirrel": ["fox squirrel", "common squirrel monkey"],
    "sunglass": ["sunglasses", "sunglasses"],
    "teddy": ["teddy bear"],
    "tractor": ["tractor"],
    "turtle": ["loggerhead sea turtle", "leatherback sea turtle", "mud turtle", "box turtle"],
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
    assert borji_category_ids("sunglass") == [836, 837]
    assert borji_category_ids("kite") == [21]
    assert borji_category_ids("rabbit") == [330, 331, 332]


def test_category_ids_returns_a_copy():
    borji_category_ids("clock").append(0)
    assert borji_category_ids("clock") == [409, 530, 892]


def test_category_ids_custom_label_names():
    assert borji_category_ids("rabbit", ["hare", "tench", "Angora, Angora rabbit"]) == [0, 2]


def test_category_ids_exact_and_plural_differ_on_plural_names():
    # by hand: "clock" is a word of "wall clock" only; "clocks" and "cuckoo clocks" end in "s" (plural rule);
    # "clockwork" is another word under both rules
    names = ["clocks", "wall clock", "clockwork", "cuckoo clocks"]
    assert borji_category_ids("clock", names) == [1]
    assert borji_category_ids("clock", names, plural=True) == [0, 1, 3]


def test_paper_categories_hit_the_same_imagenet_classes_under_both_rules(names):
    """On ImageNet-1k's CLIP names no Borji category needs the plural rule (sunglass gets 836/837 "sunglasses"
    through its synonym), so the recognition sets' imagenet_ids are the same under both rules."""
    for category in BORJI_CATEGORIES:
        assert borji_category_ids(category) == borji_category_ids(category, plural=True), category


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
