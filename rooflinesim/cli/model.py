"""`rooflinesim predict model ...`: a whole model served on GPUs, from its kernels."""

from __future__ import annotations

from dataclasses import replace

import re

import click

from .common import (FRACTION, MAX_COUNT, MAX_SIZE, POS, Size, UserError, allreduce_option, echo, emit_json,
                     gpu_options, json_option,
                     load_gpu, load_model, load_profile, parse_size, profile_label, profile_option, table, weights_of)

PAR = Size(max=MAX_COUNT)  # a parallel degree or a number of microbatches
MAX_CHUNKS = 4096  # prefill chunks of one prompt (the prediction prices each one)
MAX_DECODE_POINTS = 1024
MAX_LAUNCH_S = 1.0  # host time of one kernel launch


class BatchOrMax(Size):
    """A batch size, or 'max'."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value.strip().lower() == "max":
            return "max"
        if isinstance(value, str) and not re.fullmatch(r"[+-]?[0-9]+", value.strip()):
            self.fail(f"{value!r} is neither a whole number nor 'max'.", param, ctx)
        return super().convert(value, param, ctx)

    def get_metavar(self, param, ctx=None):
        return "N|max"


@click.command("model")
@click.option("--model", "model_name", required=True,
              help="A bundled preset (e.g. llama-3-70b), a Hugging Face id, or a config.json path.")
@click.option("--batch", type=BatchOrMax(), default="1", show_default=True,
              help="Concurrent sequences per replica, or 'max': the largest batch of prompt + gen "
                   "tokens the memory planner fits (as `rooflinesim fit` reports it).")
@click.option("--prompt", type=POS, default=2048, show_default=True, help="Prompt tokens per sequence.")
@click.option("--gen", type=POS, default=256, show_default=True, help="Generated tokens per sequence.")
@click.option("--chunk", type=POS, default=None,
              help="Chunked prefill: prompt tokens per sequence per step (default: the whole prompt).")
@click.option("--tp", type=PAR, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--pp", type=PAR, default=1, show_default=True, help="Pipeline stages.")
@click.option("--ep", type=PAR, default=1, show_default=True, help="Expert-parallel GPUs (MoE).")
@click.option("--dp", type=PAR, default=1, show_default=True, help="Data-parallel replicas.")
@click.option("--sequence-parallel", is_flag=True,
              help="ReduceScatter + AllGather instead of AllReduce; norms on tokens / tp.")
@click.option("--microbatches", type=PAR, default=None,
              help="Pipeline microbatches (default: pp, at most the batch).")
@click.option("--weights", default=None,
              help="bf16, fp16, fp8 (fp8 GEMMs: weights and activations), int8 (w8a8), int4 (w4a16). "
                   "Default: what the config's quantization_config stores, else bf16.")
@click.option("--activations", default=None,
              help="bf16 or fp16 (default: fp16 with fp16 weights, else bf16).")
@click.option("--kv-dtype", "--kv", "kv_dtype", default=None,
              help="KV-cache dtype: bf16, fp16 or fp8 (default: the activations').")
@click.option("--group-size", type=POS, default=128, show_default=True, help="int4 weights per scale.")
@click.option("--attention", type=click.Choice(["fa3", "fa2", "naive"]), default=None,
              help="Attention kernel class (default: the GPU's own: fa3 on Hopper and Blackwell, "
                   "fa2 on Ampere, Ada and AMD).")
@click.option("--eager", is_flag=True, help="No CUDA graph: kernels launched from Python; a stage's host "
                                           "time (each call's, fitted per op family, and each layer's Python) "
                                           "joined with its GPU time, as eager layers are priced.")
@click.option("--launch-overhead", default=None,
              help="Host time per kernel launch with --eager, in place of the profile's fitted host times "
                   "(transformers: per PyTorch op).")
@click.option("--engine", type=click.Choice(["vllm", "sglang", "trtllm", "hf"]), default="vllm", show_default=True,
              help="Whose kernels: vllm, sglang and trtllm run the same fused kernels (and each its own TP "
                   "AllReduce, --allreduce); hf is Hugging Face transformers' eager forward (SDPA, one GPU), with "
                   "where its time goes.")
@click.option("--hf-cache", type=click.Choice(["static", "dynamic"]), default=None,
              help="--engine hf: the KV cache (default: dynamic with --eager, as generate() runs; static "
                   "otherwise, the cache a CUDA graph captures, sized prompt + gen).")
@click.option("--decode-points", type=Size(max=MAX_DECODE_POINTS), default=4, show_default=True,
              help="Decode contexts averaged into the time per output token.")
@click.option("--memory-fraction", "--gpu-memory-utilization", "memory_fraction",
              type=FRACTION, default=0.9, show_default=True,
              help="--batch max: share of the card the deployment may use, the rest headroom "
                   "(the planner's gpu_memory_utilization).")
@allreduce_option(None)
@gpu_options
@profile_option
@json_option
def model(model_name, batch, prompt, gen, chunk, tp, pp, ep, dp, sequence_parallel, microbatches,
          weights, activations, kv_dtype, group_size, attention, eager, launch_overhead,
          engine, hf_cache, decode_points, memory_fraction, allreduce, gpu, spec_files, profile, as_json):
    """A model served on GPUs: time to first token, time per output token, throughput, and
    the kernels of prefill and decode with their times."""
    from ..models.deploy import Deployment, max_batch
    from ..models.workload import predict_model
    from ..serve.defaults import engine_kernels

    if chunk is not None and -(-prompt // chunk) > MAX_CHUNKS:
        raise UserError(f"--prompt {prompt} in chunks of {chunk} is {-(-prompt // chunk):,} chunks; "
                        f"at most {MAX_CHUNKS} are priced (pass a larger --chunk)")
    overhead_s = None if launch_overhead is None else parse_size(
        launch_overhead, "--launch-overhead", "seconds", whole=False, max=MAX_LAUNCH_S, min_open=False)
    if batch != "max" and batch * (prompt + gen) > MAX_SIZE:
        raise UserError(f"--batch {batch} x (--prompt + --gen) = {batch * (prompt + gen):.3g} tokens exceeds "
                        f"2^40 ({MAX_SIZE:.3g}); give smaller sizes")
    cfg = load_model(model_name, fast=True)
    weights = weights_of(cfg, weights)
    spec = load_gpu(gpu, spec_files, fast=True)
    prof = load_profile(spec, profile, fast=True)
    d = Deployment(tp=tp, pp=pp, ep=ep, dp=dp, sequence_parallel=sequence_parallel,
                   weights=weights, activations=activations and activations.lower(),
                   kv_cache=kv_dtype and kv_dtype.lower(), group_size=group_size,
                   attention=attention, microbatches=microbatches, eager=eager,
                   launch_overhead_s=overhead_s, kernels="hf" if engine == "hf" else "engine",
                   hf_cache=hf_cache if engine == "hf" else None,
                   **engine_kernels(engine, allreduce))
    if hf_cache is not None and engine != "hf":
        raise UserError("--hf-cache goes with --engine hf")
    source = click.get_current_context().get_parameter_source("batch")
    how = "default" if source == click.core.ParameterSource.DEFAULT else "given"
    if batch == "max":
        batch = max_batch(cfg, d, spec, prompt + gen, memory_fraction)
        how = (f"max: the largest batch the memory planner fits for {prompt + gen} tokens, "
               f"at gpu_memory_utilization {memory_fraction:g}")
    r = predict_model(cfg, spec, prof, d, batch=batch, prompt=prompt, gen=gen, chunk=chunk,
                      decode_points=decode_points)
    for note in r.warnings:
        click.echo(f"warning: {note}", err=True)
    fused = None
    if d.kernels == "hf":  # what an engine's fused kernels in a CUDA graph would take instead
        fused = predict_model(cfg, spec, prof, replace(d, kernels="engine", hf_cache=None, eager=False),
                              batch=batch, prompt=prompt, gen=gen, decode_points=decode_points)
    if as_json:
        extra = {}
        if fused is not None:
            extra = {"engine_comparison": {"ttft_s": fused.ttft_s, "tpot_s": fused.tpot_s,
                                           "kernels": "engine, CUDA graph"},
                     "categories": {name: ph_categories(ph) for name, ph in (("prefill", r.prefill),
                                                                              ("decode", r.decode))}}
        emit_json({**r.as_dict(), **extra, "batch_from": how, "profile": profile_label(prof)})
        return
    _print(r, prof, how, fused)


def ph_categories(phase) -> list[dict]:
    """transformers' ops of a phase gathered into what they are (time and share per category)."""
    from ..models.hf import category

    total, out = 0.0, {}
    for o in phase.table():
        c = category(o["op"])
        out[c] = out.get(c, 0.0) + o["time_s"]
        total += o["time_s"]
    return [{"category": c, "time_s": t, "share": t / (total or 1.0)}
            for c, t in sorted(out.items(), key=lambda kv: -kv[1])]


