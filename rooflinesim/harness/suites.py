"""Measurement suites: lists of cases, each a small dict of shape fields.

Suites are data built by small deterministic functions (random ones use a fixed
seed). ``estimate_case_s`` gives the expected harness time of a case from the time of
one call (which ``rooflinesim harness run --list`` prices with the calibrated H200 model),
so a listing shows whether a suite fits its budget before a run.
This module imports only the standard library.
"""

from __future__ import annotations

import math
import random

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

COLLECTIVE_OPS = ("allreduce", "allgather", "reducescatter", "alltoall")

# Bytes per element of each harness dtype (fp8 is e4m3, one byte).
ELEMENT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "uint8": 1}

# Linear layers of LLMs as (n, k) = (out_features, in_features): Llama-3-8B qkv, o,
# gate-up, down; Llama-3-70B qkv, o, gate-up, down; and their TP-8 shards.
LINEAR_NK = [
    (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
    (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672),
    (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584),
]
LINEAR_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]

# (name, hidden, ffn per expert, experts, top_k)
MOE_MODELS = [
    ("mixtral-8x7b", 4096, 14336, 8, 2),
    ("qwen3-30b-a3b", 2048, 768, 128, 8),
    ("olmoe", 2048, 1024, 64, 8),
    ("deepseek-v3", 7168, 2048, 256, 8),
    ("qwen3-235b", 4096, 1536, 128, 8),
]

# (name, hidden, heads, kv_heads, head_dim, ffn); heads*head_dim may differ from
# hidden for tensor-parallel shards.
DECODER_MODELS = [
    ("llama-3-8b", 4096, 32, 8, 128, 14336),
    ("qwen2.5-7b", 3584, 28, 4, 128, 18944),
    ("llama-3-70b-tp8", 8192, 8, 1, 128, 3584),
    ("llama-3-70b-tp4", 8192, 16, 2, 128, 7168),
    ("small-2b", 2048, 16, 8, 128, 8192),
]

ATTENTION_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient")

# Caps that keep one case's memory bounded.
GEMM_MAX_OPERAND_BYTES = 4 * GIB
GEMM_MAX_FLOPS = 4e13
KV_MAX_BYTES = 16 * GIB
COPY_MAX_BYTES = 8 * GIB
RMSNORM_MAX_BYTES = 4 * GIB


# ----------------------------------------------------------------------------- cases

def gemm(m, n, k, dtype="bf16", batch=1):
    backend = "cublaslt-scaled-mm" if dtype == "fp8" else "cublas"
    return {"op": "gemm", "dtype": dtype, "m": m, "n": n, "k": k, "batch": batch,
            "backend": backend}


def attention(batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, dtype="bf16",
              backend="sdpa-flash"):
    return {"op": "attention", "dtype": dtype, "batch": batch, "heads": heads,
            "kv_heads": kv_heads, "seq_q": seq_q, "seq_kv": seq_kv, "head_dim": head_dim,
            "causal": bool(causal), "backend": backend}


def moe(tokens, hidden, ffn, experts, top_k, routing="random"):
    return {"op": "moe", "dtype": "bf16", "tokens": tokens, "hidden": hidden, "ffn": ffn,
            "experts": experts, "top_k": top_k, "routing": routing, "backend": "grouped_mm"}


def grouped_gemm(rows, n, k, experts, dtype="bf16"):
    backend = "scaled_grouped_mm" if dtype == "fp8" else "grouped_mm"
    return {"op": "grouped_gemm", "dtype": dtype, "rows": rows, "n": n, "k": k, "experts": experts,
            "backend": backend}


def collective(op, nbytes):
    return {"op": op, "dtype": "bf16", "bytes": nbytes, "backend": "nccl"}


def copy(nbytes):
    # bf16 buffers when the size allows it, bytes otherwise: the size is always exact.
    return {"op": "copy", "dtype": "bf16" if nbytes % 2 == 0 else "uint8", "bytes": nbytes,
            "backend": "torch-copy"}


def rmsnorm(tokens, hidden):
    return {"op": "rmsnorm", "dtype": "bf16", "tokens": tokens, "hidden": hidden,
            "backend": "torch-rms_norm"}


def add_rmsnorm(tokens, hidden):
    return {"op": "add_rmsnorm", "dtype": "bf16", "tokens": tokens, "hidden": hidden,
            "backend": "triton-fused-add-rmsnorm"}


def decoder_layer(mode, batch, seq, hidden, heads, kv_heads, head_dim, ffn):
    return {"op": "decoder_layer", "dtype": "bf16", "mode": mode, "batch": batch,
            "seq": seq, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "ffn": ffn, "backend": "sdpa-default"}


_DEFAULT_BACKENDS = {"attention": "sdpa-flash", "moe": "grouped_mm", "copy": "torch-copy",
                     "rmsnorm": "torch-rms_norm", "decoder_layer": "sdpa-default"}


def with_defaults(case):
    """A hand-written case completed with the default dtype (bf16) and backend."""
    c = dict(case)
    c.setdefault("dtype", "bf16")
    if c["op"] == "gemm":
        c.setdefault("batch", 1)
        c.setdefault("backend", "cublaslt-scaled-mm" if c["dtype"] == "fp8" else "cublas")
    elif c["op"] in COLLECTIVE_OPS:
        c.setdefault("backend", "nccl")
    elif c["op"] in _DEFAULT_BACKENDS:
        c.setdefault("backend", _DEFAULT_BACKENDS[c["op"]])
    return c


def _with_backends(make, *args, backends=ATTENTION_BACKENDS, **kw):
    return [make(*args, backend=b, **kw) for b in backends]


def _kv_bytes(batch, kv_heads, seq_kv, head_dim, elem=2):
    return 2 * batch * kv_heads * seq_kv * head_dim * elem  # K and V


def _gemm_fits(c):
    e = ELEMENT_BYTES[c["dtype"]]
    out_e = 2 if c["dtype"] == "fp8" else e
    b, m, n, k = c["batch"], c["m"], c["n"], c["k"]
    operands = b * (m * k * e + n * k * e + m * n * out_e)
    return operands <= GEMM_MAX_OPERAND_BYTES and 2 * b * m * n * k <= GEMM_MAX_FLOPS


# ---------------------------------------------------------------------------- suites

