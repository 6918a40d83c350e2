"""`rooflinesim serve ...`: an engine serving a stream of requests, simulated on the
calibrated step times, reported with the metrics of vLLM's benchmark client."""

from __future__ import annotations

import math

import click

from .common import (FRACTION, MAX_COUNT, POS, Real, Size, SizeOrAuto, UserError, allreduce_option, echo, emit_json,
                     gpu_options, json_option, load_gpu, load_model, load_profile, parse_size, parse_slos,
                     profile_label, profile_option, slo_options, table, weights_of)

PAR = Size(max=MAX_COUNT)
MAX_PROMPTS = 10_000_000
MAX_LEN = 10_000_000
MAX_RATE = 1e9
MAX_OVERHEAD_S = 10.0
MAX_STEP_TOKENS = 1 << 20  # a step's token budget (the step tables hold one entry per token count)
MAX_SEQS = 1 << 16
SLO_KEYS = ("ttft", "tpot", "e2el")


class Rate(click.ParamType):
    """Requests per second above 0, or 'inf' (every request at once)."""

    name = "rate"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip().lower()
        if text in ("inf", "infinity"):
            return math.inf
        try:
            x = float(text)
        except ValueError:
            self.fail(f"{value!r} is neither a number of requests per second nor 'inf'.", param, ctx)
        if not (math.isfinite(x) and 0 < x <= MAX_RATE):
            self.fail(f"{value!r} is not a rate above 0 and at most {MAX_RATE:g} per second (or 'inf').", param, ctx)
        return x

    def get_metavar(self, param, ctx=None):
        return "R|inf"


def _pd(ctx, param, value):
    """PREFILL:DECODE replica counts of a disaggregated pair."""
    if value is None:
        return None
    a, sep, b = str(value).partition(":")
    try:
        counts = (int(a), int(b)) if sep else None
    except ValueError:
        counts = None
    if counts is None or min(counts) < 1 or max(counts) > MAX_COUNT:
        raise click.BadParameter(f"expected PREFILL:DECODE, two whole numbers of replicas from 1 to {MAX_COUNT} "
                                 f"(e.g. 1:2), got {value!r}")
    return counts


def _percentiles(ctx, param, value) -> tuple:
    """Comma-separated percentiles, as vLLM's --metric-percentiles takes them."""
    try:
        ps = tuple(float(x) for x in str(value).split(",") if x.strip())
    except ValueError:
        ps = ()
    from ..serve.simulate import MAX_PERCENTILES

    if not ps or len(ps) > MAX_PERCENTILES or not all(0 < x <= 100 for x in ps):
        raise click.BadParameter(f"expected 1 to {MAX_PERCENTILES} comma-separated percentiles above 0 and at most 100 "
                                 f"(e.g. 50,90,95,99), got {value!r}")
    return ps


def _goodput(ctx, param, values) -> dict:
    """KEY:MS pairs (ttft, tpot, e2el), as vLLM's --goodput takes them."""
    out = {}
    for item in values:
        for part in item.split():
            key, sep, ms = part.partition(":")
            key = key.strip().lower()
            if not sep or key not in SLO_KEYS:
                raise click.BadParameter(f"expected KEY:MS with KEY one of {', '.join(SLO_KEYS)}, got {part!r}")
            try:
                limit = float(ms)
            except ValueError:
                raise click.BadParameter(f"{ms!r} is not a number of milliseconds") from None
            if not (math.isfinite(limit) and limit > 0):
                raise click.BadParameter(f"the {key} SLO must be a finite number of milliseconds above 0")
            out[key] = limit
    return out


@click.command()
@click.option("--model", "model_name", required=True,
              help="A bundled preset (e.g. llama-3.1-8b), a Hugging Face id, or a config.json path.")
@gpu_options
@profile_option
@click.option("--tp", type=PAR, default=1, show_default=True, help="Tensor-parallel GPUs per replica.")
@click.option("--pp", type=PAR, default=1, show_default=True, help="Pipeline stages (only 1 is simulated yet).")
@click.option("--ep", type=PAR, default=1, show_default=True, help="Expert-parallel GPUs (MoE).")
@click.option("--dp", type=PAR, default=1, show_default=True,
              help="Data-parallel replicas; each gets every dp-th request.")
