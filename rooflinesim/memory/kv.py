"""KV-cache bytes of one GPU, with paged (block) allocation, and the activation peak of a
prefill chunk. Both are per pipeline stage, since each stage holds its own layers."""

from __future__ import annotations

from ..dtypes import bytes_per_element

__all__ = ["kv_heads_per_gpu", "kv_bytes_per_token", "blocks_per_sequence", "kv_cache_bytes",
           "activation_bytes"]


def kv_heads_per_gpu(cfg, tp: int) -> int:
    """KV heads one GPU caches: kv_heads / tp, or one (replicated) when kv_heads < tp."""
    return cfg.num_kv_heads // tp if cfg.num_kv_heads >= tp else 1


def kv_bytes_per_token(cfg, tp: int, kv_dtype: str, layers: int | None = None) -> float:
    """Bytes one token adds to the KV cache of one GPU holding ``layers`` layers (all by
    default). GQA: K and V of the GPU's KV heads. MLA: the compressed latent plus the RoPE
    key (kv_lora_rank + qk_rope_head_dim), the same on every TP rank (not split)."""
    b = bytes_per_element(kv_dtype)
    layers = cfg.num_layers if layers is None else layers
    if cfg.is_mla:
        return layers * (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * b
    return layers * kv_heads_per_gpu(cfg, tp) * (cfg.head_dim + cfg.v_head_dim) * b


def blocks_per_sequence(context: int, block_size: int) -> int:
    """Blocks a sequence of ``context`` tokens occupies: whole blocks, rounded up."""
    return -(-context // block_size)


def kv_cache_bytes(cfg, tp: int, kv_dtype: str, batch: int, context: int, block_size: int,
                   layers: int | None = None) -> float:
    """KV cache of ``batch`` sequences of ``context`` tokens on one GPU, in whole blocks."""
    tokens = batch * blocks_per_sequence(context, block_size) * block_size
    return tokens * kv_bytes_per_token(cfg, tp, kv_dtype, layers)


def _per_token_elements(cfg, tp: int, ep: int, hidden_copies: float) -> float:
    """Activation elements one token keeps alive at the peak of a decoder layer."""
    h, nh = cfg.hidden_size, cfg.num_heads // tp
    kv = nh if cfg.is_mla else kv_heads_per_gpu(cfg, tp)
    attention = 2 * nh * cfg.head_dim + kv * (cfg.head_dim + cfg.v_head_dim)  # q, k, v, output
    mlp = 0.0
    if "dense" in cfg.layer_kinds:
        mlp = 3 * cfg.intermediate_size / tp  # gate and up outputs, activated product
    if cfg.is_moe:
        ie = cfg.moe_intermediate_size / (tp // ep)
        routed = cfg.num_experts_per_tok * (3 * ie + h)  # per routed copy: gate, up, act, output
        shared = 3 * cfg.shared_expert_intermediate_size / tp
        mlp = max(mlp, routed + shared + cfg.num_experts)  # + router logits
    return hidden_copies * h + max(attention, mlp)


def activation_bytes(cfg, tp: int, ep: int, tokens: int, sampled_rows: int, act_dtype: str,
                     hidden_copies: float, logits_copies: float, last_stage: bool = True) -> dict:
    """Activation peak of a prefill chunk of ``tokens`` tokens on one GPU: the larger of the
    forward pass (per-token activations of one layer) and the sampler (fp32 logits of
    ``sampled_rows`` rows over the vocabulary, on the last pipeline stage)."""
    b = bytes_per_element(act_dtype)
    forward = tokens * _per_token_elements(cfg, tp, ep, hidden_copies) * b
    logits = 0.0
    if last_stage:
        logits = sampled_rows * cfg.vocab_size * 4 * logits_copies + tokens * cfg.hidden_size * b
    return {"forward": forward, "logits": logits, "peak": max(forward, logits)}