def gemm_linear_cases():
    cases = [gemm(m, n, k) for (n, k) in LINEAR_NK for m in LINEAR_M]
    cases += [gemm(m, n, k, "fp8") for (n, k) in LINEAR_NK
              for m in (1, 8, 64, 256, 1024, 4096, 16384)]
    cases += [gemm(m, n, k, "fp16") for (n, k) in LINEAR_NK[:8] for m in (1, 64, 1024, 8192)]
    return cases


def gemm_square_cases():
    sizes = [2 ** p for p in range(6, 15)] + [1000, 3000, 5000, 6000]
    cases = []
    for dt in ("bf16", "fp16", "fp8", "tf32", "fp32"):
        for s in sizes:
            if dt in ("tf32", "fp32") and s > 8192:
                continue
            if dt == "fp8" and s % 16:
                continue  # torch._scaled_mm needs k and n divisible by 16
            cases.append(gemm(s, s, s, dt))
    return cases


def _round_dim(x, mult):
    return x if x < mult else max(mult, int(round(x / mult)) * mult)


GEMM_DTYPE_MIX = (("bf16", 0.70), ("fp16", 0.10), ("fp8", 0.15), ("tf32", 0.05))
# later held-out sets: fp32 without TF32 too (the first ten sets have none)
GEMM_DTYPE_MIX_FP32 = (("bf16", 0.60), ("fp16", 0.10), ("fp8", 0.15), ("tf32", 0.075), ("fp32", 0.075))


def _pick(rng, mix):
    r, acc = rng.random(), 0.0
    for value, share in mix:
        acc += share
        if r < acc:
            return value
    return mix[-1][0]


