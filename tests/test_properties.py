"""Properties every cost model and the timing step must keep, for any valid shape."""

import numpy as np
import pytest
import sympy as sp
from hypothesis import assume, given
from hypothesis import strategies as st

from rooflinesim.calibration.profile import IDEAL, GemmParams, Profile
from rooflinesim.hardware import load_spec
from rooflinesim.ops import Attention, Collective, Gemm
from rooflinesim.predict import predict

H100 = load_spec("h100")
dims = st.integers(min_value=1, max_value=1 << 15)
gemm_dtypes = st.sampled_from(["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"])
FITTED_LIKE = Profile(kind="fitted", kernels={"gemm": {"default": GemmParams(
    compute_efficiency=0.8, memory_efficiency=0.85, launch_s=3e-6, corner=3.0, tile_m=128,
    tile_n=128, k_overhead=64, wave_quantization=True, align8_compute=0.3, align2_compute=0.2, align2_memory=0.4,
    split_k_ratio=128)}})


@given(dims, dims, dims, gemm_dtypes, st.sampled_from([IDEAL, FITTED_LIKE]))
def test_attained_rate_never_above_peak(m, n, k, dtype, profile):
    t = predict(Gemm(m=m, n=n, k=k, dtype=dtype), H100, profile)
    rate = Gemm(m=m, n=n, k=k, dtype=dtype).math_rate
    assert t.attained_flop_per_s <= H100.peak(rate) * (1 + 1e-9)
    assert t.hbm_bytes / t.latency_s <= H100.memory.hbm_bandwidth_bytes_per_s * (1 + 1e-9)


@given(dims, dims, dims, st.integers(1, 256), st.sampled_from([IDEAL, FITTED_LIKE]))
def test_gemm_latency_monotone_in_size(m, n, k, steps, profile):
    # grow by whole 16-element steps so that row strides keep their alignment class
    # (a misaligned GEMM may rightly be slower than a larger aligned one)
    # the one allowed exception: a larger GEMM may drop the split-K reduction kernel
    # (more output tiles), which saves at most one launch
    extra = 16 * steps
    slack = profile.params("gemm", "bf16").launch_s
    base = predict(Gemm(m=m, n=n, k=k), H100, profile).latency_s
    for bigger in (Gemm(m=m + extra, n=n, k=k), Gemm(m=m, n=n + extra, k=k),
                   Gemm(m=m, n=n, k=k + extra)):
        assert predict(bigger, H100, profile).latency_s >= base * (1 - 1e-12) - slack


TILED_LIKE = Profile(kind="fitted", kernels={"gemm": {
    "default": FITTED_LIKE.kernels["gemm"]["default"],
    "bf16:align2_tiled": GemmParams(compute_efficiency=0.25, element_load_rate=1.3e10, cta_share=0.65,
                                      k_overhead=50.0, launch_s=2e-6, memory_efficiency=0.25, corner=20.0,
                                      split_k_s=1e-6)}})


@given(st.integers(9, 1 << 14), dims, dims, st.integers(1, 256))
def test_tiled_gemms_monotone_in_size(m, n, k, steps):
    """The fastest of configurations whose times each grow with the sizes grows with them:
    odd GEMMs above eight rows, grown by whole 16-element steps (same stride class)."""
    n, extra = n | 1, 16 * steps
    base = predict(Gemm(m=m, n=n, k=k), H100, TILED_LIKE).latency_s
    for bigger in (Gemm(m=m + extra, n=n, k=k), Gemm(m=m, n=n + extra, k=k), Gemm(m=m, n=n, k=k + extra)):
        assert predict(bigger, H100, TILED_LIKE).latency_s >= base * (1 - 1e-12)


