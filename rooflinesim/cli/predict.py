"""`rooflinesim predict ...`: one kernel's latency, bound and losses on a GPU."""

from __future__ import annotations

import click

from .common import (MAX_BYTES, MAX_COUNT, POS, Real, Size, check_product, echo, eager_option, emit_json,
                     gpu_options, json_option, load_gpu, load_profile, parse_size, profile_label, profile_option,
                     table)


@click.group()
def predict():
    """Predict the latency of a kernel, or of a whole model served on GPUs (`predict model`)."""


def _report(op, gpu, spec_files, profile, as_json, title, eager=False, facts=None):
    """Print ``op``'s predicted timing, replayed in a CUDA graph or with ``eager`` launched
    from Python; ``facts``: (JSON key, label, value, text) of what else set the time,
    listed before it."""
    from ..predict import predict as predict_op
    from ..units import format_bytes, format_rate, format_seconds

    spec = load_gpu(gpu, spec_files, fast=True)
    prof = load_profile(spec, profile, fast=True)
    extra = {}
    if op.family == "attention":  # which kernel runs it on this GPU
        from ..attention_kernels import kernel_of

        kernel = kernel_of(op, spec, prof)
        title = title.format(kernel=kernel.describe())
        extra = {"kernel": {"class": kernel.variant, "backend": kernel.backend, "label": kernel.label}}
    t = predict_op(op, spec, prof, eager=eager)
    if eager:
        title += " (eager launches)"
    facts = facts or []
    if as_json:
        emit_json({"op": op.family, "gpu": spec.name, "profile": profile_label(prof),
                   "shape": {k: v for k, v in op.shape().items() if v not in (None, "")},
                   "mode": "eager" if eager else "graph", **extra,
                   **{key: value for key, _, value, _ in facts}, **t.as_dict()})
        return
    rows = [(label, text) for _, label, _, text in facts]
    rows += [
        ("latency", format_seconds(t.latency_s)),
        ("bound", t.bound),
        ("FLOPs", f"{t.flops:.4g}"),
        ("HBM traffic", format_bytes(t.hbm_bytes, binary=False)),
    ]
    if t.flops:
        rows += [
            ("intensity", f"{t.intensity_flop_per_byte:.4g} FLOP/B "
                          f"(ridge {t.ridge_flop_per_byte:.4g} FLOP/B)"),
            ("attained", format_rate(t.attained_flop_per_s, "FLOP/s")),
        ]
    if t.hbm_bytes:
        rows.append(("attained HBM", format_rate(t.hbm_bytes / t.latency_s, "B/s")))
    rows += [("compute time", format_seconds(t.compute_s)),
             ("HBM time", format_seconds(t.hbm_s))]
    if t.l2_s:
        rows.append(("L2 time", format_seconds(t.l2_s)))
    if t.link_s:
        rows.append(("link time", format_seconds(t.link_s)))
    if t.launch_s:
        rows.append(("fixed cost", format_seconds(t.launch_s)))
    for name, v in t.losses.items():
        if name.endswith("_bytes_per_s"):
            rows.append((name[:-12], format_rate(v, "B/s")))
        elif name.endswith("_s"):
            rows.append((name[:-2].replace("_", " "), format_seconds(v)))
        else:
            rows.append((name.replace("_", " "), f"x{float(v):.3g}"))
    out = [f"{title} on {spec.name} [profile: {profile_label(prof)}]", table(rows, align=["<", "<"])]
    if t.parts:
        out += ["", table([(n, format_seconds(p.latency_s), p.bound,
                            f"{100 * p.latency_s / t.latency_s:.1f}%") for n, p in t.parts],
                          headers=("kernel", "time", "bound", "share"))]
    echo(*out)


@predict.command()
@click.option("-m", type=POS, required=True, help="Rows of A and C (tokens).")
@click.option("-n", type=POS, required=True, help="Columns of C (output features).")
@click.option("-k", type=POS, required=True, help="Reduction dimension (input features).")
@click.option("--batch", type=POS, default=1, show_default=True)
@click.option("--dtype", default="bf16", show_default=True,
              help="fp32, tf32, bf16, fp16, fp8 (bf16 out), int8, int4 (w4a16).")
