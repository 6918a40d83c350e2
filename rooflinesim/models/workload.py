"""A model's forward pass as the kernels an inference engine runs, priced with the cost
models and a calibration profile: time to first token, time per output token, throughput
and the per-kernel breakdown.

Kernels of one decoder layer, per GPU (fused where vLLM and TensorRT-LLM fuse):
  input_norm      the residual add fused into RMSNorm: it reads x and the residual and
                  writes both, priced as an RMSNorm over twice the rows (the same bytes);
  qkv_proj        one column-parallel GEMM for q, k and v;
  rope_kv_cache   RoPE and the write of the new K and V into the cache, one kernel,
                  priced as a copy of q, k and v;
  attention       the fused kernel (FA3-class by default) over the cache, causal
                  bottom-right: a chunk of new tokens attends to every earlier token;
  o_proj          row-parallel GEMM, then an AllReduce of [tokens, hidden] under TP
                  (ReduceScatter, and an AllGather before the next GEMM, with sequence
                  parallelism, which also shards the norms' rows);
  post_attention_norm, gate_up_proj, act (SiLU(gate) x up as one kernel), down_proj and
  the second AllReduce.
Activation quantization for fp8/int8 GEMMs is taken as fused into the kernel before.
MLA layers (DeepSeek): qkv_a_proj (q_a and kv_a fused, replicated on every TP rank), the
latent norms and q_b_proj. Prefill expands the latent (kv_b_proj over every cached token)
and runs MHA with head dim (qk + v) / 2, which makes its FLOPs and K+V bytes exact.
Decode absorbs kv_b into the query and the output (two batched GEMMs) and runs MQA over
the cached latent, priced as 2 x heads heads of dim (kv_lora_rank + rope) / 2 over one KV
head: the query and latent bytes are exact, the FLOPs 6% high (the value product is
counted at the latent + rope width instead of the latent width).
MoE layers: the MoE op's kernels (router, fused routing as 3 kernels, dispatch, grouped
expert GEMMs, combine; all-to-alls only when ep > tp, since within a TP group every rank
already holds every token) and the shared experts as a dense MLP.
Around the layers: the embedding gather (plus an AllReduce under TP: vocab-parallel
embedding), the final norm, the LM head on the last token of each sequence only (engines
compute logits only where they sample) and the AllGather of the logits under TP. A
sliding window caps the keys at window + new tokens (a prefill longer than the window is
priced as full causal attention). Sampling and the scheduler are not kernels here.

Speed. Which kernels a step runs, how often each runs on each stage, and which of them
stack into one op (same class, same settings) depend on the model and the deployment only:
a plan finds them once per pair (``_plan``), building the kernels on recorded stand-ins for
a phase's batch, lengths and logits flag (``rooflinesim.trace``). A prediction replays the
recorded arithmetic on the phase's points (prefill chunks, decode contexts, or a sweep),
lays the sizes straight into each group's stacked arguments, and prices the groups in a
few passes: the rules' roofline terms of every group at once (``PricedTerms``), the
collectives at once, an attention backend's prefill and decode kernels as one group with
each regime's parameters per point. Per point, the arithmetic is that of each kernel priced
alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import cached_property, lru_cache, partial
from typing import Any, NamedTuple

import numpy as np

from ..calibration.profile import IDEAL
from ..dtypes import bytes_per_element
from ..errors import UserError
from ..ops.attention import Attention
from ..ops.collectives import Collective
from ..ops.gemm import Gemm
from ..ops.memory import Bookkeeping, Copy, Elementwise, Gather, Norm
from ..ops.moe import MoE
from ..rules import PER_POINT, in_sequence, terms_for
from ..timing import PricedCollectives, Timing, predict, price_terms, with_fields
from ..trace import Tape, Var
from .deploy import ATTENTION, Deployment, kv_bytes_per_token_per_gpu, shard, weight_bytes_per_gpu

__all__ = ["Kernel", "Phase", "OpTime", "PhaseResult", "ModelPrediction", "phase_kernels",
           "predict_model", "sweep"]


# ------------------------------------------------------------------------ kernels


class Kernel(NamedTuple):
    """One kernel of a forward pass: an op class and its arguments (numbers, or arrays
    over the points of a phase), how often it runs, and where."""

    name: str
    cls: type
    args: dict
    count: int = 1  # runs per layer ("layer", "dense", "moe") or per forward (others)
    where: str = "layer"  # layer (every layer), dense, moe, first (stage), last, send
    mask: Any = 1  # per point: 0 where the step skips the kernel (logits of early chunks)

    @property
    def op(self):
        """The op itself (built, and validated, on demand)."""
        return self.cls(**self.args)

    @property
    def launches(self):
        """Kernels launched from the host per run."""
        if self.cls is Bookkeeping:
            return self.args["kernels"]
        if self.cls is Attention and self.args.get("variant") == "naive":
            return 3
        return 1


@dataclass(frozen=True)
class Phase:
    """The steps of one phase at ``n`` points: per point, ``batch`` sequences in a
    microbatch, ``seq_q`` new tokens each, attending to ``seq_kv`` tokens."""

    name: str  # prefill or decode
    batch: Any
    seq_q: Any
    seq_kv: Any
    sequences: Any  # sequences per step (all microbatches)
    microbatches: Any = 1
    logits: Any = 1  # 1 where the step samples a token
    combine: str = "mean"  # how points make the phase's time: "sum" (chunks) or "mean"
    n: int = 1


class _Shapes:
    """Numbers every builder uses."""

    def __init__(self, model, d: Deployment, ph: Phase, sh):
        self.model, self.d, self.ph, self.sh = model, d, ph, sh
        self.h = model.hidden_size
        self.b, self.sq, self.skv = ph.batch, ph.seq_q, ph.seq_kv
        self.T = ph.batch * ph.seq_q  # tokens in the step, per microbatch
        self.act, self.ab = d.activations, bytes_per_element(d.activations)
        self.sp = d.sequence_parallel and d.tp > 1
        self.norm_rows = np.ceil(self.T / d.tp) if self.sp else self.T

    def gemm(self, name, m, n, k, dtype=None, batch=1, **kw) -> Kernel:
        return Kernel(name, Gemm, dict(m=m, n=n, k=k, batch=batch, dtype=dtype or self.d.weights,
                                       group_size=self.d.group_size), **kw)

    def norm(self, name, width, rows=None, **kw) -> Kernel:
        rows = self.norm_rows if rows is None else rows
        return Kernel(name, Norm, dict(tokens=rows, hidden=width, dtype=self.act, kind="rmsnorm"), **kw)

    def add_norm(self, name, **kw) -> Kernel:
        """Residual add fused into RMSNorm: x and the residual read, both written; priced
        as an RMSNorm over twice the rows (the same bytes, one row walk per row)."""
        return self.norm(name, self.h, rows=2 * self.norm_rows, **kw)

    def collective(self, name, kind, nbytes, world, **kw) -> Kernel:
        return Kernel(name, Collective, dict(kind=kind, bytes=nbytes, world_size=world,
                                             algorithm="ring", dtype=self.act), **kw)

    def reduce(self, name, where) -> list[Kernel]:
        """After a row-parallel GEMM: AllReduce (or ReduceScatter) of [tokens, hidden]."""
        if self.d.tp == 1:
            return []
        kind = "reducescatter" if self.sp else "allreduce"
        return [self.collective(f"{name}_{kind}", kind, self.T * self.h * self.ab, self.d.tp, where=where)]

    def gather(self, name, where) -> list[Kernel]:
        """Before a column-parallel GEMM under sequence parallelism: AllGather the tokens."""
        if not self.sp:
            return []
        return [self.collective(f"{name}_allgather", "allgather", self.T * self.h * self.ab,
                                self.d.tp, where=where)]


def phase_kernels(model, d: Deployment, ph: Phase, sh=None) -> list[Kernel]:
    """Every kernel of one forward step of ``ph`` on one GPU of each stage (``sh``: the
    deployment's sharding of the model, computed when not given)."""
    s = _Shapes(model, d, ph, sh or shard(model, d))
    ks = _ends(s)
    ks += _mla(s) if model.is_mla else _gqa(s)
    if "dense" in model.layer_kinds:
        ks += [s.add_norm("post_attention_norm", where="dense"), *s.gather("mlp", "dense"),
               *_mlp(s, "", s.sh.ffn, "dense"), *s.reduce("mlp", "dense")]
    if "moe" in model.layer_kinds:
        ks += [s.add_norm("post_attention_norm", where="moe"), *s.gather("moe", "moe"),
               *_moe(s)]
        if s.sh.shared_ffn:
            ks += _mlp(s, "shared_", s.sh.shared_ffn, "moe")
        ks += s.reduce("moe", "moe")
    return ks


def _attention(s: _Shapes, **args) -> Kernel:
    window = s.model.sliding_window
    skv = np.minimum(s.skv, s.sq + window) if window else s.skv
    return Kernel("attention", Attention, dict(batch=s.b, seq_q=s.sq, seq_kv=skv, causal=True,
                                               dtype=s.act, **args, **ATTENTION[s.d.attention]))


def _gqa(s: _Shapes) -> list[Kernel]:
    m, H, KV, hd = s.model, s.sh.heads, s.sh.kv_heads, s.model.head_dim
    ks = [s.add_norm("input_norm"), *s.gather("attn", "layer"),
          s.gemm("qkv_proj", s.T, (H + 2 * KV) * hd, s.h)]
    if m.qk_norm:  # per-head RMSNorm of q and k
        ks.append(s.norm("qk_norm", hd, rows=s.T * (H + KV)))
    ks += [Kernel("rope_kv_cache", Copy, dict(bytes=s.T * (H + 2 * KV) * hd * s.ab)),
           _attention(s, heads=H, kv_heads=KV, head_dim=hd, kv_dtype=s.d.kv_cache),
           s.gemm("o_proj", s.T, s.h, H * m.v_head_dim), *s.reduce("attn", "layer")]
    return ks


def _mla(s: _Shapes) -> list[Kernel]:
    m, H, T = s.model, s.sh.heads, s.T
    nope, rope, vd, latent = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
    ks = [s.add_norm("input_norm"), *s.gather("attn", "layer")]
    if m.q_lora_rank:
        ql = m.q_lora_rank
        ks += [s.gemm("qkv_a_proj", T, ql + latent + rope, s.h), s.norm("q_a_norm", ql, rows=T),
               s.norm("kv_a_norm", latent, rows=T), s.gemm("q_b_proj", T, H * m.head_dim, ql)]
    else:
        ks += [s.gemm("q_proj", T, H * m.head_dim, s.h), s.gemm("kv_a_proj", T, latent + rope, s.h),
               s.norm("kv_a_norm", latent, rows=T)]
    ks.append(Kernel("rope_kv_cache", Copy, dict(bytes=T * (H * rope + latent + rope) * s.ab)))
    if s.ph.name == "prefill":  # expand every cached token's latent, then MHA
        ks += [s.gemm("kv_b_proj", s.b * s.skv, H * (nope + vd), latent),
               _attention(s, heads=H, kv_heads=H, head_dim=(m.head_dim + vd) / 2, kv_dtype=s.act)]
    else:  # absorbed: MQA over the latent
        ks += [s.gemm("q_absorb", T, latent, nope, dtype=s.act, batch=H),
               _attention(s, heads=2 * H, kv_heads=1, head_dim=(latent + rope) / 2,
                          kv_dtype=s.d.kv_cache),
               s.gemm("v_absorb", T, vd, latent, dtype=s.act, batch=H)]
    ks += [s.gemm("o_proj", T, s.h, H * vd), *s.reduce("attn", "layer")]
    return ks


def _mlp(s: _Shapes, prefix: str, width: int, where: str) -> list[Kernel]:
    kind = "gelu_mul" if "gelu" in s.model.hidden_act else "silu_mul"
    return [s.gemm(f"{prefix}gate_up_proj", s.T, 2 * width, s.h, where=where),
            Kernel(f"{prefix}act", Elementwise, dict(elements=s.T * width, kind=kind, dtype=s.act),
                   where=where),
            s.gemm(f"{prefix}down_proj", s.T, s.h, width, where=where)]


def _moe(s: _Shapes) -> list[Kernel]:
    m = s.model
    op = MoE(tokens=s.T * s.sh.moe_token_factor, hidden=s.h, ffn=s.sh.expert_ffn,
             experts=m.num_experts, top_k=m.num_experts_per_tok, dtype=s.d.weights,
             act_dtype=s.act, ep=s.d.ep, routing_kernels=3, eager=False)
    # ep <= tp: every rank of the TP group already holds every token, so the experts'
    # rows need no all-to-all; the layer's AllReduce combines them (vLLM's EP without DP)
    skip = ("ep_dispatch", "ep_combine") if s.sh.moe_token_factor == 1 else ()
    return [Kernel(f"moe_{name}", cls, _all_args(cls, args), where="moe")
            for name, cls, args in op.kernel_args() if name not in skip]


def _all_args(cls, args: dict) -> dict:
    """Every field of op class ``cls``, in field order: ``args``, else its default."""
    return {f: args[f] if f in args else default for f, default in _defaults(cls)}


@lru_cache(maxsize=None)
def _defaults(cls) -> tuple:
    return tuple((f.name, f.default) for f in fields(cls))


def _ends(s: _Shapes) -> list[Kernel]:
    """Embedding (first stage), final norm and LM head (last stage), stage hand-offs."""
    d, T, h = s.d, s.T, s.h
    ks = [Kernel("embed", Gather, dict(rows_in=T, rows_out=T, width=h, dtype=s.act), where="first")]
    if d.tp > 1:  # vocab-parallel embedding: each rank looks up its rows, then AllReduce
        ks.append(s.collective("embed_allreduce", "allreduce", T * h * s.ab, d.tp, where="first"))
    ks += [s.add_norm("final_norm", where="last"), *s.gather("final", "last"),
           s.gemm("lm_head", s.b, s.sh.vocab, h, dtype=s.act, where="last", mask=s.ph.logits)]
    if d.tp > 1:
        ks.append(s.collective("logits_allgather", "allgather", s.b * s.sh.vocab * d.tp * s.ab,
                               d.tp, where="last", mask=s.ph.logits))
    if d.pp > 1:  # activations to the next stage: a send of S bytes priced as a 2-GPU
        # AllGather of 2S (each GPU sends S over its link)
        ks.append(s.collective("pp_send", "allgather", 2 * T * h * s.ab, 2, where="send"))
    return ks


# ------------------------------------------------------------------------ pricing


_NUMBERS = (int, float, np.ndarray, np.float64, np.int64, Var)


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
                   _row_sums(row_of, counts, len(names)))


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
    depends on neither the batch nor the lengths, so it is found once per pair. The
    kernels are built once, on stand-ins for each phase's batch, query length, key
    length and logits flag (``trace``): a prediction replays the arithmetic that sizes
    them and lays the sizes straight into the groups' stacked arguments."""

    def __init__(self, model, d: Deployment, names: tuple):
        self.sharding = sh = shard(model, d)
        self.tapes, self.kernels = [], []
        for name in names:
            tape = Tape(len(_INPUTS))
            b, q, k, logits = tape.variables()
            self.kernels.append(phase_kernels(model, d, Phase(name, batch=b, seq_q=q, seq_kv=k, sequences=1,
                                                              logits=logits), sh))
            self.tapes.append(tape)
        self.sizes = tuple(len(ks) for ks in self.kernels)
        self.layouts = tuple(_layout(ks, sh, d) for ks in self.kernels)
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

    def arguments(self, phases: list[Phase]) -> "_Arguments":
        """The groups' stacked numeric arguments, and the kernels' masks, at ``phases``."""
        ns = tuple(ph.n for ph in phases)
        places = self._places.get(ns) or self._place(ns)
        values = [tape.replay([_points(getattr(ph, f), ph.n) for f in _INPUTS]) for tape, ph in zip(self.tapes, phases)]
        laid = places.constants.copy()
        for j, (at, nodes) in enumerate(places.dynamic):
            if nodes:
                laid[at] = np.concatenate([values[j][v] for v in nodes])
        groups = [{f: laid[a:b] for f, (a, b) in spans.items()} for spans in places.spans]
        masks = [[(i, values[j][v]) for i, v in m] for j, m in enumerate(places.masks)]
        return _Arguments(groups, masks, values)

    def _place(self, ns: tuple) -> "_Places":
        """Where each member's value of each stacked argument lies at ``ns`` points: the
        constants laid once, and the positions of the replayed values, per phase."""
        constants, spans, at = [], [], 0
        dynamic = [([], []) for _ in ns]
        for g in self.groups:
            span = {}
            for f in g.numeric:
                start = at
                for j, i in g.members:
                    v, n = self.kernels[j][i].args[f], ns[j]
                    if isinstance(v, Var):
                        dynamic[j][0].append(np.arange(at, at + n))
                        dynamic[j][1].append(v.index)
                        constants.append(np.zeros(n))
                    else:
                        constants.append(np.full(n, v, dtype=float))
                    at += n
                span[f] = (start, at)
            spans.append(span)
        masks = [[(i, k.mask.index) for i, k in enumerate(ks) if isinstance(k.mask, Var)] for ks in self.kernels]
        places = _Places(np.concatenate(constants) if constants else np.zeros(0),
                         [(np.concatenate(p) if p else None, nodes) for p, nodes in dynamic], spans, masks)
        if len(self._places) > _KEPT:
            self._places.clear()
        self._places[ns] = places
        return places

    def materialize(self, j: int, values: list) -> list[Kernel]:
        """Phase ``j``'s kernels with the replayed ``values`` in place of the stand-ins."""
        def num(v):
            return values[v.index] if isinstance(v, Var) else v

        return [k._replace(args={f: num(v) for f, v in k.args.items()}, mask=num(k.mask)) for k in self.kernels[j]]

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


