#!/usr/bin/env bash
# Issue #47's GPU measurements as ONE script for one short lease on a machine with no registry (<= 7.5 minutes on
# an H200, models built there: random:sd2.1 = SD 2.1's architecture, random weights). It installs the carried
# wheels (.whl/: what that machine lacks, see ../shared/ENVIRONMENT.md), then runs, each step under its own
# `timeout` (capped by the time left of BUDGET_S), each printing into $OUT/<step>.txt as it goes:
#   0. build random:sd2.1 once (~25 s); every step loads that folder
#   1. determinism.py   random:sd2.1, 512 px, 20 steps, fp16, 8 prompts/seeds: images/s and image sha256 under fast,
#                       each of strict's switches alone, strict; bytes identical across runs, processes, batch 1
#                       vs 8, fast vs strict                                                   (~130 s, cap 160)
#   2. generate.py      gensets build vs the bare diffusers loop at batch 1 and 8, under fast (~60 s, cap 85)
#   3. generate.py      the same under strict                                                  (~70 s, cap 90)
#   4. profile_unit.py --calls: bare pipe() vs Generator.generate per call, and one per-image unit (2 images) under
#                       torch.profiler (top ops by self CPU time, synchronising ops, time outside the calls)
#                                                                                              (~25 s, cap 45)
#   5. eval_throughput.py (e): gensets eval of random:clip-vit-l-14 (bf16, 4096 images) against a bare open_clip loop
#                       that also loads the model and reads the shards; a fresh database per timed call (cap 80)
#   6. gpu.py --settings compile: torch.compile of the UNet at batch 8 then 16: images/s, seconds to compile, % of
#                       the fp16 matmul peak measured in the same run   (~105 s + ~55 s; gets the time left - 8 s)
#   7. cost.py          GPU-hours and USD per image and per paper build from steps 1, 2, 3, 5, beside Table 5 (~5 s)
# Prepare here:  echo /.whl/ >> .git/info/exclude; pip download --no-deps --only-binary=:all: --python-version 3.12
#   --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl diffusers==0.42.1
#   open-clip-torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4 duckdb==2.0.1 importlib-metadata==10.2.0 zipp==4.1.2
#   transformers==5.24.0 timm==1.0.31 webdataset==1.0.2 braceexpand==0.1.7          (about 48 MiB)
# Run there:     bash benchmarks/gpu.sh   (with .whl carried)
# Check here:    SMOKE=1 PY=.venv/bin/python bash benchmarks/gpu.sh   (tiny models on CPU, every step, a few minutes)
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
start=$(date +%s)
SMOKE=${SMOKE:-0}
PY=${PY:-python3}
budget=${BUDGET_S:-442}
left() { echo $(( budget - ($(date +%s) - start) )); }
# run STEP CAP RESERVE CMD...: CMD under timeout min(CAP, time left - RESERVE), its output in $out/STEP.txt
run() {
  local name=$1 cap=$2 reserve=$3; shift 3
  local t=$(( $(left) - reserve )); [ "$t" -gt "$cap" ] && t=$cap
  echo "== $name: timeout $t s ($(left) s of the budget left)" | tee -a "$out/steps.txt"
  if [ "$t" -lt 10 ]; then echo "   skipped: no time left" | tee -a "$out/steps.txt"; return; fi
  local t0; t0=$(date +%s)
  timeout -k 5 "$t" "$@" 2>&1 | grep --line-buffered -v -e Warning -e warnings.warn | tee "$out/$name.txt"
  echo "   $name: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s" | tee -a "$out/steps.txt"
}
if [ "$SMOKE" = 1 ]; then
  gen=(--model tiny:sd --size 64 --steps 2); dtype=float32; n=2; det_only=(--only plain,strict,plain2,strict2)
  budget=${BUDGET_S:-1200}; caps=(400 200 200 150 300 300); child=300; batches=1,2
else
  gen=(--model random:sd2.1 --size 512 --steps 20); dtype=float16; n=8; det_only=()
  caps=(160 85 90 45 600 80); child=75; batches=8,16
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site || exit 2
  fi
fi
export GENSETS_CACHE=${GENSETS_CACHE:-/tmp/gensets-cache} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || echo "no GPU"
  "$PY" -c "import sys, torch, diffusers, transformers, timm, open_clip, duckdb; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu', 'diffusers', diffusers.__version__, 'transformers', transformers.__version__, 'timm', timm.__version__, 'open_clip', open_clip.__version__, 'duckdb', duckdb.__version__)"
  echo "cores $(nproc); SMOKE=$SMOKE; git $(git rev-parse --short HEAD 2>/dev/null); wheels $(du -sh .whl 2>/dev/null | cut -f1)"
} 2>&1 | tee "$out/env.txt"

# the model's folder, built once here (unpinned kernels), and every step loads THAT folder (diffusers:PATH): a
# random: model's weights are random draws, drawn again per CPU kernel set (gensets.models.tiny.built_path), so a
# strict (pinned) process would otherwise build and load other weights, and fast vs strict would compare two models
kind=$([ "$SMOKE" = 1 ] && echo "'tiny', 'sd'" || echo "'random', 'sd2.1'")
t0=$(date +%s)
folder=$(timeout 150 "$PY" -c "from gensets.models.tiny import built_path; print(built_path($kind))" 2>>"$out/env.txt" | tail -1)
echo "model folder: $folder (built or found in $(( $(date +%s) - t0 )) s)" | tee -a "$out/env.txt"
[ -d "$folder" ] || { echo "no model folder: stop"; exit 3; }
gen=(--model "diffusers:$folder" "${gen[@]:2}")

run determinism "${caps[0]}" 230 "$PY" benchmarks/determinism.py "${gen[@]}" --images $n --dtype $dtype \
  --timeout $child ${det_only[@]+"${det_only[@]}"}
for mode in fast strict; do
  cap=${caps[1]} reserve=200; [ $mode = strict ] && cap=${caps[2]} reserve=140
  run generate-$mode "$cap" $reserve "$PY" benchmarks/generate.py "${gen[@]}" --batch-size $n --dtype $dtype \
    --classes 1 --shots $n --repeats 1 --reproducible $mode
done
run profile "${caps[3]}" 115 "$PY" benchmarks/profile_unit.py --calls "${gen[@]}" --images $(( (n + 3) / 4 )) --dtype $dtype \
  --repeats 3 --top 25
if [ "$SMOKE" = 1 ]; then evalargs=(--model tiny:clip --n 64 --batch-size 32 --precision fp32); else
  evalargs=(--model random:clip-vit-l-14 --n 4096 --batch-size 256 --precision bf16); fi
run eval "${caps[5]}" 120 "$PY" benchmarks/eval_throughput.py --only e "${evalargs[@]}" --repeats 2 --threads 8
run compile "${caps[4]}" 8 "$PY" benchmarks/gpu.py "${gen[@]}" --batches '' --batch $batches --settings compile \
  --surrogates '' --repeats 2
run cost 30 0 "$PY" benchmarks/cost.py --results "$out"
echo "done in $(( $(date +%s) - start )) s" | tee -a "$out/steps.txt"
