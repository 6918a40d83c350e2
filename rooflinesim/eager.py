"""Eager launches: the host side of a kernel's time.

Without a CUDA graph, Python and PyTorch's dispatch issue each call on the host while the
GPU runs what is already queued. Host and GPU are two stages in series: over a run of
calls (a timing loop, a layer, a forward pass) the slower stage sets the pace, so a small
kernel costs about its host time and a long one its GPU time:

    eager time = corner(host time, GPU time + kernels x gap)

(``corner``: the hard max, or a p-norm where the profile fits one: near the crossover
host and GPU stall each other, and a call takes longer than either alone)

where the host time of a call is ``call_s + kernel_s x kernels`` (``HostParams`` of the
op's key in the profile, fitted to the harness's eager measurements) and the GPU time is
the graph-mode prediction. A sequence of kernels (a layer) adds each part's host time
and each part's GPU time before taking the larger: the host runs ahead during long
kernels and the queued short ones then run back to back.
"""

from __future__ import annotations

import numpy as np

from .timing import Timing, corner, with_fields


def host_keys(op, spec) -> tuple:
    """The profile keys of an op's host side, most specific first."""
    from .attention_kernels import kernel_of
    from .ops import Attention, Copy, Gemm, MoE, Norm
    from .ops.sequence import Sequence

    if isinstance(op, Gemm):
        return (f"gemm:{op.dtype}", "gemm")
    if isinstance(op, Attention):
        return (f"attention:{kernel_of(op, spec).backend}", "attention")
    if isinstance(op, Copy):
        return ("copy",)
    if isinstance(op, Norm):
        return (op.kind, "norm")
    if isinstance(op, MoE):
        return ("moe",)
    if isinstance(op, Sequence):
        return ("sequence",)
    return (op.family,)


def _kernels(op):
    return np.asarray(op.work().kernels, dtype=float)


def launches(op, spec, profile):
    """Kernels one call of ``op`` launches: the count its rule prices where one set of
    terms prices it (a split's combine or reduction kernel included), else its work's."""
    from .rules import terms_for

    return launched(terms_for(op, spec, profile), op.work())  # (no terms: an op its rule prices by regime)


def launched(terms, work):
    """``launches`` from the op's rule terms (None: it has none) and its ``work``."""
    runs = np.asarray(work.kernels, dtype=float)
    if terms is not None and terms.kernels is not None:
        return np.asarray(terms.kernels, dtype=float) * np.ones(np.shape(runs))
    return runs


def host_s(op, spec, profile, kernels=None):
    """Host seconds to issue one call of ``op`` (its own; a sequence's parts apart).
    ``kernels``: what the call launches, where the caller has priced it (``launches``)."""
    p = profile.host_params(*host_keys(op, spec))
    if not p.kernel_s:
        return p.call_s
    return p.call_s + p.kernel_s * (launches(op, spec, profile) if kernels is None else kernels)


def joined(host, gpu, profile):
    """The time of a run of calls whose host side takes ``host`` and GPU side ``gpu``
    (the two stages in series: the slower sets the pace; the profile's corner)."""
    return corner([host, gpu], profile.host_params().corner or None)


def eager_timing(op, spec, profile, graph: Timing) -> Timing:
    """``graph`` (the op's graph-mode timing) as eager launches time it."""
    from .ops.sequence import Sequence

    base = profile.host_params()
    gap = base.gap_s
    if isinstance(op, Sequence):
        host, gpu = host_s(op, spec, profile), 0.0
        for (_, part, count), (_, t) in zip(op.kernels(), graph.parts):
            host = host + count * host_s(part, spec, profile)
            gpu = gpu + t.latency_s + count * gap * _kernels(part)
    else:
        host, gpu = host_s(op, spec, profile), graph.latency_s + gap * _kernels(op)
    latency = joined(host, gpu, profile)
    bound = np.where(host > gpu, "host", graph.bound) if np.ndim(latency) else (
        "host" if host > gpu else graph.bound)
    return with_fields(graph, latency_s=latency if np.ndim(latency) else float(latency), bound=bound,
                       losses={**graph.losses, "host_s": host, "gpu_s": gpu})
