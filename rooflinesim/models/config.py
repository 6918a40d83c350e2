"""Hugging Face config.json -> a validated, normalized architecture description.

``load_config`` reads a config.json (a file, a directory holding one, or a bundled preset
named by its Hugging Face id or short name) into a frozen ``ModelConfig``: the shapes that
later code turns into GEMMs, attention, MoE kernels and weight / KV-cache budgets, plus
pure-arithmetic parameter and KV-cache counts. Dense, GQA/MQA, MoE (Mixtral, Qwen-MoE,
DeepSeek) and MLA (DeepSeek-V2/V3) are first-class.

Every config key is accounted for: keys that shape the model are read; keys known not to
matter to performance (token ids, dropout, RoPE scaling, ...) are skipped; a key that
would change the compute graph in a way rooflinesim cannot model is an error naming the
key; any other unknown key lands in ``ignored_fields`` so the CLI can show it.

Modelling assumptions: every supported family uses RMSNorm (weight only, no bias), a
gated MLP (gate, up and down projections; SiLU for the Llama family) and rotary
positions (no position-embedding table).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import UserError
from ..files import SMALL_FILE_BYTES, load_json, read_text, shorten
from . import presets
from .facts import LayerKind, ModelFacts

__all__ = [
    "ModelConfig", "load_config", "from_hf_dict", "SUPPORTED_MODEL_TYPES",
    "COMMON_KEYS", "IRRELEVANT_KEYS",
]



class ModelConfig(BaseModel, ModelFacts):
    """One decoder-only model, normalized from its Hugging Face config.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    hf_id: str | None = None
    source: str = Field("", description="the file or preset the config was read from")
    architecture: str = Field(min_length=1, description="architectures[0] of the config")
    model_type: str = Field(min_length=1)

    hidden_size: int = Field(ge=1)
    num_layers: int = Field(ge=1)
    num_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1, description="MLA: the heads kv_b_proj expands the latent to")
    head_dim: int = Field(ge=1, description="query/key head size; MLA: qk_nope + qk_rope")
    v_head_dim: int = Field(ge=1, description="value head size (head_dim unless MLA says otherwise)")
    intermediate_size: int = Field(ge=0, description="dense-layer MLP width; 0 when no layer is dense")
    vocab_size: int = Field(ge=1)
    tie_word_embeddings: bool
    max_position_embeddings: int | None = Field(None, ge=1)
    hidden_act: str = "silu"
    gated_mlp: Literal[True] = Field(True, description="gate, up and down projections")
    norm: Literal["rmsnorm"] = "rmsnorm"
    rope_theta: float | None = Field(None, gt=0)
    torch_dtype: str | None = None
    weight_quant_method: str | None = Field(None, description="quantization_config.quant_method")
    quantized_weights: str | None = Field(None, description=(
        "the weight dtype quantization_config stands for (fp8, int8, int4), None when there is "
        "none or rooflinesim does not model the method"))
    weight_block_size: tuple[int, int] | None = Field(None, description=(
        "quantization_config.weight_block_size of fp8 checkpoints: weights scaled per block of "
        "[n, k] elements (DeepSeek-V3/R1, the Qwen3 FP8 releases: 128 x 128), which engines "
        "run through block-scaled kernels; None: one scale per tensor or channel"))

    qkv_bias: bool = Field(False, description="bias on q, k, v (MLA: on q_a and kv_a)")
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = Field(False, description="per-head RMSNorm on q and k (Qwen3)")
    sliding_window: int | None = Field(None, ge=1, description="every layer attends this many tokens")

    layer_kinds: tuple[LayerKind, ...] = Field(description="'dense' or 'moe' for each layer")
    num_experts: int = Field(0, ge=0)
    num_experts_per_tok: int = Field(0, ge=0, description="top-k routed experts per token")
    moe_intermediate_size: int = Field(0, ge=0, description="width of one routed expert")
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_intermediate_size: int = Field(
        0, ge=0, description="width of the always-on shared MLP (all shared experts fused)")
    shared_expert_gate: bool = Field(False, description="Qwen2-MoE sigmoid gate on the shared MLP")
    router_bias: bool = Field(False, description="DeepSeek-V3 e_score_correction_bias")
    norm_topk_prob: bool | None = None
    routed_scaling_factor: float | None = None
    scoring_func: str | None = None
    topk_method: str | None = None
    num_expert_groups: int | None = Field(None, ge=1)
    topk_groups: int | None = Field(None, ge=1)

    q_lora_rank: int | None = Field(None, ge=1, description="None: no query compression")
    kv_lora_rank: int | None = Field(None, ge=1)
    qk_nope_head_dim: int | None = Field(None, ge=0)
    qk_rope_head_dim: int | None = Field(None, ge=0)

    mtp_layer_kinds: tuple[LayerKind, ...] = Field(
        (), description="decoder layer of each multi-token-prediction module (not in the main count)")
    ignored_fields: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if len(self.layer_kinds) != self.num_layers:
            raise UserError(f"layer_kinds has {len(self.layer_kinds)} entries for {self.num_layers} layers")
        if self.is_mla:
            if None in (self.qk_nope_head_dim, self.qk_rope_head_dim):
                raise UserError("an MLA model needs qk_nope_head_dim and qk_rope_head_dim")
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise UserError("head_dim must be qk_nope_head_dim + qk_rope_head_dim for MLA")
        elif self.num_heads % self.num_kv_heads:
            raise UserError(f"num_attention_heads ({self.num_heads}) must be a multiple of "
                            f"num_key_value_heads ({self.num_kv_heads})")
        if "dense" in self.layer_kinds and self.intermediate_size < 1:
            raise UserError("intermediate_size must be at least 1 when a layer has a dense MLP")
        if "moe" in self.layer_kinds:
            if self.num_experts < 1 or self.moe_intermediate_size < 1:
                raise UserError("MoE layers need num_experts and moe_intermediate_size of at least 1")
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise UserError(f"num_experts_per_tok must be between 1 and num_experts "
                                f"({self.num_experts}), got {self.num_experts_per_tok}")
        return self


