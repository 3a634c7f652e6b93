"""tiny:<kind> (small random models built offline: gensets.models.tiny) and random:<kind> (full-size architectures,
random weights, built offline: gensets.models.random; for timing only). Each kind names the loaders (other families)
that read its folder."""

from gensets.errors import ModelError, did_you_mean
from gensets.models.family import ModelFamily
from gensets.registry import RANDOM_MODELS, TINY_MODELS


class _Built(ModelFamily):
    built = True
    registry = TINY_MODELS

    @classmethod
    def parse(cls, raw, name):
        if name not in cls.registry:
            raise ModelError(f"bad model spec {raw!r}: unknown {cls.name} model {name!r}"
                             f"{did_you_mean(name, cls.registry)} (expected one of {', '.join(cls.registry)})")
        return name, None


class Tiny(_Built):
    registry = TINY_MODELS


class Random(_Built):
    registry = RANDOM_MODELS
