"""Every VLM answer is stored in the results database (``answers``: its question, raw text and flag), so the
authors' counts can be redone from gensets' output: on 1,500 random answers the stored flags are the TRUE / FALSE /
DOUBLE / TODO of ImageNet-D's ``LLaVA/compute_accuracy.py``, re-implemented here on its own (its name normalisation,
its synonym map as data of this test, its substring tests and its two nested pairs), and the run's top-1 is its
TRUE / (TRUE + FALSE). The VQA protocol stores its answers too; and a LLaVA model's dtype is the run's precision."""

from __future__ import annotations

import random

import pytest
from PIL import Image

from gensets.evaluation import store
from gensets.evaluation.data import Split
from gensets.evaluation.protocols.base import Models
from gensets.evaluation.runner import EvalConfig, computed_in
from gensets.registry import PROTOCOLS
from gensets.sources.packaged import imagenet_d_class_names

# compute_accuracy.py's word_mapping_dict, as data: the normalised class name, then the words that also count for it
SYNONYMS = """dishcloth: dishrag | weight (exercise): dumbbell, weight | nail (fastener): nail | tv: television
iron (for clothes): iron | t shirt: t-shirt, shirt | laptop (open): laptop | dress shoe (men): dress shoe
binder (closed): binder | portable heater: heater | computer mouse: mouse | still camera: camera
lampshade: lamp shade | trash bin: trash can | winter glove: glove | band aid: band-aid, bandaid
toilet paper roll: roll of toilet paper | pill bottle: pill | soup bowl: bowl of soup | water bottle: bottle of water
pop can: can of | weight scale: scale | sandal: flip flop | swimming trunks: swimming trunk | bread loaf: bread
coffee or french press: coffee press, french press, coffee machine, coffee maker
mixing or salad bowl: mixing bowl, salad bowl | alarm clock: clock | wheel: bicycle wheel | ladle: spoon
matchstick: match | cellphone: cell phone, mobile phone"""
WORDS = {k.strip(): [w.strip() for w in v.split(",")]
         for line in SYNONYMS.splitlines() for item in line.split(" | ") for k, v in [item.split(":")]}


def authors_name(name: str) -> str:
    """The category names the authors' evaluate_vlm.py writes into the questions (and compute_accuracy.py reads)."""
    return name.replace("_", " ").replace("-", " ").replace("/", " or ").lower()


def authors_flag(gt: str, pred: str, answer: str) -> str:
    """compute_accuracy.py's flag of one answer, written anew."""
    text = answer.lower()

    def says(word):
        return word in text or any(w in text for w in WORDS.get(word, ()))

    g, p = says(gt), says(pred)
    if (gt, pred) in (("pen", "can opener"), ("plate", "drying rack for plates")):
        return "FALSE" if p else "TRUE" if g else "TODO"
    if (gt, pred) in (("can opener", "pen"), ("drying rack for plates", "plate")):
        return "TRUE" if g else "FALSE" if p else "TODO"
    return "DOUBLE" if g and p else "TRUE" if g else "FALSE" if p else "TODO"


class _Scripted:
    """A VLM whose answer to each image is given by the image's key."""

    model_id, revision = "scripted", None

    def __init__(self, by_key: dict):
        self.by_key = by_key

    def answer(self, images, questions, max_new_tokens=10, **decoding):
        return [self.by_key[im.info["key"]] for im in images]