@given(dims, dims, dims, st.floats(1.01, 10))
def test_more_bandwidth_never_slower(m, n, k, factor):
    mem = H100.memory.model_copy(
        update={"hbm_bandwidth_bytes_per_s": H100.memory.hbm_bandwidth_bytes_per_s * factor})
    faster = H100.model_copy(update={"memory": mem})
    for prof in (IDEAL, FITTED_LIKE):
        a = predict(Gemm(m=m, n=n, k=k), H100, prof).latency_s
        b = predict(Gemm(m=m, n=n, k=k), faster, prof).latency_s
        assert b <= a * (1 + 1e-12)


@given(dims, dims, dims)
def test_sympy_and_numpy_backends_agree(m, n, k):
    M, N, K = sp.symbols("m n k", positive=True)
    sym = Gemm(m=M, n=N, k=K).work()
    num = Gemm(m=np.array([m]), n=np.array([n]), k=np.array([k])).work()
    subs = {M: m, N: n, K: k}
    assert float(sym.hbm_bytes.subs(subs)) == pytest.approx(float(num.hbm_bytes[0]), rel=1e-12)
    assert float(sym.l2_bytes.subs(subs)) == pytest.approx(float(num.l2_bytes[0]), rel=1e-12)
    assert int(sym.tensor_flops["bf16"].subs(subs)) == int(num.tensor_flops["bf16"][0])


@given(st.integers(8192, 1 << 17), st.sampled_from([64, 128, 256]))
def test_causal_is_about_half_of_full_at_long_sequences(s, d):
    full = Attention(batch=1, heads=8, seq_q=s, seq_kv=s, head_dim=d, causal=False).flops()
    causal = Attention(batch=1, heads=8, seq_q=s, seq_kv=s, head_dim=d, causal=True).flops()
    assert abs(causal / full - 0.5) <= 1 / s  # exactly (s + 1) / (2 s)


@given(st.integers(1, 8), st.integers(1, 64), st.integers(1, 8192), st.integers(1, 8192))
def test_gqa_with_all_heads_equals_mha(b, h, sq, skv):
    assume(sq <= skv)
    mha = Attention(batch=b, heads=h, seq_q=sq, seq_kv=skv, head_dim=128)
    gqa = Attention(batch=b, heads=h, kv_heads=h, seq_q=sq, seq_kv=skv, head_dim=128)
    assert mha.work() == gqa.work()
    assert predict(mha, H100).latency_s == predict(gqa, H100).latency_s


@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 4096), st.sampled_from([4096, 8192, 14336]))
def test_tp_shards_add_up_to_the_whole(tp, tokens, ffn):
    hidden = 4096
    whole = Gemm(m=tokens, n=ffn, k=hidden)  # column-parallel: n sharded
    shard = Gemm(m=tokens, n=ffn // tp, k=hidden)
    assert shard.flops() * tp == whole.flops() or ffn % tp
    row = Gemm(m=tokens, n=hidden, k=ffn // tp)  # row-parallel: k sharded
    assert row.flops() * tp == Gemm(m=tokens, n=hidden, k=ffn).flops() or ffn % tp
    heads = Attention(batch=1, heads=32 // tp, kv_heads=8 // tp if tp <= 8 else 1, seq_q=tokens,
                      seq_kv=tokens, head_dim=128)
    all_heads = Attention(batch=1, heads=32, kv_heads=8, seq_q=tokens, seq_kv=tokens, head_dim=128)
    assert heads.flops() * tp == all_heads.flops()


@given(st.integers(1024, 1 << 30), st.sampled_from([2, 4, 8]))
def test_collective_busbw_never_above_link(size, n):
    t = predict(Collective(kind="allreduce", bytes=size, world_size=n), H100)
    assert t.losses["busbw_bytes_per_s"] <= H100.interconnect.link_bandwidth_bytes_per_s * (1 + 1e-9)


@given(dims, dims)
def test_work_is_additive(m, n):
    a, b = Gemm(m=m, n=n, k=64), Gemm(m=n, n=m, k=32)
    s = a.work() + b.work()
    assert s.hbm_bytes == a.work().hbm_bytes + b.work().hbm_bytes
    assert s.tensor_flops["bf16"] == a.flops() + b.flops()
