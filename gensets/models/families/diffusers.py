"""diffusers:<org/repo | local path>[@revision]"""

from gensets.models.family import ModelFamily


class Diffusers(ModelFamily):
    loaders = {"generator": "gensets.models.generator:_load_diffusers"}
