"""How a model's kernels are priced fast: a plan per model and deployment.

Which kernels a step runs, how often each runs on each stage, and which of them
stack into one op (same class, same settings) depend on the model and the deployment only:
a plan finds them once per pair (``_plan``). A prediction builds the kernels on the
phases' points (prefill chunks, decode contexts, or a sweep; the sizes are arrays over
them), lays the sizes that follow the points into each group's stacked arguments (the
others are laid once per number of points), and prices the groups in a few passes: the
rules' roofline terms of every group at once (``PricedTerms``), the collectives at once,
an attention backend's prefill and decode kernels as one group with each regime's
parameters per point. Per point, the arithmetic is that of each kernel priced alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property, lru_cache, partial
from typing import NamedTuple

import numpy as np

from ..ops.collectives import Collective
from ..pricing import PricedCollectives, price_terms
from ..rules import PER_POINT, in_sequence, terms_for
from ..predict import predict
from ..timing import Timing, with_fields
from .deploy import Deployment, shard
from .hf import hf_kernels
from .kernels import Kernel, Phase, _all_args, phase_kernels


_NUMBERS = (int, float, np.ndarray, np.float64, np.int64)


def _numeric(v) -> bool:
    if type(v) in _NUMBERS:  # the common cases, fast
        return True
    return isinstance(v, (int, float, np.ndarray, np.number)) and not isinstance(v, bool)


@dataclass(frozen=True)
class _Group:
    """Kernels of one class whose non-numeric arguments agree, priced as one op over
    their stacked numeric arguments."""

    cls: type
    static: dict
    numeric: tuple  # the fields stacked over the members' points
    members: tuple  # (phase, kernel) pairs, in stacking order

    def op(self, args: dict, fields: dict | None = None):
        """The group's op over its members' stacked numeric ``args``. ``fields``: every
        field of an op of the group already built and checked; the op is then made from
        them without the checks (the plan's probe checked the group, and every size here
        is a product of checked ones)."""
        if fields is None:
            return self.cls(**self.static, **args)
        op = object.__new__(self.cls)
        op.__dict__.update(fields)
        op.__dict__.update(args)
        return op


@dataclass(frozen=True)
class _Layout:
    """What a phase's kernel list fixes whatever the sizes: runs per forward on each
    stage, host launches, and each kernel's row of the per-name table."""

    mult: np.ndarray  # [kernel, stage]: runs per forward pass on each stage
    counts: np.ndarray  # per kernel: runs per forward pass
    launches: np.ndarray  # [kernel, 1]: kernels launched from the host per run
    names: tuple  # the table's rows: kernel names, in order of first appearance
    row_of: np.ndarray  # per kernel: its table row
    row_counts: list  # per table row: runs per forward pass
    host_keys: tuple  # per kernel: a profile host key of what a run adds on the host, or ""


_STAGE_KEYS = ("layer", "dense", "moe", "first", "last", "send")


def _layout(kernels: list[Kernel], sh, d: Deployment) -> _Layout:
    S = d.pp
    onehot = lambda s: [float(i == s) for i in range(S)]  # noqa: E731
    per_stage = dict(zip(_STAGE_KEYS, (sh.stage_layers, sh.stage_dense, sh.stage_moe, onehot(0),
                                       onehot(S - 1), [1.0] * (S - 1) + [0.0])))
    mult = np.array([[x * k.count for x in per_stage[k.where]] for k in kernels], dtype=float)
    names = tuple(dict.fromkeys(k.name for k in kernels))
    row = {name: r for r, name in enumerate(names)}
    counts, row_of = mult.sum(axis=1), np.array([row[k.name] for k in kernels])
    return _Layout(mult, counts, np.array([[k.launches] for k in kernels], dtype=float), names, row_of,
                   _row_sums(row_of, counts, len(names)), tuple(k.host for k in kernels))


def _row_sums(row_of: np.ndarray, x: np.ndarray, rows: int) -> list:
    """Per table row: the sum of ``x`` over the row's kernels."""
    return np.bincount(row_of, weights=x, minlength=rows).tolist()


