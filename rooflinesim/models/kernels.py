"""The kernels of one forward step of a model on one GPU of each stage.

Kernels of one decoder layer, per GPU (fused where vLLM and TensorRT-LLM fuse):
  input_norm      the residual add fused into RMSNorm: it reads x and the residual and
                  writes both, one kernel (measured as the engines run it, its own fit);
  qkv_proj        one column-parallel GEMM for q, k and v;
  rope_kv_cache   RoPE and the write of the new K and V into the cache, one kernel,
                  priced as a copy of q, k and v;
  attention       the fused kernel (FA3-class by default) over the cache, causal
                  bottom-right: a chunk of new tokens attends to every earlier token;
  o_proj          row-parallel GEMM, then an AllReduce of [tokens, hidden] under TP
                  (ReduceScatter, and an AllGather before the next GEMM, with sequence
                  parallelism, which also shards the norms' rows);
  post_attention_norm, gate_up_proj, act (SiLU(gate) x up as one kernel), down_proj and
  the second AllReduce.
Activation quantization for fp8/int8 GEMMs is taken as fused into the kernel before, except
for block-scaled fp8: the engines quantize each such GEMM's input per 1 x 128 group in a
kernel of its own (``<gemm>_quant``, and the experts' two inputs).
MLA layers (DeepSeek): qkv_a_proj (q_a and kv_a fused, replicated on every TP rank), the
latent norms and q_b_proj. Prefill expands the latent (kv_b_proj over every cached token)
and runs MHA with head dim (qk + v) / 2, which makes its FLOPs and K+V bytes exact.
Decode absorbs kv_b into the query and the output (two batched GEMMs) and runs MQA over
the cached latent, priced as 2 x heads heads of dim (kv_lora_rank + rope) / 2 over one KV
head: the query and latent bytes are exact, the FLOPs 6% high (the value product is
counted at the latent + rope width instead of the latent width).
MoE layers: the MoE op's kernels (router, fused routing as 3 kernels, dispatch, grouped
expert GEMMs, combine; all-to-alls only when ep > tp, since within a TP group every rank
already holds every token; no dispatch copy for block-scaled experts, whose fused kernel
reads each token through the sorted ids) and the shared experts as a dense MLP.
Around the layers: the embedding gather (plus an AllReduce under TP: vocab-parallel
embedding), the final norm, the LM head on the last token of each sequence only (engines
compute logits only where they sample) and the AllGather of the logits under TP. A
sliding window caps the keys at window + new tokens (a prefill longer than the window is
priced as full causal attention). Sampling and the scheduler are not kernels here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..dtypes import bytes_per_element
from ..ops.attention import Attention
from ..ops.collectives import Collective
from ..ops.gemm import BLOCK_GEMM, Gemm
from ..ops.memory import Bookkeeping, Copy, Elementwise, Gather, Norm
from ..ops.moe import BLOCK_MOE, FUSED_MOE, MoE
from .deploy import Deployment, shard

__all__ = ["Kernel", "Phase", "eager_layer_kernels", "phase_kernels"]


class Kernel(NamedTuple):
    """One kernel of a forward pass: an op class and its arguments (numbers, or arrays
    over the points of a phase), how often it runs, and where."""

    name: str
    cls: type
    args: dict
    count: int = 1  # runs per layer ("layer", "dense", "moe") or per forward (others)
    where: str = "layer"  # layer (every layer), dense, moe, first (stage), last, send
    mask: Any = 1  # per point: 0 where the step skips the kernel (logits of early chunks)
    host: str = ""  # a profile host key: host seconds a run adds beyond its launches (eager)

    @property
    def op(self):
        """The op itself (built, and validated, on demand)."""
        return self.cls(**self.args)

    @property
    def launches(self):
        """Kernels launched from the host per run."""
        if self.cls is Bookkeeping:
            return self.args["kernels"]
        if self.cls is Attention and self.args.get("variant") == "naive":
            return 3
        return 1


@dataclass(frozen=True)
class Phase:
    """The steps of one phase at ``n`` points: per point, ``batch`` sequences in a
    microbatch, ``seq_q`` new tokens each, attending to ``seq_kv`` tokens."""

    name: str  # prefill or decode
    batch: Any
    seq_q: Any
    seq_kv: Any
    sequences: Any  # sequences per step (all microbatches)
    microbatches: Any = 1
    logits: Any = 1  # 1 where the step samples a token
    combine: str = "mean"  # how points make the phase's time: "sum" (chunks) or "mean"
    n: int = 1


class _Shapes:
    """Numbers every builder uses."""

    def __init__(self, model, d: Deployment, ph: Phase, sh):
        self.model, self.d, self.ph, self.sh = model, d, ph, sh
        self.h = model.hidden_size
        self.b, self.sq, self.skv = ph.batch, ph.seq_q, ph.seq_kv
        self.T = ph.batch * ph.seq_q  # tokens in the step, per microbatch
        self.act, self.ab = d.activations, bytes_per_element(d.activations)
        self.sp = d.sequence_parallel and d.tp > 1
        self.norm_rows = np.ceil(self.T / d.tp) if self.sp else self.T
        # fp8 weights stored in blocks (the checkpoint's own fp8): the engines' block-scaled kernels
        self.blocks = d.weights == "fp8" and getattr(model, "weight_block_size", None) is not None

    def gemm(self, name, m, n, k, dtype=None, batch=1, **kw) -> Kernel:
        dtype = dtype or self.d.weights
        return Kernel(name, Gemm, dict(m=m, n=n, k=k, batch=batch, dtype=dtype, group_size=self.d.group_size,
                                       backend=BLOCK_GEMM if dtype == "fp8" and self.blocks else ""), **kw)

    def norm(self, name, width, rows=None, **kw) -> Kernel:
        rows = self.norm_rows if rows is None else rows
        return Kernel(name, Norm, dict(tokens=rows, hidden=width, dtype=self.act, kind="rmsnorm"), **kw)

    def add_norm(self, name, **kw) -> Kernel:
        """Residual add fused into RMSNorm: x and the residual read, both written, in the
        engines' one kernel (its own fit, a program per row)."""
        return Kernel(name, Norm, dict(tokens=self.norm_rows, hidden=self.h, dtype=self.act, kind="add_rmsnorm"),
                      **kw)

    def collective(self, name, kind, nbytes, world, **kw) -> Kernel:
        # (an engine's TP AllReduce is its own, priced where measured: the deployment's backends;
        # transformers' and every other collective: NCCL's ring)
        algorithm = self.d.allreduce if kind == "allreduce" and self.d.kernels == "engine" else "ring"
        return Kernel(name, Collective, dict(kind=kind, bytes=nbytes, world_size=world,
                                             algorithm=algorithm, dtype=self.act), **kw)

    def reduce(self, name, where) -> list[Kernel]:
        """After a row-parallel GEMM: AllReduce (or ReduceScatter) of [tokens, hidden]."""
        if self.d.tp == 1:
            return []
        kind = "reducescatter" if self.sp else "allreduce"
        return [self.collective(f"{name}_{kind}", kind, self.T * self.h * self.ab, self.d.tp, where=where)]

    def gather(self, name, where) -> list[Kernel]:
        """Before a column-parallel GEMM under sequence parallelism: AllGather the tokens."""
        if not self.sp:
            return []
        return [self.collective(f"{name}_allgather", "allgather", self.T * self.h * self.ab,
                                self.d.tp, where=where)]


