"""Binary VQA sets (Borji 2022): questions files, generated balanced questions, scoring."""

import json
import shutil

import pytest

from .conftest import ROOT, run_cli
from .test_eval import query

SMOKE = ROOT / "configs" / "vqa.smoke.yaml"


def test_bad_answer_names_its_line(tmp_path):
    (tmp_path / "images").mkdir()
    lines = [json.dumps({"image": f"im{i}", "question": "Is there a dog?", "answer": "yes"}) for i in range(6)]
    lines.append(json.dumps({"image": "im6", "question": "Is there a cat?", "answer": "maybe"}))
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    cfg = tmp_path / "vqa.yaml"
    cfg.write_text("builder: vqa\nimage_folder: images\nquestions: q.jsonl\n")
    r = run_cli("build", cfg, "--out", tmp_path / "ws")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "q.jsonl:7:" in err[0] and "maybe" in err[0], r.stderr
    assert "Traceback" not in r.stderr


def test_generated_questions_are_balanced_and_no_swaps_within_a_family():
    from gensets.papers.borji.vqa import ATTRIBUTES, OBJECTS, PromptSpec, generated_questions

    prompts = [PromptSpec("a red car next to a dog", ("car", "dog"), {"car": ("red",)}),
               PromptSpec("a cat sleeping on a wooden chair", ("cat", "chair"), {"chair": ("wooden",)}),
               PromptSpec("two elephants under a blue sky with a kite", ("elephant", "kite"), {}),
               PromptSpec("a large dog beside two benches and three buses", ("dog", "bench", "bus"),
                          {"dog": ("large",)})]
    family = {w: f for f, words in ATTRIBUTES.items() for w in words}
    for seed in range(20):
        for p in prompts:
            words = set(p.text.split())
            qs = generated_questions(p, OBJECTS, ATTRIBUTES, seed)
            assert [q["answer"] for q in qs] == ["yes", "no"] * (len(p.objects) + sum(map(len, p.attributes.values())))
            for yes, no in zip(qs[::2], qs[1::2], strict=True):
                if no["kind"] == "object":  # independent of the builder's matcher: no word or plural in the text
                    other = no["question"].removeprefix("Is there a ").removesuffix(" in the image?")
                    assert not {other, other + "s", other + "es"} & words, (p.text, no)
                else:
                    said, other = yes["question"].split()[-1][:-1], no["question"].split()[-1][:-1]
                    assert family[other] == family[said] and other not in words, (p.text, no)


def test_generated_no_questions_are_exactly_the_absent_words():
    """Fixed prompts and vocabularies leave one word to swap in: the questions are known exactly."""
    from gensets.papers.borji.vqa import PromptSpec, generated_questions

    objects = ("bench", "bus", "car", "dog")
    families = {"colour": ("red", "blue"), "material": ("metal", "wooden"), "size": ("small", "large")}
    p = PromptSpec("two benches and three buses next to a red car", ("bench", "bus", "car"), {"car": ("red",)})
    assert generated_questions(p, objects, families, seed=3) == [
        {"question": "Is there a bench in the image?", "answer": "yes", "kind": "object"},
        {"question": "Is there a dog in the image?", "answer": "no", "kind": "object"},
        {"question": "Is there a bus in the image?", "answer": "yes", "kind": "object"},
        {"question": "Is there a dog in the image?", "answer": "no", "kind": "object"},
        {"question": "Is there a car in the image?", "answer": "yes", "kind": "object"},
        {"question": "Is there a dog in the image?", "answer": "no", "kind": "object"},
        {"question": "Is the car red?", "answer": "yes", "kind": "attribute"},
        {"question": "Is the car blue?", "answer": "no", "kind": "attribute"},  # a colour, never "metal"
    ]
    p = PromptSpec("a large wooden table", ("table",), {"table": ("large", "wooden")})
    no = [q["question"] for q in generated_questions(p, ("table", "bus"), families, seed=0) if q["answer"] == "no"]
    assert no == ["Is there a bus in the image?", "Is the table small?", "Is the table metal?"]


def _build_error(tmp_path, config: str):
    (tmp_path / "vqa.yaml").write_text(config)
    r = run_cli("build", tmp_path / "vqa.yaml", "--out", tmp_path / "ws")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "ws" / "candidates").exists() or not any((tmp_path / "ws" / "candidates").glob("*.tar"))
    return err[0]


