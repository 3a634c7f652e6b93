"""Models: spec strings, classifiers, generators and tiny offline models.

Heavy libraries (torch, diffusers, transformers, timm, open_clip) are imported only when a model is
loaded, so importing this package is cheap.
"""

from __future__ import annotations

from gensets.models.classifier import Classifier, load_classifier
from gensets.models.generator import Generator, load_generator
from gensets.models.spec import ModelSpec, parse_spec
from gensets.models.tiny import tiny_path
from gensets.models.vlm import VQAModel, load_vqa

__all__ = [
    "Classifier",
    "Generator",
    "ModelSpec",
    "load_classifier",
    "load_generator",
    "parse_spec",
    "tiny_path",
    "VQAModel",
    "load_vqa",
]
