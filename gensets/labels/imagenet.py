"""The ImageNet-1k label space: CLIP's readable class names (for zero-shot) in index order."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources


@cache
def genbench_datasets() -> dict:
    text = resources.files("gensets.data.genbench").joinpath("datasets.json").read_text(encoding="utf-8")
    return json.loads(text)["datasets"]


def imagenet_names() -> list[str]:
    """The 1000 ImageNet-1k class names as published with OpenAI CLIP, in class-index order."""
    names = genbench_datasets()["imagenet-1k"]["classes"]
    assert len(names) == 1000
    return list(names)


def imagenet_templates() -> list[str]:
    """OpenAI CLIP's 80 ImageNet prompt templates."""
    return list(genbench_datasets()["imagenet-1k"]["templates"])
