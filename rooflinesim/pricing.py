"""Work + GPU spec + calibration profile -> time: the only place where hardware meets counts.

For a kernel:  latency = kernels * launch_s + corner(compute_s, hbm_s, l2_s, extra_s) + fixed_s
  compute_s = tensor FLOPs / (peak of their dtype * efficiency), scaled by the tile,
              k-overhead and wave-quantization losses of GEMM-like kernels, plus vector
              FLOPs and special functions (overlapped with the matrix work in FA3);
  hbm_s     = HBM bytes / (bandwidth * efficiency);
  l2_s      = L2 bytes / (L2 bandwidth * efficiency), only where the profile sets one;
  corner    = the hard max (ideal roofline) or a fitted p-norm.
For a collective: latency = latency_s + steps * step_latency_s + link bytes / (link
bandwidth * efficiency).

A rule hands its kernel's terms (``KernelTerms``); ``PricedTerms`` prices the terms of
several kernels at once, their points laid end to end and their parameters per point,
with the arithmetic of each kernel priced alone: a model's prediction prices all its
kernel groups in one pass, which costs about what one kernel costs. Everything is
numpy-vectorized: an op built from arrays gives arrays of latencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from typing import Any

import numpy as np

from .errors import UserError
from .timing import Timing, _bound, _intensity, _is_zero, _scaled, corner, logistic, math_flops, sfu_rate
from .work import Work


@dataclass
class KernelTerms:
    """What a rule hands the roofline for one kernel (or a fused group of kernels): its
    work, its parameters and the losses the rule found.

    compute_scale multiplies the compute time (tile, wave and fill losses), memory_scale
    the HBM time (e.g. misaligned accesses); extra_s is a serial time that joins the
    corner; fixed_s is added after it (a split's reduction kernel); sequence_s is added
    where the kernel is not compute-bound when it runs among other kernels (see
    rules.in_sequence); overlap_aux is the share of the vector and special-function work
    hidden under the matrix work."""

    work: Work
    p: Any  # the family's parameters (calibration.profile.RooflineParams and its subclasses)
    compute_scale: Any = 1.0
    overlap_aux: Any = False
    memory_scale: Any = 1.0
    losses: dict = field(default_factory=dict)
    kernels: Any = None  # launches (the work's own when None)
    extra_s: Any = 0.0
    fixed_s: Any = 0.0
    sequence_s: Any = 0.0

    def shape(self) -> tuple:
        w = self.work
        return np.broadcast_shapes(*(np.shape(x) for x in (
            *w.tensor_flops.values(), w.vector_flops, w.sfu_ops, w.hbm_bytes, self.compute_scale,
            self.memory_scale, self.kernels, self.extra_s, self.fixed_s, self.sequence_s)))

    def tensor_s(self, spec):
        """Time of the matrix work at the parameters' efficiency (None: it has none)."""
        t = None
        for rate, flops in self.work.tensor_flops.items():
            x = flops / (spec.peak(rate) * self.p.compute_efficiency)
            t = x if t is None else t + x
        return t

    def aux_s(self, spec, fp32_peak):
        """Time of the vector FLOPs and special functions."""
        w = self.work
        if _is_zero(w.vector_flops) and _is_zero(w.sfu_ops):  # (matrix-only kernels)
            return 0.0
        return w.vector_flops / (fp32_peak * self.p.vector_efficiency) + w.sfu_ops / sfu_rate(spec, fp32_peak)


def price_one(terms: KernelTerms, spec) -> Timing:
    """One kernel's timing from its terms."""
    return PricedTerms([terms], spec).timing(0)


# parameters of the roofline itself (the rules use the others)
_ROOFLINE_PARAMS = ("compute_efficiency", "memory_efficiency", "launch_s", "large_bytes",
                    "large_memory_efficiency", "memory_latency_s", "memory_latency_bytes", "l2_efficiency")


class _EndToEnd:
    """Values of several items (kernels, collectives) over their points laid end to end:
    each item's own shape (``shapes``), or the values themselves for a single item."""

    def __init__(self, shapes: list | None):
        self.shapes = shapes
        if shapes is None:
            self.sizes = self.offsets = None
        else:
            self.sizes = [math.prod(s) for s in shapes]
            self.offsets = list(accumulate(self.sizes, initial=0))

    def lay(self, values: list):
        """One value per item, laid end to end (one number where all items have it)."""
        if self.shapes is None:
            return values[0]
        return _laid(values, self.shapes, self.sizes, self.offsets)

    def cut(self, i: int):
        """The function that takes item ``i``'s points out of a laid value."""
        if self.offsets is None:
            return _identity
        a, b, shape = self.offsets[i], self.offsets[i + 1], self.shapes[i]

        def cut(x):
            return x[a:b].reshape(shape) if isinstance(x, np.ndarray) and x.ndim else x

        return cut


class PricedTerms(_EndToEnd):
    """The terms of several kernels priced at once: their points laid end to end (each
    kernel's own shape when there is one), their parameters per point. Per point, the
    arithmetic is that of each kernel priced alone. ``in_sequence``: the kernels run
    among others (their sequence_s applies)."""

    def __init__(self, items: list[KernelTerms], spec, *, in_sequence: bool = False, shapes=None):
        super().__init__(None if len(items) == 1 else shapes or [it.shape() for it in items])
        self.items, self.spec = items, spec
        fp32_peak = spec.peak("fp32")
        bw = spec.memory.hbm_bandwidth_bytes_per_s
        lay = self.lay
        p = items[0].p if len(items) == 1 else _params_per_point(items, self.shapes, self.sizes, self.offsets)
        tensor = [it.tensor_s(spec) for it in items]
        has_tensor = any(t is not None for t in tensor)
        t_tensor = lay([0.0 if t is None else t for t in tensor]) if has_tensor else None
        t_aux = lay([it.aux_s(spec, fp32_peak) for it in items])
        overlap = lay([x if isinstance(x := it.overlap_aux, np.ndarray) else float(x) for it in items])
        compute_scale = lay([it.compute_scale for it in items])
        if t_tensor is None:
            compute = _scaled(t_aux, compute_scale)
        elif _is_zero(t_aux):
            compute = _scaled(t_tensor, compute_scale)
        elif type(overlap) is float and overlap == 1:  # (the hidden part adds nothing)
            compute = np.maximum(t_tensor, t_aux) * compute_scale
        else:
            compute = (np.maximum(t_tensor, t_aux) + (1 - overlap) * np.minimum(t_tensor, t_aux)) * compute_scale
        hbm_bytes = lay([it.work.hbm_bytes for it in items])
        memory_scale = lay([it.memory_scale for it in items])
        large = (p.large_bytes > 0) & (p.large_memory_efficiency < 1)  # (per point, or one flag)
        if _any(large):
            # transfers past a size take a slower path; a kernel already on a slow path
            # (memory_scale, e.g. misaligned) does not slow down twice
            every = _all(large)
            size = p.large_bytes if every else np.where(large, p.large_bytes, 1.0)
            x = np.log(np.maximum(np.asarray(hbm_bytes, dtype=float), 1.0) / size) / 0.05
            slow = np.maximum(memory_scale, 1 + logistic(x) * (1 / p.large_memory_efficiency - 1))
            memory_scale = slow if every else np.where(large, slow, memory_scale)
        hbm = _scaled(hbm_bytes / (bw * p.memory_efficiency), memory_scale)
        if _any(p.memory_latency_s):
            # DRAM latency is hidden only once enough bytes are in flight
            hbm = hbm - p.memory_latency_s * np.expm1(hbm_bytes / -p.memory_latency_bytes)
        l2_bw = spec.memory.l2_bandwidth_bytes_per_s
        has_l2 = bool(l2_bw) and _any(p.l2_efficiency)
        if has_l2:
            l2_bytes = lay([it.work.l2_bytes for it in items])
            if _all(p.l2_efficiency):
                l2 = l2_bytes / (l2_bw * p.l2_efficiency)
            else:  # (some kernels leave L2 out)
                l2 = np.where(p.l2_efficiency > 0, l2_bytes / (l2_bw * np.maximum(p.l2_efficiency, 1e-30)), 0.0)
        else:
            l2 = 0.0 * hbm
        extra = lay([it.extra_s for it in items])
        terms = [t for t in (compute, hbm, l2 if has_l2 else 0.0, extra) if not _is_zero(t)]
        body = corner(terms or [hbm], p.corner)
        self.launch_floor = launch = lay([it.work.kernels if it.kernels is None else it.kernels
                                          for it in items]) * p.launch_s
        self._bounds = {"compute": compute, "hbm": hbm, "l2": l2, "launch": launch}
        latency = launch + body
        fixed = lay([it.fixed_s for it in items])
        if not _is_zero(fixed):
            latency, launch = latency + fixed, launch + fixed
        self.sequence_s = None
        sequence = lay([it.sequence_s for it in items])
        if not _is_zero(sequence):
            # (not compute-bound, as ``bound`` names it: another term above the compute time,
            # which wins ties; the launch term before the fixed time is added)
            not_compute = (hbm > compute) | (l2 > compute) | (self.launch_floor > compute)
            self.sequence_s = np.where(not_compute, sequence, 0.0)
            if in_sequence:
                latency, launch = latency + self.sequence_s, launch + self.sequence_s
        self.flops = lay([math_flops(it.work) for it in items])
        self.hbm_bytes = hbm_bytes
        self.latency_s, self.compute_s, self.hbm_s, self.l2_s, self.launch_s = latency, compute, hbm, l2, launch
        self.intensity = _intensity(self.flops, hbm_bytes)
        self._fp32_peak, self._bw, self._in_sequence = fp32_peak, bw, in_sequence

    @cached_property
    def bound(self):
        """What bounds each point: the name of the largest of the compute, HBM, L2 and
        launch times (the first on ties)."""
        return _bound(self._bounds)

    def timing(self, i: int) -> Timing:
        """Kernel ``i``'s own timing."""
        it, cut = self.items[i], self.cut(i)
        p, losses = it.p, dict(it.losses)
        if _any(p.compute_efficiency < 1):
            losses["compute_efficiency"] = 1 / p.compute_efficiency
        if _any(p.memory_efficiency < 1):
            losses["memory_efficiency"] = 1 / p.memory_efficiency
        if _any(p.launch_s):
            losses["launch_floor_s"] = cut(self.launch_floor)
        sequence = 0.0  # (what in_sequence would add: nothing where the latency holds it already)
        if not _is_zero(it.sequence_s):
            losses["in_sequence_s"] = cut(self.sequence_s)
            if not self._in_sequence:
                sequence = losses["in_sequence_s"]
        rate = next(iter(it.work.tensor_flops), None)
        return Timing(
            latency_s=cut(self.latency_s), bound=cut(self.bound), flops=cut(self.flops),
            hbm_bytes=it.work.hbm_bytes, intensity_flop_per_byte=cut(self.intensity),
            ridge_flop_per_byte=(self.spec.peak(rate) if rate else self._fp32_peak) / self._bw,
            compute_s=cut(self.compute_s), hbm_s=cut(self.hbm_s), l2_s=cut(self.l2_s),
            launch_s=cut(self.launch_s), sequence_s=sequence, losses=losses,
        )


def sequence_time(bound, seconds):
    """The extra time of a kernel that is not compute-bound where it runs among other
    kernels (see rules.in_sequence), per point of its ``bound``."""
    return np.where(np.asarray(bound) != "compute", seconds, 0.0)


def price_terms(items: list[KernelTerms], spec, *, in_sequence: bool = False, shapes: list) -> "PricedTerms":
    """``items`` priced at once (PricedTerms), or one by one when they have many points
    (a sweep: there the per-point parameters and the laying end to end cost more than
    the calls they save); the answer looks the same either way."""
    if sum(math.prod(s) for s in shapes) <= APART_POINTS:
        return PricedTerms(items, spec, in_sequence=in_sequence, shapes=shapes)
    return _Apart([PricedTerms([it], spec, in_sequence=in_sequence) for it in items], shapes)


APART_POINTS = 2048  # points of all kernels above which they are priced one by one


class _Apart(_EndToEnd):
    """Kernels priced one by one, their answers laid end to end as PricedTerms lays them."""

    def __init__(self, parts: list, shapes: list):
        super().__init__(shapes)
        self.parts = parts
        self.latency_s = self.lay([p.latency_s for p in parts])

    @cached_property
    def flops(self):
        return self.lay([p.flops for p in self.parts])

    @cached_property
    def hbm_bytes(self):
        return self.lay([p.hbm_bytes for p in self.parts])

    @cached_property
    def bound(self):
        return np.concatenate([np.broadcast_to(np.asarray(p.bound, dtype=object), (n,))
                               for p, n in zip(self.parts, self.sizes)])

    def timing(self, i: int) -> Timing:
        return self.parts[i].timing(0)


def _identity(x):
    return x


def _laid(values: list, shapes: list, sizes: list, offsets: list):
    """Per-kernel values (numbers, or arrays of each kernel's shape) laid end to end; one
    plain number where every kernel has the same."""
    first = values[0]
    if type(first) in _PLAIN:
        for v in values:
            if type(v) not in _PLAIN or v != first:
                break
        else:
            return first
    return _fill(values, shapes, sizes, offsets[-1])


def _fill(values: list, shapes: list, sizes: list, total: int) -> np.ndarray:
    out = np.empty(total)
    a = 0
    for v, shape, n in zip(values, shapes, sizes):
        out[a:a + n] = v if len(shape) < 2 else np.ravel(np.broadcast_to(v, shape))
        a += n
    return out


_PLAIN = (float, int, bool)


def _any(x) -> bool:
    """Whether a flag or number (or any point of an array of them) is set."""
    return bool(x) if type(x) in _PLAIN else bool(np.count_nonzero(x))


def _all(x) -> bool:
    return bool(x) if type(x) in _PLAIN else np.count_nonzero(x) == np.size(x)


_PER_POINT_PARAMS: dict = {}


def _params_per_point(items: list[KernelTerms], shapes: list, sizes: list, offsets: list):
    """_ParamsPerPoint of ``items``, kept per tuple of their parameter objects and sizes
    (with the objects, so that their ids stay theirs): a model's predictions price the
    same kernels with the same parameters again and again."""
    params = tuple(it.p for it in items)
    key = (tuple(map(id, params)), tuple(sizes))
    found = _PER_POINT_PARAMS.get(key)
    if found is None:
        if len(_PER_POINT_PARAMS) > 256:
            _PER_POINT_PARAMS.clear()
        found = _PER_POINT_PARAMS[key] = (params, _ParamsPerPoint(items, shapes, sizes, offsets))
    return found[1]


class _ParamsPerPoint:
    """The roofline parameters of several kernels (numbers, or arrays over a kernel's
    points), per point of their points laid end to end; one number where all kernels
    have the same. A hard max corner is the p-norm of p infinity."""

    def __init__(self, items: list[KernelTerms], shapes: list, sizes: list, offsets: list):
        for name in _ROOFLINE_PARAMS:
            values = [getattr(it.p, name) for it in items]
            setattr(self, name, _per_point(values, shapes, sizes, offsets))
        corners = [it.p.corner for it in items]
        if any(c is None for c in corners) and not all(c is None for c in corners):
            corners = [np.inf if c is None else c for c in corners]
        self.corner = _per_point(corners, shapes, sizes, offsets)


def _per_point(values: list, shapes: list, sizes: list, offsets: list):
    first = values[0]
    if type(first) in _PLAIN and all(type(v) in _PLAIN for v in values):
        if all(v == first for v in values):
            return first
        return np.repeat(np.array(values, dtype=float), sizes)
    if first is None and all(v is None for v in values):
        return None
    return _laid(values, shapes, sizes, offsets)


def collective_time(op, spec, profile) -> Timing:
    return PricedCollectives([op], spec, profile).timing(0)


class PricedCollectives(_EndToEnd):
    """Collectives priced at once, their points laid end to end (each its own shape when
    there is one), each kind's parameters per point: per point, the arithmetic of each
    collective priced alone."""

    def __init__(self, ops: list, spec, profile, *, shapes=None):
        link_bw = spec.interconnect.link_bandwidth_bytes_per_s
        if not link_bw:
            link_bw = spec.interconnect.pcie_bandwidth_bytes_per_s
        for op in ops:
            if op.algorithm == "nvls" and not spec.interconnect.nvlink_sharp:
                raise UserError(f"{spec.name} has no NVLink SHARP; use --algorithm ring or tree")
            sizes = np.asarray(op.world_size)
            if np.count_nonzero(sizes > spec.interconnect.gpus_per_node):
                largest = float(np.max(sizes))
                raise UserError(f"{spec.name} links {spec.interconnect.gpus_per_node} GPUs in a node; "
                                f"a world size of {largest:g} GPUs would cross nodes, which is not modelled")
        super().__init__(None if len(ops) == 1 else
                         shapes or [np.broadcast(op.bytes, op.world_size).shape for op in ops])
        self.ops, self.spec, lay = ops, spec, self.lay
        works = [op.work() for op in ops]
        self.params = cps = [profile.collective(op.kind) for op in ops]
        self.works = works
        link = lay([w.link_bytes for w in works]) / (link_bw * lay([cp.link_efficiency for cp in cps]))
        fixed = lay([cp.latency_s for cp in cps]) + lay([w.link_steps for w in works]) * lay(
            [cp.step_latency_s for cp in cps])
        if any(cp.fill_latency_s for cp in cps):
            size = lay([np.asarray(op.bytes, dtype=float) for op in ops])
            link = link - lay([cp.fill_latency_s for cp in cps]) * np.expm1(size / -lay([cp.fill_bytes for cp in cps]))
        from .ops.collectives import ENGINE_ALGORITHMS  # (loaded with the ops priced here)

        if any(op.algorithm in ENGINE_ALGORITHMS for op in ops):  # (the engine's own, where faster)
            from .ops.engine_allreduce import engine_allreduce_s

            engine = lay([engine_allreduce_s(op.bytes, op.world_size, spec.interconnect.link, op.algorithm)
                          if op.algorithm in ENGINE_ALGORITHMS else np.inf for op in ops])
            faster = engine < fixed + link
            link = np.where(faster, np.minimum(engine, link), link)  # (its time: a link's, latency included)
            fixed = np.where(faster, engine - link, fixed)
            if link.ndim == 0:
                link, fixed = float(link), float(fixed)
        self.latency_s = fixed + link
        self.link_s, self.launch_s = link, fixed
        self.bound = _bound({"link": link, "launch": fixed})
        self.flops = lay([math_flops(w) for w in works])
        self.hbm_bytes = lay([w.hbm_bytes for w in works])
        self.intensity = _intensity(self.flops, self.hbm_bytes)

    def timing(self, i: int) -> Timing:
        """Collective ``i``'s own timing."""
        op, cp, w, cut = self.ops[i], self.params[i], self.works[i], self.cut(i)
        latency = cut(self.latency_s)
        losses = {"link_efficiency": 1 / cp.link_efficiency} if cp.link_efficiency < 1 else {}
        losses["algbw_bytes_per_s"] = algbw = op.bytes / latency
        losses["busbw_bytes_per_s"] = algbw * _bus_factor(op.kind, op.world_size)
        return Timing(
            latency_s=latency, bound=cut(self.bound), flops=cut(self.flops), hbm_bytes=w.hbm_bytes,
            intensity_flop_per_byte=cut(self.intensity),
            ridge_flop_per_byte=self.spec.peak("fp32") / self.spec.memory.hbm_bandwidth_bytes_per_s,
            link_s=cut(self.link_s), launch_s=cut(self.launch_s), losses=losses,
        )


def _bus_factor(kind: str, world_size):
    from .ops.collectives import bus_factor

    return bus_factor(kind, world_size)


