"""One Llama-style decoder layer (dense MLP, GQA attention) as the harness measures it:
``decoder_layer`` records, priced from the kernels ``models.kernels`` builds for the layer
as eager PyTorch runs it (``eager_layer_kernels``: the GEMMs and attention of the engine's
layer that ``predict model`` runs, with PyTorch's unfused norms, adds and activation).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..attention_kernels import from_record
from ..errors import Unpredictable, UserError
from ..ops.sequence import Sequence
from .kernels import Phase, eager_layer_kernels


def decoder_layer(mode: str, batch: int, seq: int, hidden: int, heads: int, kv_heads: int,
                  head_dim: int, ffn: int, dtype: str = "bf16", attention_backend=None,
                  attention_variant=None) -> Sequence:
    """The layer at ``batch`` sequences of ``seq`` tokens (prefill: the prompt; decode: one
    new token over a cache of ``seq``). The sizes may be arrays (records priced at once).
    ``attention_backend`` / ``attention_variant``: the measured backend or the class SDPA
    runs (both None: the GPU's default, resolved when priced)."""
    if mode not in ("prefill", "decode"):
        raise UserError(f"mode must be prefill or decode (got {mode!r})")
    if np.any(np.asarray(heads) % np.asarray(kv_heads)):
        raise UserError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    # the one layer's sizes, in the names the model builder reads (no sharding: one GPU)
    model = SimpleNamespace(hidden_size=hidden, head_dim=head_dim, v_head_dim=head_dim)
    sh = SimpleNamespace(heads=heads, kv_heads=kv_heads, ffn=ffn)
    d = SimpleNamespace(tp=1, sequence_parallel=False, weights=dtype, activations=dtype, group_size=128)
    if mode == "prefill":
        ph = Phase("prefill", batch=batch, seq_q=seq, seq_kv=seq, sequences=batch)
    else:
        ph = Phase("decode", batch=batch, seq_q=1, seq_kv=seq + 1, sequences=batch)
    kernels = eager_layer_kernels(model, d, ph, sh, {"backend": attention_backend, "variant": attention_variant})
    return Sequence(parts=tuple((k.name, k.op, k.count) for k in kernels), name=f"decoder_layer {mode}")


def decoder_layer_from_record(rec: dict) -> Sequence:
    need = ("mode", "batch", "seq", "hidden", "heads", "kv_heads", "head_dim", "ffn")
    missing = [k for k in need if k not in rec]
    if missing:
        raise Unpredictable(f"missing field(s) {', '.join(missing)}")
    attn = from_record(rec.get("backend"))  # (an unknown backend: what SDPA picks, the GPU's default)
    return decoder_layer(rec["mode"], rec["batch"], rec["seq"], rec["hidden"], rec["heads"],
                         rec["kv_heads"], rec["head_dim"], rec["ffn"], dtype=rec.get("dtype", "bf16"),
                         attention_backend=attn.get("backend"), attention_variant=attn.get("variant"))