@click.option("--weights", default=None, help="bf16, fp16, fp8, int8 or int4 (default: the config's, else bf16).")
@click.option("--kv-dtype", "--kv", "kv_dtype", default=None, help="KV-cache dtype: bf16, fp16 or fp8.")
@click.option("--attention", type=click.Choice(["fa3", "fa2", "naive"]), default=None,
              help="Attention kernel class (default: the GPU's own).")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm", "static", "hf"]), default="vllm",
              show_default=True,
              help="vllm: vLLM v1's scheduler (chunked prefill mixed into decode steps, paged KV, preemption by "
                   "recompute); sglang: SGLang's (prefill batches first, KV reserved for future tokens, "
                   "retraction); trtllm: TensorRT-LLM's in-flight batching (KV reserved to completion, no "
                   "eviction, by default; --capacity-policy, --chunked-context); static: static batches, for "
                   "contrast; hf: static batches run as Hugging Face transformers' generate() runs them (predict "
                   "model --engine hf).")
@click.option("--eager", is_flag=True, help="--engine hf: launched from Python, no CUDA graph (a DynamicCache "
                                           "unless --hf-cache static), as generate() runs by default.")
@click.option("--hf-cache", type=click.Choice(["static", "dynamic"]), default=None,
              help="--engine hf: the KV cache (default: dynamic with --eager, else static).")
@click.option("--max-num-batched-tokens", type=Size(max=MAX_STEP_TOKENS), default=None,
              help="Token budget of a step (vLLM's max_num_batched_tokens, SGLang's chunked_prefill_size, "
                   "TensorRT-LLM's max_num_tokens; default: the engine's for the GPU).")
@click.option("--max-num-seqs", type=Size(max=MAX_SEQS), default=None,
              help="Most requests running at once (default: the engine's).")
@click.option("--block-size", type=Size(max=4096), default=None,
              help="KV block, in tokens (default: the engine's: 16 vLLM, 1 SGLang, 32 TensorRT-LLM).")
@click.option("--gpu-memory-utilization", type=FRACTION, default=None,
              help="vllm: share of each card the engine may use (sets the KV cache with the memory planner; "
                   "default 0.9); trtllm: TensorRT-LLM's free_gpu_memory_fraction, the share of what the weights "
                   "and a forward pass leave (default 0.9).")
@click.option("--mem-fraction-static", type=FRACTION, default=None,
              help="sglang: SGLang's flag, the share of the memory free before the weights kept for weights and "
                   "KV cache (default: SGLang's rule for the GPU, TP x PP, prefill chunk and CUDA graphs, as "
                   "`rooflinesim fit --engine sglang` prints it).")
@click.option("--kv-cache-tokens", type=POS, default=None,
              help="KV-cache tokens per replica (default: what `rooflinesim fit --engine vllm` finds; sglang: "
                   "`fit --engine sglang`).")
@click.option("--max-model-len", type=SizeOrAuto(max=2**31), default=None,
              help="Longest request (prompt + output tokens) the engine accepts: vLLM's --max-model-len, "
                   "SGLang's --context-length, TensorRT-LLM's max_seq_len (default: the model's "
                   "max_position_embeddings). vLLM does not start where its KV cache cannot hold one such request; "
                   "'auto' (vLLM's, since 0.14): the longest its KV cache holds, up to the model's.")
@click.option("--pd", "pd", default=None, callback=_pd, metavar="PREFILL:DECODE",
              help="Prefill/decode disaggregation (vLLM with its NixlConnector, or SGLang's): PREFILL prefill "
                   "replicas and DECODE decode replicas of the deployment behind a proxy, each prompt's KV moved "
                   "to its decode replica (e.g. 1:2).")
@click.option("--decode-tp", type=PAR, default=None,
              help="--pd: tensor-parallel GPUs of each decode replica (default: --tp).")
@click.option("--decode-gpu", default=None,
              help="--pd: the decode replicas' GPU (default: --gpu), priced with its own default profile.")
@click.option("--kv-link-bandwidth", default=None,
              help="--pd: bandwidth of the KV move per GPU, e.g. 42GB/s (default: the engine's connector as "
                   "measured in use: 4.3 GB/s vLLM's NixlConnector, 42 GB/s SGLang's Mooncake; the source in the "
                   "JSON).")
@click.option("--kv-link-latency", default=None, help="--pd: fixed time of each KV pull, e.g. 2ms (default: 0).")
@click.option("--step-overhead", type=Real(min=0, max=MAX_OVERHEAD_S), default=None,
              help="Host seconds per engine step beyond the GPU's (default: the engine's, with its source "
                   "in the JSON).")
@click.option("--request-overhead", type=Real(min=0, max=MAX_OVERHEAD_S), default=None,
              help="Seconds from a client's send to the engine's queue for each request (the server's front end: "
                   "HTTP, chat template, tokenization, the hop to the engine process), in every latency the client "
                   "sees and in when a closed loop's next request arrives (default: the engine's as measured, "
                   "with its source in the JSON: 6.9 ms for sglang, 10.2 ms for vllm, none for the others).")
