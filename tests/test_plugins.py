"""An installed package's plugin (an entry point of the group ``gensets.plugins``) is used by the `gensets` command:
a package made here, in a temporary folder, with a dist-info folder whose entry_points.txt names it (what
`pip install` writes), found by importlib.metadata on PYTHONPATH, in a fresh `python -m gensets.cli` process."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from .conftest import ROOT, run_cli

BUILDER = '''
from dataclasses import dataclass
from io import BytesIO
from typing import Literal

from PIL import Image

from gensets.builders import base
from gensets.builders.common import ImageConfig, Unit
from gensets.records import Sample, content_id
from gensets.registry import BUILDERS


@dataclass(frozen=True)
class PlainConfig:
    builder: Literal["plain"]
    colours: tuple[str, ...] = ("red", "blue")
    painter: str | None = None  # a model spec of the plugin's `flat:` family (plainplug/flat.py), loaded by workers
    name: str = "plain"
    pretty_name: str = "Plain colours"
    license: str = "cc0-1.0"
    image: ImageConfig = ImageConfig(format="png")
    shard_size: int = 100


@BUILDERS.register("plain")
class PlainBuilder(base.Builder):
    """One plain image per colour, drawn without a model."""

    description = "A builder from an installed plugin."
    Config = PlainConfig
    fields = (("colour", "string"),)

    def plan(self, cfg, stage=None, workspace=None):
        return [Unit(content_id({"colour": c}), {"colour": c}) for c in cfg.colours]

    def config_names(self, cfg):
        return ["plain"]

    def class_names(self, cfg):
        return list(cfg.colours)

    def run_unit(self, unit, ctx, build_id):
        c = unit.payload["colour"]
        out = BytesIO()
        image = Image.new("RGB", (8, 8), c)
        if ctx.cfg.painter:  # a model family that only the other entry point registers: in this (worker) process too
            from gensets.models import load_generator

            image = load_generator(ctx.cfg.painter).paint(image)
        image.save(out, format="PNG")
        meta = self.provenance(key=c, build=build_id, unit=unit.id, config="plain", label=c,
                               label_index=ctx.cfg.colours.index(c), prompt="", seed=0, colour=c, kept=True)
        return [Sample(c, out.getvalue(), "png", ctx.cfg.colours.index(c), meta)]
'''


FLAT = '''
from gensets.models.family import ModelFamily
from gensets.registry import FAMILIES


class Flat:
    def __init__(self, colour):
        self.colour = colour

    def paint(self, image):
        image.paste(self.colour, (0, 0, 4, 4))
        return image


def load_flat(spec, **_):
    return Flat(spec.name)


def register():
    FAMILIES.register("flat", type("FlatFamily", (ModelFamily,), {"loaders": {"generator": load_flat}}))
'''


def _install(site, entry_points: str) -> None:
    """A package `plainplug` in `site`, as pip would leave it: the code, and its dist-info with the entry points."""
    (site / "plainplug").mkdir(parents=True)
    (site / "plainplug" / "__init__.py").write_text("")
    (site / "plainplug" / "builder.py").write_text(BUILDER)
    (site / "plainplug" / "flat.py").write_text(FLAT)
    info = site / "plainplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plainplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def _env(site) -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "GENSETS_TEST_FORK": "0"}


def test_an_installed_plugin_builder_is_used_by_gensets_build(tmp_path):
    site = tmp_path / "site"
    _install(site, """
        [gensets.plugins]
        plain = plainplug.builder
    """)
    config = tmp_path / "plain.yaml"
    config.write_text("builder: plain\ncolours: [red, green, blue]\n")
    ws = tmp_path / "ws"
    r = run_cli("build", config, "--out", ws, "--json", env=_env(site), check=0)
    json.loads(r.stdout)  # the build's counts, as JSON: nothing else on stdout
    run_cli("finalize", ws, env=_env(site), check=0)
    manifest = json.loads((ws / "dataset" / "manifest.json").read_text())
    assert manifest["counts"] == {"plain": 3}
    assert "A builder from an installed plugin." in (ws / "dataset" / "README.md").read_text()
    # without the plugin on the path, the same config names an unknown builder: refused in one line
    r = run_cli("build", config, "--out", tmp_path / "ws2", env={"GENSETS_TEST_FORK": "0"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "plain" in r.stderr, r.stderr


def test_a_broken_plugin_is_one_line_naming_it(tmp_path):
    site = tmp_path / "site"
    _install(site, """
        [gensets.plugins]
        broken = plainplug.missing
    """)
    r = run_cli("list", "builders", env=_env(site))
    assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
    assert "plugin 'broken' (plainplug.missing" in r.stderr and "Traceback" not in r.stderr


SQUATTER = '''
from gensets.evaluation.reports.base import Report
from gensets.registry import REPORTS


@REPORTS.register("imagenet-d")
class Squatter(Report):
    """A plugin's report under a name gensets' own ImageNet-D report declares."""
'''


def test_a_plugin_registering_a_built_in_name_is_refused_naming_both(tmp_path):
    """The built-in report is a lazy target until its paper loads, after the plugins: its own registration then
    meets the plugin's. The plugin's is refused in one warning naming both; the built-in is the one used."""
    site = tmp_path / "site"
    _install(site, """
        [gensets.plugins]
        squat = plainplug.squatter
    """)
    (site / "plainplug" / "squatter.py").write_text(SQUATTER)
    r = run_cli("list", "reports", env=_env(site), check=0)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "plugin 'squat' (plainplug.squatter)" in r.stderr and "gensets.papers.imagenet_d.report" in r.stderr
    assert "refused" in r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("imagenet-d "))
    assert "ImageNet-D: top-1" in line, r.stdout
    r = run_cli("report", "imagenet-d", "--help", env=_env(site), check=0)
    assert "--overall" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.slow
def test_ray_workers_load_the_plugins(tmp_path):
    """A Ray worker is a process of its own: the model family that only the plugin's second entry point registers
    (the builder's module does not import it) is known there, and the images are the local build's."""
    import secrets

    site = tmp_path / "site"
    _install(site, """
        [gensets.plugins]
        plain = plainplug.builder
        flat = plainplug.flat:register
    """)
    config = tmp_path / "plain.yaml"
    config.write_text("builder: plain\ncolours: [red, blue]\npainter: 'flat:white'\n")
    env = {**_env(site), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    run_cli("build", config, "--out", tmp_path / "local", "--quiet", env=env, check=0)
    run_cli("build", config, "--out", tmp_path / "ray", "--quiet", "--backend", "ray", "--workers", "1", env=env,
            check=0)
    local, ray = (sorted((tmp_path / w / "candidates").glob("*.tar")) for w in ("local", "ray"))
    assert len(local) == 2 and [p.read_bytes() for p in local] == [p.read_bytes() for p in ray]
