"""gensets.models.vlm and gensets.labels.twoway: tiny VQA models through the real loaders, hub failure,
and the two-way protocol. Offline, CPU only."""

from __future__ import annotations

import shutil
import time

import pytest

from gensets.errors import GensetsError, ModelError
from gensets.labels.twoway import (
    build_question,
    official_choice,
    official_name,
    official_question,
    parse_choice,
    score_two_way,
    two_way_accuracy,
)
from gensets.models.tiny import tiny_kinds, tiny_path
from gensets.models.vlm import load_vqa

QUESTIONS = [
    "What is this?",
    "Which of these is in the image? Answer with one option only: (A) dog (B) cat",
    "What colour is it?",
]
CLASSES = ["dog", "cat", "sports_car", "car", "tree"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")


def _images(n=3):
    from PIL import Image

    colours = [(200, 30, 30), (20, 120, 220), (240, 240, 20), (10, 10, 10), (90, 200, 90)]
    return [Image.new("RGB", (48 + 8 * i, 40 + 4 * i), colours[i % 5]) for i in range(n)]


_loaded: dict = {}


def _vqa(kind: str):
    if kind not in _loaded:
        _loaded[kind] = load_vqa(f"tiny:{kind}")
    return _loaded[kind]


def _clip():
    from gensets.models import load_classifier

    if "clip" not in _loaded:
        _loaded["clip"] = load_classifier("tiny:hf-clip", labels=CLASSES)
    return _loaded["clip"]


# ---------------------------------------------------------------- models
@pytest.mark.parametrize("kind", tiny_kinds("vqa"))
def test_tiny_vqa_answers_a_batch(kind):
    path = tiny_path(kind)
    assert (path / "model.safetensors").is_file() and not list(path.glob("*.bin"))
    m = _vqa(kind)
    assert (m.spec, m.model_id, m.revision) == (f"tiny:{kind}", f"tiny:{kind}", None)
    answers = m.answer(_images(), QUESTIONS, max_new_tokens=5)
    assert len(answers) == 3 and all(isinstance(a, str) for a in answers)
    assert m.answer(_images(), QUESTIONS, max_new_tokens=5) == answers  # greedy: deterministic
    if kind == "vilt-vqa":
        assert set(answers) <= set(m.model.config.id2label.values())
        assert {"yes", "no"} <= set(m.model.config.id2label.values())


def test_kind_read_from_config_of_local_folder():
    assert load_vqa(f"hf:{tiny_path('vilt-vqa')}").kind == "vilt"
    assert load_vqa(f"hf:{tiny_path('blip-vqa')}").kind == "blip"
    assert load_vqa(f"hf:{tiny_path('vlm')}").kind == "image-text-to-text"


def test_tiny_vlm_works_with_the_pipeline():
    from transformers import pipeline

    pipe = pipeline("image-text-to-text", model=str(tiny_path("vlm")))
    chat = [
        {
            "role": "user",
            "content": [{"type": "image", "image": _images(1)[0]}, {"type": "text", "text": "What is this?"}],
        }
    ]
    out = pipe(text=chat, max_new_tokens=3, return_full_text=False)
    assert isinstance(out[0]["generated_text"], str)


def test_hub_name_fails_fast_offline():
    t = time.monotonic()
    with pytest.raises(ModelError, match="not available") as e:
        load_vqa("hf:dandelin/vilt-b32-finetuned-vqa")
    assert time.monotonic() - t < 60  # no Hub retries (minutes offline); generous for a loaded CI machine
    assert "\n" not in str(e.value)


def test_bad_specs_and_pickle_only_folder(tmp_path):
    with pytest.raises(ModelError, match="unknown tiny VQA model"):
        load_vqa("tiny:resnet")
    with pytest.raises(ModelError, match="not a visual question answering model"):
        load_vqa("timm:resnet50")
    folder = tmp_path / "pickled"
    shutil.copytree(tiny_path("vilt-vqa"), folder)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(ModelError, match="pickle"):
        load_vqa(f"hf:{folder}")


def test_mismatched_batch():
    with pytest.raises(ValueError):
        _vqa("vilt-vqa").answer(_images(2), QUESTIONS)
    assert _vqa("vilt-vqa").answer([], []) == []


# ---------------------------------------------------------------- two-way protocol
def test_build_question_deterministic_and_balanced():
    q, options = build_question("sports_car", "dog", 7)
    assert (q, options) == build_question("sports_car", "dog", 7)
    assert sorted(options) == ["dog", "sports_car"]
    assert "(A) " in q and "(B) " in q and "sports car" in q and "_" not in q
    firsts = [build_question("cat", "dog", s)[1][0] for s in range(2000)]
    assert 0.45 < firsts.count("cat") / len(firsts) < 0.55
    assert len({build_question("cat", "dog", f"0:{i}")[1][0] for i in range(20)}) == 2


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("A", 0),
        ("(b)", 1),
        ("the answer is B", 1),
        ("The answer is B.", 1),
        ("B. cat", 1),
        ("cat", 1),
        ("A Dog", 0),
        ("DOGS", 0),
        ("(A) dog", 0),
        ("dog and cat", None),
        ("(A) cat", None),
        ("(A) dog (B) cat", None),
        ("xq7 zzz", None),
        ("", None),
        ("yes", None),
        ("hotdog", None),
    ],
)
def test_parse_choice(answer, expected):
    assert parse_choice(answer, ["dog", "cat"]) == expected