def _groups(lists: list[list[Kernel]]) -> tuple[_Group, ...]:
    """Group the kernels of every phase by class and non-numeric arguments (kernels of
    several regimes, such as the prefill and decode kernels of an attention backend, are
    priced in one pass with their regimes' parameters per point)."""
    found: dict = {}
    for j, kernels in enumerate(lists):
        for i, k in enumerate(kernels):
            # (settings left at their defaults written out: such kernels stack with those
            # that name the same values)
            static = tuple((f, v) for f, v in _all_args(k.cls, k.args).items()
                           if f != "name" and not _numeric(v))
            numeric = tuple(f for f, v in k.args.items() if _numeric(v))
            found.setdefault((k.cls, static), (numeric, []))[1].append((j, i))
    groups = [_Group(cls, dict(static), numeric, tuple(members)) for (cls, static), (numeric, members) in found.items()]
    # (collectives last: the other groups' points then lie in one run of the priced terms)
    return tuple(sorted(groups, key=lambda g: g.cls is Collective))


class _Plan:
    """The structure of the kernels of some phases of a model under a deployment: it
    depends on neither the batch nor the lengths, so it is found once per pair, from the
    kernels built on one point. An argument that is an array there follows the phase's
    points (batch, query length, key length, logits flag); the others are constants."""

    def __init__(self, model, d: Deployment, names: tuple):
        self.model, self.deployment, self.names = model, d, names
        self.sharding = shard(model, d)
        self.build = hf_kernels if d.kernels == "hf" else phase_kernels
        self.kernels = [self.built(j, [np.ones(1)] * len(_INPUTS)) for j in range(len(names))]
        self.sizes = tuple(len(ks) for ks in self.kernels)
        self.layouts = tuple(_layout(ks, self.sharding, d) for ks in self.kernels)
        self.groups = _groups(self.kernels)
        members = [m for g in self.groups for m in g.members]
        self.member_phase = np.array([j for j, _ in members])
        self.member_kernel = np.array([i for _, i in members])
        self._sources: dict = {}
        self._places: dict = {}
        # every field of each group's op, built (and checked) once from a probe
        probe = self.arguments([Phase(name, batch=1, seq_q=1, seq_kv=1, sequences=1) for name in names])
        self.fields = [{f.name: getattr(op, f.name) for f in fields(g.cls)}
                       for g, args in zip(self.groups, probe.groups) for op in (g.op(args),)]

    def built(self, j: int, inputs: list) -> list[Kernel]:
        """Phase ``j``'s kernels at ``inputs``: its batch, query length, key length and
        logits flag, as arrays over its points (_INPUTS)."""
        b, q, k, logits = inputs
        return self.build(self.model, self.deployment, Phase(self.names[j], batch=b, seq_q=q, seq_kv=k,
                                                             sequences=1, logits=logits), self.sharding)

    def arguments(self, phases: list[Phase]) -> "_Arguments":
        """The groups' stacked numeric arguments, the kernels' masks, and the kernels
        themselves, at ``phases``."""
        ns = tuple(ph.n for ph in phases)
        places = self._places.get(ns) or self._place(ns)
        kernels = [self.built(j, _inputs(ph)) for j, ph in enumerate(phases)]
        if any(len(ks) != n for ks, n in zip(kernels, self.sizes)):  # (a builder that branched on the numbers)
            raise AssertionError("a phase's kernels changed with its points; the plan holds for none")
        constants = places.constants
        if places.dynamic:
            laid = constants.copy()
            for a, b, j, i, f in places.dynamic:
                laid[a:b] = kernels[j][i].args[f]
        groups = [{f: (laid if follows else constants)[a:b] for f, (a, b, follows) in spans.items()}
                  for spans in places.spans]
        masks = [[(i, kernels[j][i].mask) for i in m] for j, m in enumerate(places.masks)]
        return _Arguments(groups, masks, kernels)

    def _place(self, ns: tuple) -> "_Places":
        """Where each member's value of each stacked argument lies at ``ns`` points: the
        constants laid once, and the spans of the values that follow the points."""
        constants, spans, dynamic, at = [], [], [], 0
        for g in self.groups:
            span = {}
            for f in g.numeric:
                start, follows = at, False
                for j, i in g.members:
                    v, n = self.kernels[j][i].args[f], ns[j]
                    if _follows(v):
                        dynamic.append((at, at + n, j, i, f))
                        constants.append(np.zeros(n))
                        follows = True
                    else:
                        constants.append(np.full(n, v, dtype=float))
                    at += n
                span[f] = (start, at, follows)
            spans.append(span)
        masks = [[i for i, k in enumerate(ks) if _follows(k.mask)] for ks in self.kernels]
        constants = np.concatenate(constants) if constants else np.zeros(0)
        constants.setflags(write=False)  # (the arguments that no phase's numbers change are views of it)
        places = _Places(constants, tuple(dynamic), spans, masks)
        if len(self._places) > _KEPT:
            self._places.clear()
        self._places[ns] = places
        return places

    def rows(self, ns: tuple) -> np.ndarray:
        """For the groups' stacked points, end to end: where each lands in the phases'
        [kernel, point] arrays, flattened and laid end to end (phase ``j`` over ``ns[j]``
        points)."""
        offsets = np.cumsum([0] + [k * n for k, n in zip(self.sizes, ns)])
        n = np.array(ns)[self.member_phase]
        start = offsets[self.member_phase] + self.member_kernel * n
        first = np.cumsum(n) - n
        return np.repeat(start - first, n) + np.arange(first[-1] + n[-1])

    def sources(self, ns: tuple) -> np.ndarray:
        """The inverse of ``rows``: for the phases' [kernel, point] arrays, flattened and
        laid end to end, where each value sits among the groups' stacked points (kept per
        ``ns``: every prediction of the same chunking and decode points shares it)."""
        if ns not in self._sources:
            if len(self._sources) > _KEPT:
                self._sources.clear()
            self._sources[ns] = np.argsort(self.rows(ns))
        return self._sources[ns]


