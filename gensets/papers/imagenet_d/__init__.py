"""ImageNet-D (Zhang et al. 2024): the builder (builder.py) and the report (report.py)."""
