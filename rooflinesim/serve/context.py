"""The longest request a served engine accepts, and vLLM's check at start that its KV cache
holds one request that long.

Each engine takes its context limit from the model's ``max_position_embeddings`` unless
told otherwise (vLLM's ``--max-model-len``, SGLang's ``--context-length``, TensorRT-LLM's
``max_seq_len``), refuses a limit past it, and rejects a request whose prompt and output
tokens together pass the limit (vLLM's OpenAI server answers 400: "This model's maximum
context length is ..."). vLLM also refuses to start when its KV cache cannot hold one
request of ``max_model_len`` tokens (``vllm/v1/core/kv_cache_utils.py``,
``check_enough_kv_cache_memory``: "To serve at least one request with the model's max seq
len ..., the estimated maximum model length is ..."), counting what each layer's cache
spec needs at most (``vllm/v1/kv_cache_interface.py``, ``max_memory_usage_bytes``): a
full-attention layer ``cdiv(max_model_len, block)`` blocks, a sliding-window layer
``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block) + 1``. SGLang starts
with any pool, but its scheduler (``python/sglang/srt/managers/scheduler.py``) holds a request
to ``max_req_len = min(context_len - 1, max_total_num_tokens - 1)`` tokens: it aborts a prompt
longer than ``max_req_len - 5`` and cuts a request's ``max_new_tokens`` to ``max_req_len -
prompt - 1``.
"""

from __future__ import annotations

from ..errors import UserError

SERVED = ("vllm", "sglang", "trtllm")  # (static and hf batches are priced as predict model prices them)


def max_model_len(model, given: int | None) -> int | None:
    """The engine's context limit: ``given``, at most the model's; else the model's (None
    where its config states none)."""
    top = model.max_position_embeddings
    if given is None:
        return top
    if given < 1:
        raise UserError(f"--max-model-len must be at least 1 (got {given})")
    if top is not None and given > top:
        raise UserError(f"--max-model-len {given:,} is past {model.name}'s context of {top:,} tokens "
                        f"(max_position_embeddings): the engines refuse it")
    return int(given)


def check_requests(input_tokens, output_tokens, limit: int | None, engine: str) -> None:
    """One sentence where a request's prompt and output pass ``limit`` (the engine would
    reject it, so the benchmark would not be the one asked for)."""
    if limit is None or engine not in SERVED:
        return
    need = input_tokens.astype("int64") + output_tokens.astype("int64")
    over = need > limit
    if over.any():
        i = int(need.argmax())
        raise UserError(f"{int(over.sum()):,} of {need.size:,} requests need more than max_model_len {limit:,} "
                        f"tokens (the longest: {int(input_tokens[i]):,} prompt + {int(output_tokens[i]):,} output); "
                        f"{engine} rejects them: shorten them, or raise --max-model-len if the model allows")


def check_sglang_pool(input_tokens, output_tokens, pool_tokens: int) -> None:
    """One sentence where SGLang's KV pool of ``pool_tokens`` (its max_total_num_tokens) would
    abort a prompt or cut an output (the benchmark would not be the one asked for)."""
    longest = pool_tokens - 2  # (max_req_len - 1: a prompt and its output, at most)
    prompt, need = input_tokens.astype("int64"), input_tokens.astype("int64") + output_tokens.astype("int64")
    over = (prompt > pool_tokens - 6) | (need > longest)
    if over.any():
        i = int(need.argmax())
        raise UserError(f"{int(over.sum()):,} of {need.size:,} requests outgrow SGLang's KV pool of {pool_tokens:,} "
                        f"tokens (the longest: {int(input_tokens[i]):,} prompt + {int(output_tokens[i]):,} output); "
                        f"SGLang aborts a prompt over {pool_tokens - 6:,} tokens and cuts an output to "
                        f"{longest:,} tokens less its prompt: shorten them, or leave the KV cache more memory "
                        f"(more GPUs, a smaller weight or KV dtype)")


def kv_needed(model, limit: int, max_num_batched_tokens: int, block_size: int) -> int:
    """KV-cache tokens (whole blocks) vLLM asks for one request of ``limit`` tokens."""
    if model.sliding_window:  # (every layer keeps a window: Mistral-7B-v0.1's kind)
        tokens = min(model.sliding_window - 1 + max_num_batched_tokens, limit)
        return (-(-tokens // block_size) + 1) * block_size
    return -(-limit // block_size) * block_size


def largest_fitting(model, kv_tokens: int, max_num_batched_tokens: int, block_size: int) -> int | None:
    """The longest ``max_model_len`` up to the model's whose one request vLLM's KV cache
    of ``kv_tokens`` holds (vLLM's "estimated maximum model length"); None where the model
    states no context."""
    top = model.max_position_embeddings
    if top is None or kv_needed(model, top, max_num_batched_tokens, block_size) <= kv_tokens:
        return top
    fits = kv_tokens // block_size * block_size
    while fits > 0 and kv_needed(model, fits, max_num_batched_tokens, block_size) > kv_tokens:
        fits -= block_size  # (a sliding window's extra block)
    return max(fits, 0)


def check_vllm_start(model, kv_tokens: int, limit: int | None, max_num_batched_tokens: int,
                     block_size: int) -> None:
    """vLLM's refusal to start where one request of ``limit`` tokens outgrows the KV cache."""
    if limit is None:
        return
    need = kv_needed(model, limit, max_num_batched_tokens, block_size)
    if need > kv_tokens:
        fits = largest_fitting(model, kv_tokens, max_num_batched_tokens, block_size)
        raise UserError(f"vLLM would not start: one request of max_model_len {limit:,} tokens needs {need:,} "
                        f"KV-cache tokens and this deployment leaves {kv_tokens:,}; pass --max-model-len "
                        f"{fits:,} or less, or leave the KV cache more memory (more GPUs, a smaller weight or "
                        f"KV dtype)")