@click.option("--overlap-schedule/--no-overlap-schedule", default=None,
              help="The scheduler forms the next batch while the GPU runs this one, so a request arriving "
                   "during a step is scheduled a step later: vLLM's async scheduling, SGLang's and TensorRT-LLM's "
                   "overlap schedulers (default: on, as the engines ship; vLLM before 0.14 or with pipeline "
                   "stages, SGLang before 0.3.6 or with --disable-overlap-schedule run without).")
@click.option("--eager-prefill", is_flag=True,
              help="sglang: prefill batches run without CUDA graphs, as SGLang ran them until piecewise CUDA graphs "
                   "became its prefill default (2026, PR 16331): each batch is paced by the slower of its GPU time "
                   "and the host's (1.35 ms a layer for MLA or MoE layers, 0.22 ms for others, as measured on "
                   "SGLang; the source in the JSON).")
@click.option("--cuda-graph-max-bs", type=click.IntRange(0, 1 << 20), default=None, metavar="N",
              help="sglang: the largest decode batch run from a CUDA graph (SGLang's flag); a larger one is paced by "
                   "the slower of its GPU time and the host's for a pass without a graph, as --eager-prefill prices "
                   "a prefill batch (default: SGLang's for the GPU and TP, e.g. 256, or 512 at TP 4 and more, on "
                   "H100 and H200; releases before 0.5 used 160; 0: no decode graph).")
@click.option("--capacity-policy", type=click.Choice(["guaranteed-no-evict", "max-utilization"]), default=None,
              help="trtllm: TensorRT-LLM's capacity scheduler: guaranteed-no-evict (its default) admits a request "
                   "when the KV of its whole prompt and output fits; max-utilization runs every request whose next "
                   "step's KV fits, pausing the latest started ones when the blocks run out (as trtllm-bench runs).")
@click.option("--chunked-context/--no-chunked-context", default=None,
              help="trtllm: cut contexts to the tokens a step leaves (first come first served, in whole KV "
                   "blocks); off by default, on in trtllm-bench.")
@click.option("--num-prompts", type=Size(max=MAX_PROMPTS), default=1000, show_default=True,
              help="Requests to send (random dataset).")
@click.option("--rate", type=Rate(), default="inf", show_default=True,
              help="Requests per second (gamma gaps of --burstiness; 1: Poisson), or inf: all at t = 0.")
@click.option("--burstiness", type=Real(min=0, max=1e6, min_open=True), default=1.0, show_default=True,
              help="Shape of the gamma inter-arrival gaps (1: Poisson; lower: burstier).")
@click.option("--ramp-up-strategy", type=click.Choice(["linear", "exponential"]), default=None,
              help="Raise the request rate over the run from --ramp-up-start-rps to --ramp-up-end-rps, linear or "
                   "exponential in the request's index, as vLLM bench serve's ramp-up (in place of --rate).")
@click.option("--ramp-up-start-rps", type=Real(min=0, max=MAX_RATE, min_open=True), default=None,
              help="The ramp-up's first rate, requests per second.")
@click.option("--ramp-up-end-rps", type=Real(min=0, max=MAX_RATE, min_open=True), default=None,
              help="The ramp-up's last rate, requests per second.")
@click.option("--concurrency", "--max-concurrency", "concurrency", type=Size(max=MAX_PROMPTS), default=None,
              help="At most this many requests in flight (a closed loop, as --max-concurrency).")
@click.option("--num-warmups", type=Size(min=0, max=MAX_PROMPTS), default=0, show_default=True,
              help="Warm-up requests before the measured run, as vLLM bench serve's --num-warmups: copies of the "
                   "first request, all at once (at most --max-concurrency in flight), the measured requests sent "
                   "from when they have finished; they warm the prefix cache and are not counted.")
@click.option("--dataset", default="random", show_default=True,
              help="random (vLLM's random dataset: --input-len, --output-len, --range-ratio), or a public "
                   "traffic shape shipped as data: sharegpt (as vLLM's and SGLang's benchmark clients sample it), "
                   "azure-conv-2023, azure-code-2023 (the Azure LLM inference traces' request lengths).")
@click.option("--input-len", type=Size(max=MAX_LEN), default=1024, show_default=True,
              help="Random dataset: input tokens per request.")
@click.option("--output-len", type=Size(max=MAX_LEN), default=128, show_default=True,
              help="Random dataset: output tokens per request.")
@click.option("--range-ratio", type=Real(min=0, max=1), default=0.0, show_default=True,
              help="Random dataset: lengths uniform in [L (1 - r), L (1 + r)], r below 1 (--client sglang: in "
                   "[r L, L], r up to 1).")