def test_parse_choice_longer_name_wins():
    assert parse_choice("a sports car", ["car", "sports_car"]) == 1
    assert parse_choice("car", ["car", "sports_car"]) == 0


def test_two_way_accuracy_counts():
    r = two_way_accuracy([0, 1, None, 1, None, 0], [0, 0, 1, 1, 0, 0])
    assert r == {"accuracy": 3 / 6, "accuracy_parsed": 3 / 4, "n": 6, "n_correct": 3, "n_unparseable": 2}
    assert two_way_accuracy([None], [0])["accuracy_parsed"] is None
    assert two_way_accuracy([], [])["accuracy"] is None


@pytest.mark.parametrize("kind", ["vilt-vqa", "vlm"])
def test_score_two_way_end_to_end(kind):
    targets = [0, 1, 2, 3, 4]
    r = score_two_way(_vqa(kind), _clip(), _images(5), targets, CLASSES, seed=0, batch_size=2, variant="shuffled",
                      decoding="greedy")  # the authors' decoding: test_the_authors_decoding_...
    assert r["n"] == 5 and len(r["items"]) == 5
    assert 0 <= r["accuracy"] <= 1
    assert r["accuracy_parsed"] is None or r["accuracy"] <= r["accuracy_parsed"] <= 1
    for item, t in zip(r["items"], targets, strict=True):
        assert item["target"] == t and item["wrong"] != t
        assert item["options"][item["correct"]] == CLASSES[t]
        assert CLASSES[item["wrong"]] in item["options"]
    again = score_two_way(_vqa(kind), _clip(), _images(5), targets, CLASSES, seed=0, variant="shuffled",
                          decoding="greedy")
    assert again["items"] == r["items"]  # batch size does not matter, same seed: same questions


class _Scripted:
    """A stand-in VLM: answers with the true class name of each image (oracle) or a fixed string."""

    def __init__(self, truth: dict, fixed: str | None = None):
        self.truth, self.fixed = truth, fixed

    def answer(self, images, questions, max_new_tokens=10, **decoding):
        return [self.fixed if self.fixed is not None else f"It is a {self.truth[id(im)]}." for im in images]


@pytest.mark.parametrize("fixed", [None, "A", "(B)", "no idea"])
def test_score_two_way_parsed_answers(fixed):
    images, targets = _images(5), [4, 3, 2, 1, 0]
    vlm = _Scripted(
        {id(im): CLASSES[t].replace("_", " ") for im, t in zip(images, targets, strict=True)}, fixed
    )
    r = score_two_way(vlm, _clip(), images, targets, CLASSES, seed=3, batch_size=2, variant="shuffled")
    first = sum(item["correct"] == 0 for item in r["items"])
    expected = {None: (5, 0), "A": (first, 0), "(B)": (5 - first, 0), "no idea": (0, 5)}[fixed]
    assert (r["n_correct"], r["n_unparseable"]) == expected
    assert r["accuracy"] == expected[0] / 5
    assert r["accuracy_parsed"] == (None if fixed == "no idea" else expected[0] / 5)


# ---------------------------------------------------------------- two-way, the authors' form (the default)
def test_official_names_are_normalised_as_the_authors_clip_evaluation():
    assert [official_name(n) for n in ("binder_(closed)", "coffee/french press", "t-shirt", "mixing/salad_bowl",
                                       "Alarm_Clock")] == ["binder (closed)", "coffee or french press", "t shirt",
                                                           "mixing or salad bowl", "alarm clock"]
    assert official_question("t-shirt", "coffee/french press") == (
        "What is the main object in this image? Choose from the following list: t shirt, coffee or french press.",
        ["t shirt", "coffee or french press"])


