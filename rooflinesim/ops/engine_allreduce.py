"""The serving engines' own TP AllReduce (collective algorithms "engine" and "custom"), from
the measured times in rooflinesim/data/engine_allreduce.json (see its notes): per link type,
world size and algorithm, the fastest of the algorithm's backends at each measured size, a
straight line between sizes; the caller caps it at NCCL's price. None where the data has no
such link or world size (NCCL's ring)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

MiB = 2**20


@lru_cache(maxsize=1)
def _data() -> dict:
    import json
    from importlib.resources import files

    return json.loads((files("rooflinesim.data") / "engine_allreduce.json").read_text())


def algorithms() -> tuple:
    """The engine algorithms the data defines, each a set of backends."""
    return tuple(_data()["algorithms"])


@lru_cache(maxsize=64)
def points(link: str, world_size: int, algorithm: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(bytes, seconds) at each measured size of ``world_size`` GPUs on ``link``: the
    fastest of ``algorithm``'s backends there (a backend two tables give at one size: their
    mean); None where the data has neither the link nor the world size."""
    tables = [t for t in _data()["links"].get(link, {}).get("tables", ()) if t["world_size"] == world_size]
    if not tables:
        return None
    wanted = _data()["algorithms"][algorithm]["backends"]
    seen: dict = {}  # size -> backend -> times
    for t in tables:
        for size, *times in t["rows"]:
            for backend, v in zip(t["columns"][1:], times):
                if v is not None and backend in wanted:
                    seen.setdefault(size, {}).setdefault(backend, []).append(v)
    x = sorted(seen)
    return np.array(x, dtype=float), np.array([min(np.mean(v) for v in seen[s].values()) for s in x])


@lru_cache(maxsize=64)
def bandwidth(link: str, world_size: int, algorithm: str) -> float:
    """Bytes per second past the largest measured size: the slope of a least-squares line
    through the points from 1 MiB on (a world size with one point: ``bandwidth_from``'s)."""
    x, t = points(link, world_size, algorithm)
    far = x >= MiB
    if np.count_nonzero(far) < 2:
        return bandwidth(link, int(_data()["links"][link]["bandwidth_from"][str(world_size)]), algorithm)
    return float(1.0 / np.polyfit(x[far], t[far], 1)[0])


def engine_allreduce_s(nbytes, world_size, link: str, algorithm: str = "engine"):
    """The engine's AllReduce time (s) of ``nbytes`` over ``world_size`` GPUs on ``link``
    under ``algorithm`` (arrays broadcast): between measured sizes a straight line, below
    them the smallest's time, past them the largest's plus the extra bytes at
    ``bandwidth``; inf where the data has none (the caller's NCCL price applies)."""
    nbytes, n = np.broadcast_arrays(np.asarray(nbytes, dtype=float), np.asarray(world_size))
    out = np.full(nbytes.shape, np.inf)
    for w in np.unique(n):
        measured = points(link, int(w), algorithm)
        if measured is not None:
            x, t = measured
            at = n == w
            b = nbytes[at]
            out[at] = np.where(b > x[-1], t[-1] + (b - x[-1]) / bandwidth(link, int(w), algorithm),
                               np.interp(b, x, t))
    return out if out.ndim else float(out)