def phase_kernels(model, d: Deployment, ph: Phase, sh=None) -> list[Kernel]:
    """Every kernel of one forward step of ``ph`` on one GPU of each stage (``sh``: the
    deployment's sharding of the model, computed when not given)."""
    s = _Shapes(model, d, ph, sh or shard(model, d))
    ks = _ends(s)
    ks += _mla(s) if model.is_mla else _gqa(s)
    if "dense" in model.layer_kinds:
        ks += [s.add_norm("post_attention_norm", where="dense"), *s.gather("mlp", "dense"),
               *_mlp(s, "", s.sh.ffn, "dense"), *s.reduce("mlp", "dense")]
    if "moe" in model.layer_kinds:
        ks += [s.add_norm("post_attention_norm", where="moe"), *s.gather("moe", "moe"),
               *_moe(s)]
        if s.sh.shared_ffn:
            ks += _mlp(s, "shared_", s.sh.shared_ffn, "moe")
        ks += s.reduce("moe", "moe")
    return _with_group_quant(ks, s.act) if s.blocks else ks


def _with_group_quant(ks: list[Kernel], act: str) -> list[Kernel]:
    """Before each block-scaled GEMM, the kernel that quantizes its activations to fp8 per
    1 x 128 group (the engines run it apart: vLLM's per_token_group_quant_fp8, SGLang's;
    the harness measured the GEMM on activations quantized before timing)."""
    out = []
    for k in ks:
        if k.cls is Gemm and k.args.get("backend") == BLOCK_GEMM:
            a = k.args
            out.append(k._replace(name=f"{k.name}_quant", cls=Elementwise,
                                  args=dict(elements=a["m"] * a["k"] * a["batch"], kind="quant_fp8",
                                            dtype=act), host=""))
        out.append(k)
    return out


