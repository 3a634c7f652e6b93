"""gensets eval and score: models and quality metrics on a dataset, their rows into a results database."""

from __future__ import annotations

import argparse
import json
import sys

from ..config import nonneg_int, positive_int
from ..evaluation.runner import METRICS, PRECISIONS, EvalConfig, evaluate
from ..evaluation.scoring import ScoreConfig, parse_models, score
from ..models.device import rank
from ..registry import PROTOCOLS, QUALITY_METRICS
from ..workspace import refuse_own_file
from .common import number


def add_parser(sub) -> None:
    e = sub.add_parser("eval", help="score models on a dataset; results into a DuckDB file",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="metrics:\n" + "\n".join(f"  {k:<16} {v}" for k, v in METRICS.items()),
                       description="Score every --model on DATASET (a workspace, a local repo folder, a hub id "
                       "org/name[@revision], a WebDataset glob, or the released ImageNet-D: hf:zcs15/ImageNet-D or a folder in its "
                       "layout). Each batch is decoded once and every model "
                       "runs on it. The protocol (imagenet, zero-shot, native, wordset) is chosen from the "
                       "dataset and the model unless given, and is always reported. Several GPUs: "
                       "accelerate launch --multi_gpu --num_processes N -m gensets.cli eval ... (one run, the same "
                       "rows as one process).")
    e.add_argument("dataset")
    e.add_argument("--model", action="append", required=True, metavar="SPEC",
                   help="a model spec (repeatable): timm:..., open_clip:..., hf:..., torchvision:ARCH@WEIGHTS, "
                   "tiny:...")
    e.add_argument("--db", required=True, help="the results database (DuckDB file)")
    e.add_argument("--config", help="only this config")
    e.add_argument("--split", help="only this split")
    e.add_argument("--protocol", choices=list(PROTOCOLS),
                   help="two-way: ImageNet-D's VLM protocol as the authors' code runs it (their question, true "
                   "class first, their answer matching); two-way-shuffled: gensets' lettered, shuffled variant; "
                   "zero-shot: on ImageNet-D the authors' names and 'A photo of a {}'; zero-shot-readable: "
                   "readable names and the default templates on every dataset; "
                   "wordset: Borji's rule, the category word is one of the words of the predicted label's name; "
                   "wordset-plural: a trailing s/es may differ; wordset-lemmas: the labels' whole lemma lists; "
                   "wordset-gensets: lemma lists and gensets' extra synonyms; imagenet-top5-per-id: the ImageNet-D "
                   "authors' top-5 (one count per mapped id)")
    e.add_argument("--clip", metavar="SPEC", help="two-way only: the CLIP model that picks each image's top "
                   "wrong class (the --model specs are then VQA / image-text-to-text models); the released ImageNet-D's "
                   "questions CSVs give it without one")
    e.add_argument("--decoding", choices=("authors", "greedy"), default="authors",
                   help="two-way only: how a generative VLM answers: authors (default: ImageNet-D's eval_imagenet_d.py, "
                   "sampling at temperature 0.2 seeded per image, up to 512 new tokens, LLaVA-1.5's own conversation "
                   "for LLaVA models) or greedy (10 new tokens, the processor's chat template; the run's protocol "
                   "names it)")
    e.add_argument("--vlm-precision", choices=("fp16", "fp32"), help="a LLaVA model's weights (vqa, two-way): fp16 "
                   "(the authors', default on CUDA) or fp32 (default elsewhere); the run's protocol names it")
    e.add_argument("--vlm-aspect", choices=("pad-square", "crop"), help="a LLaVA model's images: pad-square "
                   "(default: LLaVA's expand2square, the authors') or crop (the processor's resize and centre crop)")
    e.add_argument("--template", action="append", metavar="TEXT", dest="templates",
                   help="zero-shot prompt template with {} for the class name (repeatable; default: the "
                   "dataset's paper's, e.g. ImageNet-D's 'A photo of a {}', else 'a photo of a {}.')")
    e.add_argument("--batch-size", type=positive_int, default=32)
    e.add_argument("--workers", type=nonneg_int, default=None,
                   help="processes that decode and prepare the batches (default: the machine's cores less one, "
                   "at most 16, shared by accelerate's processes; 0: decode in this process); results do not "
                   "depend on it")
    e.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                   help="fp32 (default: comparable results) or autocast to bf16 / fp16 (GPUs); recorded in the run "
                   "row (autocast; precision: the dtype the model computed in), and the leaderboard names it")
    e.add_argument("--force", action="store_true",
                   help="score again the runs that --db holds complete already with the same settings (by default "
                   "they are skipped, so an interrupted eval goes on where it stopped)")
    e.add_argument("--limit", type=positive_int, help="only the first N images of each split")
    e.add_argument("--json", action="store_true", help="print one JSON object per (model, config, split)")
    e.add_argument("--quiet", action="store_true", help="no progress bar")
    e.add_argument("--allow-pickle", action="store_true", help="allow pickle weights (unsafe)")
    e.add_argument("--trust-remote-code", action="store_true", help="run the model repo's own code (unsafe)")
    e.set_defaults(func=_eval)

    sc = sub.add_parser("score", help="image-quality and alignment scores of a dataset; into a DuckDB file",
                        description="Score the images of DATASET (a workspace, a local repo folder, a hub id or a "
                        "WebDataset glob) with each --metric: per-image values (CLIPScore, CLIP-IQA, aesthetic, "
                        "PickScore, HPS v2, VQAScore, PSNR / SSIM) into the `scores` table and a summary per (config, "
                        "metric) with a bootstrap interval into `score_summaries`; set-level metrics (FID, KID, IS, "
                        "precision / recall, LPIPS diversity) per config, against --reference where they need real "
                        "images. A second run replaces the rows it scores.")
    sc.add_argument("dataset")
    sc.add_argument("--metric", action="append", required=True, choices=list(QUALITY_METRICS), metavar="NAME",
                    help=f"a metric (repeatable): {', '.join(QUALITY_METRICS)}")
    sc.add_argument("--model", action="append", metavar="METRIC[.ROLE]=SPEC",
                    help="a model instead of a metric's default (repeatable), e.g. clip_score=tiny:hf-clip, "
                    "aesthetic.head=tiny:aesthetic-head, fid=tiny:inception")
    sc.add_argument("--db", default="results.duckdb", help="the results database (default results.duckdb)")
    sc.add_argument("--reference", metavar="SOURCE", help="real images for fid, kid, precision_recall: a folder of "
                    "images, a workspace, a dataset folder, a shard glob or a hub id")
    sc.add_argument("--pairs", metavar="FOLDER", help="psnr, ssim: the folder holding each image's init image "
                    "(json.prompting.init_image: GenBench RA's reference folder)")
    sc.add_argument("--config", help="only this config")
    sc.add_argument("--split", help="only this split")
    sc.add_argument("--batch-size", type=positive_int, default=16)
    sc.add_argument("--limit", type=positive_int, help="only the first N images of each split")
    sc.add_argument("--seed", type=nonneg_int, default=0, help="the bootstrap's seed (default 0)")
    sc.add_argument("--json", action="store_true", help="print the summaries as JSON")
    sc.add_argument("--quiet", action="store_true", help="no progress bar")
    sc.add_argument("--allow-pickle", action="store_true", help="allow pickle weights (unsafe)")
    sc.add_argument("--trust-remote-code", action="store_true", help="run a model repo's own code (unsafe)")
    sc.set_defaults(func=_score)