@click.option("--client", type=click.Choice(["vllm", "sglang"]), default="vllm", show_default=True,
              help="Whose benchmark script the workload follows: vllm (vllm bench serve: its random dataset's "
                   "lengths, its gaps rescaled to the rate) or sglang (python -m sglang.bench_serving: lengths "
                   "uniform in [r L, L], gaps as drawn).")
@click.option("--prefix-len", type=Size(min=0, max=MAX_LEN), default=0, show_default=True,
              help="Shared-prefix tokens before each prompt (vLLM's --random-prefix-len; with --num-prefixes, "
                   "its prefix_repetition and SGLang's generated-shared-prefix datasets).")
@click.option("--num-prefixes", type=Size(max=MAX_PROMPTS), default=1, show_default=True,
              help="Different shared prefixes, one drawn per request (with --prefix-len).")
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", "prefix_caching", default=None,
              help="Reuse a computed shared prefix from the KV cache (default: on for vllm, as in its v1 "
                   "engine, and sglang, its radix cache; --no-enable-prefix-caching as vLLM's, "
                   "--disable-radix-cache as SGLang's).")
@click.option("--disable-cascade-attn", "disable_cascade_attn", is_flag=True,
              help="vLLM's flag: no cascade attention, which its FlashAttention backend runs where at least 8 "
                   "requests share a prefix of 256 tokens or more (attended to once for all of them).")
@click.option("--trace", "trace_file", default=None,
              help="Requests from a CSV or JSON Lines file: arrival time, input and output tokens "
                   "(our column names, the Azure LLM inference traces' or Mooncake's, whose hash_ids "
                   "give each request's shared prefixes).")
@click.option("--trace-block-size", type=Size(min=1, max=1_000_000), default=512, show_default=True,
              help="Tokens a hash id of a Mooncake-format trace stands for (its traces' 512).")
@click.option("--seed", type=Size(min=0, max=2**63 - 1), default=0, show_default=True, help="Random seed.")
@click.option("--interval-samples", type=Size(min=0, max=1000), default=10, show_default=True,
              help="Simulations with the kernel model's error drawn per family, for the intervals (0: none).")
@click.option("--goodput", "goodput", multiple=True, callback=_goodput,
              help="SLOs in ms as KEY:MS (ttft, tpot, e2el), e.g. 'ttft:2000 tpot:50': adds request_goodput.")
@click.option("--metric-percentiles", "percentiles", default="90,99", show_default=True, callback=_percentiles,
              help="Percentiles reported for each latency besides the mean and median, as vLLM's client takes "
                   "them (e.g. 50,90,95,99.9: p95_ttft_ms, p99.9_ttft_ms in the JSON).")
@slo_options
@click.option("--max-rate", is_flag=True,
              help="Find the highest request rate (Poisson, or gamma with --burstiness) that meets the --slo-* "
                   "targets, by bisection; reports the run at that rate.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None,
              help="Write an offline HTML chart: latency CDFs, and requests, tokens per step and KV-cache "
                   "use over time.")
