"""Fit the host side of transformers' eager forward to timed decode steps.

``benchmarks/hf_forward.py`` times whole forwards of transformers models (records of op
``hf_forward``). Launched eagerly, a decode step of a small batch is paced by the host: each
PyTorch op that transformers' modules issue from Python costs host time whatever its kernel
takes, and the step takes the longer of the host's time and the GPU's
(``rooflinesim.models.workload``). Two host parameters, fitted after the GPU side (which no
eager record fits), by robust least squares on log time:

  hf                          ``call_s``: host seconds per PyTorch op of the forward, through
                              transformers' modules and PyTorch's dispatch (StaticCache steps);
  hf:attention_new_shape      ``call_s``: host seconds an SDPA call adds when its key length is
                              new, as every DynamicCache step's is (cuDNN builds a plan for
                              each new shape; measured: most of a DynamicCache step's time).

Held-out errors come from leaving each model's records out in turn. And one GPU-side
figure the timed forwards give: ``hf:graph_gap`` (``gap_s``), what a CUDA graph's replay of
a decode step takes per kernel beyond the kernels' own durations (the profiler's kernel sum
of the same step run eagerly), the median over the steps timed both ways. Calibrated
kernel times include it (the harness times graph replays); transformers' prefill, which
no graph runs, is predicted as its kernel sum, without it.
"""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np

from .profile import HostParams, Profile
from .validate import stats

KEYS = ("hf", "hf:attention_new_shape")
GAP_KEY = "hf:graph_gap"  # (gap_s: what a CUDA graph's replay adds per kernel to the kernels' own times)
SLACK = 128  # benchmarks/hf_forward.py: StaticCache positions past the context, when a record does not say


def is_hf_eager_step(rec: dict) -> bool:
    return (rec.get("op") == "hf_forward" and rec.get("mode") == "eager" and rec.get("phase") == "decode"
            and rec.get("status", "ok") == "ok")


@lru_cache(maxsize=64)
def _model(name: str, layers: int):
    from ..models.config import from_hf_dict
    from ..models.presets import preset_path

    raw = json.loads(preset_path(name).read_text())
    raw["num_hidden_layers"] = layers
    return from_hf_dict(raw, name=name)


def record_step(rec: dict, engine: bool = False, eager: bool | None = None):
    """(model, deployment, phase) of one step an ``hf_forward`` record timed: transformers'
    kernels in its cache mode (``engine``: an engine's fused kernels for the same shapes);
    ``eager`` None: as the record's mode."""
    from ..models.deploy import Deployment
    from ..models.workload import Phase

    model = _model(rec["model"], int(rec["layers"]))
    b = rec["batch"]
    eager = (rec["mode"] == "eager" and rec["phase"] == "decode") if eager is None else eager
    cache = "none" if rec["phase"] == "prefill" else rec.get("cache", "static")
    d = Deployment(eager=eager) if engine else Deployment(kernels="hf", hf_cache=cache, eager=eager)
    if rec["phase"] == "prefill":
        return model, d, Phase("prefill", batch=b, seq_q=rec["seq"], seq_kv=rec["seq"], sequences=b)
    keys = rec["context"] + 1
    if cache == "static" and not engine:  # (SDPA reads the whole StaticCache)
        keys = rec.get("cache_len", rec["context"] + SLACK)
    return model, d, Phase("decode", batch=b, seq_q=1, seq_kv=keys, sequences=b)


def step_parts(rec: dict, spec, profile: Profile) -> tuple[float, float, float]:
    """(the step's GPU seconds, PyTorch ops issued, SDPA calls with a new key length) of an
    eager decode record."""
    from ..models.workload import price_phases

    model, d, ph = record_step(rec, eager=False)
    r = price_phases(model, spec, profile, d, [ph])[0]
    return float(r.step_s[0]), ops_issued(r), float(sum(
        c for c, k in zip(r.priced.layout.counts, r.priced.layout.host_keys) if k == KEYS[1]))


def ops_issued(result) -> float:
    """PyTorch ops one forward of a priced phase issues, at its first point (kernels its
    steps skip, such as a mask a window has not reached, left out)."""
    layout = result.priced.layout
    runs = layout.mult[:, 0] * layout.launches[:, 0] * (result.latency_s[:, 0] > 0)
    return float(runs.sum())