def _follows(v) -> bool:
    """Whether a kernel's argument follows the phase's points: built on arrays of them, it
    is an array (or a numpy number) where a constant is a plain one."""
    return isinstance(v, (np.ndarray, np.generic))


_INPUTS = ("batch", "seq_q", "seq_kv", "logits")  # the phase's numbers the kernels' sizes follow
_KEPT = 64  # layouts a plan keeps, per distinct number of points of its phases


def _inputs(ph: Phase) -> list:
    """The phase's numbers the kernels' sizes follow (_INPUTS), as arrays over its points."""
    return [_points(getattr(ph, f), ph.n) for f in _INPUTS]


def _points(x, n: int) -> np.ndarray:
    """``x`` (a number, or an array of one or ``n`` values) as ``n`` floats."""
    if type(x) in (int, float):
        return np.full(n, float(x))
    if type(x) is np.ndarray and x.size == n:
        return x.astype(float, copy=False).reshape(n)
    return np.full(n, np.asarray(x, dtype=float).item())


class _Places(NamedTuple):
    constants: np.ndarray  # every stacked argument, end to end, the values that follow the points left 0
    dynamic: tuple  # (start, end, phase, kernel, field) of each argument that follows the points
    spans: list  # per group: field -> (start, end) in the stacked arguments, whether any follows the points
    masks: list  # per phase: the kernels whose masks follow the points


class _Arguments(NamedTuple):
    groups: list  # per group: field -> its stacked values
    masks: list  # per phase: (kernel, mask per point)
    kernels: list  # per phase: its kernels, built on its points


@lru_cache(maxsize=128)
def _plan(model, d: Deployment, names: tuple) -> _Plan:
    """The plan of phases ``names``."""
    return _Plan(model, d, names)


@dataclass
class _Priced:
    """Per point results of the kernels of one phase, as [kernel, point] arrays;
    ``groups`` holds the stacked ops' timings (in the plan's group order)."""

    latency_s: np.ndarray
    flops: np.ndarray
    hbm_bytes: np.ndarray
    bound: np.ndarray
    groups: list
    plan: _Plan
    ns: tuple  # points of each phase priced with this one
    phase: int  # this phase's index among them

    @property
    def layout(self) -> _Layout:
        return self.plan.layouts[self.phase]

    @cached_property
    def where(self) -> list:
        """Per kernel: (its group's index, its rows in the group's stacked op)."""
        out: list = [None] * self.plan.sizes[self.phase]
        for g, group in enumerate(self.plan.groups):
            at = 0
            for j, i in group.members:
                if j == self.phase:
                    out[i] = (g, slice(at, at + self.ns[j]))
                at += self.ns[j]
        return out


