#!/usr/bin/env bash
# How the H200 measurements in benchmarks/measurements/h200-sxm/ were taken: on a box
# with two H200 SXM GPUs, single-GPU suites run side by side (one process per GPU),
# then the collectives use both GPUs. Files resume: cases already in a file are skipped.
#
#   benchmarks/measure_h200.sh PHASE OUTDIR     (PHASE: smoke | main | grouped1 | block1 | block2 | moe16 | norm1 | random | focus | holdout3 | tokens | final | final2 | final3 | focus2 | final4 | collectives3 | focus3 | focus4 | final5 | eager | eager2 | eager3 | eager4 | eager5 | eager6 | eager7 | hf1 | hf2 | hf3 | hf4 | hf5 | sdpa1)
#
# Each phase fits in ten minutes of machine time.
set -u
phase=${1:?phase}
out=${2:?output directory}
data=benchmarks/measurements/h200-sxm
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# never use NVLink multicast (NVLS) on shared machines
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# start each output file from what the repository already holds (a phase's own files
# are copied back from $out afterwards; at most eight files come back from a run)
for f in "$data"/*.jsonl; do [ -e "$f" ] && cp "$f" "$out/" && chmod u+w "$out/$(basename "$f")"; done
keep_only() {  # leave only the named files (and logs) in $out
  for f in "$out"/*.jsonl; do
    case " $* " in *" $(basename "$f") "*) ;; *) rm -f "$f" ;; esac
  done
}

on_gpu() {  # on_gpu GPU BUDGET_S FILE SUITE...
  local gpu=$1 budget=$2 file=$3; shift 3
  local args=()
  for s in "$@"; do args+=(--suite "$s"); done
  CUDA_VISIBLE_DEVICES=$gpu python3 -m rooflinesim.harness run "${args[@]}" \
    --out "$out/$file" --time-budget "$budget" >>"$out/log-gpu$gpu.txt" 2>&1
}

calib_with_held_out() {  # calib_with_held_out CALIB_FILE CALIB_SUITE SUITE LAYER_SUITE LAYER_FILE
  on_gpu 0 330 "$1" "$2" &
  (on_gpu 1 240 "$3.jsonl" "$3"; on_gpu 1 100 "$5" "$4") &
  wait
  python3 -m rooflinesim.harness run --suite "$3" --out "$out/$3.jsonl" \
    --time-budget 90 >>"$out/log-collectives.txt" 2>&1
}

held_out_with_layers() {  # held_out_with_layers SUITE LAYER_SUITE LAYER_FILE
  on_gpu 0 330 "$1.jsonl" "$1" &
  on_gpu 1 200 "$3" "$2" &
  wait
  python3 -m rooflinesim.harness run --suite "$1" --out "$out/$1.jsonl" \
    --time-budget 90 >>"$out/log-collectives.txt" 2>&1
}

run1() {  # run1 FILE BUDGET SUITE MODE: one single-GPU suite into $out/FILE, logged to $out/$log
  timeout $(( $2 + 30 )) python3 -m rooflinesim.harness run --suite "$3" --mode "$4" \
    --out "$out/$1" --time-budget "$2" >>"$out/$log" 2>&1
}

versions() {  # the software that measures, into $out/$log (Triton's too, where the image has it)
  python3 -c "import importlib.util, torch; print('torch', torch.__version__, torch.version.cuda,
      *(['triton', __import__('triton').__version__] if importlib.util.find_spec('triton') else []),
      torch.cuda.get_device_name())" >>"$out/$log" 2>&1
}

nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu \
  --format=csv >"$out/nvidia-smi.csv" 2>&1

case $phase in
smoke)
  on_gpu 0 200 quick.jsonl quick &
  on_gpu 1 200 calib-memory-moe.jsonl memory moe &
  wait
  python3 -m rooflinesim.harness run --suite collectives --out "$out/collectives.jsonl" \
    --time-budget 120 >>"$out/log-collectives.txt" 2>&1
  ;;
main)
  (on_gpu 0 300 calib-gemm.jsonl gemm; on_gpu 0 150 holdout.jsonl holdout) &
  (on_gpu 1 300 calib-attention.jsonl attention; on_gpu 1 150 decoder-layers.jsonl decoder) &
  wait
  python3 -m rooflinesim.harness run --suite holdout --out "$out/holdout.jsonl" \
    --time-budget 60 >>"$out/log-collectives.txt" 2>&1
  ;;
random)
  on_gpu 0 420 calib-random.jsonl random &
  (CUDA_VISIBLE_DEVICES=1 python3 -m rooflinesim.harness run --suite quick --mode eager \
     --out "$out/eager-quick.jsonl" --time-budget 300 >>"$out/log-gpu1.txt" 2>&1) &
  wait
  ;;
focus)
  # targeted calibration cases, and a second held-out set from a new seed
  on_gpu 0 330 holdout2.jsonl holdout2 &
  on_gpu 1 360 calib-focus.jsonl focus &
  wait
  python3 -m rooflinesim.harness run --suite holdout2 --out "$out/holdout2.jsonl" \
    --time-budget 90 >>"$out/log-collectives.txt" 2>&1
  ;;
holdout3)
  # a third held-out set, measured after the model's last change and never looked at
  # before it was reported
  on_gpu 0 330 holdout3.jsonl holdout3
  python3 -m rooflinesim.harness run --suite holdout3 --out "$out/holdout3.jsonl" \
    --time-budget 90 >>"$out/log-collectives.txt" 2>&1
  ;;
tokens)
  # calibration cases at token counts that are not round; a fourth held-out set and
  # 80 random decoder layers, both from new seeds
  calib_with_held_out calib-tokens.jsonl tokens holdout4 layers random-layers.jsonl
  ;;
final)
  # a fifth held-out set and 80 more random decoder layers (new seeds), measured after
  # the model's last change and looked at only to report it
  held_out_with_layers holdout5 layers2 random-layers2.jsonl
  ;;
final2)
  # a sixth held-out set and 80 more random decoder layers (new seeds), measured after
  # the last model change of the round that used holdout5 for development
  held_out_with_layers holdout6 layers3 random-layers3.jsonl
  ;;
final3)
  # a seventh held-out set and 80 more random decoder layers (new seeds), measured after
  # the last model change of the round that used holdout6 for development
  held_out_with_layers holdout7 layers4 random-layers4.jsonl
  ;;
focus2)
  # calibration cases where the held-out sets showed the fit thin, and an eighth held-out
  # set with 80 more random decoder layers (new seeds) for the model fitted with them
  calib_with_held_out calib-focus2.jsonl focus2 holdout8 layers5 random-layers5.jsonl
  ;;
final4)
  # a ninth held-out set and 80 more random decoder layers (new seeds), measured after
  # the last model change of the round that used holdout8 for development
  held_out_with_layers holdout9 layers6 random-layers6.jsonl
  ;;
focus3)
  # calibration cases for GEMMs with row strides under 16 bytes, and a tenth held-out set
  # with 80 more random decoder layers (new seeds) for the model fitted with them
  calib_with_held_out calib-focus3.jsonl focus3 holdout10 layers7 random-layers7.jsonl
  ;;
focus4)
  # calibration cases for fp32 GEMMs (with and without TF32) and small misaligned ones,
  # and an eleventh held-out set, whose GEMMs include fp32, with 80 more decoder layers
  calib_with_held_out calib-focus4.jsonl focus4 holdout11 layers8 random-layers8.jsonl
  ;;
final5)
  # a twelfth held-out set and 80 more random decoder layers (new seeds), measured for the
  # model that holdout11 evaluated, unchanged: a second untouched round of it
  held_out_with_layers holdout12 layers9 random-layers9.jsonl
  ;;
eager)
  # one GPU: why large copies are slow inside CUDA graphs (benchmarks/copy_modes.py); eager
  # launches of every single-GPU suite family for the host-launch fit; and a thirteenth
  # held-out set with 80 more decoder layers (new seeds), eager, never fitted to
  export CUDA_VISIBLE_DEVICES=0
  timeout 120 python3 benchmarks/copy_modes.py --out "$out/copy-modes.jsonl" >>"$out/log-eager.txt" 2>&1
  for s in "random 110" "memory 45" "moe 45" "decoder 70"; do
    set -- $s
    timeout $(( $2 + 40 )) python3 -m rooflinesim.harness run --suite "$1" --mode eager \
      --out "$out/eager-$1.jsonl" --time-budget "$2" >>"$out/log-eager.txt" 2>&1
  done
  timeout 130 python3 -m rooflinesim.harness run --suite holdout13 --mode eager \
    --out "$out/eager-holdout13.jsonl" --time-budget 90 >>"$out/log-eager.txt" 2>&1
  timeout 70 python3 -m rooflinesim.harness run --suite layers10 --mode eager \
    --out "$out/eager-layers10.jsonl" --time-budget 40 >>"$out/log-eager.txt" 2>&1
  cat "$out/nvidia-smi.csv" >>"$out/log-eager.txt" && rm -f "$out/nvidia-smi.csv"  # (one log file)
  ;;
eager2)
  # one GPU, after the harness's two fixes (copies as kernels, an empty allocator before
  # each case): the memory suite again in graph mode; the thirteenth held-out set again,
  # eager, to see its host times reproduce; a fourteenth held-out set with 80 more decoder
  # layers (new seeds), eager and in graph mode, never fitted to
  export CUDA_VISIBLE_DEVICES=0
  log=log-eager2.txt
  run1 calib-memory2.jsonl 60 memory graph
  run1 eager-holdout13b.jsonl 90 holdout13 eager
  run1 eager-holdout14.jsonl 90 holdout14 eager
  run1 eager-layers11.jsonl 40 layers11 eager
  run1 holdout14.jsonl 90 holdout14 graph
  run1 random-layers11.jsonl 40 layers11 graph
  cat "$out/nvidia-smi.csv" >>"$out/log-eager2.txt" && rm -f "$out/nvidia-smi.csv"
  ;;
eager3)
  # one GPU: the eager calibration suites again with the fixed harness (eager-random,
  # -memory, -moe, -decoder and -quick were measured before it, with host times that
  # grew with the blocks earlier cases left cached), and a fifteenth held-out set with
  # 80 more decoder layers (new seeds), eager, never fitted to
  export CUDA_VISIBLE_DEVICES=0
  log=log-eager3.txt
  run1 eager2-random.jsonl 100 random eager
  run1 eager2-memory.jsonl 40 memory eager
  run1 eager2-moe.jsonl 40 moe eager
  run1 eager2-decoder.jsonl 60 decoder eager
  run1 eager2-quick.jsonl 35 quick eager
  run1 eager-holdout15.jsonl 80 holdout15 eager
  run1 eager-layers12.jsonl 35 layers12 eager
  cat "$out/nvidia-smi.csv" >>"$out/log-eager3.txt" && rm -f "$out/nvidia-smi.csv"
  ;;
eager4)
  # one GPU: eager launches with no profiler pass in the process (after one, later eager
  # launches take longer: eager-moe-profile.jsonl against eager-moe-noprofile.jsonl):
  # calibration suites again, and a sixteenth held-out set, eager, never fitted to
  export CUDA_VISIBLE_DEVICES=0
  log=log-eager4.txt
  run1 eager3-random.jsonl 80 random eager
  run1 eager3-memory.jsonl 25 memory eager
  run1 eager3-decoder.jsonl 40 decoder eager
  run1 eager-holdout16.jsonl 65 holdout16 eager
  ;;
eager5)
  # one GPU, no profiler pass: eager calibration cases for fp32/TF32 GEMMs (focus4) and
  # MoE layers of random shapes, small ones included; the sixteenth held-out set twice
  # more, in a fresh process and in one pinned to a single core (how far host times
  # move from process to process); a seventeenth held-out set, eager, never fitted to
  export CUDA_VISIBLE_DEVICES=0
  log=log-eager5.txt
  run1 eager-focus4.jsonl 100 focus4 eager
  run1 eager-moe-random.jsonl 45 moe-random eager
  run1 eager-holdout16b.jsonl 50 holdout16 eager
  pin=""; command -v taskset >/dev/null && pin="taskset -c 2"
  echo "pinned run: ${pin:-taskset missing, not pinned}" >>"$out/$log"
  timeout 80 $pin python3 -m rooflinesim.harness run --suite holdout16 --mode eager \
    --out "$out/eager-holdout16-pinned.jsonl" --time-budget 50 >>"$out/$log" 2>&1
  run1 eager-holdout17.jsonl 90 holdout17 eager
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
eager6)
  # one GPU, no profiler pass: why host-paced eager launches of one case differ from
  # process to process (eager-holdout16, -16b, -16-pinned): the sixteenth held-out set once
  # more with the SM clock read around each case's timed launches (and sampled by
  # nvidia-smi throughout), then twice with a 30 ms busy burst before them
  export CUDA_VISIBLE_DEVICES=0
  log=log-eager6.txt
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw --format=csv,noheader \
    -lms 100 >"$out/log-clocks.txt" 2>&1 &
  sampler=$!
  run1 eager-holdout16c.jsonl 50 holdout16 eager
  timeout 80 python3 -m rooflinesim.harness run --suite holdout16 --mode eager --warm-gpu-ms 30 \
    --out "$out/eager-holdout16-warm.jsonl" --time-budget 50 >>"$out/$log" 2>&1
  timeout 80 python3 -m rooflinesim.harness run --suite holdout16 --mode eager --warm-gpu-ms 30 \
    --out "$out/eager-holdout16-warm2.jsonl" --time-budget 50 >>"$out/$log" 2>&1
  kill $sampler 2>/dev/null
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
eager7)
  # one GPU, no profiler pass, each eager case built and timed three times (the harness's
  # default for eager launches since eager6 showed one build's host time 1.3-1.5x above
  # another's): the sixteenth held-out set twice (is the median of three builds
  # repeatable from process to process?), and an eighteenth held-out set, never fitted to
  export CUDA_VISIBLE_DEVICES=0
  log=log-eager7.txt
  run1 eager-holdout16-b3.jsonl 100 holdout16 eager
  run1 eager-holdout16-b3b.jsonl 100 holdout16 eager
  run1 eager-holdout18.jsonl 110 holdout18 eager
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
hf1)
  # one GPU: Hugging Face transformers' forward (random bf16 weights, SDPA), prefill and a
  # StaticCache decode step, eager and graph-replayed, with each forward's kernel sum
  # (benchmarks/hf_forward.py): Llama-3.1-8B and Qwen2.5-7B whole, Mixtral-8x7B with 8
  # layers, each model in its own process (a device-side assert ends a process's CUDA use);
  # hf-forward.jsonl and hf-forward-mixtral.jsonl are a first run whose decode steps all
  # failed (the cache held 8 positions past the context; the model writes one further a call)
  export CUDA_VISIBLE_DEVICES=0
  log=log-hf1.txt
  for m in "llama-3.1-8b hf-forward-llama.jsonl" "qwen2.5-7b hf-forward-qwen.jsonl" \
           "mixtral-8x7b hf-forward-mixtral8.jsonl --layers 8"; do
    set -- $m
    timeout 190 python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" "${@:3}" --budget-s 160 \
      >>"$out/$log" 2>&1
  done
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
hf2)
  # one GPU: more of transformers' forward (benchmarks/hf_forward.py): DynamicCache decode
  # steps (eager: the cache grows by a cat each step, as generate() does) of Llama-3.1-8B and
  # Qwen2.5-7B, and prefill and StaticCache decode of Mistral-7B, Phi-3-mini and an 8-layer
  # Qwen3-30B-A3B (MoE), each in its own process
  export CUDA_VISIBLE_DEVICES=0
  log=log-hf2.txt
  for m in "llama-3.1-8b hf-dynamic-llama.jsonl --cache dynamic --no-prefill" \
           "qwen2.5-7b hf-dynamic-qwen.jsonl --cache dynamic --no-prefill" \
           "mistral-7b-v0.3 hf-forward-mistral.jsonl" "phi-3-mini-4k hf-forward-phi3.jsonl" \
           "qwen3-30b-a3b hf-forward-qwen3moe8.jsonl --layers 8"; do
    set -- $m
    timeout 110 python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" "${@:3}" --budget-s 90 \
      >>"$out/$log" 2>&1
  done
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
hf3)
  # one GPU: transformers' forward op by op (benchmarks/hf_forward.py --trace: every aten op
  # that launched kernels, with shapes, dtypes and its kernels), two layers of each model
  # (DeepSeek-V2-Lite: one dense, one MoE), prefill, StaticCache and DynamicCache decode;
  # then timed forwards of models and points that no fit or check has used (hf-untouched-*)
  export CUDA_VISIBLE_DEVICES=0
  log=log-hf3.txt
  timeout 170 python3 benchmarks/hf_forward.py --trace --layers 2 --model llama-3.1-8b --model qwen2.5-7b \
    --model phi-3-mini-4k --model mistral-7b-v0.3 --model mixtral-8x7b --model qwen3-30b-a3b \
    --model deepseek-v2-lite --prefill 1x512 --prefill 4x1024 --decode 1x512 --decode 16x2048 \
    --out "$out/hf-ops.jsonl" --budget-s 150 >>"$out/$log" 2>&1
  timeout 70 python3 benchmarks/hf_forward.py --trace --layers 2 --cache dynamic --no-prefill \
    --model llama-3.1-8b --model phi-3-mini-4k --model qwen3-30b-a3b --decode 1x512 --decode 16x2048 \
    --out "$out/hf-ops-dynamic.jsonl" --budget-s 55 >>"$out/$log" 2>&1
  for m in "phi-4 hf-untouched-phi4.jsonl 95" "deepseek-v2-lite hf-untouched-dsv2lite.jsonl 85" \
           "llama-3.1-8b hf-untouched-llama.jsonl 65"; do
    set -- $m
    timeout $(( $3 + 15 )) python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" --budget-s "$3" \
      --prefill 2x256 --prefill 1x1024 --prefill 2x1536 --decode 4x256 --decode 16x512 --decode 48x1024 \
      --decode 128x512 >>"$out/$log" 2>&1
  done
  timeout 60 python3 benchmarks/hf_forward.py --model phi-4 --cache dynamic --no-prefill --decode 4x256 \
    --decode 16x512 --decode 48x1024 --out "$out/hf-untouched-dynamic.jsonl" --budget-s 45 >>"$out/$log" 2>&1
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
hf4)
  # one GPU: a second untouched set of transformers' forwards, of models and architectures no
  # fit or check has used (DeepSeek-V3's MLA with q_lora and its sigmoid group router,
  # Mistral-7B-v0.1's sliding window over a GQA cache, Qwen3-235B's MoE, Llama-3-70B and
  # Qwen2.5-72B widths, Mixtral-8x22B), on fewer layers where the whole model would not fit,
  # then op-by-op traces of DeepSeek-V3 and Mistral-7B-v0.1 (four layers: DeepSeek-V3 three dense, one MoE)
  export CUDA_VISIBLE_DEVICES=0
  log=log-hf4.txt
  for m in "deepseek-v3 hf-untouched2-dsv3.jsonl 75 --layers 4" "mistral-7b-v0.1 hf-untouched2-mistral01.jsonl 60" \
           "qwen3-235b-a22b hf-untouched2-qwen3moe.jsonl 70 --layers 6" "llama-3-70b hf-untouched2-llama70.jsonl 70 --layers 16" \
           "qwen2.5-72b hf-untouched2-qwen72.jsonl 60 --layers 16" "mixtral-8x22b hf-untouched2-mixtral22.jsonl 60 --layers 6"; do
    set -- $m
    timeout $(( $3 + 15 )) python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" --budget-s "$3" "${@:4}" \
      --prefill 1x384 --prefill 4x768 --decode 2x384 --decode 24x768 --decode 96x1536 --decode 8x4600 >>"$out/$log" 2>&1
  done
  timeout 60 python3 benchmarks/hf_forward.py --trace --model deepseek-v3 --model mistral-7b-v0.1 --layers 4 \
    --prefill 2x512 --decode 4x1024 --out "$out/hf-ops-v3.jsonl" --budget-s 45 >>"$out/$log" 2>&1
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
hf5)
  # one GPU: a third untouched set of transformers' forwards, measured after the inventory, the
  # copy classes, the host fit and the graph gap were fixed: Llama-2-7B (MHA), Llama-3.1-405B
  # (8 layers), Qwen3-30B-A3B (16 layers), Mistral-7B-v0.3 and Phi-3-mini at new points, and
  # DynamicCache steps of Llama-2-7B and Qwen3-30B-A3B
  export CUDA_VISIBLE_DEVICES=0
  log=log-hf5.txt
  for m in "llama-2-7b hf-untouched3-llama2.jsonl 60" "llama-3.1-405b hf-untouched3-llama405.jsonl 70 --layers 8" \
           "qwen3-30b-a3b hf-untouched3-qwen3moe.jsonl 60 --layers 16" "mistral-7b-v0.3 hf-untouched3-mistral.jsonl 55" \
           "phi-3-mini-4k hf-untouched3-phi3.jsonl 55"; do
    set -- $m
    timeout $(( $3 + 15 )) python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" --budget-s "$3" "${@:4}" \
      --prefill 2x640 --prefill 1x3000 --prefill 6x512 --decode 3x700 --decode 12x1800 --decode 40x3000 >>"$out/$log" 2>&1
  done
  for m in "llama-2-7b hf-untouched3-dyn-llama2.jsonl 40" "qwen3-30b-a3b hf-untouched3-dyn-qwen3moe.jsonl 40 --layers 16"; do
    set -- $m
    timeout $(( $3 + 15 )) python3 benchmarks/hf_forward.py --model "$1" --out "$out/$2" --budget-s "$3" "${@:4}" \
      --cache dynamic --no-prefill --decode 3x700 --decode 12x1800 >>"$out/$log" 2>&1
  done
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
grouped1)
  # one GPU: expert GEMMs alone (torch._grouped_mm in bf16, torch._scaled_grouped_mm in fp8
  # with one scale per input row and per weight column): the calibration set (model
  # shapes) and a held-out set of random shapes, each looked at once after the fit
  export CUDA_VISIBLE_DEVICES=0
  log=log-grouped1.txt
  versions
  run1 calib-grouped-gemm.jsonl 240 grouped-gemm graph
  run1 holdout-grouped-gemm.jsonl 150 grouped-gemm-holdout graph
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
block1)
  # one GPU: block-scaled fp8 GEMMs (128 x 128 weight blocks, 1 x 128 activation groups) in
  # Triton, the kernel class vLLM and SGLang run for DeepSeek-V3/R1 and the Qwen3 FP8
  # checkpoints: Linear layers and fused-MoE expert GEMMs, each shape's tile configuration
  # the fastest of the harness's set (each timed in a CUDA graph); calibration (model
  # shapes) and held out (random)
  export CUDA_VISIBLE_DEVICES=0
  log=log-block1.txt
  rm -f "$out/calib-block-fp8.jsonl" "$out/holdout-block-fp8.jsonl"
  versions
  run1 calib-block-fp8.jsonl 300 block-fp8 graph
  run1 holdout-block-fp8.jsonl 130 block-fp8-holdout graph
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
block2)
  # one GPU: the block-scaled calibration cases block1 had no time left for (the file
  # resumes), then the held-out set again in a new process: how far a repeat lands
  export CUDA_VISIBLE_DEVICES=0
  log=log-block2.txt
  run1 calib-block-fp8.jsonl 150 block-fp8 graph
  versions
  rm -f "$out/holdout-block-fp8-repeat.jsonl"
  run1 holdout-block-fp8-repeat.jsonl 200 block-fp8-holdout graph
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
moe16)
  # one GPU: the engines' fused MoE kernel (Triton) over experts stored in 16 bits, the kernel
  # class vLLM and SGLang run for Mixtral, Qwen3-MoE and DeepSeek-V2-Lite in bf16 or fp16:
  # each shape's tile configuration the fastest of the harness's set (timed in a CUDA graph);
  # calibration (model shapes, bf16) and held out (random, bf16 and fp16)
  export CUDA_VISIBLE_DEVICES=0
  log=log-moe16.txt
  rm -f "$out/calib-fused-moe16.jsonl" "$out/holdout-fused-moe16.jsonl"
  versions
  run1 calib-fused-moe16.jsonl 330 fused-moe16 graph
  run1 holdout-fused-moe16.jsonl 120 fused-moe16-holdout graph
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
norm1)
  # one GPU: the residual add fused into RMSNorm (Triton, a program per row), the kernel class
  # the engines run between a layer's blocks; calibration (model widths) and held out (other
  # widths, random token counts), in CUDA graphs; the held-out set again as eager launches
  export CUDA_VISIBLE_DEVICES=0
  log=log-norm1.txt
  rm -f "$out/calib-add-rmsnorm.jsonl" "$out/holdout-add-rmsnorm.jsonl" "$out/holdout-add-rmsnorm-eager.jsonl"
  versions
  run1 calib-add-rmsnorm.jsonl 200 add-rmsnorm graph
  run1 holdout-add-rmsnorm.jsonl 100 add-rmsnorm-holdout graph
  run1 holdout-add-rmsnorm-eager.jsonl 60 add-rmsnorm-holdout eager
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
sdpa1)
  # one GPU: the host cost of SDPA calls whose key length is new each call, as a DynamicCache
  # decode makes them (benchmarks/sdpa_new_shape.py), by batch, heads, KV heads and head size
  export CUDA_VISIBLE_DEVICES=0
  log=log-sdpa1.txt
  timeout 200 python3 benchmarks/sdpa_new_shape.py --out "$out/sdpa-new-shape.jsonl" >>"$out/$log" 2>&1
  cat "$out/nvidia-smi.csv" >>"$out/$log" && rm -f "$out/nvidia-smi.csv"
  ;;
collectives3)
  # the collectives suite again on another machine (small messages differ by machine)
  python3 -m rooflinesim.harness run --suite collectives --out "$out/calib-collectives3.jsonl" \
    --time-budget 300 >>"$out/log-collectives.txt" 2>&1
  ;;
*) echo "unknown phase $phase" >&2; exit 2 ;;
esac
case $phase in
  smoke) keep_only quick.jsonl calib-memory-moe.jsonl collectives.jsonl ;;
  main) keep_only calib-gemm.jsonl holdout.jsonl calib-attention.jsonl decoder-layers.jsonl ;;
  random) keep_only calib-random.jsonl eager-quick.jsonl ;;
  focus) keep_only calib-focus.jsonl holdout2.jsonl ;;
  holdout3) keep_only holdout3.jsonl ;;
  tokens) keep_only calib-tokens.jsonl holdout4.jsonl random-layers.jsonl ;;
  final) keep_only holdout5.jsonl random-layers2.jsonl ;;
  final2) keep_only holdout6.jsonl random-layers3.jsonl ;;
  final3) keep_only holdout7.jsonl random-layers4.jsonl ;;
  focus2) keep_only calib-focus2.jsonl holdout8.jsonl random-layers5.jsonl ;;
  final4) keep_only holdout9.jsonl random-layers6.jsonl ;;
  collectives3) keep_only calib-collectives3.jsonl ;;
  focus3) keep_only calib-focus3.jsonl holdout10.jsonl random-layers7.jsonl ;;
  focus4) keep_only calib-focus4.jsonl holdout11.jsonl random-layers8.jsonl ;;
  final5) keep_only holdout12.jsonl random-layers9.jsonl ;;
  eager) keep_only copy-modes.jsonl eager-random.jsonl eager-memory.jsonl eager-moe.jsonl eager-decoder.jsonl \
    eager-holdout13.jsonl eager-layers10.jsonl ;;
  eager2) keep_only calib-memory2.jsonl eager-holdout13b.jsonl eager-holdout14.jsonl eager-layers11.jsonl \
    holdout14.jsonl random-layers11.jsonl ;;
  eager3) keep_only eager2-random.jsonl eager2-memory.jsonl eager2-moe.jsonl eager2-decoder.jsonl \
    eager2-quick.jsonl eager-holdout15.jsonl eager-layers12.jsonl ;;
  eager4) keep_only eager3-random.jsonl eager3-memory.jsonl eager3-decoder.jsonl eager-holdout16.jsonl ;;
  sdpa1) keep_only sdpa-new-shape.jsonl ;;
  grouped1) keep_only calib-grouped-gemm.jsonl holdout-grouped-gemm.jsonl ;;
  block1) keep_only calib-block-fp8.jsonl holdout-block-fp8.jsonl ;;
  block2) keep_only calib-block-fp8.jsonl holdout-block-fp8-repeat.jsonl ;;
  moe16) keep_only calib-fused-moe16.jsonl holdout-fused-moe16.jsonl ;;
  norm1) keep_only calib-add-rmsnorm.jsonl holdout-add-rmsnorm.jsonl holdout-add-rmsnorm-eager.jsonl ;;
  hf5) keep_only hf-untouched3-llama2.jsonl hf-untouched3-llama405.jsonl hf-untouched3-qwen3moe.jsonl \
    hf-untouched3-mistral.jsonl hf-untouched3-phi3.jsonl hf-untouched3-dyn-llama2.jsonl hf-untouched3-dyn-qwen3moe.jsonl ;;
  hf4) keep_only hf-untouched2-dsv3.jsonl hf-untouched2-mistral01.jsonl hf-untouched2-qwen3moe.jsonl \
    hf-untouched2-llama70.jsonl hf-untouched2-qwen72.jsonl hf-untouched2-mixtral22.jsonl hf-ops-v3.jsonl ;;
  hf3) keep_only hf-ops.jsonl hf-ops-dynamic.jsonl hf-untouched-phi4.jsonl hf-untouched-dsv2lite.jsonl \
    hf-untouched-llama.jsonl hf-untouched-dynamic.jsonl ;;
  hf2) keep_only hf-dynamic-llama.jsonl hf-dynamic-qwen.jsonl hf-forward-mistral.jsonl hf-forward-phi3.jsonl \
    hf-forward-qwen3moe8.jsonl ;;
  hf1) keep_only hf-forward-llama.jsonl hf-forward-qwen.jsonl hf-forward-mixtral8.jsonl ;;
  eager7) keep_only eager-holdout16-b3.jsonl eager-holdout16-b3b.jsonl eager-holdout18.jsonl ;;
  eager6) keep_only eager-holdout16c.jsonl eager-holdout16-warm.jsonl eager-holdout16-warm2.jsonl ;;
  eager5) keep_only eager-focus4.jsonl eager-moe-random.jsonl eager-holdout16b.jsonl eager-holdout16-pinned.jsonl \
    eager-holdout17.jsonl ;;
esac
tail -n 3 "$out"/log-*.txt
wc -l "$out"/*.jsonl