@click.option("--group-size", type=POS, default=128, show_default=True, help="int4 group size.")
@gpu_options
@profile_option
@eager_option
@json_option
def gemm(m, n, k, batch, dtype, group_size, gpu, spec_files, profile, eager, as_json):
    """A GEMM C[m,n] = A[m,k] @ W[n,k]^T (a Linear layer)."""
    from ..ops.gemm import Gemm

    check_product("the GEMM", batch=batch, m=m, n=n, k=k)
    op = Gemm(m=m, n=n, k=k, batch=batch, dtype=dtype.lower(), group_size=group_size)
    _report(op, gpu, spec_files, profile, as_json, f"GEMM {dtype} m={m} n={n} k={k}"
            + (f" batch={batch}" if batch > 1 else ""), eager)


@predict.command()
@click.option("--batch", type=POS, default=1, show_default=True)
@click.option("--heads", type=POS, default=32, show_default=True)
@click.option("--kv-heads", type=POS, default=None, help="KV heads (GQA/MQA); default = heads.")
@click.option("--seq-q", type=POS, default=None, help="Query tokens (default = --seq).")
@click.option("--seq", "seq_kv", type=POS, default=4096, show_default=True, help="Key/value tokens.")
@click.option("--head-dim", type=POS, default=128, show_default=True)
@click.option("--causal/--no-causal", default=True, show_default=True)
@click.option("--decode", is_flag=True, help="One query token per sequence against a KV cache.")
@click.option("--page-size", type=POS, default=None, help="Paged KV block size (tokens).")
@click.option("--dtype", default="bf16", show_default=True)
@click.option("--kv-dtype", default=None)
@click.option("--variant", "--attention", "variant", type=click.Choice(["fa3", "fa2", "naive"]), default=None,
              help="Attention kernel class (default: the GPU's own: fa3 on Hopper and Blackwell, "
                   "fa2 on Ampere, Ada and AMD).")
@click.option("--backend", default=None, help="A measured backend: sdpa-cudnn, sdpa-flash, sdpa-efficient "
                                              "(overrides --variant).")
@gpu_options
@profile_option
@eager_option
@json_option
def attention(batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, decode, page_size, dtype,
              kv_dtype, variant, backend, gpu, spec_files, profile, eager, as_json):
    """Fused attention forward (prefill) or decode against a KV cache."""
    from ..errors import UserError
    from ..ops.attention import Attention

    if decode:
        seq_q = seq_q or 1
    seq_q = seq_q or seq_kv
    if seq_q > seq_kv:
        raise UserError(f"--seq-q ({seq_q}) cannot exceed --seq ({seq_kv})")
    if kv_heads and heads % kv_heads:
        raise UserError(f"--kv-heads ({kv_heads}) must divide --heads ({heads})")
    check_product("the attention", batch=batch, heads=heads, seq_q=seq_q, seq=seq_kv, head_dim=head_dim)
    op = Attention(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=seq_q, seq_kv=seq_kv,
                   head_dim=head_dim, causal=causal, dtype=dtype.lower(), kv_dtype=kv_dtype,
                   variant=variant, backend=backend, page_size=page_size)
    _report(op, gpu, spec_files, profile, as_json,
            f"{{kernel}} {dtype} b={batch} h={heads}/{kv_heads or heads} "
            f"q={seq_q} kv={seq_kv} d={head_dim}{' causal' if causal else ''}", eager)


@predict.command()
@click.option("--tokens", type=POS, required=True)
@click.option("--hidden", type=POS, required=True)
@click.option("--ffn", type=POS, required=True, help="Intermediate size of one expert.")
@click.option("--experts", type=Size(max=MAX_COUNT), required=True)
@click.option("--top-k", type=Size(max=MAX_COUNT), required=True)
@click.option("--dtype", default="bf16", show_default=True, help="Expert weight format.")
@click.option("--routing", type=click.Choice(["uniform", "balanced"]), default="uniform",
              show_default=True)
@click.option("--imbalance", type=Real(min=1, max=MAX_COUNT), default=None,
              help="Busiest expert's load over the mean (overrides --routing).")
@click.option("--ep", type=Size(max=MAX_COUNT), default=1, show_default=True, help="Expert-parallel degree.")
@click.option("--fused", is_flag=True,
              help="An engine's fused MoE kernels (few routing kernels, fused SwiGLU and "
                   "combine) instead of PyTorch ops one by one, as the harness measures.")
