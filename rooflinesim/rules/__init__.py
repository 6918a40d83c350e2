"""Per-family timing rules: which profile parameters apply to an op, and the shape-
dependent losses (tile padding, k fill, wave quantization, misalignment) it suffers.
One module per family (gemm, attention, memory); common holds what they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import UserError
from ..ops.attention import Attention
from ..ops.collectives import Collective
from ..ops.gemm import Gemm
from ..ops.memory import Bookkeeping, Copy, Elementwise, Gather, Norm
from ..ops.moe import GroupedGemm, MoE
from ..ops.sequence import Sequence
from ..pricing import KernelTerms, collective_time
from ..timing import Timing, sum_timings
from .attention import (ATTENTION_REGIMES, KEY_TILE, VARIANT_BACKENDS, attention_regimes, attention_rule,
                        attention_terms, fa2_splits)
from .common import PER_POINT, by_regime, in_sequence, params_by_regime, select_timing
from .gemm import (ALIGN_BYTES, FALLBACK, GEMM_REGIMES, SIMT_DTYPES, SKINNY_ROWS, TILED_SPLITS, TILED_TILES,
                   alignment_bytes, gemm_alignment, gemm_regime_mask, gemm_rule, gemm_terms, grouped_gemm_rule,
                   grouped_gemm_terms, padded, split_k_kernels)
from .memory import memory_rule, memory_terms

__all__ = ["ALIGN_BYTES", "ATTENTION_REGIMES", "FALLBACK", "GEMM_REGIMES", "KEY_TILE", "PER_POINT", "RULES", "Rule",
           "SIMT_DTYPES", "SKINNY_ROWS", "TILED_SPLITS", "TILED_TILES", "VARIANT_BACKENDS", "alignment_bytes",
           "attention_regimes", "attention_rule", "attention_terms", "by_regime", "collective_rule", "fa2_splits",
           "gemm_alignment", "gemm_regime_mask", "gemm_rule", "gemm_terms", "grouped_gemm_rule", "grouped_gemm_terms",
           "in_sequence", "memory_rule", "memory_terms", "moe_rule", "padded", "params_by_regime", "rule_for",
           "select_timing", "sequence_rule", "split_k_kernels", "terms_for"]


def moe_rule(op: MoE, spec, profile) -> Timing:
    parts = [(name, rule_for(k).timing(k, spec, profile)) for name, k in op.kernels()]
    return sum_timings(parts, spec)


def sequence_rule(op: Sequence, spec, profile) -> Timing:
    parts = []
    for name, k, count in op.kernels():
        t = in_sequence(rule_for(k).timing(k, spec, profile))
        if count != 1:
            t = _scaled(t, count)
        parts.append((name, t))
    return sum_timings(parts, spec)


def _scaled(t: Timing, count) -> Timing:
    from dataclasses import replace

    return replace(t, latency_s=t.latency_s * count, flops=t.flops * count,
                   hbm_bytes=t.hbm_bytes * count, compute_s=t.compute_s * count,
                   hbm_s=t.hbm_s * count, l2_s=t.l2_s * count, link_s=t.link_s * count,
                   launch_s=t.launch_s * count)


def collective_rule(op: Collective, spec, profile) -> Timing:
    return collective_time(op, spec, profile)


@dataclass(frozen=True)
class Rule:
    """An op family's rule, registered once per op class: ``timing(op, spec, profile)``
    is the op's whole Timing; ``terms(op, spec, profile)`` the roofline terms that price
    every point of the op at once (KernelTerms), or None where the rule prices the op
    otherwise (points in regimes of different forms, composites, collectives). A rule
    with terms prices through them (pricing.price_one), so the two agree."""

    timing: Callable
    terms: Callable | None = None


RULES = {
    Gemm: Rule(gemm_rule, gemm_terms),
    GroupedGemm: Rule(grouped_gemm_rule, grouped_gemm_terms),
    Attention: Rule(attention_rule, attention_terms),
    Copy: Rule(memory_rule, memory_terms),
    Elementwise: Rule(memory_rule, memory_terms),
    Norm: Rule(memory_rule, memory_terms),
    Gather: Rule(memory_rule, memory_terms),
    Bookkeeping: Rule(memory_rule, memory_terms),
    MoE: Rule(moe_rule),
    Collective: Rule(collective_rule),
    Sequence: Rule(sequence_rule),
}


def terms_for(op, spec, profile) -> KernelTerms | None:
    """The roofline terms of ``op`` where one set prices all its points (a kernel of one
    regime), else None (``predict`` prices it)."""
    rule = RULES.get(type(op))
    return None if rule is None or rule.terms is None else rule.terms(op, spec, profile)


def rule_for(op) -> Rule:
    try:
        return RULES[type(op)]
    except KeyError:
        raise UserError(f"no timing rule for op {type(op).__name__}") from None
