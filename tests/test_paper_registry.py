"""A paper is one folder and one registration: a toy paper (builder, report, one published number, a reproduce
table) written here into a temporary folder, outside gensets, and registered through gensets' one entry-point group
``gensets.plugins`` (its module registers the paper as it is imported), shows up in `gensets list tables|builders|reports` and `gensets reproduce --help`, and runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gensets.registry import BUILDERS, PAPERS, REPORTS, STRATEGIES
from gensets.reproduce import tables

from .conftest import ROOT

TOY = {
    "published.json": json.dumps({"paper": "Toy et al. (2031)", "accuracy": 0.625}),
    "builder.py": '''
        from dataclasses import dataclass
        from typing import Literal

        from gensets.builders import base
        from gensets.registry import BUILDERS


        @dataclass(frozen=True)
        class ToyPaperConfig:
            builder: Literal["toy-paper"]
            name: str = "toy"


        @BUILDERS.register("toy-paper")
        class ToyPaperBuilder(base.Builder):
            """The toy paper's builder: plans nothing."""

            Config = ToyPaperConfig

            def plan(self, cfg, stage=None, workspace=None):
                return []
        ''',
    "report.py": '''
        from gensets.evaluation.reports.base import Report
        from gensets.registry import REPORTS


        @REPORTS.register("toy-paper")
        class ToyPaperReport(Report):
            help = "the toy paper's report"

            def add_arguments(self, parser):
                parser.add_argument("--shout", action="store_true")

            def run(self, args):
                print("TOY REPORT" if args.shout else "toy report")
                return 0
        ''',
    "paper.py": '''
        import json
        from pathlib import Path

        from gensets.papers.base import Paper
        from gensets.papers.tables import Table
        from gensets.registry import PAPERS


        def published():
            return json.loads((Path(__file__).parent / "published.json").read_text())


        def rows():
            return [{"name": "toy:accuracy", "description": "one published accuracy of " + published()["paper"]}]


        def run_table(table, run):
            value = 0.5
            pub = published()["accuracy"]
            return {"rows": [{"what": "accuracy", "protocol": "toy", "published": pub, "model": "tiny:toy",
                              "variant": None, "gensets": value, "difference": value - pub, "interval": None,
                              "interval_kind": None}],
                    "report": "none", "source": published()["paper"], "interval": "none", "note": "a toy."}


        PAPER = Paper("toy", "Toy et al. (2031)", modules=("toy_paper.builder", "toy_paper.report"),
                      tables=(Table("toy-table", "Toy et al. (2031)", "the toy paper's one number", "nothing",
                                    run_table, options={"--dataset": "the toy's reading of --dataset"}),),
                      published=rows)
        PAPERS.register("toy", PAPER)  # imported as a plugin (gensets.plugins): the paper is registered
        ''',
}


@pytest.fixture
def toy_paper(tmp_path):
    """The toy paper as an installed package would be: its folder and a dist-info naming its entry point."""
    pkg = tmp_path / "site" / "toy_paper"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, text in TOY.items():
        (pkg / name).write_text(textwrap.dedent(text))
    info = tmp_path / "site" / "toy_paper-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-paper\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gensets.plugins]\ntoy = toy_paper.paper\n")
    return tmp_path / "site"


def _gensets(site, *args, cwd=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "gensets.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd)


def test_a_toy_paper_outside_gensets_is_listed_and_offered_by_reproduce(toy_paper, tmp_path):
    r = _gensets(toy_paper, "list", "tables", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row["description"] for row in json.loads(r.stdout)}
    assert rows["toy:accuracy"] == "one published accuracy of Toy et al. (2031)"
    assert rows["reproduce:toy-table"] == "gensets reproduce toy-table: the toy paper's one number"
    assert "reproduce:imagenet-d-table" in rows and "genbench:table-2" in rows  # gensets' own papers still there

    r = _gensets(toy_paper, "reproduce", "--help")
    assert r.returncode == 0, r.stderr
    assert "toy-table" in r.stdout and "the toy's reading of --dataset" in " ".join(r.stdout.split())

    for what, name in (("builders", "toy-paper"), ("reports", "toy-paper")):
        r = _gensets(toy_paper, "list", what, "--json")
        assert r.returncode == 0, r.stderr
        assert name in [row["name"] for row in json.loads(r.stdout)], what
    r = _gensets(toy_paper, "report", "toy-paper", "--shout")
    assert (r.returncode, r.stdout) == (0, "TOY REPORT\n"), r.stderr

    out = tmp_path / "out"
    r = _gensets(toy_paper, "reproduce", "toy-table", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert (result["table"], result["rows"][0]["published"], result["rows"][0]["gensets"]) == ("toy-table", 0.625, 0.5)
    assert "| accuracy | toy | 62.50 | 50.00 | - | -12.50 | - |" in (out / "reproduce.md").read_text()


def test_without_the_toy_paper_it_is_not_there(tmp_path):
    """The same commands without the entry point: no toy (the listing above came from the registration)."""
    r = _gensets(tmp_path, "list", "tables", "--json")
    assert r.returncode == 0, r.stderr
    assert "reproduce:toy-table" not in [row["name"] for row in json.loads(r.stdout)]


def test_the_registries_read_the_papers():
    """gensets' own builders, reports, prompt strategies and tables come from the registered papers."""
    assert list(PAPERS.names())[:4] == ["imagenet-d", "genbench", "borji", "wiles"]
    assert {"imagenet-d", "genbench", "recognition", "vqa", "failure-modes"} <= set(BUILDERS.names())
    assert {"imagenet-d", "genbench", "recognition", "vqa", "failure-modes", "quality"} <= set(REPORTS.names())
    assert STRATEGIES.names()[:7] == ["ST", "DT", "CE", "TI", "RD", "NP", "RA"]
    assert list(tables()) == ["imagenet-d-table", "genbench-table2", "borji-fig2", "borji-vqa"]
    for _, paper in PAPERS.items():
        for module in paper.modules:
            assert module.startswith(f"gensets.papers.{paper.name.replace('-', '_')}."), module


def test_a_paper_registered_after_the_registries_were_asked_adds_its_builders(tmp_path, monkeypatch):
    """A registry asks the papers again each time: a paper registered later (a test, a plugin) is found."""
    BUILDERS.names()  # discovered before the toy exists
    site = tmp_path / "site"
    (site / "late_paper").mkdir(parents=True)
    (site / "late_paper" / "__init__.py").write_text("")
    (site / "late_paper" / "builder.py").write_text(textwrap.dedent(TOY["builder.py"]).replace("toy-paper", "late"))
    (site / "late_paper" / "paper.py").write_text(
        "from gensets.papers.base import Paper\nPAPER = Paper('late', 'Late (2032)', modules=('late_paper.builder',))\n")
    monkeypatch.syspath_prepend(str(site))
    PAPERS.register("late", "late_paper.paper:PAPER")
    try:
        assert "late" in BUILDERS.names()
        assert BUILDERS.get("late").__name__ == "ToyPaperBuilder"
    finally:
        PAPERS.unregister("late")
        BUILDERS.unregister("late")
        for m in ("late_paper", "late_paper.builder", "late_paper.paper"):
            sys.modules.pop(m, None)


def test_a_split_that_names_no_builder_is_identified_by_its_papers():
    """The evaluation runner names no paper: ImageNet-D's class list is recognised by the identifier its paper
    folder registers (registry.IDENTIFIERS), which gives the authors' class names; another list is nobody's."""
    from gensets.evaluation.data import Split
    from gensets.evaluation.runner import _identified
    from gensets.registry import IDENTIFIERS
    from gensets.sources.packaged import imagenet_d_class_names, imagenet_d_classes

    assert "imagenet-d" in IDENTIFIERS.names()
    folders = Split("default", "test", list(imagenet_d_classes()), lambda: iter(()))
    assert _identified(folders) == "imagenet-d" and folders.class_names == imagenet_d_class_names()
    assert "binder_closed" in imagenet_d_classes() and "binder_(closed)" in folders.class_names
    other = Split("default", "test", ["cat", "dog"], lambda: iter(()))
    assert _identified(other) is None and other.class_names == ["cat", "dog"]


def test_the_engine_and_the_commands_name_no_paper_module():
    """No paper's module is named outside its folder and the list of gensets' papers: the engine (builders/,
    evaluation/), the registries, reproduce and the CLI reach papers through the PAPERS registry alone."""
    import re

    papers = ("imagenet_d", "genbench", "borji", "wiles", "failure_modes")
    files = [*sorted((ROOT / "gensets" / "builders").rglob("*.py")), *sorted((ROOT / "gensets" / "evaluation").rglob("*.py")),
             *sorted((ROOT / "gensets" / "cli").glob("*.py")),
             *(ROOT / "gensets" / f for f in ("registry.py", "reproduce.py", "catalog.py"))]
    names = "|".join(papers)  # as a module or package: after . / or a quote, before . : or a quote (not a config)
    pattern = re.compile(rf"(?<=[./\"' ])(?<!chenshuang-zhang/)({names})(?=[.:\"' ,)]|$)(?!\.smoke|\.yaml)")
    found = [f"{f.relative_to(ROOT)}:{i}: {line.strip()}" for f in files
             for i, line in enumerate(f.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
