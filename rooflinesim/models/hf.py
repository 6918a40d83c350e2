"""The kernels of one forward pass of Hugging Face transformers (eager PyTorch, SDPA).

Where an engine fuses (``rooflinesim.models.kernels``), transformers runs PyTorch ops one by
one, and its caches change what attention reads. Per decoder layer, on ``T = batch x new
tokens`` rows (the families' differences are data: ``rooflinesim/data/hf_inventory.yaml``):

  input_norm     RMSNorm as 8 kernels: a cast to fp32, pow, mean, + eps, rsqrt, multiply,
                 a cast back, the weight multiply;
  q/k/v_proj     three GEMMs (Phi-3: one fused qkv_proj; Qwen2's bias rides in the GEMM);
  qk_norm        Qwen3: the 8-kernel RMSNorm over every query head and every key head;
  rope           q * cos + rotate_half(q) * sin, 5 kernels for q and 5 for k (Phi-3: a cat
                 more each);
  cache update   StaticCache: index_copy_ of the new K and V into the cache (plus three
                 index kernels); DynamicCache: torch.cat of the whole cache with the new
                 token, K and V, every step; use_cache=False: none;
  repeat_kv      when SDPA gets a mask (every StaticCache decode step; a sliding window once
                 the keys pass it), K and V are first copied out to every query head, and
                 the mask made additive (3 small kernels);
  attention      one SDPA call (cuDNN's fused kernel on Hopper) over every key the cache
                 holds: a StaticCache's whole length (filled or not, the mask hides the
                 rest), a DynamicCache's context;
  o_proj, residual add, post_attention_norm (8), gate_proj and up_proj (Phi-3: one
  gate_up_proj), SiLU, multiply, down_proj, residual add.
MoE layers (Mixtral, Qwen3-MoE, DeepSeek): the router GEMM and its top-k ops, then the
grouped_mm path: the routed rows gathered in expert order, two grouped GEMMs with a copy and
a masked fill after each, SiLU and multiply, the routing weights applied, the rows put back
in token order and summed over the top-k; DeepSeek's shared experts as a dense MLP.
MLA (DeepSeek): q_proj (or q_a, its norm and q_b), kv_a_proj and its norm, the rope on the
rope parts; the cache holds the latent and the rope key, so every step runs kv_b_proj over
every cached token and assembles per-head keys (two copies) before SDPA (head dims 192 for
q and k, 128 for v: SDPA cannot use cuDNN's same-width path, and the output is copied).
Around the layers: the embedding gather, positions and mask (small index kernels; without a
cache, a packed-sequence check that syncs the host), rotary cos and sin, the final norm and
the LM head on the last token (``logits_to_keep=1``, as generate() asks).

Each ``Kernel`` here is one PyTorch op issued from Python (some launch two kernels: a
split-K reduction, cuDNN's reduction), which is what eager host time counts.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..ops.attention import Attention
from ..ops.memory import Bookkeeping, Copy, Elementwise, Gather
from ..ops.moe import MoE
from .kernels import Kernel, _all_args, _Shapes

__all__ = ["hf_kernels", "inventory", "CACHES"]

CACHES = ("static", "dynamic", "none")


@lru_cache(maxsize=1)
def _table() -> dict:
    import yaml  # (here: an engine's prediction never reads the inventory)

    return yaml.safe_load((Path(__file__).parents[1] / "data" / "hf_inventory.yaml").read_text())


def inventory(model) -> dict:
    """The family's entry of the inventory (a UserError for a family it does not list)."""
    fam = _table()["families"].get(model.architecture)
    if fam is None:
        known = ", ".join(sorted(_table()["families"]))
        raise UserError(f"--engine hf has no kernel inventory for {model.architecture} ({model.name}); "
                        f"known: {known}")
    return fam