_INPUTS = ("batch", "seq_q", "seq_kv", "logits")  # the phase's numbers the kernels' sizes follow
_KEPT = 64  # layouts a plan keeps, per distinct number of points of its phases


def _points(x, n: int) -> np.ndarray:
    """``x`` (a number, or an array of one or ``n`` values) as ``n`` floats."""
    if type(x) in (int, float):
        return np.full(n, float(x))
    if type(x) is np.ndarray and x.size == n:
        return x.astype(float, copy=False).reshape(n)
    return np.full(n, np.asarray(x, dtype=float).item())


class _Places(NamedTuple):
    constants: np.ndarray  # every stacked argument, end to end, replayed values left 0
    dynamic: list  # per phase: (positions of its replayed values, their tape indices)
    spans: list  # per group: field -> (start, end) in the stacked arguments
    masks: list  # per phase: (kernel, tape index) of the masks that follow the phase


class _Arguments(NamedTuple):
    groups: list  # per group: field -> its stacked values
    masks: list  # per phase: (kernel, mask per point)
    values: list  # per phase: every replayed value


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
    total = sum(k * n for k, n in zip(plan.sizes, ns))
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
    stacked = np.array([p[0] if len(p) == 1 else np.concatenate(p) for p in pieces[:3]])
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


# ------------------------------------------------------------------------ results


