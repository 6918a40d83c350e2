"""The additive, hardware-free record of what a kernel (or a sequence of kernels) does.

Fields hold plain numbers, numpy arrays or sympy expressions alike. Records add
(``qkv + attention + o_proj``) and scale by a count (``layer * n_layers``), so a
layer's work is the sum of its kernels' work with no new code. Hardware meets these
counts only in :mod:`rooflinesim.timing`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

Number = Any  # int, float, numpy array or sympy expression

_SCALAR_FIELDS = (
    "vector_flops",
    "sfu_ops",
    "hbm_bytes",
    "l2_bytes",
    "link_bytes",
    "link_steps",
    "kernels",
)


@dataclass(frozen=True, kw_only=True)
class Work:
    """Counts of work.

    tensor_flops: FLOPs on the matrix units, keyed by the dtype they run in
        (its rate key in a GPU spec), e.g. ``{"bf16": 2*m*n*k}``.
    vector_flops: FLOPs on the general-purpose (fp32 SIMT) units.
    sfu_ops: special-function evaluations (exp, rsqrt) on the SFUs.
    hbm_bytes: bytes read plus written in device memory (HBM or GDDR).
    l2_bytes: bytes moved between L2 and the SMs (tile-level traffic).
    link_bytes: bytes each GPU sends over its inter-GPU link.
    link_steps: sequential latency-bound steps on the link (collective algorithm hops).
    kernels: kernel launches.
    """

    tensor_flops: Mapping[str, Number] = field(default_factory=dict)
    vector_flops: Number = 0
    sfu_ops: Number = 0
    hbm_bytes: Number = 0
    l2_bytes: Number = 0
    link_bytes: Number = 0
    link_steps: Number = 0
    kernels: Number = 0

    @property
    def flops(self) -> Number:
        """All FLOPs: matrix-unit plus vector (special functions are counted apart)."""
        total = self.vector_flops
        for v in self.tensor_flops.values():
            total = total + v
        return total

    def __add__(self, other: "Work") -> "Work":
        if not isinstance(other, Work):
            if other == 0:  # lets sum() start from 0
                return self
            return NotImplemented
        tensor = dict(self.tensor_flops)
        for key, value in other.tensor_flops.items():
            tensor[key] = tensor[key] + value if key in tensor else value
        scalars = {n: getattr(self, n) + getattr(other, n) for n in _SCALAR_FIELDS}
        return Work(tensor_flops=tensor, **scalars)

    __radd__ = __add__

    def __mul__(self, count: Number) -> "Work":
        if isinstance(count, Work):
            return NotImplemented
        tensor = {k: v * count for k, v in self.tensor_flops.items()}
        scalars = {n: getattr(self, n) * count for n in _SCALAR_FIELDS}
        return Work(tensor_flops=tensor, **scalars)

    __rmul__ = __mul__

    def as_dict(self) -> dict[str, Number]:
        out = {f"tensor_flops_{k}": v for k, v in self.tensor_flops.items()}
        out.update({n: getattr(self, n) for n in _SCALAR_FIELDS})
        return out


ZERO = Work()


def total(works) -> Work:
    """Sum a sequence of work records."""
    out = ZERO
    for w in works:
        out = out + w
    return out

