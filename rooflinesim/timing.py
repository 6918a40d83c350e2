"""Work + GPU spec + calibration profile -> time. The only place where hardware meets counts.

For a kernel:  latency = kernels * launch_s + corner(compute_s, hbm_s, l2_s)
  compute_s = tensor FLOPs / (peak of their dtype * efficiency), scaled by the tile,
              k-overhead and wave-quantization losses of GEMM-like kernels, plus vector
              FLOPs and special functions (overlapped with the matrix work in FA3);
  hbm_s     = HBM bytes / (bandwidth * efficiency);
  l2_s      = L2 bytes / (L2 bandwidth * efficiency), only where the profile sets one;
  corner    = the hard max (ideal roofline) or a fitted p-norm.
For a collective: latency = latency_s + steps * step_latency_s + link bytes / (link
bandwidth * efficiency). A MoE layer is the sum of its kernels' latencies.

Everything is numpy-vectorized: an op built from arrays gives arrays of latencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .errors import UserError
from .work import Work

BOUNDS = ("compute", "hbm", "l2", "link", "launch")


@dataclass
class Timing:
    latency_s: object
    bound: object  # one of BOUNDS (an array of them for vectorized ops)
    flops: object
    hbm_bytes: object
    intensity_flop_per_byte: object
    ridge_flop_per_byte: float
    compute_s: object = 0.0
    hbm_s: object = 0.0
    l2_s: object = 0.0
    link_s: object = 0.0
    launch_s: object = 0.0
    losses: dict = field(default_factory=dict)  # name -> factor (>= 1) or seconds
    parts: list = field(default_factory=list)  # (name, Timing) for composite ops

    @property
    def attained_flop_per_s(self):
        return self.flops / self.latency_s

    def as_dict(self) -> dict:
        out = {k: _plain(getattr(self, k)) for k in (
            "latency_s", "bound", "flops", "hbm_bytes", "intensity_flop_per_byte",
            "ridge_flop_per_byte", "compute_s", "hbm_s", "l2_s", "link_s", "launch_s")}
        out["attained_flop_per_s"] = _plain(self.attained_flop_per_s)
        out["losses"] = {k: _plain(v) for k, v in self.losses.items()}
        if self.parts:
            out["parts"] = [{"name": n, **t.as_dict()} for n, t in self.parts]
        return out


def with_fields(t: Timing, **changes) -> Timing:
    """``t`` with some fields changed (dataclasses.replace, without its per-field checks)."""
    return Timing(**{**t.__dict__, **changes})


def _plain(x):
    a = np.asarray(x)
    if a.ndim == 0:
        v = a.item()
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return a.tolist()


def corner(terms, p):
    """Hard max (p None) or the p-norm of the terms, computed stably."""
    top = terms[0]
    for t in terms[1:]:
        top = np.maximum(top, t)
    if not isinstance(top, np.ndarray) or top.ndim == 0:
        return _scalar_corner([float(t) for t in terms], p)
    if p is None:
        return top
    if _all_positive(top):  # no zero times to guard
        return top * _power_sum(terms, top, p) ** (1.0 / p)
    positive = top > 0
    safe = np.where(positive, top, 1.0)
    return np.where(positive, safe * _power_sum(terms, safe, p) ** (1.0 / p), 0.0)


def _scalar_corner(vals: list[float], p):
    top = max(vals)
    if p is None or top <= 0:
        return top
    return top * sum((v / top) ** p for v in vals) ** (1.0 / p)


def _power_sum(terms, scale, p):
    acc = (terms[0] / scale) ** p
    for t in terms[1:]:
        acc = acc + (t / scale) ** p
    return acc


def _all_positive(x) -> bool:
    """Whether every point of array ``x`` is above 0 (a NaN is not): tested at the least
    one, whose index costs a fraction of a min() on small arrays."""
    return x.size == 0 or x.item(x.argmin()) > 0


def _bound(named: dict):
    """The name of the largest value (per point, for arrays; the first on ties)."""
    values = list(named.values())
    shape = np.broadcast(*values).shape
    if not shape:
        return max(named, key=lambda k: float(named[k]))
    stack = np.empty((len(values), *shape))
    for i, v in enumerate(values):
        stack[i] = v
    return _names(tuple(named))[stack.argmax(axis=0)]


@lru_cache(maxsize=None)
def _names(names: tuple) -> np.ndarray:
    return np.array(names, dtype=object)


def sfu_rate(spec, fp32_peak=None):
    # without a published special-function rate, assume 1/16 of the fp32 rate
    # (16 SFU lanes against 128 FP32 lanes per SM, counting an FMA as 2 FLOPs)
    return spec.compute.sfu_ops_per_s or (fp32_peak or spec.peak("fp32")) / 16


def _intensity(flops, hbm_bytes):
    b = np.asarray(hbm_bytes, dtype=float)
    f = np.asarray(flops, dtype=float)
    if b.ndim == 0 and f.ndim == 0:
        return float(f) / float(b) if b > 0 else np.inf
    if b.size and _all_positive(b):
        return f / b
    return np.divide(f, b, out=np.full(np.broadcast(f, b).shape, np.inf), where=b > 0)


def math_flops(work: Work):
    """The FLOPs a roofline plots: matrix-unit FLOPs where the kernel has them (their
    ceiling is the dtype's peak), else its vector FLOPs."""
    if not work.tensor_flops:
        return work.vector_flops
    total, *rest = work.tensor_flops.values()
    for flops in rest:
        total = total + flops
    return total


def _is_zero(x) -> bool:
    """A plain zero: a term that cannot raise the corner of non-negative times."""
    return isinstance(x, (int, float)) and x == 0


def _scaled(x, scale):
    return x if type(scale) is float and scale == 1.0 else x * scale


def _compute_s(work: Work, spec, p, fp32_peak, overlap_aux, compute_scale):
    t_aux = (work.vector_flops / (fp32_peak * p.vector_efficiency)
             + work.sfu_ops / sfu_rate(spec, fp32_peak))
    if not work.tensor_flops:
        return _scaled(t_aux, compute_scale)
    t_tensor = None
    for rate, flops in work.tensor_flops.items():
        t = flops / (spec.peak(rate) * p.compute_efficiency)
        t_tensor = t if t_tensor is None else t_tensor + t
    if _is_zero(t_aux):
        return _scaled(t_tensor, compute_scale)
    overlap = float(overlap_aux)  # 1: the vector/special-function work hides under the matrix work
    if overlap == 1:  # (the hidden part adds nothing)
        return np.maximum(t_tensor, t_aux) * compute_scale
    return (np.maximum(t_tensor, t_aux) + (1 - overlap) * np.minimum(t_tensor, t_aux)) * compute_scale


def logistic(x):
    """The smooth 0-to-1 step 1 / (1 + e^-x) of the model's size thresholds (clipped so
    that far-off points neither overflow nor underflow)."""
    return 1.0 / (1.0 + np.exp(-np.minimum(np.maximum(x, -50.0), 50.0)))  # (np.clip is slower)


def _hbm_s(work: Work, bw, p, memory_scale):
    if p.large_bytes and p.large_memory_efficiency < 1:
        # transfers past a size take a slower path; a kernel already on a slow path
        # (memory_scale, e.g. misaligned) does not slow down twice
        x = np.log(np.maximum(np.asarray(work.hbm_bytes, dtype=float), 1.0) / p.large_bytes) / 0.05
        step = logistic(x)
        memory_scale = np.maximum(memory_scale, 1 + step * (1 / p.large_memory_efficiency - 1))
    hbm = _scaled(work.hbm_bytes / bw, memory_scale)
    if p.memory_latency_s:
        # DRAM latency is hidden only once enough bytes are in flight
        hbm = hbm - p.memory_latency_s * np.expm1(work.hbm_bytes / -p.memory_latency_bytes)
    return hbm


def kernel_time(work: Work, spec, p, *, compute_scale=1.0, overlap_aux=False,
                memory_scale=1.0, losses=None, kernels=None, extra_s=0.0) -> Timing:
    """Time one kernel (or a fused group of kernels) from its work under parameters ``p``.

    compute_scale multiplies the compute time (tile, wave and fill losses), memory_scale
    the HBM time (e.g. misaligned accesses)."""
    losses = dict(losses or {})
    fp32_peak = spec.peak("fp32")
    compute = _compute_s(work, spec, p, fp32_peak, overlap_aux, compute_scale)
    bw = spec.memory.hbm_bandwidth_bytes_per_s
    hbm = _hbm_s(work, bw * p.memory_efficiency, p, memory_scale)
    l2_bw = spec.memory.l2_bandwidth_bytes_per_s
    has_l2 = bool(l2_bw and p.l2_efficiency)
    l2 = work.l2_bytes / (l2_bw * p.l2_efficiency) if has_l2 else 0.0 * hbm
    terms = [t for t in (compute, hbm, l2 if has_l2 else 0.0, extra_s) if not _is_zero(t)]
    body = corner(terms or [hbm], p.corner)
    launch = (work.kernels if kernels is None else kernels) * p.launch_s
    if p.compute_efficiency < 1:
        losses["compute_efficiency"] = 1 / p.compute_efficiency
    if p.memory_efficiency < 1:
        losses["memory_efficiency"] = 1 / p.memory_efficiency
    if p.launch_s:
        losses["launch_floor_s"] = launch
    rate = next(iter(work.tensor_flops), None)
    flops = math_flops(work)
    return Timing(
        latency_s=launch + body,
        bound=_bound({"compute": compute, "hbm": hbm, "l2": l2, "launch": launch}),
        flops=flops,
        hbm_bytes=work.hbm_bytes,
        intensity_flop_per_byte=_intensity(flops, work.hbm_bytes),
        ridge_flop_per_byte=(spec.peak(rate) if rate else fp32_peak) / bw,
        compute_s=compute, hbm_s=hbm, l2_s=l2, launch_s=launch, losses=losses,
    )


def collective_time(op, spec, profile) -> Timing:
    from .ops.collectives import bus_factor

    w = op.work()
    cp = profile.collective(op.kind)
    link_bw = spec.interconnect.link_bandwidth_bytes_per_s
    if not link_bw:
        link_bw = spec.interconnect.pcie_bandwidth_bytes_per_s
    if op.algorithm == "nvls" and not spec.interconnect.nvlink_sharp:
        raise UserError(f"{spec.name} has no NVLink SHARP; use --algorithm ring or tree")
    if np.count_nonzero(np.asarray(op.world_size) > spec.interconnect.gpus_per_node):
        raise UserError(f"{spec.name} links {spec.interconnect.gpus_per_node} GPUs in a node; "
                        f"a world size of {op.world_size} would cross nodes, which is not modelled")
    link = w.link_bytes / (link_bw * cp.link_efficiency)
    fixed = cp.latency_s + w.link_steps * cp.step_latency_s
    if cp.fill_latency_s:
        link = link - cp.fill_latency_s * np.expm1(np.asarray(op.bytes, dtype=float) / -cp.fill_bytes)
    latency = fixed + link
    flops = math_flops(w)
    t = Timing(
        latency_s=latency,
        bound=_bound({"link": link, "launch": fixed}),
        flops=flops, hbm_bytes=w.hbm_bytes,
        intensity_flop_per_byte=_intensity(flops, w.hbm_bytes),
        ridge_flop_per_byte=spec.peak("fp32") / spec.memory.hbm_bandwidth_bytes_per_s,
        link_s=link, launch_s=fixed,
        losses={"link_efficiency": 1 / cp.link_efficiency} if cp.link_efficiency < 1 else {},
    )
    t.losses["algbw_bytes_per_s"] = algbw = op.bytes / latency
    t.losses["busbw_bytes_per_s"] = algbw * bus_factor(op.kind, op.world_size)
    return t


def predict(op, spec, profile=None) -> Timing:
    """Latency of ``op`` on ``spec`` under ``profile`` (the ideal roofline when None)."""
    if profile is None:
        from .calibration.profile import IDEAL

        profile = IDEAL
    return _rules().rule_for(op)(op, spec, profile)


@lru_cache(maxsize=None)
def _rules():
    """The rules module, imported on first use (it imports this one); a model's prediction
    calls ``predict`` a dozen times, and an import statement costs more than this call."""
    from . import rules

    return rules


def sum_timings(parts: list[tuple[str, Timing]], spec) -> Timing:
    """Kernels run one after another: latencies and counts add; the bound is the
    part that took longest."""
    lat = sum(t.latency_s for _, t in parts)
    flops = sum(t.flops for _, t in parts)
    hbm = sum(t.hbm_bytes for _, t in parts)
    named = {n: t.latency_s for n, t in parts}
    longest = _bound(named)
    bound_of = {n: t.bound for n, t in parts}
    if isinstance(longest, str):
        bound = bound_of[longest]
    else:
        bound = np.array([bound_of[n][i] if isinstance(bound_of[n], np.ndarray) else bound_of[n]
                          for i, n in enumerate(longest)], dtype=object)
    return Timing(
        latency_s=lat, bound=bound, flops=flops, hbm_bytes=hbm,
        intensity_flop_per_byte=_intensity(flops, hbm),
        ridge_flop_per_byte=parts[0][1].ridge_flop_per_byte,
        compute_s=sum(t.compute_s for _, t in parts), hbm_s=sum(t.hbm_s for _, t in parts),
        link_s=sum(t.link_s for _, t in parts), launch_s=sum(t.launch_s for _, t in parts),
        parts=parts,
    )
