"""Per-family timing rules: which profile parameters apply to an op, and the shape-
dependent losses (tile padding, k fill, wave quantization, misalignment) it suffers."""

from __future__ import annotations

import numpy as np

from .dtypes import bytes_per_element
from .errors import UserError
from .ops.attention import BLOCK_Q, Attention
from .ops.collectives import Collective
from .ops.gemm import FORMATS, TILE_M, TILE_N, Gemm
from .ops.memory import Bookkeeping, Copy, Elementwise, Gather, Norm
from .ops.moe import GroupedGemm, MoE
from .ops.sequence import Sequence
from .timing import Timing, collective_time, kernel_time, sum_timings

ALIGN_BYTES = 16
VARIANT_BACKENDS = {"fa3": ("sdpa-cudnn",), "fa2": ("sdpa-flash",)}
# formats with no fitted parameters of their own take those of the nearest measured one:
# w8a8 int8 runs like fp8 (same width, same tensor-core rate on Hopper), w4a16 dequantizes
# to bf16 math, fp64 runs like fp32
FALLBACK = {"int8": ("fp8", "bf16"), "int4": ("bf16",), "fp16": ("bf16",), "fp8": ("bf16",),
            "fp64": ("fp32",), "tf32": ("fp32",)}  # TMA and vectorized loads need 16-byte aligned row strides


def _waves(tiles, sm_count):
    return np.ceil(np.asarray(tiles, dtype=float) / sm_count)


def padded(x, tile):
    """A dimension rounded up to the tile the library would pick: small sizes get the
    next power-of-two tile (at least 8), larger ones whole tiles of ``tile``."""
    x = np.asarray(x, dtype=float)
    small = np.maximum(8.0, 2.0 ** np.ceil(np.log2(np.maximum(x, 1.0))))
    return np.where(x < tile, np.minimum(small, tile), np.ceil(x / tile) * tile)


def _wave_efficiency(tiles, sm_count):
    """Fraction of SM slots doing work when ``tiles`` blocks run in whole waves."""
    tiles = np.asarray(tiles, dtype=float)
    return tiles / (_waves(tiles, sm_count) * sm_count)


def alignment_bytes(elements, element_bytes):
    """Largest power of two (at most 16) dividing a row stride of ``elements``."""
    half_bytes = (np.asarray(elements) * int(round(element_bytes * 2))).astype(np.int64)
    lowest = half_bytes & -half_bytes  # the lowest set bit
    return np.minimum(lowest / 2.0, float(ALIGN_BYTES))


def gemm_alignment(op):
    """Byte alignment of the narrowest row stride of a row-major GEMM: A and W have k
    elements per row, C has n. TMA (Hopper's fast path) needs 16 bytes."""
    act, wt, out, _ = FORMATS[op.dtype]
    a = np.minimum(alignment_bytes(op.k, bytes_per_element(act)),
                   alignment_bytes(op.k, bytes_per_element(wt)))
    return np.minimum(a, alignment_bytes(op.n, bytes_per_element(out)))


def _alignment_factors(op, p):
    """(compute factor, memory factor) by alignment class: 16 B, 4-8 B, 2 B or less."""
    a = gemm_alignment(op)
    c = np.where(a >= 16, 1.0, np.where(a >= 4, p.align8_compute, p.align2_compute))
    m = np.where(a >= 16, 1.0, np.where(a >= 4, p.align8_memory, p.align2_memory))
    m = np.where((a < 16) & (np.asarray(op.m) <= 8), p.skinny_misaligned_memory, m)
    return c, m


def split_k_kernels(op, p):
    """1, or 2 where the library splits k (a smooth step in log k per 64x64 tile)."""
    if not p.split_k_ratio:
        return 1.0
    tiles = op.batch * np.ceil(np.asarray(op.m) / 64.0) * np.ceil(np.asarray(op.n) / 64.0)
    x = (np.log(np.asarray(op.k) / tiles) - np.log(p.split_k_ratio)) / 0.25
    x = np.minimum(x, (np.log(np.asarray(op.k, dtype=float)) - np.log(max(p.split_k_min, 1.0))) / 0.1)
    return 1.0 + 1.0 / (1.0 + np.exp(-np.clip(x, -50, 50)))


def _require(spec, rate: str, what: str):
    if not spec.supports(rate):
        raise UserError(f"{spec.name} has no {rate} tensor-core rate, so it cannot run {what}")


def gemm_rule(op: Gemm, spec, profile) -> Timing:
    _require(spec, op.math_rate, f"a {op.dtype} GEMM")
    p = profile.params("gemm", op.dtype, *FALLBACK.get(op.dtype, ()))
    scale, losses = 1.0, {"waves_128x128": _waves(op.tiles(TILE_M, TILE_N), spec.chip.sm_count)}
    if p.tile_m > 1 or p.tile_n > 1:
        pad = padded(op.m, p.tile_m) * padded(op.n, p.tile_n) / (np.asarray(op.m) * np.asarray(op.n))
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
    fc, fm = _alignment_factors(op, p)
    if (np.asarray(fc) != 1.0).any() or (np.asarray(fm) != 1.0).any():
        losses["misalignment"] = 1 / fc
    kernels = split_k_kernels(op, p)
    if p.split_k_ratio:
        losses["split_k_kernels"] = kernels
    extra = 0.0
    if p.k_element_s:
        # the k loop of one output tile runs in series; a split k shares it out
        tiles = op.batch * np.ceil(np.asarray(op.m) / 64.0) * np.ceil(np.asarray(op.n) / 64.0)
        splits = np.clip(spec.chip.sm_count / tiles, 1.0, 16.0) ** (kernels - 1.0)
        extra = np.asarray(op.k) * p.k_element_s / fc / splits
        losses["k_serial_s"] = extra
    return kernel_time(op.work(), spec, p, compute_scale=scale / fc, memory_scale=1 / fm,
                       losses=losses, kernels=kernels, extra_s=extra)