def _predict(parts: np.ndarray, call_s: float, new_shape_s: float) -> np.ndarray:
    gpu, ops, new = parts.T
    return np.maximum(gpu, ops * call_s + new * new_shape_s)


def _fit(parts: np.ndarray, measured: np.ndarray, key: str, call_s: float) -> float:
    """The one parameter ``key`` by a robust fit of log time over a log grid, refined."""
    from scipy.optimize import minimize_scalar

    def cost(log_x):
        x = float(np.exp(log_x))
        pred = _predict(parts, x, 0.0) if key == KEYS[0] else _predict(parts, call_s, x)
        r = np.log(pred / measured)
        return float(np.sum(np.sqrt(1 + (r / 0.05) ** 2) - 1))  # soft L1

    grid = np.linspace(np.log(1e-7), np.log(2e-2), 120)
    best = grid[int(np.argmin([cost(g) for g in grid]))]
    res = minimize_scalar(cost, bounds=(best - 0.1, best + 0.1), method="bounded")
    return float(np.exp(res.x))


def graph_gaps(records) -> list[float]:
    """Per decode step timed both eagerly (with its profiled kernel sum) and as a graph
    replay: (replay - kernel sum) / kernels."""
    key = lambda r: (r.get("model"), r.get("layers"), r.get("batch"), r.get("context"), r.get("cache", "static"))  # noqa: E731
    profiled = {key(r): r for r in records if r.get("op") == "hf_forward" and r.get("mode") == "eager"
                and r.get("phase") == "decode" and r.get("kernel_sum_s") and r.get("kernels")}
    return [(r["measured_s"] - profiled[key(r)]["kernel_sum_s"]) / profiled[key(r)]["kernels"]
            for r in records if r.get("op") == "hf_forward" and r.get("mode") == "graph"
            and r.get("status", "ok") == "ok" and key(r) in profiled]


def fit_hf_host(records, spec, profile: Profile) -> tuple[Profile, dict, dict]:
    """The profile with its ``hf`` host keys fitted to the eager transformers decode steps
    among ``records``; (profile, held-out errors per record id as (op, error), stats per key)."""
    recs = [r for r in records if is_hf_eager_step(r)]
    dynamic = {id(r) for r in recs if r.get("cache") == "dynamic"}  # (the rest: StaticCache steps)
    if len(recs) - len(dynamic) < 3:
        return profile, {}, {}
    parts = {id(r): step_parts(r, spec, profile) for r in recs}
    meas = {id(r): float(r["measured_s"]) for r in recs}

    def fit_on(train, key, call) -> float:
        return _fit(np.array([parts[id(r)] for r in train]), np.array([meas[id(r)] for r in train]), key, call)

    def fitted(train) -> tuple[float, float]:
        call = fit_on([r for r in train if id(r) not in dynamic], KEYS[0], 0.0)
        dy = [r for r in train if id(r) in dynamic]
        return call, (fit_on(dy, KEYS[1], call) if len(dy) >= 3 else 0.0)

    errors, by_key = {}, {KEYS[0]: [], KEYS[1]: []}
    models = sorted({r["model"] for r in recs})
    for m in models if len(models) > 1 else ():
        train = [r for r in recs if r["model"] != m]
        if all(id(r) in dynamic for r in train):
            continue
        call, new = fitted(train)
        for r in (r for r in recs if r["model"] == m):
            if id(r) in dynamic and not any(id(t) in dynamic for t in train):
                continue
            e = float(_predict(np.array([parts[id(r)]]), call, new)[0] / meas[id(r)] - 1)
            errors[id(r)] = ("hf_forward", e)
            by_key[KEYS[1] if id(r) in dynamic else KEYS[0]].append(e)
    call, new = fitted(recs)
    host = dict(profile.host)
    gaps = graph_gaps(records)
    if len(gaps) >= 3:
        host[GAP_KEY] = HostParams(gap_s=max(float(np.median(gaps)), 0.0), n=len(gaps))
    host[KEYS[0]] = HostParams(call_s=call, n=len(recs) - len(dynamic))
    if new:
        host[KEYS[1]] = HostParams(call_s=new, n=len(dynamic))
    cv = {f"host/{k}": stats(e) for k, e in by_key.items() if e}
    return profile.model_copy(update={"host": host}), errors, cv
