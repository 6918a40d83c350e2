"""Memory-bound kernels' rules: copies (alignment of their size), norms (one thread block
per row), elementwise, gathers and bookkeeping kernels."""

from __future__ import annotations

import numpy as np

from ..dtypes import bytes_per_element
from ..ops.memory import Bookkeeping, Copy, Norm
from ..pricing import KernelTerms, price_one
from ..timing import Timing, logistic
from .gemm import _class_factor, alignment_bytes


ROW_DOUBLE_WIDTH = 0.25  # width in log bytes of the norms' step to a doubled row pass


def memory_rule(op, spec, profile) -> Timing:
    return price_one(memory_terms(op, spec, profile), spec)


_MEMORY_KEYS = {Copy: "copy", Bookkeeping: "bookkeeping"}  # (the other memory ops: their kind)


def memory_terms(op, spec, profile) -> KernelTerms:
    key = _MEMORY_KEYS.get(type(op)) or op.kind
    own = key
    if isinstance(op, Copy):
        own = "copy:graph_memcpy" if op.graph_memcpy else (key if op.layout == "contiguous" else f"copy:{op.layout}")
    p = profile.params("memory", own, key)
    memory_scale, extra, losses, extra_launch = 1.0, 0.0, {}, None
    if isinstance(op, Copy) and (p.align2_memory < 1 or p.align8_memory < 1):
        a = alignment_bytes(op.bytes, 1)
        if not op.graph_memcpy:
            # a copy kernel keeps its vector loads whatever the size of a buffer of 16-bit
            # elements; only an odd byte count (1-byte elements) takes its narrower path
            a = np.where(a >= 2, 16.0, a)
        memory_scale = 1 / _class_factor(a, 1.0, p.align8_memory, p.align2_memory)
        if p.align2_launch_s:  # the head and tail bytes of an odd size take extra work
            extra_launch = np.where(a < 4, p.align2_launch_s, 0.0)
    if isinstance(op, Norm) and p.row_element_s:
        # one thread block per row: with few rows, each block's own latency-bound pass
        # over its row sets the time, in waves of rows_per_sm rows per SM
        waves = np.ceil(np.asarray(op.tokens) / (spec.chip.sm_count * p.rows_per_sm))
        extra = waves * np.asarray(op.hidden) * p.row_element_s
        losses["row_waves"] = waves
        if p.row_double_bytes:
            read = np.asarray(op.tokens) * np.asarray(op.hidden) * bytes_per_element(op.dtype)
            x = (np.log(np.maximum(read, 1.0)) - np.log(p.row_double_bytes)) / ROW_DOUBLE_WIDTH
            double = 1.0 + logistic(x)
            extra = extra * double
            losses["row_pass"] = double
    if isinstance(op, Norm) and p.row_bandwidth_elements:
        memory_scale = 1 + np.asarray(op.hidden) / p.row_bandwidth_elements
    fixed = extra_launch if extra_launch is not None and np.count_nonzero(extra_launch) else 0.0
    return KernelTerms(op.work(), p, memory_scale=memory_scale, extra_s=extra, losses=losses, fixed_s=fixed)
