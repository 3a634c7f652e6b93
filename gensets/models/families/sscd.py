"""sscd:PATH: a TorchScript file of Meta's SSCD copy-detection models (Pizzi et al., CVPR 2022; e.g.
``sscd_disc_mixup.torchscript.pt``), the descriptor Somepalli et al. (CVPR 2023, "Diffusion Art or Digital
Forgery?") used to find Stable Diffusion's replicas of training images. An image embedder only
(gensets.models.embedder); the file is read from disk, never downloaded."""

from gensets.errors import ModelError
from gensets.models.family import ModelFamily


class SSCD(ModelFamily):
    loaders = {"embedder": "gensets.models.embedder:load_sscd"}
    grammar = "<path to a .pt TorchScript file>"

    @classmethod
    def parse(cls, raw, name):
        if not name.endswith(".pt"):
            raise ModelError(f"bad model spec {raw!r}: sscd: takes the path of SSCD's TorchScript file "
                             "(e.g. sscd:models/sscd_disc_mixup.torchscript.pt)")
        return name, None
