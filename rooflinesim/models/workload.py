"""A model's forward pass as the kernels an inference engine runs, priced with the cost
models and a calibration profile: time to first token, time per output token, throughput
and the per-kernel breakdown.

The kernels are in :mod:`.kernels`; how they are priced fast, in :mod:`.plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from ..attention_kernels import resolve as resolve_attention
from ..eager import joined
from ..errors import UserError
from ..timing import Timing
from .deploy import Deployment, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from .hf import check as hf_check
from .kernels import Kernel, Phase, phase_kernels
from .plan import _price, _Priced, _plan, _row_sums, _slice_timing, masked

__all__ = ["Kernel", "Phase", "OpTime", "PhaseResult", "ModelPrediction", "RequestTimes", "phase_kernels",
           "predict_model", "predict_requests", "price_phases", "sweep"]


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
    _source: tuple = field(repr=False)  # (the groups' stacked timings, this kernel's group, its rows)

    @property
    def op(self):
        return self.kernel.op

    @property
    def timing(self) -> Timing:
        groups, g, rows = self._source
        t = groups[g]
        return _slice_timing(t if isinstance(t, Timing) else t(), rows)


@dataclass
class PhaseResult:
    """A priced phase: per point, the time of one step of every sequence (``step_s``);
    per kernel, its runs per forward and its times (``ops``)."""

    phase: Phase
    step_s: np.ndarray  # per point
    stage_s: np.ndarray  # [stage, point]: one microbatch's pass through each stage
    kernels: list[Kernel] = field(repr=False)  # every kernel of one step, its arguments over the phase's points
    counts: np.ndarray = field(repr=False)  # runs per forward, per kernel
    masks: list = field(repr=False)  # (kernel, mask per point) of the kernels that some steps skip
    priced: _Priced = field(repr=False)
    weights: np.ndarray = field(repr=False)  # how points combine into the phase's time

    @cached_property
    def latency_s(self) -> np.ndarray:
        """[kernel, point]: the time of one run, 0 where a step skips the kernel."""
        return masked(self.priced.latency_s, self.masks)

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
                       (p.groups, g, rows))
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

    def row_times(self, stage: int | None = None) -> tuple[tuple, np.ndarray]:
        """(the kernel names, per name and point: its time in one forward pass, every
        run on every stage added; with ``stage``, its runs on that stage only)."""
        layout = self.priced.layout
        counts = self.counts if stage is None else layout.mult[:, stage]
        out = np.zeros((len(layout.names), self.phase.n))
        np.add.at(out, layout.row_of, counts[:, None] * self.latency_s)
        return layout.names, out

    def row_families(self) -> tuple:
        """Per kernel name (``row_times``' rows): the family its kernels are validated in
        (gemm, attention, moe, collective, memory)."""
        out = [""] * len(self.priced.layout.names)
        for k, r in zip(self.kernels, self.priced.layout.row_of.tolist()):
            out[r] = out[r] or _FAMILY.get(k.cls.__name__, "memory")
        return tuple(out)

    def _longest_bound(self, t: np.ndarray, peak: np.ndarray) -> list[str]:
        """Per table row: the bound, at its slowest point, of the row's longest kernel."""
        rows = len(self.priced.layout.names)
        top, longest = [-1.0] * rows, [None] * rows
        for i, (r, ti) in enumerate(zip(self.priced.layout.row_of.tolist(), t.tolist())):
            if ti > top[r]:
                top[r], longest[r] = ti, i
        bound = self.priced.bound
        return ["" if i is None else str(bound[i, peak[i]]) for i in longest]


_FAMILY = {"Gemm": "gemm", "Attention": "attention", "MoE": "moe", "Collective": "collective"}


def _combine(ph: Phase, masks: list, kernels: list, priced: _Priced, d: Deployment,
             host_per_launch_s: float = 0.0, profile=None) -> PhaseResult:
    """``masks``: (kernel, mask per point) of the kernels that some steps skip;
    ``host_per_launch_s``: with ``d.eager`` under transformers' kernels, or where the
    deployment names one, the host time of each kernel launched from Python. Eagerly, host
    and GPU run in series (rooflinesim.eager): a stage takes its host time (each kernel's
    call, each layer's Python around them) joined with its GPU time."""
    layout, n = priced.layout, ph.n
    stage_s = priced.stage_s(layout.mult, masks)
    if d.eager or d.kernels == "hf":
        runs = masked(np.ones(priced.shape), masks)  # (1 where a kernel runs at a point)
        launches = layout.launches * runs
    gap = getattr(profile, "host", {}).get("hf:graph_gap") if d.kernels == "hf" else None
    if gap is not None and gap.gap_s and not d.eager and ph.name == "prefill":
        # transformers' prefill runs in no graph: its kernel sum, without what a graph's
        # replay adds per kernel (the profile's hf:graph_gap, which calibrated times include)
        stage_s = stage_s - layout.mult.T @ (launches * gap.gap_s)
    if d.eager and d.kernels == "hf":
        host = launches * host_per_launch_s
        if any(layout.host_keys):  # (what some runs add on the host: a plan built for a new shape)
            host = host + runs * _host_extra(layout.host_keys, profile)
        stage_s = np.maximum(stage_s, layout.mult.T @ host)
    elif d.eager:
        # an engine's kernels launched from Python, priced as rooflinesim.eager prices a
        # layer: each call's host time (its op family's, fitted), each layer's call, and on
        # the GPU each kernel's time plus the gap between eagerly launched kernels
        if d.launch_overhead_s is None:
            host = layout.mult.T @ (priced.host_s * runs) + layout.layers * profile.host_params("sequence").call_s
        else:
            host = layout.mult.T @ (priced.launched * runs * d.launch_overhead_s)
        gap_s = profile.host_params().gap_s
        gpu = stage_s + layout.mult.T @ (priced.ran * runs) * gap_s if gap_s else stage_s
        stage_s = joined(host, gpu, profile)
    # m microbatches through S stages: the first crosses every stage, each later one
    # follows a step of the slowest stage (m / (m + S - 1) of the ideal rate for even stages)
    step = stage_s[0].copy() if d.pp == 1 else stage_s.sum(axis=0)  # (a copy costs less than a sum)
    if d.pp > 1:
        step = step + (np.asarray(ph.microbatches) - 1) * stage_s.max(axis=0)
    weights = np.ones(n) if ph.combine == "sum" else np.full(n, 1.0 / n)
    return PhaseResult(ph, step, stage_s, kernels, layout.counts, masks, priced, weights)


def _run(model, spec, profile, d: Deployment, phases: list[Phase]) -> list[PhaseResult]:
    plan = _plan(model, d, tuple(ph.name for ph in phases))
    if profile is None:
        from ..calibration.profile import IDEAL  # (imported here: it imports pydantic)

        profile = IDEAL
    args = plan.arguments(phases)
    priced = _price(plan, args, tuple(ph.n for ph in phases), spec, profile, eager=d.eager and d.kernels != "hf")
    host = host_per_launch(d, profile) if d.eager and (d.kernels == "hf" or d.launch_overhead_s is not None) else 0.0
    return [_combine(ph, m, ks, p, d, host, profile) for ph, m, ks, p in zip(phases, args.masks, args.kernels, priced)]


def _host_extra(keys: tuple, profile) -> np.ndarray:
    """Per kernel: the host seconds its profile host key adds to a run (0 where the profile
    has none)."""
    host = getattr(profile, "host", {}) or {}
    return np.array([[host[k].call_s if k in host else 0.0] for k in keys])


def host_per_launch(d: Deployment, profile) -> float:
    """Host seconds per kernel launched eagerly: the deployment's figure where it names
    one, else the profile's fitted host time of a one-kernel call."""
    if d.launch_overhead_s is not None:
        return d.launch_overhead_s
    # (transformers: one PyTorch op from Python, through its modules; a profile without the
    # key: its host time of a one-kernel call, as for an engine's eager launches)
    p = profile.host_params("hf") if d.kernels == "hf" else profile.host_params()
    return p.call_s + p.kernel_s


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
    def attention_kernel(self):
        """The kernel the deployment's attention runs on this GPU."""
        return resolve_attention(self.deployment.attention, None, self.spec)

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
            "attention_kernel": {"class": self.attention_kernel.variant, "backend": self.attention_kernel.backend,
                                 "label": self.attention_kernel.label},
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
    resolve_attention(d.attention, None, spec)  # (a class the GPU lacks: one sentence, before any work)
    if d.kernels == "hf":
        hf_check(model, d)
        if chunk is not None:
            raise UserError("--engine hf prefills the whole prompt in one forward (no --chunk)")
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
    if d.kernels == "hf" and d.hf_cache == "static":
        # SDPA reads the whole StaticCache every step, as generate() sizes it: prompt + gen
        ctx = np.full(n, float(prompt + gen))
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


def price_phases(model, spec, profile=None, deploy: Deployment | None = None, phases=()) -> list[PhaseResult]:
    """The steps of ``phases`` (each over its own points) priced in one pass."""
    model, spec = _resolve(model, spec)
    return _run(model, spec, profile, deploy or Deployment(), list(phases))


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


@dataclass(frozen=True)
class RequestTimes:
    """Per request of ``predict_requests``, as arrays: time to first token, time per output
    token and end-to-end latency, each as ``predict_model`` gives it for that request alone."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray

    def as_dict(self) -> dict:
        return {"ttft_s": self.ttft_s.tolist(), "tpot_s": self.tpot_s.tolist(), "e2e_s": self.e2e_s.tolist()}


def _whole(what: str, x) -> np.ndarray:
    """``x`` as an array of whole numbers of at least 1 (one sentence if not)."""
    a = np.asarray(x)
    if a.dtype == bool or a.dtype.kind not in "iuf" or a.size == 0 or not np.all(np.isfinite(a)) \
            or np.any(a < 1) or np.any(a != np.round(a)):
        raise UserError(f"{what} must be whole numbers of at least 1 at every request")
    return a


def _runs(counts: np.ndarray) -> np.ndarray:
    """0 .. count - 1 for each count, laid end to end."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) - np.repeat(starts, counts)


def predict_requests(model, spec, profile=None, deploy: Deployment | None = None, *, batch, prompt, gen,
                     chunk: int | None = None, decode_points: int = 4) -> RequestTimes:
    """``predict_model`` for many requests at once: ``batch``, ``prompt`` and ``gen`` are
    arrays (broadcast together), one request batch per element; every element's times are
    those ``predict_model`` gives it alone (its prefill chunks and decode points laid end to
    end in two phases, priced in one pass)."""
    model, spec = _resolve(model, spec)
    d = deploy or Deployment()
    resolve_attention(d.attention, None, spec)
    batch, prompt, gen = (np.ravel(_whole(w, x)).astype(float) for w, x in zip(
        ("the batch", "the prompt", "gen"),
        np.broadcast_arrays(np.asarray(batch), np.asarray(prompt), np.asarray(gen))))
    decode_points = _count("the number of decode points", decode_points)
    m = np.minimum(d.microbatches or d.pp, batch)
    b = np.ceil(batch / m)
    # prefill: each request's chunks (one chunk of the whole prompt without chunking)
    size = prompt if chunk is None else np.full(prompt.shape, float(_count("the chunk", chunk)))
    chunks = np.ceil(prompt / size).astype(int)
    i, j = np.repeat(np.arange(prompt.size), chunks), _runs(chunks)
    ends = np.minimum((j + 1) * size[i], prompt[i])
    pre = Phase("prefill", batch=b[i], seq_q=ends - j * size[i], seq_kv=ends, sequences=batch[i], microbatches=m[i],
                logits=(ends == prompt[i]).astype(float), combine="sum", n=ends.size)
    # decode: each request's contexts at the midpoints of equal segments of its decode
    steps = np.maximum(gen - 1, 1)
    points = np.minimum(decode_points, steps).astype(int)
    k, q = np.repeat(np.arange(gen.size), points), _runs(points)
    ctx = prompt[k] + np.rint(1 + (steps[k] - 1) * (q + 0.5) / points[k])
    dec = Phase("decode", batch=b[k], seq_q=1, seq_kv=ctx, sequences=batch[k], microbatches=m[k], n=ctx.size)
    pf, dc = _run(model, spec, profile, d, [pre, dec])
    ttft = np.add.reduceat(pf.step_s, np.cumsum(chunks) - chunks)
    tpot = np.add.reduceat(dc.step_s, np.cumsum(points) - points) / points
    return RequestTimes(ttft, tpot, ttft + (gen - 1) * tpot)
