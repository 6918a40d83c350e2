"""`rooflinesim plan ...`: the cheapest deployment that serves a workload at a target rate
under P99 SLOs (simulated with `serve`'s engines on the calibrated step times)."""

from __future__ import annotations

import click

from .common import (FRACTION, MAX_COUNT, Real, Size, SizeOrAuto, UserError, allreduce_option, echo, emit_json,
                     json_option, parse_slos, slo_options, table)
from .serve import MAX_LEN, MAX_OVERHEAD_S, MAX_PROMPTS, Rate

MAX_RATE = 1e6


@click.command()
@click.option("--model", "model_name", required=True,
              help="A bundled preset, a Hugging Face id, or a config.json path.")
@click.option("--rate", type=Rate(), required=True, help="Target requests per second.")
@slo_options
@click.option("--gpu", "gpus", multiple=True,
              help="Candidate GPU (repeatable; default: every bundled GPU that has a price).")
@click.option("--max-gpus", type=Size(max=MAX_COUNT), default=8, show_default=True,
              help="Most GPUs the whole deployment may use (replicas x tensor x pipeline parallelism).")
@click.option("--weights", "weights", multiple=True, type=click.Choice(["bf16", "fp8"]),
              help="Allowed weight dtypes (repeatable; default: bf16 and fp8).")
@click.option("--kv-dtype", "kv_dtypes", multiple=True, type=click.Choice(["bf16", "fp8"]),
              help="Allowed KV-cache dtypes (repeatable; default: bf16).")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm"]), default="vllm", show_default=True)
@click.option("--pp", "pps", multiple=True, type=Size(max=64),
              help="Pipeline stages to search (repeatable; default: 1). Each TP comes at each depth whose GPUs "
                   "stay in one node (links between nodes are not modelled); --engine vllm.")
@click.option("--pd", "pd", is_flag=True,
              help="Also search prefill/decode disaggregated pairs (serve --pd): each replica count of a type "
                   "split into prefill and decode replicas; --engine vllm and sglang.")
@click.option("--max-num-batched-tokens", "tokens_options", multiple=True, type=Size(max=MAX_LEN),
              help="Token budgets of a step to search (repeatable; default: the engine's default for the GPU, "
                   "2048 and 16384).")
@click.option("--max-num-seqs", "seqs_options", multiple=True, type=Size(max=MAX_COUNT),
              help="Limits on running requests to search (repeatable; default: the engine's default, 256 and 64).")
@click.option("--prices", "prices_file", default=None,
              help="GPU prices (YAML as rooflinesim/data/gpu_prices.yaml; default: the bundled figures).")
@click.option("--dataset", default="random", show_default=True,
              help="random, sharegpt, azure-conv-2023 or azure-code-2023 (as for serve).")
@click.option("--input-len", type=Size(max=MAX_LEN), default=1024, show_default=True)
@click.option("--output-len", type=Size(max=MAX_LEN), default=256, show_default=True)
@click.option("--range-ratio", type=Real(min=0, max=1, max_open=True), default=0.5, show_default=True)
@click.option("--burstiness", type=Real(min=0, max=1e6, min_open=True), default=1.0, show_default=True)
@click.option("--prefix-len", type=Size(min=0, max=MAX_LEN), default=0, show_default=True,
              help="Shared-prefix tokens before each prompt (as for serve; vllm and sglang reuse them from "
                   "their prefix caches).")
@click.option("--num-prefixes", type=Size(max=MAX_PROMPTS), default=1, show_default=True,
              help="Different shared prefixes, one drawn per request (with --prefix-len).")
@click.option("--num-prompts", type=Size(max=MAX_PROMPTS), default=300, show_default=True,
              help="Requests per simulated run.")
@click.option("--seed", type=Size(min=0, max=2**63 - 1), default=0, show_default=True)
@click.option("--min-probability", type=Real(min=0, max=1, min_open=True, max_open=True), default=None,
              help="Search for the SLOs to hold with about this probability (e.g. 0.9): each limit tightened by "
                   "the spread of serve's measured error (default: the estimates must meet the SLOs).")
@click.option("--interval-samples", type=Size(min=0, max=1000), default=10, show_default=True,
              help="Draws of the kernel model's error in each final run (intervals, and the probability "
                   "that the SLOs hold).")
@click.option("--gpu-memory-utilization", type=FRACTION, default=None,
              help="vllm and trtllm: the engine's share of each card, as serve's (default 0.9).")
@click.option("--mem-fraction-static", type=FRACTION, default=None,
              help="sglang: SGLang's flag, as serve --mem-fraction-static (default: its rule for each GPU and TP).")
@click.option("--max-model-len", type=SizeOrAuto(max=2**31), default=None,
              help="Longest request (prompt + output tokens) every deployment must accept, as serve "
                   "--max-model-len (default: the model's context, or for vLLM the longest its KV cache holds "
                   "where that is shorter, reported as the --max-model-len to launch it with; 'auto': that "
                   "default).")