def _eval(a) -> int:
    refuse_own_file(a.db, "--db")
    results = evaluate(EvalConfig(a.dataset, a.model, a.db, config=a.config, split=a.split, protocol=a.protocol,
                                  batch_size=a.batch_size, workers=a.workers, limit=a.limit, quiet=a.quiet or a.json,
                                  allow_pickle=a.allow_pickle, trust_remote_code=a.trust_remote_code, clip=a.clip,
                                  templates=a.templates, precision=a.precision, force=a.force,
                                  decoding=a.decoding, vlm_dtype=a.vlm_precision, vlm_aspect=a.vlm_aspect))
    if rank():  # the other processes of an accelerate launch: process 0 prints
        return 0
    if a.json:
        print(json.dumps([{**{k: r[k] for k in ("model", "dataset", "config", "split", "protocol", "variant", "n",
                                                "metrics", "intervals")}, "skipped": r.get("skipped", False)}
                          for r in results], indent=1))
        return 0
    for r in results:
        m = r["metrics"]
        lo, hi = r["intervals"].get("top1", (None, None))
        top1 = "-" if m["top1"] is None else f"{m['top1']:.4f}" + (f" ({lo:.4f}-{hi:.4f})" if lo is not None else "")
        extra = "".join(f"  {k} {number(k, v)}" for k, v in m.items() if k != "top1" and v is not None)
        print(f"{r['model']}  {r['config']}/{r['split']}  [{r['variant']}]  n={r['n']}  top1 {top1}{extra}")
    print(f"results in {a.db}: gensets leaderboard --db {a.db}", file=sys.stderr)
    return 0


def _score(a) -> int:
    refuse_own_file(a.db, "--db")
    summaries = score(ScoreConfig(a.dataset, tuple(a.metric), a.db, models=parse_models(a.model, a.metric),
                                  reference=a.reference, pairs=a.pairs, config=a.config, split=a.split,
                                  batch_size=a.batch_size, limit=a.limit, quiet=a.quiet or a.json,
                                  allow_pickle=a.allow_pickle, trust_remote_code=a.trust_remote_code, seed=a.seed))
    if a.json:
        keep = ("dataset", "revision", "config", "split", "metric", "name", "level", "variant", "models", "commits",
                "reference", "n", "value", "lo", "hi", "details")
        print(json.dumps([{k: json.loads(r[k]) if k in ("models", "commits", "details") else r[k] for k in keep}
                          for r in summaries], indent=1))
        return 0
    for r in summaries:
        ci = f" ({r['lo']:.4f}-{r['hi']:.4f})" if r["lo"] is not None else ""
        print(f"{r['config']}/{r['split']}  {r['name']}  {r['value']:.4f}{ci}  n={r['n']}  [{r['variant']}]")
    print(f"scores in {a.db}: gensets query --db {a.db} 'SELECT * FROM score_summaries'", file=sys.stderr)
    return 0
