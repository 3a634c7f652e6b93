"""A model family is one file: the `toy:` family below, defined in this test file alone (no edit of the package),
is parsed as a spec, loaded by the library's loader and scored by `gensets eval`."""

from __future__ import annotations

import json
import re

import pytest

from gensets.cli import main
from gensets.errors import ModelError
from gensets.models import load_classifier
from gensets.models.classifier import Classifier
from gensets.models.family import ModelFamily
from gensets.models.spec import parse_spec
from gensets.registry import FAMILIES


class ToyClassifier(Classifier):
    """Scores every image the same: its first label highest, then the others in order."""

    kind = "toy"

    def preprocess(self, images):
        import torch

        return torch.zeros(len(images), 1)

    def _forward(self, batch):
        import torch

        return batch @ torch.zeros(1, len(self.label_names)) - torch.arange(len(self.label_names)).float()


def load_toy(spec, *, device, **_):
    import torch

    return ToyClassifier(spec=spec.raw, model_id=f"toy/{spec.name}", revision=spec.revision,
                         label_names=spec.name.split("+"), model=torch.nn.Identity(), device=device)


class ToyAnswers:
    """A VQA model and a captioner: the first label, whatever it is asked."""

    def __init__(self, spec):
        self.spec, self.labels = spec.raw, spec.name.split("+")

    def answer(self, images, questions):
        return [self.labels[0] for _ in questions]


def load_answers(spec, *, allow_pickle, trust_remote_code, device, **_):
    return ToyAnswers(spec)


class Toy(ModelFamily):
    """toy:<label>[+<label>...][@revision]: a classifier over those labels that always answers the first."""

    loaders = {"classifier": load_toy, "vqa": load_answers, "caption": load_answers}

    @classmethod
    def parse(cls, raw, name):
        name, revision = super().parse(raw, name)
        if not re.fullmatch(r"[^+@A-Z]+(\+[^+@A-Z]+)*", name):
            raise ModelError(f"bad model spec {raw!r}: expected toy:<label>[+<label>...]")
        return name, revision


@pytest.fixture
def toy():
    FAMILIES.register("toy", Toy)
    yield
    FAMILIES.unregister("toy")


def test_a_family_from_a_test_file_is_a_spec_and_a_loader(toy):
    s = parse_spec("toy:cat+dog@v1")
    assert (s.kind, s.name, s.revision, s.family) == ("toy", "cat+dog", "v1", Toy)
    with pytest.raises(ModelError, match=r"expected toy:<label>"):
        parse_spec("toy:Cat")
    model = load_classifier("toy:cat+dog", device="cpu")
    assert isinstance(model, ToyClassifier) and model.label_names == ["cat", "dog"]
    from PIL import Image

    assert model.predict([Image.new("RGB", (4, 4))]).argmax(1).tolist() == [0]
    from gensets.models import load_vqa
    from gensets.models.captioner import load_captioner

    for load in (load_vqa, load_captioner):  # the other roles of gensets' loaders, through the family too
        assert load("toy:yes+no", device="cpu").answer([None], ["is it red?"]) == ["yes"]
    with pytest.raises(ModelError, match="not a classifier|is not an image generator"):
        from gensets.models import load_generator

        load_generator("toy:cat")  # the family has no generator loader: refused in one line


def test_an_unregistered_family_is_refused_naming_the_known_ones():
    with pytest.raises(ModelError, match=r"unknown kind 'toy' \(expected one of timm, open_clip, hf, diffusers"):
        parse_spec("toy:cat")


def test_gensets_eval_scores_a_toy_model(toy, small, tmp_path, capsys):
    from gensets.evaluation.data import open_source

    names = open_source(str(small)).splits[0].class_names
    spec = "toy:" + "+".join(names)
    db = tmp_path / "r.duckdb"
    capsys.readouterr()
    code = main(["eval", str(small), "--model", spec, "--db", str(db), "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    (run,) = json.loads(out)
    assert run["protocol"] == "native" and run["n"] > 0 and run["model"] == spec, run
    # every prediction is the toy's: its first label on top (the images are mugs: top-1 0)
    from gensets.evaluation import store

    con = store.connect(db, read_only=True)
    top = con.execute("SELECT DISTINCT top5[1] FROM predictions").fetchall()
    model_id = con.execute("SELECT DISTINCT model_id FROM runs").fetchall()
    con.close()
    assert top == [(0,)] and model_id == [(f"toy/{spec[4:]}",)]
    assert run["model"] == spec and run["protocol"] == "native" and run["n"] > 0
