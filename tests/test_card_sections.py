"""The dataset card's Hub template sections (#27): parsed by huggingface_hub offline, every section present and
non-empty, the surrogate-bias paragraph, the licence check, the default config, the repo filled in by publish."""

import json
import logging
import re
import shutil
from pathlib import Path

import pytest

from .conftest import ROOT, run_cli

SECTIONS = ("## Dataset Details", "### Dataset Description", "## Uses", "### Direct Use", "### Out-of-Scope Use",
            "## Dataset Structure", "### Data Fields", "## Dataset Creation", "### Curation Rationale",
            "#### Data Collection and Processing (how it was built)", "#### Who are the source data producers?",
            "#### Annotation process", "#### Who are the annotators?", "#### Personal and Sensitive Information",
            "## Bias, Risks, and Limitations", "### Recommendations", "## Licensing", "## How to load",
            "## Citation")


def sections(body: str) -> dict[str, str]:
    """Heading line -> its section's text: up to the next heading of the same or a higher level (subsections
    included)."""
    heads = list(re.finditer(r"^(#{2,4}) .+$", body, flags=re.M))
    out = {}
    for i, h in enumerate(heads):
        end = next((n.start() for n in heads[i + 1:] if len(n[1]) <= len(h[1])), len(body))
        out[h[0].strip()] = body[h.end():end].strip()
    return out


def test_small_build_card_is_a_hub_card_with_every_section(small):
    from huggingface_hub import DatasetCard, DatasetCardData

    from gensets.records import FIELD_DOCS, schema
    from gensets.workspace import Workspace

    card = DatasetCard.load(small / "dataset" / "README.md")
    assert isinstance(card.data, DatasetCardData)
    data = card.data.to_dict()
    assert data["language"] == ["en"] and data["task_ids"] == ["multi-class-image-classification"]
    assert data["pretty_name"] and data["license"] == "mit"
    assert data["annotations_creators"] == ["machine-generated"]  # pending only: nobody decided an image
    assert [c.get("default") for c in data["configs"]] == [True]
    found = sections(card.text)
    for heading in SECTIONS:
        assert found.get(heading), heading  # present and non-empty
    assert "[More Information Needed]" not in card.text
    # Data Fields: every feature and every json key, with a meaning
    builder, cfg = Workspace(small).load()
    fields = found["### Data Fields"]
    rows = {m[1]: m[3] for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+) \| (.*) \|$", fields, flags=re.M)}
    for name, _ in schema(builder.fields):
        assert rows.get(f"json.{name}"), name
        assert FIELD_DOCS.get(name) or builder.field_docs.get(name), name
    assert {"__key__", "jpg", "cls", "json.generator.spec", "json.surrogates[].top5"} <= set(rows)
    assert all(rows.values())
    assert "| mug | 504 (coffee mug) |" in fields  # ImageNet ids shown with their names
    # the surrogate filter's bias names this build's surrogates
    bias = found["## Bias, Risks, and Limitations"]
    assert "biased low by construction" in bias
    assert all(f"`{m}`" in bias for m in cfg.filter.models)
    assert "issue #" not in card.text and "gensets' issue" not in card.text


def test_default_config_loads_without_a_name(small):
    import datasets

    folder = small / "dataset"
    ds = datasets.load_dataset(str(folder), split="test")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert len(ds) == manifest["counts"]["background"] and isinstance(ds.features["cls"], datasets.ClassLabel)


def test_every_builder_documents_its_fields():
    """Each registered builder's provenance fields have a meaning for the card (its own or the common ones)."""
    from gensets.records import FIELD_DOCS, QUALITY, schema
    from gensets.registry import BUILDERS

    for name in BUILDERS.names():
        b = BUILDERS.get(name)
        for field, _ in schema(b.fields + (QUALITY,)):
            assert FIELD_DOCS.get(field) or b.field_docs.get(field), (name, field)


