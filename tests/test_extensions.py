"""Every extension point takes one new file: a builder, a prompt strategy and an evaluation protocol defined
here, in the test file alone (no edit of the package), run through `gensets build`, `finalize` and `eval`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import pytest

from gensets.builders import base
from gensets.builders.common import GeneratorConfig, ImageConfig, Unit
from gensets.cli import main
from gensets.evaluation.protocols.base import ClassifierProtocol
from gensets.records import Sample, content_id, derive_seed, slug
from gensets.registry import BUILDERS, PROTOCOLS, STRATEGIES

from .conftest import ROOT


@dataclass(frozen=True)
class ToyConfig:
    builder: Literal["toy"]
    generator: GeneratorConfig
    words: tuple[str, ...] = ("red", "blue")
    name: str = "toy"
    pretty_name: str = "A toy builder"
    license: str = "cc0-1.0"
    image: ImageConfig = ImageConfig(format="png")
    shard_size: int = 100


class ToyBuilder(base.Builder):
    """One image per word, from "a photo of something {word}", published in one config per word's length."""

    description = "A toy builder defined in a test file."
    Config = ToyConfig
    fields = (("word", "string"),)

    def plan(self, cfg, stage=None, workspace=None):
        return [Unit(content_id({"word": w, "generator": cfg.generator.model}), {"word": w}) for w in cfg.words]

    def config_names(self, cfg):
        return sorted({f"len{len(w)}" for w in cfg.words})

    def class_names(self, cfg):
        return list(cfg.words)

    def run_unit(self, unit, ctx, build_id):
        w, g = unit.payload["word"], ctx.cfg.generator
        prompt, seed = f"a photo of something {w}", derive_seed("toy", w)
        (image,), _, (texts,) = base.generate_encoded(ctx.generator, g, ctx.cfg.image, [prompt], [seed])
        meta = self.provenance(key=slug(w), build=build_id, unit=unit.id, config=f"len{len(w)}", label=w,
                               label_index=ctx.cfg.words.index(w), prompt=prompt, seed=seed, word=w.upper(),
                               kept=True, **texts)
        return [Sample(slug(w), image, ctx.cfg.image.format, ctx.cfg.words.index(w), meta)]


class Shouted(STRATEGIES.get("ST")):
    """A GenBench strategy: the simple template with the class name in capitals."""

    description = "the simple template, shouted"

    def pool(self, cfg, name, files=None):
        return {"templates": [cfg.simple_template + "!"]}

    def shot(self, p, i, base_seed, row, references=None):
        super().shot(p, i, base_seed, row, references)
        row["prompt"] = row["prompt"].upper()


class FirstLetter(ClassifierProtocol):
    """An evaluation protocol: a prediction counts when its label starts with the class's first letter."""

    def targets(self, record):
        letter = self.split.class_names[int(record["target"])][0]
        return [i for i, n in enumerate(self.model.label_names) if n.lower().startswith(letter)]


@pytest.fixture
def registered():
    BUILDERS.register("toy", ToyBuilder)
    STRATEGIES.register("XX", Shouted)
    PROTOCOLS.register("first-letter", FirstLetter)
    yield
    BUILDERS.unregister("toy")
    STRATEGIES.unregister("XX")
    PROTOCOLS.unregister("first-letter")


def test_a_builder_from_a_test_file_builds_finalizes_and_loads(registered, tmp_path, capsys):
    import datasets

    config = tmp_path / "toy.yaml"
    config.write_text("builder: toy\ngenerator: {model: tiny:sd, steps: 2, width: 64, height: 64}\n"
                      "words: [red, blue, green]\n")
    ws = tmp_path / "ws"
    assert main(["build", str(config), "--out", str(ws), "--quiet"]) == 0
    assert main(["finalize", str(ws)]) == 0  # no review step: every image is accepted
    ds = datasets.load_dataset(str(ws / "dataset"), "len4", split="test")
    assert [r["json"]["word"] for r in ds] == ["BLUE"]
    assert ds.features["cls"].names == ["red", "blue", "green"] and ds[0]["cls"] == 1
    # the declared provenance is the common fields plus the builder's own, nothing of the other builders
    fields = set(ds.features["json"])
    assert "word" in fields and "prompt" in fields and not fields & {"strategy", "surrogates", "questions"}
    readme = (ws / "dataset" / "README.md").read_text()
    assert "A toy builder defined in a test file." in readme and "config_name: len3" in readme
    assert main(["verify", str(ws / "dataset")]) == 0

    # ... and a protocol from this file scores it: the CLI offers it, its targets are what it says
    capsys.readouterr()
    db = tmp_path / "results.duckdb"
    assert main(["eval", str(ws), "--model", "tiny:resnet", "--protocol", "first-letter", "--db", str(db),
                 "--json", "--quiet"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert {(r["config"], r["protocol"], r["n"]) for r in runs} == {("len3", "first-letter", 1),
                                                                    ("len4", "first-letter", 1),
                                                                    ("len5", "first-letter", 1)}
    from gensets.evaluation import store
    from gensets.models import load_classifier

    labels = load_classifier("tiny:resnet").label_names
    con = store.connect(db, read_only=True)
    rows = con.execute("SELECT key, target_ids, top5, correct5 FROM predictions ORDER BY key").fetchall()
    con.close()
    for key, target_ids, top5, correct5 in rows:
        assert target_ids == [i for i, n in enumerate(labels) if n.lower().startswith(key[0])]
        assert correct5 == bool(set(top5) & set(target_ids))


def test_a_strategy_from_a_test_file_builds_as_a_genbench_config(registered, tmp_path):
    ws = tmp_path / "gb"
    assert main(["build", str(ROOT / "configs" / "genbench.smoke.yaml"), "--out", str(ws), "--quiet",
                 "--set", "strategies=[ST, XX]", "--set", "shots=1", "--set", "classes=[cat]"]) == 0
    assert main(["finalize", str(ws)]) == 0
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    assert manifest["counts"] == {"cifar-10-st": 1, "cifar-10-xx": 1}
    from gensets.shards import iter_shard

    metas = [json.loads(d["json"]) for s in manifest["shards"] for d in iter_shard(ws / "dataset" / s["path"])]
    assert {m["strategy"]: m["prompt"] for m in metas} == {"ST": "cat", "XX": "CAT!"}  # ST: the bare name
    assert "the simple template, shouted" in (ws / "dataset" / "README.md").read_text()


def test_an_unregistered_strategy_is_refused_in_one_line(tmp_path, capsys):
    code = main(["build", str(ROOT / "configs" / "genbench.smoke.yaml"), "--out", str(tmp_path / "gb"),
                 "--set", "strategies=[XX]"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "strategies[0]: expected one of 'ST', 'DT'" in err