@pytest.mark.parametrize("attributes, expected", [
    ("{colour: [red, blue]}", "every object of `objects` is in the prompt"),
    ("{colour: [red]}", "every colour word is in the prompt; none is left to swap for 'red'"),
    ("{material: [metal]}", "attribute 'red' of 'car' is in no family of `attributes` (material)"),
])
def test_nothing_to_swap_in_names_the_prompt(tmp_path, attributes, expected):
    objects = "[car, dog]" if "objects" in expected else "[car, dog, cat]"
    err = _build_error(tmp_path, f"""builder: vqa
generator: {{model: tiny:sd, steps: 2, width: 64, height: 64}}
objects: {objects}
attributes: {attributes}
prompts:
  - {{text: "a red car next to a dog", objects: [car, dog], attributes: {{car: [red]}}}}
""")
    assert err.startswith(f"gensets: error: {tmp_path / 'vqa.yaml'}:5: prompts: prompt 0 'a red car next to a dog': ")
    assert expected in err


def _images(folder, names):
    from PIL import Image

    folder.mkdir()
    for i, name in enumerate(names):
        Image.new("RGB", (16, 16), (40 * i, 0, 0)).save(folder / name)


def test_question_for_an_unknown_image_names_its_line(tmp_path):
    _images(tmp_path / "images", ["im0.jpg", "im1.png"])
    lines = [json.dumps({"image": "im0", "question": "Is there a dog?", "answer": "yes"}), "",
             json.dumps({"image": "im2", "question": "Is there a cat?", "answer": "no"})]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    err = _build_error(tmp_path, "builder: vqa\nimage_folder: images\nquestions: q.jsonl\n")
    assert err.startswith(f"gensets: error: {tmp_path / 'q.jsonl'}:3: image 'im2' matches no image"), err


def test_two_files_with_one_key_are_refused(tmp_path):
    _images(tmp_path / "images", ["a.jpg", "a.png"])
    err = _build_error(tmp_path, "builder: vqa\nimage_folder: images\n")
    assert err == f"gensets: error: {tmp_path / 'images'}: a.jpg and a.png have the same image key 'a'; rename one"


@pytest.mark.slow
def test_imported_images_with_a_questions_file(tmp_path):
    _images(tmp_path / "images", ["im0.jpg", "im1.png"])
    lines = [json.dumps({"image": "im0", "question": "Is there a dog?", "answer": "yes"}),
             json.dumps({"image": "im1", "question": "Is it red?", "answer": "no"})]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "vqa.yaml").write_text("builder: vqa\nimage_folder: images\nquestions: q.jsonl\n")
    ws = tmp_path / "ws"
    run_cli("build", tmp_path / "vqa.yaml", "--out", ws, "--quiet", check=0)
    run_cli("build", tmp_path / "vqa.yaml", "--out", ws, "--quiet", check=0)  # the frozen config reloads
    run_cli("finalize", ws, check=0)
    import datasets

    ds = datasets.load_dataset(str(ws / "dataset"), "default", split="test")
    got = {r["__key__"]: (r["json"]["original_path"], [q["question"] for q in r["json"]["questions"]]) for r in ds}
    assert got == {"im0": ("im0.jpg", ["Is there a dog?"]), "im1": ("im1.png", ["Is it red?"])}


def test_vqa_card_task_is_visual_question_answering():
    from gensets.papers.borji.vqa import VQABuilder

    assert list(VQABuilder.task_categories) == ["visual-question-answering"]


