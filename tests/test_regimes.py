"""The kernel choices the timing rules copy from the libraries: FlashAttention-2's split
of the keys, cuBLAS's kernels for misaligned strides, cuDNN's decode kernel, and the
per-regime pricing of arrays."""

import math

import numpy as np
import pytest

from rooflinesim.calibration.profile import (AttentionParams, GemmParams, Profile, RowParams, SequenceParams,
                                             resolve_profile)
from rooflinesim.hardware import load_spec
from rooflinesim.ops import Attention, Copy, Gemm
from rooflinesim.ops.memory import Norm
from rooflinesim.ops.sequence import Sequence
from rooflinesim.rules import fa2_splits, gemm_alignment, in_sequence
from rooflinesim.predict import predict

H200 = load_spec("h200")
PROFILE = resolve_profile(H200, None)


def _fa2_reference(blocks, key_blocks, slots, max_splits=128):
    """FlashAttention-2's num_splits_heuristic, written as a plain loop."""
    if blocks >= 0.8 * slots:
        return 1
    max_splits = min(max_splits, slots, key_blocks)
    eff = []
    for s in range(1, max_splits + 1):
        eligible = s == 1 or -(-key_blocks // s) != -(-key_blocks // (s - 1))
        waves = blocks * s / slots
        eff.append(waves / np.ceil(waves) if eligible else 0.0)
    best = max(eff)
    return next(s for s, e in enumerate(eff, 1) if e and e >= 0.85 * best)


@pytest.mark.parametrize("blocks,key_blocks", [(1, 50), (4, 119), (24, 50), (64, 12), (128, 2),
                                               (200, 3), (250, 400), (7, 1), (33, 33)])
def test_fa2_splits_match_the_library_heuristic(blocks, key_blocks):
    assert fa2_splits(blocks, key_blocks, 264) == _fa2_reference(blocks, key_blocks, 264)


def test_fa2_splits_are_vectorized():
    blocks = np.array([1, 4, 24, 64, 300])
    keys = np.array([50, 119, 50, 12, 40])
    got = fa2_splits(blocks, keys, 264)
    assert got.tolist() == [_fa2_reference(b, k, 264) for b, k in zip(blocks, keys)]


def test_alignment_classes():
    assert gemm_alignment(Gemm(m=7, n=4096, k=4096)) == 16
    assert gemm_alignment(Gemm(m=7, n=4096, k=4100)) == 8
    assert gemm_alignment(Gemm(m=7, n=4097, k=4096)) == 2


def test_regime_split_prices_each_point_as_alone():
    """Large arrays mixing regimes (aligned and odd GEMMs; decode and prefill attention)
    are split by regime: every point must be priced exactly as on its own."""
    rng = np.random.default_rng(1)
    m, n, k = (rng.integers(1, 8192, 400) for _ in range(3))
    many = predict(Gemm(m=m, n=n, k=k), H200, PROFILE).latency_s
    one = [predict(Gemm(m=int(a), n=int(b), k=int(c)), H200, PROFILE).latency_s for a, b, c in zip(m, n, k)]
    np.testing.assert_allclose(many, one, rtol=1e-12)
    seq_q = np.where(rng.random(300) < 0.5, 1, rng.integers(2, 4096, 300))
    att = Attention(batch=4, heads=32, kv_heads=8, seq_q=seq_q, seq_kv=np.maximum(seq_q, 4096),
                    head_dim=np.where(rng.random(300) < 0.5, 128, 256), causal=True, backend="sdpa-cudnn")
    many = predict(att, H200, PROFILE).latency_s
    one = [predict(Attention(batch=4, heads=32, kv_heads=8, seq_q=int(q), seq_kv=max(int(q), 4096),
                             head_dim=int(d), causal=True, backend="sdpa-cudnn"), H200, PROFILE).latency_s
           for q, d in zip(seq_q, att.head_dim)]
    np.testing.assert_allclose(many, one, rtol=1e-12)


def test_odd_gemms_use_their_own_parameters():
    assert PROFILE.find("gemm", "bf16:align2") is not None
    odd, aligned = Gemm(m=4096, n=4096, k=4095), Gemm(m=4096, n=4096, k=4096)
    # element-aligned strides run pre-Hopper kernels: several times slower when compute-bound
    assert predict(odd, H200, PROFILE).latency_s > 3 * predict(aligned, H200, PROFILE).latency_s


def test_single_token_queries_pay_no_causal_diagonal():
    one = dict(batch=8, heads=32, kv_heads=8, seq_q=1, seq_kv=8192, head_dim=128, backend="sdpa-cudnn")
    assert predict(Attention(causal=True, **one), H200, PROFILE).latency_s == \
        pytest.approx(predict(Attention(causal=False, **one), H200, PROFILE).latency_s, rel=1e-12)


def test_decode_groups_wider_than_a_tile_reread_the_cache():
    narrow = Attention(batch=16, heads=16, kv_heads=1, seq_q=1, seq_kv=16384, head_dim=128,
                       causal=False, backend="sdpa-cudnn")
    wide = Attention(batch=16, heads=48, kv_heads=1, seq_q=1, seq_kv=16384, head_dim=128,
                     causal=False, backend="sdpa-cudnn")
    t = predict(wide, H200, PROFILE)
    assert t.losses["kv_rereads"] == 3  # 48 query heads on 16-row tiles
    assert t.latency_s > 2 * predict(narrow, H200, PROFILE).latency_s


def test_misaligned_copies_pay_a_fixed_cost_and_large_ones_do_not_slow_twice():
    p = Profile(kind="fitted", kernels={"memory": {"copy": RowParams(
        memory_efficiency=0.9, launch_s=1e-6, align8_memory=0.65, align2_memory=0.65,
        align2_launch_s=3e-7, large_bytes=1e9, large_memory_efficiency=0.65)}})
    small_even, small_odd = Copy(bytes=4096), Copy(bytes=4095)
    assert predict(small_odd, H200, p).latency_s - predict(small_even, H200, p).latency_s == \
        pytest.approx(3e-7, rel=0.05)
    big_odd, big_even = Copy(bytes=4_000_000_001), Copy(bytes=4_000_000_000)
    # past the size step both run at the slow rate: the odd size is not slower again
    assert predict(big_odd, H200, p).latency_s == pytest.approx(predict(big_even, H200, p).latency_s, rel=1e-3)


def test_regimes_over_broadcast_grids():
    """Arrays of different shapes broadcast together (a sweep grid) are split by regime
    over the whole grid."""
    seq_q = np.array([1, 1, 64, 512]).reshape(4, 1)
    seq_kv = np.arange(1000, 61000, 100).reshape(1, 600)
    grid = predict(Attention(batch=2, heads=32, kv_heads=8, seq_q=seq_q, seq_kv=seq_kv, head_dim=128,
                             causal=True, backend="sdpa-cudnn"), H200, PROFILE).latency_s
    assert grid.shape == (4, 600)
    one = predict(Attention(batch=2, heads=32, kv_heads=8, seq_q=64, seq_kv=1500, head_dim=128,
                            causal=True, backend="sdpa-cudnn"), H200, PROFILE).latency_s
    assert grid[2, 5] == pytest.approx(one, rel=1e-12)


def test_norm_row_pass_doubles_past_the_size_step():
    """A norm's serial row pass steps to twice its time once the input passes
    row_double_bytes, whatever the row width; small inputs are untouched."""
    base = dict(memory_efficiency=1.0, launch_s=1e-6, row_element_s=1e-9, rows_per_sm=16)
    plain = Profile(kind="fitted", kernels={"memory": {"rmsnorm": RowParams(**base)}})
    step = Profile(kind="fitted", kernels={"memory": {"rmsnorm": RowParams(**base, row_double_bytes=7e5)}})
    few, many = Norm(tokens=4, hidden=8192), Norm(tokens=256, hidden=8192)
    assert predict(few, H200, step).latency_s == pytest.approx(predict(few, H200, plain).latency_s, rel=1e-3)
    t = predict(many, H200, step)
    assert t.losses["row_pass"] == pytest.approx(2.0, rel=1e-3)
    assert t.latency_s - predict(many, H200, plain).latency_s == pytest.approx(8192e-9, rel=0.05)


def test_gemms_that_are_not_compute_bound_cost_more_in_a_sequence():
    """The sequence/gemm cost is added where GEMMs run among other kernels (layers,
    forward passes) and only to GEMMs that are not compute-bound; alone, as the harness
    times them, they do not pay it."""
    gemm_params = PROFILE.kernels["gemm"]
    p = Profile(kind="fitted", kernels={"gemm": gemm_params,
                                        "sequence": {"gemm": SequenceParams(dependent_s=3e-6)}})
    skinny, square = Gemm(m=4, n=4096, k=4096), Gemm(m=8192, n=8192, k=8192)
    alone = Profile(kind="fitted", kernels={"gemm": gemm_params})
    assert predict(skinny, H200, p).latency_s == pytest.approx(predict(skinny, H200, alone).latency_s, rel=1e-12)
    assert in_sequence(predict(skinny, H200, p)).latency_s - predict(skinny, H200, p).latency_s == \
        pytest.approx(3e-6)
    assert in_sequence(predict(square, H200, p)).latency_s == pytest.approx(predict(square, H200, p).latency_s,
                                                                            rel=1e-12)
    layer = Sequence(parts=(("a", skinny, 1), ("b", square, 1)))
    assert predict(layer, H200, p).latency_s - predict(layer, H200, alone).latency_s == \
        pytest.approx(3e-6)


def test_flash_causal_prefills_that_split_are_a_regime_of_their_own():
    """FlashAttention-2 splits the keys of a causal prefill too small to fill the GPU
    (its split-KV kernel); a larger one, or a non-causal one, stays in the base regime.
    The split depends on the GPU through its SM count."""
    from rooflinesim.rules import attention_regimes

    def regime(op, sms=132):
        return next(name for name, mask in attention_regimes(op, sms, op.backend) if mask.any())

    small = Attention(batch=1, heads=32, kv_heads=2, seq_q=258, seq_kv=258, head_dim=128,
                      causal=True, backend="sdpa-flash")
    large = Attention(batch=4, heads=32, kv_heads=8, seq_q=4096, seq_kv=4096, head_dim=128,
                      causal=True, backend="sdpa-flash")
    assert regime(small) == "causal_split"
    assert regime(large) == ""
    assert regime(Attention(batch=1, heads=32, kv_heads=2, seq_q=258, seq_kv=258, head_dim=128,
                            causal=False, backend="sdpa-flash")) == ""
    assert regime(small, sms=16) == ""  # a small GPU is already full
    assert "sdpa-flash:causal_split" in PROFILE.kernels["attention"]


def test_flash_split_pays_its_combine_per_split():
    """After FlashAttention-2 splits the keys, its combine kernel walks the splits one
    after the other: the cost grows with the split count, and an unsplit op pays none."""
    base = dict(compute_efficiency=0.4, memory_efficiency=0.9, launch_s=4e-6, tile_m=64,
                wave_quantization=True, split_kv="fa2", split_kv_max_query=1 << 30)
    plain = Profile(kind="fitted", kernels={"attention": {"sdpa-flash": AttentionParams(**base)}})
    comb = Profile(kind="fitted", kernels={"attention": {"sdpa-flash": AttentionParams(**base, combine_split_s=2e-7)}})
    # one KV head of 64 packed query heads: one block; 132 key blocks of 256 split 66
    # ways (2 key blocks each), and the combine's 8 blocks fit in one round
    few = Attention(batch=1, heads=64, kv_heads=1, seq_q=1, seq_kv=33617, head_dim=64,
                    causal=False, backend="sdpa-flash")
    t = predict(few, H200, comb)
    assert t.losses["combine_s"] == pytest.approx(66 * 2e-7)
    assert t.latency_s - predict(few, H200, plain).latency_s == pytest.approx(t.losses["combine_s"])
    full = Attention(batch=64, heads=32, kv_heads=8, seq_q=1, seq_kv=4096, head_dim=128,
                     causal=False, backend="sdpa-flash")  # fills the GPU: no split
    assert predict(full, H200, comb).latency_s == pytest.approx(predict(full, H200, plain).latency_s, rel=1e-12)


def test_flashmla_follows_its_scheduler():
    """FlashMLA's scheduler (get_mla_metadata.cu) shares each sequence's 64-key blocks,
    plus 5 blocks a piece, over sms / query tiles parts with a payload of at least 10; a
    part's loop walks a piece's blocks after its first two, two at a time; each piece of a
    cut sequence writes an fp32 partial the combine kernel reads back and walks."""
    from rooflinesim.rules.attention import _mla_schedule_one

    # (busiest part's steps, pieces of the cut sequences, most pieces of one sequence)
    assert _mla_schedule_one(1, 2, 132) == (0, 0, 1)  # two blocks: loaded before the loop
    assert _mla_schedule_one(1, 5, 132) == (2, 0, 1)  # 5 + 5 fits the least payload, 10
    assert _mla_schedule_one(1, 8, 132) == (2, 2, 2)  # 5 blocks, then the other 3 in the next part
    assert _mla_schedule_one(9, 3, 132) == (1, 0, 1)  # one sequence a part: 8 of 10, 3 too few for another's piece
    # 256 sequences of 8 blocks over 66 parts: a payload of ceil(256 * 13 / 66) + 5 = 56 holds
    # four whole (52) and leaves 4, no more than a piece's overhead: none is cut
    assert _mla_schedule_one(256, 8, 66) == (12, 0, 1)
    steps, cut, most = _mla_schedule_one(231, 8, 66)  # a payload of 51: three whole and 7 blocks of a fourth
    assert cut > 0 and most == 2
    steps, cut, most = _mla_schedule_one(128, 512, 132)  # 502 blocks a part: every sequence cut, two
    assert steps == 250 and 256 <= cut <= 3 * 128 and most == 3  # pieces or, as the cuts drift, three
    base = dict(compute_efficiency=0.6, memory_efficiency=0.9, launch_s=4e-6, tile_m=128, wave_quantization=False,
                split_kv="flashmla", key_block_s=1e-6, reread_share=0.25)
    prof = Profile(kind="fitted", kernels={"attention": {"flashmla": AttentionParams(**base, combine_split_s=5e-7)}})

    def mla(batch, query_heads, keys):
        return Attention(batch=batch, heads=2 * query_heads, kv_heads=1, seq_q=1, seq_kv=keys, head_dim=288,
                         causal=False, backend="flashmla")

    big = predict(mla(128, 16, 32768), H200, prof)
    assert big.losses["part_steps"] == 250 and big.losses["part_steps_s"] == pytest.approx(250e-6)
    assert big.losses["combine_s"] == pytest.approx(3 * 5e-7) and big.losses["kv_rereads"] == 1.0
    assert big.losses["partial_bytes"] == 2 * cut * 16 * 512 * 4  # written, then read back
    one = predict(mla(1, 16, 32768), H200, prof)  # one sequence over every part: 5 blocks each
    assert one.losses["combine_s"] == pytest.approx(math.ceil(512 / 5) * 5e-7)
    assert predict(mla(1, 16, 320), H200, prof).losses["combine_s"] == 0
    # the cache is read in whole blocks: 65 keys cost 128's bytes, 64 half of them
    t = {keys: predict(mla(512, 16, keys), H200, prof).latency_s for keys in (64, 65, 128)}
    assert t[65] == pytest.approx(t[128], rel=0.02) and t[64] < 0.75 * t[128]
    # 128 heads: two query tiles, half the parts, the second tile's re-read a quarter from HBM
    wide = predict(mla(128, 128, 32768), H200, prof)
    assert wide.losses["kv_rereads"] == pytest.approx(1.25)
    assert wide.latency_s > big.latency_s


def test_cudnn_decode_splits_only_long_caches_and_then_runs_a_reduction():
    """cuDNN's decode kernel splits the keys of an under-filled GPU only past 512 cached
    keys (its kernel counts on the H200); a split adds the reduction kernel's launch."""
    p = Profile(kind="fitted", kernels={"attention": {"sdpa-cudnn:decode": AttentionParams(
        memory_efficiency=0.9, launch_s=4e-6, tile_m=16, wave_quantization=True,
        split_kv_max_query=1, split_kv_min_keys=512)}})

    def op(keys):
        return Attention(batch=4, heads=32, kv_heads=8, seq_q=1, seq_kv=keys, head_dim=128,
                         causal=False, backend="sdpa-cudnn")

    short, long = predict(op(496), H200, p), predict(op(517), H200, p)
    assert short.launch_s == pytest.approx(4e-6)  # one kernel
    assert long.launch_s == pytest.approx(8e-6)  # the split kernel and its reduction


def test_fp8_gemms_walk_k_at_twice_the_pace_of_bf16():
    """The serial k walk of a thread block moves its operand rows: one byte per element
    in fp8 against two in bf16."""
    p = GemmParams(compute_efficiency=0.7, memory_efficiency=0.9, launch_s=2e-6, k_element_s=2e-9)
    prof = Profile(kind="fitted", kernels={"gemm": {"bf16": p, "fp8": p}})
    walk = {dt: predict(Gemm(m=1, n=64, k=8192, dtype=dt), H200, prof).losses["k_serial_s"]
            for dt in ("bf16", "fp8")}
    assert walk["bf16"] == pytest.approx(8192 * 2e-9)
    assert walk["fp8"] == pytest.approx(walk["bf16"] / 2)


def test_misaligned_single_rows_run_gemv_kernels_without_a_serial_k_walk():
    """cuBLAS runs a misaligned single-row GEMM with its GEMV kernels, which split k
    over warps; an aligned one runs a tensor-core kernel whose block walks k."""
    p = GemmParams(compute_efficiency=0.7, memory_efficiency=0.9, launch_s=2e-6, k_element_s=2e-9)
    prof = Profile(kind="fitted", kernels={"gemm": {"bf16": p}})
    gemv = predict(Gemm(m=1, n=6754, k=3127), H200, prof)
    assert not np.any(gemv.losses["k_serial_s"])
    assert predict(Gemm(m=1, n=6784, k=3136), H200, prof).losses["k_serial_s"] > 0
    assert predict(Gemm(m=2, n=6754, k=3127), H200, prof).losses["k_serial_s"] > 0


def test_cutlass_attention_pays_a_fixed_cost_per_block_of_keys():
    """The memory-efficient (CUTLASS) kernel walks the keys in blocks of 64 at head dims up
    to 64 and of 128 above, at a fixed cost per block that two blocks resident on an SM
    hide from each other."""
    base = dict(compute_efficiency=0.25, memory_efficiency=1.0, launch_s=2e-6, tile_m=64,
                wave_quantization=True, split_kv_max_query=0)
    plain = Profile(kind="fitted", kernels={"attention": {"sdpa-efficient": AttentionParams(**base)}})
    blocks = Profile(kind="fitted",
                     kernels={"attention": {"sdpa-efficient": AttentionParams(**base, key_block_s=2e-6)}})

    def timed(d, prof, batch=1):
        return predict(Attention(batch=batch, heads=16, kv_heads=16, seq_q=1, seq_kv=8192, head_dim=d,
                                 causal=False, backend="sdpa-efficient"), H200, prof)

    assert timed(64, blocks).losses["key_blocks"] == 128  # 8192 keys in blocks of 64
    assert timed(128, blocks).losses["key_blocks"] == 64  # in blocks of 128
    # one block per SM: the walk's fixed costs set the time, twice as many at head dim 64
    assert timed(64, blocks).latency_s > timed(128, blocks).latency_s
    assert timed(64, plain).latency_s < timed(128, plain).latency_s
    # 256 blocks, two per SM: one round, the same walk
    assert timed(64, blocks, batch=16).latency_s == pytest.approx(timed(64, blocks).latency_s, rel=0.02)


TILED = Profile(kind="fitted", kernels={"gemm": {
    "bf16": GemmParams(compute_efficiency=0.7, memory_efficiency=0.9, launch_s=2e-6, corner=3.0,
                         tile_m=64, tile_n=128),
    "bf16:align2": GemmParams(compute_efficiency=0.15, memory_efficiency=0.6, launch_s=2.5e-6, corner=1.5,
                                tile_m=64, tile_n=64, k_element_s=6e-9),
    "bf16:align2_tiled": GemmParams(compute_efficiency=0.25, element_load_rate=1.3e10, cta_share=0.65,
                                      k_overhead=50.0, launch_s=2e-6, memory_efficiency=0.25, corner=20.0,
                                      split_k_s=1e-6)}})


def test_tiled_gemms_run_the_fastest_configuration():
    """Odd GEMMs above eight rows take the tile and k split that price fastest: big ones a
    big tile and no split, ones of few tiles and a long k a split (two kernels)."""
    big = predict(Gemm(m=8192, n=8191, k=4096), H200, TILED).losses
    assert (big["tile_m"], big["tile_n"], big["k_splits"]) == (256, 128, 1)
    few = predict(Gemm(m=64, n=127, k=20001), H200, TILED)
    assert few.losses["k_splits"] > 1 and few.losses["split_k_kernels"] == 2
    # the split pays its partial tiles, second launch and fixed cost, and still beats the
    # fastest configuration without one (a fixed cost of a second forbids every split)
    params = TILED.kernels["gemm"]["bf16:align2_tiled"].model_copy(update={"split_k_s": 1.0})
    no_split = Profile(kind="fitted", kernels={"gemm": {**TILED.kernels["gemm"], "bf16:align2_tiled": params}})
    alone = predict(Gemm(m=64, n=127, k=20001), H200, no_split)
    assert alone.losses["k_splits"] == 1
    assert few.latency_s < alone.latency_s


def test_tiled_regime_spares_skinny_gemms_and_needs_its_parameters():
    skinny = Gemm(m=8, n=4097, k=4096)
    assert "tile_m" not in predict(skinny, H200, TILED).losses  # skinny kernels: the align2 parameters
    tall = Gemm(m=9, n=4097, k=4096)
    assert "tile_m" in predict(tall, H200, TILED).losses
    without = Profile(kind="fitted", kernels={"gemm": {k: v for k, v in TILED.kernels["gemm"].items()
                                                       if not k.endswith("_tiled")}})
    assert "tile_m" not in predict(tall, H200, without).losses  # priced by align2, as before


def test_tiled_gemms_mixed_with_others_price_as_alone():
    rng = np.random.default_rng(7)
    m = rng.integers(1, 4096, 300)
    n = rng.integers(1, 4096, 300) | 1  # odd: element-aligned strides
    k = rng.integers(16, 8192, 300)
    many = predict(Gemm(m=m, n=n, k=k), H200, TILED).latency_s
    one = [predict(Gemm(m=int(a), n=int(b), k=int(c)), H200, TILED).latency_s for a, b, c in zip(m, n, k)]
    np.testing.assert_allclose(many, one, rtol=1e-12)


def test_fp32_gemms_run_cuda_core_tiles_whatever_their_strides():
    simt = Profile(kind="fitted", kernels={"gemm": {
        "fp32": GemmParams(compute_efficiency=0.8, memory_efficiency=0.9, launch_s=2e-6, corner=3.0),
        "fp32:simt_tiled": GemmParams(compute_efficiency=0.9, element_load_rate=1.3e10, cta_share=0.7,
                                        k_overhead=30.0, launch_s=2e-6, memory_efficiency=0.6, corner=20.0)}})
    for n in (4096, 4097):  # 16-byte and 4-byte strides
        t = predict(Gemm(m=2048, n=n, k=2048, dtype="fp32"), H200, simt)
        assert t.losses["tile_m"] in (32, 64, 128, 256)
    assert "tile_m" not in predict(Gemm(m=8, n=4096, k=2048, dtype="fp32"), H200, simt).losses
    assert "tile_m" not in predict(Gemm(m=2048, n=4096, k=2048, dtype="tf32"), H200, simt).losses


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8"])
def test_tiled_gemms_of_any_shape_and_size_price_each_point_as_alone(dtype, monkeypatch):
    """The tiled regimes' search over configurations (misaligned strides, fp32 on the CUDA
    cores) runs on arrays of any shape, and in chunks for many points: each point gets
    what it gets priced alone."""
    import rooflinesim.rules.gemm as rules

    rng = np.random.default_rng(11)
    m, n = rng.integers(1, 9000, 60), rng.integers(1, 20000, 50)  # (odd widths: the tiled regimes)
    grid = predict(Gemm(m=m[:, None], n=n[None, :], k=3001, dtype=dtype), H200, PROFILE)
    flat = predict(Gemm(m=np.repeat(m, n.size), n=np.tile(n, m.size), k=3001, dtype=dtype), H200, PROFILE)
    # (the layouts run numpy's loops over other strides, which a CPU may round an ulp apart,
    # enough to pick another of two configurations within 1e-7 of each other: hence the
    # tolerance, far below any difference a wrong choice or a misplaced point would make)
    assert grid.latency_s.shape == (60, 50)
    assert np.allclose(grid.latency_s.ravel(), flat.latency_s, rtol=1e-6, atol=0)
    assert np.mean(np.asarray(grid.bound).ravel() == np.asarray(flat.bound)) > 0.999
    monkeypatch.setattr(rules, "TILED_CHUNK", 128)  # (the chunked search: the same choice per point)
    chunked = predict(Gemm(m=np.repeat(m, n.size), n=np.tile(n, m.size), k=3001, dtype=dtype), H200, PROFILE)
    assert np.allclose(chunked.latency_s, flat.latency_s, rtol=1e-6, atol=0)
    for i in rng.integers(0, flat.latency_s.size, 5):
        alone = predict(Gemm(m=int(np.repeat(m, n.size)[i]), n=int(np.tile(n, m.size)[i]), k=3001, dtype=dtype),
                        H200, PROFILE)
        assert float(alone.latency_s) == pytest.approx(float(flat.latency_s[i]), rel=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_large_corner_pays_its_powers_only_where_they_count_and_gives_the_same_bits(dtype):
    """Past SELECTIVE_POINTS the p-norm corner takes its powers only where a second term
    comes close enough to the largest to move it; everywhere it equals the full formula
    (ties, a term far below, p per point with a hard max among them, float32 terms), to a
    few units in the last place (the powers of a subset run numpy's loops on other arrays,
    which a CPU may round an ulp apart; a power left out where it counts is far more)."""
    from rooflinesim import timing

    rng = np.random.default_rng(2)
    n = 3 * timing.SELECTIVE_POINTS
    a = rng.uniform(1e-6, 1e-3, n).astype(dtype)
    b = (a * rng.choice([1e-9, 0.01, 0.3, 0.7, 1.0, 1.3, 40.0], n)).astype(dtype)
    c = np.asarray(a * 1e-12, dtype=dtype)
    for p in (29.96, 3.0, 1.5, np.where(rng.uniform(size=n) < 0.2, np.inf, rng.uniform(1.2, 40, n))):
        terms = [a, b, c, 2e-7]
        top = np.maximum(np.maximum(np.maximum(a, b), c), 2e-7)
        full = top * timing._power_sum(terms, top, p) ** (1.0 / p)
        got = timing.corner(terms, p)
        assert got.dtype == full.dtype
        assert np.allclose(got, full, rtol=8 * np.finfo(full.dtype).eps, atol=0)