def _print(r, prof, how, fused=None) -> None:
    from ..models.workload import host_per_launch
    from ..units import format_bytes, format_rate, format_seconds

    d = r.deployment
    rates, mem = r.rates(), r.memory()
    how_run = d.describe(r.attention_kernel.describe(), r.model.weight_block_size)
    out = [f"{r.model.name} on {d.gpus} x {r.spec.name} ({how_run}) [profile: {profile_label(prof)}]"]
    view = "CUDA graph (kernel sum)"
    if d.eager:
        view = (f"eager launches, {format_seconds(host_per_launch(d, prof))} host time each"
                if d.launch_overhead_s is not None else
                f"eager launches, each call's host time as fitted for its op family, "
                f"{format_seconds(prof.host_params('sequence').call_s)} per layer's Python")
    if d.kernels == "hf":
        view = (f"transformers' eager forward, {format_seconds(host_per_launch(d, prof))} host time per PyTorch "
                f"op" if d.eager else "transformers' forward, decode replayed as a CUDA graph (prefill: kernel sum)")
    chunk = f", prefill in chunks of {r.chunk}" if r.chunk else ""
    out.append(f"batch {r.batch} ({how}), prompt {r.prompt}, gen {r.gen}{chunk}; the batch's prompts "
               f"are prefilled together; {view}")
    ctx = r.decode.phase.seq_kv
    rows = [
        ("time to first token", format_seconds(r.ttft_s)),
        ("time per output token", f"{format_seconds(r.tpot_s)}  (mean step at contexts "
                                  f"{', '.join(str(int(c)) for c in ctx)})" if not (
                                      d.kernels == "hf" and d.hf_cache == "static") else
         f"{format_seconds(r.tpot_s)}  (each step reads the whole static cache: {int(ctx[0])} tokens)"),
        ("end-to-end latency", format_seconds(r.e2e_s)),
    ]
    for key, label in (("decode", "decode tokens/s"), ("overall", "output tokens/s, end to end"),
                       ("prefill", "prefill tokens/s")):
        rows.append((label, f"{rates[key]['total']:,.0f} total, {rates[key]['per_gpu']:,.0f} per GPU"))
    rows.append(("weights / KV cache per GPU",
                 f"{format_bytes(mem['weights_bytes_per_gpu'], binary=False)} / "
                 f"{format_bytes(mem['kv_cache_bytes_per_gpu'], binary=False)} of "
                 f"{format_bytes(mem['capacity_bytes'], binary=False)}"))
    out.append(table(rows, align=["<", "<"]))
    if fused is not None:
        out += ["", f"an engine's fused kernels in a CUDA graph (--engine vllm) would take "
                    f"{format_seconds(fused.ttft_s)} to the first token and {format_seconds(fused.tpot_s)} "
                    f"per output token"]
        for name, phase in (("prefill", r.prefill), ("decode", r.decode)):
            out += ["", f"where transformers' {name} time goes"]
            out.append(table([(c["category"], format_seconds(c["time_s"]), f"{100 * c['share']:.1f}%")
                              for c in ph_categories(phase)], headers=("ops", "time", "share")))
    each = "per GPU, one microbatch through every stage"
    titles = {"prefill": f"prefill (whole prompt{{}}; {each})",
              "decode": f"decode (one step, mean over the contexts; {each})"}
    for name, phase in (("prefill", r.prefill), ("decode", r.decode)):
        out += ["", titles[name].format(", all chunks" if r.chunk else "")]
        out.append(table([(o["op"], f"{o['count']:g}", format_rate(o["flops"], "FLOP").replace("/s", ""),
                           format_bytes(o["hbm_bytes"], binary=False), format_seconds(o["time_s"]),
                           o["bound"], f"{100 * o['share']:.1f}%") for o in phase.table()],
                         headers=("op", "count", "FLOPs", "HBM bytes", "time", "bound", "share")))
    echo(*out)


def register(predict_group) -> None:
    """Attach ``model`` to the ``predict`` group."""
    predict_group.add_command(model)