@gpu_options
@profile_option
@eager_option
@json_option
def moe(tokens, hidden, ffn, experts, top_k, dtype, routing, imbalance, ep, fused, gpu, spec_files,
        profile, eager, as_json):
    """A MoE layer: router, top-k, dispatch, grouped expert GEMMs (SwiGLU), combine."""
    from ..ops.moe import MoE

    check_product("the MoE layer", tokens=tokens, top_k=top_k, hidden=hidden, ffn=ffn)
    check_product("the MoE router", tokens=tokens, hidden=hidden, experts=experts)
    op = MoE(tokens=tokens, hidden=hidden, ffn=ffn, experts=experts, top_k=top_k,
             dtype=dtype.lower(), routing=routing, imbalance=imbalance, ep=ep,
             **({"routing_kernels": 3, "eager": False} if fused else {}))
    touched, busiest = float(op.touched()), float(op.busiest())
    mean = tokens * top_k / experts
    expected = "expected, " if op.routing == "uniform" and imbalance is None else ""
    facts = [("experts_touched", "experts touched", touched,
              f"{touched:.4g} of {experts}" + (" (expected)" if expected else "")),
             ("busiest_expert_rows", "busiest expert", busiest,
              f"{busiest:.4g} rows ({expected}mean {mean:.4g}, x{busiest / mean:.3g})")]
    _report(op, gpu, spec_files, profile, as_json,
            f"MoE T={tokens} H={hidden} F={ffn} E={experts} k={top_k} ep={ep}", eager, facts)


_COLLECTIVES = {"allreduce": "every GPU ends with the sum of the full tensor",
                "allgather": "every GPU ends with all GPUs' shards of the full tensor",
                "reducescatter": "every GPU ends with its shard of the sum",
                "alltoall": "every GPU sends a distinct shard to each other GPU"}


def _collective_command(kind):
    @predict.command(name=kind, help=f"An NCCL-style {kind} in the latency-bandwidth form (algbw "
                                     f"and busbw): {_COLLECTIVES[kind]}.")
    @click.option("--bytes", "size", required=True,
                  help="Size of the full tensor, e.g. 16MiB, 1GB or 1048576.")
    @click.option("--gpus", "world_size", type=Size(min=2, max=MAX_COUNT), default=8, show_default=True,
                  help="GPUs taking part (the world size).")
    @click.option("--algorithm", type=click.Choice(["ring", "tree", "nvls", "engine", "custom"]), default="ring", show_default=True,
                  help="engine and custom (allreduce): a serving engine's own TP AllReduce, as measured where the "
                       "GPU's link has figures, else the ring: engine is vLLM's since v0.11 (custom one-stage "
                       "kernels, PyTorch symmetric memory, NCCL), custom a custom AllReduce's one- and two-stage "
                       "kernels, then NCCL (SGLang's default, vLLM before v0.11, TensorRT-LLM's kernels).")
    @gpu_options
    @profile_option
    @json_option
    def command(size, world_size, algorithm, gpu, spec_files, profile, as_json):
        from ..ops.collectives import Collective

        nbytes = parse_size(size, "--bytes", max=MAX_BYTES)
        check_product(f"the {kind}", bytes=nbytes, gpus=world_size)
        op = Collective(kind=kind, bytes=nbytes, world_size=world_size, algorithm=algorithm)
        _report(op, gpu, spec_files, profile, as_json,
                f"{kind} {algorithm} of {size} over {world_size} GPUs")

    return command


for _kind in ("allreduce", "allgather", "reducescatter", "alltoall"):
    _collective_command(_kind)


@predict.command()
@click.option("--bytes", "size", required=True, help="Size of the buffer, e.g. 1GiB.")
@gpu_options
@profile_option
@eager_option
@json_option
def copy(size, gpu, spec_files, profile, eager, as_json):
    """A device-to-device copy (the buffer is read once and written once)."""
    from ..ops.memory import Copy

    op = Copy(bytes=parse_size(size, "--bytes", max=MAX_BYTES))
    _report(op, gpu, spec_files, profile, as_json, f"copy of {size}", eager)


@predict.command()
@click.option("--tokens", type=POS, required=True)
@click.option("--hidden", type=POS, required=True)
@click.option("--kind", type=click.Choice(["rmsnorm", "layernorm", "softmax"]), default="rmsnorm",
              show_default=True)
@click.option("--dtype", default="bf16", show_default=True)
@gpu_options
@profile_option
@eager_option
@json_option
def norm(tokens, hidden, kind, dtype, gpu, spec_files, profile, eager, as_json):
    """RMSNorm, LayerNorm or a row softmax over [tokens, hidden]."""
    from ..ops.memory import Norm

    check_product(f"the {kind}", tokens=tokens, hidden=hidden)
    op = Norm(tokens=tokens, hidden=hidden, kind=kind, dtype=dtype.lower())
    _report(op, gpu, spec_files, profile, as_json, f"{kind} tokens={tokens} hidden={hidden}", eager)
