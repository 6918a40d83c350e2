"""Cost models, one module per kernel family. Each op is a frozen dataclass whose fields
may be numbers, numpy arrays (vectorized sweeps) or sympy symbols (formulas); its
``work()`` returns a hardware-free :class:`rooflinesim.work.Work`."""

from .attention import Attention
from .base import Op, op_class, op_names
from .collectives import Collective
from .gemm import Gemm
from .memory import Copy, Elementwise, Norm
from .moe import MoE

__all__ = ["Attention", "Collective", "Copy", "Elementwise", "Gemm", "MoE", "Norm", "Op",
           "op_class", "op_names"]
