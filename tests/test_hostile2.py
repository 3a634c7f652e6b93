"""Issue 25, classes 4 and 5: malformed files and unchecked numbers and strings. Each test reproduces one hole (it
failed before the fix: a traceback, or a run recorded from a meaningless input) and checks the answer: one line
naming what and where (file:line, or file: key, or shard: key), a non-zero exit, no traceback, nothing already
written lost."""

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from .conftest import ROOT, SMALL, SMOKE, run_cli
from .test_card import digest
from .test_hardening import one_line_error


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _deep(n: int = 200_000) -> str:
    return "[" * n + "]" * n


# ------------------------------------------------------------------------------- 4. malformed files
@pytest.mark.parametrize("text", ['{"build": [1], "shards": []}', '{"name": "someone else\'s"}', _deep()],
                         ids=["build-a-list", "foreign", "deep"])
def test_eval_refuses_a_foreign_manifest_json_in_one_line(small, tmp_path, text):
    from gensets.errors import DataError
    from gensets.evaluation.data import open_source

    ds = _copy(small / "dataset", tmp_path / "ds")
    (ds / "manifest.json").write_text(text)
    with pytest.raises(DataError, match="manifest.json") as e:
        open_source(str(ds))
    assert "\n" not in str(e.value)


def test_eval_refuses_a_card_config_without_config_name(small, tmp_path):
    ds = _copy(small / "dataset", tmp_path / "ds")
    readme = ds / "README.md"
    readme.write_text(readme.read_text().replace("- config_name:", "- confname:", 1))
    r = run_cli("eval", ds, "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet")
    one_line_error(r, "README.md", "configs[0].config_name", code=1)
    assert not (tmp_path / "r.duckdb").exists()


def test_verify_names_a_deeply_nested_manifest_without_a_traceback(small, tmp_path):
    ds = _copy(small / "dataset", tmp_path / "ds")
    (ds / "manifest.json").write_text(_deep())
    r = run_cli("verify", ds)
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "manifest.json" in r.stdout and "nested too deeply" in r.stdout


def test_publish_dry_run_names_a_cut_manifest_json_line(small, tmp_path):
    ds = _copy(small / "dataset", tmp_path / "ds")
    text = (small / "dataset" / "manifest.json").read_text()
    (ds / "manifest.json").write_text(text[:100])
    r = run_cli("publish", ds, "--repo", "someone/something", "--dry-run")
    one_line_error(r, f"{ds / 'manifest.json'}:", "not valid JSON", code=1)


@pytest.mark.parametrize("value", ['"4"', "1e300"], ids=["text", "1e300"])
def test_bad_rows_in_the_candidate_manifest_are_named_by_file_line(small, tmp_path, value):
    ws = _copy(small, tmp_path / "ws")
    (ws / "state.duckdb").unlink()  # the ingest reads every row again
    manifest = ws / "candidates" / "manifest.jsonl"
    row = json.loads(manifest.read_text().splitlines()[0])
    manifest.write_text(json.dumps(row).replace(f'"n": {row["n"]}', f'"n": {value}') + "\n")
    before = digest(ws / "candidates")
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL)
    one_line_error(r, f"{manifest}:1", "n:", code=1)
    assert digest(ws / "candidates") == before


def test_a_label_studio_from_name_that_is_a_list_is_named(small, tmp_path):
    ws = _copy(small, tmp_path / "ws")
    key = run_cli("review", "list", ws, "--json", check=0).stdout
    key = json.loads(key)[0]["key"]
    tasks = [{"id": 7, "data": {"key": key}, "annotations": [{
        "completed_by": {"email": "a@example.org"}, "created_at": "2025-01-01T00:00:00Z",
        "result": [{"type": "choices", "from_name": ["verdict"], "to_name": "image",
                    "value": {"choices": ["accept"]}}]}]}]
    f = tmp_path / "ls.json"
    f.write_text(json.dumps(tasks))
    before = digest(ws)
    r = run_cli("review", "import", ws, "--format", "label-studio", "--file", f)
    one_line_error(r, str(f), "task 7", "from_name")
    assert digest(ws) == before


def test_absurd_image_sizes_in_state_duckdb_are_named_not_allocated(small, tmp_path):
    import duckdb

    ws = _copy(small, tmp_path / "ws")
    con = duckdb.connect(str(ws / "state.duckdb"))
    con.execute("UPDATE images SET nbytes = 100000000000000")  # 100 TB: a MemoryError before
    con.close()
    before = digest(ws / "dataset")
    r = run_cli("finalize", ws, "--include-pending")
    one_line_error(r, "candidates/", "the recorded location is corrupt", "background_mug", code=1)
    assert digest(ws / "dataset") == before


def test_world_size_that_is_not_a_number_is_named(small, tmp_path):
    r = run_cli("eval", small, "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet",
                env={"WORLD_SIZE": "two"})
    one_line_error(r, "WORLD_SIZE", "'two'")
    assert not (tmp_path / "r.duckdb").exists()


