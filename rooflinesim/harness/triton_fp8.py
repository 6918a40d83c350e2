"""Block-scaled fp8 GEMMs in Triton, the kernel class vLLM and SGLang run for checkpoints
stored with 128 x 128 weight blocks (DeepSeek-V3/R1, the Qwen3 FP8 releases): e4m3
operands, one fp32 scale per 1 x 128 group of activations and per 128 x 128 block of
weights, fp32 accumulation, bf16 out.

- ``block_gemm``: a Linear layer, C[m, n] = A[m, k] @ W[n, k]^T.
- ``fused_moe``: an MoE layer's expert GEMM over routed rows sorted by expert and padded
  to the row tile (each row block belongs to one expert), reading its rows of A through
  the sorted token ids and writing each product back to its (token, choice) row.

Both walk k in steps of 128 (one scale group per step) and run one output tile per
program; the tile, its grouping and the pipeline depth are chosen per shape from
CONFIGS by timing them, as the engines ship tuned configurations per shape and GPU.
Imported only where Triton is (the GPU harness); everything else in the package runs
without it.
"""

from __future__ import annotations

import triton
import triton.language as tl

GROUP_K = 128  # the scale group along k (and the weights' block along n)

# (BLOCK_M, BLOCK_N, GROUP_M, num_warps, num_stages): the space the engines' tuned
# configurations for these kernels on Hopper come from (BLOCK_K is the scale group)
CONFIGS = (
    (16, 64, 1, 4, 4), (16, 128, 1, 4, 3), (32, 128, 1, 4, 3), (64, 64, 1, 4, 4),
    (64, 128, 8, 4, 3), (64, 128, 16, 4, 4), (128, 64, 8, 4, 3), (128, 128, 8, 8, 3),
    (128, 128, 16, 4, 3), (128, 256, 8, 8, 3),
)


