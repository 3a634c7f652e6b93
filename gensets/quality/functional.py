"""The arithmetic of the quality metrics: pure functions over features, embeddings and pixels.

Each calls the library the field computes it with (torch-fidelity for FID / KID / IS / precision-recall, as
torchmetrics' FID, KID and IS do on the same Inception features; torchmetrics for CLIP-IQA, LPIPS, PSNR and
SSIM), so a value here is theirs on the same inputs. Inputs are numpy arrays or CPU tensors; outputs floats or
(N,) float64 arrays.

Features are taken in float64 by FD, KID and precision / recall, whatever dtype the model gave them in. These
metrics go through BLAS (numpy's OpenBLAS for KID's kernel matrices and FD's covariance product and eigenvalues),
and OpenBLAS picks its kernels by CPU (its core type: SkylakeX, Haswell, Zen, ...; ``OPENBLAS_CORETYPE`` is the
platform's to set), so the same features summed in another order round differently. In float32, KID (an unbiased
MMD^2: the difference of large kernel sums, a cancellation) moved by ~1e-4 relative between two core types of one
machine on the smoke features, and FD by ~5e-8; in float64 by ~1e-12 and by the noise floor of FD's eigenvalues
(``tests/golden.py``, BLAS_TOLERANCES, says how large and why). The cost is nothing measurable at these sizes
(2048-wide features, thousands of images). torch-fidelity and torchmetrics compute FID / KID on the dtype they are
given (torchmetrics' FID in float64 by default, KID in the features' dtype), so a value here equals theirs on
float64 features; on float32 ones it differs by that rounding, never more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

TORCH_FIDELITY_SEED = 2020  # torch-fidelity's default rng_seed (KID subsets, IS shuffling)


def _tensor(x: Any, name: str, dtype=None):
    import numpy as np
    import torch

    t = torch.as_tensor(np.asarray(x.detach().cpu() if hasattr(x, "detach") else x))
    if t.ndim != 2 or t.shape[0] == 0:
        raise ValueError(f"{name} must be 2-D (N, D) and non-empty, got shape {tuple(t.shape)}")
    return t.to(dtype) if dtype is not None else t


def _pair(gen: Any, ref: Any):
    """Both feature sets as float64 tensors, whatever their dtype (see the module's note on float64)."""
    import torch

    return _tensor(gen, "gen", torch.float64), _tensor(ref, "ref", torch.float64)


def fid(gen: Any, ref: Any) -> float:
    """Fréchet Inception Distance of two feature sets (N, D), M, N >= 2: torch-fidelity's
    ``fid_features_to_statistics`` (mean, ``np.cov``) and ``fid_statistics_to_metric``
    (``|mu1 - mu2|^2 + Tr(S1 + S2 - 2 sqrt(S1 S2))``, the trace of the root from the eigenvalues of S1 S2)."""
    from torch_fidelity.metric_fid import KEY_METRIC_FID, fid_features_to_statistics, fid_statistics_to_metric

    a, b = _pair(gen, ref)
    if min(len(a), len(b)) < 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"FID needs >= 2 rows of the same width on each side, got {tuple(a.shape)} and {tuple(b.shape)}")
    return float(fid_statistics_to_metric(fid_features_to_statistics(a), fid_features_to_statistics(b),
                                          verbose=False)[KEY_METRIC_FID])


def kid(gen: Any, ref: Any, subsets: int = 100, subset_size: int = 1000,
        seed: int = TORCH_FIDELITY_SEED) -> tuple[float, float, int]:
    """Kernel Inception Distance (mean, std over subsets, the subset size used): torch-fidelity's
    ``kid_features_to_metric`` (cubic polynomial kernel ``(a.b / D + 1)^3``, unbiased MMD^2, ``subsets`` subsets
    drawn with ``np.random.RandomState(seed)``). The subset size is ``min(subset_size, N, M)``: torch-fidelity
    refuses a larger one."""
    from torch_fidelity.metric_kid import KEY_METRIC_KID_MEAN, KEY_METRIC_KID_STD, kid_features_to_metric

    a, b = _pair(gen, ref)
    size = min(subset_size, len(a), len(b))
    if size < 2:
        raise ValueError("KID needs at least 2 images on each side")
    out = kid_features_to_metric(a, b, kid_subsets=subsets, kid_subset_size=size, rng_seed=seed, verbose=False)
    return float(out[KEY_METRIC_KID_MEAN]), float(out[KEY_METRIC_KID_STD]), size


def inception_score(logits: Any, splits: int = 10, seed: int = TORCH_FIDELITY_SEED) -> tuple[float, float, int]:
    """Inception Score (mean, std over splits, the number of splits used) of classifier logits (N, C):
    torch-fidelity's ``isc_features_to_metric`` (rows shuffled with ``RandomState(seed)``, softmax in float64,
    ``exp(mean KL(p(y|x) || p(y)))`` per split). ``splits`` is clipped to N."""
    from torch_fidelity.metric_isc import KEY_METRIC_ISC_MEAN, KEY_METRIC_ISC_STD, isc_features_to_metric

    t = _tensor(logits, "logits")
    n = min(splits, len(t))
    out = isc_features_to_metric(t, splits=n, shuffle=True, rng_seed=seed)
    return float(out[KEY_METRIC_ISC_MEAN]), float(out[KEY_METRIC_ISC_STD]), n