@dataclass
class OpTime:
    """One kernel of a phase: ``count`` runs per forward pass (one microbatch through
    every stage), each taking ``latency_s`` (per point of the phase, host overhead
    included); ``timing`` is the cost model's full answer, over the same points."""

    name: str
    count: float
    kernel: Kernel = field(repr=False)
    latency_s: np.ndarray = field(repr=False)
    flops: np.ndarray = field(repr=False)
    hbm_bytes: np.ndarray = field(repr=False)
    bound: np.ndarray = field(repr=False)
    _source: tuple = field(repr=False)  # (stacked timing, this kernel's rows)

    @property
    def op(self):
        return self.kernel.op

    @property
    def timing(self) -> Timing:
        t, rows = self._source
        return _slice_timing(t if isinstance(t, Timing) else t(), rows)


@dataclass
class PhaseResult:
    """A priced phase: per point, the time of one step of every sequence (``step_s``);
    per kernel, its runs per forward and its times (``ops``)."""

    phase: Phase
    step_s: np.ndarray  # per point
    stage_s: np.ndarray  # [stage, point]: one microbatch's pass through each stage
    values: list = field(repr=False)  # the plan's replayed values at this phase's points
    counts: np.ndarray = field(repr=False)  # runs per forward, per kernel
    latency_s: np.ndarray = field(repr=False)  # [kernel, point], per run, masked
    priced: _Priced = field(repr=False)
    weights: np.ndarray = field(repr=False)  # how points combine into the phase's time

    @cached_property
    def kernels(self) -> list[Kernel]:
        """Every kernel of one step, with its arguments over the phase's points."""
        return self.priced.plan.materialize(self.priced.phase, self.values)

    @property
    def time_s(self) -> float:
        """Prefill: the sum over chunks; decode: the mean step over the contexts."""
        return float(self.step_s @ self.weights)

    @property
    def tokens_per_s(self):
        """New tokens per second of one replica, per point."""
        return self.phase.sequences * self.phase.seq_q / self.step_s

    @property
    def ops(self) -> list[OpTime]:
        p = self.priced
        return [OpTime(k.name, float(c), k, self.latency_s[i], p.flops[i], p.hbm_bytes[i], p.bound[i],
                       (p.groups[g], rows))
                for i, (k, c, (g, rows)) in enumerate(zip(self.kernels, self.counts, p.where))]

    def table(self) -> list[dict]:
        """Per kernel name: runs per forward, FLOPs, HBM bytes, time, bound and share of
        the kernel sum (points combined as for the phase's time), largest time first."""
        counts = self.counts[:, None]
        per_run = counts * (self.latency_s > 0)
        time = counts * self.latency_s
        t, f, b = time @ self.weights, (per_run * self.priced.flops) @ self.weights, \
            (per_run * self.priced.hbm_bytes) @ self.weights
        layout = self.priced.layout
        names = layout.names
        count = (layout.row_counts if self.counts is layout.counts  # (as _combine makes it)
                 else _row_sums(layout.row_of, self.counts, len(names)))
        flops, hbm, time_s = (_row_sums(layout.row_of, x, len(names)) for x in (f, b, t))
        bound = self._longest_bound(t, time.argmax(axis=1))
        total = float(t.sum()) or 1.0
        return [{"op": names[r], "count": count[r], "flops": flops[r], "hbm_bytes": hbm[r],
                 "time_s": time_s[r], "bound": bound[r], "share": time_s[r] / total}
                for r in sorted(range(len(names)), key=lambda r: -time_s[r])]

    def _longest_bound(self, t: np.ndarray, peak: np.ndarray) -> list[str]:
        """Per table row: the bound, at its slowest point, of the row's longest kernel."""
        rows = len(self.priced.layout.names)
        top, longest = [-1.0] * rows, [None] * rows
        for i, (r, ti) in enumerate(zip(self.priced.layout.row_of.tolist(), t.tolist())):
            if ti > top[r]:
                top[r], longest[r] = ti, i
        bound = self.priced.bound
        return ["" if i is None else str(bound[i, peak[i]]) for i in longest]


