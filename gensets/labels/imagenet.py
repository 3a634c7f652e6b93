"""The ImageNet-1k label space: CLIP's readable class names (for zero-shot) in index order."""

from __future__ import annotations

from ..sources.packaged import genbench_datasets


def imagenet_names() -> list[str]:
    """The 1000 ImageNet-1k class names as published with OpenAI CLIP, in class-index order."""
    names = genbench_datasets()["imagenet-1k"]["classes"]
    assert len(names) == 1000
    return list(names)


def imagenet_templates() -> list[str]:
    """OpenAI CLIP's 80 ImageNet prompt templates."""
    return list(genbench_datasets()["imagenet-1k"]["templates"])
