"""Config loading: every error is one line naming the file, the line and the key."""

import textwrap

import pytest

from gensets.config import fingerprint
from gensets.errors import ConfigError
from gensets.papers.imagenet_d.builder import plan, unit_prompts
from gensets.workspace import load_build_config

from .conftest import ROOT, SMOKE, run_cli

GOOD = """\
builder: imagenet-d
classes: [backpack, mug]
nuisances:
  texture: {limit: 2}
generator:
  model: tiny:sd
  steps: 2
"""


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_generator_speed_settings_validate_and_default(tmp_path):
    _, cfg = load_build_config(write(tmp_path, GOOD + "  batching: per-image\n  attention: eager\n  compile: true\n"
                                                 "  channels_last: true\n  dtype: bfloat16\n"))
    g = cfg.generator
    assert (g.batching, g.attention, g.compile, g.channels_last, g.dtype) == ("per-image", "eager", True, True,
                                                                             "bfloat16")
    _, cfg = load_build_config(write(tmp_path, GOOD))
    g = cfg.generator
    assert (g.batching, g.attention, g.compile, g.channels_last, g.dtype) == ("batched", "sdpa", False, False,
                                                                             "float32")


def test_batch_plan_is_a_pure_split_of_the_unit():
    from gensets.builders.common import GeneratorConfig, batch_plan

    # 10 images in calls of 4: [0-3], [4-7], [8-9]; the short last call is not padded
    assert [list(r) for r in batch_plan(10, 4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [list(r) for r in batch_plan(3, 8)] == [[0, 1, 2]]
    assert [list(r) for r in batch_plan(3, 8, "per-image")] == [[0], [1], [2]]
    assert batch_plan(0, 4) == []

    # GeneratorConfig.batches is the same split; provenance per image: tests/test_imagenet_d.py
    g = GeneratorConfig(model="tiny:sd", batch_size=4, batching="per-image")
    assert g.batches(2) == batch_plan(2, 4, "per-image") == [range(0, 1), range(1, 2)]


def test_good_config_resolves_nuisances_and_classes(tmp_path):
    builder, cfg = load_build_config(write(tmp_path, GOOD))
    assert builder.name == "imagenet-d"
    assert cfg.classes == ("backpack", "mug")
    assert cfg.nuisances["texture"].names == ("blotchy", "dotted")
    assert cfg.generator.steps == 2 and cfg.generator.guidance == 7.5
    assert cfg.filter.top_k == 1 and cfg.filter.min_failures is None


@pytest.mark.parametrize("text, where", [
    (GOOD + "colour: red\n", ":8: colour: unknown key"),
    (GOOD.replace("steps: 2", "steps: many"), ":7: generator.steps: expected int, got str 'many'"),
    (GOOD.replace("classes: [backpack, mug]", "classes: [backpack, unicorn]"), ":2: classes: unknown class 'unicorn'"),
    (GOOD.replace("{limit: 2}", "{source: nowhere.csv}"), ":4: nuisances.texture.source: data file not found"),
    (GOOD.replace("texture:", "weather:"), ":3: nuisances: unknown nuisance kind 'weather'"),
    (GOOD.replace("model: tiny:sd", "model: magic:thing"), ":6: generator.model: "),
    (GOOD.replace("  model: tiny:sd\n", ""), ":5: generator.model: required key is missing"),
    (GOOD + "  batching: sometimes\n", ":8: generator.batching: expected one of 'batched', 'per-image'"),
    (GOOD + "  attention: flash\n", ":8: generator.attention: expected one of 'sdpa', 'eager', got str 'flash'"),
    (GOOD + "  compile: max\n", ":8: generator.compile: expected bool, got str 'max'"),
    (GOOD + "  channels_last: 1\n", ":8: generator.channels_last: expected bool"),
    (GOOD + "  dtype: float64\n", ":8: generator.dtype: expected one of 'float32', 'float16', 'bfloat16'"),
    ("builder: imagenet-x\n", ":1: builder: unknown builder 'imagenet-x'"),
    ("builder: [imagenet-d\n", "invalid YAML"),
])
def test_bad_config_names_file_line_and_key(tmp_path, text, where):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_build_config(p)
    msg = str(e.value)
    assert msg.startswith(str(p)), msg
    assert where in msg, msg
    assert "\n" not in msg


def test_user_nuisance_file_relative_to_config(tmp_path):
    (tmp_path / "mine.txt").write_text("# my backgrounds\nmoon surface\nunderwater cave\n")
    _, cfg = load_build_config(write(tmp_path, GOOD.replace("texture: {limit: 2}", "background: {source: mine.txt}")))
    assert cfg.nuisances["background"].names == ("moon surface", "underwater cave")


def test_plan_is_deterministic_and_content_addressed(tmp_path):
    _, cfg = load_build_config(SMOKE)
    a, b = plan(cfg), plan(cfg)
    assert [u.id for u in a] == [u.id for u in b]
    assert len({u.id for u in a}) == len(a)
    rows = [r for u in a for r in unit_prompts(u)]
    keys = [r["key"] for r in rows]
    assert len(set(keys)) == len(keys) and not any("." in k for k in keys)
    assert len(rows) == 3 * (3 + 2 + 2) * 2
    # seeds depend on content only: a different unit size gives the same seed per image
    _, cfg2 = load_build_config(SMOKE)
    from dataclasses import replace
    other = {r["key"]: r["seed"] for u in plan(replace(cfg2, unit_size=1)) for r in unit_prompts(u)}
    assert other == {r["key"]: r["seed"] for r in rows}
    bg = next(r for r in rows if r["key"].startswith("background_backpack_street"))
    assert bg["prompt"] == "a photo of a backpack in the street"
    assert fingerprint(cfg) == fingerprint(cfg2)


def test_frozen_config_round_trips(tmp_path):
    from gensets.workspace import Workspace

    builder, cfg = load_build_config(SMOKE)
    ws = Workspace.create(tmp_path / "ws", builder, cfg)
    _, again = ws.load()
    assert fingerprint(again) == fingerprint(cfg)
    # another config into the same workspace is refused
    _, other = load_build_config(write(tmp_path, GOOD))
    with pytest.raises(Exception, match="holds another build"):
        Workspace.create(tmp_path / "ws", builder, other)


@pytest.mark.parametrize("text, needle", [
    (GOOD + "colour: red\n", "colour: unknown key"),
    (GOOD.replace("steps: 2", "steps: many"), "generator.steps: expected int"),
    (GOOD.replace("{limit: 2}", "{source: nowhere.csv}"), "data file not found"),
    (GOOD.replace("model: tiny:sd", "model: magic:thing"), "magic:thing"),
])
def test_cli_bad_config_one_line_exit_2(tmp_path, text, needle):
    p = write(tmp_path, text)
    r = run_cli("build", p, "--out", tmp_path / "ws")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and str(p) in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("fname, data, why", [
    ("bg.csv", b"title\nstreet\n", "expected a CSV with a 'name' column"),
    ("bg.csv", b"", "expected a CSV with a 'name' column"),
    ("bg.txt", b"street\n\xff\xfe caf\xe9\n", "not UTF-8 text"),
])
def test_cli_malformed_nuisance_file_one_line_exit_2(tmp_path, fname, data, why):
    (tmp_path / fname).write_bytes(data)
    p = write(tmp_path, GOOD.replace("texture: {limit: 2}", f"background: {{source: {fname}}}"))
    r = run_cli("build", p, "--out", tmp_path / "ws")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"gensets: error: {p}:4: nuisances.background.source: {tmp_path / fname}: {why}"), line
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "ws").exists()