def _combine(ph: Phase, masks: list, values: list, priced: _Priced, d: Deployment) -> PhaseResult:
    """``masks``: (kernel, mask per point) of the kernels that some steps skip."""
    layout, n = priced.layout, ph.n
    lat = priced.latency_s
    if d.eager:
        lat = lat + layout.launches * d.launch_overhead_s
    if masks:
        lat = lat.copy()
        for i, mask in masks:
            lat[i] = lat[i] * mask
    stage_s = layout.mult.T @ lat
    # m microbatches through S stages: the first crosses every stage, each later one
    # follows a step of the slowest stage (m / (m + S - 1) of the ideal rate for even stages)
    step = stage_s[0].copy() if d.pp == 1 else stage_s.sum(axis=0)  # (a copy costs less than a sum)
    if d.pp > 1:
        step = step + (np.asarray(ph.microbatches) - 1) * stage_s.max(axis=0)
    weights = np.ones(n) if ph.combine == "sum" else np.full(n, 1.0 / n)
    return PhaseResult(ph, step, stage_s, values, layout.counts, lat, priced, weights)


def _run(model, spec, profile, d: Deployment, phases: list[Phase]) -> list[PhaseResult]:
    plan = _plan(model, d, tuple(ph.name for ph in phases))
    args = plan.arguments(phases)
    priced = _price(plan, args, tuple(ph.n for ph in phases), spec, profile or IDEAL)
    return [_combine(ph, m, v, p, d) for ph, m, v, p in zip(phases, args.masks, args.values, priced)]