def precision_recall(gen: Any, ref: Any, k: int = 3) -> tuple[float, float]:
    """Improved precision and recall (Kynkäänniemi et al. 2019) with k-NN radii: torch-fidelity's
    ``prc_features_to_metric`` (features_1 = generated, features_2 = real, ``prc_neighborhood`` = k)."""
    from torch_fidelity.metric_prc import KEY_METRIC_PRECISION, KEY_METRIC_RECALL, prc_features_to_metric

    a, b = _pair(gen, ref)
    if min(len(a), len(b)) <= k:
        raise ValueError(f"precision / recall with k = {k} needs more than {k} images on each side")
    out = prc_features_to_metric(a, b, prc_neighborhood=k, save_cpu_ram=True, verbose=False)
    return float(out[KEY_METRIC_PRECISION]), float(out[KEY_METRIC_RECALL])


def clip_scores(image_emb: Any, text_emb: Any) -> np.ndarray:
    """Per pair, :func:`gensets.metrics.clip_score` of that pair alone: ``100 * max(cos(image_i, text_i), 0)``."""
    import numpy as np

    from .. import metrics as M  # lazy: numpy, off the CLI parser's path (it lists the quality metrics)

    a, b = np.asarray(image_emb, dtype=np.float64), np.asarray(text_emb, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"image_emb {a.shape} and text_emb {b.shape} must be the same (N, D)")
    return np.array([M.clip_score(a[i : i + 1], b[i : i + 1]) for i in range(len(a))])


def cosine(image_emb: Any, text_emb: Any, scale: float = 1.0) -> np.ndarray:
    """Per pair, ``scale * cos(image_i, text_i)`` (PickScore: CLIP's logit scale; HPS v2: 1)."""
    import numpy as np

    a, b = np.asarray(image_emb, dtype=np.float64), np.asarray(text_emb, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"image_emb {a.shape} and text_emb {b.shape} must be the same (N, D)")
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return scale * (a * b).sum(axis=1)


def clip_iqa(image_emb: Any, anchors: Any) -> np.ndarray:
    """CLIP-IQA of each image from its normalised CLIP embedding and the normalised embeddings of a
    (positive, negative) prompt pair: ``softmax(100 * image . anchors)`` of the positive prompt, the arithmetic of
    torchmetrics' CLIPImageQualityAssessment. Written out (two lines) because torchmetrics offers it only as a
    private function (``_clip_iqa_compute``, which minor releases may change) or inside a class that loads its own
    CLIP; tests/test_quality_scores.py checks it against that function."""
    import numpy as np
    import torch

    img = torch.as_tensor(np.asarray(image_emb, dtype=np.float32))
    anc = torch.as_tensor(np.asarray(anchors, dtype=np.float32))
    if img.ndim != 2 or anc.shape != (2, img.shape[1]):
        raise ValueError(f"expected (N, D) image embeddings and (2, D) anchors, got {tuple(img.shape)}, {tuple(anc.shape)}")
    return (100 * img @ anc.T).softmax(-1)[:, 0].double().numpy()


def yes_probability(logits: Any, yes_id: int) -> np.ndarray:
    """VQAScore: per row of next-token logits (N, V), the softmax probability of the token ``yes_id``."""
    import numpy as np
    import torch

    t = torch.as_tensor(np.asarray(logits.detach().float().cpu() if hasattr(logits, "detach") else logits))
    return torch.softmax(t.double(), dim=-1)[:, yes_id].numpy()


def lpips_diversity(distances: dict[Any, list[float]]) -> tuple[float, int]:
    """Mean over classes of the mean LPIPS distance between the pairs of images of the class (classes with
    a pair only); returns (value, the number of pairs)."""
    import numpy as np

    per_class = [float(np.mean(d)) for d in distances.values() if len(d)]
    if not per_class:
        raise ValueError("LPIPS diversity needs a class with at least two images")
    return float(np.mean(per_class)), sum(len(d) for d in distances.values())


def _pixels(img: Any):
    """An RGB uint8 (H, W, 3) image (array or PIL) as a float tensor [1, 3, H, W] in [0, 255]."""
    import numpy as np
    import torch

    a = np.asarray(img, dtype=np.float64)
    if a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) RGB image, got shape {a.shape}")
    return torch.as_tensor(a).permute(2, 0, 1)[None]


def psnr(img: Any, ref: Any) -> float:
    """PSNR in dB of an 8-bit image against its reference (same size): torchmetrics'
    ``peak_signal_noise_ratio`` with ``data_range=255`` (``10 log10(255^2 / MSE)``)."""
    from torchmetrics.functional.image import peak_signal_noise_ratio

    a, b = _pixels(img), _pixels(ref)
    if a.shape != b.shape:
        raise ValueError(f"image {tuple(a.shape)} and reference {tuple(b.shape)} differ in size")
    return float(peak_signal_noise_ratio(a, b, data_range=255.0))


def ssim(img: Any, ref: Any) -> float:
    """SSIM of an 8-bit image against its reference (same size): torchmetrics'
    ``structural_similarity_index_measure`` with ``data_range=255`` (Gaussian window 11, sigma 1.5, K = 0.01, 0.03)."""
    from torchmetrics.functional.image import structural_similarity_index_measure

    a, b = _pixels(img), _pixels(ref)
    if a.shape != b.shape:
        raise ValueError(f"image {tuple(a.shape)} and reference {tuple(b.shape)} differ in size")
    return float(structural_similarity_index_measure(a, b, data_range=255.0))
