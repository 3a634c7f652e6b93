"""A zero-shot model's text classifier is computed once and then read from the gensets cache
(gensets.models.text_features), on the real loaders of open_clip and transformers CLIP (tiny models)."""

import os

import pytest
import torch

from gensets.models import text_features
from gensets.models.classifier import load_classifier

LABELS = ["tench", "goldfish", "great white shark"]


def _entries():
    folder = text_features.cache_root() / text_features.FOLDER
    return sorted(folder.glob("*.safetensors")) if folder.is_dir() else []


def _uncached(spec, labels, monkeypatch):
    monkeypatch.setenv("GENSETS_TEXT_CACHE", "0")
    try:
        return load_classifier(spec, labels).text_classifier
    finally:
        monkeypatch.delenv("GENSETS_TEXT_CACHE")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """A cache of this test's own for the text features (the tiny models stay in the suite's)."""
    monkeypatch.setattr(text_features, "cache_root", lambda: tmp_path / "cache")


@pytest.mark.parametrize("spec", ["tiny:clip", "tiny:hf-clip"])
def test_a_second_load_reads_what_the_first_computed_and_a_new_label_list_computes_anew(spec, monkeypatch):
    first = load_classifier(spec, LABELS).text_classifier
    [entry] = _entries()
    assert torch.equal(first, _uncached(spec, LABELS, monkeypatch))  # a miss is the computation itself
    # the second load reads the entry: one written by hand (of the right shape) comes back as it is
    planted = torch.full_like(first, 0.25)
    from safetensors.torch import save

    entry.write_bytes(save({"text_classifier": planted.contiguous()}))
    assert torch.equal(load_classifier(spec, LABELS).text_classifier, planted)
    # another label list, or the same classes in another order, is another entry, computed
    for labels in (LABELS[:2], LABELS[::-1]):
        got = load_classifier(spec, labels).text_classifier
        assert torch.equal(got, _uncached(spec, labels, monkeypatch))
    assert len(_entries()) == 3
    # other templates: another entry too
    other = load_classifier(spec, LABELS, templates=["a sketch of a {}."]).text_classifier
    assert len(_entries()) == 4 and not torch.equal(other, first)


def test_a_damaged_entry_is_computed_again_and_replaced(monkeypatch):
    good = load_classifier("tiny:clip", LABELS).text_classifier
    [entry] = _entries()
    for damage in (b"", b"not safetensors", entry.read_bytes()[:40]):
        entry.write_bytes(damage)
        assert torch.equal(load_classifier("tiny:clip", LABELS).text_classifier, good)
        assert entry.read_bytes() != damage
    # the wrong number of classes (another entry's file put in its place) is not taken either
    from safetensors.torch import save

    entry.write_bytes(save({"text_classifier": torch.zeros(good.shape[0], 7)}))
    assert torch.equal(load_classifier("tiny:clip", LABELS).text_classifier, good)


def test_the_key_names_the_weights_prompts_and_where_they_were_computed(monkeypatch):
    base = dict(kind="open_clip", model_id="m", weights="commit:" + "a" * 40, prompts=[["a photo of a x."]],
                method="m", device="cpu", dtype="torch.float32")
    key = text_features.cache_key(**base)
    for change in ({"weights": "commit:" + "b" * 40}, {"prompts": [["a photo of a y."]]}, {"dtype": "torch.bfloat16"},
                   {"method": "other"}, {"model_id": "n"}):
        assert text_features.cache_key(**{**base, **change}) != key, change
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", os.environ.get("ATEN_CPU_CAPABILITY", "") + "x")
    monkeypatch.setattr(text_features, "_where", lambda device: "cpu:other-kernels")
    assert text_features.cache_key(**base) != key  # computed on other kernels: not the same bytes
    # a tower's own weights stand for an unknown commit: another weight, another digest
    m = torch.nn.Linear(2, 2)
    d = text_features.weights_id(None, m, ())
    with torch.no_grad():
        m.weight[0, 0] += 1
    assert text_features.weights_id(None, m, ()) != d
    assert text_features.weights_id("c" * 40, m, ()) == "commit:" + "c" * 40


def test_the_cache_never_writes_through_a_symlink(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / text_features.FOLDER).symlink_to(target)
    from gensets.errors import GensetsError

    with pytest.raises(GensetsError):
        load_classifier("tiny:clip", LABELS)
    assert list(target.iterdir()) == []