# ================================================================= reading a config.json


@dataclass(frozen=True)
class _Family:
    """How one model_type's config keys map onto ModelConfig."""

    attention: Literal["gqa", "mla"]
    moe: Literal["none", "mixtral", "qwen", "deepseek"]
    bias: Literal["none", "qkv", "attention_bias"]  # attention_bias: on q, k, v and o
    keys: frozenset[str]
    qk_norm: bool = False
    shared_expert_gate: bool = False
    mtp: bool = False
    window: Literal["none", "sliding_window", "qwen"] = "none"


# Keys every supported family reads (or checks).
COMMON_KEYS = frozenset({
    "architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
    "max_position_embeddings", "hidden_act", "rms_norm_eps", "rope_theta", "rope_parameters",
    "torch_dtype", "dtype", "quantization_config", "layer_types", "is_encoder_decoder",
    "add_cross_attention",
})

# Keys known not to matter to performance: token ids, initialisation, dropout, training
# losses, RoPE frequency scaling (positions only, not shapes), bookkeeping, generation.
IRRELEVANT_KEYS = frozenset({
    "_name_or_path", "transformers_version", "auto_map", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "initializer_range", "use_cache",
    "attention_dropout", "resid_pdrop", "embd_pdrop", "hidden_dropout", "rope_scaling",
    "original_max_position_embeddings", "partial_rotary_factor", "rope_interleave", "use_mrope",
    "pretraining_tp", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
    "aux_loss_alpha", "seq_aux", "ep_size", "tokenizer_class", "_attn_implementation",
    "attn_implementation", "_attn_implementation_autoset", "_from_model_config", "return_dict",
    "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16", "tf_legacy_loss",
    "pruned_heads", "chunk_size_feed_forward", "is_decoder", "cross_attention_hidden_size",
    "tie_encoder_decoder", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "finetuning_task", "id2label", "label2id", "prefix", "task_specific_params", "problem_type",
})

# An unknown key matching this changes the compute graph in a way rooflinesim cannot
# model (state-space or linear-attention blocks, hybrid or per-layer attention patterns,
# sparse or compressed attention, encoders and other modalities): it is an error.
_UNMODELLED = re.compile(
    r"mamba|ssm|rwkv|linear_att|lightning|retention|state_size|conv_kernel|conv_dim|time_step"
    r"|hybrid|block_type|attention_type|attn_type|layer_type|sliding_window_pattern|global_attn"
    r"|local_attn|softcap|cross_attention|encoder|vision|audio|_config$|index_topk|index_n_heads"
    r"|compress|o_lora_rank|hc_mult|hash_layers|no_rope")

