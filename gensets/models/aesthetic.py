"""The LAION aesthetic predictor v2's network (christophschuhmann/improved-aesthetic-predictor)."""

from __future__ import annotations


def aesthetic_mlp(input_size: int):
    """The aesthetic predictor v2's MLP, as improved-aesthetic-predictor's simple_inference.py defines it (its
    state dict keys: layers.0, layers.2, layers.4, layers.6, layers.7; the dropouts act only in training)."""
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_size = input_size
            self.layers = nn.Sequential(nn.Linear(input_size, 1024), nn.Dropout(0.2), nn.Linear(1024, 128),
                                        nn.Dropout(0.2), nn.Linear(128, 64), nn.Dropout(0.1), nn.Linear(64, 16),
                                        nn.Linear(16, 1))

        def forward(self, x):
            return self.layers(x)

    return MLP()
