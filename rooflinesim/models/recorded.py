"""A plan's pricing recorded once per shape of its points, then replayed.

Pricing a plan's kernels runs a few hundred numpy calls on small arrays, and Python's own
work around them (rules, terms, results) costs as much again. For the same points per
phase, the calls are the same at any batch and lengths: ``priced`` records them
(``rooflinesim.trace``) the second time it meets a (plan, points, spec, profile) (the
KEPT most recent such keys are kept), and
from then on replays them as one compiled function of the phases' numbers, leaving out
every call the results do not need (diagnostic losses, timing fields). A branch the code
took on a number of the recording is a guard: where a replay's numbers take another way,
the pricing runs as written and is recorded again (a few recordings are kept per key, each
holding where its guards do, tried in turn; past them, a prediction none holds for is
priced as written without recording).
Replayed numbers are those of the code run directly, to the last bit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..trace import Tape, Var
from .kernels import Phase
from .plan import _Plan, _Priced, _inputs, _price


RECORDED_POINTS = 2048  # points of all phases above which a pricing is priced as written, not recorded
# (a recording keeps every value it meets until it is done: 25-45 MB at 1,000-2,000 points)
VARIANTS = 4  # recordings of one key (each holds where its guards do); past them, no more are made
KEPT = 256  # keys kept, over all plans, the least recently used let go (one recording: about 0.2 MB)

_KEYS: OrderedDict = OrderedDict()  # _key(plan, points per phase, spec, profile) -> _Recording


def priced(plan: _Plan, phases: list[Phase], spec, profile) -> tuple[list, list[_Priced]]:
    """Per phase: (the kernels' masks, a function that gives the replayed sizes), and
    its priced kernels; replayed from a recording where one holds."""
    ns = tuple(ph.n for ph in phases)
    inputs = _inputs(phases)
    key = _key(plan, ns, spec, profile)
    found = _KEYS.get(key)
    if found is None:  # (a first prediction of this shape: priced as written)
        if sum(ns) <= RECORDED_POINTS:
            _KEYS[key] = _Recording(plan, spec, profile.parts())
            if len(_KEYS) > KEPT:
                _KEYS.popitem(last=False)
        return as_written(plan, inputs, ns, spec, profile)
    try:
        _KEYS.move_to_end(key)
    except KeyError:  # (let go of meanwhile, by another thread's prediction)
        pass
    replays = found.replays
    for i, (function, sizes) in enumerate(replays):
        out = function(*inputs)
        if out is not None:
            if i:  # (the last that held is tried first)
                replays.insert(0, replays.pop(i))
            return _unpack(out, sizes, plan, inputs, ns, spec, profile)
    found.misses += bool(replays)
    if found.given_up or len(replays) >= VARIANTS:
        found.given_up = True
        return as_written(plan, inputs, ns, spec, profile)
    try:
        function, values, sizes = _record(plan, inputs, ns, spec, profile)
    except Exception as e:  # (whatever the recording cannot follow is priced as written, which
        found.given_up, found.error = True, e  # raises the error if it is one)
        return as_written(plan, inputs, ns, spec, profile)
    replays.insert(0, (function, sizes))
    return _unpack(values, sizes, plan, inputs, ns, spec, profile)


def recording(plan: _Plan, ns: tuple, spec, profile) -> "_Recording | None":
    """What is kept for ``plan`` at ``ns`` points per phase, if anything."""
    return _KEYS.get(_key(plan, ns, spec, profile))


def _key(plan: _Plan, ns: tuple, spec, profile) -> tuple:
    """What a recording is kept by: the plan, the points per phase, and the values it was
    recorded with: the spec (frozen, but for its table of peak rates) and every parameter
    object of the profile (frozen; ``Profile.key``)."""
    return (id(plan), ns, id(spec), tuple(spec.compute.peak_flops_per_s.items()), profile.key())


def forget(plan: _Plan | None = None) -> None:
    """Let go of the recordings of ``plan`` (of every plan: None)."""
    for key in [k for k, r in _KEYS.items() if plan is None or r.plan is plan]:
        del _KEYS[key]


def as_written(plan: _Plan, inputs: list, ns: tuple, spec, profile):
    """``priced`` without a recording."""
    args = plan.arguments_at(inputs, ns)
    return [(m, (lambda v=v: v)) for m, v in zip(args.masks, args.values)], _price(plan, args, ns, spec, profile)


def _record(plan: _Plan, inputs: list, ns: tuple, spec, profile):
    """(the replay function, its outputs' values at ``inputs``, per phase the kernels
    whose masks lead the phase's outputs)."""
    tape = Tape.recording(inputs)
    args = plan.arguments_at(tape.variables(), ns)
    out = _price(plan, args, ns, spec, profile)
    outputs, sizes = [], []
    for masks, p in zip(args.masks, out):
        outputs += [v for _, v in masks] + [p.latency_s, p.flops, p.hbm_bytes, p.bound]
        sizes.append(tuple(i for i, _ in masks))
    values = [x.value if type(x) is Var else x.copy() if type(x) is np.ndarray else x for x in outputs]
    return tape.function(outputs), values, tuple(sizes)


@dataclass
class _Recording:
    """The recordings of a plan's pricing at some points per phase (see ``priced``)."""

    plan: _Plan  # (kept, with the spec and the profile's parts, so that the ids in the key stay theirs)
    spec: object
    parts: tuple
    replays: list = field(default_factory=list)  # (function, the kernels whose masks lead each phase's outputs)
    misses: int = 0  # predictions that no recording's guards held for
    given_up: bool = False  # no more recordings: a prediction no replay holds for is priced as written
    error: Exception | None = None  # what stopped a recording, if anything did


def _unpack(out: list, sizes: tuple, plan: _Plan, inputs: list, ns: tuple, spec, profile):
    phases, result, at = [], [], 0
    lazy = _Lazy(plan, inputs, ns, spec, profile)
    for j, kernels in enumerate(sizes):
        m = len(kernels)
        phases.append((list(zip(kernels, out[at:at + m])), partial(lazy.values, j)))
        lat, flops, hbm, bound = out[at + m:at + m + 4]
        at += m + 4
        result.append(_Priced(lat, flops, hbm, bound, groups=lazy, plan=plan, ns=ns, phase=j))
    return phases, result


class _Lazy:
    """What a replay leaves out, made when first asked for: the replayed sizes (a phase's
    kernels), and each group's full timing (a kernel's: priced as written)."""

    def __init__(self, *args):
        self.args, self._done = args, None

    def values(self, j: int) -> list:
        plan, inputs = self.args[:2]
        return plan.sizes_at(inputs, j)

    def __getitem__(self, g: int):
        if self._done is None:
            self._done = as_written(*self.args)
        return self._done[1][0].groups[g]