def grouped_gemm_rule(op: GroupedGemm, spec, profile) -> Timing:
    rate = FORMATS[op.dtype][3]
    _require(spec, rate, f"a {op.dtype} grouped GEMM")
    p = profile.params("grouped_gemm", op.dtype, *FALLBACK.get(op.dtype, ()), "bf16")
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
    # an unmeasured backend (or none named) takes the measured backend of its variant
    p = profile.params("attention", op.backend or "", op.variant, *VARIANT_BACKENDS.get(op.variant, ()))
    scale, losses, extra, memory_scale = 1.0, {}, 0.0, 1.0
    sms = spec.chip.sm_count
    rows = op.batch * op.heads * op.seq_q
    keys_per_query = op.pairs() / rows
    fill_keys = p.seq_overhead
    if p.causal_overhead:
        # diagonal blocks of causal attention are computed whole, then masked
        fill_keys = fill_keys + p.causal_overhead * np.asarray(op.causal, dtype=float)
    if np.any(fill_keys):
        fill = (keys_per_query + fill_keys) / keys_per_query
        scale = scale * fill
        losses["kv_fill"] = fill
    # the query heads that share a KV head are packed into one block's rows (GQA), so
    # a decode step fills group * seq_q rows of a tile_m-row block
    # (FlashAttention's decode path does this for single-token queries only)
    one = np.asarray(op.seq_q) == 1
    group_rows = np.where(one, np.asarray(op.heads / op.kvh), 1.0) * np.asarray(op.seq_q)
    blocks = op.batch * np.where(one, op.kvh, op.heads) * np.ceil(group_rows / BLOCK_Q)
    # short queries split the keys over more blocks when the GPU would be under-filled
    # (flash-decoding): the splits then share out the walk over the keys
    short = np.asarray(op.seq_q) <= p.split_kv_max_query
    splits = np.where(short & (blocks < 0.8 * sms), np.clip(sms / blocks, 1.0, 128.0), 1.0)
    if p.tile_m > 1:
        pad = padded(group_rows, p.tile_m) / group_rows
        scale = scale * pad
        losses["query_padding"] = pad
    if p.wave_quantization:
        eff = _wave_efficiency(blocks * splits, sms)
        scale = scale / eff
        losses["wave_quantization"] = 1 / eff
    if p.row_element_s:
        extra = keys_per_query * np.asarray(op.head_dim) * p.row_element_s / splits
        losses["kv_serial_s"] = extra
    if p.unsplit_memory_efficiency < 1:
        memory_scale = np.where(short & (splits == 1.0), 1 / p.unsplit_memory_efficiency, 1.0)
    return kernel_time(op.work(), spec, p, compute_scale=scale, memory_scale=memory_scale,
                       overlap_aux=(op.variant == "fa3") if p.softmax_overlap is None else p.softmax_overlap,
                       losses=losses, extra_s=extra)


def memory_rule(op, spec, profile) -> Timing:
    key = {Copy: "copy", Gather: "gather", Bookkeeping: "bookkeeping"}.get(type(op)) or op.kind
    p = profile.params("memory", key)
    memory_scale, extra, losses = 1.0, 0.0, {}
    if isinstance(op, Copy) and (p.align2_memory < 1 or p.align8_memory < 1):
        a = alignment_bytes(op.bytes, 1)
        memory_scale = 1 / np.where(a >= 16, 1.0, np.where(a >= 4, p.align8_memory, p.align2_memory))
    if isinstance(op, Norm) and p.row_element_s:
        # one thread block per row: with few rows, each block's own latency-bound pass
        # over its row sets the time, in waves of rows_per_sm rows per SM
        waves = np.ceil(np.asarray(op.tokens) / (spec.chip.sm_count * p.rows_per_sm))
        extra = waves * np.asarray(op.hidden) * p.row_element_s
        losses["row_waves"] = waves
    if isinstance(op, Norm) and p.row_bandwidth_elements:
        memory_scale = 1 + np.asarray(op.hidden) / p.row_bandwidth_elements
    return kernel_time(op.work(), spec, p, memory_scale=memory_scale, extra_s=extra, losses=losses)


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
    Bookkeeping: memory_rule,
    Collective: collective_rule,
    Sequence: sequence_rule,
}


def rule_for(op):
    try:
        return _RULES[type(op)]
    except KeyError:
        raise UserError(f"no timing rule for op {type(op).__name__}") from None
