"""No prompt is cut silently (issue #17, item 3): every generated sample records the token counts of its prompt and
negative prompt and, when one is longer than the text encoder's window, the text the encoder received; the build
and the card count the cuts; ``long_prompts: error`` stops before the first image.

The counts are checked against the tiny:sd tokenizer loaded here from its folder with transformers, not through
gensets' Generator. GenBench's NP negative prompt on CIFAR-10 lists the 9 other classes and the authors' quality
negatives: about 200 CLIP tokens, far over the window of 77.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow  # `make test-slow` and CI: builds in fresh processes

SMOKE = ROOT / "configs" / "genbench.smoke.yaml"
SMALL = ("--set", "strategies=[ST,NP]", "--set", "classes=[airplane,cat]")  # 2 x 2 x 2 units, 12 images


def metas(folder: Path, pattern: str) -> list[dict]:
    """The json provenance of every sample in the shards ``folder.glob(pattern)``, read with tarfile."""
    out = []
    for shard in sorted(folder.glob(pattern)):
        with tarfile.open(shard) as tar:
            out += [json.load(tar.extractfile(m)) for m in tar.getmembers() if m.name.endswith(".json")]
    return out


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import CLIPTokenizer

    from gensets.models.tiny import tiny_path

    return CLIPTokenizer.from_pretrained(tiny_path("sd") / "tokenizer")


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    """The small smoke variant built and finalized under the default ``long_prompts: truncate``."""
    ws = tmp_path_factory.mktemp("tokens") / "ws"
    built = run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL, check=0)
    run_cli("finalize", ws, check=0)
    return ws, built


def test_a_cut_negative_prompt_records_its_count_and_the_text_the_encoder_received(truncated, tokenizer):
    ws, _ = truncated
    np_samples = [m for m in metas(ws / "candidates", "*.tar") if m["strategy"] == "NP"]
    assert len(np_samples) == 6
    window = tokenizer.model_max_length
    assert window == 77
    for m in np_samples:
        ids = tokenizer(m["negative_prompt"]).input_ids  # untruncated, BOS and EOS included
        assert m["negative_prompt_tokens"] == len(ids) > window
        # what diffusers' encode_prompt feeds the encoder: BOS + the first 75 text tokens + EOS (its warning
        # names ids[window - 1:-1] as the part cut), so the recorded text holds exactly the first 75
        kept = ids[: window - 1] + [tokenizer.eos_token_id]
        assert m["negative_prompt_received"] == tokenizer.decode(kept, skip_special_tokens=True)
        # ... the start of the text as the tokenizer writes it (lowercase, punctuation spaced out)
        assert tokenizer.decode(ids, skip_special_tokens=True).startswith(m["negative_prompt_received"])
        assert len(m["negative_prompt_received"]) < len(m["negative_prompt"])
        assert m["generator"]["text_window"] == window
        # the prompt itself is short: its count, nothing cut
        assert m["prompt_tokens"] == len(tokenizer(m["prompt"]).input_ids) < window
        assert m["prompt_received"] is None


def test_a_short_prompt_records_its_count_and_no_cut_text(truncated, tokenizer):
    ws, _ = truncated
    st = [m for m in metas(ws / "candidates", "*.tar") if m["strategy"] == "ST"]
    assert len(st) == 6
    for m in st:
        assert m["prompt"] in ("airplane", "cat")  # the authors' simple template is the class name alone
        assert m["prompt_tokens"] == len(tokenizer(m["prompt"]).input_ids) and m["prompt_received"] is None
        # no negative prompt: diffusers encodes "" for classifier-free guidance, BOS and EOS
        assert m["negative_prompt"] == "" and m["negative_prompt_tokens"] == 2
        assert m["negative_prompt_received"] is None


def test_the_build_prints_the_cuts_and_the_card_counts_them_per_config(truncated):
    ws, built = truncated
    # 6 NP images, each with its negative prompt cut; no prompt cut
    assert "0 prompts and 6 negative prompts cut to the text encoder's 77 tokens (long_prompts: truncate" \
        in built.stdout, built.stdout
    assert "Token indices sequence length" not in built.stderr  # recorded, so not warned about
    published = metas(ws / "dataset", "*/train-*.tar")
    longest = max(m["negative_prompt_tokens"] for m in published if m["strategy"] == "NP")
    longest_st = max(m["prompt_tokens"] for m in published if m["strategy"] == "ST")
    card = (ws / "dataset" / "README.md").read_text()
    # config | generated images | longest prompt | prompts cut | longest negative prompt | negative prompts cut | window
    assert f"| cifar-10-st | 6 | {longest_st} | 0 | 2 | 0 | 77 |" in card
    assert re.search(rf"\| cifar-10-np \| 6 \| \d+ \| 0 \| {longest} \| 6 \| 77 \|", card), card


def test_long_prompts_error_stops_before_any_image_in_one_line(tmp_path, truncated, tokenizer):
    ws = tmp_path / "ws"
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *SMALL, "--set", "generator.long_prompts=error")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    found = re.fullmatch(rf"gensets: error: {re.escape(str(SMOKE))}: unit [0-9a-f]{{16}} \(cifar-10-np / "
                         r"(airplane|cat)\): negative prompt of (\d+) tokens exceeds the text encoder's 77 "
                         r"\(long_prompts: error\)", lines[0])
    assert found, lines
    # the count is that class's NP negative prompt's, as the tokenizer counts it (the same text as truncate built)
    negative = next(m["negative_prompt"] for m in metas(truncated[0] / "candidates", "*.tar")
                    if m["strategy"] == "NP" and m["label"] == found[1])
    assert int(found[2]) == len(tokenizer(negative).input_ids)
    assert "Traceback" not in r.stderr
    # checked before the build's first unit: not even the ST units (short prompts, planned first) ran
    assert not list((ws / "candidates").glob("*.tar"))


def test_a_prompt_made_while_the_unit_runs_is_checked_before_its_first_image(tmp_path, tokenizer):
    """CE's prompts come from the expansion model, so they are checked in the unit, before it generates. 40
    new T5 tokens of the tiny random model decode to ~40 rare words: well over 77 CLIP tokens."""
    ce = ("--set", "strategies=[CE]", "--set", "classes=[cat]", "--set", "expansion.max_new_tokens=40",
          "--set", "expansion.min_new_tokens=40")
    ws = tmp_path / "error"
    r = run_cli("build", SMOKE, "--out", ws, "--quiet", *ce, "--set", "generator.long_prompts=error")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert re.search(r"^gensets: error: .*genbench.smoke.yaml: unit [0-9a-f]{16} \(cifar-10-ce / cat\): prompt of \d+ tokens exceeds the text encoder's "
                     r"77 \(long_prompts: error\)$", r.stderr.strip()), r.stderr
    assert not list((ws / "candidates").glob("*.tar"))
    ws = tmp_path / "truncate"
    run_cli("build", SMOKE, "--out", ws, "--quiet", *ce, check=0)
    samples = metas(ws / "candidates", "*.tar")
    assert samples
    for m in samples:
        ids = tokenizer(m["prompt"]).input_ids
        assert m["prompt_tokens"] == len(ids) > 77
        assert m["prompt_received"] == tokenizer.decode(ids[:76] + [tokenizer.eos_token_id], skip_special_tokens=True)