class _HF(_Shapes):
    """Sizes, plus transformers' unfused building blocks."""

    def __init__(self, model, d, ph, sh):
        super().__init__(model, d, ph, sh)
        self.fam, self.c = inventory(model), _table()["common"]
        self.cache = d.hf_cache
        self.norm_rows = self.T  # (no sequence parallelism in transformers' forward)

    def small(self, name, kernels, nbytes=0, **kw) -> Kernel:
        return Kernel(name, Bookkeeping, dict(kernels=kernels, bytes=nbytes), **kw)

    def ew(self, name, elements, kind="scale", dtype=None, **kw) -> Kernel:
        return Kernel(name, Elementwise, dict(elements=elements, kind=kind, dtype=dtype or self.act), **kw)

    def copy(self, name, nbytes, layout="contiguous", **kw) -> Kernel:
        return Kernel(name, Copy, dict(bytes=nbytes, layout=layout), **kw)

    def rmsnorm(self, name, rows, width, **kw) -> list[Kernel]:
        """LlamaRMSNorm: eight kernels, the middle ones in fp32."""
        n = rows * width
        # (the two multiplies broadcast a [rows, 1] or a [width] operand: PyTorch's
        # non-vectorized strided path, priced as a strided copy of the bytes each moves)
        return [self.copy(f"{name}_to_fp32", 3 * n, "cast", **kw),  # (reads 2 bytes, writes 4, per element)
                self.ew(f"{name}_pow", n, dtype="fp32", **kw),
                self.ew(f"{name}_mean", n, "mean", dtype="fp32", **kw),
                self.small(f"{name}_eps_rsqrt", 2, 8 * rows, **kw),
                self.copy(f"{name}_scale", 4 * n, "strided", **kw),
                self.copy(f"{name}_to_act", 3 * n, **kw),
                self.copy(f"{name}_weight", self.ab * n, "strided", **kw)]

    def rope(self, name, elements, kind) -> list[Kernel]:
        """Rotary embedding applied to one tensor of ``elements`` elements."""
        ab = self.ab
        if kind == "complex":  # DeepSeek-V2: to fp32, a complex multiply (broadcast), back
            return [self.copy(f"{name}_to_fp32", 3 * elements, "cast"),
                    self.copy(f"{name}_rotate", 4 * elements, "strided"), self.copy(f"{name}_to_act", 3 * elements)]
        if kind == "interleave":  # DeepSeek-V3: strided even and odd halves, four products, a cat
            return [*[self.copy(f"{name}_{p}", elements * ab / 2, "strided") for p in ("c1", "s2", "c2", "s1")],
                    self.copy(f"{name}_sub", 0.75 * elements * ab, "strided"),
                    self.copy(f"{name}_add", 0.75 * elements * ab, "strided"),
                    self.copy(f"{name}_cat", elements * ab, "strided")]
        # q * cos and rotate_half(q) * sin broadcast cos and sin, rotate_half negates and
        # concatenates strided halves, and in a prefill q and k are transposed views ([b, heads,
        # s, d] over [b, s, heads, d]): every op runs PyTorch's strided path, priced as a
        # strided copy of the bytes it moves
        ks = [self.copy(f"{name}_cos", elements * ab, "strided"),
              self.copy(f"{name}_neg", elements * ab / 2, "strided"),
              self.copy(f"{name}_rotate_half", elements * ab, "strided"),
              self.copy(f"{name}_sin", elements * ab, "strided"),
              self.copy(f"{name}_add", 1.5 * elements * ab, "strided")]
        if self.fam.get("rope_cat"):
            ks.append(self.copy(f"{name}_cat", elements * ab, "strided"))
        return ks


def hf_kernels(model, d, ph, sh) -> list[Kernel]:
    """Every PyTorch op of one forward step of ``ph`` in transformers, on one GPU."""
    s = _HF(model, d, ph, sh)
    ks = _ends(s)
    ks += _mla(s) if model.is_mla else _gqa(s)
    if "dense" in model.layer_kinds:
        ks += [*s.rmsnorm("post_attention_norm", s.T, s.h, where="dense"),
               *_mlp(s, "", sh.ffn, "dense"), s.ew("residual_add_mlp", s.T * s.h, "add", where="dense")]
    if "moe" in model.layer_kinds:
        ks += [*s.rmsnorm("post_attention_norm", s.T, s.h, where="moe"), *_moe(s)]
        if sh.shared_ffn:
            ks += [*_mlp(s, "shared_", sh.shared_ffn, "moe"), s.ew("shared_add", s.T * s.h, "add", where="moe")]
        ks.append(s.ew("residual_add_mlp", s.T * s.h, "add", where="moe"))
    return ks


def _keys(s: _HF):
    """Keys SDPA attends to, and 1 where it gets a mask (K and V then repeated to every head)."""
    window = s.model.sliding_window
    if s.cache == "static" and s.ph.name == "decode":  # (the caller passes the cache's length as seq_kv)
        return (np.minimum(s.skv, window) if window else s.skv), 1.0
    if s.cache == "dynamic" and s.ph.name == "decode" and window:
        # (a sliding layer keeps the window; the mask appears once the keys fill it)
        return np.minimum(s.skv, window), np.greater_equal(s.skv, window) * 1.0
    return s.skv, 0.0


