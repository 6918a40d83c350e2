"""Attention rules: each backend's kernel regimes, its query tiles and splits of the keys,
and the critical path of the block that walks every key."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..attention_kernels import kernel_of
from ..errors import UserError
from ..ops.attention import Attention
from ..pricing import KernelTerms, price_one
from ..timing import Timing
from .common import _on, _plain, _require, _wave_efficiency, by_regime, params_by_regime


KEY_TILE = 128  # keys an attention block loads at a time


VARIANT_BACKENDS = {"fa3": ("sdpa-cudnn",), "fa2": ("sdpa-flash",)}
# kernels no other kernel's parameters stand in for (their rule is their own)
OWN_KEY_ONLY = ("flashmla",)


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
    shape = np.broadcast_shapes(np.shape(blocks), np.shape(key_blocks))
    blocks, key_blocks = (np.broadcast_to(np.asarray(x, dtype=float), shape) for x in (blocks, key_blocks))
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
    """(mask, parameters) of each kernel regime of the kernel the op runs on the GPU."""
    _require(spec, op.math_rate, f"{op.dtype} attention")
    kernel = kernel_of(op, spec, profile)
    if kernel.backend in OWN_KEY_ONLY and profile.find("attention", kernel.backend) is None:
        raise UserError(f"{kernel.backend} has no parameters in this profile (the bundled Hopper profiles have "
                        f"them, measured on an H100: benchmarks/measurements/h100-sxm/mla-fit.yaml)")
    # a profile without the kernel's own parameters takes its class's measured backend
    keys = (kernel.backend, kernel.variant, *VARIANT_BACKENDS.get(kernel.variant, ()))
    return [(mask, profile.params("attention", f"{kernel.backend}:{name}" if name else "", *keys))
            for name, mask in attention_regimes(op, spec.chip.sm_count, kernel.backend)]


def attention_terms(op: Attention, spec, profile, choice=None) -> KernelTerms | None:
    """The terms of an attention op: its points' regimes' parameters per point (None
    where the regimes split the keys differently). ``choice``: _attention_choice(op),
    where the caller has it."""
    choice = _attention_choice(op, spec, profile) if choice is None else choice
    present = [(m, p) for m, p in choice if np.count_nonzero(m)]
    if len(present) == 1:
        return _attention_terms(op, spec, present[0][1])
    if any(p.split_kv != present[0][1].split_kv for _, p in present):
        return None
    return _attention_terms(op, spec, params_by_regime(present))


def attention_rule(op: Attention, spec, profile) -> Timing:
    choice = _attention_choice(op, spec, profile)
    terms = attention_terms(op, spec, profile, choice)
    if terms is not None:
        return price_one(terms, spec)
    return by_regime(op, [(mask, lambda o, p=p: _attention_time(o, spec, p)) for mask, p in choice])


def attention_regimes(op: Attention, sms: int, backend: str) -> list:
    """(regime name, mask) for each kernel regime of ``backend`` (the kernel the op runs:
    attention_kernels.kernel_of) on a GPU of ``sms`` SMs, the first regime that claims a
    point taking it; the last, named "", is the backend's own kernel."""
    out, taken = [], np.zeros(np.shape(op.seq_q * op.head_dim * op.batch), dtype=bool)
    for name, pick in ATTENTION_REGIMES.get(backend, ()):
        mask = np.asarray(pick(op, sms), dtype=bool) & ~taken
        out.append((name, mask))
        taken = taken | mask
    out.append(("", ~taken))
    return out


def _attention_time(op: Attention, spec, p) -> Timing:
    return price_one(_attention_terms(op, spec, p), spec)


# FlashMLA's scheduler (deepseek-ai/FlashMLA, csrc/kernels/get_mla_metadata.cu and config.h):
# keys in blocks of 64; each piece of a sequence costs 5 blocks' time more (its setup and
# output); a part of the GPU (one thread block per 64 query heads) takes at most an even
# share of all of it, and a part's payload is at least ten blocks
MLA_KEY_BLOCK = 64
MLA_OVERHEAD_BLOCKS = 5
MLA_V_DIM = 512  # the value width: a cut sequence's pieces each write this many fp32 per query head


