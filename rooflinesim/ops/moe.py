"""A mixture-of-experts layer with SwiGLU experts, as the kernels that run it:

router GEMM -> softmax/top-k -> dispatch permutation -> grouped GEMM (gate and up) ->
SiLU(gate)*up -> grouped GEMM (down) -> weighted combine, with an all-to-all before and
after the experts when they are sharded over ``ep`` GPUs (expert parallelism). Experts
stored in 128 x 128 fp8 blocks (``expert_backend`` BLOCK_MOE) or in 16 bits under an engine
(FUSED_MOE) run the engines' fused kernel, which reads each routed row's token through the
align step's sorted ids (no dispatch copy, unless an all-to-all sends the rows); the fp8
one takes its inputs quantized to fp8 per 1 x 128 group by a kernel before each expert GEMM.

How tokens land on experts is given by one of:
  tokens_per_expert: explicit counts (a tuple of length ``experts``);
  routing="uniform": each token picks top_k distinct experts uniformly: an expert is
      touched with probability 1-(1-k/E)^T, so E*(1-(1-k/E)^T) experts have work, and the
      busiest expert's load is the expected largest of the E dependent Binomial(T, k/E)
      loads (:mod:`rooflinesim.ops.routing`);
  imbalance=x: the busiest expert gets x times the mean load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..dtypes import bytes_per_element
from ..errors import UserError
from ..symbolic import ceil, is_symbolic, maximum, minimum, where
from ..work import Work, total
from .base import Op, check_choice, check_positive
from .collectives import Collective
from .gemm import FORMATS, TILE_M, Gemm
from .memory import Bookkeeping, Elementwise, Gather, Norm
from .routing import expected_busiest, expected_touched

# the engines' fused MoE kernel for experts stored in 128 x 128 fp8 blocks (Triton: rows
# sorted by expert and padded to the row tile by an align step, a kernel of its own);
# measured on its own (the harness's fused_moe) and fitted under its own key
BLOCK_MOE = "triton-fused-moe-fp8"
# the same kernel over experts stored in 16 bits (bf16, fp16), the engines' for Mixtral,
# Qwen3-MoE and the like (the harness's fused_moe at dtype bf16); its own key likewise
FUSED_MOE = "triton-fused-moe"
FUSED_BACKENDS = (BLOCK_MOE, FUSED_MOE)


@dataclass(frozen=True)
class GroupedGemm(Op):
    """One kernel computing a GEMM per expert: ``rows`` routed rows in all, spread over
    ``experts`` experts that have work, each [rows_e, k] @ W_e[n, k]^T."""

    rows: Any
    n: Any
    k: Any
    experts: Any
    dtype: str = "bf16"
    row_tiles: Any = None  # sum over experts of ceil(rows_e / TILE_M); default: even split
    name: str = ""
    # the kernel, where one was measured on its own (the harness's "scaled_grouped_mm":
    # PyTorch's fp8 grouped GEMM); "": an engine's fused MoE kernel, priced by the dtype's
    # fit (the layers') alone
    backend: str = ""

    family: ClassVar[str] = "grouped_gemm"

    def __post_init__(self):
        check_choice("GEMM dtype", self.dtype, FORMATS)
        check_positive(rows=self.rows, n=self.n, k=self.k, experts=self.experts)

    def tiles_m(self):
        if self.row_tiles is not None:
            return self.row_tiles
        return self.experts * ceil(self.rows / (self.experts * TILE_M))

    def work(self) -> Work:
        act, wt, out, rate = FORMATS[self.dtype]
        a, w, c = (bytes_per_element(x) for x in (act, wt, out))
        return Work(
            tensor_flops={rate: 2 * self.rows * self.n * self.k},
            hbm_bytes=self.rows * self.k * a + self.experts * self.n * self.k * w
            + self.rows * self.n * c,
            # PyTorch's: the problem-size setup kernel, then the grouped GEMM; the
            # engines' fused kernel reads the align step's sorted rows (a kernel of its own)
            kernels=1 if self.backend in FUSED_BACKENDS else 2,
        )


def _spread_tiles(experts, rows):
    """Sum over ``experts`` of ceil(rows_e / TILE_M) when ``rows`` spread evenly over them."""
    return experts * ceil(rows / (experts * TILE_M))


def _sharded(ep) -> bool:
    """Whether the experts are spread over more than one GPU."""
    if type(ep) is int:
        return ep > 1
    return is_symbolic(ep) or bool(np.count_nonzero(np.asarray(ep) > 1))


@dataclass(frozen=True)
class MoE(Op):
    tokens: Any
    hidden: Any
    ffn: Any  # per expert
    experts: Any
    top_k: Any
    dtype: str = "bf16"  # expert weight format (a GEMM format)
    act_dtype: str = "bf16"
    routing: str = "uniform"
    tokens_per_expert: tuple | None = None
    imbalance: Any = None
    ep: Any = 1  # expert-parallel degree: experts sharded over ep GPUs
    # small kernels of routing: top-k, sort by expert, histogram, offsets, weight
    # gathers and casts (about 20 in an eager PyTorch layer; fused engines run ~3)
    routing_kernels: int = 20
    # PyTorch ops one by one (as the harness measures a layer): SiLU and the multiply
    # apart, the routing weights applied to every routed row, and the combine as an
    # index_add that reads and writes an output row for each routed row; False: an
    # engine's fused kernels
    eager: bool = True
    # the expert GEMMs' kernel (GroupedGemm.backend): BLOCK_MOE for experts stored in
    # 128 x 128 fp8 blocks, FUSED_MOE for 16-bit ones, as the engines run them; "": the
    # dtype's fit
    expert_backend: str = ""
    name: str = ""

    family: ClassVar[str] = "moe"

    def __post_init__(self):
        check_positive(tokens=self.tokens, hidden=self.hidden, ffn=self.ffn,
                       experts=self.experts, top_k=self.top_k, ep=self.ep)
        check_choice("GEMM dtype", self.dtype, FORMATS)
        check_choice("routing", self.routing, ("uniform", "balanced", "explicit"))
        if not is_symbolic(self.top_k, self.experts) and (
                np.count_nonzero(np.asarray(self.top_k) > np.asarray(self.experts))):
            raise UserError("top_k cannot exceed the number of experts")
        if self.tokens_per_expert is not None:
            counts = np.asarray(self.tokens_per_expert)
            if counts.ndim != 1 or counts.size != int(self.experts) or np.any(counts < 0):
                raise UserError("tokens_per_expert needs one non-negative count per expert")
            object.__setattr__(self, "routing", "explicit")
        if self.imbalance is not None and not is_symbolic(self.imbalance):
            if np.any(np.asarray(self.imbalance) < 1):
                raise UserError("imbalance is the busiest expert's load over the mean; it must be >= 1")
        if not is_symbolic(self.experts, self.ep) and (
                np.count_nonzero(np.asarray(self.experts) % np.asarray(self.ep) != 0)):
            raise UserError("the expert-parallel degree must divide the number of experts")

    # --- routing statistics (per GPU when ep > 1) ---
    def routed_rows(self):
        return self.tokens * self.top_k

    def touched(self):
        """Experts with work (over all GPUs)."""
        if self.tokens_per_expert is not None:
            return int(np.count_nonzero(self.tokens_per_expert))
        if self.routing == "balanced" or self.imbalance is not None:
            return minimum(self.experts, self.routed_rows())
        return expected_touched(self.tokens, self.experts, self.top_k)

    def busiest(self):
        """Load (rows) of the busiest expert."""
        if self.tokens_per_expert is not None:
            return int(np.max(self.tokens_per_expert))
        if self.imbalance is not None:
            return minimum(self.tokens, self.imbalance * self._mean_load())
        if self.routing == "balanced":
            return ceil(self._mean_load())
        return expected_busiest(self.tokens, self.experts, self.top_k)

    def _mean_load(self):
        return self.routed_rows() / self.experts

    def rows_per_gpu(self):
        """Rows the busiest GPU computes: its experts' share, plus the excess of the
        busiest expert (which lives on one GPU)."""
        if self.tokens_per_expert is not None:
            per_gpu = np.asarray(self.tokens_per_expert).reshape(int(self.ep), -1).sum(axis=1)
            return int(per_gpu.max())
        if not _sharded(self.ep):
            return self.routed_rows() / self.ep
        excess = maximum(0, self.busiest() - self._mean_load())
        return self.routed_rows() / self.ep + where(self.ep > 1, excess, 0)

    def row_tiles(self):
        """Sum over experts of ceil(rows_e / TILE_M) on the busiest GPU."""
        if self.tokens_per_expert is not None:
            counts = np.asarray(self.tokens_per_expert).reshape(int(self.ep), -1)
            return int(np.ceil(counts / TILE_M).sum(axis=1).max())
        return _spread_tiles(self.touched() / self.ep, self.rows_per_gpu())

    # --- the kernels ---
    def kernels(self) -> list[tuple[str, Op]]:
        """The kernels one GPU runs. With ``ep`` > 1, ``tokens`` are those of the whole
        expert-parallel group: each GPU routes its own tokens / ep, sends their routed
        rows to the experts' GPUs, and computes the rows routed to its experts."""
        return [(name, cls(**args)) for name, cls, args in self.kernel_args()]

    def kernel_args(self) -> list[tuple[str, type, dict]]:
        """The kernels of :meth:`kernels` unbuilt: (name, op class, keyword arguments)."""
        t, h, f, e = self.tokens, self.hidden, self.ffn, self.experts
        local_tokens = t / self.ep
        local_routed = self.routed_rows() / self.ep
        rows = self.rows_per_gpu()
        experts_here = self.touched() / self.ep
        tiles = (self.row_tiles() if self.tokens_per_expert is not None
                 else _spread_tiles(experts_here, rows))
        ad = self.act_dtype
        moved = "indexed" if self.eager else "gather"  # PyTorch's index kernels, or an engine's
        sharded, block = _sharded(self.ep), self.expert_backend == BLOCK_MOE
        fused = self.expert_backend in FUSED_BACKENDS
        out = [
            ("router", Gemm, dict(m=local_tokens, n=e, k=h, dtype="bf16", name="router")),
            ("topk", Norm, dict(tokens=local_tokens, hidden=e, dtype="fp32", kind="softmax",
                                name="topk")),
            ("routing", Bookkeeping, dict(kernels=self.routing_kernels, bytes=local_routed * 16,
                                          name="routing")),
        ]
        if not fused or sharded:
            # (the engines' fused MoE kernel, as measured for BLOCK_MOE and FUSED_MOE, reads each
            # routed row's token through the align step's sorted ids: no copy of the rows before
            # it, unless an all-to-all must send them)
            out.append(("dispatch", Gather, dict(rows_in=local_routed, rows_out=local_routed, width=h,
                                                 dtype=ad, kind=moved, name="dispatch")))
        a2a_bytes = local_routed * h * bytes_per_element(ad)  # this GPU's send buffer
        if sharded:
            out.append(("ep_dispatch", Collective, dict(kind="alltoall", bytes=a2a_bytes,
                                                        world_size=self.ep, name="ep_dispatch")))
        if block:  # (the engines quantize the experts' inputs per 1 x 128 group, a kernel apart)
            out.append(("experts_quant_in", Elementwise, dict(elements=local_tokens * h, kind="quant_fp8",
                                                              dtype=ad, name="experts_quant_in")))
        out.append(("experts_gate_up", GroupedGemm, dict(rows=rows, n=2 * f, k=h, experts=experts_here,
                                                         dtype=self.dtype, row_tiles=tiles,
                                                         backend=self.expert_backend,
                                                         name="experts_gate_up")))
        if self.eager:
            out += [("experts_silu", Elementwise, dict(elements=rows * f, kind="silu", dtype=ad,
                                                       name="experts_silu")),
                    ("experts_mul", Elementwise, dict(elements=rows * f, kind="mul", dtype=ad,
                                                      name="experts_mul"))]
        else:
            out.append(("experts_act", Elementwise, dict(elements=rows * f, kind="silu_mul", dtype=ad,
                                                         name="experts_act")))
        if block:
            out.append(("experts_quant_mid", Elementwise, dict(elements=rows * f, kind="quant_fp8", dtype=ad,
                                                               name="experts_quant_mid")))
        out.append(("experts_down", GroupedGemm, dict(rows=rows, n=h, k=f, experts=experts_here,
                                                      dtype=self.dtype, row_tiles=tiles,
                                                      backend=self.expert_backend,
                                                      name="experts_down")))
        if self.eager:
            out.append(("combine_weights", Elementwise, dict(elements=local_routed * h, kind="scale",
                                                             dtype=ad, name="combine_weights")))
        if sharded:
            out.append(("ep_combine", Collective, dict(kind="alltoall", bytes=a2a_bytes,
                                                       world_size=self.ep, name="ep_combine")))
        if self.eager:  # each routed row is added into its token's row: read, modify, write
            out.append(("combine", Gather, dict(rows_in=2 * local_routed, rows_out=local_routed,
                                                width=h, dtype=ad, kind=moved, name="combine")))
        else:
            out.append(("combine", Gather, dict(rows_in=local_routed, rows_out=local_tokens, width=h,
                                                dtype=ad, name="combine")))
        return out

    def work(self) -> Work:
        return total(op.work() for _, op in self.kernels())
