"""Collectives in the latency-bandwidth form: time = steps * alpha + bytes_sent / bandwidth.

``bytes`` is the size of the full tensor as nccl-tests counts it (AllReduce: the
buffer; AllGather: the gathered output; ReduceScatter: the input; AllToAll: the send
buffer). ``link_bytes`` is what each GPU sends over its link, and ``link_steps`` the
sequential hops of the algorithm. nccl-tests' conventions: algbw = bytes / time;
busbw = algbw * 2(n-1)/n for AllReduce and * (n-1)/n for AllGather, ReduceScatter and
AllToAll (NVIDIA/nccl-tests doc/PERFORMANCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..dtypes import bytes_per_element
from ..errors import UserError
from ..symbolic import ceil, is_symbolic, log
from ..work import Work
from .base import Op, check_choice, check_positive

KINDS = ("allreduce", "allgather", "reducescatter", "alltoall")
# "engine" and "custom": a serving engine's own TP AllReduce, priced from measured times where the
# link has them (engine_allreduce.py), else as the ring; its bytes and hops counted as the ring's.
# "engine" is vLLM's communicator since v0.11 (custom one-stage kernels, PyTorch symmetric memory,
# NCCL); "custom" a custom AllReduce's one- and two-stage kernels, then NCCL (SGLang's default,
# vLLM before v0.11, TensorRT-LLM's own kernels)
ENGINE_ALGORITHMS = ("engine", "custom")
ALGORITHMS = ("ring", "tree", "nvls") + ENGINE_ALGORITHMS

BUS_FACTOR = {  # busbw / algbw as a function of n
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}


def bus_factor(kind: str, world_size):
    return BUS_FACTOR[kind](world_size)


@dataclass(frozen=True)
class Collective(Op):
    kind: str
    bytes: Any
    world_size: Any
    algorithm: str = "ring"
    dtype: str = "bf16"
    name: str = ""

    family: ClassVar[str] = "collective"

    def __post_init__(self):
        check_choice("collective", self.kind, KINDS)
        check_choice("collective algorithm", self.algorithm, ALGORITHMS)
        check_positive(bytes=self.bytes, world_size=self.world_size)
        if not is_symbolic(self.world_size) and np.count_nonzero(np.asarray(self.world_size) < 2):
            raise UserError("a collective needs a world size of at least 2 GPUs")
        if self.algorithm != "ring" and self.kind != "allreduce":
            raise UserError(f"the {self.algorithm} algorithm applies to allreduce only")

    def link_bytes(self):
        n = self.world_size
        s = self.bytes
        if self.algorithm == "nvls":
            # NVLink SHARP: the switch reduces and multicasts; each GPU sends its buffer
            # once (reduce-scatter through the switch) and its shard once (multicast)
            return s * (n - 1) / n + s / n
        return bus_factor(self.kind, n) * s

    def link_steps(self):
        n = self.world_size
        if self.algorithm == "nvls":
            return 2
        if self.algorithm == "tree":
            return 2 * ceil(log(n) / log(2))  # up and down a binary tree
        if self.kind == "allreduce":
            return 2 * (n - 1)  # ring: reduce-scatter then all-gather
        return n - 1

    def work(self) -> Work:
        reduce = self.kind in ("allreduce", "reducescatter")
        sent = self.link_bytes()
        # the reduction reads what arrives and the local chunk, and writes the sum:
        # one add per element received
        local = (3 if reduce else 1) * sent
        return Work(
            vector_flops=(sent / bytes_per_element(self.dtype) if reduce else 0),
            hbm_bytes=local,
            link_bytes=sent,
            link_steps=self.link_steps(),
            kernels=1,
        )

    def algbw(self, latency_s):
        return self.bytes / latency_s

    def busbw(self, latency_s):
        return self.algbw(latency_s) * bus_factor(self.kind, self.world_size)
