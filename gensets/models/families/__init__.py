"""The built-in model families, one file each, declared here as ``"module:Class"`` targets (imported when a spec
of that kind is first parsed); the order is the one messages list them in. See gensets.models.family."""

from gensets.registry import FAMILIES

for _kind, _target in (
    ("timm", "gensets.models.families.timm:Timm"),
    ("open_clip", "gensets.models.families.open_clip:OpenClip"),
    ("hf", "gensets.models.families.hf:Transformers"),
    ("diffusers", "gensets.models.families.diffusers:Diffusers"),
    ("torchvision", "gensets.models.families.torchvision:Torchvision"),
    ("tiny", "gensets.models.families.built:Tiny"),
    ("random", "gensets.models.families.built:Random"),
    ("sscd", "gensets.models.families.sscd:SSCD"),
):
    FAMILIES.register(_kind, _target)