def test_cli_help_is_fast_and_lists_commands():
    """--help answers without importing torch (what makes a CLI slow to start), and lists the commands."""
    import subprocess
    import sys

    r = run_cli("--help", check=0)
    for cmd in ("build", "finalize", "verify", "review"):
        assert cmd in r.stdout
    code = ("import sys; from gensets.cli import main; sys.argv = ['gensets', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stderr.strip().splitlines()[-1] == "False"


# (configs/vqa.yaml names no model: it imports the paper's 50 images and 241 questions, which the user supplies)
PAPER_CONFIGS = ["imagenet_d.yaml", "genbench.yaml", "recognition.yaml", "failure_modes.yaml"]


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_configs_validate_and_pin_every_model_to_a_commit(name):
    """The paper-scale configs load offline (their models are only named, not loaded) and every model a
    build generates, filters, embeds, captions or expands with names a Hub commit, so a rebuild on a GPU
    machine loads the same weights. (eval.models, the models a set is scored with, record their revision
    in every run instead.)"""
    import re

    from gensets.config import to_dict
    from gensets.models import parse_spec
    from gensets.workspace import load_build_config

    _, cfg = load_build_config(ROOT / "configs" / name)
    found = []

    def walk(v, key=""):
        if isinstance(v, dict):
            for k, x in v.items():
                if k != "eval":
                    walk(x, k)
        elif isinstance(v, list):
            for x in v:
                walk(x, key)
        elif isinstance(v, str) and key in ("model", "models", "classifier", "embedder"):
            found.append(v)

    walk(to_dict(cfg))
    assert found, name
    for spec in found:
        s = parse_spec(spec)
        assert not s.is_tiny and re.fullmatch(r"[0-9a-f]{40}", s.revision or ""), (name, spec)


def _generator_models(v, out: list, key: str = "") -> None:
    """The model spec of every ``generator:`` mapping in a config's YAML, into ``out``."""
    if isinstance(v, dict):
        if key == "generator" and isinstance(v.get("model"), str):
            out.append(v["model"])
        for k, x in v.items():
            _generator_models(x, out, k)
    elif isinstance(v, list):
        for x in v:
            _generator_models(x, out, key)


def test_every_shipped_config_agrees_with_the_licence_table():
    """Each build config in configs/ declares a licence its generators allow (gensets/data/licenses/models.json):
    a build of a shipped config never warns against itself (configs/imagenet_d.yaml once said mit with SD 2.1)."""
    import yaml

    from gensets.cards import licensing
    from gensets.registry import BUILDERS

    checked = 0
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if "builder" not in raw:
            continue  # a leaderboard config
        specs: list[str] = []
        _generator_models(raw, specs)
        licence = raw.get("license") or BUILDERS.get(raw["builder"]).Config.__dataclass_fields__["license"].default
        assert licensing.check(licence, [(s, None) for s in specs])[1] == [], path.name
        checked += bool(specs)
    assert checked >= 10
