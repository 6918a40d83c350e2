"""Timings: what pricing a kernel answers (``Timing``), the pieces of the roofline every
pricing shares (the corner, the bound, the intensity, the smooth size step). The roofline
itself is in :mod:`.pricing`; :func:`rooflinesim.predict.predict` hands an op to its rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Union

import numpy as np

from .work import Work

BOUNDS = ("compute", "hbm", "l2", "link", "launch", "host")


Values = Union[float, np.ndarray]  # a number, or an array of one per point of a vectorized op


@dataclass(frozen=True)
class Timing:
    """What pricing a kernel answers. Times in seconds, per point; ``sequence_s`` is the
    extra time the kernel takes where it runs among other kernels (``rules.in_sequence``
    adds it; ``latency_s`` is the kernel timed back to back with itself, as the harness
    times it). ``losses`` are diagnostics only (what the rules found: factors >= 1, or
    seconds): nothing reads them back to price."""

    latency_s: Values
    bound: Union[str, np.ndarray]  # one of BOUNDS (an array of them for vectorized ops)
    flops: Values
    hbm_bytes: Values
    intensity_flop_per_byte: Values
    ridge_flop_per_byte: float
    compute_s: Values = 0.0
    hbm_s: Values = 0.0
    l2_s: Values = 0.0
    link_s: Values = 0.0
    launch_s: Values = 0.0
    sequence_s: Values = 0.0
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
        if type(top) is np.ndarray and top.size >= SELECTIVE_POINTS:
            return _selective_corner(terms, top, p)
        return top * _power_sum(terms, top, p) ** (1.0 / p)
    positive = top > 0
    safe = np.where(positive, top, 1.0)
    return np.where(positive, safe * _power_sum(terms, safe, p) ** (1.0 / p), 0.0)


def _scalar_corner(vals: list[float], p):
    top = max(vals)
    if p is None or top <= 0:
        return top
    return top * sum((v / top) ** p for v in vals) ** (1.0 / p)


SELECTIVE_POINTS = 1024  # points of a corner from which only those near one pay for its powers


def _selective_corner(terms, top, p):
    """``top * _power_sum(terms, top, p) ** (1 / p)``, the powers taken only at the points
    where a term besides the largest is above 2^-(54 + log2 terms) of it to the p-th power:
    elsewhere those terms' powers add up to less than half a unit in the last place of 1,
    so the power sum is 1 to the bit and the corner is ``top``, as the full formula has it."""
    floor = top * np.exp2(-(54.0 + math.log2(len(terms))) / p)  # (p per point, where it is; inf: 1)
    above = np.zeros(top.shape, dtype=np.int8)
    for t in terms:
        above += t > floor  # (the largest term counts once where p is finite)
    at = np.nonzero(above >= 2)
    out = top.astype(np.result_type(top, p, *terms))  # (a copy, in the full formula's type)
    if at[0].size:
        # (numbers stay numbers: a plain float keeps float32 terms in float32, as in the full formula)
        pick = lambda x: x if np.ndim(x) == 0 else np.broadcast_to(x, top.shape)[at]  # noqa: E731
        sub, q = top[at], pick(p)
        if len(terms) == 2:  # (the largest's power is 1: only the other's is taken)
            lo = np.minimum(pick(terms[0]), pick(terms[1]))
            out[at] = sub * (1.0 + (lo / sub) ** q) ** (1.0 / q)
        else:
            out[at] = sub * _power_sum([pick(t) for t in terms], sub, q) ** (1.0 / q)
    return out


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
    shape = np.broadcast_shapes(*(np.shape(v) for v in values))
    if not shape:
        return max(named, key=lambda k: float(named[k]))
    return _names(tuple(named))[_largest(values, shape)]


def _largest(values: list, shape: tuple) -> np.ndarray:
    """Per point of ``shape``: the index of the largest of ``values`` (the first on ties)."""
    stack = np.empty((len(values), *shape))
    for i, v in enumerate(values):
        stack[i] = v
    return stack.argmax(axis=0)


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


def logistic(x):
    """The smooth 0-to-1 step 1 / (1 + e^-x) of the model's size thresholds (clipped so
    that far-off points neither overflow nor underflow)."""
    return 1.0 / (1.0 + np.exp(-np.minimum(np.maximum(x, -50.0), 50.0)))  # (np.clip is slower)


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
