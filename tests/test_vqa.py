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


def test_generated_questions_are_balanced_and_no_names_something_absent():
    from gensets.builders.vqa import ATTRIBUTES, OBJECTS, PromptSpec, _mentions, generated_questions

    prompts = [PromptSpec("a red car next to a dog", ("car", "dog"), {"car": ("red",)}),
               PromptSpec("a cat sleeping on a wooden chair", ("cat", "chair"), {"chair": ("wooden",)}),
               PromptSpec("two elephants under a blue sky with a kite", ("elephant", "kite"), {})]
    for seed in range(20):
        for p in prompts:
            qs = generated_questions(p, OBJECTS, ATTRIBUTES, seed)
            yes = [q for q in qs if q["answer"] == "yes"]
            no = [q for q in qs if q["answer"] == "no"]
            assert len(yes) == len(no) == len(p.objects) + sum(len(a) for a in p.attributes.values())
            for q in no:
                named = q["question"].removeprefix("Is there a ").removeprefix("Is the ").rstrip("?")
                named = named.removesuffix(" in the image").split(" ")[-1] if q["kind"] == "attribute" else \
                    named.removesuffix(" in the image")
                assert not _mentions(p.text, named), (p.text, q)
            for q in yes:
                assert any(_mentions(p.text, w) for w in q["question"].rstrip("?").split()[2:])


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
