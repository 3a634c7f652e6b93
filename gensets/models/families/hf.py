"""hf:<org/repo | local path>[@revision] (transformers; the task is read from the config)"""

from gensets.models.family import ModelFamily


class Transformers(ModelFamily):
    loaders = {"classifier": "gensets.models.classifier:_load_hf"}
