"""torchvision:<architecture>@<WEIGHTS> (torchvision.models, e.g. alexnet@IMAGENET1K_V1: the weights enum's member
is required, it names the weights file)"""

import re

from gensets.errors import ModelError
from gensets.models.family import ModelFamily

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Torchvision(ModelFamily):
    loaders = {"classifier": "gensets.models.classifier:_load_torchvision"}

    @classmethod
    def parse(cls, raw, name):
        name, sep, revision = name.partition("@")
        if not (sep and _IDENTIFIER.match(name) and _IDENTIFIER.match(revision)):
            raise ModelError(f"bad model spec {raw!r}: expected torchvision:<architecture>@<WEIGHTS>, "
                             "e.g. torchvision:alexnet@IMAGENET1K_V1 (a torchvision.models weights enum member)")
        return name, revision