def _attention(s: _Shapes, **args) -> Kernel:
    window = s.model.sliding_window
    skv = np.minimum(s.skv, s.sq + window) if window else s.skv
    return Kernel("attention", Attention, dict(batch=s.b, seq_q=s.sq, seq_kv=skv, causal=True,
                                               dtype=s.act, variant=s.d.attention, **args))


def _qkv_proj(s: _Shapes) -> Kernel:
    """One column-parallel GEMM for q, k and v."""
    return s.gemm("qkv_proj", s.T, (s.sh.heads + 2 * s.sh.kv_heads) * s.model.head_dim, s.h)


def _o_proj(s: _Shapes) -> Kernel:
    return s.gemm("o_proj", s.T, s.h, s.sh.heads * s.model.v_head_dim)


def _gqa(s: _Shapes) -> list[Kernel]:
    m, H, KV, hd = s.model, s.sh.heads, s.sh.kv_heads, s.model.head_dim
    ks = [s.add_norm("input_norm"), *s.gather("attn", "layer"), _qkv_proj(s)]
    if m.qk_norm:  # per-head RMSNorm of q and k
        ks.append(s.norm("qk_norm", hd, rows=s.T * (H + KV)))
    ks += [Kernel("rope_kv_cache", Copy, dict(bytes=s.T * (H + 2 * KV) * hd * s.ab)),
           _attention(s, heads=H, kv_heads=KV, head_dim=hd, kv_dtype=s.d.kv_cache),
           _o_proj(s), *s.reduce("attn", "layer")]
    return ks


def _mla(s: _Shapes) -> list[Kernel]:
    m, H, T = s.model, s.sh.heads, s.T
    nope, rope, vd, latent = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    ks = [s.add_norm("input_norm"), *s.gather("attn", "layer")]
    if m.q_lora_rank:
        ql = m.q_lora_rank
        ks += [s.gemm("qkv_a_proj", T, ql + latent + rope, s.h), s.norm("q_a_norm", ql, rows=T),
               s.norm("kv_a_norm", latent, rows=T), s.gemm("q_b_proj", T, H * m.head_dim, ql)]
    else:
        ks += [s.gemm("q_proj", T, H * m.head_dim, s.h), s.gemm("kv_a_proj", T, latent + rope, s.h),
               s.norm("kv_a_norm", latent, rows=T)]
    ks.append(Kernel("rope_kv_cache", Copy, dict(bytes=T * (H * rope + latent + rope) * s.ab)))
    if s.ph.name == "prefill":  # expand every cached token's latent, then MHA
        ks += [s.gemm("kv_b_proj", s.b * s.skv, H * (nope + vd), latent),
               _attention(s, heads=H, kv_heads=H, head_dim=(m.head_dim + vd) / 2, kv_dtype=s.act)]
    else:  # absorbed: MQA over the latent
        ks += [s.gemm("q_absorb", T, latent, nope, dtype=s.act, batch=H),
               _attention(s, heads=2 * H, kv_heads=1, head_dim=(latent + rope) / 2,
                          kv_dtype=s.d.kv_cache, latent=s.d.kernels != "hf" and s.d.own_mla_decode),
               s.gemm("v_absorb", T, vd, latent, dtype=s.act, batch=H)]
    ks += [s.gemm("o_proj", T, s.h, H * vd), *s.reduce("attn", "layer")]
    return ks


def _gate_up_proj(s: _Shapes, prefix: str, width, where: str) -> Kernel:
    return s.gemm(f"{prefix}gate_up_proj", s.T, 2 * width, s.h, where=where)


def _down_proj(s: _Shapes, prefix: str, width, where: str) -> Kernel:
    return s.gemm(f"{prefix}down_proj", s.T, s.h, width, where=where)


def _mlp(s: _Shapes, prefix: str, width: int, where: str) -> list[Kernel]:
    kind = "gelu_mul" if "gelu" in s.model.hidden_act else "silu_mul"
    return [_gate_up_proj(s, prefix, width, where),
            Kernel(f"{prefix}act", Elementwise, dict(elements=s.T * width, kind=kind, dtype=s.act),
                   where=where),
            _down_proj(s, prefix, width, where)]