def _price(plan: _Plan, args: "_Arguments", ns: tuple, spec, profile) -> list[_Priced]:
    """Time the kernels of each phase (over ``ns`` points): each group of the plan is one
    op over its members' stacked numeric ``args``; the roofline terms of all of them are
    priced at once, and ops that have none (collectives, kernels of several regimes) by
    one predict call each."""
    ops = [g.op(a, f) for g, a, f in zip(plan.groups, args.groups, plan.fields)]
    sizes = [sum(ns[j] for j, _ in g.members) for g in plan.groups]
    terms = [terms_for(op, spec, profile) for op in ops]
    batched = [i for i, t in enumerate(terms) if t is not None]
    batch = (price_terms([terms[i] for i in batched], spec, in_sequence=True, shapes=[(sizes[i],) for i in batched])
             if batched else None)
    # the groups' points in group order: runs of priced groups as slices of the batch,
    # the collectives (last in a plan) as one more batch, any other op from its timing
    pieces: list = [[], [], [], []]  # latency, FLOPs, HBM bytes, bound
    timings, k, i = [], 0, 0
    while i < len(ops):
        if terms[i] is None and type(ops[i]) is Collective:
            rest = range(i, len(ops))
            if any(type(ops[g]) is not Collective for g in rest):
                raise AssertionError("collectives come last in a plan")
            links = PricedCollectives([ops[g] for g in rest], spec, profile, shapes=[(sizes[g],) for g in rest])
            timings += [partial(links.timing, c) for c in range(len(rest))]
            for piece, x in zip(pieces, (links.latency_s, links.flops, links.hbm_bytes, links.bound)):
                piece.append(np.broadcast_to(x, (sum(sizes[i:]),)))
            break
        if terms[i] is None:
            t = in_sequence(predict(ops[i], spec, profile))
            for piece, x in zip(pieces, (t.latency_s, t.flops, t.hbm_bytes, t.bound)):
                piece.append(np.broadcast_to(x, (sizes[i],)))
            timings.append(t)
            i += 1
            continue
        run = i
        while i < len(ops) and terms[i] is not None:
            timings.append(partial(batch.timing, k + i - run))
            i += 1
        a, b = batch.offsets[k], batch.offsets[k + i - run]
        k += i - run
        for piece, x in zip(pieces, (batch.latency_s, batch.flops, batch.hbm_bytes, batch.bound)):
            piece.append(x[a:b] if np.ndim(x) else np.full(b - a, x))
    stacked = np.stack([p[0] if len(p) == 1 else np.concatenate(p) for p in pieces[:3]])
    bound = np.asarray(pieces[3][0] if len(pieces[3]) == 1 else np.concatenate(pieces[3]), dtype=object)
    # as the phases' [kernel, point] arrays, in C order (a matrix product's last bit can
    # follow the layout of its operands)
    order = plan.sources(ns)
    cols, bound = np.take(stacked, order, axis=1), bound[order]
    out, at = [], 0
    for j, (k, n) in enumerate(zip(plan.sizes, ns)):
        out.append(_Priced(*cols[:, at:at + k * n].reshape(3, k, n), bound[at:at + k * n].reshape(k, n),
                           groups=timings, plan=plan, ns=ns, phase=j))
        at += k * n
    return out


def _slice_timing(t: Timing, rows: slice) -> Timing:
    total = np.size(t.latency_s)  # the stacked op's points

    def cut(x):
        if isinstance(x, dict):
            return {k: cut(v) for k, v in x.items()}
        return x[rows] if np.ndim(x) and np.shape(x)[0] == total else x

    return with_fields(t, **{f: cut(getattr(t, f)) for f in PER_POINT}, parts=[])