@triton.jit
def _scaled_k_walk(a_ptrs, w_ptrs, as_ptrs, ws_ptrs, rows_in, cols_in, offs_k, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One output tile's fp32 sum over k in steps of one scale group: each step's product
    times its activation groups' and weight block's scales."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - step * BLOCK_K
        a = tl.load(a_ptrs, mask=rows_in[:, None] & (offs_k[None, :] < left), other=0.0)
        w = tl.load(w_ptrs, mask=cols_in[None, :] & (offs_k[:, None] < left), other=0.0)
        sa = tl.load(as_ptrs + step, mask=rows_in, other=0.0)
        sw = tl.load(ws_ptrs + step, mask=cols_in, other=0.0)
        acc += tl.dot(a, w) * sa[:, None] * sw[None, :]
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    return acc


@triton.jit
def grouped_tile(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Program ``pid``'s (row tile, column tile): GROUP_M row tiles walked together, for
    L2 reuse of W."""
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_here = min(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % rows_here, (pid % per_group) // rows_here


@triton.jit
def routed_tile(pid_m, sorted_ptr, expert_ptr, routed_rows, topk,
                BLOCK_M: tl.constexpr, PER_TOKEN_INPUT: tl.constexpr):
    """Row tile ``pid_m`` of the sorted routes: its (token, choice) rows, which of them are
    real (padding holds routed_rows), its expert, and the rows of A it reads: each token's
    hidden state once per choice for the first GEMM, else the first's output row."""
    row = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    real = row < routed_rows
    expert = tl.load(expert_ptr + pid_m)
    if PER_TOKEN_INPUT:
        a_row = row // topk
    else:
        a_row = row
    return row, real, expert, a_row


@triton.jit
def store_routed(acc, c_ptr, weight_ptr, row, real, offs_n, in_n, stride_cm, ROUTED_WEIGHT: tl.constexpr):
    """A routed tile's epilogue: each row times its routing weight where asked (the down
    GEMM), written back to its (token, choice) row in the output's dtype."""
    if ROUTED_WEIGHT:
        acc = acc * tl.load(weight_ptr + row, mask=real, other=0.0)[:, None]
    c_ptrs = c_ptr + row[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=real[:, None] & in_n[None, :])


@triton.jit
def _block_gemm_kernel(a_ptr, w_ptr, c_ptr, as_ptr, ws_ptr, M, N, K,
                       stride_am, stride_wn, stride_cm, stride_asm, stride_wsn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    in_m = offs_m < M
    in_n = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None]
    as_ptrs = as_ptr + offs_m * stride_asm
    ws_ptrs = ws_ptr + (offs_n // BLOCK_K) * stride_wsn
    acc = _scaled_k_walk(a_ptrs, w_ptrs, as_ptrs, ws_ptrs, in_m, in_n, offs_k, K, BLOCK_M, BLOCK_N, BLOCK_K)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_m[:, None] & in_n[None, :])


@triton.jit
def _fused_moe_kernel(a_ptr, w_ptr, c_ptr, as_ptr, ws_ptr, sorted_ptr, expert_ptr, weight_ptr,
                      N, K, padded_rows, routed_rows, topk,
                      stride_am, stride_we, stride_wn, stride_cm, stride_asm, stride_wse, stride_wsn,
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
    as_ptrs = as_ptr + a_row * stride_asm
    ws_ptrs = ws_ptr + expert * stride_wse + (offs_n // BLOCK_K) * stride_wsn
    acc = _scaled_k_walk(a_ptrs, w_ptrs, as_ptrs, ws_ptrs, real, in_n, offs_k, K, BLOCK_M, BLOCK_N, BLOCK_K)
    store_routed(acc, c_ptr, weight_ptr, row, real, offs_n, in_n, stride_cm, ROUTED_WEIGHT)


def block_gemm(a, a_scale, w, w_scale, out, config):
    """out[m, n] = (a * a_scale) @ (w * w_scale)^T with a [m, k] e4m3, a_scale [m, k/128],
    w [n, k] e4m3, w_scale [n/128, k/128] (fp32 scales); ``config`` one of CONFIGS."""
    m, k = a.shape
    n = w.shape[0]
    bm, bn, gm, warps, stages = config
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _block_gemm_kernel[grid](a, w, out, a_scale, w_scale, m, n, k,
                             a.stride(0), w.stride(0), out.stride(0), a_scale.stride(0), w_scale.stride(0),
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=GROUP_K,
                             GROUP_M=gm, num_warps=warps, num_stages=stages)
    return out


def fused_moe(a, a_scale, w, w_scale, out, routing, config, per_token_input, routed_weight=None):
    """The expert GEMM over ``routing`` (from ``sort_routes`` at the config's BLOCK_M): a
    [tokens or tokens x topk, k] e4m3 with a_scale [., k/128]; w [experts, n, k] e4m3 with
    w_scale [experts, n/128, k/128]; out [tokens x topk, n]."""
    sorted_rows, block_expert, topk, routed_rows = routing
    n, k = w.shape[1], w.shape[2]
    bm, bn, gm, warps, stages = config
    padded_rows = sorted_rows.numel()
    grid = (triton.cdiv(padded_rows, bm) * triton.cdiv(n, bn),)
    weights = routed_weight if routed_weight is not None else a_scale  # (unread without ROUTED_WEIGHT)
    _fused_moe_kernel[grid](a, w, out, a_scale, w_scale, sorted_rows, block_expert, weights,
                            n, k, padded_rows, routed_rows, topk,
                            a.stride(0), w.stride(0), w.stride(1), out.stride(0), a_scale.stride(0),
                            w_scale.stride(0), w_scale.stride(1),
                            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=GROUP_K, GROUP_M=gm,
                            PER_TOKEN_INPUT=per_token_input, ROUTED_WEIGHT=routed_weight is not None,
                            num_warps=warps, num_stages=stages)
    return out


def sort_routes(torch, choices, experts, block_m):
    """(sorted rows, expert of each row block, topk, routed rows) for ``choices`` [tokens,
    topk] of expert ids: the (token, choice) rows grouped by expert, each expert's group
    padded to a whole number of ``block_m`` row blocks with the value ``routed rows``
    (what the engines' align step builds before the expert GEMMs)."""
    tokens, topk = choices.shape
    flat = choices.reshape(-1)
    counts = torch.bincount(flat, minlength=experts)
    blocks = (counts + block_m - 1) // block_m
    order = torch.argsort(flat, stable=True)
    padded_counts = blocks * block_m
    starts = torch.cumsum(padded_counts, 0) - padded_counts
    sorted_rows = torch.full((int(padded_counts.sum()),), tokens * topk, dtype=torch.int32, device=flat.device)
    rank = torch.arange(flat.numel(), device=flat.device) - (torch.cumsum(counts, 0) - counts)[flat[order]]
    sorted_rows[starts[flat[order]] + rank] = order.to(torch.int32)
    block_expert = torch.repeat_interleave(torch.arange(experts, device=flat.device, dtype=torch.int32), blocks)
    return sorted_rows, block_expert, topk, tokens * topk
