"""Will it fit: per-GPU memory of an LLM deployment (weights, KV cache, activations,
overheads) against a GPU's memory, engine-neutral or the way vLLM budgets it.

>>> from rooflinesim.memory import fit
>>> plan = fit("llama-3-70b", "h100", tp=4, batch=16, context=8192, weights="fp8", kv="fp8")
>>> plan.fits, plan.kv_cache_tokens, plan.max_batch
"""

from .budget import (ENGINES, MemoryPlan, Setup, StageBudget, budget, fit, largest_batch,
                     make_setup, tokens_from_kv_memory, vllm_defaults)
from .kv import activation_bytes, blocks_per_sequence, kv_bytes_per_token, kv_cache_bytes, kv_heads_per_gpu
from .overheads import DeviceMemory, Overheads, device_memory, load_overheads
from .weights import (KV_DTYPES, WEIGHT_DTYPES, Linear, Parallelism, Quantization, layer_linears,
                      stage_layers, weight_bytes)

__all__ = [
    "ENGINES", "KV_DTYPES", "WEIGHT_DTYPES", "DeviceMemory", "Linear", "MemoryPlan", "Overheads",
    "Parallelism", "Quantization", "Setup", "StageBudget", "activation_bytes", "blocks_per_sequence",
    "budget", "device_memory", "fit", "kv_bytes_per_token", "kv_cache_bytes", "kv_heads_per_gpu",
    "largest_batch", "layer_linears", "load_overheads", "make_setup", "stage_layers",
    "tokens_from_kv_memory", "vllm_defaults", "weight_bytes",
]
