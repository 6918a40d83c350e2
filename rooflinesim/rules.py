"""Per-family timing rules: which profile parameters apply to an op, and the shape-
dependent losses (tile padding, k fill, wave quantization, misalignment) it suffers."""

from __future__ import annotations

import numpy as np

from .dtypes import bytes_per_element
from .errors import UserError
from .ops.attention import BLOCK_Q, Attention
from .ops.collectives import Collective
from .ops.gemm import FORMATS, TILE_M, TILE_N, Gemm
from .ops.memory import Copy, Elementwise, Gather, Norm
from .ops.moe import GroupedGemm, MoE
from .ops.sequence import Sequence
from .timing import Timing, collective_time, kernel_time, sum_timings

ALIGN_BYTES = 16  # TMA and vectorized loads need 16-byte aligned row strides


def _waves(tiles, sm_count):
    return np.ceil(np.asarray(tiles, dtype=float) / sm_count)


def _wave_efficiency(tiles, sm_count):
    """Fraction of SM slots doing work when ``tiles`` blocks run in whole waves."""
    tiles = np.asarray(tiles, dtype=float)
    return tiles / (_waves(tiles, sm_count) * sm_count)


def aligned(op: Gemm):
    """A row-major operand with k (or an output with n) elements per row is TMA-friendly
    when its row stride is a multiple of 16 bytes."""
    act, wt, out, _ = FORMATS[op.dtype]
    k_ok = np.mod(np.asarray(op.k) * bytes_per_element(act), ALIGN_BYTES) == 0
    kw_ok = np.mod(np.asarray(op.k) * bytes_per_element(wt), ALIGN_BYTES) == 0
    n_ok = np.mod(np.asarray(op.n) * bytes_per_element(out), ALIGN_BYTES) == 0
    return k_ok & kw_ok & n_ok


def _require(spec, rate: str, what: str):
    if not spec.supports(rate):
        raise UserError(f"{spec.name} has no {rate} tensor-core rate, so it cannot run {what}")


def gemm_rule(op: Gemm, spec, profile) -> Timing:
    _require(spec, op.math_rate, f"a {op.dtype} GEMM")
    p = profile.params("gemm", op.dtype)
    scale, losses = 1.0, {"waves_128x128": _waves(op.tiles(TILE_M, TILE_N), spec.chip.sm_count)}
    if p.tile_m > 1 or p.tile_n > 1:
        pad = op.padded_flops(p.tile_m, p.tile_n) / op.flops()
        scale = scale * pad
        losses["tile_padding"] = pad
    if p.k_overhead:
        fill = (op.k + p.k_overhead) / op.k
        scale = scale * fill
        losses["k_fill"] = fill
    if p.wave_quantization:
        eff = _wave_efficiency(op.tiles(p.tile_m, p.tile_n), spec.chip.sm_count)
        scale = scale / eff
        losses["wave_quantization"] = 1 / eff
    mis = 1.0
    if p.misaligned_efficiency < 1:
        mis = np.where(aligned(op), 1.0, 1 / p.misaligned_efficiency)
        losses["misalignment"] = mis
    return kernel_time(op.work(), spec, p, compute_scale=scale * mis, memory_scale=mis,
                       losses=losses)


def grouped_gemm_rule(op: GroupedGemm, spec, profile) -> Timing:
    rate = FORMATS[op.dtype][3]
    _require(spec, rate, f"a {op.dtype} grouped GEMM")
    p = profile.params("grouped_gemm", op.dtype)
    scale, losses = 1.0, {}
    if p.tile_m > 1:
        pad = op.tiles_m() * TILE_M / op.rows
        scale = scale * pad
        losses["tile_padding"] = pad
    if p.k_overhead:
        scale = scale * (op.k + p.k_overhead) / op.k
    return kernel_time(op.work(), spec, p, compute_scale=scale, losses=losses)


def attention_rule(op: Attention, spec, profile) -> Timing:
    _require(spec, op.math_rate, f"{op.dtype} attention")
    p = profile.params("attention", op.backend or "", op.variant)
    scale, losses = 1.0, {}
    rows = op.batch * op.heads * op.seq_q
    keys_per_query = op.pairs() / rows
    if p.seq_overhead:
        fill = (keys_per_query + p.seq_overhead) / keys_per_query
        scale = scale * fill
        losses["kv_fill"] = fill
    if p.tile_m > 1:
        pad = np.ceil(np.asarray(op.seq_q, dtype=float) / p.tile_m) * p.tile_m / op.seq_q
        scale = scale * pad
        losses["query_padding"] = pad
    if p.wave_quantization:
        eff = _wave_efficiency(op.q_blocks(p.tile_m if p.tile_m > 1 else BLOCK_Q), spec.chip.sm_count)
        scale = scale / eff
        losses["wave_quantization"] = 1 / eff
    return kernel_time(op.work(), spec, p, compute_scale=scale,
                       overlap_aux=(op.variant == "fa3"), losses=losses)


def memory_rule(op, spec, profile) -> Timing:
    key = {Copy: "copy", Gather: "gather"}.get(type(op)) or op.kind
    p = profile.params("memory", key)
    return kernel_time(op.work(), spec, p)


def moe_rule(op: MoE, spec, profile) -> Timing:
    parts = [(name, rule_for(k)(k, spec, profile)) for name, k in op.kernels()]
    return sum_timings(parts, spec)


def sequence_rule(op: Sequence, spec, profile) -> Timing:
    parts = []
    for name, k, count in op.kernels():
        t = rule_for(k)(k, spec, profile)
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


_RULES = {
    Gemm: gemm_rule,
    GroupedGemm: grouped_gemm_rule,
    Attention: attention_rule,
    MoE: moe_rule,
    Copy: memory_rule,
    Elementwise: memory_rule,
    Norm: memory_rule,
    Gather: memory_rule,
    Collective: collective_rule,
    Sequence: sequence_rule,
}


def rule_for(op):
    try:
        return _RULES[type(op)]
    except KeyError:
        raise UserError(f"no timing rule for op {type(op).__name__}") from None