@click.option("--request-overhead", type=Real(min=0, max=MAX_OVERHEAD_S), default=None,
              help="Seconds from a client's send to the engine's queue for each request (the server's front end), "
                   "as serve --request-overhead (default: the engine's as measured).")
@click.option("--eager-prefill", is_flag=True,
              help="sglang: its prefill batches run without CUDA graphs, as serve --eager-prefill (SGLang before "
                   "its 2026 prefill default).")
@click.option("--cuda-graph-max-bs", type=click.IntRange(0, 1 << 20), default=None, metavar="N",
              help="sglang: the largest decode batch run from a CUDA graph, as serve --cuda-graph-max-bs (default: "
                   "SGLang's for each GPU and TP).")
@click.option("--disable-cascade-attn", "disable_cascade_attn", is_flag=True,
              help="vLLM's flag: no cascade attention over a prefix every running request shares, as serve "
                   "--disable-cascade-attn.")
@click.option("--jobs", type=Size(max=1024), default=None, help="Worker processes (default: one per core).")
@click.option("--ray-address", default=None,
              help="Run the search on a Ray cluster at this address ('local': a Ray instance started here); "
                   "needs pip install \"rooflinesim[ray]\" and rooflinesim installed on the cluster.")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None,
              help="Write an offline HTML chart: cost against P99 latency of every deployment that meets the "
                   "SLOs, and the Pareto front.")
@click.option("--force", is_flag=True, help="Overwrite an existing --plot file.")
@click.option("--include-uncalibrated", is_flag=True,
              help="Also plan with GPUs that have no fitted profile (priced on the ideal roofline: optimistic, "
                   "with no interval).")
@allreduce_option(None)
@json_option
def plan(model_name, rate, slo_ttft_p99, slo_tpot_p99, slo_e2el_p99, gpus, max_gpus, weights, kv_dtypes, engine,
         pps, pd, tokens_options, seqs_options, prices_file, dataset, input_len, output_len, range_ratio, burstiness,
         prefix_len, num_prefixes, num_prompts, seed, min_probability, interval_samples, gpu_memory_utilization,
         mem_fraction_static, max_model_len, request_overhead, eager_prefill, cuda_graph_max_bs, disable_cascade_attn, jobs,
         ray_address, plot, force, include_uncalibrated, allreduce, as_json):
    """The cheapest deployment (GPU, tensor parallelism, dtypes, replicas) that serves the
    workload at --rate requests/s with every P99 SLO met, over GPU types, tensor and expert
    parallelism, dtypes, the engine's limits and replicas: its cost per hour and per million
    output tokens, its metrics with intervals and the probability that it meets the SLOs,
    the runners-up, the cost-latency Pareto front, why each other replica type fails, and
    how many configurations memory, analytic bounds and simulated runs settled."""
    import math

    from ..hardware import load_spec
    from ..serve.plan import load_prices, plan as run
    from ..serve.defaults import memory_fraction
    from ..serve.traffic import check_span, datasets

    if math.isinf(rate) or rate > MAX_RATE:
        raise UserError(f"--rate must be a finite number of requests per second up to {MAX_RATE:g}")
    slos = parse_slos(slo_ttft_p99=slo_ttft_p99, slo_tpot_p99=slo_tpot_p99, slo_e2el_p99=slo_e2el_p99)
    if not slos:
        raise UserError("plan needs an SLO to meet: --slo-ttft-p99, --slo-tpot-p99 or --slo-e2el-p99")
    if dataset != "random" and dataset not in datasets():
        raise UserError(f"unknown dataset '{dataset}'; known: random, {', '.join(datasets())}")
    if plot is not None:
        from ..files import output_path

        output_path(plot, "HTML", force)
    check_span(num_prompts / rate)  # (a workload no configuration could be simulated on: said once, not per one)
    prices = load_prices(prices_file)
    names = [load_spec(g).name for g in gpus] if gpus else sorted(prices)
    workload = {"dataset": dataset, "input_len": input_len, "output_len": output_len, "range_ratio": range_ratio,
                "burstiness": burstiness, "num_prompts": num_prompts, "seed": seed,
                "prefix_len": prefix_len, "num_prefixes": num_prefixes}
    if num_prefixes != 1 and not prefix_len:
        raise UserError("--num-prefixes goes with --prefix-len (the length of each shared prefix)")
    import sys

    bar = click.progressbar(length=1, label="planning", file=sys.stderr) if sys.stderr.isatty() else None

    def tick(k):
        if bar is not None:
            bar.update(k)

    def begin(n):
        if bar is not None:
            bar.length = n
            bar.__enter__()

    try:
        out = run(model_name, rate=rate, slos=slos, workload=workload, gpus=names,
                  weights=list(weights or ("bf16", "fp8")), kv_dtypes=list(kv_dtypes or ("bf16",)), max_gpus=max_gpus,
                  prices=prices, engine=engine, samples=interval_samples, jobs=jobs, ray_address=ray_address,
                  max_num_batched_tokens=list(tokens_options), max_num_seqs=list(seqs_options),
                  gpu_memory_utilization=memory_fraction(engine, gpu_memory_utilization, mem_fraction_static),
                  uncalibrated=include_uncalibrated,
                  pp=list(pps) or None, min_probability=min_probability, pd=pd, progress=tick, on_start=begin,
                  request_overhead_s=request_overhead, eager_prefill=eager_prefill,
                  max_model_len=None if max_model_len == "auto" else max_model_len,
                  disable_cascade_attn=disable_cascade_attn, cuda_graph_max_bs=cuda_graph_max_bs,
                  allreduce=allreduce)
    finally:
        if bar is not None and bar.entered:
            bar.__exit__(None, None, None)
    if plot is not None:
        from ..charts import plan_figure, write_html

        write_html(plan_figure(out), plot)
    if as_json:
        emit_json(out)
        return
    _print(out)


