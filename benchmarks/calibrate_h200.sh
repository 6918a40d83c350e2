#!/usr/bin/env bash
# Fit the shipped H200 profile and validate it on measurements the fit never saw.
#   calibration data: benchmarks/measurements/h200-sxm/calib-*.jsonl, collectives.jsonl
#                     and decoder-layers.jsonl (whole layers of five model shapes: they fit
#                     one parameter, what a GEMM that is not compute-bound costs after
#                     other kernels; every other parameter comes from single kernels)
#   held out:         holdout.jsonl .. holdout10.jsonl (random shapes of every op from
#                     seeds the calibration suites never use) and random-layers.jsonl ..
#                     random-layers7.jsonl (decoder layers of random widths and lengths);
#                     the model was developed looking at these. holdout11.jsonl and
#                     holdout12.jsonl (whose GEMMs include fp32), with random-layers8.jsonl
#                     and random-layers9.jsonl, were measured after the model's last change,
#                     in two rounds, and looked at once each; they are reported on their
#                     own (last command).
#   eager launches:   the host side of eager timing is fitted after the GPU side (which no
#                     eager record fits) on eager3-{random,memory,decoder}.jsonl,
#                     eager-moe-noprofile.jsonl and eager-moe-random.jsonl (MoE layers of
#                     random shapes, small ones included), measured with no profiler pass
#                     in the process. eager-holdout16.jsonl was measured the same way,
#                     evaluated once, then used for development (with its repeats
#                     eager-holdout16b and -16-pinned: benchmarks/eager_repeat.py);
#                     eager-holdout17.jsonl was measured before the last host fit and
#                     evaluated once, after it; eager-holdout18.jsonl, measured after it with
#                     each case built and timed three times (the harness's eager default
#                     since), evaluated once (last two commands). How far one process's host
#                     times lie from another's: python benchmarks/eager_repeat.py --repeats. eager-focus4.jsonl (fp32,
#                     TF32 and misaligned small GEMMs) is kept, not fitted: with it the
#                     GEMM host fit got worse on every repeat of the sixteenth set (its
#                     process ran slow: small GEMMs 1.2-1.5x the other files'). Every
#                     earlier eager file ran the profiler's kernel count after each case,
#                     which made later eager launches in the process take longer (host
#                     times 1.3-1.9x, drifting up over a run: eager-moe-profile.jsonl
#                     against eager-moe-noprofile.jsonl, the same cases), and the first ones
#                     (eager-quick, -random, -memory, -moe, -decoder, -holdout13, -layers10)
#                     also kept the blocks earlier cases left cached: kept, not used.
#   transformers:     hf-ops.jsonl, hf-ops-dynamic.jsonl and hf-ops-v3.jsonl (transformers'
#                     forwards op by op: their strided, casting and rolling copies fit copy:strided,
#                     copy:cast and copy:roll) and the timed forwards hf-forward-*.jsonl and
#                     hf-dynamic-*.jsonl (their eager decode steps fit the host keys hf and
#                     hf:attention_new_shape, after everything else; their prefill and graph
#                     steps are the development set of benchmarks/hf_check.py).
#                     sdpa-new-shape.jsonl (benchmarks/sdpa_new_shape.py: what a new SDPA
#                     shape costs the host, measured directly: 43 ms at its first call) is
#                     kept, not fitted: one plan a DynamicCache step (its layers reuse it)
#                     left 20-60 ms of those steps unexplained, and fitted worse than the
#                     effective per-call figure on every set.
#                     hf-untouched-*.jsonl (Phi-4, DeepSeek-V2-Lite and new Llama-3.1-8B
#                     points) were measured before any of it was fitted and evaluated once,
#                     after (logs/hf-untouched-once.txt); hf-untouched2-*.jsonl (DeepSeek-V3,
#                     Mistral-7B-v0.1, Qwen3-235B-A22B, Llama-3-70B, Qwen2.5-72B and
#                     Mixtral-8x22B) likewise, in a second round (logs/hf-untouched2-once.txt;
#                     the last command); hf-untouched3-*.jsonl (Llama-2-7B, Llama-3.1-405B,
#                     Qwen3-30B-A3B, Mistral-7B-v0.3, Phi-3-mini), measured after every fit and
#                     change, once (logs/hf-untouched3-once.txt).
#   expert GEMMs:     calib-grouped-gemm.jsonl (PyTorch's grouped GEMMs at the expert shapes of
#                     five MoE deployments, fp8 and bf16; the fp8 ones fit the key
#                     fp8:scaled_grouped_mm, the bf16 ones check the MoE layers' fit) and
#                     holdout-grouped-gemm.jsonl (random shapes, looked at once after the fit:
#                     logs/holdout-grouped-gemm-once.txt; the command before the last four).
#   block-scaled fp8: calib-block-fp8.jsonl (Triton Linear layers and fused-MoE expert GEMMs
#                     with 128 x 128 weight blocks, the engines' kernel class for DeepSeek-V3/R1
#                     and the Qwen3 FP8 checkpoints, at their shapes; they fit the keys
#                     fp8:triton-block-fp8 and fp8:triton-fused-moe-fp8) and
#                     holdout-block-fp8.jsonl (random shapes, looked at once after the fit:
#                     logs/holdout-block-fp8-once.txt; the command after the grouped GEMMs'),
#                     measured again as holdout-block-fp8-repeat.jsonl (benchmarks/eager_repeat.py
#                     compares the two). holdout-block-fp8-eager-pick*.jsonl, an earlier pair
#                     whose tiles were picked by eager timings, are kept, not used.
#   16-bit experts:   calib-fused-moe16.jsonl (the engines' fused MoE kernel, Triton, over bf16
#                     experts at the shapes of Mixtral-8x7B and 8x22B, Qwen3-30B-A3B and
#                     DeepSeek-V2-Lite; they fit the key bf16:triton-fused-moe, which fp16
#                     takes too) and holdout-fused-moe16.jsonl (random bf16 and fp16 shapes,
#                     looked at once after the fit; the command after the block-scaled ones').
#   add and norm:     calib-add-rmsnorm.jsonl (the residual add fused into RMSNorm, a Triton
#                     program per row as the engines run it, at seven model widths from 1 to
#                     32,768 tokens; it fits the memory key add_rmsnorm) and
#                     holdout-add-rmsnorm.jsonl (other widths, random token counts; and
#                     -eager.jsonl, the same as eager launches), looked at once after the fit.
#   graph mode, new:  holdout14.jsonl with random-layers11.jsonl, the first held-out set
#                     with copies timed as kernels; looked at once before the copy kernel's
#                     alignment rule, which they led to.
#   MLA decode:       FlashMLA, vLLM's MLA decode kernel on Hopper, has no H200 record yet: its
#                     key (attention: flashmla) is the one fitted on an H100 (its probe and its
#                     mla suite), ../h100-sxm/mla-fit.yaml, which the fit below takes as its base
#                     (a key no record reaches keeps the base's parameters, as fractions of the
#                     H200's peaks):
#                     cd benchmarks/measurements/h100-sxm && rooflinesim calibrate probe-mla.jsonl \
#                       calib-mla.jsonl --gpu h100-sxm --base none -o mla-fit.yaml
#                     Lent so, it gives vLLM 0.8.4's DeepSeek-R1 steps on 8 x H200 the cost per
#                     cached token their logs show (benchmarks/mla_log_slopes.py). On an H200,
#                     benchmarks/measure_mla.sh measures the harness's mla suites (calib-mla.jsonl,
#                     which the calibrate line below then reads, and holdout-mla.jsonl, to look at
#                     once after the fit).
set -euo pipefail
cd "$(dirname "$0")/.."
d=benchmarks/measurements/h200-sxm
rooflinesim calibrate "$d"/calib-*.jsonl "$d"/collectives.jsonl "$d"/decoder-layers.jsonl \
  "$d"/eager3-{random,memory,decoder}.jsonl "$d"/eager-moe-noprofile.jsonl "$d"/eager-moe-random.jsonl \
  "$d"/hf-ops.jsonl "$d"/hf-ops-dynamic.jsonl "$d"/hf-ops-v3.jsonl "$d"/hf-forward-{llama,qwen,mixtral8,mistral,phi3,qwen3moe8}.jsonl \
  "$d"/hf-dynamic-{llama,qwen}.jsonl \
  --gpu h200-sxm --base benchmarks/measurements/h100-sxm/mla-fit.yaml -o hardware_specs/profiles/h200-sxm.yaml --force
