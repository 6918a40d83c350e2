"""The fused MoE expert GEMM in Triton over 16-bit experts (bf16 or fp16), the kernel class
vLLM and SGLang run for MoE checkpoints stored in 16 bits (Mixtral, Qwen3-MoE, DeepSeek-V2-
Lite): the routed (token, choice) rows sorted by expert and padded to the row tile by an
align step (``triton_fp8.sort_routes``), each row block of one expert, its rows of A read
through the sorted ids, fp32 accumulation, each product written back to its (token,
choice) row, optionally times its routing weight.

One output tile per program, k walked in steps of BLOCK_K; the tile, the step, the
grouping and the pipeline depth are chosen per shape from CONFIGS by timing them, as the
engines ship tuned configurations per shape and GPU. Imported only where Triton is (the
GPU harness).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_fp8 import grouped_tile, routed_tile, store_routed

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages): the space the engines' tuned
# configurations for this kernel on Hopper come from (each within its shared memory)
CONFIGS = (
    (16, 32, 64, 1, 4, 4), (16, 64, 128, 1, 4, 4), (16, 128, 64, 1, 4, 4), (16, 64, 256, 1, 4, 3),
    (32, 64, 128, 1, 4, 4), (32, 128, 64, 8, 4, 4), (64, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4),
    (64, 256, 64, 8, 8, 3), (128, 128, 64, 8, 8, 4), (128, 256, 64, 16, 8, 3), (128, 128, 128, 16, 8, 3),
)


@triton.jit
def _fused_moe_kernel(a_ptr, w_ptr, c_ptr, sorted_ptr, expert_ptr, weight_ptr,
                      N, K, padded_rows, routed_rows, topk,
                      stride_am, stride_we, stride_wn, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, PER_TOKEN_INPUT: tl.constexpr, ROUTED_WEIGHT: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(padded_rows, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    row, real, expert, a_row = routed_tile(pid_m, sorted_ptr, expert_ptr, routed_rows, topk, BLOCK_M,
                                           PER_TOKEN_INPUT)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    in_n = offs_n < N
    a_ptrs = a_ptr + a_row[:, None] * stride_am + offs_k[None, :]
    w_ptrs = w_ptr + expert * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=real[:, None] & (offs_k[None, :] < left), other=0.0)
        w = tl.load(w_ptrs, mask=in_n[None, :] & (offs_k[:, None] < left), other=0.0)
        acc += tl.dot(a, w)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    store_routed(acc, c_ptr, weight_ptr, row, real, offs_n, in_n, stride_cm, ROUTED_WEIGHT)


def fused_moe(a, w, out, routing, config, per_token_input, routed_weight=None):
    """The expert GEMM over ``routing`` (from ``triton_fp8.sort_routes`` at the config's
    BLOCK_M): a [tokens or tokens x topk, k], w [experts, n, k] and out [tokens x topk, n],
    all of one 16-bit dtype; ``config`` one of CONFIGS."""
    sorted_rows, block_expert, topk, routed_rows = routing
    n, k = w.shape[1], w.shape[2]
    bm, bn, bk, gm, warps, stages = config
    padded_rows = sorted_rows.numel()
    grid = (triton.cdiv(padded_rows, bm) * triton.cdiv(n, bn),)
    weights = routed_weight if routed_weight is not None else sorted_rows  # (unread without ROUTED_WEIGHT)
    _fused_moe_kernel[grid](a, w, out, sorted_rows, block_expert, weights,
                            n, k, padded_rows, routed_rows, topk,
                            a.stride(0), w.stride(0), w.stride(1), out.stride(0),
                            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm,
                            PER_TOKEN_INPUT=per_token_input, ROUTED_WEIGHT=routed_weight is not None,
                            num_warps=warps, num_stages=stages)
    return out