# ------------------------------------------------------------------ predictions


@dataclass
class ModelPrediction:
    """A request batch served end to end: prefill then decode."""

    model: Any
    spec: Any
    deployment: Deployment
    batch: int
    prompt: int
    gen: int
    chunk: int | None
    prefill: PhaseResult
    decode: PhaseResult
    warnings: list[str]

    @property
    def ttft_s(self) -> float:
        return self.prefill.time_s

    @property
    def tpot_s(self) -> float:
        return self.decode.time_s

    @property
    def e2e_s(self) -> float:
        """The prefill gives the first token; each of the other gen - 1 takes a decode step."""
        return self.ttft_s + (self.gen - 1) * self.tpot_s

    def rates(self) -> dict[str, dict[str, float]]:
        """Tokens per second, total (all dp replicas) and per GPU."""
        d = self.deployment
        per_replica = {
            "decode": self.batch / self.tpot_s,
            "overall": self.batch * self.gen / self.e2e_s,
            "prefill": self.batch * self.prompt / self.ttft_s,
        }
        return {k: {"total": v * d.dp, "per_gpu": v * d.dp / d.gpus} for k, v in per_replica.items()}

    @cached_property
    def _memory(self) -> dict[str, float]:
        weights, kv_per_token = _per_gpu_bytes(self.model, self.deployment)
        kv = kv_per_token * self.batch * (self.prompt + self.gen)
        return {"weights_bytes_per_gpu": weights, "kv_cache_bytes_per_gpu": kv,
                "capacity_bytes": self.spec.memory.capacity_bytes}

    def memory(self) -> dict[str, float]:
        """Weights and the batch's KV cache (prompt + gen tokens) per GPU, and capacity."""
        return dict(self._memory)

    def as_dict(self) -> dict:
        def phase(p: PhaseResult) -> dict:
            return {"time_s": p.time_s, "points": {"seq_q": _list(p.phase.seq_q, p.phase.n),
                                                   "seq_kv": _list(p.phase.seq_kv, p.phase.n)},
                    "step_s": p.step_s.tolist(), "ops": p.table()}

        return {
            "model": self.model.name, "gpu": self.spec.name, "deployment": self.deployment.as_dict(),
            "batch": self.batch, "prompt": self.prompt, "gen": self.gen, "chunk": self.chunk,
            "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s,
            "tokens_per_s": self.rates(), **self.memory(), "warnings": self.warnings,
            "prefill": phase(self.prefill), "decode": phase(self.decode),
        }


