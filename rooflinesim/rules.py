"""Per-family timing rules: which profile parameters apply to an op, and the shape-
dependent losses (tile padding, k fill, wave quantization, misalignment) it suffers."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from .dtypes import bytes_per_element
from .errors import UserError
from .ops.attention import Attention
from .ops.collectives import Collective
from .ops.gemm import FORMATS, TILE_M, TILE_N, Gemm
from .ops.memory import Bookkeeping, Copy, Elementwise, Gather, Norm
from .ops.moe import GroupedGemm, MoE
from .ops.sequence import Sequence
from .pricing import KernelTerms, PricedTerms, collective_time
from .timing import Timing, corner, logistic, sum_timings, with_fields

ALIGN_BYTES = 16
KEY_TILE = 128  # keys an attention block loads at a time
ROW_DOUBLE_WIDTH = 0.25  # width in log bytes of the norms' step to a doubled row pass
# (profile key suffix, stride bytes from, to); the first regime whose parameters a profile
# has takes a point. The "_tiled" regimes hold GEMMs above SKINNY_ROWS rows, priced as the
# fastest of a few tile configurations (_tiled_gemm_time): "simt_tiled" the fp32 ones (no
# TF32: CUDA-core kernels) whatever their strides, the others those of their stride class
GEMM_REGIMES = (("simt_tiled", 0, math.inf), ("align2_tiled", 0, 4), ("align2", 0, 4), ("align8_tiled", 4, 16),
                ("align8", 4, 16))
SIMT_DTYPES = ("fp32",)  # GEMM formats whose math runs on the CUDA cores
SKINNY_ROWS = 8  # GEMMs of at most this many rows run skinny (GEMV-style) kernels
# the output tiles of the kernels cuBLAS runs for such GEMMs (kernel names of H200
# measurements): CUTLASS sm75 tensor-op kernels loading one element at a time for
# element-aligned strides, sm80 tensor-op and WMMA kernels loading two for 4-8-byte ones,
# sm80 SIMT kernels for fp32
TILED_TILES = {"simt_tiled": ((32, 32), (64, 64), (128, 64), (128, 128), (256, 64)),
               "align2_tiled": ((64, 64), (128, 128), (256, 128)),
               "align8_tiled": ((32, 32), (64, 64), (128, 128), (256, 128))}
TILED_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # k splits (2 or more: a reduction kernel follows)
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
    large = np.ceil(x / tile) * tile
    if x.ndim and np.count_nonzero(x >= tile) == x.size:  # (no small sizes: often so for widths)
        return large
    small = np.maximum(8.0, 2.0 ** np.ceil(np.log2(np.maximum(x, 1.0))))
    return np.where(x < tile, np.minimum(small, tile), large)


def _wave_efficiency(tiles, sm_count):
    """Fraction of SM slots doing work when ``tiles`` blocks run in whole waves."""
    tiles = np.asarray(tiles, dtype=float)
    return tiles / (_waves(tiles, sm_count) * sm_count)


def alignment_bytes(elements, element_bytes):
    """Largest power of two (at most 16) dividing a row stride of ``elements``."""
    half_bytes = (np.asarray(elements) * int(round(element_bytes * 2))).astype(np.int64)
    lowest = half_bytes & -half_bytes  # the lowest set bit
    return np.minimum(lowest / 2.0, float(ALIGN_BYTES))


def _k_alignment(op):
    act, wt, _, _ = FORMATS[op.dtype]
    a, w = bytes_per_element(act), bytes_per_element(wt)
    if a == w:  # one element size: one stride
        return alignment_bytes(op.k, a)
    return np.minimum(alignment_bytes(op.k, a), alignment_bytes(op.k, w))


def _n_alignment(op):
    return alignment_bytes(op.n, bytes_per_element(FORMATS[op.dtype][2]))


def gemm_alignment(op):
    """Byte alignment of the narrowest row stride of a row-major GEMM: A and W have k
    elements per row, C has n. TMA (Hopper's fast path) needs 16 bytes."""
    return np.minimum(_k_alignment(op), _n_alignment(op))


def _aligned(a) -> bool:
    """Whether every stride of alignment ``a`` (bytes) takes the 16-byte (TMA) path."""
    a = np.asarray(a)
    return a.size == 0 or a.item(a.argmin()) >= ALIGN_BYTES  # (the least, by its index)


def _is_one(x) -> bool:
    """Whether a factor is 1 at every point."""
    return x == 1.0 if type(x) is float else not np.count_nonzero(np.asarray(x) != 1.0)


def _class_factor(a, full, align8, align2):
    return np.where(a >= 16, full, np.where(a >= 4, align8, align2))


def _alignment_factors(op, p, a=None):
    """(compute factor, HBM time scale) by alignment class: 16 B, 4-8 B, 2 B or less.
    The kernel (and its compute rate) follows the narrowest stride; the bandwidth loss
    falls on the operands whose rows are misaligned: A and W by k, C by n. ``a``: the
    op's gemm_alignment, where the caller has it."""
    a = gemm_alignment(op) if a is None else a
    if _aligned(a):
        return 1.0, 1.0
    c = _class_factor(a, 1.0, p.align8_compute, p.align2_compute)
    skinny = np.asarray(op.m) <= SKINNY_ROWS

    def memory(align):
        f = _class_factor(align, 1.0, p.align8_memory, p.align2_memory)
        f = np.where(skinny & (align < 16), p.skinny_misaligned_memory, f)
        if p.gemv_misaligned_memory < 1:  # a single row runs cuBLAS's GEMV kernels
            f = np.where((np.asarray(op.m) == 1) & (align < 16), p.gemv_misaligned_memory, f)
        return f

    ab, cb = op.bytes_a() + op.bytes_w(), op.bytes_c()
    scale = (ab / memory(_k_alignment(op)) + cb / memory(_n_alignment(op))) / (ab + cb)
    return c, scale


def _tiles64(op):
    """Output tiles of a 64x64 tiling: the unit of the split-K choice and the k walk."""
    return op.batch * np.ceil(np.asarray(op.m) / 64.0) * np.ceil(np.asarray(op.n) / 64.0)


def split_k_kernels(op, p, a=None, tiles=None):
    """1, or 2 where the library splits k (a smooth step in log k per 64x64 tile).
    Kernels for element-aligned strides split at their own ratio, however short k is.
    ``a``, ``tiles``: the op's gemm_alignment and _tiles64, where the caller has them."""
    if not p.split_k_ratio:
        return 1.0
    tiles = _tiles64(op) if tiles is None else tiles
    per_tile = np.log(np.asarray(op.k) / tiles)
    x = (per_tile - np.log(p.split_k_ratio)) / 0.25
    x = np.minimum(x, (np.log(np.asarray(op.k, dtype=float)) - np.log(max(p.split_k_min, 1.0))) / 0.1)
    if p.align2_split_k_ratio:  # (skinny ones run GEMV-style kernels, which split as usual)
        odd = ((gemm_alignment(op) if a is None else a) < 4) & (np.asarray(op.m) > SKINNY_ROWS)
        x = np.where(odd, (per_tile - np.log(p.align2_split_k_ratio)) / 0.25, x)
    return 1.0 + logistic(x)


def _require(spec, rate: str, what: str):
    if not spec.supports(rate):
        raise UserError(f"{spec.name} has no {rate} tensor-core rate, so it cannot run {what}")


def gemm_regime_mask(op: Gemm, name: str, a=None):
    """Where ``op``'s narrowest row stride falls in the alignment regime ``name`` (``a``:
    its gemm_alignment, where the caller has it)."""
    lo, hi = next((lo, hi) for n, lo, hi in GEMM_REGIMES if n == name)
    a = gemm_alignment(op) if a is None else a
    mask = (a >= lo) & (a < hi)
    if name == "simt_tiled":
        mask = mask & (op.dtype in SIMT_DTYPES)
    if name.endswith("_tiled"):
        mask = mask & (np.asarray(op.m) > SKINNY_ROWS)
    return mask


def _gemm_choice(op: Gemm, spec, profile):
    """(parameters, alignment, regimes): the op's own parameters and gemm_alignment, and
    (mask, time function) for each misaligned or SIMT regime its points fall in (none in
    the common case)."""
    _require(spec, op.math_rate, f"a {op.dtype} GEMM")
    keys = (op.dtype, *FALLBACK.get(op.dtype, ()))
    p = profile.params("gemm", *keys)
    # misaligned strides run other kernels (seen in the kernel names: CUTLASS sm80
    # tensor-op and WMMA kernels for 4-8 bytes; sm75 tensor-op and GEMV kernels for 2
    # bytes or less): their own parameters where fitted, else the aligned ones with
    # the alignment factors
    a = gemm_alignment(op)
    regimes, taken = [], None
    for name, _, _ in GEMM_REGIMES if op.dtype in SIMT_DTYPES or not _aligned(a) else ():  # (else: the common case)
        q = profile.find("gemm", *(f"{k}:{name}" for k in keys))
        if q is None:
            continue
        mask = gemm_regime_mask(op, name, a)
        mask = mask if taken is None else mask & ~taken
        if name.endswith("_tiled"):
            regimes.append((mask, lambda o, q=q, name=name: _tiled_gemm_time(o, spec, q, name)))
        else:
            regimes.append((mask, lambda o, q=q: _gemm_time(o, spec, q)))
        taken = mask if taken is None else taken | mask
    if regimes:
        regimes.append((~taken, lambda o: _gemm_time(o, spec, p)))
    return p, a, regimes


def _sequence_s(profile) -> float:
    """The profile's extra time of a GEMM that is not compute-bound, in a sequence."""
    q = profile.find("sequence", "gemm")
    return q.dependent_s if q is not None else 0.0


def gemm_terms(op: Gemm, spec, profile) -> KernelTerms | None:
    """The terms of a GEMM whose points all take the aligned kernels (None otherwise)."""
    p, a, regimes = _gemm_choice(op, spec, profile)
    if regimes:
        return None
    return _gemm_terms(op, spec, p, a, sequence_s=_sequence_s(profile))


def gemm_rule(op: Gemm, spec, profile) -> Timing:
    p, a, regimes = _gemm_choice(op, spec, profile)
    if not regimes:
        return _priced(_gemm_terms(op, spec, p, a, sequence_s=_sequence_s(profile)), spec)
    t = by_regime(op, regimes)
    dependent = _sequence_s(profile)
    if dependent:
        # (added where the GEMM runs in a sequence: see in_sequence)
        t.losses["in_sequence_s"] = np.where(np.asarray(t.bound) != "compute", dependent, 0.0)
    return t


def _priced(terms: KernelTerms, spec) -> Timing:
    return PricedTerms([terms], spec).timing(0)


def in_sequence(t: Timing) -> Timing:
    """``t`` as the kernel runs among other kernels (a layer, a forward pass): a GEMM
    that is not compute-bound then costs more than back to back with copies of itself,
    which is how the harness times it (the profile's sequence/gemm dependent_s)."""
    extra = t.losses.get("in_sequence_s")
    return t if extra is None else _with_fixed(t, extra)


def _gemm_time(op: Gemm, spec, p, a=None) -> Timing:
    """``a``: the op's gemm_alignment, where the caller has it."""
    return _priced(_gemm_terms(op, spec, p, a), spec)


def _gemm_terms(op: Gemm, spec, p, a=None, sequence_s=0.0) -> KernelTerms:
    a = gemm_alignment(op) if a is None else a
    tiles = _tiles64(op)
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
    fc, memory_scale = _alignment_factors(op, p, a)
    if not (_is_one(fc) and _is_one(memory_scale)):
        losses["misalignment"] = 1 / fc
    kernels = split_k_kernels(op, p, a, tiles)
    if p.split_k_ratio:
        losses["split_k_kernels"] = kernels
    extra = 0.0
    if p.k_element_s:
        # the k loop of one output tile runs in series; a split k shares it out
        splits = np.minimum(np.maximum(spec.chip.sm_count / tiles, 1.0), 16.0) ** (kernels - 1.0)
        # (GEMV-style kernels of skinny misaligned GEMMs walk k at the aligned pace)
        slow = np.where(np.asarray(op.m) <= SKINNY_ROWS, 1.0, fc)
        extra = np.asarray(op.k) * _k_step_bytes(op) * p.k_element_s / slow / splits
        # (a misaligned single row runs cuBLAS's GEMV kernels, which split k over warps)
        if not _aligned(a):
            extra = np.where((np.asarray(op.m) == 1) & (a < 16), 0.0, extra)
        losses["k_serial_s"] = extra
    # a split k also writes fp32 partial tiles and runs the reduction over them
    fixed = (np.asarray(kernels) - 1.0) * p.split_k_s if p.split_k_s else 0.0
    return KernelTerms(op.work(), p, compute_scale=scale / fc, memory_scale=memory_scale, losses=losses,
                       kernels=kernels, extra_s=extra, fixed_s=fixed, sequence_s=sequence_s)


def _tiled_gemm_time(op: Gemm, spec, p, regime: str) -> Timing:
    """GEMMs of a tiled ``regime`` (above SKINNY_ROWS rows: row strides under 16 bytes, or
    fp32 math on the CUDA cores): the library runs one of a few configurations (a tile of
    TILED_TILES[regime], the k split in one of TILED_SPLITS parts), modelled as the
    fastest of them by the same physics. A thread block walks its share of k in steps
    that each load tile_m + tile_n operand elements through narrow loads
    (``element_load_rate`` elements per second per SM) and issue 2 x tile_m x tile_n FLOPs
    of matrix math (``compute_efficiency`` of the SM's share of peak): larger tiles load
    fewer elements per FLOP. An SM runs its blocks at that rate, a lone block at
    ``cta_share`` of it; blocks fill the SMs in whole waves. A split k writes and reads
    back fp32 partial tiles and adds a reduction kernel. Every configuration is priced
    at once along two trailing axes, in single precision (it only picks one); the fastest
    (the first of equals) is then priced in double."""
    m, n, k = (np.asarray(x, dtype=float) for x in (op.m, op.n, op.k))
    tiles_mn = np.array(TILED_TILES[regime], dtype=float)
    splits = np.array(TILED_SPLITS, dtype=float)
    sms = spec.chip.sm_count
    work = op.work()
    peak = spec.peak(op.math_rate) * p.compute_efficiency
    bw = spec.memory.hbm_bandwidth_bytes_per_s * p.memory_efficiency

    def price(tm, tn, s, m, n, k, batch, hbm_bytes):
        """(compute s, HBM bytes, kernels, fixed extra s) of tile tm x tn with k in s parts
        (``hbm_bytes``: the GEMM's own)."""
        load = (tm + tn) / (2.0 * tm * tn * p.element_load_rate) if p.element_load_rate else 0.0
        rate = 1.0 / (sms / peak + load)  # FLOP/s of one SM
        tiles = batch * np.ceil(m / tm) * np.ceil(n / tn)
        block = 2.0 * tm * tn / rate * (np.ceil(k / s) + p.k_overhead)  # one block, an SM to itself
        compute = block * np.maximum(np.ceil(tiles * s / sms), 1.0 / p.cta_share)
        split = s > 1
        hbm_bytes = hbm_bytes + np.where(split, 8.0 * s * batch * m * n, 0.0)  # fp32 partials out and back
        return compute, hbm_bytes, np.where(split, 2.0, 1.0), np.where(split, p.split_k_s, 0.0)

    # configurations along two trailing axes, [*shape, tile, split]
    f32, point = np.float32, (Ellipsis, None, None)
    compute, hbm_bytes, kernels, extra = price(
        tiles_mn[:, 0].astype(f32)[:, None], tiles_mn[:, 1].astype(f32)[:, None], splits.astype(f32),
        *(x.astype(f32)[point] for x in (m, n, k)), np.asarray(op.batch, dtype=f32)[point],
        np.asarray(work.hbm_bytes, dtype=f32)[point])
    latency = _fastest_latency(kernels * p.launch_s + extra, compute, hbm_bytes / bw, p.corner)
    best = np.argmin(latency.reshape(*latency.shape[:-2], -1), axis=-1)
    tm, tn = tiles_mn[best // len(splits)].T
    s = splits[best % len(splits)]
    compute, hbm_bytes, kernels, extra = price(tm, tn, s, m, n, k, op.batch, work.hbm_bytes)
    losses = {"tile_m": tm, "tile_n": tn, "k_splits": s, "split_k_kernels": kernels}
    ideal = op.flops() / peak
    return _priced(KernelTerms(work, p, compute_scale=compute / ideal, memory_scale=hbm_bytes / work.hbm_bytes,
                               losses=losses, kernels=kernels, fixed_s=extra if p.split_k_s else 0.0), spec)


def _fastest_latency(fixed, compute, hbm, p):
    """fixed + corner(compute, hbm) of every configuration (broadcast together, trailing
    axes [tile, split]), exact where a configuration can be the fastest: the p-norm of two
    terms is at least their max, so a configuration whose fixed + max exceeds the exact
    time of the one with the least fixed + max is never the fastest, and keeps that lower
    bound (the costly powers run on the few close to the best)."""
    low = fixed + np.maximum(compute, hbm)
    if p is None:
        return low

    def exact(at):  # the exact times at indices ``at`` of low (each array indexed in its own shape)
        x = [np.reshape(x, (1,) * (low.ndim - np.ndim(x)) + np.shape(x)) for x in (fixed, compute, hbm)]
        x = [v[tuple(i if d > 1 else 0 for i, d in zip(at, v.shape))] for v in x]
        return x[0] + corner(x[1:], p)

    first = np.argmin(low.reshape(*low.shape[:-2], -1), axis=-1)
    bound = exact((*np.indices(first.shape), *np.divmod(first, low.shape[-1])))
    keep = np.nonzero(low <= bound[..., None, None])
    low[keep] = exact(keep)
    return low


def _k_step_bytes(op: Gemm) -> float:
    """Bytes of A and W per element of k, relative to 16-bit operands: the serial k walk
    of a thread block moves its operand rows, so fp8 walks a k twice as fast as bf16 and
    fp32 (tf32) at half the pace."""
    act, wt, _, _ = FORMATS[op.dtype]
    return (bytes_per_element(act) + bytes_per_element(wt)) / 4.0


def _with_fixed(t: Timing, seconds) -> Timing:
    """``t`` with a fixed time added to its latency (and counted as launch cost)."""
    return with_fields(t, latency_s=t.latency_s + seconds, launch_s=t.launch_s + seconds)


def grouped_gemm_rule(op: GroupedGemm, spec, profile) -> Timing:
    return _priced(grouped_gemm_terms(op, spec, profile), spec)


def grouped_gemm_terms(op: GroupedGemm, spec, profile) -> KernelTerms:
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
    return KernelTerms(op.work(), p, compute_scale=scale, losses=losses)


# Kernel regimes of an attention backend: a backend runs a different kernel in some
# shapes (seen in the kernel names of H200 measurements), each with its own parameters
# under the profile key "<backend>:<regime>" (falling back to the backend's own).
#   cuDNN: single-token queries run an sm80 decode kernel (GQA heads packed, keys split
#          with a reduction kernel), slower per key above head dim 128; longer queries
#          the sm90 kernel, which neither packs nor splits.
#   efficient (CUTLASS): head dims above 128 keep the accumulator in global memory.
ATTENTION_REGIMES = {
    "sdpa-cudnn": (("decode", lambda op, sms: (np.asarray(op.seq_q) == 1) & (np.asarray(op.head_dim) <= 128)),
                   ("decode_wide", lambda op, sms: (np.asarray(op.seq_q) == 1) & (np.asarray(op.head_dim) > 128))),
    "sdpa-efficient": (("wide", lambda op, sms: np.asarray(op.head_dim) > 128),),
    "sdpa-flash": (("causal_split", lambda op, sms: _fa2_causal_split(op, sms)),),
}


def fa2_splits(blocks, key_blocks, slots, max_splits=128):
    """FlashAttention-2's split-KV choice: none once the blocks nearly fill ``slots``;
    else the fewest splits whose wave efficiency is within 85% of the best (a split
    count is eligible only if it changes the keys per split)."""
    blocks, key_blocks = np.broadcast_arrays(np.asarray(blocks, dtype=float),
                                             np.asarray(key_blocks, dtype=float))
    s = np.arange(1.0, max_splits + 1).reshape((-1,) + (1,) * blocks.ndim)
    cap = np.minimum(np.minimum(max_splits, slots), key_blocks)
    eligible = (s <= cap) & ((s == 1) | (np.ceil(key_blocks / s) != np.ceil(key_blocks / np.maximum(s - 1, 1))))
    waves = blocks * s / slots
    eff = np.where(eligible, waves / np.ceil(waves), 0.0)
    ok = eligible & (eff >= 0.85 * eff.max(axis=0))
    first = np.argmax(ok, axis=0) + 1.0
    return np.where(blocks >= 0.8 * slots, 1.0, first)


def _packed_rows(op: Attention):
    """(single-token mask, query rows per block group, block groups): the query heads that
    share a KV head are packed into one block's rows (GQA), so a decode step fills group x
    seq_q rows (the decode kernels do this for single-token queries only)."""
    seq_q = np.asarray(op.seq_q)
    one = seq_q == 1
    group_rows = np.where(one, np.asarray(op.heads / op.kvh), 1.0) * seq_q
    return one, group_rows, op.batch * np.where(one, op.kvh, op.heads)


def _fa2_split_count(op: Attention, sms, packed=None):
    """FlashAttention-2's split of the keys for ``op`` (see fa2_splits): it counts
    64-row query blocks (GQA heads packed for single-token queries) and keys in blocks
    of 256/128/64 by head dim, against two blocks per SM. ``packed``: _packed_rows(op),
    where the caller has it."""
    _, group_rows, heads = _packed_rows(op) if packed is None else packed
    d = np.asarray(op.head_dim)
    block_n = np.where(d <= 64, 256.0, np.where(d <= 128, 128.0, 64.0))
    return fa2_splits(heads * np.ceil(group_rows / 64), np.ceil(np.asarray(op.seq_kv) / block_n), 2 * sms)


def _fa2_causal_split(op: Attention, sms):
    """Causal prefills that FlashAttention-2 splits (too few query blocks to fill the
    GPU): they run its split-KV kernel, slower on them than its regular kernel's model
    (seen on the H200), with parameters of their own."""
    return np.asarray(op.causal) & (np.asarray(op.seq_q) > 1) & (_fa2_split_count(op, sms) > 1)


def _attention_choice(op: Attention, spec, profile) -> list:
    """(mask, parameters) of each kernel regime of the op's backend."""
    _require(spec, op.math_rate, f"{op.dtype} attention")
    # an unmeasured backend (or none named) takes the measured backend of its variant
    keys = (op.backend or "", op.variant, *VARIANT_BACKENDS.get(op.variant, ()))
    return [(mask, profile.params("attention", f"{op.backend}:{name}" if name else "", *keys))
            for name, mask in attention_regimes(op, spec.chip.sm_count)]


def attention_terms(op: Attention, spec, profile) -> KernelTerms | None:
    """The terms of an attention op: its points' regimes' parameters per point (None
    where the regimes split the keys differently)."""
    present = [(m, p) for m, p in _attention_choice(op, spec, profile) if np.count_nonzero(m)]
    if len(present) == 1:
        return _attention_terms(op, spec, present[0][1])
    if any(p.split_kv != present[0][1].split_kv for _, p in present):
        return None
    return _attention_terms(op, spec, params_by_regime(present))


def attention_rule(op: Attention, spec, profile) -> Timing:
    terms = attention_terms(op, spec, profile)
    if terms is not None:
        return _priced(terms, spec)
    return by_regime(op, [(mask, lambda o, p=p: _attention_time(o, spec, p))
                          for mask, p in _attention_choice(op, spec, profile)])


def _on(x) -> bool:
    """Whether a parameter (a number, or an array of one per point) is set anywhere."""
    return bool(x) if _plain(x) else bool(np.count_nonzero(x))


def _plain(x) -> bool:
    return type(x) in (float, int, bool) or x is None


def params_by_regime(present: list) -> SimpleNamespace:
    """The parameters of kernel regimes as one set, per point where they differ:
    ``present`` holds (mask, parameters) with masks that split the points. A hard-max
    corner is the p-norm of p infinity; an unset softmax_overlap is NaN."""
    params = tuple(p for _, p in present)
    which = np.zeros(np.shape(present[0][0]), dtype=np.intp)  # per point: its regime
    for r, (mask, _) in enumerate(present[1:], 1):
        which[mask] = r
    key = (tuple(map(id, params)), which.shape, which.tobytes())
    found = _REGIME_PARAMS.get(key)
    if found is None:  # (kept, with the objects: repeated predictions meet the same split)
        if len(_REGIME_PARAMS) > 256:
            _REGIME_PARAMS.clear()
        same, names, table = _regime_table(params)
        found = _REGIME_PARAMS[key] = (params, SimpleNamespace(**same, **dict(zip(names, table[:, which]))))
    return found[1]


_REGIME_TABLES: dict = {}
_REGIME_PARAMS: dict = {}


def _regime_table(params: tuple) -> tuple:
    """(the fields all of ``params`` share, the names of the others, their values as a
    [field, regime] array), kept per tuple of parameter objects (with the objects, so
    that their ids stay theirs)."""
    key = tuple(map(id, params))
    if key not in _REGIME_TABLES:
        if len(_REGIME_TABLES) > 256:
            _REGIME_TABLES.clear()
        first, same, names, rows = params[0], {}, [], []
        for name, value in first.__dict__.items():
            values = [getattr(p, name) for p in params]
            if all(v == value for v in values):
                same[name] = value
                continue
            if name in ("corner", "softmax_overlap"):
                values = [(np.inf if name == "corner" else np.nan) if v is None else v for v in values]
            names.append(name)
            rows.append(values)
        _REGIME_TABLES[key] = (params, same, tuple(names), np.array(rows, dtype=float).reshape(len(rows), len(params)))
    return _REGIME_TABLES[key][1:]


def attention_regimes(op: Attention, sms: int) -> list:
    """(regime name, mask) for each kernel regime of the op's backend on a GPU of ``sms``
    SMs, the first regime that claims a point taking it; the last, named "", is the
    backend's own kernel."""
    out, taken = [], np.zeros(np.shape(op.seq_q * op.head_dim * op.batch), dtype=bool)
    for name, pick in ATTENTION_REGIMES.get(op.backend or "", ()):
        mask = np.asarray(pick(op, sms), dtype=bool) & ~taken
        out.append((name, mask))
        taken = taken | mask
    out.append(("", ~taken))
    return out


def _attention_time(op: Attention, spec, p) -> Timing:
    return _priced(_attention_terms(op, spec, p), spec)


def _attention_terms(op: Attention, spec, p) -> KernelTerms:
    scale, losses, extra, memory_scale = 1.0, {}, 0.0, 1.0
    sms = spec.chip.sm_count
    seq_q = np.asarray(op.seq_q)
    rows = op.batch * op.heads * seq_q
    keys_per_query = op.pairs() / rows
    computed = keys_per_query
    if _on(p.causal_overhead):
        # diagonal blocks of causal attention are computed whole, then masked: never more
        # keys than the cache holds, rounded up to whole key tiles (a single query row
        # sees every key: nothing to mask)
        cap = np.maximum(np.ceil(np.asarray(op.seq_kv) / KEY_TILE) * KEY_TILE, keys_per_query)
        masked = np.asarray(op.causal) & (seq_q > 1)
        computed = np.where(masked, np.minimum(keys_per_query + p.causal_overhead, cap), keys_per_query)
    if _on(p.seq_overhead) or _on(p.causal_overhead):
        # plus each query block's fixed work (loads, softmax rescale, output), in keys
        fill = (computed + p.seq_overhead) / keys_per_query
        scale = scale * fill
        losses["kv_fill"] = fill
    one, group_rows, heads = packed = _packed_rows(op)  # (GQA heads packed in decode)
    tile = max(p.tile_m, 1) if _plain(p.tile_m) else np.maximum(p.tile_m, 1.0)
    blocks = heads * np.ceil(group_rows / tile)
    short = seq_q <= p.split_kv_max_query
    if p.split_kv == "fa2":
        # the choice counts 64-row blocks of 128 threads, two per SM, and keys in blocks
        # of 256/128/64 by head dim; a split runs the 64-row split kernel, else the
        # regular kernel's 128-row tiles
        d = np.asarray(op.head_dim)
        splits = np.where(short, _fa2_split_count(op, sms, packed), 1.0)
        tile = np.where((splits > 1) | (d > 192), 64.0, 2.0 * tile)
        blocks = heads * np.ceil(group_rows / tile)
    else:
        # short queries split the keys over more blocks when the GPU would be under-filled
        # (flash-decoding; only caches longer than split_kv_min_keys): the splits then
        # share out the walk over the keys
        short = short & (np.asarray(op.seq_kv) > p.split_kv_min_keys)
        splits = np.where(short & (blocks < 0.8 * sms), np.minimum(np.maximum(sms / blocks, 1.0), 128.0), 1.0)
    if _on(p.head_dim_tile > 1):
        # the kernel's matrix products run on head dims rounded up to its tile (cuDNN
        # computes a head dim of 96 as 128)
        d = np.asarray(op.head_dim, dtype=float)
        wide = np.ceil(d / p.head_dim_tile) * p.head_dim_tile / d
        if not _plain(p.head_dim_tile):
            wide = np.where(p.head_dim_tile > 1, wide, 1.0)
        scale = scale * wide
        losses["head_dim_padding"] = wide
    if np.count_nonzero(tile > 1):
        # a block computes its whole query tile, however few of its rows are real
        pad = np.ceil(group_rows / tile) * tile / group_rows
        scale = scale * pad
        losses["query_padding"] = pad
    if _on(p.wave_quantization):
        eff = _wave_efficiency(blocks * splits, sms)
        if not _plain(p.wave_quantization):
            eff = np.where(p.wave_quantization, eff, 1.0)
        scale = scale / eff
        losses["wave_quantization"] = 1 / eff
    if _on(p.row_element_s):
        # the critical path: the block of the last queries walks every key (causal or not)
        extra = np.asarray(op.seq_kv) * np.asarray(op.head_dim) * p.row_element_s / splits
        losses["kv_serial_s"] = extra
    if _on(p.critical_path):
        # the block of the last queries walks every key (causal or not) over its whole
        # query tile, at one SM's share of the achievable rate, shared with the other
        # blocks resident on its SM (two at most)
        per_sm = spec.peak(op.math_rate) * p.compute_efficiency / sms
        share = np.minimum(np.maximum(np.ceil(blocks * splits / sms), 1.0), 2.0)
        # (the softmax of each key costs like walk_dim extra head-dim elements)
        walk = 4.0 * tile * np.asarray(op.seq_kv) / splits * (np.asarray(op.head_dim) + p.walk_dim)
        extra = extra + p.critical_path * walk * share / per_sm
        losses["critical_path_s"] = extra
    if _on(p.key_block_s) or _on(p.block_s):
        rounds = np.ceil(blocks * splits / (2 * sms))  # of blocks on an SM, two resident at a time
    if _on(p.key_block_s):
        # the critical path's fixed cost per block of keys (64 keys at head dims up to
        # 64, 128 above), a latency that two blocks resident on an SM hide from each
        # other: paid once per round of two blocks per SM
        per_block = np.where(np.asarray(op.head_dim) <= 64, 64.0, 128.0)
        walk_blocks = np.ceil(np.asarray(op.seq_kv) / splits / per_block)
        extra = extra + walk_blocks * rounds * p.key_block_s
        losses["key_blocks"] = walk_blocks
    if _on(p.block_s):
        # each block's own fixed cost (loading its queries, writing its output), paid
        # once per round of blocks on an SM
        extra = extra + rounds * p.block_s
        losses["block_rounds"] = rounds
    if _on(p.unsplit_memory_efficiency < 1):
        memory_scale = np.where(short & (splits == 1.0), 1 / p.unsplit_memory_efficiency, 1.0)
    # a decode group larger than the tile takes several blocks, each streaming the
    # head's whole KV cache
    rereads = np.where(one, np.ceil(group_rows / tile), 1.0)
    if np.count_nonzero(rereads > 1):
        memory_scale = memory_scale * rereads
        losses["kv_rereads"] = rereads
    kernels = np.where(splits > 1, 2.0, 1.0)  # a split adds its combine (reduction) kernel
    fixed = 0.0
    if p.split_kv == "fa2" and _on(p.combine_split_s):
        fixed = losses["combine_s"] = _fa2_combine_s(op, splits, group_rows * heads, sms, p.combine_split_s)
    overlap = p.softmax_overlap
    if overlap is None:  # (per point: NaN where the regime leaves it to the variant)
        overlap = float(op.variant == "fa3")
    elif not _plain(overlap):
        overlap = np.where(np.isnan(overlap), float(op.variant == "fa3"), overlap)
    return KernelTerms(op.work(), p, compute_scale=scale, memory_scale=memory_scale, overlap_aux=overlap,
                       losses=losses, extra_s=extra, kernels=kernels, fixed_s=fixed)


def _fa2_combine_s(op: Attention, splits, rows, sms, per_split_s):
    """FlashAttention-2's combine kernel after a split: each thread block sums the
    partial outputs of a few query rows (4, 8 or 16 by head dim), one split after the
    other, so its time is the splits times a per-split latency, per round of blocks
    (sixteen 128-thread blocks resident per SM)."""
    d = np.asarray(op.head_dim)
    rows_per_block = np.where(d % 128 == 0, 4.0, np.where(d % 64 == 0, 8.0, 16.0))
    rounds = np.ceil(np.ceil(rows / rows_per_block) / (16 * sms))
    return np.where(splits > 1, splits * rounds * per_split_s, 0.0)


# the fields of a Timing that hold a value per point (merged when regimes are joined)
PER_POINT = ("latency_s", "bound", "flops", "hbm_bytes", "intensity_flop_per_byte", "compute_s",
              "hbm_s", "l2_s", "link_s", "launch_s", "losses")


def by_regime(op, regimes) -> Timing:
    """Price each point of ``op`` by the regime it falls in: ``regimes`` is a list of
    (mask, time function) whose masks split the points. Large arrays are split so that
    each regime prices only its own points; small ones are priced whole by every regime
    present (fewer numpy calls), then picked point by point."""
    present = [(np.asarray(m), fn) for m, fn in regimes if np.count_nonzero(m)]
    if len(present) == 1:
        return present[0][1](op)
    from dataclasses import fields, replace

    arrays = {f.name: v for f in fields(op) if np.ndim(v := getattr(op, f.name)) > 0}
    shape = np.broadcast_shapes(*(np.shape(v) for v in arrays.values()), *(m.shape for m, _ in present))
    if int(np.prod(shape)) < 256:
        t = present[-1][1](op)
        for m, fn in present[-2::-1]:
            t = select_timing(m, fn(op), t)
        return t
    parts = []
    for m, fn in present:
        m = np.broadcast_to(m, shape)
        parts.append((m, fn(replace(op, **{k: np.broadcast_to(v, shape)[m] for k, v in arrays.items()}))))
    return _scatter(shape, parts)


def _scatter(shape, parts) -> Timing:
    """One timing over ``shape`` from timings of the points each mask selects."""
    from dataclasses import replace

    def merge(values):
        if isinstance(values[0], dict):
            keys = {k for v in values for k in v}
            return {k: merge([v.get(k, 0.0) for v in values]) for k in keys}
        kind = object if any(np.asarray(v).dtype.kind in "OUS" for v in values) else float
        out = np.empty(shape, dtype=kind)
        for (m, _), v in zip(parts, values):
            out[m] = v
        return out

    first = parts[0][1]
    return replace(first, **{f: merge([getattr(t, f) for _, t in parts]) for f in PER_POINT})


def select_timing(mask, a: Timing, b: Timing) -> Timing:
    """Per point, ``a`` where ``mask`` holds, else ``b`` (two timings of one op)."""
    from dataclasses import replace

    def pick(x, y):
        if isinstance(x, dict):
            return {k: pick(x.get(k, 0.0), y.get(k, 0.0)) for k in {**y, **x}}
        return np.where(mask, x, y)

    return replace(a, **{f: pick(getattr(a, f), getattr(b, f)) for f in PER_POINT})


def memory_rule(op, spec, profile) -> Timing:
    return _priced(memory_terms(op, spec, profile), spec)


_MEMORY_KEYS = {Copy: "copy", Bookkeeping: "bookkeeping"}  # (the other memory ops: their kind)


def memory_terms(op, spec, profile) -> KernelTerms:
    key = _MEMORY_KEYS.get(type(op)) or op.kind
    p = profile.params("memory", key)
    memory_scale, extra, losses, extra_launch = 1.0, 0.0, {}, None
    if isinstance(op, Copy) and (p.align2_memory < 1 or p.align8_memory < 1):
        a = alignment_bytes(op.bytes, 1)
        memory_scale = 1 / _class_factor(a, 1.0, p.align8_memory, p.align2_memory)
        if p.align2_launch_s:  # the head and tail bytes of an odd size take extra work
            extra_launch = np.where(a < 4, p.align2_launch_s, 0.0)
    if isinstance(op, Norm) and p.row_element_s:
        # one thread block per row: with few rows, each block's own latency-bound pass
        # over its row sets the time, in waves of rows_per_sm rows per SM
        waves = np.ceil(np.asarray(op.tokens) / (spec.chip.sm_count * p.rows_per_sm))
        extra = waves * np.asarray(op.hidden) * p.row_element_s
        losses["row_waves"] = waves
        if p.row_double_bytes:
            read = np.asarray(op.tokens) * np.asarray(op.hidden) * bytes_per_element(op.dtype)
            x = (np.log(np.maximum(read, 1.0)) - np.log(p.row_double_bytes)) / ROW_DOUBLE_WIDTH
            double = 1.0 + logistic(x)
            extra = extra * double
            losses["row_pass"] = double
    if isinstance(op, Norm) and p.row_bandwidth_elements:
        memory_scale = 1 + np.asarray(op.hidden) / p.row_bandwidth_elements
    fixed = extra_launch if extra_launch is not None and np.count_nonzero(extra_launch) else 0.0
    return KernelTerms(op.work(), p, memory_scale=memory_scale, extra_s=extra, losses=losses, fixed_s=fixed)


def moe_rule(op: MoE, spec, profile) -> Timing:
    parts = [(name, rule_for(k)(k, spec, profile)) for name, k in op.kernels()]
    return sum_timings(parts, spec)


def sequence_rule(op: Sequence, spec, profile) -> Timing:
    parts = []
    for name, k, count in op.kernels():
        t = in_sequence(rule_for(k)(k, spec, profile))
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


_TERMS = {
    Gemm: gemm_terms,
    GroupedGemm: grouped_gemm_terms,
    Attention: attention_terms,
    Copy: memory_terms,
    Elementwise: memory_terms,
    Norm: memory_terms,
    Gather: memory_terms,
    Bookkeeping: memory_terms,
}


def terms_for(op, spec, profile) -> KernelTerms | None:
    """The roofline terms of ``op`` where one set prices all its points (a kernel of one
    regime), else None (``predict`` prices it)."""
    fn = _TERMS.get(type(op))
    return None if fn is None else fn(op, spec, profile)


def rule_for(op):
    try:
        return _RULES[type(op)]
    except KeyError:
        raise UserError(f"no timing rule for op {type(op).__name__}") from None