def _never(masked) -> bool:
    return isinstance(masked, float) and masked == 0.0


def _always(masked) -> bool:
    return isinstance(masked, float) and masked == 1.0


def _gqa(s: _HF) -> list[Kernel]:
    m, H, KV, hd = s.model, s.sh.heads, s.sh.kv_heads, s.model.head_dim
    T, b = s.T, s.b
    ks = [*s.rmsnorm("input_norm", T, s.h)]
    if s.fam["qkv"] == "fused":
        ks.append(s.gemm("qkv_proj", T, (H + 2 * KV) * hd, s.h))
    else:
        ks += [s.gemm("q_proj", T, H * hd, s.h), s.gemm("k_proj", T, KV * hd, s.h),
               s.gemm("v_proj", T, KV * hd, s.h)]
    if m.qk_norm:
        ks += [*s.rmsnorm("q_norm", T * H, hd), *s.rmsnorm("k_norm", T * KV, hd)]
    ks += [*s.rope("rope_q", T * H * hd, "rotate_half"), *s.rope("rope_k", T * KV * hd, "rotate_half")]
    ks += _cache_update(s, T * KV * hd * s.ab, T * KV * hd * s.ab)
    keys, masked = _keys(s)
    kv_heads = KV if _never(masked) else (H if _always(masked) else KV + (H - KV) * masked)
    if H != KV and not _never(masked):
        ks += [s.copy("repeat_kv", b * H * keys * hd * s.ab, "strided", count=2, mask=masked)]
    ks += _sdpa(s, masked, keys, batch=b, heads=H, kv_heads=kv_heads, head_dim=hd)
    ks += [s.gemm("o_proj", T, s.h, H * m.v_head_dim), s.ew("residual_add", T * s.h, "add")]
    return ks


def _cache_update(s: _HF, k_bytes, v_bytes) -> list[Kernel]:
    """The new tokens' K and V into the cache (bytes of each, for this step's tokens)."""
    if s.cache == "static":
        ks = [s.small("cache_index", s.c["static_update_small_kernels"]),
              s.copy("cache_index_copy_k", k_bytes), s.copy("cache_index_copy_v", v_bytes)]
        window = s.model.sliding_window
        if window and s.ph.name == "decode":
            # a sliding StaticCache longer than its window holds the window; once full, each
            # step rolls K and V by one and copies them back (taken here for every step of a
            # cache longer than the window)
            full = np.greater(s.skv, window) * 1.0
            cache = s.b * np.minimum(s.skv, window) * (k_bytes + v_bytes) / (2 * s.T)
            ks += [s.copy("cache_roll", cache, "roll", count=2, mask=full),
                   s.copy("cache_roll_copy", cache, count=2, mask=full)]
        return ks
    if s.cache == "dynamic":  # torch.cat: the whole cache, old and new, written anew
        per_token_k, per_token_v = k_bytes / s.T, v_bytes / s.T
        keys = _keys(s)[0]
        return [s.copy("cache_cat_k", s.b * keys * per_token_k), s.copy("cache_cat_v", s.b * keys * per_token_v)]
    return []


def _sdpa(s: _HF, masked, keys, **args) -> list[Kernel]:
    ks = []
    if not _never(masked):
        ks.append(s.small("sdpa_mask", s.c["masked_sdpa_small_kernels"], 3 * s.b * s.sq * keys,
                          mask=masked))
    causal = s.ph.name == "prefill"  # (no mask: is_causal for more than one query)
    ks.append(Kernel("attention", Attention, dict(seq_q=s.sq, seq_kv=keys, causal=causal, dtype=s.act,
                                                  variant=s.d.attention, **args),
                     host="hf:attention_new_shape" if s.cache == "dynamic" else ""))
    return ks