def test_licence_conflict_in_the_card_and_on_stderr(small, tmp_path, caplog):
    """An OpenRAIL generator (Stable Diffusion 2.1) with `license: mit`: the card warns, stderr gets one line per
    generator; `openrail++` is fine; an unknown model asks to check its licence."""
    from gensets.cards import card, licensing
    from gensets.shards import ShardSamples
    from gensets.workspace import Workspace

    sd21 = "diffusers:stabilityai/stable-diffusion-2-1@5cae40e6a2745ae2b01ad92ae5043f95f23644d6"
    rows, conflicts = licensing.check("mit", [(sd21, "stabilityai/stable-diffusion-2-1")])
    assert len(conflicts) == 1 and "openrail++" in conflicts[0] and "mit" in conflicts[0]
    assert licensing.check("openrail++", [(sd21, None)])[1] == []
    assert licensing.check("creativeml-openrail-m", [("diffusers:CompVis/stable-diffusion-v1-4", None)])[1] == []
    unknown, none = licensing.check("mit", [("diffusers:someone/new-model", None)])
    assert none == [] and "check the model's licence" in unknown[0]

    builder, cfg = Workspace(small).load()
    manifest = json.loads((small / "dataset" / "manifest.json").read_text())
    out = tmp_path / "out"
    shutil.copytree(small / "dataset", out)
    samples = ShardSamples([out / s["path"] for s in manifest["shards"]], n=sum(manifest["counts"].values()))
    stats = card.collect(builder, samples)
    stats["generators"] = [(sd21, "stabilityai/stable-diffusion-2-1")]
    text = card.render(builder, cfg, manifest, samples, "b", stats=stats)
    lic = sections(text.split("\n---\n", 1)[1])["## Licensing"]
    assert "**Warning:**" in lic and "CreativeML Open RAIL++-M" in lic and "**conflicts**" in lic

    # finalize and `gensets card` write through card.write: its default warns of each conflict, one line (a notice:
    # gensets.notices, which the CLI prints on stderr)
    caplog.set_level(logging.INFO, logger="gensets")
    real = card.collect
    card.collect = lambda *a: {**real(*a), "generators": [(sd21, "stabilityai/stable-diffusion-2-1")]}
    try:
        card.write(out, builder, cfg, manifest, samples, "b")
    finally:
        card.collect = real
    err = [r.getMessage() for r in caplog.records if r.name == "gensets"]
    assert len(err) == 1 and err[0].startswith("warning: dataset licence 'mit' conflicts") and "openrail++" in err[0]
    assert "**Warning:**" in (out / "README.md").read_text()
    r = run_cli("card", small, check=0)  # tiny:sd carries no licence: no warning
    assert "warning" not in r.stderr


def test_collect_reads_generators_and_imports():
    from gensets.cards import card, licensing

    class S:
        def __init__(self, meta):
            self.meta = {"label": "mug", **meta}

    stats = card.collect(None, [S({"generator": {"spec": "diffusers:stabilityai/stable-diffusion-xl-base-1.0",
                                                 "id": "stabilityai/stable-diffusion-xl-base-1.0"}}),
                                S({"source": "people", "generator": None})])
    assert stats["imported"] == ["people"]
    conflicts = licensing.check("mit", stats["generators"])[1]
    assert len(conflicts) == 1 and conflicts[0].startswith("dataset licence 'mit' conflicts")
    assert "keep their own licences" in licensing.section("mit", stats["generators"], stats["imported"])


def test_publish_fills_in_the_repo_and_revision(small, tmp_path):
    import datasets

    from gensets.publish import LocalTarget, publish

    repo = tmp_path / "repo"
    publish(small, "file://" + str(repo), target=LocalTarget(repo), tag="v1", out=lambda _: None)
    text = (repo / "README.md").read_text()
    assert f'REPO, REVISION = "{repo}", "v1"' in text and "path/or/org/name" not in text
    assert f"<!-- repo -->{repo}, revision `v1`<!-- /repo -->" in text
    local = (small / "dataset" / "README.md").read_text()  # the local card unchanged: it loads its own folder
    assert "REPO, REVISION = os.getcwd(), None" in local and str(repo) not in local and "import os" not in text
    assert len(datasets.load_dataset(str(repo), split="test")) > 0


