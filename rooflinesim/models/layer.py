"""One Llama-style decoder layer as the kernels it runs (dense MLP, GQA attention).

This is the layer the harness measures as ``decoder_layer`` records, written the way
eager PyTorch runs it: RMSNorm, fused QKV GEMM, SDPA, O GEMM, residual add, RMSNorm,
fused gate-up GEMM, SiLU and multiply (two kernels), down GEMM, residual add; in
decode, the new token's K and V are copied into the cache. SDPA's output is already
laid out [tokens, heads x head_dim], so no copy merges the heads (the measured kernel
names show none).
"""

from __future__ import annotations

import numpy as np

from ..attention_kernels import from_record
from ..errors import Unpredictable, UserError
from ..ops.attention import Attention
from ..ops.gemm import Gemm
from ..ops.memory import Copy, Elementwise, Norm
from ..ops.sequence import Sequence


def decoder_layer(mode: str, batch: int, seq: int, hidden: int, heads: int, kv_heads: int,
                  head_dim: int, ffn: int, dtype: str = "bf16", attention_backend=None,
                  attention_variant=None) -> Sequence:
    """``attention_backend`` / ``attention_variant``: the measured backend or the class
    SDPA runs (both None: the GPU's default, resolved when priced)."""
    if mode not in ("prefill", "decode"):
        raise UserError(f"mode must be prefill or decode (got {mode!r})")
    if np.any(np.asarray(heads) % np.asarray(kv_heads)):
        raise UserError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    t = batch * seq if mode == "prefill" else batch
    q_dim, kv_dim = heads * head_dim, kv_heads * head_dim
    act_bytes = 2  # bf16 activations
    if mode == "prefill":
        attn = Attention(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=seq, seq_kv=seq,
                         head_dim=head_dim, causal=True, dtype=dtype, backend=attention_backend,
                         variant=attention_variant)
    else:
        attn = Attention(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=1, seq_kv=seq + 1,
                         head_dim=head_dim, causal=False, dtype=dtype, backend=attention_backend,
                         variant=attention_variant)
    parts = [
        ("input_norm", Norm(tokens=t, hidden=hidden, dtype=dtype), 1),
        ("qkv_proj", Gemm(m=t, n=q_dim + 2 * kv_dim, k=hidden, dtype=dtype), 1),
    ]
    if mode == "decode":  # write the new K and V into the cache
        parts.append(("kv_cache_write", Copy(bytes=t * kv_dim * act_bytes), 2))
    # (SDPA's output is laid out [b, s, h, d] in memory, so merging the heads is a view)
    parts.append(("attention", attn, 1))
    parts += [
        ("o_proj", Gemm(m=t, n=hidden, k=q_dim, dtype=dtype), 1),
        ("residual_add", Elementwise(elements=t * hidden, kind="add", dtype=dtype), 1),
        ("post_attention_norm", Norm(tokens=t, hidden=hidden, dtype=dtype), 1),
        ("gate_up_proj", Gemm(m=t, n=2 * ffn, k=hidden, dtype=dtype), 1),
        ("silu", Elementwise(elements=t * ffn, kind="silu", dtype=dtype), 1),
        ("mul", Elementwise(elements=t * ffn, kind="mul", dtype=dtype), 1),
        ("down_proj", Gemm(m=t, n=hidden, k=ffn, dtype=dtype), 1),
        ("residual_add", Elementwise(elements=t * hidden, kind="add", dtype=dtype), 1),
    ]
    return Sequence(parts=tuple(parts), name=f"decoder_layer {mode}")


def decoder_layer_from_record(rec: dict) -> Sequence:
    need = ("mode", "batch", "seq", "hidden", "heads", "kv_heads", "head_dim", "ffn")
    missing = [k for k in need if k not in rec]
    if missing:
        raise Unpredictable(f"missing field(s) {', '.join(missing)}")
    attn = from_record(rec.get("backend"))  # (an unknown backend: what SDPA picks, the GPU's default)
    return decoder_layer(rec["mode"], rec["batch"], rec["seq"], rec["hidden"], rec["heads"],
                         rec["kv_heads"], rec["head_dim"], rec["ffn"], dtype=rec.get("dtype", "bf16"),
                         attention_backend=attn.get("backend"), attention_variant=attn.get("variant"))