def _mla(s: _HF) -> list[Kernel]:
    m, H, T, b = s.model, s.sh.heads, s.T, s.b
    nope, rope, vd, latent = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    ks = [*s.rmsnorm("input_norm", T, s.h)]
    if m.q_lora_rank:
        ql = m.q_lora_rank
        ks += [s.gemm("q_a_proj", T, ql, s.h), *s.rmsnorm("q_a_norm", T, ql), s.gemm("q_b_proj", T, H * m.head_dim, ql)]
    else:
        ks.append(s.gemm("q_proj", T, H * m.head_dim, s.h))
    ks += [s.gemm("kv_a_proj", T, latent + rope, s.h), *s.rmsnorm("kv_a_norm", T, latent)]
    kind = s.fam.get("rope", "rotate_half")
    ks += [*s.rope("rope_q", T * H * rope, kind), *s.rope("rope_k", T * rope, kind)]
    ks += _cache_update(s, T * latent * s.ab, T * rope * s.ab)
    keys, masked = _keys(s)
    rows = b * keys
    ks += [s.copy("q_cat", T * H * m.head_dim * s.ab),
           s.gemm("kv_b_proj", rows, H * (nope + vd), latent),  # every cached token, every step
           s.copy("k_nope", rows * H * nope * s.ab, "strided"), s.copy("k_rope", rows * H * rope * s.ab, "strided")]
    ks += _sdpa(s, masked, keys, batch=b, heads=H, kv_heads=H, head_dim=(m.head_dim + vd) / 2)
    ks += [s.copy("attention_out", T * H * vd * s.ab), s.gemm("o_proj", T, s.h, H * vd),
           s.ew("residual_add", T * s.h, "add")]
    return ks


def _mlp(s: _HF, prefix: str, width: int, where: str) -> list[Kernel]:
    T = s.T
    if s.fam["mlp"] == "fused":
        ks = [s.gemm(f"{prefix}gate_up_proj", T, 2 * width, s.h, where=where)]
    else:
        ks = [s.gemm(f"{prefix}gate_proj", T, width, s.h, where=where),
              s.gemm(f"{prefix}up_proj", T, width, s.h, where=where)]
    kind = "gelu" if "gelu" in s.model.hidden_act else "silu"
    if s.fam["mlp"] == "fused":  # the activation and the product read strided halves of gate_up
        act = [s.copy(f"{prefix}{kind}", T * width * s.ab, "strided", where=where),
               s.copy(f"{prefix}mul", 1.5 * T * width * s.ab, "strided", where=where)]
    else:
        act = [s.ew(f"{prefix}{kind}", T * width, "silu", where=where),
               s.ew(f"{prefix}mul", T * width, "mul", where=where)]
    return ks + [*act, s.gemm(f"{prefix}down_proj", T, s.h, width, where=where)]


def _moe(s: _HF) -> list[Kernel]:
    m, fam, c, T, h = s.model, s.fam, s.c, s.T, s.h
    E, k, f = m.num_experts, m.num_experts_per_tok, s.sh.expert_ffn
    S = T * k  # routed rows
    where = dict(where="moe")
    ks = []
    if fam.get("router_fp32"):  # hidden states and the gate's weight cast to fp32, every forward
        ks += [s.copy("router_hidden_fp32", 3 * T * h, **where), s.copy("router_weight_fp32", 3 * E * h, **where),
               s.gemm("router", T, E, h, dtype="fp32", **where)]
    else:
        ks.append(s.gemm("router", T, E, h, dtype=s.act, **where))
    ks.append(s.small("router_topk", fam.get("router_kernels", 5), 8 * T * E, **where))
    # the expert GEMMs as the MoE op prices them (the experts a batch touches, their row tiles)
    op = MoE(tokens=T, hidden=h, ffn=f, experts=E, top_k=k, dtype=s.d.weights, act_dtype=s.act,
             routing_kernels=1, eager=True)
    grouped = {name: Kernel(f"moe_{name}", cls, _all_args(cls, args), **where)
               for name, cls, args in op.kernel_args() if name in ("experts_gate_up", "experts_down")}
    out_b = 4 if fam.get("combine_fp32") else s.ab
    ks += [s.small("moe_dispatch_index", c["moe_dispatch_small_kernels"], 24 * S, **where),
           Kernel("moe_gather", Gather, dict(rows_in=S, rows_out=S, width=h, dtype=s.act, kind="indexed"), **where),
           # (the masked fills broadcast a [rows, 1] mask, SiLU and the product read strided
           # halves of the gate_up rows, the weighting broadcasts [rows, 1]: the strided path)
           s.copy("moe_masked_fill_in", S * h * s.ab, "strided", **where),
           grouped["experts_gate_up"], s.copy("moe_gate_up_copy", S * 2 * f * s.ab, **where),
           s.copy("moe_masked_fill_gate_up", S * 2 * f * s.ab, "strided", **where),
           s.copy("moe_silu", S * f * s.ab, "strided", **where),
           s.copy("moe_mul", 1.5 * S * f * s.ab, "strided", **where),
           grouped["experts_down"], s.copy("moe_down_copy", S * h * s.ab, **where),
           s.copy("moe_masked_fill_down", S * h * s.ab, "strided", **where),
           s.copy("moe_weights", S * h * (s.ab + out_b) / 2, "strided", **where),  # (bf16 rows in, out_b out)
           s.small("moe_unpermute_index", c["moe_combine_small_kernels"], 16 * S, **where),
           s.copy("moe_unpermute", S * h * out_b, **where),
           s.ew("moe_sum_topk", S * h, "mean", dtype="fp32" if out_b == 4 else s.act, **where)]
    if fam.get("combine_fp32"):
        ks.append(s.copy("moe_to_act", 3 * T * h, **where))
    return ks


