#!/usr/bin/env bash
# How the H100 measurements in benchmarks/measurements/h100-sxm/ were taken, on a box with
# one H100 SXM GPU (80 GB HBM3): the held-out suites of the H200's files of the same names
# (the same shapes: each suite's seeds are fixed), so that the H200 profile, transferred
# through the H100's spec, is checked on a GPU it was not fitted on (held1, held2), and the
# suites of the README's own-GPU recipe (calib1, calib2) to fit a partial H100 profile:
#   rooflinesim validate <the held-out files> --gpu h100-sxm --worst 5 --by op
# beside the same command on benchmarks/measurements/h200-sxm's files of those names.
# The block-fp8 and fused-moe16 held-out suites stopped at their time budgets (65 of 80 and
# 44 of 60 cases); logs/ holds each phase's log.
#
#   benchmarks/measure_h100.sh PHASE OUTDIR     (PHASE: held1 | held2 | calib1 | calib2)
#
# Each phase fits in ten minutes of machine time. Files resume.
set -u
phase=${1:?phase}
out=${2:?output directory}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log=log-$phase.txt

run1() {  # run1 FILE BUDGET SUITE: one graph-mode suite into $out/FILE
  timeout $(( $2 + 30 )) python3 -m rooflinesim.harness run --suite "$3" --mode graph \
    --out "$out/$1" --time-budget "$2" >>"$out/$log" 2>&1
  echo "$(date -u +%FT%TZ) $3 done: $(wc -l <"$out/$1") lines" >>"$out/$log"
}

case $phase in
  held1)
    { nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv
      python3 -c "import torch; f, t = torch.cuda.mem_get_info(); print('torch', torch.__version__, torch.version.cuda,
        torch.cuda.get_device_name(), 'mem_get_info free', f, 'total', t)"; } >>"$out/$log" 2>&1
    run1 random-layers11.jsonl 50 layers11
    run1 holdout14.jsonl 140 holdout14
    run1 holdout-add-rmsnorm.jsonl 35 add-rmsnorm-holdout
    run1 holdout-fused-moe16.jsonl 110 fused-moe16-holdout
    run1 holdout-block-fp8.jsonl 120 block-fp8-holdout
    ;;
  held2)
    run1 calib-quick.jsonl 120 quick
    run1 holdout12.jsonl 270 holdout12
    ;;
  calib1)
    run1 calib-gemm.jsonl 240 gemm
    run1 calib-memory.jsonl 60 memory
    run1 decoder-layers.jsonl 90 decoder
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version \
      --format=csv >>"$out/$log"
    ;;
  calib2)
    run1 calib-attention.jsonl 290 attention
    ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
