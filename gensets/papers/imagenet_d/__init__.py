"""ImageNet-D (Zhang et al. 2024): the builder (builder.py), the report (report.py), its class list told from what it
is (identify.py), the released ImageNet-D read as its authors publish it (released.py) and its label space's class
map and zero-shot prompt (label_space.py)."""