def test_a_state_duckdb_that_is_not_a_database_is_not_called_in_use(small, tmp_path):
    ws = _copy(small, tmp_path / "ws")
    (ws / "state.duckdb").write_bytes(b"not a database, but some user's bytes\n" * 200)
    before = (ws / "state.duckdb").read_bytes()
    for args in (("review", "list", ws), ("review", "accept", ws, "--all-pending")):
        err = one_line_error(run_cli(*args), "state.duckdb", "not a readable state database", code=1)
        assert "in use" not in err
    assert (ws / "state.duckdb").read_bytes() == before


# ------------------------------------------------------------------ 5. numbers and strings from the command line
@pytest.mark.parametrize("args", [("--limit", "-1"), ("--limit", "0"), ("--batch-size", "0"), ("--batch-size", "-1"),
                                  ("--workers", "-2")])
def test_eval_refuses_a_count_out_of_range_and_records_nothing(small, tmp_path, args):
    db = tmp_path / "r.duckdb"
    r = run_cli("eval", small, "--model", "tiny:resnet", "--db", db, "--quiet", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"argument {args[0]}" in r.stderr and repr(args[1]) in r.stderr
    assert not db.exists()


@pytest.mark.parametrize("template", ["a photo", "a {x} photo", "a photo of a {}\x1b[2J"])
def test_eval_refuses_a_template_without_its_placeholder(small, tmp_path, template):
    db = tmp_path / "r.duckdb"
    r = run_cli("eval", small, "--model", "tiny:clip", "--db", db, "--quiet", "--protocol", "zero-shot",
                "--template", template)
    one_line_error(r, "--template")
    assert not db.exists() or "zero-shot" not in run_cli("leaderboard", "--db", db, "--format", "csv").stdout


def test_review_list_refuses_a_negative_limit(small):
    r = run_cli("review", "list", small, "--limit", "-1")
    assert r.returncode == 2 and "argument --limit" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [
    ["build", "c.yaml", "--out", "w", "--threads", "0"],
    ["verify", "d", "--rebuild", "0"],
    ["verify", "d", "--rebuild", "1", "--seed", "-5"],
    ["score", "d", "--metric", "aesthetic", "--batch-size", "0"],
    ["score", "d", "--metric", "aesthetic", "--limit", "-3"],
    ["review", "serve", "w", "--port", "70000"],
    ["review", "serve", "w", "--port", "-1"],
    ["eval", "d", "--model", "tiny:resnet", "--db", "r", "--batch-size", "two"],
    ["report", "genbench", "w", "--batch-size", "0"],
    ["report", "genbench", "w", "--probe-c", "-1"],
    ["report", "genbench", "w", "--probe-c", "nan"],
    ["report", "genbench", "w", "--price-per-hour", "-2"],
    ["audit", "w", "--phash-threshold", "65"],
    ["audit", "w", "--dhash-threshold", "-1"],
    ["audit", "w", "--cosine-threshold", "nan"],
    ["audit", "w", "--pairs", "-1"],
    ["finalize", "w", "--drop", "near-duplicates=1.5"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_every_number_option_is_checked_by_argparse(argv, capsys):
    from gensets.cli import parser

    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2
    assert f"argument {argv[-2]}" in capsys.readouterr().err


def test_every_number_option_has_a_checked_type():
    """No ``type=int`` / ``type=float`` is left on an option: each takes one of the range-checked types."""
    for path in [*sorted((ROOT / "gensets" / "cli").glob("*.py")), *sorted((ROOT / "gensets").rglob("reports/*.py"))]:
        text = path.read_text()
        assert "type=int" not in text and "type=float" not in text, path


def test_a_typo_in_images_per_category_is_refused_before_planning(tmp_path):
    config = tmp_path / "rec.yaml"
    config.write_text((ROOT / "configs" / "recognition.smoke.yaml").read_text()
                      .replace("images_per_category: 3", "images_per_category: 1000000000", 1))
    t = time.monotonic()
    r = run_cli("build", config, "--out", tmp_path / "ws", timeout=120)
    one_line_error(r, f"{config}:", "images_per_category", "1,000,000,000")
    assert time.monotonic() - t < 20 and not (tmp_path / "ws").exists()


@pytest.mark.parametrize("name", ["mu\x00g", "mu\ng", "mu\x1b[31mg"], ids=["NUL", "newline", "ESC"])
def test_control_characters_in_class_names_are_refused(tmp_path, name):
    r = run_cli("build", SMOKE, "--out", tmp_path / "ws", "--set", f"classes=[{json.dumps(name)}]",
                "--set", "nuisances={background: {limit: 2}}")
    one_line_error(r, "classes[0]", "control character")
    assert not (tmp_path / "ws").exists()


def test_control_characters_in_class_names_from_data_are_refused(tmp_path):
    from gensets.errors import ConfigError
    from gensets.sources.classes import dataset_info
    from gensets.sources.imports import list_items

    pets = tmp_path / "pets"
    for c in ("cat", "d\x1b[2Jog"):
        (pets / c).mkdir(parents=True)
        (pets / c / "a.png").write_bytes(b"x")
    with pytest.raises(ValueError, match="control character U\\+001B"):
        dataset_info("folder:pets", tmp_path)
    with pytest.raises(ConfigError, match="control character U\\+001B"):
        list_items(pets, None)
    from gensets.errors import GensetsError
    from gensets.sources.images import load_test_set

    with pytest.raises(GensetsError, match="control character U\\+001B"):
        load_test_set(str(pets), ["cat", "dog"])
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"path": "pets/cat/a.png", "category": "c\nat"}) + "\n")
    with pytest.raises(ConfigError, match=f"{rows}:1: category: control character U\\+000A"):
        list_items(rows, None)


