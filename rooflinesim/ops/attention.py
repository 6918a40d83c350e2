"""Scaled dot-product attention forward: fused (FlashAttention-3 / -2 style), naive, and
decode against a (paged) KV cache.

Shapes: Q [batch, heads, seq_q, head_dim], K and V [batch, kv_heads, seq_kv, head_dim]
(GQA/MQA when kv_heads < heads). Causal masking is bottom-right aligned, as in
inference: query i of seq_q sees keys 0 .. seq_kv - seq_q + i, so for seq_q <= seq_kv
the number of (query, key) pairs is seq_q*(seq_kv - seq_q) + seq_q*(seq_q + 1)/2.

Variants share the same FLOPs and differ in traffic and overlap:
  fa3   fused; softmax overlapped with the matrix products (ping-pong warpgroups);
  fa2   fused; softmax in series with the matrix products;
  naive the score matrix S = QK^T and P = softmax(S) are written to and read back from
        memory in the input dtype: three kernels (QK^T, softmax, PV).
A variant of None is the GPU's default class, and which kernel a class runs on a GPU is
decided when it is priced (``rooflinesim.attention_kernels``): the counts here are the
same for every fused kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from ..dtypes import bytes_per_element
from ..symbolic import ceil, where
from ..work import Work
from .base import Op, check_choice, check_positive

VARIANTS = ("fa3", "fa2", "naive")
DTYPES = ("bf16", "fp16", "fp8")

# Backends the harness measures, and the variant each implements (a variant's name
# given as a backend is that variant).
BACKEND_VARIANT = {
    "sdpa-cudnn": "fa3",  # cuDNN's fused kernel is FlashAttention-3-class on Hopper
    "sdpa-flash": "fa2",  # PyTorch's flash backend is FlashAttention-2
    "sdpa-efficient": "fa2",  # memory-efficient (xformers-style) kernel, FA2-like
    "flashmla": "fa3",  # FlashMLA, MLA's latent decode (warp-specialized, softmax overlapped)
    "fa3": "fa3",
    "fa2": "fa2",
    "naive": "naive",
}

# Nominal query-block rows of one thread block (FA2/FA3 use 128 for head_dim <= 128).
BLOCK_Q = 128
VECTOR_FLOPS_PER_SCORE = 4  # scale, running max, subtract, running sum


def attended_pairs(seq_q, seq_kv, causal):
    """(query, key) pairs that are computed. Exact for causal seq_q <= seq_kv."""
    tri = seq_q * (seq_kv - seq_q) + seq_q * (seq_q + 1) / 2
    if isinstance(causal, (bool, int)):
        return tri if causal else seq_q * seq_kv
    return where(causal, tri, seq_q * seq_kv)  # an array of flags, or a sympy condition


@dataclass(frozen=True)
class Attention(Op):
    batch: Any
    heads: Any
    seq_q: Any
    seq_kv: Any
    head_dim: Any = 128
    kv_heads: Any = None  # None = heads (MHA)
    causal: Any = True
    dtype: str = "bf16"
    kv_dtype: str | None = None  # KV-cache dtype (defaults to dtype)
    variant: str | None = None  # None: the GPU's default class (resolved when priced)
    backend: str | None = None  # a measured implementation, e.g. "sdpa-cudnn"
    page_size: Any = None  # paged KV: each sequence's KV rounded up to whole pages
    name: str = ""
    # MLA's absorbed decode (one latent KV head): where the GPU's engines run a kernel of
    # their own for it (attention_kernels: FlashMLA on Hopper), that kernel prices it
    latent: bool = False

    family: ClassVar[str] = "attention"

    def __post_init__(self):
        check_positive(batch=self.batch, heads=self.heads, seq_q=self.seq_q,
                       seq_kv=self.seq_kv, head_dim=self.head_dim, kv_heads=self.kv_heads,
                       page_size=self.page_size)
        check_choice("attention dtype", self.dtype, DTYPES)
        if self.kv_dtype is not None:
            check_choice("KV-cache dtype", self.kv_dtype, DTYPES)
        if self.backend is not None:
            check_choice("attention backend", self.backend, BACKEND_VARIANT)
            object.__setattr__(self, "variant", BACKEND_VARIANT[self.backend])
            if self.backend in VARIANTS:
                object.__setattr__(self, "backend", None)
        if self.variant is not None:
            check_choice("attention variant", self.variant, VARIANTS)

    @property
    def kvh(self):
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def math_rate(self) -> str:
        return "fp8" if self.dtype == "fp8" else self.dtype

    def pairs(self):
        return self._pairs

    @cached_property
    def _pairs(self):
        # (counted once per op: the timing rule and the work record both need them)
        return self.batch * self.heads * attended_pairs(self.seq_q, self.seq_kv, self.causal)

    def flops(self):
        return self._flops(self.pairs())

    def _flops(self, pairs):
        # QK^T and PV: 2 FLOPs per multiply-add, head_dim each, per attended pair
        return 4 * self.head_dim * pairs

    def stored_kv_len(self):
        if self.page_size is None:
            return self.seq_kv
        return ceil(self.seq_kv / self.page_size) * self.page_size

    def bytes_q(self):
        return self.batch * self.heads * self.seq_q * self.head_dim * bytes_per_element(self.dtype)

    def bytes_o(self):
        # fp8 attention writes a bf16 output
        out = "bf16" if self.dtype == "fp8" else self.dtype
        return self.batch * self.heads * self.seq_q * self.head_dim * bytes_per_element(out)

    def bytes_kv(self):
        kv = self.kv_dtype or self.dtype
        return 2 * self.batch * self.kvh * self.stored_kv_len() * self.head_dim * bytes_per_element(kv)

    def bytes_scores(self):
        """One pass over the materialized score matrix (naive attention)."""
        return self.batch * self.heads * self.seq_q * self.seq_kv * bytes_per_element(self.dtype)

    def q_blocks(self, block_q=BLOCK_Q):
        """Thread blocks of a fused kernel: one per (batch, head, query block)."""
        return self.batch * self.heads * ceil(self.seq_q / block_q)

    def work(self) -> Work:
        pairs = self.pairs()
        q, kv, o = self.bytes_q(), self.bytes_kv(), self.bytes_o()
        fused_hbm = q + kv + o
        if self.variant == "naive":
            # write S, read S, write P, read P
            hbm = fused_hbm + 4 * self.bytes_scores()
            kernels = 3
        else:
            hbm = fused_hbm
            kernels = 1
        # each query block streams its head's K and V from L2
        kv_per_head = kv / (self.batch * self.kvh)
        l2 = q + o + self.q_blocks() * kv_per_head
        return Work(
            tensor_flops={self.math_rate: self._flops(pairs)},
            vector_flops=VECTOR_FLOPS_PER_SCORE * pairs,
            sfu_ops=pairs,  # one exp per score
            hbm_bytes=hbm,
            l2_bytes=l2,
            kernels=kernels,
        )

    def intensity(self):
        w = self.work()
        return w.tensor_flops[self.math_rate] / w.hbm_bytes


def decode(batch, heads, kv_heads, context, head_dim=128, dtype="bf16", kv_dtype=None,
           query_tokens=1, page_size=None, variant=None) -> Attention:
    """Decode: ``query_tokens`` new tokens per sequence against a KV cache of ``context``."""
    return Attention(batch=batch, heads=heads, kv_heads=kv_heads, seq_q=query_tokens,
                     seq_kv=context, head_dim=head_dim, causal=True, dtype=dtype,
                     kv_dtype=kv_dtype, page_size=page_size, variant=variant)