@pytest.mark.parametrize(("answer", "options", "official", "shuffled"), [
    ("It is a pencil.", ["pen", "mug"], 0, None),  # substring (authors) vs whole words (gensets)
    ("I see a television.", ["tv", "mug"], 0, None),  # the authors' synonym map
    ("A French press on a table", ["coffee or french press", "mug"], 0, None),
    ("B", ["pen", "mug"], None, 1),  # no letters in the authors' form
    ("a pen and a mug", ["pen", "mug"], None, None),  # both: left out
    ("a can opener", ["pen", "can opener"], 1, 1),  # nested names, the authors' order: "can opener" first
    ("a pen next to a can opener", ["pen", "can opener"], 1, None),
    ("a pen next to a can opener", ["can opener", "pen"], 0, None),
    ("a drying rack for plates", ["plate", "drying rack for plates"], 1, 1),
    ("nothing I know", ["pen", "mug"], None, None),
])
def test_official_answer_matching_against_the_shuffled_variant(answer, options, official, shuffled):
    assert official_choice(answer, options) == official
    assert parse_choice(answer, options) == shuffled


@pytest.mark.parametrize(("fixed", "expected"), [(None, (5, 0)), ("B", (0, 5)), ("no idea", (0, 5))])
def test_score_two_way_official(fixed, expected):
    images, targets = _images(5), [4, 3, 2, 1, 0]
    vlm = _Scripted({id(im): CLASSES[t].replace("_", " ") for im, t in zip(images, targets, strict=True)}, fixed)
    r = score_two_way(vlm, _clip(), images, targets, CLASSES, batch_size=2)
    for item, t in zip(r["items"], targets, strict=True):
        assert item["correct"] == 0 and item["options"][0] == official_name(CLASSES[t])  # the true class first
        assert item["question"] == official_question(CLASSES[t], CLASSES[item["wrong"]])[0]
    if fixed is None:  # the true name is said; "sports car" also says "car": both named, left out (authors' rule)
        double = sum(CLASSES[i["target"]] == "sports_car" and CLASSES[i["wrong"]] == "car" for i in r["items"])
        expected = (5 - double, double)
    assert (r["n_correct"], r["n_unparseable"]) == expected


@pytest.mark.parametrize("decoding", ["greedy", "authors"])
def test_the_spelling_tiny_vlm_gives_the_authors_accuracy_a_hand_count(decoding):
    """tiny:vlm-chair (the smoke stand-in for LLaVa) answers "chair" through the real loader and generate, under
    either decoding: TRUE on a chair image, FALSE where chair is the wrong option, left out otherwise."""
    classes = ["backpack", "chair", "mug"]
    targets = [1, 1, 0, 2, 0, 2]
    wrong = [0, 2, 1, 1, 2, 0]  # TRUE, TRUE, FALSE, FALSE, neither, neither
    r = score_two_way(_vqa("vlm-chair"), None, _images(6), targets, classes, batch_size=4, wrong=wrong,
                      decoding=decoding)
    assert [i["answer"] for i in r["items"]] == ["chair"] * 6
    assert [i["choice"] for i in r["items"]] == [0, 0, 1, 1, None, None]
    assert (r["n_correct"], r["n_unparseable"]) == (2, 2)
    from gensets.labels.twoway import two_way_outcomes

    rows = [{"correct1": i["choice"] == i["correct"], "top5": [] if i["chosen"] is None else [i["chosen"]]}
            for i in r["items"]]
    assert two_way_outcomes(rows) == [True, True, False, False]  # 2 / (2 + 2), the authors' accuracy


class _Recorder(_Scripted):
    """Answers "no idea" and keeps how it was asked to decode."""

    def __init__(self):
        super().__init__({}, "no idea")
        self.calls = []

    def answer(self, images, questions, max_new_tokens=10, **decoding):
        self.calls.append({"max_new_tokens": max_new_tokens, **decoding})
        return super().answer(images, questions)


def test_two_way_asks_for_the_authors_decoding_by_default():
    """eval_imagenet_d.py's defaults (--temperature 0.2, --max-new-tokens 512, conv_mode llava_v1), one seed per
    image from its key; greedy (10 tokens, no seeds, the chat template) only when asked."""
    from gensets.records import derive_seed

    keys = ["a/1", "a/2", "b/3"]
    vlm = _Recorder()
    score_two_way(vlm, _clip(), _images(3), [0, 1, 2], CLASSES, seed=7, batch_size=2, keys=keys)
    assert vlm.calls == [
        {"max_new_tokens": 512, "temperature": 0.2, "seeds": [derive_seed(7, "a/1"), derive_seed(7, "a/2")],
         "prompt": "llava_v1"},
        {"max_new_tokens": 512, "temperature": 0.2, "seeds": [derive_seed(7, "b/3")], "prompt": "llava_v1"}]
    vlm = _Recorder()
    score_two_way(vlm, _clip(), _images(3), [0, 1, 2], CLASSES, keys=keys, decoding="greedy")
    assert vlm.calls == [{"max_new_tokens": 10, "temperature": None, "seeds": None, "prompt": "chat"}]
    with pytest.raises(GensetsError, match="decoding"):
        score_two_way(vlm, _clip(), _images(1), [0], CLASSES, decoding="beam")


