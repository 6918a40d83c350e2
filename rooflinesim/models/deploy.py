"""A deployment of a model on GPUs: parallelism (TP, PP, EP, DP), number formats and
engine settings, checked against a model's shapes, and the per-GPU sizes it implies.

Conventions (each is what vLLM / TensorRT-LLM do, simplified):
  tp  Megatron-style tensor parallelism: QKV and gate-up are split by columns, O and down
      by rows; query heads split over tp GPUs, KV heads too, or replicated (one per GPU)
      when there are fewer KV heads than GPUs (tp must then be a multiple of them); the
      LM head's vocabulary is split (padded up to a multiple of tp).
  pp  layers split over pp stages in contiguous runs; an uneven split is allowed (the
      first layers % pp stages hold one layer more); the embedding runs on the first
      stage, the final norm and LM head on the last.
  ep  MoE experts sharded over ep GPUs. ep <= tp: within the TP group, each expert's
      width split over tp / ep GPUs; every rank already holds every token, so there is
      no all-to-all (the layer's AllReduce combines the experts' rows). ep > tp: over
      ep / tp TP groups (data-parallel attention replicas), needs ep <= tp * dp; the MoE
      op then sees the tokens of all the replicas in its EP group, with all-to-all
      dispatch and combine. Without ep, experts are split like a dense MLP (width / tp).
  dp  independent replicas: throughput multiplies, nothing else changes.
Weights: bf16 and fp16 run GEMMs in that dtype; fp8 is the fp8 GEMM format (w8a8: the
activations are quantized to fp8 too, as TensorRT-LLM's and vLLM's FP8 checkpoints run);
int8 is w8a8 (SmoothQuant style); int4 is w4a16 (GPTQ/AWQ style, one scale per
``group_size`` weights). The embedding, LM head and MoE router stay in the activation
dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtypes import dtype as _dtype
from ..errors import UserError

WEIGHT_FORMATS = ("bf16", "fp16", "fp8", "int8", "int4")
ACTIVATION_DTYPES = ("bf16", "fp16")
KV_DTYPES = ("bf16", "fp16", "fp8")
# attention classes a deployment may name; None is the GPU's default, and the kernel a
# class runs on a GPU is resolved when it is priced (rooflinesim.attention_kernels)
ATTENTION = ("fa3", "fa2", "naive")
KERNELS = ("engine", "hf")
# an engine's TP AllReduce backends (ops/collectives.py's ENGINE_ALGORITHMS, named here so that
# a deployment is read without loading the cost models)
ALLREDUCE = ("engine", "custom")


def _dtype_name(what: str, value: str, allowed) -> str:
    name = _dtype(value).name  # unknown names: one sentence with a suggestion
    if name not in allowed:
        raise UserError(f"{what} must be one of {', '.join(allowed)} (got {value!r})")
    return name


def _whole(what: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{what} must be a whole number of at least {minimum} (got {value!r})")
    return value


@dataclass(frozen=True)
class Deployment:
    """How one model is served. Dtype fields hold canonical names after construction."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    sequence_parallel: bool = False  # ReduceScatter + AllGather instead of AllReduce
    weights: str = "bf16"
    activations: str | None = None  # default: fp16 with fp16 weights, else bf16
    kv_cache: str | None = None  # default: the activation dtype
    group_size: int = 128  # int4 only: weights per scale
    attention: str | None = None  # fa3, fa2, naive; None: the GPU's default class
    microbatches: int | None = None  # pipeline microbatches; default pp (capped at the batch)
    eager: bool = False  # no CUDA graph: kernels launched from Python, host time per launch
    launch_overhead_s: float | None = None  # host time per launch (None: the profile's)
    # whose kernels: "engine" (vLLM, SGLang and TensorRT-LLM fuse alike) or "hf" (Hugging Face
    # transformers' eager forward, rooflinesim.models.hf)
    kernels: str = "engine"
    # hf only: the KV cache, "static", "dynamic" or "none" (use_cache=False); None: dynamic
    # eagerly (generate()'s default), static under a CUDA graph (the one a graph can capture)
    hf_cache: str | None = None
    # "engine" kernels only: the TP AllReduce's backends, "engine" (vLLM's since v0.11: PyTorch
    # symmetric memory among them) or "custom" (a custom AllReduce, then NCCL: SGLang's default,
    # vLLM before v0.11, TensorRT-LLM's); rooflinesim/ops/engine_allreduce.py
    allreduce: str = "engine"
    # "engine" kernels only: MLA's absorbed decode on the architecture's own MLA kernel, where
    # the profile has its parameters (FlashMLA on Hopper: vLLM's FLASHMLA backend), or False:
    # on the GPU's default attention class (SGLang's default on Hopper is FlashAttention-3,
    # TensorRT-LLM runs its own kernels); rooflinesim.attention_kernels.kernel_of
    own_mla_decode: bool = True

    def __post_init__(self):
        for f in ("tp", "pp", "ep", "dp", "group_size"):
            _whole(f"--{f.replace('_', '-')}", getattr(self, f))
        if self.microbatches is not None:
            _whole("--microbatches", self.microbatches)
        w = _dtype_name("--weights", self.weights, WEIGHT_FORMATS)
        a = _dtype_name("--activations", self.activations or ("fp16" if w == "fp16" else "bf16"),
                        ACTIVATION_DTYPES)
        kv = _dtype_name("--kv-dtype", self.kv_cache or a, KV_DTYPES)
        if w in ACTIVATION_DTYPES and w != a:
            raise UserError(f"{w} weights run their GEMMs in {w}; use --activations {w}")
        if self.attention is not None and self.attention not in ATTENTION:
            raise UserError(f"--attention must be one of {', '.join(ATTENTION)} (got {self.attention!r})")
        if self.launch_overhead_s is not None and not (
                isinstance(self.launch_overhead_s, (int, float)) and 0 <= self.launch_overhead_s < 1):
            raise UserError(f"the launch overhead must be a non-negative time "
                            f"(got {self.launch_overhead_s!r})")
        if self.kernels not in KERNELS:
            raise UserError(f"the kernels must be one of {', '.join(KERNELS)} (got {self.kernels!r})")
        if self.allreduce not in ALLREDUCE:
            raise UserError(f"--allreduce must be one of {', '.join(ALLREDUCE)} (got {self.allreduce!r})")
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "activations", a)
        object.__setattr__(self, "kv_cache", kv)
        if self.kernels == "hf" and self.hf_cache is None:
            object.__setattr__(self, "hf_cache", "dynamic" if self.eager else "static")

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self, attention: str | None = None, weight_blocks=None) -> str:
        """``attention``: the kernel the attention runs, where the GPU is known;
        ``weight_blocks``: the checkpoint's fp8 scale blocks ([n, k]), where it has them."""
        par = [f"tp {self.tp}"] + [f"{k} {v}" for k, v in (("pp", self.pp), ("ep", self.ep),
                                                            ("dp", self.dp)) if v > 1]
        if self.sequence_parallel:
            par.append("sequence parallel")
        w = self.weights + (f" (w4a16, group {self.group_size})" if self.weights == "int4" else "")
        blocks = (f" ({weight_blocks[0]} x {weight_blocks[1]} blocks)"  # (the engines' block-scaled kernels)
                  if self.weights == "fp8" and weight_blocks else "")
        hf = (f"; transformers' eager kernels, {self.hf_cache} cache" if self.kernels == "hf" else
              "; a custom AllReduce" if self.allreduce == "custom" and self.tp > 1 else "")
        return (f"{', '.join(par)}; {w} weights{blocks}, {self.activations} activations, "
                f"{self.kv_cache} KV cache, "
                f"{attention or (self.attention or 'the GPU default') + ' attention'}{hf}")

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp,
                "sequence_parallel": self.sequence_parallel, "weights": self.weights,
                "activations": self.activations, "kv_cache": self.kv_cache,
                "group_size": self.group_size, "attention": self.attention,
                "microbatches": self.microbatches, "eager": self.eager,
                "launch_overhead_s": self.launch_overhead_s if self.eager else None,
                "kernels": self.kernels, "hf_cache": self.hf_cache,
                "allreduce": self.allreduce if self.kernels == "engine" else None,
                "own_mla_decode": self.own_mla_decode if self.kernels == "engine" else None, "gpus": self.gpus}