held=("$d"/holdout.jsonl "$d"/holdout{2,3,4,5,6,7,8,9,10}.jsonl "$d"/random-layers.jsonl
      "$d"/random-layers{2,3,4,5,6,7}.jsonl)
rooflinesim validate "${held[@]}" --gpu h200-sxm --worst 5
rooflinesim validate "${held[@]}" --gpu h200-sxm --worst 0 --by mode
rooflinesim validate "${held[@]}" --gpu h200-sxm --worst 0 --by backend
rooflinesim validate "$d"/holdout1{1,2}.jsonl "$d"/random-layers{8,9}.jsonl --gpu h200-sxm --worst 5 --by mode
rooflinesim validate "$d"/holdout14.jsonl "$d"/random-layers11.jsonl --gpu h200-sxm --worst 5 --by mode
rooflinesim validate "$d"/holdout-grouped-gemm.jsonl --gpu h200-sxm --worst 6 --by backend
rooflinesim validate "$d"/holdout-block-fp8.jsonl --gpu h200-sxm --worst 6 --by op
rooflinesim validate "$d"/holdout-fused-moe16.jsonl --gpu h200-sxm --worst 6 --by dtype
rooflinesim validate "$d"/holdout-add-rmsnorm.jsonl "$d"/holdout-add-rmsnorm-eager.jsonl --gpu h200-sxm --worst 6 --by mode
rooflinesim validate "$d"/eager-holdout16.jsonl --gpu h200-sxm --worst 5 --by mode
rooflinesim validate "$d"/eager-holdout17.jsonl --gpu h200-sxm --worst 5 --by mode
rooflinesim validate "$d"/eager-holdout18.jsonl --gpu h200-sxm --worst 5 --by mode
python benchmarks/hf_check.py
python benchmarks/hf_check.py "$d"/hf-untouched-{phi4,dsv2lite,llama,dynamic}.jsonl --rows --engine
python benchmarks/hf_check.py "$d"/hf-untouched2-{dsv3,mistral01,qwen3moe,llama70,qwen72,mixtral22}.jsonl --rows --engine
python benchmarks/hf_check.py "$d"/hf-untouched3-*.jsonl --rows --engine
