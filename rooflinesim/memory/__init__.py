"""Will it fit: per-GPU memory of an LLM deployment (weights, KV cache, activations,
overheads) against a GPU's memory, engine-neutral or the way vLLM budgets it.

>>> from rooflinesim.memory import fit
>>> plan = fit("llama-3-70b", "h100", tp=4, batch=16, context=8192, weights="fp8", kv="fp8")
>>> plan.fits, plan.kv_cache_tokens, plan.max_batch

Names are imported on first use, so that the weight and KV accounting (``weights``,
``kv``), which a cold ``predict model`` call needs, does not pull in the budget's
validation (pydantic, YAML).
"""

from importlib import import_module

_WHERE = {
    "budget": ("ENGINES", "MemoryPlan", "Setup", "StageBudget", "budget", "fit", "largest_batch",
               "make_setup", "tokens_from_kv_memory", "vllm_defaults"),
    "kv": ("activation_bytes", "blocks_per_sequence", "kv_bytes_per_token", "kv_cache_bytes",
           "kv_heads_per_gpu"),
    "overheads": ("DeviceMemory", "Overheads", "device_memory", "load_overheads"),
    "weights": ("KV_DTYPES", "WEIGHT_DTYPES", "Linear", "Parallelism", "Quantization",
                "gpu_weight_bytes", "layer_linears", "stage_layers", "weight_bytes"),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str):
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = import_module(f".{module}", __name__)
    for n in _WHERE[module]:  # (all of the module's names at once: importing the submodule `budget`
        globals()[n] = getattr(found, n)  # binds that name to the module, and the function must win)
    return globals()[name]


def __dir__():
    return sorted(set(globals()) | set(__all__))