def _always_yes_vilt(folder):
    """The tiny ViLT with its answer head set so that it always answers "yes" (saved, then loaded as hf:)."""
    import torch
    from transformers import ViltForQuestionAnswering

    from gensets.models import tiny_path

    src = tiny_path("vilt-vqa")
    shutil.copytree(src, folder)
    m = ViltForQuestionAnswering.from_pretrained(folder)
    yes = m.config.label2id["yes"]
    last = m.classifier[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.fill_(-10.0)
        last.bias[yes] = 10.0
    m.save_pretrained(folder, safe_serialization=True)
    return f"hf:{folder}"


@pytest.mark.slow
def test_vqa_smoke_build_and_scores(tmp_path):
    ws = tmp_path / "ws"
    run_cli("build", SMOKE, "--out", ws, "--quiet", check=0)
    run_cli("finalize", ws, check=0)
    import datasets

    ds = datasets.load_dataset(str(ws / "dataset"), "default", split="test")
    assert len(ds) == 4
    qs = [q for r in ds for q in r["json"]["questions"]]
    assert len(qs) == 20 and sum(q["answer"] == "yes" for q in qs) == 10
    db = tmp_path / "r.duckdb"
    spec = _always_yes_vilt(tmp_path / "yes-vilt")
    res = json.loads(run_cli("eval", ws, "--model", spec, "--model", "tiny:blip-vqa", "--protocol", "vqa",
                             "--db", db, "--json", check=0).stdout)
    yes_model = next(r for r in res if r["model"] == spec)["metrics"]
    assert yes_model["vqa_accuracy"] == 0.5 and yes_model["top1"] == 0.5
    assert yes_model["vqa_yes_accuracy"] == 1.0 and yes_model["vqa_no_accuracy"] == 0.0
    # per image accuracy is a GROUP BY over the per-question rows
    per_image = query(db, f"""SELECT split_part(key, '/', 1) AS image, avg(correct1::INT) AS acc
                              FROM predictions JOIN runs USING (run_id) WHERE model = '{spec}' GROUP BY 1""")
    assert len(per_image) == 4 and all(r["acc"] == pytest.approx(0.5) for r in per_image)


@pytest.mark.slow
def test_vqa_build_does_not_depend_on_where_its_files_lie(tmp_path):
    shards = {}
    for d in ("here", "somewhere/else"):
        (tmp_path / d).mkdir(parents=True)
        _images(tmp_path / d / "images", ["im0.jpg", "im1.png"])
        (tmp_path / d / "q.jsonl").write_text(json.dumps({"image": "im0", "question": "A dog?", "answer": "yes"}) + "\n")
        (tmp_path / d / "vqa.yaml").write_text("builder: vqa\nimage_folder: images\nquestions: q.jsonl\n")
        ws = tmp_path / d / "ws"
        run_cli("build", tmp_path / d / "vqa.yaml", "--out", ws, "--quiet", check=0)
        shards[d] = {p.name: p.read_bytes() for p in (ws / "candidates").iterdir()}
        assert str(tmp_path) not in (ws / "config.yaml").read_text()
        assert not any(str(tmp_path).encode() in b for b in shards[d].values())
    assert shards["here"] == shards["somewhere/else"]  # shard names (unit ids), bytes and the manifest


def test_vqa_report_averages_over_questions_and_over_images_by_hand(tmp_path):
    """Two images: a with 3 questions (yes right, yes right, no wrong), b with 1 question (no right).
    Over questions 3/4 = 0.75 (the default); over images (2/3 + 1/1) / 2 = 5/6; yes 2/2, no 1/2. OFA's published
    77.27% (Borji 2022, Sec. 3) is shown beside, with its source, and never compared with another model."""
    from gensets.evaluation import store
    from gensets.papers.borji.vqa_report import compute

    db = tmp_path / "r.duckdb"
    con = store.connect(db)
    rows = [("a/q0", 1, True), ("a/q1", 1, True), ("a/q2", 0, False), ("b/q0", 0, True)]
    preds = [{"key": k, "target": t, "target_ids": [t], "top5": [t if c else 1 - t], "scores": [], "correct1": c,
              "correct5": c} for k, t, c in rows]
    store.write_run(con, {"dataset": "d", "dataset_revision": "b1", "config": "vqa", "split": "test", "model": "m",
                          "protocol": "vqa", "n": 4, "class_names": ["no", "yes"]}, preds, [])
    con.close()
    (row,) = compute(db)["per_model"]
    assert (row["questions"], row["images"]) == (4, 2)
    assert row["accuracy"] == pytest.approx(0.75) and row["accuracy_images"] == pytest.approx(5 / 6)
    assert row["yes_accuracy"] == pytest.approx(1.0) and row["no_accuracy"] == pytest.approx(0.5)
    run_cli("report", "vqa", "--db", db, "--out", tmp_path / "rep", check=0)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| m | vqa | vqa | 4 | 2 | 75.0 | 83.3 | 100.0 | 50.0 |" in md
    assert "| OFA | 241 questions, 50 images | 77.27 | `m` on `vqa` | 75.0 / 83.3 |" in md and "arXiv:2208.10760" in md
    # OFA only with OFA; the paper's averaging is unknown; these are not the paper's images: never compared
    (side,) = json.loads((tmp_path / "rep" / "report.json").read_text())["published"]["rows"]
    assert side["difference"] is None and side["comparison"]["test"] == "not comparable"
    assert "other model: the paper's is OFA" in side["comparison"]["text"] and "aggregation" in side["comparison"]["text"]
    assert "protocol `vqa`" in md and "the mean over images" in md and "within" not in md and "outside" not in md
    # a published report cites the paper (its section), never the project's issue tracker
    assert "Sec. 3" in md and "77.27%" in md
    assert "issue" not in md.lower()
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["published"]["numbers"][0]["value"] == 0.7727
    # gensets' own 95% interval over images: an image resampled with all its questions, written out (image a: 2 of 3
    # right, image b: 1 of 1); it decides nothing
    import numpy as np

    right, asked = np.array([2.0, 1.0]), np.array([3.0, 1.0])
    rng = np.random.default_rng(0)
    stats = [right[i].sum() / asked[i].sum() for i in (rng.integers(0, 2, size=2) for _ in range(1000))]
    ci = [float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975))]
    assert row["accuracy_interval"] == pytest.approx(ci, abs=1e-12)
    assert f"| [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}] | - | not comparable: " in md and "over images" in md
