"""GEMM rules: the aligned kernels' tile, k-fill, split-K and serial k-walk losses; the
misaligned and fp32 regimes, priced as the fastest of the library's tile configurations;
grouped (MoE expert) GEMMs."""

from __future__ import annotations

import math

import numpy as np

from ..dtypes import bytes_per_element
from ..ops.gemm import FORMATS, TILE_M, TILE_N, Gemm
from ..ops.moe import GroupedGemm
from ..pricing import KernelTerms, price_one, sequence_time
from ..timing import Timing, corner, logistic, with_fields
from .common import _require, _wave_efficiency, _waves, by_regime


ALIGN_BYTES = 16


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
TILED_CHUNK = 8192  # points whose configurations are priced at once (larger arrays: in chunks)


# formats with no fitted parameters of their own take those of the nearest measured one:
# w8a8 int8 runs like fp8 (same width, same tensor-core rate on Hopper), w4a16 dequantizes
# to bf16 math, fp64 runs like fp32
FALLBACK = {"int8": ("fp8", "bf16"), "int4": ("bf16",), "fp16": ("bf16",), "fp8": ("bf16",),
            "fp64": ("fp32",), "tf32": ("fp32",)}  # TMA and vectorized loads need 16-byte aligned row strides


def padded(x, tile):
    """A dimension rounded up to the tile the library would pick: small sizes get the
    next power-of-two tile (at least 8), larger ones whole tiles of ``tile``."""
    x = np.asarray(x, dtype=float)
    large = np.ceil(x / tile) * tile
    # (no small sizes: often so for widths)
    if type(x) is np.ndarray and x.ndim and np.count_nonzero(x >= tile) == x.size:
        return large
    small = np.maximum(8.0, 2.0 ** np.ceil(np.log2(np.maximum(x, 1.0))))
    return np.where(x < tile, np.minimum(small, tile), large)


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
    p = profile.params("gemm", *((f"{op.dtype}:{op.backend}",) if op.backend else ()), *keys)
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
        return price_one(_gemm_terms(op, spec, p, a, sequence_s=_sequence_s(profile)), spec)
    t = by_regime(op, regimes)
    dependent = _sequence_s(profile)
    if dependent:
        # (added where the GEMM runs in a sequence: see in_sequence)
        extra = sequence_time(t.bound, dependent)
        t = with_fields(t, sequence_s=extra, losses={**t.losses, "in_sequence_s": extra})
    return t


def _gemm_time(op: Gemm, spec, p, a=None) -> Timing:
    """``a``: the op's gemm_alignment, where the caller has it."""
    return price_one(_gemm_terms(op, spec, p, a), spec)


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

    def fastest(m, n, k, batch, hbm_bytes):
        """Per point, the index of the fastest configuration (tile x split, flattened)."""
        f32, point = np.float32, (Ellipsis, None, None)  # (configurations along two trailing axes)
        compute, hbm_bytes, kernels, extra = price(
            tiles_mn[:, 0].astype(f32)[:, None], tiles_mn[:, 1].astype(f32)[:, None], splits.astype(f32),
            *(np.asarray(x, dtype=f32)[point] for x in (m, n, k, batch, hbm_bytes)))
        latency = _fastest_latency(kernels * p.launch_s + extra, compute, hbm_bytes / bw, p.corner)
        return np.argmin(latency.reshape(*latency.shape[:-2], -1), axis=-1)

    sizes = (m, n, k, op.batch, work.hbm_bytes)
    if type(m) is np.ndarray and m.size > TILED_CHUNK:  # (the choice is per point: chunks keep the
        # configurations' arrays, points x tiles x splits, in the caches)
        shape = np.broadcast_shapes(*(np.shape(x) for x in sizes))
        flat = [np.ravel(np.broadcast_to(x, shape)) for x in sizes]
        best = np.concatenate([fastest(*(x[i:i + TILED_CHUNK] for x in flat))
                               for i in range(0, flat[0].size, TILED_CHUNK)]).reshape(shape)
    else:
        best = fastest(*sizes)
    tile = tiles_mn[best // len(splits)]
    tm, tn = tile[..., 0], tile[..., 1]  # (best may have any shape)
    s = splits[best % len(splits)]
    compute, hbm_bytes, kernels, extra = price(tm, tn, s, m, n, k, op.batch, work.hbm_bytes)
    losses = {"tile_m": tm, "tile_n": tn, "k_splits": s, "split_k_kernels": kernels}
    ideal = op.flops() / peak
    return price_one(KernelTerms(work, p, compute_scale=compute / ideal, memory_scale=hbm_bytes / work.hbm_bytes,
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


def grouped_gemm_rule(op: GroupedGemm, spec, profile) -> Timing:
    return price_one(grouped_gemm_terms(op, spec, profile), spec)


def grouped_gemm_terms(op: GroupedGemm, spec, profile) -> KernelTerms:
    rate = FORMATS[op.dtype][3]
    _require(spec, rate, f"a {op.dtype} grouped GEMM")
    keys = (op.dtype, *FALLBACK.get(op.dtype, ()))
    own = tuple(f"{d}:{op.backend}" for d in keys) if op.backend else ()  # (fp16: the bf16 kernel's fit)
    p = profile.params("grouped_gemm", *own, *keys, "bf16")
    scale, losses = 1.0, {}
    if p.tile_m > 1:
        pad = op.tiles_m() * TILE_M / op.rows
        scale = scale * pad
        losses["tile_padding"] = pad
    if p.k_overhead:
        scale = scale * (op.k + p.k_overhead) / op.k
    extra = 0.0
    if p.k_element_s:  # (each output tile walks its expert's whole k in series)
        extra = np.asarray(op.k) * _k_step_bytes(op) * p.k_element_s
        losses["k_serial_s"] = extra
    return KernelTerms(op.work(), p, compute_scale=scale, losses=losses, extra_s=extra)
