"""Weight bytes of one GPU: every linear layer of a decoder layer sharded by TP, PP and EP,
stored in the weight dtype with its quantization scales, plus the parts that stay in 16 bits.

Sharding follows vLLM's layers: q, the MLA up-projections and gate/up are column-parallel
(output features split over TP), o and down are row-parallel (input features split); k and v
split by KV head, one head per GPU and replicated when there are fewer KV heads than GPUs;
the MLA down-projections (q_a, kv_a) are replicated. Routed experts are split over EP (whole
experts per EP rank) and each expert over the TP ranks of its EP group (tp / ep; whole
experts when EP spans more GPUs than TP, over data-parallel replicas). The embedding and LM
head are vocab-parallel over TP, after padding the vocabulary; a tied LM head is the
embedding, counted once (with PP the last stage keeps its own copy).

This is the one weight accounting: ``rooflinesim fit`` budgets ``weight_bytes`` per stage,
and ``predict model`` reports ``gpu_weight_bytes`` (the stage holding the most).

Quantization convention (what real GPTQ/AWQ/FP8/INT8 checkpoints do): every linear layer of
attention, MLP and experts is quantized; the embedding, LM head, norms and MoE router stay
in 16 bits. fp8 has one fp32 scale per matrix (per-tensor) or per output channel; int8 has
one fp32 scale per output channel; int4 has one 16-bit scale per group of ``group_size``
input weights of each output channel, plus a 4-bit zero point per group for AWQ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..dtypes import bytes_per_element
from ..errors import UserError, did_you_mean

__all__ = ["WEIGHT_DTYPES", "KV_DTYPES", "Quantization", "Parallelism", "Linear",
           "layer_linears", "stage_layers", "weight_bytes", "gpu_weight_bytes",
           "rotary_cache_bytes", "default_vocab_padding"]

WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
KV_DTYPES = ("bf16", "fp16", "fp8")
SCALE_FP32_BYTES = 4  # fp8 and int8 checkpoints store fp32 scales
GROUP_SCALE_BYTES = 2  # int4 checkpoints store fp16/bf16 group scales
ZERO_POINT_BYTES = 0.5  # AWQ: one 4-bit zero point per group
HIGH_PRECISION = frozenset({"embedding", "lm_head", "norms", "router"})
QUANTIZABLE = frozenset({"attention", "dense_mlp", "routed_experts", "shared_experts"})


def check_dtype(name: str, allowed: tuple[str, ...], what: str) -> str:
    """A dtype name from ``allowed`` (aliases such as bfloat16 accepted), else UserError."""
    from ..dtypes import dtype

    key = str(name).strip().lower()
    try:
        canonical = dtype(key).name
    except UserError:
        canonical = key
    if canonical not in allowed:
        raise did_you_mean(key, list(allowed), f"{what} dtype")
    return canonical


@dataclass(frozen=True)
class Quantization:
    """How the weights are stored."""

    dtype: str = "bf16"
    group_size: int = 128
    int4_format: Literal["gptq", "awq"] = "gptq"
    fp8_scales: Literal["tensor", "channel"] = "tensor"
    keep_16bit: frozenset = field(default_factory=frozenset)  # extra components kept in 16 bits

    def __post_init__(self):
        object.__setattr__(self, "dtype", check_dtype(self.dtype, WEIGHT_DTYPES, "weight"))
        if self.group_size < 1:
            raise UserError(f"group size must be at least 1, got {self.group_size}")
        if self.int4_format not in ("gptq", "awq"):
            raise UserError(f"int4 format must be gptq or awq, got '{self.int4_format}'")
        if self.fp8_scales not in ("tensor", "channel"):
            raise UserError(f"fp8 scales must be tensor or channel, got '{self.fp8_scales}'")
        unknown = set(self.keep_16bit) - QUANTIZABLE
        if unknown:
            raise UserError(f"cannot keep '{sorted(unknown)[0]}' in 16 bits; known: "
                            f"{', '.join(sorted(QUANTIZABLE))}")

    @property
    def high_precision_dtype(self) -> str:
        """The 16-bit dtype of embeddings, norms and activations."""
        return "fp16" if self.dtype == "fp16" else "bf16"

    @property
    def label(self) -> str:
        if self.dtype == "int4":
            return f"int4 ({self.int4_format.upper()}, group {self.group_size})"
        if self.dtype == "fp8":
            return f"fp8 (per-{self.fp8_scales} scales)"
        if self.dtype == "int8":
            return "int8 (per-channel scales)"
        return self.dtype


@dataclass(frozen=True)
class Parallelism:
    """Tensor, pipeline and expert parallel degrees; GPUs = tp x pp (EP splits the experts
    among the TP ranks of a stage)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    def check(self, cfg) -> None:
        """One-sentence errors for parallelism the model cannot be split into."""
        for name in ("tp", "pp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserError(f"{name} must be a whole number of at least 1, got {value!r}")
        if cfg.num_heads % self.tp:
            raise UserError(f"TP {self.tp} does not divide the {cfg.num_heads} attention heads "
                            f"of {cfg.name}")
        kv = cfg.num_kv_heads
        if not cfg.is_mla and kv % self.tp and self.tp % kv:
            raise UserError(f"TP {self.tp} and the {kv} KV heads of {cfg.name} do not divide "
                            f"one another")
        if self.pp > cfg.num_layers:
            raise UserError(f"PP {self.pp} is more than the {cfg.num_layers} layers of {cfg.name}")
        if self.ep > 1:
            if not cfg.is_moe:
                raise UserError(f"EP {self.ep} needs a mixture-of-experts model; {cfg.name} is dense")
            if self.tp % self.ep:
                raise UserError(f"EP {self.ep} must divide TP {self.tp} (experts are split among "
                                f"the TP ranks of a stage)")
            if cfg.num_experts % self.ep:
                raise UserError(f"EP {self.ep} does not divide the {cfg.num_experts} experts of {cfg.name}")


@dataclass(frozen=True)
class Linear:
    """One weight matrix y = x W^T with W of n x k (per expert for routed experts)."""

    name: str
    component: str  # attention, dense_mlp, routed_experts, shared_experts
    k: int
    n: int
    split: Literal["col", "row", "kv", "rep"]
    bias: bool = False
    count: int = 1  # routed experts: one matrix per expert


def layer_linears(cfg, kind: str) -> list[Linear]:
    """The linear layers of one decoder layer of ``kind`` ('dense' or 'moe')."""
    h, nh, b = cfg.hidden_size, cfg.num_heads, cfg.qkv_bias
    out: list[Linear] = []
    if cfg.is_mla:
        latent, rope = cfg.kv_lora_rank, cfg.qk_rope_head_dim
        if cfg.q_lora_rank:
            out += [Linear("q_a_proj", "attention", h, cfg.q_lora_rank, "rep", b),
                    Linear("q_b_proj", "attention", cfg.q_lora_rank, nh * cfg.head_dim, "col")]
        else:
            out.append(Linear("q_proj", "attention", h, nh * cfg.head_dim, "col"))
        out += [Linear("kv_a_proj", "attention", h, latent + rope, "rep", b),
                Linear("kv_b_proj", "attention", latent, nh * (cfg.qk_nope_head_dim + cfg.v_head_dim), "col")]
    else:
        kv = cfg.num_kv_heads
        out += [Linear("q_proj", "attention", h, nh * cfg.head_dim, "col", b),
                Linear("k_proj", "attention", h, kv * cfg.head_dim, "kv", b),
                Linear("v_proj", "attention", h, kv * cfg.v_head_dim, "kv", b)]
    out.append(Linear("o_proj", "attention", nh * cfg.v_head_dim, h, "row", cfg.o_bias))
    if kind == "dense":
        i, mb = cfg.intermediate_size, cfg.mlp_bias
        return out + [Linear("gate_proj", "dense_mlp", h, i, "col", mb),
                      Linear("up_proj", "dense_mlp", h, i, "col", mb),
                      Linear("down_proj", "dense_mlp", i, h, "row", mb)]
    ie, e = cfg.moe_intermediate_size, cfg.num_experts
    out += [Linear("expert_gate", "routed_experts", h, ie, "col", count=e),
            Linear("expert_up", "routed_experts", h, ie, "col", count=e),
            Linear("expert_down", "routed_experts", ie, h, "row", count=e)]
    if cfg.shared_expert_intermediate_size:
        si = cfg.shared_expert_intermediate_size
        out += [Linear("shared_gate", "shared_experts", h, si, "col"),
                Linear("shared_up", "shared_experts", h, si, "col"),
                Linear("shared_down", "shared_experts", si, h, "row")]
    return out


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Layers of each pipeline stage as vLLM partitions them: an even split, the remainder
    going one each to the stages just before the last."""
    counts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        counts[-i] += 1
    starts = [sum(counts[:s]) for s in range(pp)]
    return [range(s, s + c) for s, c in zip(starts, counts)]


def _shard(lin: Linear, t: int, kv_heads: int, head: int) -> tuple[float, float]:
    """(k, n) of the piece of ``lin`` one of ``t`` ranks holds."""
    if lin.split == "col":
        return lin.k, lin.n / t
    if lin.split == "row":
        return lin.k / t, lin.n
    if lin.split == "kv":
        heads = kv_heads // t if kv_heads >= t else 1  # replicated when kv_heads < t
        return lin.k, heads * (lin.n // kv_heads)
    return lin.k, lin.n


def _linear_bytes(lin: Linear, k: float, n: float, q: Quantization, hp_bytes: float) -> tuple[float, float]:
    """(weight bytes, scale bytes) of one shard of ``lin``; biases count as weight bytes."""
    bias = n * hp_bytes if lin.bias else 0.0
    if lin.component in q.keep_16bit or q.dtype in ("bf16", "fp16"):
        return k * n * hp_bytes + bias, 0.0
    weights = k * n * bytes_per_element(q.dtype) + bias
    if q.dtype == "fp8":
        scales = SCALE_FP32_BYTES * (n if q.fp8_scales == "channel" else 1)
    elif q.dtype == "int8":
        scales = SCALE_FP32_BYTES * n
    else:  # int4, group-quantized along the input dimension
        groups = -(-k // q.group_size) * n
        scales = groups * (GROUP_SCALE_BYTES + (ZERO_POINT_BYTES if q.int4_format == "awq" else 0))
    return weights, scales


def rotary_cache_bytes(cfg, hp_bytes: float) -> float:
    """The cos/sin table one GPU keeps: max positions x rotary dimension, 16-bit."""
    if not cfg.max_position_embeddings:
        return 0.0
    rotary = cfg.qk_rope_head_dim if cfg.is_mla else cfg.head_dim
    return cfg.max_position_embeddings * rotary * hp_bytes


def default_vocab_padding() -> int:
    """The bundled ``vocab_padding`` of ``rooflinesim/data/memory_overheads.yaml``, read from
    the validated-file cache when a cold CLI call already holds it (no YAML parsing)."""
    from .. import fastpath

    cached = fastpath.memory_defaults()
    if cached is not None:
        return int(cached["vocab_padding"])
    from .overheads import load_overheads

    return load_overheads().vocab_padding


def weight_bytes(cfg, par: Parallelism, q: Quantization, stage: int = 0,
                 vocab_padding: int | None = None) -> dict[str, float]:
    """Bytes of weights one GPU of pipeline ``stage`` holds, by component (vocab_padding
    None: the bundled default)."""
    if vocab_padding is None:
        vocab_padding = default_vocab_padding()
    hp = bytes_per_element(q.high_precision_dtype)
    layers = stage_layers(cfg.num_layers, par.pp)[stage]
    first, last = stage == 0, stage == par.pp - 1
    parts = dict.fromkeys(("embedding", "lm_head", "attention", "dense_mlp", "routed_experts",
                           "shared_experts", "router", "norms", "quant_scales", "rotary_cache"), 0.0)
    expert_tp = par.tp // par.ep if par.ep <= par.tp else 1  # ep > tp: whole experts
    local_experts = cfg.num_experts / par.ep if cfg.num_experts else 0
    for kind in ("dense", "moe"):
        n_layers = sum(1 for i in layers if cfg.layer_kinds[i] == kind)
        if not n_layers:
            continue
        for lin in layer_linears(cfg, kind):
            experts = lin.component == "routed_experts"
            t = expert_tp if experts else par.tp
            k, n = _shard(lin, t, cfg.num_kv_heads, cfg.head_dim)
            w, s = _linear_bytes(lin, k, n, q, hp)
            copies = n_layers * (local_experts if experts else lin.count)
            parts[lin.component] += w * copies
            parts["quant_scales"] += s * copies
        if kind == "moe":
            gate = cfg.hidden_size if cfg.shared_expert_gate else 0  # Qwen2-MoE shared gate
            parts["router"] += n_layers * (cfg.router_params() + gate) * hp
    parts["norms"] = (len(layers) * cfg.layer_norm_params() + (cfg.hidden_size if last else 0)) * hp
    vocab_rows = -(-cfg.vocab_size // vocab_padding) * vocab_padding / par.tp
    table = vocab_rows * cfg.hidden_size * hp
    if first:
        parts["embedding"] = table
    if last and (not cfg.tie_word_embeddings or not first):
        parts["lm_head"] = table
    parts["rotary_cache"] = rotary_cache_bytes(cfg, hp)
    return parts


def gpu_weight_bytes(cfg, par: Parallelism, q: Quantization,
                     vocab_padding: int | None = None) -> float:
    """Weight bytes of the GPU that holds the most (the largest pipeline stage); with PP 1
    every GPU holds the same."""
    if vocab_padding is None:
        vocab_padding = default_vocab_padding()
    return max(sum(weight_bytes(cfg, par, q, s, vocab_padding).values()) for s in range(par.pp))
