#!/usr/bin/env bash
# Every GPU measurement of benchmarks/README.md ("On a GPU"), as ONE script for a short lease on a machine with
# no registry (~7 minutes on an H100): it installs the carried wheels (.whl/: what that machine lacks, see
# ../shared/ENVIRONMENT.md), then runs
#   1. benchmarks/gpu.py: random:sd2.1 at 512 px, fp16 SDPA at batch 1/4/8/16, then bf16, eager attention,
#      channels_last at batch 8; the four ImageNet-D surrogates (random: ViT-L/14 CLIP, ResNet-50, ViT-B/16,
#      ConvNeXt-T) as the filter on the generated batch
#   2. benchmarks/generate.py: a gensets build against the bare diffusers loop (random:sd2.1, 512 px, fp16)
#   3. benchmarks/eval_throughput.py (e): gensets eval of random:clip-vit-l-14 (bf16, decoding in worker
#      processes) against a bare open_clip loop
#   4. benchmarks/gpu.py --settings compile: torch.compile of the UNet, with the time left
# each under its own timeout, each printing into $OUT (or ./gpu-out) as it goes.
# Prepare here:  echo /.whl/ >> .git/info/exclude; pip download --no-deps --only-binary=:all: --python-version 3.12
#   --implementation cp --platform manylinux_2_28_x86_64 ... -d .whl diffusers==0.42.1 open-clip-torch==3.3.0
#   ftfy==6.3.1 wcwidth==0.9.4 duckdb==2.0.1 importlib-metadata==10.2.0 transformers==5.24.0 timm==1.0.31
# Run there:     bash benchmarks/gpu.sh   (with .whl carried)
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
start=$(date +%s)
budget=${BUDGET_S:-500}
left() { echo $(( budget - ($(date +%s) - start) )); }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 2
fi
export GENSETS_CACHE=${GENSETS_CACHE:-/tmp/gensets-cache} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import sys, torch, diffusers, transformers, timm, open_clip, duckdb; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'diffusers', diffusers.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__, 'open_clip', open_clip.__version__, 'duckdb', duckdb.__version__)"
  nproc
} 2>&1 | tee "$out/env.txt"
echo "== 1. sweep ($(left) s left)"
timeout 200 python3 benchmarks/gpu.py --model random:sd2.1 --size 512 --steps 20 --batches 1,4,8,16 --batch 8 \
  --settings bf16,eager,channels_last 2>&1 | grep -v Warning | tee "$out/sweep.txt"
echo "== 2. generate ($(left) s left)"
timeout 120 python3 benchmarks/generate.py --model random:sd2.1 --size 512 --steps 20 --batch-size 8 \
  --dtype float16 --classes 1 --shots 8 --repeats 1 --reproducible fast 2>&1 | grep -v Warning | tee "$out/generate.txt"
echo "== 3. eval ($(left) s left)"
timeout 120 python3 benchmarks/eval_throughput.py --model random:clip-vit-l-14 --n 4096 --batch-size 256 \
  --precision bf16 --repeats 2 --threads 8 2>&1 | grep -v Warning | tee "$out/eval.txt"
t=$(( $(left) - 10 ))
echo "== 4. compile ($t s)"
[ "$t" -gt 30 ] && timeout "$t" python3 benchmarks/gpu.py --model random:sd2.1 --size 512 --steps 20 --batches '' \
  --batch 8 --settings compile --surrogates '' 2>&1 | grep -v Warning | tee "$out/compile.txt"
echo "done in $(( $(date +%s) - start )) s"