def _answers(n: int, seed: int = 0) -> list[tuple[int, int, str]]:
    """(true class, wrong class, answer) of ``n`` random two-way questions: each names the true class, the wrong one,
    both, neither, a synonym or a piece of a name, in any case; the two nested pairs among them."""
    names = imagenet_d_class_names()
    rng = random.Random(seed)
    index = {authors_name(x): i for i, x in enumerate(names)}
    nested = [(index[a], index[b]) for a, b in (("pen", "can opener"), ("can opener", "pen"), ("plate", "drying rack "
              "for plates"), ("drying rack for plates", "plate"))]
    out = []
    for i in range(n):
        t, w = nested[i % 4] if i % 10 == 0 else rng.sample(range(len(names)), 2)
        tn, wn = authors_name(names[t]), authors_name(names[w])
        pick = rng.choice([tn, wn, f"{tn} and {wn}", "I am not sure", rng.choice(WORDS.get(tn, [tn])),
                           rng.choice(WORDS.get(wn, [wn])), tn.split()[0], wn[: max(2, len(wn) // 2)],
                           authors_name(rng.choice(names))])
        template = rng.choice(["{}", "The main object is a {}.", "It looks like {} to me", "{}!".upper()])
        text = template.format(pick)
        out.append((t, w, text.upper() if rng.random() < 0.2 else text))
    return out


def test_stored_answers_reproduce_the_authors_counts(tmp_path):
    names = imagenet_d_class_names()
    qs = _answers(1500)
    keys = [f"background/k{i:05d}.png" for i in range(len(qs))]
    split = Split("background", "test", names, records=lambda: iter(()),
                  wrong_options={k: w for k, (_, w, _) in zip(keys, qs, strict=True)})
    cfg = EvalConfig("hf:zcs15/ImageNet-D", ("scripted",), tmp_path / "r.duckdb", protocol="two-way",
                     decoding="greedy", batch_size=64)
    p = PROTOCOLS.get("two-way")(_Scripted({k: a for k, (_, _, a) in zip(keys, qs, strict=True)}), split,
                                 first={}, cfg=cfg, models=Models())
    rows, extra = [], {}
    for start in range(0, len(qs), 64):
        images = []
        for k in keys[start:start + 64]:
            im = Image.new("RGB", (4, 4))
            im.info["key"] = k
            images.append(im)
        scored = p.score(images, [{"key": k, "target": t} for k, (t, _, _) in
                                  zip(keys[start:start + 64], qs[start:start + 64], strict=True)])
        rows += scored.rows
        for name, values in scored.extra.items():
            extra.setdefault(name, []).extend(values)
    mets = p.metrics(rows, extra)
    con = store.connect(cfg.db)
    store.write_run(con, {"dataset": cfg.dataset, "dataset_revision": "r", "config": "background", "split": "test",
                          "model": "scripted", "model_id": "scripted", "model_revision": None,
                          "protocol": p.run_protocol, "label_space": "dataset", "n": len(rows), "settings": "s",
                          "class_names": names}, rows, mets, p.answers(rows, extra))
    stored = {k: (q, a, f) for k, q, a, f in con.execute("SELECT key, question, answer, flag FROM answers").fetchall()}
    top1 = con.execute("SELECT value FROM metrics WHERE name = 'top1'").fetchone()[0]
    con.close()
    assert len(stored) == len(qs)
    counts = dict.fromkeys(("TRUE", "FALSE", "DOUBLE", "TODO"), 0)
    for k, (t, w, answer) in zip(keys, qs, strict=True):
        question, said, flag = stored[k]
        gt, pred = authors_name(names[t]), authors_name(names[w])
        assert said == answer and question.endswith(f"{gt}, {pred}.")
        assert flag == authors_flag(gt, pred, answer), (gt, pred, answer)
        counts[flag] += 1
    assert min(counts.values()) > 50, counts  # every flag well represented among the random answers
    assert top1 == pytest.approx(counts["TRUE"] / (counts["TRUE"] + counts["FALSE"]))
    unparseable = next(m["value"] for m in mets if m["name"] == "unparseable")
    assert unparseable == pytest.approx((counts["DOUBLE"] + counts["TODO"]) / len(qs))


def test_vqa_answers_are_stored_with_their_flags(tmp_path):
    class Says:
        model_id, revision, variant = "says", None, ""

        def answer(self, images, questions, max_new_tokens=10, **kw):
            return ["Yes.", "no", "maybe"][:len(images)]

    split = Split("default", "test", None, records=lambda: iter(()))
    cfg = EvalConfig("x", ("says",), tmp_path / "r.duckdb", protocol="vqa")
    p = PROTOCOLS.get("vqa")(Says(), split, first={}, cfg=cfg, models=Models())
    assert p.run_protocol == "vqa"
    qs = [{"question": "Is it red?", "answer": "yes"}, {"question": "Is it red?", "answer": "yes"},
          {"question": "Is it red?", "answer": "no"}]
    scored = p.score([Image.new("RGB", (4, 4))] * 3, [{"key": f"i{i}", "target": None, "meta": {"questions": [q]}}
                                                       for i, q in enumerate(qs)])
    said = p.answers(scored.rows, scored.extra)
    assert [(a["key"], a["answer"], a["flag"]) for a in said] == [("i0/q0", "Yes.", "TRUE"), ("i1/q0", "no", "FALSE"),
                                                                 ("i2/q0", "maybe", "TODO")]
    assert all(a["question"] == "Is it red?" for a in said)


def test_a_llava_model_in_fp16_is_recorded_as_fp16():
    """runs.precision is the dtype the model computed in: a LLaVA model loaded in fp16 is fp16 whatever --precision
    (autocast) was; a model in fp32 is what autocast made it."""
    import torch

    class Half:
        model = torch.nn.Linear(2, 2).to(torch.float16)

    Half.model.dtype = torch.float16  # as a transformers model has it
    assert computed_in(Half(), "fp32") == "fp16"

    class Plain:
        model = torch.nn.Linear(2, 2)

    assert computed_in(Plain(), "fp32") == "fp32" and computed_in(Plain(), "bf16") == "bf16"
