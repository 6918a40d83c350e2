"""Memory-bound kernels: copy, elementwise (residual add, gated activation, ...),
RMSNorm/LayerNorm and row softmax. Their time is set by bytes, not FLOPs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..dtypes import bytes_per_element
from ..work import Work
from .base import Op, check_choice, check_positive


COPY_LAYOUTS = ("contiguous", "strided", "cast", "roll")


@dataclass(frozen=True)
class Copy(Op):
    """Device-to-device copy of one buffer of ``bytes``: it is read once and written once.

    ``graph_memcpy``: a contiguous ``copy_`` captured in a CUDA graph, which runs as the
    graph's memcpy node rather than a kernel (slower for large buffers: the profile's
    ``copy:graph_memcpy`` parameters). ``layout``: "contiguous"; "strided", PyTorch's generic,
    non-vectorized elementwise kernel, which runs where a source is strided or broadcast
    (``expand(...).reshape``: repeat_kv, the per-head keys MLA assembles; ops on the
    transposed q and k of a prefill; SiLU on a chunk of a fused gate_up); "cast", a copy that
    converts dtypes (a cast up to fp32: 2 bytes read and 4 written per element, ``bytes``
    their mean); "roll", ``torch.roll`` (a sliding cache shifted by one); each with its own
    profile parameters (``copy:strided``, ``copy:cast``, ``copy:roll``)."""

    bytes: Any
    name: str = ""
    graph_memcpy: bool = False
    layout: str = "contiguous"

    family: ClassVar[str] = "copy"

    def __post_init__(self):
        check_positive(bytes=self.bytes)
        check_choice("copy layout", self.layout, COPY_LAYOUTS)

    def work(self) -> Work:
        return Work(hbm_bytes=2 * self.bytes, kernels=1)


# kind -> (inputs read, outputs written, vector FLOPs, special-function ops) per output element
ELEMENTWISE = {
    "add": (2, 1, 1, 0),  # residual add
    "mul": (2, 1, 1, 0),
    "silu_mul": (2, 1, 4, 1),  # SwiGLU: silu(gate) * up, gate and up read, one exp
    "gelu_mul": (2, 1, 8, 1),  # GeGLU (tanh approximation)
    "silu": (1, 1, 3, 1),
    "scale": (1, 1, 1, 0),
    "cast": (1, 1, 0, 0),
    # to fp8 with a scale per 1 x 128 group (the engines' per-token-group quantization before a
    # block-scaled GEMM): a 16-bit element read, one byte and a 4-byte scale per 128 written
    "quant_fp8": (1, 0.5 + 2 / 128, 3, 0),
    # a row reduction (mean, sum): ``elements`` counts the inputs read; the outputs, one per
    # row, are left out
    "mean": (1, 0, 1, 0),
}


@dataclass(frozen=True)
class Elementwise(Op):
    """An elementwise kernel over ``elements`` output elements."""

    elements: Any
    kind: str = "add"
    dtype: str = "bf16"
    name: str = ""

    family: ClassVar[str] = "elementwise"

    def __post_init__(self):
        check_positive(elements=self.elements)
        check_choice("elementwise kind", self.kind, ELEMENTWISE)

    def work(self) -> Work:
        ins, outs, flops, sfu = ELEMENTWISE[self.kind]
        b = bytes_per_element(self.dtype)
        return Work(vector_flops=flops * self.elements, sfu_ops=sfu * self.elements,
                    hbm_bytes=(ins + outs) * self.elements * b, kernels=1)


NORM_KINDS = ("rmsnorm", "add_rmsnorm", "layernorm", "softmax")


@dataclass(frozen=True)
class Norm(Op):
    """RMSNorm or LayerNorm over rows of ``hidden``: read x and the weight, write y. Kind
    ``add_rmsnorm``: the residual add fused into RMSNorm, as the engines run it between a
    layer's blocks: x and the residual read, their sum written back as the residual and
    its norm as y."""

    tokens: Any
    hidden: Any
    dtype: str = "bf16"
    kind: str = "rmsnorm"
    name: str = ""

    family: ClassVar[str] = "norm"

    def __post_init__(self):
        check_positive(tokens=self.tokens, hidden=self.hidden)
        check_choice("norm kind", self.kind, NORM_KINDS)

    def work(self) -> Work:
        b = bytes_per_element(self.dtype)
        elems = self.tokens * self.hidden
        params = {"rmsnorm": 1, "add_rmsnorm": 1, "layernorm": 2, "softmax": 0}[self.kind]
        rows_moved = 4 if self.kind == "add_rmsnorm" else 2  # (x and the residual in, both out)
        # rmsnorm: square, sum, scale, weight (4/elt), the add one more; layernorm adds the
        # mean (6/elt); softmax: max, subtract, sum, divide (4/elt) and one exp per element
        flops = {"rmsnorm": 4, "add_rmsnorm": 5, "layernorm": 6, "softmax": 4}[self.kind] * elems
        sfu = elems if self.kind == "softmax" else self.tokens  # exp, or one rsqrt per row
        return Work(vector_flops=flops, sfu_ops=sfu,
                    hbm_bytes=rows_moved * elems * b + params * self.hidden * b, kernels=1)


@dataclass(frozen=True)
class Gather(Op):
    """Row gather/scatter (MoE dispatch permutation and weighted combine): reads
    ``rows_in`` rows of ``width`` elements and writes ``rows_out`` rows."""

    rows_in: Any
    rows_out: Any
    width: Any
    dtype: str = "bf16"
    kind: str = "gather"  # "indexed": eager PyTorch's index_select / index_add kernels
    name: str = ""

    family: ClassVar[str] = "gather"

    def __post_init__(self):
        check_positive(rows_in=self.rows_in, rows_out=self.rows_out, width=self.width)

    def work(self) -> Work:
        b = bytes_per_element(self.dtype)
        # a weighted combine adds rows_in rows into rows_out: one multiply-add per input element
        return Work(vector_flops=2 * self.rows_in * self.width,
                    hbm_bytes=(self.rows_in + self.rows_out) * self.width * b, kernels=1)


@dataclass(frozen=True)
class Bookkeeping(Op):
    """Small index kernels (sorts, histograms, prefix sums, fills) whose cost is their
    launches: ``kernels`` of them, moving ``bytes`` in all."""

    kernels: Any
    bytes: Any = 0
    name: str = ""

    family: ClassVar[str] = "bookkeeping"

    def work(self) -> Work:
        return Work(hbm_bytes=self.bytes, kernels=self.kernels)
