"""Will it fit: the per-GPU memory budget, the verdict, and the limits around it.

Two budgets share one shape (weights + KV cache + activation peak + overheads + headroom,
against the card's driver-visible total):

* engine-neutral (default): the named overheads of ``Overheads`` (CUDA context, cuBLAS
  workspace, CUDA graphs, NCCL buffers when GPUs talk) and a headroom of
  (1 - gpu_memory_utilization) of the card for the caching allocator;
* ``engine="vllm"``: vLLM's own rule, so its start-up log can be checked: it may use
  total x gpu_memory_utilization; from that it takes the weights, the activation peak of its
  profiling pass at max_num_batched_tokens, and the memory it finds outside torch
  (non_torch_memory, with a workspace that appears only at TP > 1); what is left is cut into
  KV blocks. CUDA graphs are captured after the KV cache is allocated and live in the
  (1 - utilization) reserve;
* ``engine="sglang"``: SGLang's rule (``sglang``): of the memory free before the weights
  (the card less the CUDA context and its distributed set-up) it keeps mem_fraction_static
  for weights and KV pool; the reserve holds activations and CUDA graphs, nothing profiled.

Each budget states its uncertainty in bytes (the sum of its parts' bounds, from the scatter
of published vLLM logs) and warns when the KV room is a small share of the budget, where a
small absolute error is a large relative one.

Every stage of a pipeline is budgeted; the figures reported are those of the stage with the
least room (the binding GPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import UserError
from . import sglang
from .kv import activation_bytes, blocks_per_sequence, kv_bytes_per_token
from .overheads import Overheads, device_memory, load_overheads
from .weights import KV_DTYPES, Parallelism, Quantization, check_dtype, stage_layers, weight_bytes

__all__ = ["ENGINES", "Setup", "StageBudget", "MemoryPlan", "make_setup", "budget", "fit",
           "largest_batch", "vllm_defaults"]

ENGINES = ("vllm", "sglang")
_MAX_TP = 64  # largest TP degree `min_gpus` tries
_BIG_GPU_BYTES = 70 * 2**30  # vLLM picks larger batching defaults on GPUs with >= 70 GiB


@dataclass(frozen=True)
class Setup:
    """Everything about a deployment except batch and context."""

    cfg: Any
    spec: Any
    par: Parallelism
    quant: Quantization
    kv_dtype: str
    block_size: int
    utilization: float
    overheads: Overheads
    engine: str | None
    capacity_bytes: float
    capacity_source: str
    capacity_measured: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    prefill_chunk_tokens: int
    utilization_source: str = "given"  # where the fraction came from (SGLang's default rule, or given)
    cuda_graph_max_bs: int = 0  # sglang: the largest decode batch it captures (its reserve counts it)

    def stage_weights(self, stage: int) -> dict[str, float]:
        return _cached_weights(self, stage)

    def with_tp(self, tp: int) -> Setup:
        from dataclasses import replace

        return replace(self, par=Parallelism(tp, self.par.pp, self.par.ep))


_WEIGHTS_CACHE: dict = {}


def _cached_weights(s: Setup, stage: int) -> dict[str, float]:
    key = (s.cfg, s.par, s.quant, stage, s.overheads.vocab_padding)
    if key not in _WEIGHTS_CACHE:
        if len(_WEIGHTS_CACHE) > 4096:
            _WEIGHTS_CACHE.clear()
        _WEIGHTS_CACHE[key] = weight_bytes(s.cfg, s.par, s.quant, stage, s.overheads.vocab_padding)
    return _WEIGHTS_CACHE[key]


def vllm_defaults(spec, capacity_bytes: float) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server picks by default: 8192 and
    1024 on GPUs with at least 70 GiB other than the A100, else 2048 and 256
    (vllm/engine/arg_utils.py, V1 engine)."""
    if capacity_bytes >= _BIG_GPU_BYTES and "a100" not in spec.name:
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class StageBudget:
    """One GPU of one pipeline stage, in bytes."""

    stage: int
    layers: int
    weights: dict[str, float]
    kv_cache: float
    kv_bytes_per_token: float
    activation: dict[str, float]
    overheads: dict[str, float]
    headroom: float
    capacity: float
    kv_room: float  # bytes the KV cache may take on this GPU
    budget_bytes: float = 0.0  # what the deployment may use: capacity x utilization
    uncertainty: dict[str, float] = field(default_factory=dict)  # bytes each part may be off

    @property
    def uncertainty_total(self) -> float:
        """Bytes the KV room may be off, either way (the parts' bounds added)."""
        return sum(self.uncertainty.values())

    @property
    def weights_total(self) -> float:
        return sum(self.weights.values())

    @property
    def overhead_total(self) -> float:
        return sum(self.overheads.values())

    @property
    def total(self) -> float:
        return (self.weights_total + self.kv_cache + self.activation["peak"] + self.overhead_total
                + self.headroom)

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV room holds, in whole blocks (0 when there is no room)."""
        return 0 if self.kv_room <= 0 else int(self.kv_room // self.kv_bytes_per_token)


def budget(s: Setup, batch: int, context: int) -> list[StageBudget]:
    """The budget of one GPU of every pipeline stage."""
    o, par = s.overheads, s.par
    out = []
    stages = stage_layers(s.cfg.num_layers, par.pp)
    for stage, layers in enumerate(stages):
        last = stage == par.pp - 1
        weights = s.stage_weights(stage)
        per_token = kv_bytes_per_token(s.cfg, par.tp, s.kv_dtype, len(layers))
        kv = batch * blocks_per_sequence(context, s.block_size) * s.block_size * per_token
        act_dtype = s.quant.high_precision_dtype
        if s.engine == "sglang":  # nothing profiled: the reserve holds activations and graphs
            overheads = {"cuda_context": o.cuda_context, "distributed": o.sglang_distributed_bytes(par.gpus)}
            before = s.capacity_bytes - sum(overheads.values())  # (free when it measures, before the weights)
            usable = before * s.utilization
            room = sglang.pool_bytes(before, before - sum(weights.values()), s.utilization)
            error = {"weights": o.uncertainty_weights_fraction * sum(weights.values()),
                     "overheads": o.uncertainty_overheads_fraction * sum(overheads.values())}
            out.append(StageBudget(stage, len(layers), weights, kv, per_token, {"peak": 0.0}, overheads,
                                   before - usable, s.capacity_bytes, room, usable, error))
            continue
        if s.engine == "vllm":  # its profiling pass: max_num_batched_tokens, max_num_seqs rows
            tokens = s.max_num_batched_tokens
            rows = min(s.max_num_seqs, tokens)
            overheads = {"non_torch": o.vllm_non_torch_bytes(par.tp),
                         "tp_workspace": o.vllm_tp_workspace_bytes(par.tp, s.spec)}
            overhead_error = o.vllm_non_torch_uncertainty(par.tp, s.spec)
        else:  # one prefill chunk of this batch; logits of one row per sequence
            tokens = min(s.prefill_chunk_tokens, batch * context)
            rows = min(batch, tokens)
            overheads = {"cuda_context": o.cuda_context, "cublas_workspace": o.cublas_workspace,
                         "cuda_graphs": o.cuda_graphs, "nccl_buffers": o.nccl_bytes(par.gpus)}
            overhead_error = o.uncertainty_overheads_fraction * sum(overheads.values())
        usable = s.capacity_bytes * s.utilization
        act = activation_bytes(s.cfg, par.tp, par.ep, tokens, rows, act_dtype,
                               o.activation_hidden_copies, o.logits_fp32_copies, last)
        headroom = s.capacity_bytes - usable
        room = usable - sum(weights.values()) - act["peak"] - sum(overheads.values())
        act_fraction = (o.uncertainty_activation_moe_fraction if s.cfg.is_moe
                        else o.uncertainty_activation_fraction)
        error = {"weights": o.uncertainty_weights_fraction * sum(weights.values()),
                 "activation": act_fraction * act["peak"], "overheads": overhead_error}
        out.append(StageBudget(stage, len(layers), weights, kv, per_token, act, overheads,
                               headroom, s.capacity_bytes, room, usable, error))
    return out


def _binding(stages: list[StageBudget]) -> StageBudget:
    """The stage with the least room left once its KV cache is placed."""
    return min(stages, key=lambda b: (b.kv_room - b.kv_cache, b.kv_tokens))


def _fits(stages: list[StageBudget], s: Setup) -> bool:
    """Every stage has whole KV blocks for all its sequences (an engine cuts its room into
    blocks; a partial block holds nothing)."""
    block = s.block_size
    return all(b.kv_room >= 0 and (b.kv_room // (b.kv_bytes_per_token * block)) * block
               * b.kv_bytes_per_token >= b.kv_cache for b in stages)


def _largest(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """Largest n in [lo, hi] with pred(n) true, pred monotone decreasing; lo - 1 if none."""
    if hi < lo or not pred(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class MemoryPlan:
    """The answer of `fit`: the verdict, the binding GPU's budget and the limits."""

    setup: Setup
    batch: int
    context: int
    stages: list[StageBudget]
    fits: bool
    max_batch: int
    max_context: int
    max_context_limited_by: str
    min_gpus: int | None
    min_tp: int | None
    warnings: list[str] = field(default_factory=list)

    @property
    def per_gpu(self) -> StageBudget:
        return _binding(self.stages)

    @property
    def kv_cache_tokens(self) -> int:
        """Tokens of KV cache per GPU as an engine reports them (its whole-block capacity),
        the least over the pipeline stages."""
        bs = self.setup.block_size
        return min((b.kv_tokens // bs) * bs for b in self.stages)

    @property
    def kv_tokens_range(self) -> tuple[int, int]:
        """KV tokens (whole blocks) of the binding GPU at the ends of its uncertainty."""
        b, bs = self.per_gpu, self.setup.block_size
        return tuple(tokens_from_kv_memory(b.kv_room + sign * b.uncertainty_total,
                                           b.kv_bytes_per_token, bs) for sign in (-1, 1))

    @property
    def max_concurrency(self) -> float:
        """Requests of ``context`` tokens the KV cache holds at once (tokens / context)."""
        return self.kv_cache_tokens / self.context

    @property
    def overflow(self) -> dict | None:
        """What does not fit: the excess over the card and the parts, largest first."""
        if self.fits:
            return None
        b = self.per_gpu
        parts = {"weights": b.weights_total, "kv_cache": b.kv_cache,
                 "activation": b.activation["peak"], "overheads": b.overhead_total,
                 "headroom": b.headroom}
        return {"excess_bytes": b.total - b.capacity, "stage": b.stage,
                "parts": dict(sorted(parts.items(), key=lambda kv: -kv[1]))}

    def assumptions(self) -> dict[str, Any]:
        """The named figures this answer used, so a user can check or override them."""
        s, o = self.setup, self.setup.overheads
        common = {"capacity_source": s.capacity_source, "block_size": s.block_size,
                  "gpu_memory_utilization": s.utilization, "vocab_padding": o.vocab_padding,
                  "activation_hidden_copies": o.activation_hidden_copies,
                  "logits_fp32_copies": o.logits_fp32_copies,
                  "quantization": s.quant.label,
                  "kept_in_16bit": sorted({"embedding", "lm_head", "norms", "router"}
                                          | set(s.quant.keep_16bit))}
        if s.engine == "sglang":
            return {**common, "engine": "sglang", "mem_fraction_static": s.utilization,
                    "mem_fraction_static_source": s.utilization_source,
                    "chunked_prefill_size": s.prefill_chunk_tokens, "cuda_graph_max_bs": s.cuda_graph_max_bs,
                    "cuda_context_bytes": o.cuda_context,
                    "sglang_distributed_per_peer_bytes": o.sglang_distributed_per_peer,
                    "activation_and_cuda_graphs": "inside the (1 - mem_fraction_static) reserve"}
        if s.engine == "vllm":
            return {**common, "engine": "vllm", "max_num_batched_tokens": s.max_num_batched_tokens,
                    "max_num_seqs": s.max_num_seqs,
                    "vllm_non_torch_base_bytes": o.vllm_non_torch_base,
                    "vllm_non_torch_per_peer_bytes": o.vllm_non_torch_per_peer,
                    "vllm_tp_workspace_bytes": o.vllm_tp_workspace_bytes(s.par.tp, s.spec),
                    "vllm_tp_workspace_seen_on_this_gpu": o.vllm_tp_workspace_seen(s.spec),
                    "cuda_graphs": "captured after the KV cache, inside the (1 - utilization) reserve"}
        return {**common, "engine": "neutral", "prefill_chunk_tokens": s.prefill_chunk_tokens,
                "cuda_context_bytes": o.cuda_context, "cublas_workspace_bytes": o.cublas_workspace,
                "cuda_graphs_bytes": o.cuda_graphs, "nccl_base_bytes": o.nccl_base,
                "nccl_per_peer_bytes": o.nccl_per_peer}

    def as_dict(self) -> dict[str, Any]:
        s, b = self.setup, self.per_gpu
        d = {
            "fits": self.fits,
            "model": s.cfg.name, "hf_id": s.cfg.hf_id, "gpu": s.spec.name,
            "engine": s.engine or "neutral",
            "tp": s.par.tp, "pp": s.par.pp, "ep": s.par.ep, "gpus": s.par.gpus,
            "batch": self.batch, "context": self.context, "block_size": s.block_size,
            "weights_dtype": s.quant.dtype, "kv_dtype": s.kv_dtype,
            "per_gpu": {
                "stage": b.stage, "layers": b.layers,
                "weights_bytes": b.weights_total, "kv_cache_bytes": b.kv_cache,
                "activation_bytes": b.activation["peak"], "overhead_bytes": b.overhead_total,
                "headroom_bytes": b.headroom, "total_bytes": b.total,
                "capacity_bytes": b.capacity, "free_bytes": b.capacity - b.total,
                "weights": dict(b.weights), "activation": dict(b.activation),
                "overheads": dict(b.overheads),
            },
            "kv_bytes_per_token": b.kv_bytes_per_token,
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_room_bytes": b.kv_room,
            "kv_room_uncertainty_bytes": b.uncertainty_total,
            "kv_room_uncertainty": dict(b.uncertainty),
            "kv_cache_tokens_range": list(self.kv_tokens_range),
            "max_concurrency": round(self.max_concurrency, 2),
            "max_batch": self.max_batch,
            "max_context": self.max_context,
            "max_context_limited_by": self.max_context_limited_by,
            "min_gpus": self.min_gpus, "min_tp": self.min_tp,
            "overflow": self.overflow,
            "assumptions": self.assumptions(),
            "warnings": list(self.warnings),
        }
        if s.engine == "vllm":
            d["vllm"] = {"total_gpu_memory_bytes": s.capacity_bytes,
                         "usable_bytes": s.capacity_bytes * s.utilization,
                         "available_kv_cache_bytes": b.kv_room,
                         "available_kv_cache_uncertainty_bytes": b.uncertainty_total,
                         "gpu_kv_cache_tokens": self.kv_cache_tokens,
                         "max_num_batched_tokens": s.max_num_batched_tokens,
                         "max_num_seqs": s.max_num_seqs}
        if s.engine == "sglang":
            before = s.capacity_bytes - b.overhead_total
            d["sglang"] = {"mem_fraction_static": s.utilization, "free_before_weights_bytes": before,
                           "free_after_weights_bytes": before - b.weights_total,
                           "kv_pool_bytes": b.kv_room, "max_total_num_tokens": self.kv_cache_tokens,
                           "page_size": s.block_size}
        return d


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} must be a whole number of at least 1, got {value!r}")
    return value


def make_setup(model, gpu="h100", *, tp: int = 1, pp: int = 1, ep: int = 1,
               weights: str = "bf16", kv: str = "bf16", block_size: int = 16,
               gpu_memory_utilization: float | None = None, group_size: int | None = None,
               int4_format: str = "gptq", fp8_scales: str = "tensor", keep_16bit=(),
               engine: str | None = None, overheads: Overheads | str | None = None,
               device_memory_bytes: float | None = None,
               max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None,
               prefill_chunk_tokens: int | None = None, spec_files=(), mem_fraction_static: float | None = None,
               cuda_graph_max_bs: int | None = None, piecewise_cuda_graph: bool = True) -> Setup:
    """Resolve and check everything but batch and context (one-sentence UserErrors).
    ``gpu_memory_utilization`` (default 0.9) is vLLM's share of the card, or the engine-neutral
    budget's; SGLang's is ``mem_fraction_static`` (default: its rule for the GPU, TP x PP,
    prefill chunk, ``cuda_graph_max_bs`` and ``piecewise_cuda_graph``, ``sglang``)."""
    from ..hardware import load_spec
    from ..models.config import load_config
    from ..models.facts import ModelFacts

    cfg = model if isinstance(model, ModelFacts) else load_config(model)
    spec = load_spec(gpu, spec_files=tuple(spec_files))
    par = Parallelism(tp, pp, ep)
    par.check(cfg)
    o = overheads if isinstance(overheads, Overheads) else load_overheads(overheads)
    quant = Quantization(weights, group_size or o.int4_group_size, int4_format, fp8_scales,
                         frozenset(keep_16bit))
    kv_dtype = check_dtype(kv, KV_DTYPES, "KV-cache")
    _positive("block size", block_size)
    if engine is not None and engine not in ENGINES:
        raise UserError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    if engine == "sglang" and gpu_memory_utilization is not None:
        raise UserError("SGLang keeps its share of the card with mem_fraction_static (--mem-fraction-static), "
                        "not gpu_memory_utilization")
    if engine != "sglang" and (mem_fraction_static is not None or cuda_graph_max_bs is not None
                               or not piecewise_cuda_graph):
        raise UserError("mem_fraction_static, cuda_graph_max_bs and piecewise_cuda_graph (--mem-fraction-static, "
                        "--cuda-graph-max-bs, --eager-prefill) budget SGLang's memory (--engine sglang)")
    fraction = mem_fraction_static if engine == "sglang" else gpu_memory_utilization
    if fraction is not None and (isinstance(fraction, bool) or not 0 < float(fraction) <= 1):
        name = "mem_fraction_static" if engine == "sglang" else "gpu memory utilization"
        raise UserError(f"{name} must be in (0, 1], got {fraction!r}")
    if device_memory_bytes is not None:
        if device_memory_bytes <= 0:
            raise UserError(f"device memory must be above 0, got {device_memory_bytes!r}")
        capacity, source, measured = float(device_memory_bytes), "given by the user", True
    else:
        dm = device_memory(spec)
        capacity, source, measured = dm.total_bytes, dm.source, dm.measured
    mnbt, seqs = vllm_defaults(spec, capacity)
    mnbt = _positive("max num batched tokens", max_num_batched_tokens or mnbt)
    seqs = _positive("max num seqs", max_num_seqs or seqs)
    origin, graphs = "given", 0
    if engine == "sglang":
        chunk = _positive("prefill chunk", prefill_chunk_tokens or sglang.chunked_prefill_size(spec))
        graphs = sglang.cuda_graph_max_bs(spec, tp) if cuda_graph_max_bs is None else int(cuda_graph_max_bs)
        if graphs < 0:
            raise UserError(f"cuda_graph_max_bs must be 0 (no decode graph) or more, not {graphs}")
        if fraction is None:
            smi = device_memory(spec).nvidia_smi_bytes if device_memory_bytes is None else None
            fraction = sglang.mem_fraction_static(smi or capacity, tp=tp, pp=pp, chunk=chunk, graphs=graphs,
                                                  piecewise=piecewise_cuda_graph, mla=cfg.is_mla)
            origin = sglang.FRACTION_SOURCE + ("" if piecewise_cuda_graph else ", without piecewise CUDA graphs") + (
                "" if smi else f"; no nvidia-smi figure for {spec.name}: its "
                               f"{'driver-visible total' if measured else 'spec capacity'} stands for it")
    else:
        chunk = _positive("prefill chunk", prefill_chunk_tokens or o.prefill_chunk_tokens)
        fraction = 0.9 if fraction is None else fraction
    return Setup(cfg, spec, par, quant, kv_dtype, block_size, float(fraction), o,
                 engine, capacity, source, measured, mnbt, seqs, chunk, origin, graphs)


def _valid_tps(cfg, ep: int) -> list[int]:
    kv = cfg.num_kv_heads
    return [t for t in range(1, min(cfg.num_heads, _MAX_TP) + 1)
            if cfg.num_heads % t == 0 and (cfg.is_mla or kv % t == 0 or t % kv == 0) and t % ep == 0]


def fit(model, gpu="h100", *, batch: int = 1, context: int | None = None, **options) -> MemoryPlan:
    """Will ``batch`` sequences of ``context`` tokens fit on ``gpu`` with this parallelism and
    these dtypes? Options are those of ``make_setup`` (tp, pp, ep, weights, kv, block_size,
    gpu_memory_utilization, group_size, int4_format, fp8_scales, keep_16bit, engine,
    overheads, device_memory_bytes, max_num_batched_tokens, max_num_seqs,
    prefill_chunk_tokens, spec_files, mem_fraction_static, cuda_graph_max_bs,
    piecewise_cuda_graph). ``context`` defaults to the model's maximum."""
    s = make_setup(model, gpu, **options)
    cfg = s.cfg
    _positive("batch", batch)
    warnings = []
    model_max = cfg.max_position_embeddings
    if context is None:
        if model_max is None:
            raise UserError(f"{cfg.name} states no maximum context; give one")
        context = model_max
    _positive("context", context)
    if model_max and context > model_max:
        warnings.append(f"context {context:,} is beyond the {model_max:,} tokens {cfg.name} was "
                        f"built for (max_position_embeddings)")
    if not s.capacity_measured:
        warnings.append(f"no driver-visible memory figure for {s.spec.name}: using its spec "
                        f"capacity, which overstates what a process can allocate")
    stages = budget(s, batch, context)
    fits = _fits(stages, s)
    low = _low_room_warning(_binding(stages), s)
    if low:
        warnings.append(low)

    def ok(setup: Setup, b: int, c: int) -> bool:
        return _fits(budget(setup, b, c), setup)

    max_batch = largest_batch(s, context)
    hi = max(1, _room_tokens(s) // batch + s.block_size)
    max_context = _largest(lambda c: ok(s, batch, c), 1, hi)
    limited_by = "memory"
    if model_max and context <= model_max < max_context:  # past the maximum only if asked
        max_context, limited_by = model_max, "model"
    min_tp = next((t for t in _valid_tps(cfg, s.par.ep) if ok(s.with_tp(t), batch, context)), None)
    return MemoryPlan(s, batch, context, stages, fits, max_batch, max_context, limited_by,
                      None if min_tp is None else min_tp * s.par.pp, min_tp, warnings)


def gib(x: float) -> float:
    """Bytes in GiB (for messages)."""
    return x / 2**30


def _low_room_warning(b: StageBudget, s: Setup) -> str | None:
    """A sentence when the KV room is under ``low_kv_room_fraction`` of the budget."""
    share = b.kv_room / b.budget_bytes if b.budget_bytes else 0.0
    if share >= s.overheads.low_kv_room_fraction:
        return None
    if b.kv_room <= 0:
        return (f"no room is left for the KV cache (short by {gib(-b.kv_room):.2f} GiB, "
                f"± {gib(b.uncertainty_total):.2f} GiB)")
    return (f"the KV cache gets only {gib(b.kv_room):.2f} GiB, {100 * share:.1f}% of the "
            f"{gib(b.budget_bytes):.1f} GiB budget: the ± {gib(b.uncertainty_total):.2f} GiB "
            f"uncertainty of the other parts is ± {100 * b.uncertainty_total / b.kv_room:.0f}% "
            f"of the KV tokens")


def largest_batch(s: Setup, context: int) -> int:
    """The largest batch of ``context``-token sequences that fits (0 when not even one does)."""
    return _largest(lambda b: _fits(budget(s, b, context), s), 1,
                    max(1, _room_tokens(s) // context + 1))


def _room_tokens(s: Setup) -> int:
    """KV tokens the least roomy stage holds at batch 1 and context 1: an upper bound on
    batch x context (the activation peak only grows with both)."""
    return min(st.kv_tokens for st in budget(s, 1, 1))


def tokens_from_kv_memory(kv_memory_bytes: float, per_token_bytes: float, block_size: int) -> int:
    """Tokens an engine reports for ``kv_memory_bytes`` of KV cache: whole blocks."""
    blocks = math.floor(kv_memory_bytes / (per_token_bytes * block_size))
    return max(0, blocks) * block_size