_WINDOW = frozenset({"sliding_window"})
_QWEN_WINDOW = frozenset({"sliding_window", "use_sliding_window", "max_window_layers"})
_QWEN_MOE = frozenset({"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                       "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"})
_DEEPSEEK = frozenset({
    "attention_bias", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "n_routed_experts", "n_shared_experts", "num_experts_per_tok",
    "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "norm_topk_prob",
    "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group"})

_FAMILIES: dict[str, _Family] = {
    "llama": _Family("gqa", "none", "attention_bias", frozenset({"attention_bias", "mlp_bias"})),
    "mistral": _Family("gqa", "none", "none", _WINDOW, window="sliding_window"),
    "mixtral": _Family("gqa", "mixtral", "none", _WINDOW | {"num_local_experts", "num_experts_per_tok"},
                       window="sliding_window"),
    # Qwen2: q, k and v always carry a bias, o does not.
    "qwen2": _Family("gqa", "none", "qkv", _QWEN_WINDOW, window="qwen"),
    "qwen2_moe": _Family("gqa", "qwen", "qkv", _QWEN_WINDOW | _QWEN_MOE | {"shared_expert_intermediate_size"},
                         shared_expert_gate=True, window="qwen"),
    "qwen3": _Family("gqa", "none", "attention_bias", _QWEN_WINDOW | {"attention_bias"}, qk_norm=True,
                     window="qwen"),
    "qwen3_moe": _Family("gqa", "qwen", "attention_bias", _QWEN_WINDOW | _QWEN_MOE | {"attention_bias"},
                         qk_norm=True, window="qwen"),
    # Phi-3: fused qkv_proj and gate_up_proj, no biases (its modules ignore attention_bias).
    "phi3": _Family("gqa", "none", "none", _WINDOW | {"attention_bias"}, window="sliding_window"),
    "deepseek_v2": _Family("mla", "deepseek", "attention_bias", _DEEPSEEK),
    "deepseek_v3": _Family("mla", "deepseek", "attention_bias", _DEEPSEEK | {"num_nextn_predict_layers"},
                           mtp=True),
}
SUPPORTED_MODEL_TYPES = tuple(sorted(_FAMILIES))

_MISSING = object()

# The largest value each size may take: far beyond any real model, small enough that no
# count, tuple of layers or sum over them grows without bound.
_MAXIMA = {"num_hidden_layers": 10_000, "num_nextn_predict_layers": 10_000,
           "first_k_dense_replace": 10_000, "moe_layer_freq": 10_000, "decoder_sparse_step": 10_000,
           "hidden_size": 1_000_000, "vocab_size": 10_000_000,
           "max_position_embeddings": 2**31, "sliding_window": 2**31}
_MAXIMUM = 10_000_000  # any other size: heads, head dims, MLP and expert widths, experts


class _Reader:
    """Typed access to the raw dict; every problem is one sentence naming source and key."""

    def __init__(self, raw: dict, source: str):
        self.raw, self.source = raw, source

    def fail(self, key: str, what: str) -> UserError:
        return UserError(f"{self.source}: field '{key}' {what}")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        value = self.raw.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise UserError(f"{self.source}: missing required field '{key}'")
            return default
        return value

    def integer(self, key: str, default: Any = _MISSING, minimum: int = 1, nullable: bool = False):
        value = self.get(key, default)
        if value is None and (nullable or default is None):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"must be an integer of at least {minimum}, got {shorten(value)}")
        maximum = _MAXIMA.get(key, _MAXIMUM)
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum:,}, got {shorten(value)}")
        return value

    def flag(self, key: str, default: Any = _MISSING) -> bool | None:
        value = self.get(key, default)
        if value is not None and not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {shorten(value)}")
        return value

    def number(self, key: str, default: Any = _MISSING) -> float | None:
        value = self.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
                or abs(value) == float("inf"):
            raise self.fail(key, f"must be a finite number, got {shorten(value)}")
        return float(value)

    def text(self, key: str, default: Any = _MISSING) -> str | None:
        value = self.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {shorten(value)}")
        return value