def test_the_authors_decoding_on_a_llava_model_by_hand():
    """On the tiny LLaVA: LLaVA-1.5's llava_v1 prompt, typed here from LLaVA's conversation.py; each answer is
    what ``model.generate`` gives here on that prompt after ``torch.manual_seed`` of the image's seed (sampling at
    T 0.2, 512 new tokens), whichever batch the image is in."""
    import torch

    from gensets.models.vlm import llava_v1_prompt

    vlm = _vqa("vlm")
    q = official_question(CLASSES[0], CLASSES[1])[0]
    assert llava_v1_prompt(q) == (
        "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the human's questions. USER: <image>\n" + q + " ASSISTANT:")
    images, seeds = _images(2), [11, 12]
    got = vlm.answer(images, [q, q], 512, temperature=0.2, seeds=seeds, prompt="llava_v1")
    assert vlm.answer(images[1:], [q], 512, temperature=0.2, seeds=seeds[1:], prompt="llava_v1") == got[1:]
    for im, seed, answer in zip(images, seeds, got, strict=True):
        inputs = vlm.processor(images=[im.convert("RGB")], text=[llava_v1_prompt(q)], return_tensors="pt")
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = vlm.model.generate(**inputs, do_sample=True, temperature=0.2, max_new_tokens=512, num_beams=1,
                                     pad_token_id=vlm.pad_token_id)
        new = out[:, inputs["input_ids"].shape[1]:]
        assert answer == vlm.processor.batch_decode(new, skip_special_tokens=True)[0].strip()
    assert got != vlm.answer(images, [q, q], 512, temperature=0.2, seeds=[13, 14], prompt="llava_v1")


# ---------------------------------------------------------------- LLaVA as the ImageNet-D authors ran it
def test_expand2square_centres_the_image_on_the_given_colour():
    from PIL import Image

    from gensets.models.vlm import expand2square

    wide = Image.new("RGB", (6, 3), (255, 0, 0))
    sq = expand2square(wide, (1, 2, 3))
    assert sq.size == (6, 6)
    assert [sq.getpixel((0, y)) for y in range(6)] == [(1, 2, 3), (255, 0, 0), (255, 0, 0), (255, 0, 0),
                                                       (1, 2, 3), (1, 2, 3)]  # offset (6 - 3) // 2 = 1
    tall = expand2square(Image.new("RGB", (2, 5), (0, 9, 0)), (7, 7, 7))
    assert tall.size == (5, 5)
    assert [tall.getpixel((x, 0)) for x in range(5)] == [(7, 7, 7), (0, 9, 0), (0, 9, 0), (7, 7, 7), (7, 7, 7)]
    assert expand2square(sq, (0, 0, 0)) is sq


def test_a_llava_model_pads_to_square_and_names_how_it_ran():
    """pad-square (the default for LLaVA models) answers about a wide image as crop answers about that image
    padded with the processor's mean; the dtype and aspect are the model's variant; other models have none."""
    from PIL import Image

    from gensets.models.vlm import expand2square

    pad = load_vqa("tiny:vlm", device="cpu")
    crop = load_vqa("tiny:vlm", device="cpu", aspect="crop")
    assert (pad.variant, crop.variant) == ("fp32 on cpu, pad-square", "fp32 on cpu, crop")
    wide = Image.new("RGB", (96, 32), (250, 10, 10))
    wide.paste(Image.new("RGB", (32, 32), (10, 10, 250)), (64, 0))  # the right third blue: cropped away
    mean = tuple(int(x * 255) for x in crop.processor.image_processor.image_mean)
    padded = expand2square(wide, mean)
    ip = crop.processor.image_processor
    assert not (ip(wide, return_tensors="pt")["pixel_values"] == ip(padded, return_tensors="pt")["pixel_values"]).all()
    q = ["What is this?"]
    assert pad.answer([wide], q, max_new_tokens=6) == crop.answer([padded], q, max_new_tokens=6)
    half = load_vqa("tiny:vlm-chair", device="cpu", dtype="fp16")
    assert half.variant == "fp16, pad-square" and str(half.model.dtype) == "torch.float16"
    assert half.answer([wide], q) == ["chair"]  # the pixels reach the fp16 model as fp16
    from gensets.quality.metrics import vqa_inputs  # VQAScore's inputs too

    assert vqa_inputs(half, [wide], q)["pixel_values"].dtype == half.model.dtype
    assert _vqa("vilt-vqa").variant == ""
    with pytest.raises(ModelError, match="LLaVA models' settings"):
        load_vqa("tiny:vilt-vqa", device="cpu", aspect="crop")
    with pytest.raises(ModelError, match="unknown dtype"):
        load_vqa("tiny:vlm", dtype="bf8")