def _name(r) -> str:
    return (f"{r['gpu']} x {r['tp']}" + (f" PP {r['pp']}" if r.get("pp", 1) > 1 else "")
            + (f" EP {r['ep']}" if r.get("ep", 1) > 1 else ""))


def _replicas(r) -> str:
    """The replicas, as P:D (prefill:decode) for a disaggregated pair."""
    return str(r["replicas"]) if not r.get("prefill_replicas") else f"{r['prefill_replicas']}:{r['decode_replicas']}"


def _row(r) -> tuple:
    m = r["metrics"]
    p = r.get("probability_meets_slo")
    return (_name(r), r["weights"], r["kv_dtype"], f"{r['max_num_batched_tokens']}/{r['max_num_seqs']}",
            "-" if r.get("max_model_len") is None else f"{r['max_model_len']:,}", _replicas(r), str(r["gpus"]),
            f"${r['cost_per_hour']:,.2f}",
            f"${r['cost_per_million_output_tokens']:,.3f}",
            *(f"{m[k]:.4g}" for k in sorted(k for k in m if k.startswith("p99_"))),
            "-" if p is None else f"{100 * p:.0f}%", r.get("profile", ""))


def _print(out: dict) -> None:
    slo = ", ".join(f"{k.replace('_ms', '')} <= {v:.4g} ms" for k, v in out["slos"].items())
    settled = ", ".join(f"{v:,} {k}" for k, v in out["settled"].items())
    lines = [f"{out['model']} at {out['rate']:g} req/s, {out['engine']}, SLOs {slo}: {out['candidates']} replica "
             f"types, {out['configurations']:,} configurations ({settled})"]
    if "min_probability" in out:
        lines.append(f"searched for a probability of {100 * out['min_probability']:.0f}% that each holds: estimates "
                     "within " + ", ".join(f"{k.replace('_ms', '')} <= {v:.4g} ms"
                                           for k, v in out["search_slos"].items()))
    keys = sorted(k for k in (out["best"] or {}).get("metrics", {}) if k.startswith("p99_"))
    heads = ("deployment", "weights", "KV", "tokens/seqs", "max_model_len",
             "replicas (P:D)" if out.get("pd") else "replicas", "GPUs", "$/hour", "$/M out tok", *keys,
             "P(meets SLO)", "profile")
    if out["best"] is None:
        lines.append("no configuration meets the SLOs")
    else:
        b = out["best"]
        lines += ["", f"cheapest: {_name(b)} ({b['weights']} weights), max_num_batched_tokens "
                      f"{b['max_num_batched_tokens']}, max_num_seqs {b['max_num_seqs']}, "
                      + (f"max_model_len {b['max_model_len']:,}, " if b.get("max_model_len") else "")
                      + (f"{b['replicas']} replica(s), " if not b.get("prefill_replicas") else
                         f"{b['prefill_replicas']} prefill and {b['decode_replicas']} decode replicas, ")
                      + f"{b['gpus']} GPUs, ${b['cost_per_hour']:,.2f} per hour, "
                      f"${b['cost_per_million_output_tokens']:,.3f} per million output tokens "
                      f"(${b['usd_per_gpu_hour']:.2f} per GPU-hour: {b['price_source']})", ""]
        lines.append(table([_row(r) for r in [b, *out["runners_up"]]], headers=heads))
        lines += ["", "cost-latency Pareto front (of those found): " + "; ".join(
            f"{_name(r)} {r['weights']} x{_replicas(r)} ${r['cost_per_hour']:,.2f}/h" for r in out["pareto"])]
    for s in out.get("not_tried", []):
        if "no fitted profile" in s["reason"]:
            lines.append(f"left out: {s['gpu']}: {s['reason']}")
    if out["rejected"]:
        lines += ["", "other replica types:"]
        lines += [f"  {_name(r)} ({r['weights']}, {r['kv_dtype']} KV): {r['rejected']}: {r['reason']}"
                  for r in out["rejected"]]
    echo(*lines)
