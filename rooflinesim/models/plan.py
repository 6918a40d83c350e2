"""How a model's kernels are priced fast: a plan per model and deployment.

Which kernels a step runs, how often each runs on each stage, and which of them
stack into one op (same class, same settings) depend on the model and the deployment only:
a plan finds them once per pair (``_plan``), with the phase numbers each kernel's sizes
follow (a GEMM's follow the batch and the query length, not the key length). A prediction
builds the kernels on the phases' points (prefill chunks, decode contexts, or a sweep; the
sizes are arrays over them), lays the sizes that follow the points into each group's
stacked arguments (the others are laid once per number of points), and prices the groups
in a few passes: the rules' roofline terms of every group at once (``PricedTerms``), the
collectives at once, an attention backend's prefill and decode kernels as one group with
each regime's parameters per point. A phase of many points prices each kernel once per
distinct value of the numbers it follows (a sweep's GEMMs once per batch, whatever the
contexts), and every point takes its value. Per point, the arithmetic is that of each
kernel priced alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property, lru_cache, partial
from typing import NamedTuple

import numpy as np

from ..eager import host_s, launched
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
    layers: np.ndarray  # [stage, 1]: decoder layers on each stage


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
                   _row_sums(row_of, counts, len(names)), tuple(k.host for k in kernels),
                   np.array([[x] for x in sh.stage_layers], dtype=float))


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
        self.follow_sets, self.set_of = zip(*(self._follows(j) for j in range(len(names))))
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

    def _follows(self, j: int) -> tuple:
        """Phase ``j``'s sets of the inputs (_INPUTS, by index) that its kernels' sizes
        follow, and each kernel's set: built with one input over two points and the others
        over one, a kernel follows that input where one of its sizes comes out over two
        points (a builder's numbers broadcast)."""
        follows = [set() for _ in self.kernels[j]]
        for f in range(len(_INPUTS)):
            inputs = [np.ones(2) if g == f else np.ones(1) for g in range(len(_INPUTS))]
            for i, k in enumerate(self.built(j, inputs)):
                if any(np.size(v) > 1 for v in k.args.values() if _follows(v)):
                    follows[i].add(f)
        sets = tuple(dict.fromkeys(tuple(sorted(x)) for x in follows))
        return sets, np.array([sets.index(tuple(sorted(x))) for x in follows], dtype=int)

    def arguments(self, phases: list[Phase]) -> "_Arguments":
        """The groups' stacked numeric arguments, the kernels' masks, the kernels
        themselves, and which points each kernel is priced at, at ``phases``."""
        ns = tuple(ph.n for ph in phases)
        inputs = [_inputs(ph) for ph in phases]
        points = [_distinct(sets, x, n) for sets, x, n in zip(self.follow_sets, inputs, ns)]
        key = (ns, tuple(None if p is None else p.counts for p in points))
        places = self._places.get(key) or self._place(key, points)
        kernels = [self.built(j, x) for j, x in enumerate(inputs)]
        if any(len(ks) != n for ks, n in zip(kernels, self.sizes)):  # (a builder that branched on the numbers)
            raise AssertionError("a phase's kernels changed with its points; the plan holds for none")
        constants = places.constants
        if places.dynamic:
            laid = constants.copy()
            for a, b, j, i, f, s in places.dynamic:
                v, at = kernels[j][i].args[f], points[j] and points[j].at[s]
                laid[a:b] = v if at is None or np.size(v) == 1 else v[at]
        groups = [{f: (laid if follows else constants)[a:b] for f, (a, b, follows) in spans.items()}
                  for spans in places.spans]
        masks = [[(i, kernels[j][i].mask) for i in m] for j, m in enumerate(places.masks)]
        return _Arguments(groups, masks, kernels, places, points)

    @cached_property
    def _stacking(self) -> "_Stacking":
        """How the groups' arguments are stacked, whatever the numbers of points."""
        slot_base = np.cumsum([0] + [len(sets) for sets in self.follow_sets])
        members = [(g, j, i) for g, group in enumerate(self.groups) for j, i in group.members]
        member = {(j, i): m for m, (_, j, i) in enumerate(members)}
        entry_member, entry_value, entry_segment, segment_group, dynamic, fields = [], [], [], [], [], []
        for g, group in enumerate(self.groups):
            spans = []
            for f in group.numeric:
                follows = False
                for j, i in group.members:
                    v = self.kernels[j][i].args[f]
                    if _follows(v):
                        dynamic.append((len(entry_member), j, i, f, int(self.set_of[j][i])))
                        follows = True
                    entry_member.append(member[j, i])
                    entry_value.append(0.0 if _follows(v) else float(v))
                    entry_segment.append(len(segment_group))
                spans.append((f, len(segment_group), follows))
                segment_group.append(g)
            fields.append(spans)
        return _Stacking(
            member_group=np.array([g for g, _, _ in members], dtype=int),
            member_slot=np.array([slot_base[j] + self.set_of[j][i] for _, j, i in members], dtype=int),
            member_of=[np.array([member[j, i] for i in range(k)], dtype=int) for j, k in enumerate(self.sizes)],
            entry_member=np.array(entry_member, dtype=int), entry_value=np.array(entry_value),
            entry_segment=np.array(entry_segment, dtype=int), segment_group=np.array(segment_group, dtype=int),
            dynamic=tuple(dynamic), fields=fields,
            masks=[[i for i, k in enumerate(ks) if _follows(k.mask)] for ks in self.kernels])

    def _place(self, key: tuple, points: list) -> "_Places":
        """Where each member's value of each stacked argument lies (``key``: the phases'
        points, and the distinct points of each set of inputs where a phase has them): the
        constants laid once, and the spans of the values that follow the points."""
        st, ns = self._stacking, key[0]
        slots = np.concatenate([np.full(len(sets), n) if p is None else np.array(p.counts)
                                for sets, p, n in zip(self.follow_sets, points, ns)])
        size = slots[st.member_slot]  # per member: its points
        start = np.cumsum(size) - size  # among all groups' stacked points
        group_size = np.bincount(st.member_group, weights=size, minlength=len(self.groups)).astype(int)
        in_group = start - (np.cumsum(group_size) - group_size)[st.member_group]
        # each argument's values stack its group's members (a segment per group and field)
        segment_size = group_size[st.segment_group]
        segment_end = np.cumsum(segment_size)
        segment_start = segment_end - segment_size
        entry_size = size[st.entry_member]
        entry_start = segment_start[st.entry_segment] + in_group[st.entry_member]
        constants = np.repeat(st.entry_value, entry_size)
        constants.setflags(write=False)  # (the arguments that no phase's numbers change are views of it)
        a, n = entry_start.tolist(), entry_size.tolist()
        dynamic = tuple((a[e], a[e] + n[e], j, i, f, s) for e, j, i, f, s in st.dynamic)
        a, b = segment_start.tolist(), segment_end.tolist()
        spans = [{f: (a[seg], b[seg], follows) for f, seg, follows in group} for group in st.fields]
        places = _Places(constants, dynamic, spans, st.masks, group_size.tolist(),
                         [start[m] for m in st.member_of], in_group, size)
        if len(self._places) > _KEPT:
            self._places.clear()
        self._places[key] = places
        return places

    def order(self, args: "_Arguments", j: int, n: int) -> np.ndarray:
        """For phase ``j``'s [kernel, point] arrays (over its ``n`` points), flattened,
        where each value sits among the groups' stacked points."""
        starts, p = args.places.starts[j], args.points[j]
        if p is None:
            return np.add.outer(starts, np.arange(n)).ravel()
        return (starts[:, None] + p.of[self.set_of[j]]).ravel()


class _Distinct(NamedTuple):
    """A phase's distinct points per set of the inputs its kernels follow."""

    at: list  # per set: the points a kernel that follows it is priced at (None: all)
    of: np.ndarray  # [set, point]: which of those each point takes
    counts: tuple  # per set: how many


DISTINCT_POINTS = 64  # points of a phase from which each kernel is priced at its distinct ones only


def _distinct(sets: tuple, inputs: list, n: int) -> _Distinct | None:
    """The distinct points of each set of inputs over a phase's ``n`` points (None below
    DISTINCT_POINTS, where finding them costs more than it saves)."""
    if n < DISTINCT_POINTS:
        return None
    like = {}  # each input that varies over the points: the first input equal to it (a prefill's key and query lengths)
    for f, x in enumerate(inputs):
        if np.any(x != x[0]):
            like[f] = next((g for g in set(like.values()) if np.array_equal(x, inputs[g])), f)
    varying = len(set(like.values()))
    at, of, counts = [], np.empty((len(sets), n), dtype=int), []
    for s, fs in enumerate(sets):
        first, inverse = _rows([inputs[g] for g in sorted({like[f] for f in fs if f in like})], n, varying)
        at.append(first)
        of[s] = inverse
        counts.append(n if first is None else first.size)
    return _Distinct(at, of, tuple(counts))


def _rows(cols: list, n: int, varying: int) -> tuple:
    """The first point of each distinct row of ``cols`` (None: every point is one) and
    which row each point has. A set that follows every number that varies
    (``varying``) is taken as distinct throughout."""
    if len(cols) == varying:
        return None, np.arange(n)
    if not cols:
        return np.zeros(1, dtype=int), np.zeros(n, dtype=int)
    if len(cols) == 1:
        _, first, inverse = np.unique(cols[0], return_index=True, return_inverse=True)
    else:
        order = np.lexsort(cols[::-1])
        rows = np.stack(cols)[:, order]
        new = np.concatenate([[True], np.any(rows[:, 1:] != rows[:, :-1], axis=0)])
        first, inverse = order[new], np.empty(n, dtype=int)
        inverse[order] = np.cumsum(new) - 1
    return (None, np.arange(n)) if first.size == n else (first, inverse)


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
    dynamic: tuple  # (start, end, phase, kernel, field, its set of inputs) of each argument that follows the points
    spans: list  # per group: field -> (start, end) in the stacked arguments, whether any follows the points
    masks: list  # per phase: the kernels whose masks follow the points
    sizes: list  # per group: its stacked points
    starts: list  # per phase, per kernel: its first point among all groups' stacked points
    in_group: np.ndarray  # per member (in stacking order): its first point among its group's
    points: np.ndarray  # per member: its points


class _Stacking(NamedTuple):
    """How a plan's groups stack their members' arguments: each member's points are those
    of its phase (or its set of inputs' distinct ones), each argument's values lie member
    after member (an entry each) in a segment per group and field."""

    member_group: np.ndarray  # per member, in stacking order: its group
    member_slot: np.ndarray  # per member: its phase's set of inputs, numbered over the phases
    member_of: list  # per phase, per kernel: its member
    entry_member: np.ndarray  # per entry: its member
    entry_value: np.ndarray  # per entry: its constant value (0 where it follows the points)
    entry_segment: np.ndarray  # per entry: its group and field's segment
    segment_group: np.ndarray  # per segment: its group
    dynamic: tuple  # (entry, phase, kernel, field, set of inputs) of the entries that follow the points
    fields: list  # per group: (field, its segment, whether any entry follows the points)
    masks: list  # per phase: the kernels whose masks follow the points


class _Arguments(NamedTuple):
    groups: list  # per group: field -> its stacked values
    masks: list  # per phase: (kernel, mask per point)
    kernels: list  # per phase: its kernels, built on its points
    places: _Places
    points: list  # per phase: its _Distinct points (None: each kernel priced at every point)


@lru_cache(maxsize=128)
def _plan(model, d: Deployment, names: tuple) -> _Plan:
    """The plan of phases ``names``."""
    return _Plan(model, d, names)


def _taken(i: int, doc: str) -> cached_property:
    """A _Priced value per kernel and point, taken from the groups' stacked points (the
    ``i``-th of ``stacked``) when first asked for."""

    def taken(self) -> np.ndarray:
        return self.stacked.values[i][self.order].reshape(self.shape)

    taken.__doc__ = doc
    return cached_property(taken)


class _Stacked:
    """The groups' stacked points' values, shared by the phases priced together: the
    latencies, and the FLOPs, HBM bytes and bounds laid end to end from their groups'
    parts when first asked for (a step time needs none of them)."""

    def __init__(self, latency_s: np.ndarray, parts: list, host: tuple):
        self.latency_s, self._parts, self._host = latency_s, parts, host

    @cached_property
    def values(self) -> tuple:
        flops, hbm, bound = (_laid([f() for f in p]) for p in self._parts)
        return (flops, hbm, np.asarray(bound, dtype=object), *self._host)


def masked(lat: np.ndarray, masks: list) -> np.ndarray:
    """``lat`` [kernel, point] with each kernel of ``masks`` (kernel, mask per point) 0
    where its mask is."""
    if not masks:
        return lat
    lat = lat.copy()
    for i, mask in masks:
        lat[i] = lat[i] * mask
    return lat


def _laid(parts: list) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _cut(priced, name: str, a: int, b: int) -> np.ndarray:
    """Points ``a`` to ``b`` of a batch of priced groups' ``name`` values."""
    x = getattr(priced, name)
    return x[a:b] if np.ndim(x) else np.full(b - a, x)


@dataclass
class _Priced:
    """Per point results of the kernels of one phase, as [kernel, point] arrays taken from
    the groups' stacked points when asked for; ``groups`` holds the stacked ops' timings
    (in the plan's group order)."""

    stacked: _Stacked
    shape: tuple  # (kernels, points)
    groups: list
    plan: _Plan
    args: _Arguments
    phase: int  # this phase's index among those priced with it

    @property
    def layout(self) -> _Layout:
        return self.plan.layouts[self.phase]

    @cached_property
    def order(self) -> np.ndarray:
        """This phase's [kernel, point] values' places among the stacked points, flattened."""
        return self.plan.order(self.args, self.phase, self.shape[1])

    @cached_property
    def latency_s(self) -> np.ndarray:
        """Per kernel and point: the latency of a run."""
        return self.stacked.latency_s[self.order].reshape(self.shape)

    flops = _taken(0, "per kernel and point: the FLOPs of a run")
    hbm_bytes = _taken(1, "per kernel and point: the HBM bytes of a run")
    bound = _taken(2, "per kernel and point: what bounds a run")
    host_s = _taken(3, "eager launches: the host seconds of one call of each kernel (rooflinesim.eager)")
    launched = _taken(4, "eager launches: the kernels one call launches, as its host time counts them")
    ran = _taken(5, "the kernels one call runs on the GPU (its work's)")

    def stage_s(self, mult: np.ndarray, masks: list) -> np.ndarray:
        """[stage, point]: ``mult.T @ latency_s`` (``mult``: [kernel, stage] runs), each
        kernel of ``masks`` (kernel, mask per point) run where its mask says. A phase of
        distinct points adds its kernels up at those points, set of inputs by set, and
        each point takes its sets' sums, without the [kernel, point] array."""
        points = self.args.points[self.phase]
        if points is None or "latency_s" in self.__dict__:
            return mult.T @ masked(self.latency_s, masks)
        stacked, starts = self.stacked.latency_s, self.args.places.starts[self.phase].tolist()
        sets, n = self.plan.set_of[self.phase].tolist(), self.shape[1]
        skipped = {i for i, _ in masks}
        out = np.zeros((mult.shape[1], n))
        for s, c in enumerate(points.counts):
            acc = None
            for k, (a, sk) in enumerate(zip(starts, sets)):
                if sk == s and k not in skipped:
                    x = np.multiply.outer(mult[k], stacked[a:a + c])
                    acc = x if acc is None else acc + x
            if acc is not None:
                out += acc if points.at[s] is None else acc[:, points.of[s]]
        for i, mask in masks:
            out += np.multiply.outer(mult[i], stacked[starts[i] + points.of[sets[i]]] * mask)
        return out

    @cached_property
    def where(self) -> list:
        """Per kernel: (its group's index, its rows in the group's stacked op, per point)."""
        points, sets = self.args.points[self.phase], self.plan.set_of[self.phase]
        st, places = self.plan._stacking, self.args.places
        out = []
        for i, m in enumerate(st.member_of[self.phase].tolist()):
            g, at, n = int(st.member_group[m]), int(places.in_group[m]), int(places.points[m])
            out.append((g, slice(at, at + n) if points is None else at + points.of[sets[i]]))
        return out


def _price(plan: _Plan, args: "_Arguments", ns: tuple, spec, profile, eager: bool = False) -> list[_Priced]:
    """Time the kernels of each phase (over ``ns`` points): each group of the plan is one
    op over its members' stacked numeric ``args``; the roofline terms of all of them are
    priced at once, and ops that have none (collectives, kernels of several regimes) by
    one predict call each. ``eager``: each kernel's host side too (rooflinesim.eager)."""
    ops = [g.op(a, f) for g, a, f in zip(plan.groups, args.groups, plan.fields)]
    sizes = args.places.sizes
    terms = [terms_for(op, spec, profile) for op in ops]
    host = _host_side(ops, terms, sizes, spec, profile) if eager else ()
    batched = [i for i, t in enumerate(terms) if t is not None]
    batch = (price_terms([terms[i] for i in batched], spec, in_sequence=True, shapes=[(sizes[i],) for i in batched])
             if batched else None)
    # the groups' points in group order: runs of priced groups as slices of the batch,
    # the collectives (last in a plan) as one more batch, any other op from its timing
    pieces: list = [[], [], [], []]  # latency, FLOPs, HBM bytes, bound: each part's values, when asked for
    timings, k, i = [], 0, 0
    while i < len(ops):
        if terms[i] is None and type(ops[i]) is Collective:
            rest = range(i, len(ops))
            if any(type(ops[g]) is not Collective for g in rest):
                raise AssertionError("collectives come last in a plan")
            links = PricedCollectives([ops[g] for g in rest], spec, profile, shapes=[(sizes[g],) for g in rest])
            timings += [partial(links.timing, c) for c in range(len(rest))]
            for piece, x in zip(pieces, (links.latency_s, links.flops, links.hbm_bytes, links.bound)):
                piece.append(partial(np.broadcast_to, x, (sum(sizes[i:]),)))
            break
        if terms[i] is None:
            t = in_sequence(predict(ops[i], spec, profile))
            for piece, x in zip(pieces, (t.latency_s, t.flops, t.hbm_bytes, t.bound)):
                piece.append(partial(np.broadcast_to, x, (sizes[i],)))
            timings.append(t)
            i += 1
            continue
        run = i
        while i < len(ops) and terms[i] is not None:
            timings.append(partial(batch.timing, k + i - run))
            i += 1
        a, b = batch.offsets[k], batch.offsets[k + i - run]
        k += i - run
        for piece, name in zip(pieces, ("latency_s", "flops", "hbm_bytes", "bound")):
            piece.append(partial(_cut, batch, name, a, b))
    latency = _laid([f() for f in pieces[0]])
    stacked = _Stacked(latency, pieces[1:], host)
    return [_Priced(stacked, (k, n), groups=timings, plan=plan, args=args, phase=j)
            for j, (k, n) in enumerate(zip(plan.sizes, ns))]


def _host_side(ops: list, terms: list, sizes: list, spec, profile) -> tuple:
    """Over the groups' stacked points: the host seconds of one call of each kernel, the
    kernels it launches as the host counts them (a split's reduction included), and the
    kernels its work runs (rooflinesim.eager's ``host_s`` and ``launches``)."""
    host, calls, ran = [], [], []
    for op, t, n in zip(ops, terms, sizes):
        work = op.work() if t is None else t.work
        k = np.broadcast_to(launched(t, work), (n,))
        host.append(np.broadcast_to(host_s(op, spec, profile, k), (n,)))
        calls.append(k)
        ran.append(np.broadcast_to(np.asarray(work.kernels, dtype=float), (n,)))
    return tuple(np.concatenate(x) if x else np.zeros(0) for x in (host, calls, ran))


def _slice_timing(t: Timing, rows: slice) -> Timing:
    total = np.size(t.latency_s)  # the stacked op's points

    def cut(x):
        if isinstance(x, dict):
            return {k: cut(v) for k, v in x.items()}
        return x[rows] if np.ndim(x) and np.shape(x)[0] == total else x

    return with_fields(t, **{f: cut(getattr(t, f)) for f in PER_POINT}, parts=[])
