"""The residual add fused into RMSNorm in Triton, the kernel class vLLM, SGLang and
TensorRT-LLM run between a decoder layer's blocks (their fused_add_rms_norm: one block per
token): each program reads one row of x and of the residual, writes their sum back as the
residual and the normalized sum, times the weight, as the output; the whole row in
registers, fp32 arithmetic. Written here, not theirs. Imported only where Triton is (the
GPU harness and benchmarks/norm_kernels.py).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _fused_add_rms_norm(x_ptr, res_ptr, w_ptr, out_ptr, hidden, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * hidden + cols, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    tl.store(res_ptr + row * hidden + cols, s.to(res_ptr.dtype.element_ty), mask=mask)
    rms = tl.rsqrt(tl.sum(s * s, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * hidden + cols, (s * rms * w).to(out_ptr.dtype.element_ty), mask=mask)


def warps_for(hidden: int) -> int:
    """Warps per row: 8 up to 4,096 elements, 16 beyond (about 32 elements a thread at most)."""
    return 16 if hidden > 4096 else 8


def fused_add_rms_norm(x, residual, weight, out, eps: float) -> None:
    """residual <- x + residual; out <- rms_norm(residual) * weight (rows of x.shape[1])."""
    rows, hidden = x.shape
    _fused_add_rms_norm[(rows,)](x, residual, weight, out, hidden, eps, BLOCK=triton.next_power_of_2(hidden),
                                 num_warps=warps_for(hidden))
