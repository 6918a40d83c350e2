"""`rooflinesim fit ...`: will a model fit on these GPUs? Exit 0 when it fits, 1 when it
does not, 2 for bad input."""

from __future__ import annotations

import sys

import click

from .common import FRACTION as UTIL
from .common import (MAX_BYTES, MAX_COUNT, MAX_SIZE, POS, Size, UserError, echo, emit_json, gpu_options,
                     json_option, parse_size, table, weights_of)

PAR = Size(max=MAX_COUNT)  # a parallel degree


def _override(ctx, param, values):
    """KEY=VALUE pairs of named overheads."""
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got '{item}'")
        out[key.strip().replace("-", "_")] = value.strip()
    return out


@click.command()
@click.option("--model", required=True,
              help="Preset name, Hugging Face id of a preset, or a config.json path.")
@gpu_options
@click.option("--tp", type=PAR, default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--pp", type=PAR, default=1, show_default=True, help="Pipeline-parallel degree.")
@click.option("--ep", type=PAR, default=1, show_default=True,
              help="Expert-parallel degree (divides TP; experts split among the TP ranks).")
@click.option("--batch", type=POS, default=1, show_default=True, help="Concurrent sequences.")
@click.option("--context", type=POS, default=None,
              help="Tokens per sequence (prompt + output). Default: the model's maximum.")
@click.option("--weights", default=None,
              help="bf16, fp16, fp8, int8 or int4 (weight-only, group-quantized as GPTQ/AWQ). "
                   "Default: what the config's quantization_config stores, else bf16.")
@click.option("--kv", "--kv-dtype", "kv", default="bf16", show_default=True, help="KV-cache dtype: bf16, fp16 or fp8.")
@click.option("--block-size", type=POS, default=None,
              help="Paged-KV block size (tokens; default 16, --engine sglang: its page size, 1).")
@click.option("--gpu-memory-utilization", type=UTIL, default=None,
              help="Share of the card the deployment may use; the rest is headroom (default 0.9; not with "
                   "--engine sglang).")
@click.option("--group-size", type=POS, default=None, help="int4 group size (default 128).")
@click.option("--int4-format", type=click.Choice(["gptq", "awq"]), default=None,
              help="awq also stores a 4-bit zero point per group (default: the config's "
                   "quant_method when it is awq, else gptq).")
@click.option("--fp8-scales", type=click.Choice(["tensor", "channel"]), default="tensor", show_default=True)
@click.option("--keep-16bit", "keep_16bit", multiple=True,
              type=click.Choice(["attention", "dense_mlp", "routed_experts", "shared_experts"]),
              help="Also keep these layers in 16 bits (repeatable).")
@click.option("--engine", type=click.Choice(["vllm", "sglang"]), default=None,
              help="Budget memory the way this serving engine does (default: engine-neutral).")
@click.option("--mem-fraction-static", type=UTIL, default=None,
              help="--engine sglang: SGLang's flag, the share of the memory free before the weights kept for "
                   "weights and KV cache (default: SGLang's rule for the GPU, TP x PP, prefill chunk and CUDA "
                   "graphs).")
@click.option("--cuda-graph-max-bs", type=click.IntRange(0, 1 << 20), default=None, metavar="N",
              help="--engine sglang: its largest decode batch captured in a CUDA graph, which its default "
                   "--mem-fraction-static reserves for (default: SGLang's for the GPU and TP).")
@click.option("--eager-prefill", is_flag=True,
              help="--engine sglang: no piecewise CUDA graphs for prefill (SGLang before 0.5.10), which its "
                   "default --mem-fraction-static then does not reserve for.")
@click.option("--device-memory", default=None,
              help="The card's total as a CUDA process sees it, e.g. '23.58 GiB' (default: known figure).")
@click.option("--max-num-batched-tokens", type=POS, default=None,
              help="--engine vllm: tokens of its profiling pass (default: vLLM's, by GPU size).")
@click.option("--max-num-seqs", type=POS, default=None,
              help="--engine vllm: sequences of its profiling pass.")
@click.option("--prefill-chunk", type=POS, default=None,
              help="Tokens of one prefill chunk (default 8192; --engine sglang: its chunked_prefill_size, by "
                   "default SGLang's for the GPU).")
@click.option("--overheads", "overheads_file", type=click.Path(dir_okay=False), default=None,
              help="YAML of named overheads (keys of rooflinesim/data/memory_overheads.yaml).")
@click.option("--set", "overrides", multiple=True, callback=_override, metavar="KEY=VALUE",
              help="Override one named overhead, e.g. --set cuda_graphs=0 (repeatable).")
@click.option("--attention", type=click.Choice(["fa3", "fa2", "naive"]), default=None,
              help="Attention kernel class, checked against the GPU as predict model does (memory "
                   "does not depend on it; default: the GPU's own).")
@json_option
def fit(model, gpu, spec_files, tp, pp, ep, batch, context, weights, kv, block_size,
        gpu_memory_utilization, group_size, int4_format, fp8_scales, keep_16bit, engine,
        mem_fraction_static, cuda_graph_max_bs, eager_prefill, device_memory, max_num_batched_tokens,
        max_num_seqs, prefill_chunk, overheads_file, overrides, attention, as_json):
    """Will MODEL fit on GPUs: memory per GPU, the verdict and the limits around it.

    Exit code 0: it fits; 1: it does not; 2: bad input."""
    from ..memory import fit as plan_fit
    from ..memory import load_overheads
    if context is not None and batch * context > MAX_SIZE:
        raise UserError(f"--batch {batch} x --context {context} = {batch * context:.3g} tokens exceeds "
                        f"2^40 ({MAX_SIZE:.3g}); give smaller sizes")
    total = None if device_memory is None else parse_size(device_memory, "--device-memory", whole=False,
                                                          max=MAX_BYTES)
    overheads = load_overheads(overheads_file, **overrides)
    if weights is None or int4_format is None:
        from ..models.config import load_config

        cfg = load_config(model)
        model = cfg
        weights = weights_of(cfg, weights)
        if int4_format is None:
            method = cfg.weight_quant_method or ""
            int4_format = "awq" if method.startswith("awq") else "gptq"
    plan = plan_fit(model, gpu, batch=batch, context=context, tp=tp, pp=pp, ep=ep,
                    weights=weights, kv=kv, block_size=block_size or (1 if engine == "sglang" else 16),
                    gpu_memory_utilization=gpu_memory_utilization, group_size=group_size,
                    int4_format=int4_format, fp8_scales=fp8_scales, keep_16bit=keep_16bit,
                    engine=engine, overheads=overheads, device_memory_bytes=total,
                    max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                    prefill_chunk_tokens=prefill_chunk, spec_files=spec_files,
                    mem_fraction_static=mem_fraction_static, cuda_graph_max_bs=cuda_graph_max_bs,
                    piecewise_cuda_graph=not eager_prefill)
    from ..attention_kernels import resolve

    kernel = resolve(attention, None, plan.setup.spec)  # (a class the GPU lacks: one sentence)
    for w in plan.warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        emit_json({**plan.as_dict(), "attention_kernel": {"class": kernel.variant, "backend": kernel.backend,
                                                          "label": kernel.label}})
    else:
        echo(render(plan))
    if not plan.fits:
        sys.exit(1)


def _b(x: float) -> str:
    from ..units import format_bytes

    return format_bytes(x, binary=True)


def _share(x: float, capacity: float) -> str:
    return f"{100 * x / capacity:.1f}%"


_LABELS = {"embedding": "embedding", "lm_head": "LM head", "attention": "attention",
           "dense_mlp": "dense MLP", "routed_experts": "routed experts",
           "shared_experts": "shared experts", "router": "router", "norms": "norms",
           "quant_scales": "quantization scales", "rotary_cache": "rotary cos/sin cache",
           "cuda_context": "CUDA context", "cublas_workspace": "cuBLAS workspace",
           "cuda_graphs": "CUDA graphs", "nccl_buffers": "NCCL buffers",
           "non_torch": "non-torch memory (vLLM)", "distributed": "distributed set-up (SGLang, TP x PP > 1)",
           "tp_workspace": "TP all-reduce workspace (vLLM, TP > 1)", "weights": "weights",
           "kv_cache": "KV cache",
           "activation": "activation peak", "overheads": "overheads", "headroom": "headroom"}


def render(plan) -> str:
    """The human report of a MemoryPlan (binary units throughout)."""
    s, b = plan.setup, plan.per_gpu
    cap = b.capacity
    par = f"TP {s.par.tp}" + (f", PP {s.par.pp}" if s.par.pp > 1 else "") + (
        f", EP {s.par.ep}" if s.par.ep > 1 else "")
    engine = {"vllm": "vLLM budget", "sglang": "SGLang budget"}.get(s.engine, "engine-neutral")
    lines = [f"{s.cfg.name} on {s.par.gpus}x {s.spec.name} ({par}); weights {s.quant.label}, "
             f"KV {s.kv_dtype}; batch {plan.batch} x {plan.context:,} tokens [{engine}]"]
    if plan.fits:
        lines.append(f"FITS: {_b(b.total)} of {_b(cap)} per GPU ({_share(b.total, cap)}), "
                     f"{_b(cap - b.total)} to spare")
    else:
        over = plan.overflow
        parts = ", ".join(f"{_LABELS[k]} {_b(v)}"
                          for k, v in list(over["parts"].items())[:3])
        where = f" (stage {over['stage']})" if s.par.pp > 1 else ""
        lines.append(f"DOES NOT FIT: needs {_b(b.total)} of {_b(cap)} per GPU{where}, "
                     f"over by {_b(over['excess_bytes'])}; largest parts: {parts}")
    rows = [("weights", _b(b.weights_total), _share(b.weights_total, cap))]
    rows += [(f"  {_LABELS[k]}", _b(v), _share(v, cap)) for k, v in b.weights.items() if v > 0]
    rows.append(("KV cache", _b(b.kv_cache), _share(b.kv_cache, cap)))
    rows.append(("activation peak", _b(b.activation["peak"]), _share(b.activation["peak"], cap)))
    rows.append(("overheads", _b(b.overhead_total), _share(b.overhead_total, cap)))
    rows += [(f"  {_LABELS[k]}", _b(v), _share(v, cap)) for k, v in b.overheads.items() if v > 0]
    reserve = (f"reserve (1 - {s.utilization:g} of the free memory: activations, CUDA graphs)"
               if s.engine == "sglang" else f"headroom (1 - {s.utilization:g} of the card)")
    rows.append((reserve, _b(b.headroom), _share(b.headroom, cap)))
    rows.append(("total", _b(b.total), _share(b.total, cap)))
    kind = "driver-visible total" if s.capacity_measured else "spec capacity"
    rows.append((f"capacity ({kind})", _b(cap), "100.0%"))
    title = "per GPU" + (f" (stage {b.stage}, {b.layers} layers)" if s.par.pp > 1 else "")
    lines += ["", table(rows, headers=(title, "bytes", "share"))]
    lines += ["",
              f"KV cache: {b.kv_bytes_per_token:,.0f} B per token per GPU; "
              f"{plan.kv_cache_tokens:,} tokens; max concurrency at {plan.context:,} tokens: "
              f"{plan.max_concurrency:.2f}x",
              f"largest batch at {plan.context:,} tokens: {plan.max_batch:,}",
              f"longest context at batch {plan.batch}: {plan.max_context:,}"
              + (" (the model's maximum)" if plan.max_context_limited_by == "model" else ""),
              "fewest GPUs that fit: " + (f"{plan.min_gpus} (TP {plan.min_tp}" + (
                  f", PP {s.par.pp})" if s.par.pp > 1 else ")") if plan.min_gpus else
                  f"none with TP up to 64 at PP {s.par.pp}")]
    lo, hi = plan.kv_tokens_range
    lines.append(f"uncertainty: KV room ± {_b(b.uncertainty_total)} ("
                 + ", ".join(f"{k} {_b(v)}" for k, v in b.uncertainty.items())
                 + f"), i.e. {lo:,} to {hi:,} tokens")
    if s.engine == "sglang":
        before = cap - b.overhead_total
        origin = "given" if s.utilization_source == "given" else "SGLang's default for this GPU and TP x PP"
        lines.append(f"SGLang: mem_fraction_static {s.utilization:g} ({origin}); free before the "
                     f"weights {_b(before)}, after {_b(before - b.weights_total)}; KV pool {_b(b.kv_room)} ± "
                     f"{_b(b.uncertainty_total)}; max_total_num_tokens {plan.kv_cache_tokens:,} (pages of "
                     f"{s.block_size}); chunked_prefill_size {s.prefill_chunk_tokens:,}, cuda_graph_max_bs "
                     f"{s.cuda_graph_max_bs}")
    elif s.engine == "vllm":
        o, tp = s.overheads, s.par.tp
        lines.append(f"vLLM: total {_b(cap)} x {s.utilization:g} = {_b(cap * s.utilization)}; "
                     f"profiling pass {s.max_num_batched_tokens:,} tokens, {s.max_num_seqs} sequences; "
                     f"available KV cache memory {_b(b.kv_room)} ± {_b(b.uncertainty_total)}; "
                     f"GPU KV cache size {plan.kv_cache_tokens:,} tokens")
        workspace = o.vllm_tp_workspace_bytes(tp, s.spec)
        if tp == 1:
            tp_note = "no TP workspace at TP 1"
        elif workspace:
            tp_note = f"including {_b(workspace)} that appears only at TP > 1 (all-reduce workspace)"
        elif o.vllm_tp_workspace_seen(s.spec):
            tp_note = "with the TP workspace set to 0"
        else:
            tp_note = (f"not counting the {_b(o.vllm_tp_workspace)} TP workspace seen on "
                       f"{'/'.join(o.vllm_tp_workspace_architectures)} GPUs over NVLink "
                       "(it is in the uncertainty instead)")
        lines.append(f"assumed: vLLM's non-torch memory {_b(o.vllm_non_torch_bytes(tp) + workspace)} at "
                     f"TP {tp}, {tp_note}; CUDA graphs live in the (1 - utilization) reserve")
    else:
        o = s.overheads
        lines.append(f"assumed: prefill chunk {s.prefill_chunk_tokens:,} tokens; CUDA context "
                     f"{_b(o.cuda_context)}, cuBLAS workspace {_b(o.cublas_workspace)}, CUDA graphs "
                     f"{_b(o.cuda_graphs)}, NCCL {_b(o.nccl_base)} + {_b(o.nccl_per_peer)} per peer; "
                     "embeddings, LM head, norms and router in 16 bits "
                     "(override with --set KEY=VALUE or --overheads FILE)")
    for w in plan.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines)