def _check_keys(raw: dict, family: _Family, source: str) -> tuple[str, ...]:
    """Unknown keys that look architectural raise; other unknown keys are returned."""
    ignored = []
    for key in raw:
        if key in COMMON_KEYS or key in family.keys or key in IRRELEVANT_KEYS:
            continue
        if _UNMODELLED.search(key):
            raise UserError(f"{source}: config field {shorten(key)} changes the compute graph in a way "
                            f"rooflinesim cannot model")
        ignored.append(key)
    for key in ("is_encoder_decoder", "add_cross_attention"):
        if raw.get(key):
            raise UserError(f"{source}: config field '{key}' is true, and rooflinesim models "
                            f"decoder-only models")
    layer_types = raw.get("layer_types")
    if layer_types is not None:
        kinds = layer_types if isinstance(layer_types, list) else [layer_types]
        other = sorted({shorten(t) for t in kinds} - {"'full_attention'"})
        if other:
            raise UserError(f"{source}: config field 'layer_types' has {', '.join(other[:3])} layers, "
                            f"and rooflinesim models full attention only")
    return tuple(ignored)


def from_hf_dict(raw: dict, *, name: str, source: str = "", hf_id: str | None = None) -> ModelConfig:
    """Normalize the contents of a Hugging Face config.json (already parsed)."""
    source = source or name
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a JSON object of config fields at the top level")
    r = _Reader(raw, source)
    model_type = r.text("model_type")
    family = _FAMILIES.get(model_type)
    if family is None:
        raise UserError(f"{source}: model_type {shorten(model_type)} is not supported by rooflinesim "
                        f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    ignored = _check_keys(raw, family, source)
    arch = r.get("architectures", None)
    if arch is not None and not (isinstance(arch, list) and arch and isinstance(arch[0], str)):
        raise r.fail("architectures", f"must be a list of class names, got {shorten(arch)}")

    hidden = r.integer("hidden_size")
    layers = r.integer("num_hidden_layers")
    heads = r.integer("num_attention_heads")
    fields: dict[str, Any] = dict(
        name=name, hf_id=hf_id, source=source, model_type=model_type,
        architecture=arch[0] if arch else model_type,
        hidden_size=hidden, num_layers=layers, num_heads=heads,
        num_kv_heads=r.integer("num_key_value_heads", None) or heads,
        vocab_size=r.integer("vocab_size"),
        tie_word_embeddings=bool(r.flag("tie_word_embeddings", False)),  # False in every family's HF class
        max_position_embeddings=r.integer("max_position_embeddings", None),
        hidden_act=r.text("hidden_act", "silu") or "silu",
        rope_theta=_rope_theta(r),
        torch_dtype=r.text("torch_dtype", None) or r.text("dtype", None),
        **_quantization(r),
        qk_norm=family.qk_norm,
        ignored_fields=ignored,
    )
    bias = family.bias == "qkv" or (family.bias == "attention_bias" and r.flag("attention_bias", False))
    fields.update(qkv_bias=bool(bias), o_bias=bool(family.bias == "attention_bias" and bias),
                  mlp_bias=bool("mlp_bias" in family.keys and r.flag("mlp_bias", False)))
    fields.update(_window(r, family))
    if family.attention == "mla":
        fields.update(_mla(r))
    else:
        head_dim = r.integer("head_dim", None)
        if head_dim is None:
            if hidden % heads:
                raise r.fail("head_dim", f"is missing and hidden_size ({hidden}) is not a multiple "
                                         f"of num_attention_heads ({heads})")
            head_dim = hidden // heads
        fields.update(head_dim=head_dim, v_head_dim=head_dim)
    mtp = r.integer("num_nextn_predict_layers", 0, minimum=0) if family.mtp else 0
    moe = _moe(r, family, layers + mtp)  # MTP layers follow the same dense/MoE rule
    kinds = moe.pop("layer_kinds")
    fields.update(moe, layer_kinds=kinds[:layers], mtp_layer_kinds=kinds[layers:])
    try:
        return ModelConfig(**fields)
    except ValidationError as exc:
        raise UserError(f"{source}: {_one_sentence(exc)}") from None


def _rope_theta(r: _Reader) -> float | None:
    theta = r.number("rope_theta", None)
    params = r.raw.get("rope_parameters")
    if theta is None and isinstance(params, dict) and isinstance(params.get("rope_theta"), (int, float)):
        theta = float(params["rope_theta"])
    return theta


# quantization_config.quant_method -> the weight dtype it stores (GPTQ and AWQ by their
# bits, 4 unless the config says otherwise); other methods are not modelled.
_QUANT_FP8 = frozenset({"fp8", "fbgemm_fp8"})
_QUANT_GROUPED = frozenset({"awq", "gptq", "awq_marlin", "gptq_marlin"})


def _quantization(r: _Reader) -> dict:
    q = r.raw.get("quantization_config")
    if q is None:
        return {"weight_quant_method": None, "quantized_weights": None}
    if not isinstance(q, dict):
        raise r.fail("quantization_config", f"must be an object, got {shorten(q)}")
    method = q.get("quant_method")
    if method is not None and not isinstance(method, str):
        raise r.fail("quantization_config.quant_method", f"must be a string, got {shorten(method)}")
    method = method.lower() if method else None
    weights, block = None, None
    if method in _QUANT_FP8:
        weights = "fp8"
        block = q.get("weight_block_size")
        if block is not None:
            if not (isinstance(block, list) and len(block) == 2
                    and all(type(b) is int and b >= 1 for b in block)):
                raise r.fail("quantization_config.weight_block_size",
                             f"must be two positive whole numbers, got {shorten(block)}")
            block = tuple(block)
    elif method in _QUANT_GROUPED:
        bits = q.get("bits", q.get("w_bit", 4))
        weights = {4: "int4", 8: "int8"}.get(bits) if type(bits) is int else None
    return {"weight_quant_method": method, "quantized_weights": weights, "weight_block_size": block}


def _window(r: _Reader, family: _Family) -> dict:
    if family.window == "sliding_window":
        return {"sliding_window": r.integer("sliding_window", None)}
    if family.window == "qwen":
        # Qwen sets sliding_window but applies it only with use_sliding_window, and then
        # per layer (by max_window_layers): that pattern is not modelled.
        if r.flag("use_sliding_window", False):
            raise UserError(f"{r.source}: config field 'use_sliding_window' is true, and "
                            f"rooflinesim does not model Qwen's per-layer sliding windows")
        r.integer("sliding_window", None)
    return {}


def _mla(r: _Reader) -> dict:
    if "q_lora_rank" not in r.raw:
        raise UserError(f"{r.source}: missing required field 'q_lora_rank' (null means no query compression)")
    nope, rope = r.integer("qk_nope_head_dim", minimum=0), r.integer("qk_rope_head_dim", minimum=0)
    return dict(q_lora_rank=r.integer("q_lora_rank", nullable=True), kv_lora_rank=r.integer("kv_lora_rank"),
                qk_nope_head_dim=nope, qk_rope_head_dim=rope, head_dim=nope + rope,
                v_head_dim=r.integer("v_head_dim"))


def _moe(r: _Reader, family: _Family, layers: int) -> dict:
    """MoE fields and the per-layer dense/MoE pattern, by family rule."""
    if family.moe == "none":
        return dict(layer_kinds=("dense",) * layers, intermediate_size=r.integer("intermediate_size"))
    if family.moe == "mixtral":  # every layer is MoE; experts are as wide as intermediate_size
        return dict(layer_kinds=("moe",) * layers, intermediate_size=0,
                    num_experts=r.integer("num_local_experts"),
                    num_experts_per_tok=r.integer("num_experts_per_tok"),
                    moe_intermediate_size=r.integer("intermediate_size"),
                    norm_topk_prob=True, scoring_func="softmax")  # softmax over the top-k
    if family.moe == "qwen":
        experts = r.integer("num_experts", minimum=0)
        step = r.integer("decoder_sparse_step", 1)
        only_mlp = r.get("mlp_only_layers", [])
        if not isinstance(only_mlp, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                     for i in only_mlp):
            raise r.fail("mlp_only_layers", f"must be a list of layer indices, got {shorten(only_mlp)}")
        only_mlp = set(only_mlp)
        # Qwen2MoeDecoderLayer: MoE unless listed in mlp_only_layers, every decoder_sparse_step-th layer
        kinds = tuple("moe" if i not in only_mlp and experts > 0 and (i + 1) % step == 0 else "dense"
                      for i in range(layers))
        shared = 0
        if family.shared_expert_gate:  # Qwen2-MoE; Qwen3-MoE has no shared expert
            shared = r.integer("shared_expert_intermediate_size", 0, minimum=0)
        return dict(layer_kinds=kinds, intermediate_size=r.integer("intermediate_size", 0, minimum=0),
                    num_experts=experts, num_experts_per_tok=r.integer("num_experts_per_tok"),
                    moe_intermediate_size=r.integer("moe_intermediate_size"),
                    num_shared_experts=int(shared > 0), shared_expert_intermediate_size=shared,
                    shared_expert_gate=family.shared_expert_gate and shared > 0,
                    norm_topk_prob=bool(r.flag("norm_topk_prob", False)), scoring_func="softmax")
    # DeepSeek: MoE from first_k_dense_replace on, every moe_layer_freq-th layer; the shared
    # experts run as one MLP of n_shared_experts * moe_intermediate_size.
    experts = r.integer("n_routed_experts", None)
    first, freq = r.integer("first_k_dense_replace", 0, minimum=0), r.integer("moe_layer_freq", 1)
    kinds = tuple("moe" if experts and i >= first and i % freq == 0 else "dense" for i in range(layers))
    moe_i = r.integer("moe_intermediate_size") if experts else 0
    n_shared = r.integer("n_shared_experts", 0, minimum=0, nullable=True) or 0
    topk_method = r.text("topk_method", None)
    return dict(layer_kinds=kinds, intermediate_size=r.integer("intermediate_size"),
                num_experts=experts or 0,
                num_experts_per_tok=r.integer("num_experts_per_tok", 0, minimum=0, nullable=True) or 0,
                moe_intermediate_size=moe_i, num_shared_experts=n_shared,
                shared_expert_intermediate_size=n_shared * moe_i,
                router_bias=topk_method == "noaux_tc",  # e_score_correction_bias, one per expert
                norm_topk_prob=r.flag("norm_topk_prob", False),
                routed_scaling_factor=r.number("routed_scaling_factor", None),
                scoring_func=r.text("scoring_func", "softmax"), topk_method=topk_method,
                num_expert_groups=r.integer("n_group", None), topk_groups=r.integer("topk_group", None))


def _one_sentence(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] in ("value_error", "assertion_error") and "error" in err.get("ctx", {}):
        what = str(err["ctx"]["error"])
    else:
        what = err["msg"][:1].lower() + err["msg"][1:]
    return f"{where}: {what}" if where else what


# ============================================================================= loading


def load_config(path_or_name: str | os.PathLike) -> ModelConfig:
    """A ModelConfig from a config.json path, a directory holding one, or a preset named
    by its Hugging Face id or short name (case-insensitive). Nothing is downloaded."""
    path = Path(path_or_name)
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError:  # (a name too long to be a path: a preset name, or nothing)
        is_dir = is_file = False
    if is_dir:
        if not (path / "config.json").is_file():
            raise UserError(f"{path}: the directory has no config.json")
        return _load_file(path / "config.json")
    if is_file:
        return _load_file(path)
    text = os.fspath(path_or_name)
    preset = presets.find_preset(text)
    if preset is not None:
        return _load_preset(preset).model_copy(update={"hf_id": presets.hf_id_for(text)})
    if text.endswith(".json") or text.startswith((".", "~", os.sep)) or (os.altsep and os.altsep in text):
        raise UserError(f"{text}: no such file or directory")
    raise presets.unknown(text)


@lru_cache(maxsize=64)
def _load_preset(preset: str) -> ModelConfig:
    raw = _parse(presets.preset_path(preset).read_text(encoding="utf-8"), f"preset {preset}")
    return from_hf_dict(raw, name=preset, source=f"preset {preset}", hf_id=presets.hf_id_for(preset))


def _load_file(path: Path) -> ModelConfig:
    raw = _parse(read_text(path, "config.json", SMALL_FILE_BYTES), str(path))
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    hf_id = raw.get("_name_or_path")
    hf_id = hf_id if isinstance(hf_id, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", hf_id) else None
    cached = _hf_cache_id(path)
    if cached:  # .../models--org--name/snapshots/<revision>/config.json
        name = hf_id = cached
    return from_hf_dict(raw, name=name or "model", source=str(path), hf_id=hf_id)


def _hf_cache_id(path: Path) -> str | None:
    """The Hugging Face id of a config.json inside the hub cache layout, else None."""
    parts = path.resolve().parts
    if len(parts) >= 4 and parts[-3] == "snapshots" and parts[-4].startswith("models--"):
        org_name = parts[-4][len("models--"):].split("--", 1)
        return "/".join(org_name) if len(org_name) == 2 else None
    return None


def _parse(text: str, source: str) -> dict:
    raw = load_json(text, source)
    if not isinstance(raw, dict):
        raise UserError(f"{source}: expected a JSON object of config fields at the top level")
    return raw