@click.option("--force", is_flag=True, help="Overwrite an existing --plot file.")
@allreduce_option(None)
@json_option
def serve(model_name, gpu, spec_files, profile, tp, pp, ep, dp, weights, kv_dtype, attention, engine, eager,
          hf_cache, max_num_batched_tokens, max_num_seqs, block_size, gpu_memory_utilization, mem_fraction_static,
          kv_cache_tokens,
          max_model_len, pd,
          decode_tp, decode_gpu, kv_link_bandwidth, kv_link_latency, step_overhead, request_overhead, overlap_schedule,
          eager_prefill, cuda_graph_max_bs, capacity_policy, chunked_context, num_prompts,
          rate, burstiness, ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps, concurrency, num_warmups, dataset,
          input_len, output_len, range_ratio, client, prefix_len,
          num_prefixes, prefix_caching, disable_cascade_attn, trace_file, trace_block_size, seed,
          interval_samples, goodput, percentiles, slo_ttft_p99, slo_tpot_p99, slo_e2el_p99, max_rate, plot, force,
          allreduce, as_json):
    """Simulate an engine serving a stream of requests on a deployment: TTFT, TPOT, ITL and
    end-to-end latency percentiles, throughput and goodput, as vLLM's benchmark client
    reports them."""
    from ..models.deploy import Deployment
    from ..serve.simulate import max_rate as find_max_rate
    from ..serve.defaults import ENGINES, engine_kernels, memory_fraction
    from ..serve.simulate import serve as run
    from ..serve.simulate import slo_report, warmups_done_s
    from ..serve.traffic import MAX_TRACE_BYTES, load_dataset, parse_trace, requests_at, with_warmups

    slos = parse_slos(slo_ttft_p99=slo_ttft_p99, slo_tpot_p99=slo_tpot_p99, slo_e2el_p99=slo_e2el_p99)
    if trace_file is not None and dataset != "random":
        raise UserError("give --dataset or --trace, not both")
    if trace_file is not None and prefix_len:
        raise UserError("--prefix-len adds shared prefixes to generated prompts; a --trace gives them per request "
                        "(columns prefix_id and prefix_tokens)")
    if num_prefixes != 1 and not prefix_len:
        raise UserError("--num-prefixes goes with --prefix-len (the length of each shared prefix)")
    if max_rate and trace_file is not None:
        raise UserError("--max-rate varies the request rate of the random dataset; a --trace has its own arrivals")
    ramp = None
    if ramp_up_strategy is None and (ramp_up_start_rps is not None or ramp_up_end_rps is not None):
        raise UserError("--ramp-up-start-rps and --ramp-up-end-rps go with --ramp-up-strategy")
    if ramp_up_strategy is not None:
        if ramp_up_start_rps is None or ramp_up_end_rps is None:
            raise UserError("--ramp-up-strategy needs both --ramp-up-start-rps and --ramp-up-end-rps")
        if ramp_up_start_rps > ramp_up_end_rps:
            raise UserError(f"the ramp-up's start rate ({ramp_up_start_rps:g}) must be at most its end rate "
                            f"({ramp_up_end_rps:g}), as vLLM's client requires")
        if click.get_current_context().get_parameter_source("rate") != click.core.ParameterSource.DEFAULT:
            raise UserError("give --rate or a ramp-up, not both: the ramp sets each request's rate")
        if client != "vllm":
            raise UserError("a ramp-up is vLLM's client's (--ramp-up-strategy); --client sglang has none")
        if trace_file is not None or max_rate:
            raise UserError("a ramp-up sets the random or shipped dataset's arrivals; "
                            + ("a --trace has its own" if trace_file is not None else
                               "--max-rate searches for one constant rate"))
        ramp = (ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps)
    if max_rate and not slos:
        raise UserError("--max-rate needs an SLO to meet (--slo-ttft-p99, --slo-tpot-p99 or --slo-e2el-p99)")

    if max_num_batched_tokens is not None and max_num_seqs is not None and max_num_batched_tokens < max_num_seqs:
        raise UserError(f"--max-num-batched-tokens ({max_num_batched_tokens}) must be at least --max-num-seqs "
                        f"({max_num_seqs}), as vLLM requires")
    if plot is not None:
        from ..files import output_path

        output_path(plot, "HTML", force)
    cfg = load_model(model_name, fast=True)
    weights = weights_of(cfg, weights)
    spec = load_gpu(gpu, spec_files, fast=True)
    prof = load_profile(spec, profile, fast=True)
    if (eager or hf_cache) and engine != "hf":
        raise UserError("--eager and --hf-cache go with --engine hf (engines run CUDA graphs)")
    d = Deployment(tp=tp, pp=pp, ep=ep, dp=dp, weights=weights, kv_cache=kv_dtype and kv_dtype.lower(),
                   attention=attention, eager=eager, kernels="hf" if engine == "hf" else "engine", hf_cache=hf_cache,
                   **engine_kernels(engine, allreduce))
    if engine == "hf":
        from ..models.hf import check

        check(cfg, d)
    if trace_file is not None:
        from ..files import read_text

        reqs = parse_trace(read_text(trace_file, "trace", MAX_TRACE_BYTES), click.format_filename(trace_file),
                           trace_block_size)
        source = {"trace": click.format_filename(trace_file)}
    else:
        workload = {"dataset": dataset, "num_prompts": num_prompts, "input_len": input_len, "output_len": output_len,
                    "range_ratio": range_ratio, "burstiness": burstiness, "seed": seed,
                    "prefix_len": prefix_len, "num_prefixes": num_prefixes, "ramp": ramp, "client": client}
        source = {"dataset": dataset, "client": client}
        if dataset != "random":
            ctx = click.get_current_context()
            given = [f"--{n.replace('_', '-')}" for n in ("input_len", "output_len", "range_ratio")
                     if ctx.get_parameter_source(n) != click.core.ParameterSource.DEFAULT]
            if given:
                raise UserError(f"{', '.join(given)} set the random dataset's lengths; --dataset {dataset} has its own")
            meta = load_dataset(dataset)
            source.update(dataset_source=meta["source"], dataset_license=meta["license"])
        else:
            source.update(input_len=input_len, output_len=output_len, range_ratio=range_ratio)
        if ramp:
            source.update(request_rate=None, all_at_once=False, ramp_up_strategy=ramp[0],
                          ramp_up_start_rps=ramp[1], ramp_up_end_rps=ramp[2], burstiness=burstiness, seed=seed)
        else:
            source.update(request_rate=None if math.isinf(rate) else rate, all_at_once=math.isinf(rate),
                          burstiness=burstiness, seed=seed)
        if prefix_len:
            source.update(prefix_len=prefix_len, num_prefixes=num_prefixes)
        reqs = requests_at(workload, rate)
    link = decoder = None
    if pd is None and any(x is not None for x in (decode_tp, decode_gpu, kv_link_bandwidth, kv_link_latency)):
        raise UserError("--decode-tp, --decode-gpu, --kv-link-bandwidth and --kv-link-latency go with --pd")
    if decode_gpu is not None:
        d_spec = load_gpu(decode_gpu, spec_files, fast=True)
        decoder = (d_spec, load_profile(d_spec, None, fast=True))
    if pd is not None:
        from ..serve.disaggregated import Link

        link = Link(None if kv_link_bandwidth is None else  # (None: the engine's connector as measured)
                    parse_size(kv_link_bandwidth, "--kv-link-bandwidth", "bytes_per_s", whole=False, max=1e15),
                    0.0 if kv_link_latency is None else
                    parse_size(kv_link_latency, "--kv-link-latency", "seconds", whole=False, max=1e3, min_open=False))
    options = dict(engine=engine, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                   block_size=block_size, kv_tokens=kv_cache_tokens,
                   gpu_memory_utilization=memory_fraction(engine, gpu_memory_utilization, mem_fraction_static),
                   step_overhead_s=step_overhead, request_overhead_s=request_overhead, concurrency=concurrency,
                   slo_ms=goodput or None, seed=seed,
                   pd=pd, decode_tp=decode_tp, decode_gpu=decoder, kv_link=link, overlap_schedule=overlap_schedule,
                   capacity_policy=capacity_policy and capacity_policy.replace("-", "_"),
                   chunked_context=chunked_context, eager_prefill=eager_prefill, max_model_len=max_model_len,
                   prefix_caching=prefix_caching, disable_cascade_attn=disable_cascade_attn,
                   cuda_graph_max_bs=cuda_graph_max_bs,
                   percentiles=tuple(sorted(set(percentiles) | ({99.0} if slos else set()))))
    if num_warmups + len(reqs) > MAX_PROMPTS:
        raise UserError(f"--num-warmups and the requests come to {num_warmups + len(reqs):,}; at most "
                        f"{MAX_PROMPTS:,} are simulated")
    if num_warmups:  # (the copies' finish: of the first request alone, the same at any rate)
        source["num_warmups"] = num_warmups
        done_s = warmups_done_s(cfg, spec, prof, d, reqs, num_warmups, **options)
        options["warmup"] = num_warmups
        reqs = with_warmups(reqs, num_warmups, done_s)
    search = None
    if max_rate:
        def make(rate):
            made = requests_at(workload, rate)
            return with_warmups(made, num_warmups, done_s) if num_warmups else made

        rate, _, tried = find_max_rate(cfg, spec, prof, d, make, slos, **options)
        reqs = make(rate)
        source["request_rate"], source["all_at_once"] = (None if math.isinf(rate) else rate), math.isinf(rate)
        search = {"max_rate": None if math.isinf(rate) else rate, "all_at_once_meets": math.isinf(rate),
                  "tried": [{"rate": None if math.isinf(x) else x, "met": m} for x, m in tried]}
    with _progress(len(reqs) * (1 + interval_samples)) as tick:
        r = run(cfg, spec, prof, d, reqs, interval_samples=interval_samples, progress=tick, **options)
    head = {"model": cfg.name, "gpu": spec.name, "deployment": d.as_dict(), "profile": profile_label(prof),
            "weight_block_size": list(cfg.weight_block_size) if cfg.weight_block_size else None,
            **source, "max_concurrency": concurrency, "metric_percentiles": list(percentiles)}
    if d.kernels == "engine" and d.tp > 1:
        head["allreduce_source"] = "given (--allreduce)" if allreduce else ENGINES[engine].allreduce_source
    if d.kernels == "engine" and cfg.kv_lora_rank:  # (MLA: which kernel its decode runs)
        head["mla_decode_source"] = ENGINES[engine].mla_decode_source
    if pd is not None:
        head.update(decode_tp=decode_tp, kv_link_source=r.disaggregated["kv_link_source"])
    if interval_samples:
        head["samples"] = interval_samples
    if plot is not None:
        from ..charts import serve_figure, write_html

        x = r.disaggregated
        where = (f"{d.gpus} x {spec.name}" if not x else
                 f"{x['prefill_replicas']} prefill + {x['decode_replicas']} decode replicas "
                 f"({x['gpus']} GPUs; the decode replicas' steps)")
        write_html(serve_figure(r, f"{cfg.name} on {where}, {engine}"), plot)
    extra = {}
    if slos:
        extra["slo"] = slo_report(r.metrics, slos, r.draws, r.serving_sigmas)
        extra["meets_slo"] = all(v["met"] for v in extra["slo"].values())
    if search:
        extra["max_rate_search"] = search
    if as_json:
        emit_json({**head, **r.as_dict(), **extra})
        return
    _print(head, r, d, spec, extra)