def _ends(s: _HF) -> list[Kernel]:
    """Embedding, positions and mask, rotary cos/sin (first); final norm and LM head (last)."""
    c, T, h = s.c, s.T, s.h
    pre = c["prelude_kernels"]
    prelude = pre[s.cache if s.ph.name == "decode" else ("none" if s.cache == "none" else "dynamic")]
    window = []
    if s.model.sliding_window and s.ph.name == "decode":
        # a sliding window's mask, built whenever SDPA gets one (a DynamicCache: once the
        # keys fill the window; then also the whole mask a StaticCache builds)
        extra = c["sliding_prelude_kernels"] + (pre["static"] - pre["dynamic"] if s.cache == "dynamic" else 0)
        window = [s.small("sliding_window_mask", extra, s.b * s.skv, where="first", mask=_keys(s)[1])]
    rope_width = s.model.qk_rope_head_dim if s.model.is_mla else s.model.head_dim
    ks = [Kernel("embed", Gather, dict(rows_in=T, rows_out=T, width=h, dtype=s.act, kind="indexed"), where="first"),
          s.small("positions_mask", prelude, s.b * s.sq * s.skv, where="first"), *window,
          s.small("rotary_cos_sin", c["rotary_kernels"], 40 * s.sq * rope_width, where="first"),
          *s.rmsnorm("final_norm", T, h, where="last"),
          s.gemm("lm_head", s.b, s.sh.vocab, h, dtype=s.act, where="last", mask=s.ph.logits)]
    return ks


def check(model, d) -> None:
    """One sentence for what transformers' single-GPU eager forward does not cover."""
    inventory(model)
    if d.gpus_per_replica > 1 or d.ep > 1:
        raise UserError("--engine hf models transformers' forward on one GPU: use --tp 1 --pp 1 --ep 1 "
                        "(replicas with --dp)")
    if d.weights not in ("bf16", "fp16"):
        raise UserError(f"--engine hf runs bf16 or fp16 weights (got {d.weights}): transformers' quantized "
                        f"linear layers are not modeled")
    if d.kv_cache != d.activations:
        raise UserError("--engine hf keeps the KV cache in the activation dtype")
    if d.hf_cache not in CACHES:
        raise UserError(f"the transformers cache must be one of {', '.join(CACHES)} (got {d.hf_cache!r})")


_CATEGORIES = (  # (name test, category), first match wins
    (lambda n: n.startswith("moe_experts"), "MoE expert GEMMs (grouped)"),
    (lambda n: n.startswith(("moe_", "router")), "MoE routing, gathers and copies"),
    (lambda n: n.endswith("_proj") or n == "lm_head", "GEMMs"),
    (lambda n: "norm" in n, "RMSNorm (8 unfused kernels each)"),
    (lambda n: n.startswith(("rope", "rotary")), "rotary embedding (unfused)"),
    (lambda n: n == "repeat_kv", "repeat_kv: K and V copied out to every query head"),
    (lambda n: n.startswith("cache"), "KV cache update"),
    (lambda n: n in ("k_nope", "k_rope", "q_cat", "attention_out"), "MLA key assembly and copies"),
    (lambda n: n in ("attention", "sdpa_mask"), "attention (SDPA)"),
    (lambda n: n in ("embed", "positions_mask"), "embedding, positions and mask"),
)


def category(name: str) -> str:
    """What one of transformers' ops is, for the breakdown of where the time goes."""
    return next((c for test, c in _CATEGORIES if test(name)), "activations and residual adds")