@lru_cache(maxsize=4096)
def _mla_schedule_one(batch: int, blocks: int, parts: int) -> tuple[float, float, float]:
    """FlashMLA's scheduler on ``batch`` sequences of ``blocks`` key blocks each, over
    ``parts`` parts: each part in turn takes whole sequences while its payload holds them
    and their overhead, then the next sequence's first blocks if more than the overhead
    is left (that sequence is cut, and the next part goes on from there). Returns the
    busiest part's steps (its kernel loads a piece's first two blocks before its loop,
    which then walks the rest two at a time: a step each), the pieces of all the cut
    sequences, and the most pieces of one sequence."""
    over = MLA_OVERHEAD_BLOCKS
    payload = max(-(-batch * (blocks + over) // parts) + over, 2 * over)
    seq, done, pieces, busiest, cut_pieces, most = 0, 0, 1, 0, 0, 1
    for _ in range(parts):
        left, work = payload, 0
        while seq < batch:
            rest = blocks - done
            if left >= rest + over:  # the rest of the sequence fits
                work += -(-rest // 2) - 1
                left -= rest + over
                cut_pieces += pieces if pieces > 1 else 0
                most = max(most, pieces)
                seq, done, pieces = seq + 1, 0, 1
            else:
                if left > over:  # its first blocks here, the rest in the next part
                    work += -(-(left - over) // 2) - 1
                    done += left - over
                    pieces += 1
                break
        busiest = max(busiest, work)
        if seq >= batch:
            break
    return float(busiest), float(cut_pieces), float(most)


def _mla_schedule(batch, blocks, parts):
    """_mla_schedule_one over arrays (each distinct shape simulated once)."""
    b, n, k = np.broadcast_arrays(np.ceil(np.asarray(batch, dtype=float)), np.asarray(blocks, dtype=float),
                                  np.asarray(parts, dtype=float))
    rows = np.stack([b.ravel(), n.ravel(), k.ravel()], axis=1).astype(np.int64)
    uniq, inverse = np.unique(rows, axis=0, return_inverse=True)
    found = np.array([_mla_schedule_one(*map(int, row)) for row in uniq])[inverse.ravel()]
    return tuple(found[:, i].reshape(b.shape) for i in range(3))


def _flashmla_terms(op: Attention, spec, p) -> KernelTerms:
    """FlashMLA's decode, as its scheduler shares the work out (_mla_schedule_one): the
    roofline of all the work joins the busiest part's loop steps at a fixed latency each
    (``key_block_s``, a step being two key blocks); the cache is read in
    whole 64-key blocks; a query tile past the first re-reads it, ``reread_share`` of it
    from HBM; each piece of a cut sequence writes its fp32 partial output, which the
    combine kernel reads back, walking the pieces (``combine_split_s`` each) of the
    sequence cut most. The combine kernel always runs (it returns at once for a sequence
    in one piece)."""
    sms = spec.chip.sm_count
    _, group_rows, _ = _packed_rows(op)
    tile = max(p.tile_m, 1) if _plain(p.tile_m) else np.maximum(p.tile_m, 1.0)
    tiles = np.ceil(group_rows / tile)
    kvh = np.asarray(op.kvh)
    parts = np.maximum(np.floor(sms / (kvh * tiles)), 1.0)
    stored = np.asarray(op.stored_kv_len(), dtype=float)
    blocks = np.ceil(stored / MLA_KEY_BLOCK)
    busiest, cut_pieces, most = _mla_schedule(op.batch, blocks, parts)
    pad = tiles * tile / group_rows  # (a tile computes all its rows, real or not)
    rereads = 1.0 + (tiles - 1.0) * p.reread_share
    kv = op.bytes_kv()
    # (the cost model's MQA form has twice the query heads of the kernel: group_rows / 2 of them)
    partials = 2 * cut_pieces * kvh * (group_rows / 2) * MLA_V_DIM * 4  # written, then read back
    work = op.work()
    hbm = work.hbm_bytes
    memory = (hbm + kv * (blocks * MLA_KEY_BLOCK / stored * rereads - 1.0) + partials) / hbm
    extra = busiest * p.key_block_s
    fixed = np.where(most > 1, most * p.combine_split_s, 0.0)
    losses = {"query_padding": pad, "kv_rereads": rereads, "part_steps": busiest, "part_steps_s": extra,
              "partial_bytes": partials, "combine_s": fixed}
    overlap = 1.0 if p.softmax_overlap is None else p.softmax_overlap
    return KernelTerms(work, p, compute_scale=pad, memory_scale=memory, overlap_aux=overlap, losses=losses,
                       extra_s=extra, kernels=2.0, fixed_s=fixed)


def _attention_terms(op: Attention, spec, p) -> KernelTerms:
    if p.split_kv == "flashmla":
        return _flashmla_terms(op, spec, p)
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
    # head's whole KV cache (a tile of one row: no tiling known, as in the datasheet
    # roofline, where the cache is read once)
    rereads = np.where(one & (tile > 1), np.ceil(group_rows / tile), 1.0)
    if np.count_nonzero(rereads > 1):
        memory_scale = memory_scale * rereads
        losses["kv_rereads"] = rereads
    kernels = np.where(splits > 1, 2.0, 1.0)  # a split adds its combine (reduction) kernel
    fixed = 0.0
    if p.split_kv == "fa2" and _on(p.combine_split_s):
        fixed = losses["combine_s"] = _fa2_combine_s(op, splits, group_rows * heads, sms, p.combine_split_s)
    overlap = p.softmax_overlap
    if overlap is None or not _plain(overlap):  # (per point: NaN where the regime leaves it to the variant)
        fa3 = float(kernel_of(op, spec).variant == "fa3")
        overlap = fa3 if overlap is None else np.where(np.isnan(overlap), fa3, overlap)
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
