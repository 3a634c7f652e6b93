"""open_clip:<arch>/<pretrained>[@revision] | open_clip:hf-hub:org/repo[@revision] | open_clip:local-dir:PATH"""

from gensets.errors import ModelError
from gensets.models.family import ModelFamily, split_revision


class OpenClip(ModelFamily):
    loaders = {"classifier": "gensets.models.classifier:_load_open_clip"}

    @classmethod
    def parse(cls, raw, name):
        revision = None
        if not name.startswith("local-dir:"):
            name, revision = split_revision(raw, name)
        if name.startswith(("hf-hub:", "local-dir:")):
            if not name.partition(":")[2].strip():
                raise ModelError(f"bad model spec {raw!r}: empty repo or path after {name.partition(':')[0]!r}")
        else:
            arch, slash, pretrained = name.partition("/")
            if not slash or not arch or not pretrained:
                raise ModelError(f"bad model spec {raw!r}: expected open_clip:<arch>/<pretrained>, "
                                 "open_clip:hf-hub:org/repo or open_clip:local-dir:PATH")
        return name, revision