@lru_cache(maxsize=128)
def _per_gpu_bytes(model, d: Deployment) -> tuple[float, float]:
    """Weight bytes, and KV-cache bytes per token of one sequence, on one GPU."""
    return weight_bytes_per_gpu(model, d), kv_bytes_per_token_per_gpu(model, d)


def _list(x, n) -> list:
    return np.broadcast_to(np.asarray(x, dtype=float), (n,)).tolist()


def _count(what: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise UserError(f"{what} must be a whole number of at least {minimum} (got {value!r})")
    return int(value)


def _resolve(model, spec):
    if isinstance(model, str):
        from .config import load_config

        model = load_config(model)
    if isinstance(spec, str):
        from ..hardware import load_spec

        spec = load_spec(spec)
    return model, spec


def predict_model(model, spec, profile=None, deploy: Deployment | None = None, *, batch: int,
                  prompt: int, gen: int, chunk: int | None = None, decode_points: int = 4) -> ModelPrediction:
    """Serve ``batch`` requests of ``prompt`` tokens generating ``gen`` tokens each.

    Prefill runs the whole batch's prompts (in chunks of ``chunk`` tokens per sequence,
    each chunk attending to every earlier token); its time is the time to first token.
    The time per output token is the mean decode step over ``decode_points`` contexts
    spread evenly over the decode (midpoints of equal segments of prompt + 1 .. prompt +
    gen - 1; attention time is close to linear in context, so this is the mean step).
    ``profile`` None is the ideal roofline; callers pass a resolved spec and profile.
    """
    model, spec = _resolve(model, spec)
    d = deploy or Deployment()
    batch, prompt, gen = _count("the batch", batch), _count("the prompt", prompt), _count("gen", gen)
    decode_points = _count("the number of decode points", decode_points)
    notes = []
    limit = model.max_position_embeddings
    if limit and prompt + gen > limit:
        notes.append(f"a context of {prompt + gen} tokens exceeds {model.name}'s maximum of {limit}; "
                     f"predicting anyway")
    m = min(d.microbatches or d.pp, batch)
    b = math.ceil(batch / m)
    if chunk is not None and _count("the chunk", chunk) < prompt:
        ends = np.minimum(np.arange(chunk, prompt + chunk, chunk), prompt)
        seq_q = np.diff(ends, prepend=0)
        logits = (ends == prompt).astype(float)
    else:
        chunk, ends, seq_q, logits = None, np.array([prompt]), np.array([prompt]), 1.0
    pre = Phase("prefill", batch=b, seq_q=seq_q, seq_kv=ends, sequences=batch, microbatches=m,
                logits=logits, combine="sum", n=len(ends))
    steps = max(gen - 1, 1)  # decode steps (one notional step when gen is 1)
    n = min(decode_points, steps)
    ctx = prompt + np.rint(1 + (steps - 1) * (np.arange(n) + 0.5) / n)
    dec = Phase("decode", batch=b, seq_q=1, seq_kv=ctx, sequences=batch, microbatches=m, n=n)
    pf, dc = _run(model, spec, profile, d, [pre, dec])
    out = ModelPrediction(model, spec, d, batch, prompt, gen, chunk, pf, dc, notes)
    mem = out.memory()
    need = mem["weights_bytes_per_gpu"] + mem["kv_cache_bytes_per_gpu"]
    if need > mem["capacity_bytes"]:
        from ..units import format_bytes

        notes.append(f"weights and KV cache ({format_bytes(need, binary=False)} per GPU) exceed the "
                     f"{format_bytes(mem['capacity_bytes'], binary=False)} of {spec.name}; predicting anyway")
    return out


def sweep(model, spec, profile=None, deploy: Deployment | None = None, *, batch, context,
          phase: str = "decode") -> PhaseResult:
    """One step at many (batch, context) points at once (arrays broadcast together):
    decode, one new token per sequence with ``context`` tokens in the cache; or prefill,
    whole prompts of ``context`` tokens. ``step_s`` and ``tokens_per_s`` are per point."""
    model, spec = _resolve(model, spec)
    d = deploy or Deployment()
    if phase not in ("decode", "prefill"):
        raise UserError(f"phase must be decode or prefill (got {phase!r})")
    batch, context = np.broadcast_arrays(np.asarray(batch), np.asarray(context))
    if np.any(batch < 1) or np.any(context < 1):
        raise UserError("batch and context must be at least 1 at every point")
    m = np.minimum(d.microbatches or d.pp, batch)
    b = np.ceil(batch / m)
    n = batch.size
    batch, context, m, b = (np.ravel(x) for x in (batch, context, m, b))
    seq_q = context if phase == "prefill" else 1
    ph = Phase(phase, batch=b, seq_q=seq_q, seq_kv=context, sequences=batch, microbatches=m, n=n)
    return _run(model, spec, profile, d, [ph])[0]
