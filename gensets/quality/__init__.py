"""Image-quality and alignment metrics of generated images (issue 14): FID / KID / IS / precision-recall on the
standard Inception-v3 features, CLIPScore, CLIP-IQA, the LAION aesthetic predictor, PickScore, HPS v2, VQAScore,
LPIPS diversity, PSNR / SSIM.

    functional.py  the arithmetic: pure functions calling torch-fidelity / torchmetrics
    metrics.py     one registered class per metric (QUALITY_METRICS): its models by role, pinned defaults
    thresholds.py  a builder config's ``quality:`` thresholds, applied to the samples of a unit while building

``gensets score`` (gensets.evaluation.scoring) scores a dataset or workspace into the results database.
"""