def test_control_characters_in_a_dataset_card_class_names_are_refused(small, tmp_path):
    ds = _copy(small / "dataset", tmp_path / "ds")
    readme = ds / "README.md"
    text = readme.read_text()
    changed = re.sub(r"'(\d+)': mug$", lambda m: f"'{m[1]}': \"m\\eug\"", text, count=1, flags=re.M)  # "\e": ESC
    assert changed != text
    readme.write_text(changed)
    r = run_cli("eval", ds, "--model", "tiny:resnet", "--db", tmp_path / "r.duckdb", "--quiet")
    one_line_error(r, "README.md", "features.cls", code=1)


def test_a_hub_dataset_is_decoded_under_gensets_pixel_limit(tmp_path, monkeypatch):
    """Images of a `datasets` dataset (a Hub id in `gensets eval`; here the same code on a local image folder) are
    decoded by gensets.images.decode_image, with its pixel limit: an image over it is one DataError naming the
    dataset, split and key, not a decompression bomb decoded by datasets."""
    from PIL import Image

    from gensets.errors import DataError
    from gensets.evaluation.data import hub_dataset

    for label in ("cat", "dog"):
        (tmp_path / "ds" / "test" / label).mkdir(parents=True)
        Image.new("RGB", (20, 20), (10, 200, 30)).save(tmp_path / "ds" / "test" / label / f"{label}0.png")
    (split,) = hub_dataset(str(tmp_path / "ds"), None, None).splits
    records = list(split.records())
    assert len(records) == 2 and records[0]["image"].size == (20, 20) and split.class_names == ["cat", "dog"]
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 300)  # under 2x: gensets refuses it (PIL itself would warn)
    with pytest.raises(DataError, match=r"ds default/test: .*cannot decode image: 20x20 = 400 pixels is over the "
                                        r"limit of 300"):
        list(split.records())


def test_publish_refuses_a_repo_holding_another_builders_dataset(small, tmp_path):
    """A repo that holds another builder's gensets dataset is not an earlier version of this one: publish refuses
    it (its shards would be deleted as stale) unless --replace; the same builder's repo is updated as before."""
    from .conftest import run_cli

    repo = tmp_path / "repo"
    run_cli("publish", small, "--repo", f"file://{repo}", check=0)
    other = tmp_path / "other"
    shutil.copytree(small / "dataset", other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["builder"] = "genbench"  # another builder's dataset, the same shards
    (other / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    r = run_cli("publish", other, "--repo", f"file://{repo}")
    assert r.returncode == 2 and "holds another gensets dataset (builder 'imagenet-d'" in r.stderr, r.stderr
    assert "--replace" in r.stderr and sorted(p.relative_to(repo) for p in repo.rglob("*")) == before
    dry = run_cli("publish", other, "--repo", f"file://{repo}", "--dry-run", check=0)
    assert "REFUSED: " in dry.stdout
    run_cli("publish", other, "--repo", f"file://{repo}", "--replace", check=0)
    assert json.loads((repo / "manifest.json").read_text())["builder"] == "genbench"
    run_cli("publish", small, "--repo", f"file://{tmp_path / 'repo2'}", check=0)  # a fresh repo: nothing to check
    run_cli("publish", small, "--repo", f"file://{tmp_path / 'repo2'}", check=0)  # the same builder again: fine


def test_card_bodies_show_config_text_as_text():
    """A prompt template or a negative prompt from the config is text in the card: its HTML is escaped, a pipe
    cannot break the table, a bracket cannot make a link, a backtick cannot end the code span."""
    from gensets.cards.markdown import code, text
    from gensets.workspace import load_build_config

    from .conftest import SMOKE

    assert text("alarm_clock, {cls} on {nuisance}.") == "alarm_clock, {cls} on {nuisance}."  # plain: unchanged
    hostile = "a {cls} <img src=x onerror=alert(1)> | [click](javascript:alert(1))"
    builder, cfg = load_build_config(SMOKE, [f"nuisances={{background: {{limit: 1, template: '{hostile}'}}}}",
                                             "generator.negative_prompt='bad` <b>x</b> |'"])
    body = builder.card_body(cfg, {"counts": {}}, [])
    row = next(line for line in body.splitlines() if line.startswith("| background |"))
    assert row == ("| background | 1 | a {cls} &lt;img src=x onerror=alert(1)&gt; \\| \\[click\\](javascript:alert(1)) |")
    assert "<img" not in body
    assert "negative prompt `bad' <b>x</b> |`" in body  # inside a code span HTML is shown as text already
    assert code("a|b", in_table=True) == "`a\\|b`"