def eager_layer_kernels(model, d, ph: Phase, sh, attention: dict) -> list[Kernel]:
    """One dense GQA decoder layer as eager PyTorch runs it, module by module (the layer
    the harness times as ``decoder_layer`` records): RMSNorm, the QKV GEMM, in decode the
    new token's K and V copied into the cache (two copies), SDPA (``attention``: its
    backend and variant; causal over the prompt in prefill, one query over the cache in
    decode), the O GEMM, the residual add, RMSNorm, the gate-up GEMM, SiLU and the
    multiply apart, the down GEMM and the residual add. Its GEMMs and attention are those
    of the engine's layer (``phase_kernels``); what differs is what fuses: an engine adds
    the residual inside its norms, fuses RoPE with the cache write and SiLU with the
    multiply. SDPA's output is already laid out [tokens, heads x head_dim], so no copy
    merges the heads (the measured kernel names show none); no RoPE kernel is timed."""
    s = _Shapes(model, d, ph, sh)
    H, KV, hd = sh.heads, sh.kv_heads, model.head_dim
    decode = ph.name == "decode"
    attn = Kernel("attention", Attention, dict(batch=s.b, heads=H, kv_heads=KV, seq_q=s.sq, seq_kv=s.skv,
                                               head_dim=hd, causal=not decode, dtype=s.act, **attention))
    ks = [s.norm("input_norm", s.h), _qkv_proj(s)]
    if decode:  # write the new K and V into the cache
        ks.append(Kernel("kv_cache_write", Copy, dict(bytes=s.T * KV * hd * s.ab), count=2))
    ks += [attn, _o_proj(s),
           Kernel("residual_add", Elementwise, dict(elements=s.T * s.h, kind="add", dtype=s.act)),
           s.norm("post_attention_norm", s.h), _gate_up_proj(s, "", sh.ffn, "layer"),
           Kernel("silu", Elementwise, dict(elements=s.T * sh.ffn, kind="silu", dtype=s.act)),
           Kernel("mul", Elementwise, dict(elements=s.T * sh.ffn, kind="mul", dtype=s.act)),
           _down_proj(s, "", sh.ffn, "layer"),
           Kernel("residual_add", Elementwise, dict(elements=s.T * s.h, kind="add", dtype=s.act))]
    return ks


def _moe(s: _Shapes) -> list[Kernel]:
    m = s.model
    op = MoE(tokens=s.T * s.sh.moe_token_factor, hidden=s.h, ffn=s.sh.expert_ffn,
             experts=m.num_experts, top_k=m.num_experts_per_tok, dtype=s.d.weights,
             act_dtype=s.act, ep=s.d.ep, routing_kernels=3, eager=False,
             expert_backend=_expert_backend(s))
    # ep <= tp: every rank of the TP group already holds every token, so the experts'
    # rows need no all-to-all; the layer's AllReduce combines them (vLLM's EP without DP)
    skip = ("ep_dispatch", "ep_combine") if s.sh.moe_token_factor == 1 else ()
    return [Kernel(f"moe_{name}", cls, _all_args(cls, args), where="moe")
            for name, cls, args in op.kernel_args() if name not in skip]


def _expert_backend(s: _Shapes) -> str:
    """The experts' kernel: the engines' fused MoE kernel for fp8 stored in blocks and for 16-bit
    experts (vLLM's and SGLang's Triton kernel, each measured on its own), else the dtype's fit."""
    if s.blocks:
        return BLOCK_MOE
    return FUSED_MOE if s.d.kernels == "engine" and s.d.weights in ("bf16", "fp16") else ""


def _all_args(cls, args: dict) -> dict:
    """Every field of op class ``cls``, in field order: ``args``, else its default."""
    return {f: args[f] if f in args else default for f, default in _defaults(cls)}


@lru_cache(maxsize=None)
def _defaults(cls) -> tuple:
    return tuple((f.name, f.default) for f in fields(cls))


def _ends(s: _Shapes) -> list[Kernel]:
    """Embedding (first stage), final norm and LM head (last stage), stage hand-offs."""
    d, T, h = s.d, s.T, s.h
    ks = [Kernel("embed", Gather, dict(rows_in=T, rows_out=T, width=h, dtype=s.act), where="first")]
    if d.tp > 1:  # vocab-parallel embedding: each rank looks up its rows, then AllReduce
        ks.append(s.collective("embed_allreduce", "allreduce", T * h * s.ab, d.tp, where="first"))
    ks += [s.add_norm("final_norm", where="last"), *s.gather("final", "last"),
           s.gemm("lm_head", s.b, s.sh.vocab, h, dtype=s.act, where="last", mask=s.ph.logits)]
    if d.tp > 1:
        ks.append(s.collective("logits_allgather", "allgather", s.b * s.sh.vocab * d.tp * s.ab,
                               d.tp, where="last", mask=s.ph.logits))
    if d.pp > 1:  # activations to the next stage: a send of S bytes priced as a 2-GPU
        # AllGather of 2S (each GPU sends S over its link)
        ks.append(s.collective("pp_send", "allgather", 2 * T * h * s.ab, 2, where="send"))
    return ks


