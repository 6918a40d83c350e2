"""Exact counts of the cost models, written as the formulas they must equal."""

import numpy as np
import pytest
import sympy as sp

from rooflinesim.errors import UserError
from rooflinesim.ops import Attention, Collective, Copy, Elementwise, Gemm, MoE, Norm
from rooflinesim.ops.moe import expected_busiest, expected_touched
from rooflinesim.work import Work, total


def test_gemm_counts_bf16():
    m, n, k = 4096, 11008, 4096
    w = Gemm(m=m, n=n, k=k).work()
    assert w.tensor_flops == {"bf16": 2 * m * n * k}  # one FMA = 2 FLOPs
    assert w.hbm_bytes == 2 * (m * k + n * k + m * n)  # A, W read once; C written once
    assert w.kernels == 1


def test_gemm_fp8_writes_bf16_and_int4_counts_half_bytes_and_scales():
    m, n, k = 16, 8192, 8192
    fp8 = Gemm(m=m, n=n, k=k, dtype="fp8").work()
    assert fp8.tensor_flops == {"fp8": 2 * m * n * k}
    assert fp8.hbm_bytes == m * k + n * k + 2 * m * n
    w4 = Gemm(m=m, n=n, k=k, dtype="int4", group_size=128).work()
    # bf16 activations, 4-bit weights (0.5 byte), one bf16 scale per 128 weights, bf16 out
    assert w4.hbm_bytes == 2 * m * k + n * k / 2 + 2 * n * (k // 128) + 2 * m * n
    assert w4.tensor_flops == {"bf16": 2 * m * n * k}


def test_gemm_tiles_and_padding():
    g = Gemm(m=129, n=256, k=64)
    assert g.tiles() == 2 * 2  # ceil(129/128) * ceil(256/128)
    assert g.padded_flops() == 2 * 4 * 128 * 128 * 64
    # tile traffic: each tile streams 128 rows of A and of W through k, plus C once
    assert g.tile_bytes() == 4 * (128 * 2 + 128 * 2) * 64 + 2 * 129 * 256


def test_gemm_rejects_bad_input():
    with pytest.raises(UserError, match="positive"):
        Gemm(m=0, n=1, k=1)
    with pytest.raises(UserError, match="GEMM dtype"):
        Gemm(m=1, n=1, k=1, dtype="fp4")


def test_attention_exact_causal_pairs():
    # bottom-right causal: query i of sq sees skv - sq + i + 1 keys
    sq, skv = 5, 9
    a = Attention(batch=1, heads=1, seq_q=sq, seq_kv=skv, head_dim=64, causal=True)
    assert a.pairs() == sum(skv - sq + i + 1 for i in range(sq))
    full = Attention(batch=1, heads=1, seq_q=sq, seq_kv=skv, head_dim=64, causal=False)
    assert full.pairs() == sq * skv
    w = a.work()
    assert w.tensor_flops["bf16"] == 4 * 64 * a.pairs()  # QK^T and PV, 2 FLOPs per FMA
    assert w.sfu_ops == a.pairs()  # one exp per score


def test_attention_gqa_traffic_and_naive_extra():
    b, h, g, s, d = 2, 32, 8, 1024, 128
    a = Attention(batch=b, heads=h, kv_heads=g, seq_q=s, seq_kv=s, head_dim=d, causal=False)
    q = o = b * h * s * d * 2
    kv = 2 * b * g * s * d * 2
    assert a.work().hbm_bytes == q + kv + o
    naive = Attention(batch=b, heads=h, kv_heads=g, seq_q=s, seq_kv=s, head_dim=d, causal=False,
                      variant="naive")
    assert naive.work().hbm_bytes == q + kv + o + 4 * b * h * s * s * 2  # write/read S and P
    assert naive.work().kernels == 3


def test_decode_paged_kv_rounds_up_to_pages():
    a = Attention(batch=4, heads=32, kv_heads=8, seq_q=1, seq_kv=1000, head_dim=128, page_size=16)
    assert a.stored_kv_len() == 1008
    assert a.bytes_kv() == 2 * 4 * 8 * 1008 * 128 * 2


def test_moe_uniform_routing_statistics():
    t, e, k = 64, 8, 2
    assert np.isclose(expected_touched(t, e, k), e * (1 - (1 - k / e) ** t))
    busiest = expected_busiest(t, e, k)
    assert t * k / e < busiest <= t
    moe = MoE(tokens=t, hidden=1024, ffn=2048, experts=e, top_k=k, routing_kernels=3, eager=False)
    names = [n for n, _ in moe.kernels()]
    assert names == ["router", "topk", "routing", "dispatch", "experts_gate_up", "experts_act",
                     "experts_down", "combine"]
    eager = MoE(tokens=t, hidden=1024, ffn=2048, experts=e, top_k=k)
    assert [n for n, _ in eager.kernels()] == [
        "router", "topk", "routing", "dispatch", "experts_gate_up", "experts_silu", "experts_mul",
        "experts_down", "combine_weights", "combine"]
    # PyTorch's ops one by one move more bytes than the fused kernels, never fewer FLOPs
    assert eager.work().hbm_bytes > moe.work().hbm_bytes
    assert eager.work().tensor_flops == moe.work().tensor_flops
    w = moe.work()
    # experts: gate+up (2F x H) and down (H x F) for every routed row; router T x E x H
    assert w.tensor_flops["bf16"] == 2 * t * k * 3 * 1024 * 2048 + 2 * t * e * 1024


def test_moe_explicit_counts_and_ep():
    counts = (10, 0, 0, 6, 0, 0, 0, 0)
    m = MoE(tokens=8, hidden=64, ffn=64, experts=8, top_k=2, tokens_per_expert=counts, ep=2)
    assert m.touched() == 2 and m.busiest() == 10
    assert m.rows_per_gpu() == 16  # both experts live on GPU 0
    assert [n for n, _ in m.kernels()].count("ep_dispatch") == 1
    with pytest.raises(UserError, match="one non-negative count per expert"):
        MoE(tokens=8, hidden=64, ffn=64, experts=8, top_k=2, tokens_per_expert=(1, 2))


def test_collective_conventions():
    s, n = 1 << 20, 8
    ring = Collective(kind="allreduce", bytes=s, world_size=n).work()
    assert ring.link_bytes == 2 * (n - 1) / n * s and ring.link_steps == 2 * (n - 1)
    ag = Collective(kind="allgather", bytes=s, world_size=n).work()
    assert ag.link_bytes == (n - 1) / n * s and ag.link_steps == n - 1
    with pytest.raises(UserError, match="at least 2"):
        Collective(kind="allreduce", bytes=s, world_size=1)


def test_memory_kernels():
    assert Copy(bytes=1000).work().hbm_bytes == 2000
    assert Elementwise(elements=10, kind="silu_mul").work().hbm_bytes == 3 * 10 * 2
    assert Norm(tokens=4, hidden=8).work().hbm_bytes == 2 * 32 * 2 + 8 * 2


def test_work_records_add_and_scale():
    a = Gemm(m=8, n=8, k=8).work()
    b = Gemm(m=8, n=8, k=8, dtype="fp8").work()
    s = a + b * 2
    assert s.tensor_flops == {"bf16": 1024, "fp8": 2048}
    assert s.kernels == 3
    assert total([a, a, a]) == a * 3
    assert sum([a, a]) == a * 2
    assert isinstance(Work() + a, Work)


def test_formulas_are_sympy_and_match_numbers():
    m, n, k = sp.symbols("m n k", positive=True)
    sym = Gemm(m=m, n=n, k=k).work()
    num = Gemm(m=100, n=300, k=700).work()
    assert sp.simplify(sym.tensor_flops["bf16"] - 2 * m * n * k) == 0
    assert float(sym.hbm_bytes.subs({m: 100, n: 300, k: 700})) == num.hbm_bytes
    assert float(sym.l2_bytes.subs({m: 100, n: 300, k: 700})) == float(num.l2_bytes)


def test_vectorized_ops():
    m = np.array([1, 16, 4096])
    w = Gemm(m=m, n=4096, k=4096).work()
    assert np.array_equal(w.tensor_flops["bf16"], 2 * m * 4096 * 4096)