@dataclass(frozen=True)
class Sharding:
    """Per-GPU sizes of one model under one deployment."""

    heads: int  # query heads per GPU
    kv_heads: int  # KV heads per GPU (GQA; MLA caches one latent, replicated)
    ffn: int  # dense MLP width per GPU
    expert_ffn: int  # routed expert width per GPU
    moe_token_factor: int  # tokens the MoE op sees per token of this replica (ep > tp)
    shared_ffn: int  # shared-expert MLP width per GPU
    vocab: int  # LM-head columns per GPU
    stage_layers: tuple  # layers in each pipeline stage
    stage_dense: tuple
    stage_moe: tuple


def shard(model, d: Deployment) -> Sharding:
    """Check that ``d`` can split ``model`` and return the per-GPU sizes (UserError if not)."""
    tp, name = d.tp, model.name
    if model.num_heads % tp:
        raise UserError(f"--tp {tp} does not divide the {model.num_heads} attention heads of {name}")
    kv = model.num_kv_heads
    if not model.is_mla and kv % tp and tp % kv:
        raise UserError(f"--tp {tp} must divide the {kv} KV heads of {name} or be a multiple of "
                        f"them (to replicate each KV head)")
    ffn = 0
    if "dense" in model.layer_kinds:
        if model.intermediate_size % tp:
            raise UserError(f"--tp {tp} does not divide the MLP width {model.intermediate_size} of {name}")
        ffn = model.intermediate_size // tp
    expert_ffn, factor, shared = 0, 1, 0
    if model.is_moe:
        expert_ffn, factor = _expert_split(model, d)
        shared = math.ceil(model.shared_expert_intermediate_size / tp)
    elif d.ep > 1:
        raise UserError(f"--ep applies to mixture-of-experts models, and {name} has no experts")
    if d.pp > model.num_layers:
        raise UserError(f"--pp {d.pp} exceeds the {model.num_layers} layers of {name}")
    base, extra = divmod(model.num_layers, d.pp)
    sizes = [base + (s < extra) for s in range(d.pp)]
    starts = [sum(sizes[:s]) for s in range(d.pp)]
    kinds = [model.layer_kinds[a:a + n] for a, n in zip(starts, sizes)]
    return Sharding(
        heads=model.num_heads // tp,
        kv_heads=max(kv // tp, 1),
        ffn=ffn, expert_ffn=expert_ffn, moe_token_factor=factor, shared_ffn=shared,
        vocab=math.ceil(model.vocab_size / tp),
        stage_layers=tuple(sizes),
        stage_dense=tuple(k.count("dense") for k in kinds),
        stage_moe=tuple(k.count("moe") for k in kinds),
    )


def _expert_split(model, d: Deployment) -> tuple[int, int]:
    """(routed expert width per GPU, MoE tokens per replica token)."""
    e, tp, ep = model.num_experts, d.tp, d.ep
    if e % ep:
        raise UserError(f"--ep {ep} does not divide the {e} experts of {model.name}")
    if ep <= tp:
        if tp % ep:
            raise UserError(f"--ep {ep} must divide --tp {tp} (or be a multiple of it, up to tp x dp)")
        split = tp // ep
        if model.moe_intermediate_size % split:
            raise UserError(f"tp / ep = {split} does not divide the expert width "
                            f"{model.moe_intermediate_size} of {model.name}")
        return model.moe_intermediate_size // split, 1
    if ep % tp or ep > tp * d.dp:
        raise UserError(f"--ep {ep} above --tp {tp} must be a multiple of it and at most tp x dp "
                        f"({tp * d.dp}): the experts spread over data-parallel replicas")
    return model.moe_intermediate_size, ep // tp


# ----------------------------------------------------------------- memory, simply


def weight_bytes_per_gpu(model, d: Deployment) -> float:
    """Weights on the GPU of a replica that holds the most, as ``rooflinesim fit`` counts
    them (``memory.weights``, the one accounting: sharded, replicated and 16-bit parts,
    quantization scales; int4 as GPTQ with ``d.group_size``)."""
    from ..memory.weights import Parallelism, Quantization, gpu_weight_bytes

    shard(model, d)  # the deployment's own checks first
    return gpu_weight_bytes(model, Parallelism(d.tp, d.pp, d.ep), Quantization(d.weights, d.group_size))


def kv_bytes_per_token_per_gpu(model, d: Deployment) -> float:
    """KV-cache bytes one token of one sequence adds on a GPU of the largest stage (the
    memory planner's count: ``memory.kv.kv_bytes_per_token``)."""
    from ..memory.kv import kv_bytes_per_token

    return kv_bytes_per_token(model, d.tp, d.kv_cache, max(shard(model, d).stage_layers))


def max_batch(model, d: Deployment, spec, context: int, memory_fraction: float = 0.9) -> int:
    """The largest batch of ``context``-token sequences the memory planner fits on every GPU
    of ``d`` (weights, KV cache, activation peak and overheads, with ``memory_fraction`` as
    its gpu_memory_utilization: what `rooflinesim fit` reports as the largest batch)."""
    from ..memory import largest_batch, make_setup

    shard(model, d)  # the deployment's own checks first
    if d.ep > d.tp:
        raise UserError(f"--batch max needs --ep no larger than --tp (got ep {d.ep}, tp {d.tp}): the "
                        f"memory planner splits the experts among the TP ranks of a stage")
    setup = make_setup(model, spec, tp=d.tp, pp=d.pp, ep=d.ep, weights=d.weights, kv=d.kv_cache,
                       group_size=d.group_size, gpu_memory_utilization=memory_fraction)
    batch = largest_batch(setup, context)
    if batch < 1:
        raise UserError(f"{model.name} does not fit on {spec.name} with {d.describe()}: not even "
                        f"one sequence of {context} tokens fits in {memory_fraction:.0%} of memory "
                        f"(`rooflinesim fit` shows the budget)")
    return batch
