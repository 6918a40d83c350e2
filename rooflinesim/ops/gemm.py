"""Batched GEMM, as a Linear layer runs it: C[m, n] = A[m, k] @ W[n, k]^T, ``batch`` times.

Formats (activation, weight, output, math rate):
  fp64 (the fp64 tensor rate), fp32 (SIMT, no TF32), tf32, bf16, fp16: all operands in that dtype;
  fp8: e4m3 inputs, bf16 output (scales applied in the epilogue), fp8 rate;
  int8: int8 inputs, bf16 output, int8 rate;
  int4: weight-only w4a16 (GPTQ/AWQ style): bf16 activations, 4-bit weights with one
        bf16 scale per ``group_size`` weights along k, dequantized to bf16 math.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..dtypes import bytes_per_element
from ..errors import UserError
from ..symbolic import ceil
from ..work import Work
from .base import Op, check_choice, check_positive

# format -> (activation dtype, weight dtype, output dtype, math rate key)
FORMATS = {
    "fp64": ("fp64", "fp64", "fp64", "fp64_tensor"),
    "fp32": ("fp32", "fp32", "fp32", "fp32"),
    "tf32": ("fp32", "fp32", "fp32", "tf32"),
    "bf16": ("bf16", "bf16", "bf16", "bf16"),
    "fp16": ("fp16", "fp16", "fp16", "fp16"),
    "fp8": ("fp8", "fp8", "bf16", "fp8"),
    "int8": ("int8", "int8", "bf16", "int8"),
    "int4": ("bf16", "int4", "bf16", "bf16"),
}

# the kernel of fp8 checkpoints stored in 128 x 128 weight blocks (DeepSeek-V3/R1, the
# Qwen3 FP8 releases), as vLLM and SGLang run them: Triton, scales applied per k step;
# measured on its own (the harness's block_gemm) and fitted under its own key
BLOCK_GEMM = "triton-block-fp8"

# Nominal output tile of a tensor-core GEMM (a hardware-free default; a calibration
# profile may choose another): 128 x 128 is what cuBLAS/CUTLASS use for large shapes.
TILE_M = 128
TILE_N = 128


@dataclass(frozen=True)
class Gemm(Op):
    m: Any
    n: Any
    k: Any
    batch: Any = 1
    dtype: str = "bf16"
    group_size: int = 128  # int4 only: weights per scale along k
    name: str = ""  # what the GEMM is in a model (qkv_proj, lm_head, ...)
    # the kernel, where one was measured on its own and fitted under its own key
    # ("triton-block-fp8": fp8 with 128 x 128 weight blocks, as vLLM and SGLang run
    # block-quantized checkpoints); "": the library's kernels for the dtype
    backend: str = ""

    family: ClassVar[str] = "gemm"

    def __post_init__(self):
        check_choice("GEMM dtype", self.dtype, FORMATS)
        check_positive(m=self.m, n=self.n, k=self.k, batch=self.batch)
        if self.dtype == "int4":
            check_positive(group_size=self.group_size)

    @property
    def math_rate(self) -> str:
        return FORMATS[self.dtype][3]

    def flops(self):
        return 2 * self.batch * self.m * self.n * self.k  # one multiply-add = 2 FLOPs

    def bytes_a(self):
        return self.batch * self.m * self.k * bytes_per_element(FORMATS[self.dtype][0])

    def bytes_w(self):
        b = self.batch * self.n * self.k * bytes_per_element(FORMATS[self.dtype][1])
        if self.dtype == "int4":  # one bf16 scale per group along k
            b = b + self.batch * self.n * ceil(self.k / self.group_size) * bytes_per_element("bf16")
        return b

    def bytes_c(self):
        return self.batch * self.m * self.n * bytes_per_element(FORMATS[self.dtype][2])

    def ideal_bytes(self):
        """Each operand read once and the output written once."""
        return self.bytes_a() + self.bytes_w() + self.bytes_c()

    def tiles(self, tile_m=TILE_M, tile_n=TILE_N):
        """Output tiles (thread blocks) of a tile_m x tile_n tiling."""
        return self.batch * ceil(self.m / tile_m) * ceil(self.n / tile_n)

    def tile_bytes(self, tile_m=TILE_M, tile_n=TILE_N):
        """L2-to-SM traffic: every output tile streams its tile_m rows of A and tile_n rows
        of W through the whole k dimension, then writes its output tile."""
        return self._tile_reads(tile_m, tile_n) + self.bytes_c()

    def _tile_reads(self, tile_m, tile_n):
        a = bytes_per_element(FORMATS[self.dtype][0])
        w = bytes_per_element(FORMATS[self.dtype][1])
        per_tile = (tile_m * a + tile_n * w) * self.k
        return self.tiles(tile_m, tile_n) * per_tile

    def padded_flops(self, tile_m=TILE_M, tile_n=TILE_N):
        """FLOPs the tensor cores execute when partial edge tiles are computed whole."""
        return 2 * self.tiles(tile_m, tile_n) * tile_m * tile_n * self.k

    def work(self) -> Work:
        c = self.bytes_c()
        return Work(
            tensor_flops={self.math_rate: self.flops()},
            hbm_bytes=self.bytes_a() + self.bytes_w() + c,  # ideal_bytes()
            l2_bytes=self._tile_reads(TILE_M, TILE_N) + c,  # tile_bytes()
            kernels=1,
        )

    def intensity(self):
        """Arithmetic intensity at ideal traffic, FLOP per byte."""
        return self.flops() / self.ideal_bytes()


def linear(tokens, in_features, out_features, dtype="bf16", name="", group_size=128) -> Gemm:
    """The GEMM of a Linear layer applied to ``tokens`` rows."""
    if in_features is None or out_features is None:
        raise UserError("a linear layer needs in_features and out_features")
    return Gemm(m=tokens, n=out_features, k=in_features, dtype=dtype, name=name,
                group_size=group_size)
