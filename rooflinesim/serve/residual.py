"""How far ``serve`` has landed from published serving benchmarks, carried into its intervals.

The kernel model's error (``simulate.family_sigmas``) is one part of a serving answer's
error; the rest is what the simulation leaves out or gets wrong about the server (its time
around the GPU, the engine's kernels and memory, its scheduling). That part is measured:
``benchmarks/serving_check.py --write-residuals`` simulates every published point it can
re-create (``benchmarks/data/published_serving.yaml``) and stores each metric's log error,
log(published / simulated), in ``rooflinesim/data/serving_residuals.yaml``. Per group of
metrics (``GROUPS``) the spread is read as a log-normal sigma by the rule used for the
kernels (``log_sigma``), and a metric's interval from the kernel draws, [lo, hi] about the
point estimate m, widens to

    m exp(-sqrt(log(m / lo)^2 + (z sigma)^2)),  m exp(+sqrt(log(hi / m)^2 + (z sigma)^2))

(z: the normal quantile of the interval's level): the two spreads taken as independent, so
that their log half-widths add in quadrature. The spread includes the mean error: the
interval stays centred on the estimate and is as wide as the misses have been.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

RESIDUAL_FILE = "serving_residuals.yaml"
GROUPS = ("ttft", "itl", "e2el", "throughput")
APPLIES_TO = ("vllm", "sglang", "trtllm")  # (the served engines; static and hf are checked in-house)
Z90 = 1.6448536269514722  # (the standard normal's 95th percentile: a 90% interval)


def log_sigma(median_abs_log: float, p90_abs_log: float) -> float:
    """Sigma of a normal distribution of log errors from the median and the 90th percentile
    of their absolute values: the larger of the two readings (the cautious one)."""
    return max(median_abs_log / 0.6744897501960817, p90_abs_log / Z90)


def group_of(metric: str) -> str | None:
    """The residual group of a metric of ``metrics.summary`` (None: no interval widening)."""
    if metric.endswith("_ttft_ms") or metric.endswith("_queue_ms"):
        return "ttft"
    if metric.endswith("_itl_ms") or metric.endswith("_tpot_ms"):
        return "itl"
    if metric.endswith("_e2el_ms"):
        return "e2el"
    if metric.endswith("_throughput") or metric in ("request_goodput", "max_output_tokens_per_s"):
        return "throughput"
    return None


def sigmas_of(residuals: list) -> dict:
    """Per group, the sigma of ``residuals`` (rows with 'metric', 'log_error' and, where they
    have one, 'source'): each source weighs alike in the group, its rows sharing its weight,
    so that a source of many points (a table of sixty throughputs) does not stand for the
    others."""
    by: dict = {}
    for row in residuals:
        g = group_of(row["metric"])
        if g is not None:
            by.setdefault(g, []).append((abs(float(row["log_error"])), row.get("source", "")))
    out = {}
    for g, rows in sorted(by.items()):
        count: dict = {}
        for _, src in rows:
            count[src] = count.get(src, 0) + 1
        x = np.array([v for v, _ in rows])
        w = np.array([1.0 / count[src] for _, src in rows])
        out[g] = log_sigma(_quantile(x, w, 0.5), _quantile(x, w, 0.9))
    return out


def _quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The ``q`` quantile of values ``x`` of weights ``w``: the weighted percentile whose
    sorted values sit at (S_i - w_i) / (S_n - w_n) (S: their cumulative weights), which is
    numpy's linear method where the weights are equal."""
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order]
    if x.size == 1:
        return float(x[0])
    s = np.cumsum(w)
    return float(np.interp(q, (s - w) / (s[-1] - w[-1]), x))


@lru_cache(maxsize=1)
def shipped() -> dict:
    """The shipped residuals: the file's header and its per-group sigmas (from its rows)."""
    from importlib.resources import files

    import yaml

    data = yaml.safe_load((files("rooflinesim.data") / RESIDUAL_FILE).read_text())
    return {"source": data["source"], "engines_measured": list(data["engines_measured"]),
            "sigmas": sigmas_of(data["residuals"]), "points": len({r["point"] for r in data["residuals"]})}


def widen(metrics: dict, interval: dict, sigmas: dict) -> dict:
    """Each metric's kernel-draw interval widened by its group's serving sigma (see the
    module's notes); a metric of no group, or of a group with no sigma, keeps its own."""
    out = {}
    for key, (lo, hi) in interval.items():
        s = sigmas.get(group_of(key))
        m = metrics.get(key)
        if not s or m is None or not m > 0 or not lo > 0:
            out[key] = [lo, hi]
            continue
        w = Z90 * s
        below = math.sqrt(max(math.log(m / lo), 0.0) ** 2 + w * w)
        above = math.sqrt(max(math.log(hi / m), 0.0) ** 2 + w * w)
        out[key] = [min(lo, m * math.exp(-below)), max(hi, m * math.exp(above))]
    return out


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def met_probability(draws: list, slos: dict, sigmas: dict) -> float:
    """The probability that every SLO (metric -> limit) holds: over the kernel draws, the
    chance that each group's serving error keeps its metrics under their limits (errors
    fully correlated within a group, independent between groups; a group with no sigma
    counts a draw as met or not)."""
    total = 0.0
    for d in draws:
        p = 1.0
        worst: dict = {}
        for key, limit in slos.items():
            g = group_of(key)
            ratio = math.log(limit / d[key]) if d[key] > 0 else math.inf
            worst[g] = min(worst.get(g, math.inf), ratio)
        for g, ratio in worst.items():
            s = sigmas.get(g)
            p *= (1.0 if ratio >= 0 else 0.0) if not s else _phi(ratio / s)
        total += p
    return total / len(draws) if draws else math.nan
