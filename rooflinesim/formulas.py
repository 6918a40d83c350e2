"""Symbolic answers: the cost models evaluated on sympy symbols, and roofline crossovers.

The same op classes that run on numpy arrays run here on symbols, so a printed formula
is the formula the predictions use.
"""

from __future__ import annotations

import sympy as sp

from .ops.attention import Attention
from .ops.collectives import Collective
from .ops.gemm import FORMATS, Gemm
from .ops.moe import GroupedGemm


def _pos(names: str):
    return sp.symbols(names, positive=True)


def gemm(dtype: str = "bf16") -> dict:
    m, n, k = _pos("m n k")
    op = Gemm(m=m, n=n, k=k, dtype=dtype)
    w = op.work()
    return {
        "FLOPs": w.tensor_flops[op.math_rate],
        "HBM bytes (ideal)": sp.simplify(w.hbm_bytes),
        "L2 bytes (128x128 tiles)": w.l2_bytes,
        "intensity (FLOP/B)": sp.simplify(w.tensor_flops[op.math_rate] / w.hbm_bytes),
        "output tiles (128x128)": op.tiles(),
    }


def attention(causal: bool = True) -> dict:
    b, h, g, sq, skv, d = _pos("b h h_kv s_q s_kv d")
    op = Attention(batch=b, heads=h, kv_heads=g, seq_q=sq, seq_kv=skv, head_dim=d, causal=causal)
    w = op.work()
    return {
        "FLOPs": sp.factor(w.tensor_flops["bf16"]),
        "exp evaluations": sp.factor(w.sfu_ops),
        "HBM bytes (fused)": sp.factor(w.hbm_bytes),
        "HBM bytes (naive)": sp.factor(Attention(batch=b, heads=h, kv_heads=g, seq_q=sq, seq_kv=skv,
                                                 head_dim=d, causal=causal, variant="naive")
                                       .work().hbm_bytes),
    }


def moe() -> dict:
    t, hid, f, e, k = _pos("T H F E k")
    from .ops.moe import expected_busiest, expected_touched

    gu = GroupedGemm(rows=t * k, n=2 * f, k=hid, experts=expected_touched(t, e, k))
    return {
        "experts touched (uniform)": expected_touched(t, e, k),
        # no closed form: an undefined function here, computed numerically (ops/routing.py)
        "busiest expert load (uniform, computed numerically)": expected_busiest(t, e, k),
        "expert FLOPs (gate, up, down)": sp.factor(2 * t * k * 3 * hid * f),
        "gate-up grouped GEMM HBM bytes": gu.work().hbm_bytes,
    }


def allreduce(algorithm: str = "ring") -> dict:
    s, n = _pos("S n")
    alpha, beta = _pos("alpha B_link")
    op = Collective(kind="allreduce", bytes=s, world_size=n, algorithm=algorithm)
    w = op.work()
    return {
        "bytes sent per GPU": sp.simplify(w.link_bytes),
        "steps": w.link_steps,
        "time": w.link_steps * alpha + w.link_bytes / beta,
        "busbw / algbw": sp.simplify(2 * (n - 1) / n),
    }


def crossover_tokens(spec, n: int, k: int, dtype: str = "bf16"):
    """Tokens (GEMM m) at which a Linear layer of [n, k] stops being memory-bound on
    ``spec`` under the ideal roofline: solve FLOPs/peak = bytes/bandwidth for m."""
    m = sp.Symbol("m", positive=True)
    op = Gemm(m=m, n=n, k=k, dtype=dtype)
    w = op.work()
    eq = sp.Eq(w.tensor_flops[op.math_rate] / spec.peak(op.math_rate),
               w.hbm_bytes / spec.memory.hbm_bandwidth_bytes_per_s)
    sols = [s for s in sp.solve(eq, m) if s.is_real and s > 0]
    return float(sols[0]) if sols else None


FAMILIES = {"gemm": gemm, "attention": attention, "moe": moe, "allreduce": allreduce}
__all__ = ["FAMILIES", "FORMATS", "allreduce", "attention", "crossover_tokens", "gemm", "moe"]
