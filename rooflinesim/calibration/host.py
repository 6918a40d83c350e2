"""Fit the host side of eager launches (``HostParams``) to eager measurements.

Graph-mode parameters are never fitted on eager records: ``fit_profile`` fits the GPU
side on CUDA-graph records, then this fits, key by key, the host time that makes
``max(host, GPU)`` (``rooflinesim.eager``) match the eager records, by robust least
squares on log time, with the same cross-validation over shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..eager import host_keys
from ..errors import UserError
from .folds import held_out
from .profile import HostParams, Profile, fit_ranges
from .records import Unpredictable, to_op
from .validate import is_eager, predicted, stats


@dataclass(frozen=True)
class HostGroup:
    key: str  # the profile's host key
    params: tuple  # the HostParams fields fitted: call_s and/or kernel_s
    select: Callable


def _keys(rec, spec) -> tuple:
    try:
        return host_keys(to_op(rec), spec)
    except (Unpredictable, UserError):
        return ()


# what each key's host time is made of: a call and the kernels it launches where one op's
# calls launch different counts (SDPA's flash backend splits decode: a second kernel and
# its buffers; cuBLAS splits k: a reduction kernel), per kernel for the harness's MoE
# layer (a few dozen PyTorch ops), else one time per call
_FITTED = {"attention": ("call_s", "kernel_s"), "gemm": ("call_s", "kernel_s"), "moe": ("kernel_s",)}


def host_groups(records, spec) -> list[HostGroup]:
    """In order: each family's calls together (what a dtype or backend with no eager
    records of its own takes; fitted first, before its own keys hide it), single kernels
    by their own keys (one host time per call), MoE layers (per
    kernel: the harness's layer issues a few dozen PyTorch ops), then sequences (their
    own call on top of their parts')."""
    keys = {id(r): _keys(r, spec) for r in records}
    own = sorted({k[0] for k in keys.values() if k} - {"moe", "sequence"})
    families = sorted({k[1] for k in keys.values() if len(k) > 1})
    last = [k for k in ("moe", "sequence") if any(ks[:1] == (k,) for ks in keys.values())]
    return [HostGroup(k, _FITTED.get(k.partition(":")[0], ("call_s",)),
                      lambda r, k=k, i=i: keys.get(id(r), ())[i:i + 1] == (k,))
            for k, i in [(k, 1) for k in families] + [(k, 0) for k in own] + [(k, 0) for k in last]]


def _with_host(profile: Profile, key: str, params: HostParams) -> Profile:
    host = {**profile.host, key: params}
    if key == "copy":  # (one kernel, no other work: the default, with the shared corner)
        host["default"] = params.model_copy(update={"corner": profile.host_params().corner})
    return profile.model_copy(update={"host": host})


def _with_corner(profile: Profile, p: float) -> Profile:
    host = dict(profile.host)
    host["default"] = host.get("default", HostParams()).model_copy(update={"corner": p})
    return profile.model_copy(update={"host": host})


def _fit_corner(records, spec, base: Profile) -> Profile:
    """The one p-norm joining host and GPU time, fitted on every eager record with the
    host times of a hard-max fit."""
    from scipy.optimize import least_squares

    meas = np.array([r["measured_s"] for r in records])

    def residual(x):
        pred = predicted(records, spec, _with_corner(base, float(x[0])))
        r = np.log(pred / meas)
        return np.where(np.isfinite(r), r, 5.0)

    r = fit_ranges(HostParams)["corner"]
    res = least_squares(residual, [r["prior"]], bounds=([r["bounds"][0]], [r["bounds"][1]]), loss="soft_l1",
                        f_scale=0.05, max_nfev=60)
    return _with_corner(base, float(res.x[0]))


def _fit_one(group: HostGroup, records, spec, base: Profile) -> HostParams:
    from scipy.optimize import least_squares

    meas = np.array([r["measured_s"] for r in records])

    def params(x) -> HostParams:
        return HostParams(**{name: float(np.exp(v)) for name, v in zip(group.params, x)}, n=len(records))

    def residual(x):
        pred = predicted(records, spec, _with_host(base, group.key, params(x)))
        r = np.log(pred / meas)
        return np.where(np.isfinite(r), r, 5.0)

    k = len(group.params)
    ranges = fit_ranges(HostParams)  # (fitted in log space)
    lo = np.log([ranges[name]["bounds"][0] for name in group.params])
    hi = np.log([ranges[name]["bounds"][1] for name in group.params])
    prior = np.log([ranges[name]["prior"] for name in group.params])
    best = None
    for start in (prior, prior + np.log(10.0)):  # (the prior, and ten times it)
        res = least_squares(residual, start, bounds=(lo, hi), loss="soft_l1", f_scale=0.05,
                            max_nfev=100 * k)
        if best is None or res.cost < best.cost:
            best = res
    return params(best.x)


def fit_host(meas_records, spec, profile: Profile, folds: int = 5) -> tuple[Profile, dict, dict]:
    """The profile with its host side fitted to the eager records among ``meas_records``;
    (profile, held-out errors per record id as (op, error), cross-validated stats per
    host key)."""
    # (the caller keeps those measured on spec; transformers' forwards: rooflinesim.calibration.hf)
    recs = [r for r in meas_records if is_eager(r) and r["op"] != "hf_forward"]
    errors: dict[int, tuple[str, float]] = {}
    group_cv: dict[str, dict] = {}
    groups = host_groups(recs, spec)
    if len(recs) >= 10:  # host times with a hard max, the corner on them, then host times again
        first = profile
        for group in groups:
            mine = [r for r in recs if group.select(r)]
            if len(mine) >= 3:
                first = _with_host(first, group.key, _fit_one(group, mine, spec, first))
        profile = _with_corner(profile, _fit_corner(recs, spec, first).host_params().corner)
    for group in groups:
        mine = [r for r in recs if group.select(r)]
        if len(mine) < 3:
            continue
        held = held_out(mine, folds,
                        lambda train, g=group: _with_host(profile, g.key, _fit_one(g, train, spec, profile)),
                        lambda test, fitted: predicted(test, spec, fitted))
        profile = _with_host(profile, group.key, _fit_one(group, mine, spec, profile))
        ok = np.isfinite(held)
        errs = held[ok] / np.array([r["measured_s"] for r in mine])[ok] - 1
        if errs.size:
            group_cv[f"host/{group.key}"] = stats(errs)
            for r, e in zip([r for r, o in zip(mine, ok) if o], errs):
                errors[id(r)] = (r["op"], float(e))
    return profile, errors, group_cv
