"""timm:<registry name | hf-hub:org/repo | local-dir:PATH>[@revision]"""

from gensets.errors import ModelError
from gensets.models.family import ModelFamily, split_revision


class Timm(ModelFamily):
    loaders = {"classifier": "gensets.models.classifier:_load_timm"}

    @classmethod
    def parse(cls, raw, name):
        if name.startswith("local-dir:"):
            if not name[len("local-dir:"):].strip():
                raise ModelError(f"bad model spec {raw!r}: empty path after 'local-dir:'")
            return name, None
        name, revision = split_revision(raw, name)
        if name.startswith("hf-hub:") and not name[len("hf-hub:"):].strip():
            raise ModelError(f"bad model spec {raw!r}: empty repo after 'hf-hub:'")
        return name, revision
