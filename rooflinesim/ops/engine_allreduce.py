"""The serving engines' own TP AllReduce (collective algorithm "engine"), from the measured
points in rooflinesim/data/engine_allreduce.json (see its notes): per link type and world
size a line ``seconds = a + bytes / b`` through the fastest backend's times, which the caller
caps at NCCL's price. None where the data has no such link or world size (NCCL's ring)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def _data() -> dict:
    import json
    from importlib.resources import files

    return json.loads((files("rooflinesim.data") / "engine_allreduce.json").read_text())


@lru_cache(maxsize=64)
def line(link: str, world_size: int) -> tuple[float, float] | None:
    """(a in s, b in bytes/s) for ``world_size`` GPUs on ``link``, or None (the largest
    tensor it applies to: ``max_bytes``)."""
    sizes = _data()["links"].get(link)
    if not sizes or str(world_size) not in sizes:
        return None
    entry = sizes[str(world_size)]
    x, t = (np.array(v, dtype=float) for v in zip(*entry["points"]))
    if x.size > 1:
        slope, a = np.polyfit(x, t, 1)
        return float(a), float(1.0 / slope)
    _, b = line(link, int(entry["bandwidth_from"]))
    return float(t[0] - x[0] / b), b


def max_bytes(link: str, world_size: int) -> float:
    """The largest tensor the engine's own backends take at ``world_size`` (past it: NCCL)."""
    return float(_data()["links"][link][str(world_size)]["max_bytes"])


def engine_allreduce_s(nbytes, world_size, link: str):
    """The engine's AllReduce time (s) of ``nbytes`` over ``world_size`` GPUs on ``link``
    (arrays broadcast), inf where the data has none (the caller's NCCL price applies)."""
    nbytes, n = np.broadcast_arrays(np.asarray(nbytes, dtype=float), np.asarray(world_size))
    out = np.full(nbytes.shape, np.inf)
    for w in np.unique(n):
        fit = line(link, int(w))
        if fit is not None:
            at = (n == w) & (nbytes <= max_bytes(link, int(w)))
            out[at] = fit[0] + nbytes[at] / fit[1]
    return out if out.ndim else float(out)
