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
# Phase hf (measured later) tests the transfer where the first phases had nothing: the
# harness's graph-mode MoE layers (suite moe, the shapes of the H200's calib-memory-moe.jsonl)
# and grouped GEMMs (grouped-gemm-holdout, as the H200's holdout-grouped-gemm.jsonl), and
# transformers' forward (benchmarks/hf_forward.py): op-by-op traces of two layers (the
# strided, cast and roll copies), Llama-3.1-8B whole and Qwen3-30B-A3B on 16 layers at the
# H200's third untouched round's points, and Llama-3.1-8B's DynamicCache steps:
#   python benchmarks/hf_check.py <the hf files>   and   rooflinesim validate ... --gpu h100-sxm
#
# Phase hf2 was measured after the transfer's rule for kernels below the copy's share was
# set (calibration.lending): transformers' forward of four models at points no run has used,
# and the harness's holdout16 suite in graph mode (new shapes of every op), untouched.
#
#   benchmarks/measure_h100.sh PHASE OUTDIR     (PHASE: held1 | held2 | calib1 | calib2 | hf | hf2)
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
  hf)
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version \
      --format=csv >>"$out/$log" 2>&1
    run1 calib-moe.jsonl 80 moe
    run1 holdout-grouped-gemm.jsonl 60 grouped-gemm-holdout
    hf() {  # hf FILE BUDGET ARGS...: transformers' forward, each model in its own process
      timeout $(( $2 + 20 )) python3 benchmarks/hf_forward.py --out "$out/$1" --budget-s "$2" "${@:3}" \
        >>"$out/$log" 2>&1
      echo "$(date -u +%FT%TZ) $1 done: $(wc -l <"$out/$1") lines" >>"$out/$log"
    }
    hf hf-ops.jsonl 90 --trace --layers 2 --model llama-3.1-8b --model qwen3-30b-a3b --model mistral-7b-v0.1 \
      --prefill 1x512 --prefill 4x1024 --decode 1x512 --decode 16x2048
    hf hf-llama.jsonl 70 --model llama-3.1-8b --prefill 2x640 --prefill 1x3000 --prefill 6x512 \
      --decode 3x700 --decode 12x1800 --decode 40x3000
    hf hf-qwen3moe.jsonl 70 --model qwen3-30b-a3b --layers 16 --prefill 2x640 --prefill 1x3000 --prefill 6x512 \
      --decode 3x700 --decode 12x1800 --decode 40x3000
    hf hf-dynamic-llama.jsonl 40 --model llama-3.1-8b --cache dynamic --no-prefill --decode 3x700 --decode 12x1800
    ;;
  hf2)
    run1 holdout16.jsonl 150 holdout16
    for m in "llama-2-7b hf-untouched-llama2.jsonl" "mistral-7b-v0.3 hf-untouched-mistral.jsonl" \
             "phi-3-mini-4k hf-untouched-phi3.jsonl" "mixtral-8x7b hf-untouched-mixtral.jsonl --layers 8"; do
      set -- $m
      timeout 80 python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" --budget-s 60 "${@:3}" \
        --prefill 3x400 --prefill 1x2000 --decode 5x900 --decode 24x1500 --decode 64x700 >>"$out/$log" 2>&1
      echo "$(date -u +%FT%TZ) $2 done: $(wc -l <"$out/$2") lines" >>"$out/$log"
    done
    ;;
  *) echo "unknown phase $phase" >&2; exit 2 ;;
esac