PROGRESS_REQUESTS = 20_000  # simulated requests (draws included) from which a terminal gets a progress bar


class _progress:
    """A progress bar on stderr over the requests simulated (draws included), on a terminal
    and for long runs only; else nothing."""

    def __init__(self, total: int):
        import sys

        self.bar = None
        if total >= PROGRESS_REQUESTS and sys.stderr.isatty():
            self.bar = click.progressbar(length=total, label="simulating", file=sys.stderr)

    def __enter__(self):
        if self.bar is None:
            return None
        self.bar.__enter__()
        return self.bar.update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


def _print(head: dict, r, d, spec, extra: dict) -> None:
    from ..serve.defaults import MEMORY_FRACTION_KEYS

    m, e = r.metrics, r.engine
    rate = "all" if head.get("all_at_once") else head.get("request_rate")
    sent = "all at t = 0" if rate == "all" else \
        f"{rate or 0:g} req/s, burstiness {head.get('burstiness') or 1:g}"  # (a trace has its own arrivals)
    if head.get("ramp_up_strategy"):
        sent = (f"ramp-up ({head['ramp_up_strategy']}) from {head['ramp_up_start_rps']:g} to "
                f"{head['ramp_up_end_rps']:g} req/s, burstiness {head.get('burstiness') or 1:g}")
    if "trace" in head:
        load = f"trace {head['trace']}"
    elif head["dataset"] == "random":
        load = (f"random {head['input_len']} in / {head['output_len']} out (range ratio {head['range_ratio']:g}), "
                + sent)
    else:
        load = f"{head['dataset']} request lengths ({head['dataset_source']}, {head['dataset_license']}), {sent}"
    if head.get("client") == "sglang":
        load += ", as SGLang's bench_serving sends it"
    if head.get("prefix_len"):
        load += (f", {head['prefix_len']:,} shared-prefix tokens before each prompt (one of "
                 f"{head['num_prefixes']:,})")
    if head.get("max_concurrency"):
        load += f", at most {head['max_concurrency']} in flight"
    if head.get("num_warmups"):
        load += f", after {head['num_warmups']:,} warm-up requests (not counted)"
    how_run = d.describe(weight_blocks=head.get("weight_block_size"))
    out = [f"{head['model']} on {d.gpus} x {spec.name} ({how_run}) [profile: {head['profile']}]",
           f"engine {e.name}: max_num_batched_tokens {e.max_num_batched_tokens}, max_num_seqs {e.max_num_seqs}, "
           f"KV cache {r.kv_tokens:,} tokens per replica ({e.block_size}-token blocks"
           + (f", {MEMORY_FRACTION_KEYS.get(e.name, 'gpu_memory_utilization')} {e.memory_fraction[0]:g}"
              if e.memory_fraction and e.memory_fraction[0] is not None else "") + "), "
           + (f"max_model_len {e.max_model_len:,}, " if e.max_model_len else "")
           + f"{e.step_overhead_s * 1e3:g} ms host time per step"
           + ((", async scheduling" if e.name == "vllm" else ", overlap scheduler") if e.overlap else "")
           + (", prefix caching" if e.prefix_caching else "")
           + (", cascade attention" if e.cascade else "")
           + (f", {e.request_overhead_s * 1e3:g} ms front end per request" if e.request_overhead_s else "")
           + (f", prefill without CUDA graphs ({r.eager_prefill_host_s * 1e3:.3g} ms host time a batch at least)"
              if r.eager_prefill_host_s else "")
           + (f", decode batches over {e.eager_decode_above} without CUDA graphs ({e.decode_host_s * 1e3:.3g} ms "
              f"host time a step at least; {r.served.eager_decode_steps:,} of {r.metrics['steps']:,} steps ran so)"
              if e.eager_decode_above is not None else "")
           + (f", {e.capacity_policy.replace('_', ' ')} capacity policy"
              + (", chunked context" if e.chunked_context else "") if e.name == "trtllm" else ""),
           f"workload: {load}", ""]
    if r.disaggregated:
        x = r.disaggregated
        gpus = (f"{x['gpus']} x {spec.name}" if x["prefill_gpu"] == x["decode_gpu"] else
                f"{x['prefill_replicas'] * x['prefill_gpus_per_replica']} x {x['prefill_gpu']} and "
                f"{x['decode_replicas'] * x['decode_gpus_per_replica']} x {x['decode_gpu']}")
        decode_tp = f"; decode tp {head['decode_tp']}" if head.get("decode_tp") else ""
        out[0] = (f"{head['model']} on {gpus}: {x['prefill_replicas']} prefill and {x['decode_replicas']} decode "
                  f"replicas ({how_run}{decode_tp}) [profile: {head['profile']}]")
        out[1] += (f" (decode replicas; prefill replicas {x['prefill_kv_cache_tokens']:,} KV tokens); each prompt's KV "
                   f"moved in {x['mean_kv_pull_ms']:.3g} ms on average after its prefill "
                   f"({x['mean_kv_bytes_per_request'] / 1e6:,.0f} MB per GPU at "
                   f"{x['kv_link_bytes_per_s'] / 1e9:g} GB/s)")
    rows = [("completed requests", f"{m['completed']:,}"), ("duration", f"{m['duration_s']:.2f} s"),
            ("request throughput", f"{m['request_throughput']:.2f} req/s"),
            ("output token throughput", f"{m['output_throughput']:,.1f} tok/s"),
            ("total token throughput", f"{m['total_token_throughput']:,.1f} tok/s"),
            ("peak output tokens in a second", f"{m.get('max_output_tokens_per_s', 0):,.0f}"),
            ("peak requests in flight", f"{m['max_concurrent_requests']:,}"),
            ("engine steps / preemptions", f"{m['steps']:,} / {m['preemptions']:,}")]
    if m.get("prefix_cache_hit_rate") or head.get("prefix_len"):  # (none shared, none to say)
        rows.append(("prefix cache hit rate", f"{100 * m['prefix_cache_hit_rate']:.1f}%"))
    if "request_goodput" in m:
        rows.append(("request goodput", f"{m['request_goodput']:.2f} req/s "
                                        f"({100 * m['slo_attainment']:.1f}% meet the SLOs)"))
    out.append(table(rows, align=["<", ">"]))
    out.append("")
    names = {"ttft": "time to first token", "tpot": "time per output token", "itl": "inter-token latency",
             "e2el": "end-to-end latency", "queue": "queueing delay"}
    iv = r.interval or {}

    def cell(key):
        x = f"{m[key]:.2f}"
        return f"{x} [{iv[key][0]:.2f}, {iv[key][1]:.2f}]" if key in iv else x

    from ..serve.metrics import percentile_key

    stats = ["mean", "median", *(percentile_key(p) for p in sorted(set(head["metric_percentiles"]) - {50.0}))]
    out.append(table([(names[k], *(cell(f"{s}_{k}_ms") for s in stats)) for k in names], headers=("ms", *stats)))
    if "max_rate_search" in extra:
        rate = extra["max_rate_search"]["max_rate"]
        at = 'every request at once' if rate is None else f'{rate:.3g} req/s'
        out += ["", f"highest rate that meets the SLOs: {at} ({len(extra['max_rate_search']['tried'])} runs)"]
    for key, row in extra.get("slo", {}).items():
        share = "" if "met_share_of_draws" not in row else (
            f"; met in {100 * row['met_share_of_draws']:.0f}% of the draws, probability "
            f"{100 * row['met_probability']:.0f}% with serving's error")
        out.append(f"SLO {key.replace('_ms', '')} <= {row['limit']:.4g} ms: {row['value']:.4g} ms, "
                   f"{'met' if row['met'] else 'missed'}{share}")
    if r.samples:
        out += ["", f"[low, high]: the middle {100 * 0.9:.0f}% of {r.samples} simulations with the kernel model's "
                    f"cross-validated error drawn per family (sigma of log time: "
                    + ", ".join(f"{f} {s:.2f}" for f, s in sorted(r.sigmas.items())) + ")"]
        if r.serving_sigmas:
            out += ["  widened by how far serve has landed from published serving benchmarks (sigma of log "
                    "error: " + ", ".join(f"{g} {s:.2f}" for g, s in sorted(r.serving_sigmas.items()))
                    + "; see the README)"]
    else:
        out += ["", "no interval: " + ("--interval-samples 0" if "samples" not in head else
                                       "the profile holds no validation")]
    echo(*out)