def test_for_repo_names_a_hub_repo():
    from gensets.cards.card import for_repo, repo_line, repository_line

    text = f"a\n{repo_line(None, None)}\n- **Repository:** {repository_line(None, None)}\n"
    out = for_repo(text, "org/name", "v2")
    assert 'REPO, REVISION = "org/name", "v2"' in out
    assert "https://huggingface.co/datasets/org/name, revision `v2`" in out


def test_reviewed_build_is_expert_generated():
    from gensets.cards.card import annotation_md, annotators

    manifest = {"review": {"double": True, "reviewers": 2, "decided": 3, "decisions": {"accepted": 4, "relabeled": 2},
                           "double_reviewed": 3, "observed_agreement": 0.6667, "kappa": 0.4}}
    assert annotators(manifest) == ["expert-generated", "machine-generated"]
    assert annotators({"review": {"decided": 0}}) == ["machine-generated"]

    class B:
        needs_review = True

    from collections import Counter

    md = annotation_md(B(), manifest, {"statuses": Counter(accepted=2, relabeled=1),
                                       "relabels": Counter({("mug", "cup"): 1})})
    assert "2 reviewer(s) decided 3 image(s)" in md and "Cohen's kappa 0.4" in md and "observed agreement 0.6667" in md
    assert "| mug | cup | 1 |" in md


def test_review_summary_counts_reviewers_and_kappa(small, tmp_path):
    from gensets.curation import review, state

    ws = tmp_path / "ws"
    shutil.copytree(small, ws)
    con = state.connect(ws / "state.duckdb")
    try:
        keys = [k for (k,) in con.execute("SELECT key FROM samples ORDER BY key").fetchall()][:2]
        review.set_double(con)
        review.decide(con, keys, "accepted", reviewer="ana")
        review.decide(con, keys[:1], "accepted", reviewer="ben")
        review.decide(con, keys[1:], "rejected", reviewer="ben")
        s = review.summary(con)
    finally:
        con.close()
    assert s["double"] and s["reviewers"] == 2 and s["decided"] == 2 and s["double_reviewed"] == 2
    assert s["observed_agreement"] == 0.5 and s["decisions"] == {"accepted": 3, "rejected": 1}


def test_packaged_texts_cite_papers_not_the_tracker():
    for p in (ROOT / "gensets" / "data").rglob("*.json"):
        t = p.read_text(encoding="utf-8")
        assert "issue #" not in t and "gensets' issue" not in t, p
    assert Path(ROOT / "gensets" / "data" / "borji" / "published.json").read_text().count("Sec. 3") >= 1


@pytest.mark.parametrize("config", ["vqa.smoke.yaml"])
def test_vqa_card_has_no_task_id_that_does_not_fit(config):
    from gensets.cards.card import header
    from gensets.workspace import load_build_config

    builder, cfg = load_build_config(ROOT / "configs" / config)
    h = header(builder, cfg, {"counts": {"default": 2}, "shards": [{"config": "default", "nbytes": 10}]})
    assert "task_ids" not in h and h["language"] == ["en"] and h["configs"][0]["default"] is True


def test_a_compiled_build_says_so_in_its_reproducibility_section(tmp_path):
    from gensets.cards.card import reproducibility_md
    from gensets.workspace import load_build_config

    text = (ROOT / "configs" / "imagenet_d.smoke.yaml").read_text(encoding="utf-8")
    _, eager = load_build_config(ROOT / "configs" / "imagenet_d.smoke.yaml")
    (tmp_path / "c.yaml").write_text(text.replace("generator:\n", "generator:\n  compile: true\n", 1), encoding="utf-8")
    _, compiled = load_build_config(tmp_path / "c.yaml")
    assert compiled.generator.compile and not eager.generator.compile
    assert "torch.compile" in reproducibility_md(compiled, {}) and "torch.compile" not in reproducibility_md(eager, {})
