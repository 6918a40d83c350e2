"""What a model's shapes imply (parameter and KV-cache counts, its dense and MoE layers),
apart from how its config is read and validated (``config.py``): a validated
``ModelConfig`` and a ``ModelView`` of one read back from the cache (``fastpath``, for
one-shot CLI predictions without pydantic) answer the same."""

from __future__ import annotations

from typing import Literal

from ..errors import UserError

LayerKind = Literal["dense", "moe"]


class ModelFacts:
    """The shape facts and counts of a model config (its fields are ModelConfig's)."""

    # ------------------------------------------------------------------ shape facts

    @property
    def is_moe(self) -> bool:
        return "moe" in self.layer_kinds

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def num_mtp_layers(self) -> int:
        return len(self.mtp_layer_kinds)

    @property
    def qk_head_dim(self) -> int:
        """Size of one query/key head (MLA: the no-RoPE part plus the RoPE part)."""
        return self.head_dim

    def weights_default(self) -> tuple[str, str | None]:
        """(the weight dtype to use when a user names none, a warning or None): what the
        config's quantization_config stores (fp8, int8, int4), else bf16, saying so when
        the config names a quantization that is not modelled."""
        method = getattr(self, "weight_quant_method", None)
        weights = getattr(self, "quantized_weights", None)
        if weights:
            return weights, None
        if method:
            shown = method if len(method) <= 30 else method[:27] + "..."
            return "bf16", (f"{self.name}: quantization_config (quant_method '{shown}') is not "
                            "modelled and was ignored; weights are taken as bf16 (pass --weights)")
        return "bf16", None

    @property
    def dense_layers(self) -> list[int]:
        return [i for i, k in enumerate(self.layer_kinds) if k == "dense"]

    @property
    def moe_layers(self) -> list[int]:
        return [i for i, k in enumerate(self.layer_kinds) if k == "moe"]

    # ------------------------------------------------------- parameters of one layer
    # Each count is the weight matrix plus its bias vector where the model has one.

    def attention_param_counts(self) -> dict[str, int]:
        """One layer's attention projections (MLA: q_a/q_b or q, kv_a, kv_b, o)."""
        h, nh, b = self.hidden_size, self.num_heads, int(self.qkv_bias)
        o_proj = nh * self.v_head_dim * h + int(self.o_bias) * h
        if not self.is_mla:
            q, kv = nh * self.head_dim, self.num_kv_heads * self.head_dim
            v = self.num_kv_heads * self.v_head_dim
            return {"q_proj": h * q + b * q, "k_proj": h * kv + b * kv,
                    "v_proj": h * v + b * v, "o_proj": o_proj}
        rope, latent = self.qk_rope_head_dim, self.kv_lora_rank
        if self.q_lora_rank:  # compressed query: hidden -> q_lora_rank -> heads
            ql = self.q_lora_rank
            q = {"q_a_proj": h * ql + b * ql, "q_b_proj": ql * nh * self.head_dim}
        else:  # q_proj has no bias in DeepSeek's code even with attention_bias
            q = {"q_proj": h * nh * self.head_dim}
        kv_a = latent + rope  # the compressed latent plus the shared RoPE key
        return {**q,
                "kv_a_proj": h * kv_a + b * kv_a,
                "kv_b_proj": latent * nh * (self.qk_nope_head_dim + self.v_head_dim),
                "o_proj": o_proj}

    def dense_mlp_param_counts(self) -> dict[str, int]:
        """One dense layer's gated MLP."""
        h, i, b = self.hidden_size, self.intermediate_size, int(self.mlp_bias)
        return {"gate_proj": h * i + b * i, "up_proj": h * i + b * i, "down_proj": i * h + b * h}

    def expert_params(self) -> int:
        """One routed expert: a gated MLP of width moe_intermediate_size, no biases."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def router_params(self) -> int:
        """One MoE layer's router: hidden -> num_experts, plus DeepSeek-V3's score bias."""
        return self.num_experts * self.hidden_size + int(self.router_bias) * self.num_experts

    def shared_expert_params(self) -> int:
        """One MoE layer's shared MLP, plus Qwen2-MoE's hidden -> 1 gate."""
        return (3 * self.hidden_size * self.shared_expert_intermediate_size
                + int(self.shared_expert_gate) * self.hidden_size)

    def layer_norm_params(self) -> int:
        """RMSNorm weights in one layer: input and post-attention norms, plus the MLA
        latent norms (q_a, kv_a) or Qwen3's per-head q and k norms."""
        n = 2 * self.hidden_size
        if self.is_mla:
            n += (self.q_lora_rank or 0) + self.kv_lora_rank
        if self.qk_norm:
            n += 2 * self.head_dim
        return n

    def layer_params(self, layer: int) -> int:
        """All parameters of decoder layer ``layer``."""
        n = sum(self.attention_param_counts().values()) + self.layer_norm_params()
        return n + self._mlp_params(self._kind(layer))

    def _kind(self, layer: int) -> LayerKind:
        if not 0 <= layer < self.num_layers:
            raise UserError(f"layer must be between 0 and {self.num_layers - 1}, got {layer}")
        return self.layer_kinds[layer]

    def _mlp_params(self, kind: LayerKind) -> int:
        if kind == "dense":
            return sum(self.dense_mlp_param_counts().values())
        return (self.router_params() + self.num_experts * self.expert_params()
                + self.shared_expert_params())

    # ------------------------------------------------------------- whole-model counts

    def param_counts(self) -> dict[str, int]:
        """Parameters by component over the whole model (MTP modules excluded)."""
        n_dense, n_moe = len(self.dense_layers), len(self.moe_layers)
        embedding = self.vocab_size * self.hidden_size
        return {
            "embedding": embedding,
            "lm_head": 0 if self.tie_word_embeddings else embedding,
            "attention": self.num_layers * sum(self.attention_param_counts().values()),
            "dense_mlp": n_dense * sum(self.dense_mlp_param_counts().values()),
            "router": n_moe * self.router_params(),
            "routed_experts": n_moe * self.num_experts * self.expert_params(),
            "shared_experts": n_moe * self.shared_expert_params(),
            "norms": self.num_layers * self.layer_norm_params() + self.hidden_size,  # + final norm
        }

    def total_params(self) -> int:
        return sum(self.param_counts().values())

    def active_params(self, include_embedding: bool = False) -> int:
        """Parameters one token's forward pass multiplies with: every dense weight, the
        routers, top-k routed experts and the shared MLP of each MoE layer, and the LM
        head. The embedding lookup reads one row, so the table counts only with
        ``include_embedding`` (DeepSeek quotes 36.6B active without it, Mistral quotes
        Mixtral's 12.9B with it)."""
        c = self.param_counts()
        n_moe = len(self.moe_layers)
        head = self.vocab_size * self.hidden_size  # a tied head still multiplies by V x H
        active = (c["attention"] + c["dense_mlp"] + c["router"] + c["shared_experts"] + c["norms"]
                  + n_moe * self.num_experts_per_tok * self.expert_params() + head)
        if include_embedding and not self.tie_word_embeddings:
            active += c["embedding"]
        return active

    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules, reported apart from the main
        count: per module two RMSNorms (enorm, hnorm), eh_proj (2H -> H), one decoder
        layer and the head norm; the embedding and LM head are shared with the main
        model (DeepSeek-V3 README_WEIGHTS.md)."""
        h = self.hidden_size
        decoder = sum(self.attention_param_counts().values()) + self.layer_norm_params()
        return sum(2 * h + 2 * h * h + decoder + self._mlp_params(kind) + h
                   for kind in self.mtp_layer_kinds)

    # ------------------------------------------------------------------------ KV cache

    def kv_cache_bytes_per_token_per_layer(self, dtype_bytes: float | str) -> float:
        """Bytes one token adds to one layer's KV cache. GQA: K and V of every KV head.
        MLA: the compressed latent plus the RoPE key (kv_lora_rank + qk_rope_head_dim),
        which is what vLLM and SGLang cache."""
        b = _element_bytes(dtype_bytes)
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * b
        return self.num_kv_heads * (self.head_dim + self.v_head_dim) * b

    def kv_cache_bytes_per_token(self, dtype_bytes: float | str) -> float:
        """Bytes one token adds to the KV cache of all layers (MTP modules excluded)."""
        return self.num_layers * self.kv_cache_bytes_per_token_per_layer(dtype_bytes)


def _element_bytes(dtype_bytes: float | str) -> float:
    """Bytes per element from a number or a dtype name (int4 is half a byte)."""
    if isinstance(dtype_bytes, str):
        from ..dtypes import bytes_per_element

        return bytes_per_element(dtype_bytes)
    if isinstance(dtype_bytes, bool) or not isinstance(dtype_bytes, (int, float)) or dtype_bytes <= 0:
        raise UserError(f"dtype_bytes must be a positive number or a dtype name, got {dtype_bytes!r}")
    return dtype_bytes


class ModelView(ModelFacts):
    """A validated ModelConfig read back from its fields (``model_dump``): the same
    attributes and answers, frozen, equal to another view of the same fields."""

    def __init__(self, fields: dict):
        # (ModelConfig's sequences are tuples; JSON gives lists back)
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        object.__setattr__(self, "_fields", values)
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name, value):
        raise AttributeError(f"a model config is frozen (cannot set {name})")

    def __eq__(self, other):
        return type(other) is ModelView and self._fields == other._fields

    def __hash__(self):
        return hash(tuple(self._fields.items()))

    def __repr__(self):
        return f"ModelView(name={self.name!r})"
