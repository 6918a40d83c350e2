"""What the family rules share: a kernel of several regimes (per regime, or with each
regime's parameters per point), and the fixed costs added after the roofline."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..errors import UserError
from ..pricing import _any
from ..timing import Timing, with_fields


def _require(spec, rate: str, what: str):
    if not spec.supports(rate):
        raise UserError(f"{spec.name} has no {rate} tensor-core rate, so it cannot run {what}")



def in_sequence(t: Timing) -> Timing:
    """``t`` as the kernel runs among other kernels (a layer, a forward pass): a GEMM
    that is not compute-bound then costs more than back to back with copies of itself,
    which is how the harness times it (the profile's sequence/gemm dependent_s)."""
    extra = t.sequence_s
    return t if type(extra) is float and extra == 0.0 else _with_fixed(t, extra)


def _with_fixed(t: Timing, seconds) -> Timing:
    """``t`` with a fixed time added to its latency (and counted as launch cost)."""
    return with_fields(t, latency_s=t.latency_s + seconds, launch_s=t.launch_s + seconds)


_on = _any  # whether a parameter (a number, or an array of one per point) is set anywhere


def _plain(x) -> bool:
    return type(x) in (float, int, bool) or x is None


def params_by_regime(present: list) -> SimpleNamespace:
    """The parameters of kernel regimes as one set, per point where they differ:
    ``present`` holds (mask, parameters) with masks that split the points. A hard-max
    corner is the p-norm of p infinity; an unset softmax_overlap is NaN."""
    params = tuple(p for _, p in present)
    which = np.zeros(np.shape(present[0][0]), dtype=np.intp)  # per point: its regime
    for r, (mask, _) in enumerate(present[1:], 1):
        which[mask] = r
    key = (tuple(map(id, params)), which.shape, which.tobytes())
    found = _REGIME_PARAMS.get(key)
    if found is None:  # (kept, with the objects: repeated predictions meet the same split)
        if len(_REGIME_PARAMS) > 256:
            _REGIME_PARAMS.clear()
        same, names, table = _regime_table(params)
        found = _REGIME_PARAMS[key] = (params, SimpleNamespace(**same, **dict(zip(names, table[:, which]))))
    return found[1]


_REGIME_TABLES: dict = {}


_REGIME_PARAMS: dict = {}


def _regime_table(params: tuple) -> tuple:
    """(the fields all of ``params`` share, the names of the others, their values as a
    [field, regime] array), kept per tuple of parameter objects (with the objects, so
    that their ids stay theirs)."""
    key = tuple(map(id, params))
    if key not in _REGIME_TABLES:
        if len(_REGIME_TABLES) > 256:
            _REGIME_TABLES.clear()
        first, same, names, rows = params[0], {}, [], []
        for name, value in first.__dict__.items():
            values = [getattr(p, name) for p in params]
            if all(v == value for v in values):
                same[name] = value
                continue
            if name in ("corner", "softmax_overlap"):
                values = [(np.inf if name == "corner" else np.nan) if v is None else v for v in values]
            names.append(name)
            rows.append(values)
        _REGIME_TABLES[key] = (params, same, tuple(names), np.array(rows, dtype=float).reshape(len(rows), len(params)))
    return _REGIME_TABLES[key][1:]


# the fields of a Timing that hold a value per point (merged when regimes are joined)
PER_POINT = ("latency_s", "bound", "flops", "hbm_bytes", "intensity_flop_per_byte", "compute_s",
              "hbm_s", "l2_s", "link_s", "launch_s", "sequence_s", "losses")


def by_regime(op, regimes) -> Timing:
    """Price each point of ``op`` by the regime it falls in: ``regimes`` is a list of
    (mask, time function) whose masks split the points. Large arrays are split so that
    each regime prices only its own points; small ones are priced whole by every regime
    present (fewer numpy calls), then picked point by point."""
    present = [(np.asarray(m), fn) for m, fn in regimes if np.count_nonzero(m)]
    if len(present) == 1:
        return present[0][1](op)
    from dataclasses import fields, replace

    arrays = {f.name: v for f in fields(op) if np.ndim(v := getattr(op, f.name)) > 0}
    shape = np.broadcast_shapes(*(np.shape(v) for v in arrays.values()), *(m.shape for m, _ in present))
    if int(np.prod(shape)) < 256:
        t = present[-1][1](op)
        for m, fn in present[-2::-1]:
            t = select_timing(m, fn(op), t)
        return t
    parts = []
    for m, fn in present:
        m = np.broadcast_to(m, shape)
        parts.append((m, fn(replace(op, **{k: np.broadcast_to(v, shape)[m] for k, v in arrays.items()}))))
    return _scatter(shape, parts)


def _scatter(shape, parts) -> Timing:
    """One timing over ``shape`` from timings of the points each mask selects."""
    from dataclasses import replace

    at = [np.flatnonzero(m) for m, _ in parts]  # (each part's points, found once for every field)
    size = int(np.prod(shape))

    def merge(values):
        if isinstance(values[0], dict):
            keys = {k for v in values for k in v}
            return {k: merge([v.get(k, 0.0) for v in values]) for k in keys}
        kind = object if any(np.asarray(v).dtype.kind in "OUS" for v in values) else float
        out = np.empty(size, dtype=kind)
        for i, v in zip(at, values):
            out[i] = v
        return out.reshape(shape)

    first = parts[0][1]
    return replace(first, **{f: merge([getattr(t, f) for _, t in parts]) for f in PER_POINT})


def select_timing(mask, a: Timing, b: Timing) -> Timing:
    """Per point, ``a`` where ``mask`` holds, else ``b`` (two timings of one op)."""
    from dataclasses import replace

    def pick(x, y):
        if isinstance(x, dict):
            return {k: pick(x.get(k, 0.0), y.get(k, 0.0)) for k in {**y, **x}}
        return np.where(mask, x, y)

    return replace(a, **{f: pick(getattr(a, f), getattr(b, f)) for f in PER_POINT})


def _waves(tiles, sm_count):
    return np.ceil(np.asarray(tiles, dtype=float) / sm_count)


def _wave_efficiency(tiles, sm_count):
    """Fraction of SM slots doing work when ``tiles`` blocks run in whole waves."""
    tiles = np.asarray(tiles, dtype=float)
    return tiles / (_waves(tiles, sm_count) * sm_count)