def gemm_random_cases(count=250, seed=20240601, dtypes=GEMM_DTYPE_MIX):
    """Seeded random GEMMs: m log-uniform in [1, 16384], n and k in [32, 32768]; the
    dtype drawn from ``dtypes`` ((dtype, share) pairs)."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        m = int(round(math.exp(rng.uniform(0, math.log(16384)))))
        n = int(round(math.exp(rng.uniform(math.log(32), math.log(32768)))))
        k = int(round(math.exp(rng.uniform(math.log(32), math.log(32768)))))
        r = rng.random()
        mult = 64 if r < 0.4 else 8 if r < 0.7 else 1
        m, n, k = (_round_dim(x, mult) for x in (m, n, k))
        dt = _pick(rng, dtypes)
        if dt == "fp8":  # torch._scaled_mm needs k and n divisible by 16
            n, k = (-(-x // 16) * 16 for x in (n, k))
        c = gemm(m, n, k, dt)
        if _gemm_fits(c):
            cases.append(c)
    return cases


def gemm_bmm_cases():
    shapes = [(256, 256, 128), (1024, 1024, 128), (512, 4096, 4096)]
    return [gemm(m, n, k, "bf16", batch=b) for b in (4, 16, 64) for (m, n, k) in shapes]


def gemm_suite():
    return gemm_linear_cases() + gemm_square_cases() + gemm_random_cases() + gemm_bmm_cases()


def attention_fa3_cases():
    """FlashAttention-3 benchmark grid: hidden 2048, 16k tokens per batch."""
    cases = []
    for dt in ("bf16", "fp16"):
        for d in (64, 128, 256):
            for seq in (512, 1024, 2048, 4096, 8192, 16384):
                for causal in (False, True):
                    h = 2048 // d
                    cases += _with_backends(attention, 16384 // seq, h, h, seq, seq, d,
                                            causal, dt)
    return cases


def attention_gqa_prefill_cases():
    cases = []
    for h, kv, d in ((32, 8, 128), (64, 8, 128), (32, 1, 128)):
        for seq in (128, 333, 1000, 2048, 4096, 8192, 16384, 32768):
            for b in (1, 4, 8):  # batch 4 only from 1000 tokens up, to thin the grid
                if b * seq <= 65536 and (b != 4 or seq >= 1000):
                    cases += _with_backends(attention, b, h, kv, seq, seq, d, True)
    return cases


def attention_decode_cases():
    cases = []
    for h, kv, d in ((32, 8, 128), (64, 8, 128), (32, 32, 128), (16, 16, 64)):
        for b in (1, 4, 16, 64, 256):
            for skv in (128, 1000, 4096, 16384, 65536, 131072):
                if _kv_bytes(b, kv, skv, d) <= KV_MAX_BYTES:
                    cases += _with_backends(attention, b, h, kv, 1, skv, d, False)
    return cases


def attention_random_cases(count=60, seed=20240602, head_dims=(64, 96, 128, 128, 256)):
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        d = rng.choice(head_dims)
        h = rng.choice((4, 8, 12, 16, 24, 32, 40, 64))
        kv = rng.choice([x for x in (1, 2, 4, 8, h) if h % x == 0])
        b = rng.choice((1, 1, 2, 3, 4, 8, 16))
        dt = rng.choice(("bf16", "bf16", "fp16"))
        backend = rng.choice(ATTENTION_BACKENDS)
        if rng.random() < 0.5:  # prefill, causal
            s = int(round(math.exp(rng.uniform(math.log(64), math.log(16384)))))
            if b * s > 65536:
                continue
            cases.append(attention(b, h, kv, s, s, d, True, dt, backend))
        else:  # decode: a few new tokens against a long cache
            sq = rng.choice((1, 1, 1, 2, 4))
            skv = int(round(math.exp(rng.uniform(math.log(128), math.log(131072)))))
            if _kv_bytes(b, kv, skv, d) > KV_MAX_BYTES:
                continue
            cases.append(attention(b, h, kv, sq, skv, d, False, dt, backend))
    return cases


def attention_suite():
    return (attention_fa3_cases() + attention_gqa_prefill_cases() + attention_decode_cases()
            + attention_random_cases())


def moe_suite():
    return [moe(t, hd, f, e, k, r) for (_, hd, f, e, k) in MOE_MODELS
            for t in (1, 4, 16, 64, 256, 1024, 4096, 16384) for r in ("random", "balanced")]


def copy_sizes():
    sizes = set()
    p = KIB
    while p <= COPY_MAX_BYTES:
        sizes.add(p)
        if p * 3 // 2 <= COPY_MAX_BYTES:
            sizes.add(p * 3 // 2)
        p *= 2
    sizes.update({1000, 12345, 1000003, 10 ** 8 + 7, 3 * 10 ** 9})
    return sorted(sizes)


def memory_suite():
    cases = [copy(b) for b in copy_sizes()]
    for t in (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536):
        for hd in (1024, 2048, 2880, 4096, 5120, 7168, 8192, 16384):
            if t * hd * 2 <= RMSNORM_MAX_BYTES:
                cases.append(rmsnorm(t, hd))
    return cases


def decoder_suite():
    cases = []
    for (_, hd, h, kv, d, f) in DECODER_MODELS:
        for b in (1, 2, 4, 8):
            for s in (128, 512, 2048, 8192):
                if b * s <= 32768:
                    cases.append(decoder_layer("prefill", b, s, hd, h, kv, d, f))
        for b in (1, 8, 32, 128, 256):
            for s in (512, 2048, 8192, 32768):
                if _kv_bytes(b, kv, s + 1, d) <= KV_MAX_BYTES:
                    cases.append(decoder_layer("decode", b, s, hd, h, kv, d, f))
    return cases


def collective_sizes():
    sizes = [2 ** p for p in range(10, 31)]  # 1 KiB .. 1 GiB
    sizes += [3 * MIB, 5 * MIB, 48 * MIB, 96 * MIB, 384 * MIB]  # odd, multiples of 128 B
    return sorted(sizes)


def collectives_suite():
    return [collective(op, b) for op in COLLECTIVE_OPS for b in collective_sizes()]


def quick_suite():
    cases = []
    for (n, k) in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (1280, 8192),
                   (8192, 3584)):
        cases += [gemm(m, n, k) for m in (1, 16, 128, 1024, 4096)]
    cases += [gemm(s, s, s) for s in (256, 1024, 4096, 8192)]
    cases += [gemm(m, n, k, "fp16") for m in (1, 128, 4096) for (n, k) in ((4096, 4096),
                                                                           (28672, 4096))]
    cases += [gemm(m, n, k, "fp8") for m in (1, 128, 4096)
              for (n, k) in ((4096, 4096), (28672, 4096), (4096, 14336))]
    cases += [gemm(s, s, s, dt) for dt in ("tf32", "fp32") for s in (1024, 4096)]
    cases += [gemm(m, n, k) for (m, n, k) in ((3, 1000, 333), (77, 5120, 1536), (999, 4097, 2048),
                                              (4000, 12345, 4000), (250, 7, 4096))]
    cases += [gemm(1024, 1024, 128, "bf16", batch=16), gemm(512, 4096, 4096, "bf16", batch=4)]
    for spec in ((4, 16, 16, 1024, 1024, 128, True, "bf16"),
                 (4, 16, 16, 4096, 4096, 128, False, "fp16"),
                 (8, 8, 8, 2048, 2048, 256, True, "bf16"),
                 (1, 32, 8, 2048, 2048, 128, True, "bf16"),
                 (4, 32, 8, 333, 333, 128, True, "bf16"),
                 (16, 32, 8, 1, 4096, 128, False, "bf16"),
                 (64, 64, 8, 1, 16384, 128, False, "bf16"),
                 (1, 32, 8, 1, 131072, 128, False, "bf16"),
                 (4, 32, 1, 1, 1000, 128, False, "bf16"),
                 (256, 16, 16, 1, 1000, 64, False, "bf16")):
        cases += _with_backends(attention, *spec)
    cases += [moe(t, 4096, 14336, 8, 2) for t in (1, 64, 4096)]
    cases += [moe(t, 2048, 768, 128, 8) for t in (16, 1024, 16384)]
    cases += [moe(1024, 2048, 768, 128, 8, "balanced"), moe(256, 2048, 1024, 64, 8, "balanced")]
    cases += [moe(t, 7168, 2048, 256, 8) for t in (256, 4096)]
    cases += [copy(b) for b in (KIB, 16 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 24 * MIB,
                                64 * MIB, 256 * MIB, GIB, 3 * GIB // 2, 4 * GIB, 1000000,
                                12345679, 100 * MIB + 6)]
    cases += [rmsnorm(t, hd) for t in (1, 16, 256, 4096, 16384) for hd in (4096, 8192)]
    llama8, qwen7, tp8, _, small = (m[1:] for m in DECODER_MODELS)
    cases += [decoder_layer("prefill", 1, 512, *llama8), decoder_layer("prefill", 4, 2048, *llama8),
              decoder_layer("decode", 1, 2048, *llama8), decoder_layer("decode", 32, 8192, *llama8),
              decoder_layer("decode", 128, 2048, *llama8), decoder_layer("prefill", 1, 2048, *tp8),
              decoder_layer("decode", 8, 8192, *tp8), decoder_layer("prefill", 2, 128, *small),
              decoder_layer("decode", 256, 512, *small), decoder_layer("decode", 8, 32768, *qwen7)]
    sizes = (4 * KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, GIB)
    cases += [collective(op, b) for op in COLLECTIVE_OPS for b in sizes]
    return cases


def _log_uniform(rng, lo, hi):
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def _random_layers(rng, count):
    """Decoder layers of random widths, prefill (any prompt length) or decode."""
    cases = []
    while len(cases) < count:
        d = 128
        h = rng.choice((8, 12, 16, 24, 28, 32, 40))
        kv = rng.choice([x for x in (1, 2, 4, 8) if h % x == 0])
        hd = rng.choice((2048, 3072, 3584, 4096, 5120, 8192))
        f = rng.choice((2816, 5632, 8192, 11008, 13824, 14336))
        if rng.random() < 0.5:
            b, sq = rng.choice((1, 2, 4)), _log_uniform(rng, 64, 8192)
            if b * sq <= 32768:
                cases.append(decoder_layer("prefill", b, sq, hd, h, kv, d, f))
        else:
            b, sq = _log_uniform(rng, 1, 256), _log_uniform(rng, 256, 32768)
            if _kv_bytes(b, kv, sq + 1, d) <= KV_MAX_BYTES:
                cases.append(decoder_layer("decode", b, sq, hd, h, kv, d, f))
    return cases


def _random_moe(rng, count, hiddens, ffns, experts, max_tokens):
    """MoE layers of random widths, expert counts, top-k, token counts and routing."""
    cases = []
    while len(cases) < count:
        hd, f, e = rng.choice(hiddens), rng.choice(ffns), rng.choice(experts)
        k = rng.choice([x for x in (1, 2, 4, 6, 8) if x <= e])
        t = _log_uniform(rng, 1, max_tokens)
        if 2 * e * 3 * f * hd <= 24 * GIB:
            cases.append(moe(t, hd, f, e, k, rng.choice(("random", "random", "balanced"))))
    return cases


MOE_RANDOM_HIDDEN = (1024, 1536, 2048, 3072, 4096, 5120, 7168)
MOE_RANDOM_FFN = (256, 384, 512, 768, 1024, 1408, 1536, 2048, 4096, 14336)
MOE_RANDOM_EXPERTS = (8, 16, 32, 60, 64, 128, 256)


def moe_random_suite(seed=8117):
    """Calibration MoE layers of random shapes (small ones included, where eager launches
    are paced by the host's few dozen PyTorch ops); its seed is used by no other suite."""
    return _random_moe(random.Random(seed), 80, MOE_RANDOM_HIDDEN, MOE_RANDOM_FFN, MOE_RANDOM_EXPERTS, 16384)


# The expert GEMMs one GPU runs, as (n, k, experts): gate-up (n = 2 x the expert's ffn
# shard) and down, of DeepSeek-V3 at TP 8 and EP 8, Mixtral-8x7B at TP 1 and TP 2,
# Qwen3-30B-A3B whole and Qwen3-235B-A22B at TP 8.
EXPERT_GEMMS = [
    (512, 7168, 256), (7168, 256, 256), (4096, 7168, 32), (7168, 2048, 32),
    (28672, 4096, 8), (4096, 14336, 8), (14336, 4096, 8), (4096, 7168, 8),
    (1536, 2048, 128), (2048, 768, 128), (384, 4096, 128), (4096, 192, 128),
]
GROUPED_MAX_FLOPS = 2e12  # (a case's product; the largest take a few ms)


def grouped_gemm_suite():
    """Calibration: the expert GEMMs of EXPERT_GEMMS in fp8 and bf16, over routed rows from
    a few per expert to tens of thousands."""
    cases = []
    for n, k, e in EXPERT_GEMMS:
        for rows in (64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536):
            if e <= rows and 2 * rows * n * k <= GROUPED_MAX_FLOPS:
                cases += [grouped_gemm(rows, n, k, e, dt) for dt in ("fp8", "bf16")]
    return cases


def block_gemm(m, n, k):
    return {"op": "block_gemm", "dtype": "fp8", "m": m, "n": n, "k": k, "backend": "triton-block-fp8"}


def fused_moe(tokens, topk, experts, n, k, input_rows, dtype="fp8"):
    return {"op": "fused_moe", "dtype": dtype, "tokens": tokens, "topk": topk, "experts": experts,
            "n": n, "k": k, "input": input_rows,
            "backend": "triton-fused-moe-fp8" if dtype == "fp8" else "triton-fused-moe"}


# the Linear layers (n, k) of checkpoints stored in 128 x 128 fp8 blocks, per GPU:
# DeepSeek-V3/R1 at TP 8 (fused q_a and kv_a, q_b, kv_b, o, the shared expert's and the
# dense layers' MLPs) and Qwen3-235B-A22B-FP8 at TP 4 (qkv, o)
BLOCK_LINEARS = [(2112, 7168), (3072, 1536), (4096, 512), (7168, 2048), (512, 7168), (7168, 256),
                 (4608, 7168), (7168, 2304), (2560, 4096), (4096, 2048)]
# their expert GEMMs (experts, topk, n, k, input): DeepSeek at TP 8, Qwen3-235B at TP 4,
# Qwen3-30B-A3B at TP 1
BLOCK_EXPERTS = [(256, 8, 512, 7168, "token"), (256, 8, 7168, 256, "row"),
                 (128, 8, 768, 4096, "token"), (128, 8, 4096, 384, "row"),
                 (128, 8, 1536, 2048, "token"), (128, 8, 2048, 768, "row")]
BLOCK_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def block_fp8_suite():
    """Calibration: block-scaled fp8 Linear layers and expert GEMMs (Triton, the engines'
    kernel class) at the shapes of BLOCK_LINEARS and BLOCK_EXPERTS, from one token to
    16,384."""
    cases = [block_gemm(m, n, k) for n, k in BLOCK_LINEARS for m in BLOCK_ROWS]
    cases += [fused_moe(t, topk, e, n, k, kind) for e, topk, n, k, kind in BLOCK_EXPERTS for t in BLOCK_ROWS]
    return cases


def block_fp8_holdout_suite(seed=80309):
    """Held out: block-scaled fp8 Linear layers and expert GEMMs of random widths, expert
    counts and token counts (a seed no other suite uses)."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < 40:
        n, k = rng.choice(range(256, 16385, 128)), rng.choice(range(256, 8193, 128))
        m = _log_uniform(rng, 1, 16384)
        if 2 * m * n * k <= GROUPED_MAX_FLOPS:
            cases.append(block_gemm(m, n, k))
    while len(cases) < 80:
        e = rng.choice((64, 128, 256))
        topk = rng.choice((4, 6, 8))
        n, k = rng.choice(range(256, 8193, 128)), rng.choice(range(256, 8193, 128))
        t = _log_uniform(rng, 1, 16384)
        if 2 * t * topk * n * k <= GROUPED_MAX_FLOPS and e * n * k <= 2 ** 30:
            cases.append(fused_moe(t, topk, e, n, k, rng.choice(("token", "row"))))
    return cases


# expert GEMMs of checkpoints stored in 16 bits (experts, topk, n, k, input): Mixtral-8x7B at
# TP 1, 2 and 4, Mixtral-8x22B at TP 8, Qwen3-30B-A3B and DeepSeek-V2-Lite at TP 1
EXPERTS16 = [(8, 2, 28672, 4096, "token"), (8, 2, 4096, 14336, "row"),
             (8, 2, 14336, 4096, "token"), (8, 2, 4096, 7168, "row"),
             (8, 2, 7168, 4096, "token"), (8, 2, 4096, 3584, "row"),
             (8, 2, 4096, 6144, "token"), (8, 2, 6144, 2048, "row"),
             (128, 8, 1536, 2048, "token"), (128, 8, 2048, 768, "row"),
             (64, 6, 2816, 2048, "token"), (64, 6, 2048, 1408, "row")]


def fused_moe16_suite():
    """Calibration: the engines' fused MoE kernel (Triton) over experts stored in bf16 at the
    shapes of EXPERTS16, from one token to 16,384."""
    return [fused_moe(t, topk, e, n, k, kind, "bf16") for e, topk, n, k, kind in EXPERTS16 for t in BLOCK_ROWS
            if 2 * t * topk * n * k <= GROUPED_MAX_FLOPS]


def fused_moe16_holdout_suite(seed=35899):
    """Held out: the fused MoE kernel over 16-bit experts (bf16 and fp16) of random widths,
    expert counts, choices and token counts (a seed no other suite uses)."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < 60:
        e = rng.choice((8, 16, 32, 64, 128))
        topk = rng.choice([x for x in (1, 2, 4, 6, 8) if x <= e])
        n, k = rng.choice(range(256, 16385, 128)), rng.choice(range(256, 8193, 128))
        t = _log_uniform(rng, 1, 16384)
        if 2 * t * topk * n * k <= GROUPED_MAX_FLOPS and e * n * k <= 2 ** 30:
            cases.append(fused_moe(t, topk, e, n, k, rng.choice(("token", "row")), rng.choice(("bf16", "fp16"))))
    return cases


# the residual add fused into RMSNorm: the widths of the models the engines serve (Llama-3.2-1B
# and 3B, 8B, Qwen3-32B's 5,120, 70B's 8,192, Mistral-Large's 12,288, 405B's 16,384), from
# one token to a 32,768-token step
ADD_NORM_WIDTHS = (2048, 3072, 4096, 5120, 8192, 12288, 16384)
ADD_NORM_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


# MLA decode (DeepSeek-V2/V3/R1, Kimi-K2): the engines' kernel on Hopper is FlashMLA
# (benchmarks/flashmla_build.py), a paged cache of 64-token blocks holding one latent KV
# head of 576 (the 512-wide latent and 64 rope dims), values its first 512. A case is
# written as the MQA the cost model prices MLA decode as (models/kernels.py, _mla): 2 x the
# query heads over one KV head of half the key's width, which has the kernel's bytes
# exactly and its FLOPs within 6% (2 x heads x keys x 1,152 against 1,088).
MLA_KEY_DIM = 576
MLA_QUERY_HEADS = (8, 16, 32, 64, 128)  # (DeepSeek-V3's 128 heads at TP 16, 8, 4, 2, 1)


def mla_decode(batch, query_heads, seq_kv):
    c = attention(batch, 2 * query_heads, 1, 1, seq_kv, MLA_KEY_DIM // 2, False, "bf16", "flashmla")
    c["query_heads"] = query_heads
    return c


def _mla_fits(batch, seq_kv):
    return _kv_bytes(batch, 1, seq_kv, MLA_KEY_DIM // 2) <= KV_MAX_BYTES


def mla_suite():
    """The calibration grid of FlashMLA's decode: each head count, batches 1-256, caches of
    128 to 65,536 tokens (the largest batches last)."""
    return [mla_decode(b, h, s) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)
            for s in (128, 512, 2048, 4096, 8192, 32768, 65536) for h in MLA_QUERY_HEADS if _mla_fits(b, s)]


def mla_holdout_suite(seed=57149, count=80):
    """Random MLA decode shapes off the calibration grid: any of its head counts, batches
    1-512 and caches of 64-131,072 tokens, log-uniform."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < count:
        b, s = _log_uniform(rng, 1, 512), _log_uniform(rng, 64, 131072)
        if _mla_fits(b, s):
            cases.append(mla_decode(b, rng.choice(MLA_QUERY_HEADS), s))
    return cases


def add_rmsnorm_suite():
    """Calibration: the engines' fused residual add and RMSNorm at ADD_NORM_WIDTHS x ADD_NORM_ROWS."""
    return [add_rmsnorm(t, hd) for hd in ADD_NORM_WIDTHS for t in ADD_NORM_ROWS
            if 3 * t * hd * 2 <= RMSNORM_MAX_BYTES]


def add_rmsnorm_holdout_suite(seed=86753):
    """Held out: the fused residual add and RMSNorm at random token counts and widths the
    calibration does not have (a seed no other suite uses)."""
    rng = random.Random(seed)
    return [add_rmsnorm(_log_uniform(rng, 1, 32768), rng.choice((1536, 2560, 3584, 6144, 7168, 10240)))
            for _ in range(48)]


def grouped_gemm_holdout_suite(seed=60221):
    """Held out: expert GEMMs of random widths, expert counts and routed rows (a seed no
    other suite uses), fp8 and bf16."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < 80:
        e = rng.choice((8, 16, 32, 64, 128, 256))
        n, k = rng.choice(range(128, 16385, 128)), rng.choice(range(128, 8193, 128))
        rows = _log_uniform(rng, max(e, 16), 65536)
        if 2 * rows * n * k <= GROUPED_MAX_FLOPS and e * n * k <= 2 ** 31:
            cases.append(grouped_gemm(rows, n, k, e, rng.choice(("fp8", "fp8", "bf16"))))
    return cases


def holdout_suite(seed=31337, gemm_dtypes=GEMM_DTYPE_MIX):
    """Random shapes of every op from seeds the calibration suites never use: the
    measurements a fitted profile is validated on, never fitted to."""
    rng = random.Random(seed)
    cases = gemm_random_cases(count=120, seed=seed + 1, dtypes=gemm_dtypes)
    cases += attention_random_cases(count=90, seed=seed + 2)
    cases += _random_moe(rng, 24, (1024, 2048, 2560, 3072, 4096, 5120, 6144),
                         (256, 512, 768, 1024, 1408, 2048, 4096, 8192), (8, 16, 32, 60, 64, 128), 8192)
    cases += [copy(_log_uniform(rng, 2 * KIB, 2 * GIB)) for _ in range(20)]
    cases += [rmsnorm(_log_uniform(rng, 1, 32768), rng.choice((1536, 2560, 3584, 4096, 5120, 6144, 12288)))
              for _ in range(20)]
    cases += _random_layers(rng, 30)
    sizes = sorted({_log_uniform(rng, 4 * KIB, GIB) // 128 * 128 for _ in range(10)})
    cases += [collective(op, b) for op in COLLECTIVE_OPS for b in sizes]
    return cases


def random_suite(seed=4242):
    """More random shapes of every single-GPU op, for calibration (its seed is not the
    holdout's): spreads the fit over odd sizes, head dims and routing it would not see
    in the structured suites."""
    rng = random.Random(seed)
    cases = gemm_random_cases(count=300, seed=seed + 1)
    cases += attention_random_cases(count=240, seed=seed + 2, head_dims=(64, 96, 128, 128, 192, 256))
    cases += _random_moe(rng, 40, MOE_RANDOM_HIDDEN, MOE_RANDOM_FFN, MOE_RANDOM_EXPERTS, 16384)
    cases += [copy(_log_uniform(rng, KIB, 4 * GIB)) for _ in range(40)]
    cases += [rmsnorm(_log_uniform(rng, 1, 65536), rng.choice(
        (768, 1024, 1536, 2048, 2560, 2880, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 12288, 16384)))
        for _ in range(80)]
    return [c for c in cases if c["op"] != "rmsnorm" or c["tokens"] * c["hidden"] * 2 <= RMSNORM_MAX_BYTES]


def _misaligned(x, rng):
    """x moved off every multiple of 8 (odd or 2 mod 4), as odd layer sizes are."""
    return x + 1 if x % 8 == 0 else x if rng.random() < 0.5 or x % 2 else x + 1


def _misaligned_gemm(rng, m, dtypes):
    """A GEMM of ``m`` rows whose k, n or both are moved off every multiple of 8."""
    n, k = _log_uniform(rng, 32, 32768), _log_uniform(rng, 32, 32768)
    which = rng.random()
    if which < 0.4:
        k = _misaligned(k, rng)
    elif which < 0.7:
        n = _misaligned(n, rng)
    else:
        n, k = _misaligned(n, rng), _misaligned(k, rng)
    return gemm(m, n, k, rng.choice(dtypes))


def focus_suite(seed=5151):
    """Calibration cases for the regimes random shapes sample thinly: short queries
    (2-64 tokens) against caches, short causal prefills, misaligned GEMMs of every
    size, RMSNorm rows and MoE layers. Its seed is used by no other suite."""
    rng = random.Random(seed)
    cases = []
    while sum(c["op"] == "attention" for c in cases) < 300:
        d = rng.choice((64, 96, 128, 128, 192, 256))
        h = rng.choice((4, 8, 12, 16, 24, 32, 40, 64))
        kv = rng.choice([x for x in (1, 2, 4, 8, h) if h % x == 0])
        b = rng.choice((1, 1, 2, 3, 4, 8, 16, 32))
        dt = rng.choice(("bf16", "bf16", "fp16"))
        backend = rng.choice(ATTENTION_BACKENDS)
        if rng.random() < 0.3:  # short causal prefill
            s = _log_uniform(rng, 16, 1024)
            cases.append(attention(b, h, kv, s, s, d, True, dt, backend))
        else:  # a few query tokens (decode, speculative) against a cache
            sq = rng.choice((1, 1, 2, 3, 4, 5, 8, 16, 32, 64))
            skv = _log_uniform(rng, 64, 65536)
            if _kv_bytes(b, kv, skv, d) <= 4 * GIB:
                cases.append(attention(b, h, kv, sq, max(skv, sq), d, False, dt, backend))
    while sum(c["op"] == "gemm" for c in cases) < 200:
        c = _misaligned_gemm(rng, _log_uniform(rng, 1, 16384), ("bf16", "bf16", "bf16", "fp16", "tf32"))
        if _gemm_fits(c):
            cases.append(c)
    cases += [rmsnorm(_log_uniform(rng, 1, 65536), rng.choice(
        (896, 1536, 2048, 2304, 3072, 3584, 4096, 5120, 7168, 8192, 12288)))
        for _ in range(60)]
    while sum(c["op"] == "moe" for c in cases) < 30:
        hd = rng.choice((1024, 2048, 2560, 3072, 4096, 5120, 7168))
        f = rng.choice((256, 512, 768, 1024, 1408, 2048, 4096, 8192))
        e = rng.choice((8, 16, 32, 60, 64, 128))
        k = rng.choice([x for x in (1, 2, 4, 6, 8) if x <= e])
        if 2 * e * 3 * f * hd <= 24 * GIB:
            cases.append(moe(_log_uniform(rng, 1, 8192), hd, f, e, k,
                             rng.choice(("random", "random", "balanced"))))
    return [c for c in cases if c["op"] != "rmsnorm" or c["tokens"] * c["hidden"] * 2 <= RMSNORM_MAX_BYTES]


def focus2_suite(seed=9091):
    """Calibration cases where the held-out sets showed the fit thin: skinny GEMMs with
    misaligned strides (cuBLAS's GEMV, small-N and split-K kernels), single-token and
    short queries against long caches with few KV heads (FlashAttention-2's many splits),
    cuDNN's decode kernel around its 512-key split, causal prefills of about one wave of
    blocks on the memory-efficient backend, and MoE layers with 64 to 2,048 routed rows
    per expert. Its seed is used by no other suite."""
    rng = random.Random(seed)
    cases = []
    while sum(c["op"] == "gemm" for c in cases) < 100:
        m = 1 if rng.random() < 0.25 else _log_uniform(rng, 2, 16)
        c = _misaligned_gemm(rng, m, ("bf16", "bf16", "bf16", "fp16"))
        if _gemm_fits(c):
            cases.append(c)
    while sum(c["op"] == "attention" for c in cases) < 90:
        d = rng.choice((64, 96, 128, 128, 256))
        h = rng.choice((8, 12, 16, 24, 32, 40, 64))
        dt = rng.choice(("bf16", "bf16", "fp16"))
        r = rng.random()
        if r < 0.45:  # few KV heads, long caches: many splits
            kv = rng.choice([x for x in (1, 2) if h % x == 0])
            b, sq = rng.choice((1, 1, 2, 4)), rng.choice((1, 1, 1, 2, 4))
            skv = _log_uniform(rng, 1024, 131072)
            backend = rng.choice(("sdpa-flash", "sdpa-flash", "sdpa-cudnn"))
            c = attention(b, h, kv, sq, max(skv, sq), d, False, dt, backend)
        elif r < 0.75:  # cuDNN's decode kernel around its split threshold
            kv = rng.choice([x for x in (1, 2, 4, 8, h) if h % x == 0])
            b, skv = _log_uniform(rng, 1, 32), _log_uniform(rng, 128, 4096)
            c = attention(b, h, kv, 1, skv, d, False, dt, "sdpa-cudnn")
        else:  # causal prefill of about one wave of blocks (this backend needs kv == heads)
            b, h, s = rng.choice((1, 2)), rng.choice((4, 8, 16)), _log_uniform(rng, 512, 8192)
            c = attention(b, h, h, s, s, d, True, dt, "sdpa-efficient")
        if _kv_bytes(c["batch"], c["kv_heads"], c["seq_kv"], d) <= 4 * GIB:
            cases.append(c)
    while sum(c["op"] == "moe" for c in cases) < 40:
        hd = rng.choice((1024, 2048, 2560, 3072, 4096, 5120, 7168))
        f = rng.choice((256, 512, 768, 1024, 1408, 2048, 4096))
        e = rng.choice((8, 16, 32, 60, 64, 128))
        k = rng.choice([x for x in (1, 2, 4, 6, 8) if x <= e])
        t = int(_log_uniform(rng, 64, 2048) * e / k)
        if 2 * e * 3 * f * hd <= 24 * GIB and t <= 16384:
            cases.append(moe(t, hd, f, e, k, rng.choice(("random", "random", "balanced"))))
    return cases


def _off_eight(x, rng):
    """x moved to a multiple of 2 or 4 that is not one of 8 (a 4- or 8-byte row stride
    in a 16-bit format)."""
    return x // 8 * 8 + rng.choice((2, 4, 6))


def focus3_suite(seed=6173):
    """Calibration cases for GEMMs whose row strides are under 16 bytes, which cuBLAS runs
    on older CUTLASS kernels loading one or two elements at a time: 16-bit GEMMs with 4-
    or 8-byte strides (short k against wide outputs among them), element-aligned ones,
    tf32 ones with odd sizes, and skinny ones of 2 to 8 rows. Its seed is used by no
    other suite."""
    rng = random.Random(seed)
    cases = []

    def add(c, until):
        if sum(x["op"] == "gemm" for x in cases) < until and _gemm_fits(c):
            cases.append(c)

    while sum(c["op"] == "gemm" for c in cases) < 160:  # 4- or 8-byte strides
        m = _log_uniform(rng, 9, 16384)
        n = _log_uniform(rng, 32, 32768)
        k = _log_uniform(rng, 32, 256) if rng.random() < 0.3 else _log_uniform(rng, 32, 32768)
        which = rng.random()
        n = _off_eight(n, rng) if which >= 0.4 else max(n // 8 * 8, 8)
        k = _off_eight(k, rng) if which < 0.7 else max(k // 8 * 8, 8)
        add(gemm(m, n, k, rng.choice(("bf16", "bf16", "fp16"))), 160)
    while sum(c["op"] == "gemm" for c in cases) < 260:  # element-aligned strides
        add(_misaligned_gemm(rng, _log_uniform(rng, 9, 16384), ("bf16", "bf16", "fp16")), 260)
    while sum(c["op"] == "gemm" for c in cases) < 320:  # tf32, odd sizes
        add(_misaligned_gemm(rng, _log_uniform(rng, 9, 16384), ("tf32",)), 320)
    while sum(c["op"] == "gemm" for c in cases) < 380:  # skinny
        c = _misaligned_gemm(rng, rng.randint(2, 8), ("bf16", "bf16", "fp16"))
        if rng.random() < 0.5:
            c = gemm(c["m"], _off_eight(c["n"], rng), _off_eight(c["k"], rng), c["dtype"])
        add(c, 380)
    return cases


def focus4_suite(seed=2503):
    """Calibration cases for the formats and sizes the other suites sample thinly: fp32
    GEMMs without TF32 (CUDA-core kernels) and with it, of random shapes and strides, and
    small GEMMs with misaligned strides (16-bit formats, 9 to 128 rows, short n and k).
    Its seed is used by no other suite."""
    rng = random.Random(seed)
    cases = [c for c in gemm_random_cases(count=170, seed=seed + 1, dtypes=(("fp32", 1.0),))]
    cases += gemm_random_cases(count=100, seed=seed + 2, dtypes=(("tf32", 1.0),))
    while len(cases) < 340:
        m, n, k = _log_uniform(rng, 9, 128), _log_uniform(rng, 32, 512), _log_uniform(rng, 32, 512)
        c = gemm(m, _misaligned(n, rng), k, rng.choice(("bf16", "bf16", "fp16"))) if rng.random() < 0.5 \
            else gemm(m, n, _misaligned(k, rng), rng.choice(("bf16", "bf16", "fp16")))
        cases.append(c)
    return cases


def tokens_suite(seed=7919):
    """Calibration cases at token counts that are not round, as prefills of real
    prompts give: GEMMs with any m against layer-sized (aligned) n and k, causal
    prefills of any length, and RMSNorm over such token counts. The other suites draw
    m from the same multiples as n and k, so aligned GEMMs rarely have an odd m there.
    Its seed is used by no other suite."""
    rng = random.Random(seed)
    cases = []
    while sum(c["op"] == "gemm" for c in cases) < 320:
        m = _log_uniform(rng, 16, 16384)
        n = _log_uniform(rng, 512, 57344) // 128 * 128
        k = _log_uniform(rng, 512, 32768) // 128 * 128
        r = rng.random()
        c = gemm(m, n, k, "bf16" if r < 0.55 else "fp16" if r < 0.65 else "fp8")
        if _gemm_fits(c):
            cases.append(c)
    while sum(c["op"] == "attention" for c in cases) < 120:
        d = rng.choice((64, 128, 128, 128, 256))
        h = rng.choice((8, 12, 16, 24, 28, 32, 40, 64))
        kv = rng.choice([x for x in (1, 2, 4, 8, h) if h % x == 0])
        b, s = rng.choice((1, 1, 2, 3, 4)), _log_uniform(rng, 64, 8192)
        backend = rng.choice(("sdpa-cudnn", "sdpa-cudnn", "sdpa-cudnn", "sdpa-flash", "sdpa-efficient"))
        if b * s <= 32768:
            cases.append(attention(b, h, kv, s, s, d, True, rng.choice(("bf16", "bf16", "fp16")), backend))
    cases += [rmsnorm(_log_uniform(rng, 16, 4096), rng.choice((2048, 3584, 4096, 5120, 7168, 8192, 12288, 16384)))
              for _ in range(60)]
    return cases


def cpu_tiny_suite():
    """numpy cases for a CPU and for CI: finishes in seconds on two cores."""
    cases = [{"op": "gemm", "dtype": "fp32", "m": m, "n": n, "k": k, "batch": 1, "backend": "numpy"}
             for (m, n, k) in ((1, 64, 64), (8, 128, 128), (64, 64, 64), (128, 256, 128),
                               (256, 256, 256), (33, 100, 77), (512, 512, 512), (1, 512, 512))]
    cases += [{"op": "gemm", "dtype": "fp64", "m": s, "n": s, "k": s, "batch": 1,
               "backend": "numpy"} for s in (64, 128, 256, 512)]
    cases += [{"op": "copy", "dtype": "uint8", "bytes": b, "backend": "numpy"}
              for b in (KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 2 * MIB, 4 * MIB, 8 * MIB)]
    cases += [{"op": "rmsnorm", "dtype": "fp32", "tokens": t, "hidden": hd, "backend": "numpy"}
              for (t, hd) in ((1, 1024), (16, 4096), (256, 1024), (64, 2048), (4, 512),
                              (128, 4096), (512, 512), (32, 8192))]
    return cases


_SUITES = {
    "quick": quick_suite,
    "gemm": gemm_suite,
    "attention": attention_suite,
    "moe": moe_suite,
    "memory": memory_suite,
    "collectives": collectives_suite,
    "decoder": decoder_suite,
    "holdout": holdout_suite,
    "random": random_suite,
    "focus": focus_suite,
    "holdout2": lambda: holdout_suite(seed=27182),
    "holdout3": lambda: holdout_suite(seed=16180),
    "tokens": tokens_suite,
    "holdout4": lambda: holdout_suite(seed=14142),
    "layers": lambda: _random_layers(random.Random(2718), 80),  # held out: whole layers
    "holdout5": lambda: holdout_suite(seed=57721),
    "layers2": lambda: _random_layers(random.Random(1618), 80),
    "holdout6": lambda: holdout_suite(seed=69314),
    "layers3": lambda: _random_layers(random.Random(4669), 80),
    "holdout7": lambda: holdout_suite(seed=30103),
    "layers4": lambda: _random_layers(random.Random(8314), 80),
    "focus2": focus2_suite,
    "holdout8": lambda: holdout_suite(seed=23026),
    "layers5": lambda: _random_layers(random.Random(6931), 80),
    "holdout9": lambda: holdout_suite(seed=17320),
    "layers6": lambda: _random_layers(random.Random(2236), 80),
    "focus3": focus3_suite,
    "holdout10": lambda: holdout_suite(seed=44721),
    "layers7": lambda: _random_layers(random.Random(7071), 80),
    "focus4": focus4_suite,
    "holdout11": lambda: holdout_suite(seed=52361, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "layers8": lambda: _random_layers(random.Random(3162), 80),
    "holdout12": lambda: holdout_suite(seed=61803, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "layers9": lambda: _random_layers(random.Random(4142), 80),
    "holdout13": lambda: holdout_suite(seed=77213, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "layers10": lambda: _random_layers(random.Random(5772), 80),
    "holdout14": lambda: holdout_suite(seed=91193, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "layers11": lambda: _random_layers(random.Random(6389), 80),
    "holdout15": lambda: holdout_suite(seed=33461, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "layers12": lambda: _random_layers(random.Random(8462), 80),
    "holdout16": lambda: holdout_suite(seed=24917, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "moe-random": moe_random_suite,
    "grouped-gemm": grouped_gemm_suite,
    "grouped-gemm-holdout": grouped_gemm_holdout_suite,
    "block-fp8": block_fp8_suite,
    "block-fp8-holdout": block_fp8_holdout_suite,
    "fused-moe16": fused_moe16_suite,
    "fused-moe16-holdout": fused_moe16_holdout_suite,
    "add-rmsnorm": add_rmsnorm_suite,
    "add-rmsnorm-holdout": add_rmsnorm_holdout_suite,
    "holdout17": lambda: holdout_suite(seed=40127, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "holdout18": lambda: holdout_suite(seed=71993, gemm_dtypes=GEMM_DTYPE_MIX_FP32),
    "cpu-tiny": cpu_tiny_suite,
    "mla": mla_suite,
    "mla-holdout": mla_holdout_suite,
    # a second draw, measured after FlashMLA's rule was revised on the first
    "mla-holdout2": lambda: mla_holdout_suite(seed=60013),
}
FULL_PARTS = ("gemm", "attention", "moe", "memory", "decoder", "collectives")
SUITE_NAMES = tuple(_SUITES) + ("full",)


def suite_cases(name):
    """The cases of a suite, each tagged with the suite it comes from."""
    if name == "full":
        return [c for part in FULL_PARTS for c in suite_cases(part)]
    if name not in _SUITES:
        raise KeyError(name)
    return [dict(c, suite=name) for c in _SUITES[name]()]


# ------------------------------------------------------------------- time estimates

# The harness's own protocol around each call (the call itself is priced by the
# calibrated model: `rooflinesim harness run --list`)
EST_CASE_OVERHEAD_S = 0.25  # allocation, warm-up, capture, profiler pass, record
EST_COLLECTIVE_STARTUP_S = 20.0  # process spawn and NCCL communicator setup, once
# ops that time their tile configurations (in CUDA graphs) before the case: about a second
# more a case (measure_h200.sh block1 and block2: 1.1-1.4 s a case in all)
EST_CONFIG_PICK_S = {"block_gemm": 1.0, "fused_moe": 1.0}


def estimate_case_s(call_s: float) -> float:
    """Expected harness seconds for a case whose call takes ``call_s``, following the
    timing rules of timing.py (calls per replay, replays, warm-up, capture)."""
    t = max(call_s, 1e-9)
    calls = min(256, max(1, math.ceil(2e-3 / t)))
    replay = calls * t
    replays = min(100, max(15, math.ceil(0.1 / replay)))
    warm_and_estimate = 3 * t + min(64, max(1, math.ceil(1e-3 / t))) * t + 3 * replay
    capture = calls * 30e-6
    return EST_CASE_OVERHEAD_S + warm_and_estimate + capture + replays * replay


def estimate_suite_s(cases, call_s, world_size=2):
    """Expected harness seconds for a list of cases (collectives only if world_size >= 2);
    ``call_s(cases, world_size)`` prices one call of each."""
    run = [c for c in cases if c["op"] not in COLLECTIVE_OPS or world_size >= 2]
    total = sum(estimate_case_s(t) for t in call_s(run, world_size)) if run else 0.0
    total += sum(EST_CONFIG_PICK_S.get(c["op"], 0.0) for c in run)
    if world_size >= 2 and any(c["op"] in COLLECTIVE_OPS for c in cases):
        total += EST_COLLECTIVE_STARTUP_S
    return total
