#!/usr/bin/env bash
# Measures, on a box with one H100 SXM GPU, the held-out suites of the H200's files of the
# same names (the same shapes: each suite's seeds are fixed), so that the H200 profile,
# transferred through the H100's spec, can be checked on a GPU it was not fitted on:
#   rooflinesim validate OUTDIR/*.jsonl --gpu h100-sxm --worst 5 --by op
# beside the same command on benchmarks/measurements/h200-sxm's files of those names.
#
#   benchmarks/measure_h100.sh PHASE OUTDIR     (PHASE: held1)
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
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
