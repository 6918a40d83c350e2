#!/usr/bin/env bash
# The harness's MLA decode suites on the GPU this runs on: FlashMLA's decode kernel (the
# engines' MLA attention on Hopper), built from source on the GPU's machine
# (benchmarks/flashmla_build.py: deepseek-ai/FlashMLA at 9edee0c with CUTLASS e94e888's
# include/), then the suites mla (the calibration grid: 8-128 query heads, batches 1-256,
# caches to 65,536 tokens) into calib-mla.jsonl and mla-holdout (random shapes off the grid,
# from a seed the grid never uses) into holdout-mla.jsonl, in graph mode. On an H200 they are
# what benchmarks/calibrate_h200.sh's fit reads (calib-*.jsonl) to give the H200's profile a
# flashmla key of its own (its key is lent from the H100's fit until then: only an H100 has
# measured FlashMLA, its files in benchmarks/measurements/h100-sxm/, its fit there mla-fit.yaml),
# the held-out file looked at once after it:
#   rooflinesim validate benchmarks/measurements/h200-sxm/holdout-mla.jsonl --gpu h200-sxm --by backend
#
#   benchmarks/measure_mla.sh FLASHMLA_SRC OUTDIR [holdout]
#
# With "holdout", the held-out suite alone (about four minutes).
#
# About six minutes of machine time (two of them the build). Files resume: a suite its
# budget cut short goes on where it stopped when run again.
set -u
src=${1:?FlashMLA source directory}
out=${2:?output directory}
only=${3:-}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log="$out/log-mla.txt"
build=${FLASHMLA_BUILD:-/tmp/flashmla-build}
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  nvcc --version | tail -1; } >>"$log" 2>&1
python3 benchmarks/flashmla_build.py --src "$src" --out "$build" >>"$log" 2>&1 || { tail -20 "$log"; exit 1; }
export PYTHONPATH="$build${PYTHONPATH:+:$PYTHONPATH}"
run1() {  # run1 FILE BUDGET SUITE
  timeout $(( $2 + 60 )) python3 -m rooflinesim.harness run --suite "$3" --mode graph \
    --out "$out/$1" --time-budget "$2" >>"$log" 2>&1
  echo "$(date -u +%FT%TZ) $3 done: $(wc -l <"$out/$1") lines" >>"$log"
}
run1 holdout-mla.jsonl 50 mla-holdout
[ "$only" = holdout ] || run1 calib-mla.jsonl 120 mla
tail -4 "$log"
