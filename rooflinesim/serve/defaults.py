"""Each engine's defaults as ``serve`` runs it, with their sources: its host time per step
and per request (``ENGINES``), its limits for a GPU (``engine_limits``), the flags that are
its alone (``check_engine_flags``, ``memory_fraction``), SGLang's passes without CUDA graphs,
where vLLM may run cascade attention, and the KV cache each engine budgets (``engine_kv_budget``:
``rooflinesim fit``'s planner under that engine's rule)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from ..memory import sglang as sglang_memory
from ..models.deploy import Deployment


@dataclass(frozen=True)
class EngineDefaults:
    step_overhead_s: float  # host time per step not hidden under the GPU's
    source: str
    overlap: bool = False  # the next batch formed while the GPU runs this one (schedulers/: each engine's notes)
    request_overhead_s: float = 0.0  # a request's front end: the server's time outside the forward passes
    request_overhead_source: str = "not measured for this engine: none is added (--request-overhead sets one)"
    # an engine whose scheduler overlaps the GPU by default, run without it (--no-overlap-schedule):
    # the host's time per step, then in series with the GPU's
    serial_step_overhead_s: float = 0.0
    serial_source: str = "not measured for this engine without its overlap scheduler: none is added"
    prefix_caching: bool = False  # a prompt's shared prefix reused from the KV cache by default (schedulers/base.py)
    # its TP AllReduce's backends (Deployment.allreduce; rooflinesim/data/engine_allreduce.json)
    allreduce: str = "engine"
    allreduce_source: str = "vLLM's communicator (the default engine's)"
    # MLA's absorbed decode on the architecture's own MLA kernel (Deployment.own_mla_decode)
    own_mla_decode: bool = True
    mla_decode_source: str = "vLLM's (the default engine's)"

    def host(self, overlap: bool) -> tuple[float, str]:
        """The host time per step and its source, run with ``overlap`` or without: an engine
        that overlaps by default pays its serial time when run without."""
        if self.overlap and not overlap:
            return self.serial_step_overhead_s, self.serial_source
        return self.step_overhead_s, self.source


def engine_kernels(engine: str, allreduce: str | None = None) -> dict:
    """The Deployment fields that say which kernels ``engine`` runs: its TP AllReduce's
    backends (``allreduce`` where given, else its default) and whether MLA's absorbed decode
    runs the architecture's own MLA kernel."""
    e = ENGINES[engine]
    return {"allreduce": allreduce or e.allreduce, "own_mla_decode": e.own_mla_decode}


def prefix_caching_of(engine: str, given: bool | None) -> bool:
    """Whether ``engine`` reuses cached prefixes: ``given``, else its default; one sentence
    where it is asked of an engine whose cache is not simulated."""
    if given and engine not in PREFIX_CACHES:
        raise UserError(f"prefix caching is simulated for --engine vllm and sglang; {engine}'s is not "
                        f"(its requests are served without it)")
    return ENGINES[engine].prefix_caching if given is None else bool(given)


def default_overlap(engine: str, stages: int) -> bool:
    """Whether ``engine`` overlaps scheduling with the GPU by default on ``stages`` pipeline
    stages (vLLM 0.14's async scheduling leaves pipelines out)."""
    return ENGINES[engine].overlap and not (engine == "vllm" and stages > 1)


ENGINES = {
    "vllm": EngineDefaults(0.0, (
        "vLLM's async scheduling (on by default since v0.14.0, vllm-project/vllm PR 27614) schedules the "
        "next step while the GPU runs this one, its sampled tokens as placeholders (PR 19970: to hide the "
        "scheduler's time under the model's); a request arriving during a step is scheduled a step later"), True,
        serial_step_overhead_s=1.5e-4, serial_source=(
            "vLLM v1 without async scheduling (before v0.14.0, or --no-async-scheduling; always with pipeline "
            "stages): the gap between decode steps with the engine core's host work overlapped by its "
            "processes was 150-170 us (vllm-project/vllm PR 11133); without that overlap it measured 5-6 ms "
            "at batch 256 (issue 10634)"), prefix_caching=True,
        mla_decode_source=(
            "vLLM's FLASHMLA backend, its default for MLA on Hopper (v0.8.4's log of DeepSeek-R1 on 8 x H200: "
            "'Forcing kv cache block size to 64 for FlashMLA backend', Michaelvll/llm-ie-benchmarks "
            "sgl/logs/vllm-deepseek-r1.log)"),
        allreduce_source=(
            "vLLM's CudaCommunicator.all_reduce since v0.11.0 (PyTorch symmetric memory on by default, "
            "vllm-project/vllm PR 24111); before it, --allreduce custom"),
        request_overhead_s=1.02e-2, request_overhead_source=(
            "vLLM's front end, the client's TTFT less the server's own (vllm:time_to_first_token_seconds, from "
            "the request's arrival in the engine): 8.4 and 12.0 ms in two runs of vllm bench serve's completions "
            "backend (11.0-12.2 ms for chat), Qwen2.5-0.5B at concurrency 8, 512-token prompts "
            "(vllm-project/vllm PR 54628, 2026-08): HTTP, tokenization and the streamed reply outside the engine")),
    "sglang": EngineDefaults(0.0, (
        "SGLang's overlap scheduler (on by default since PR 2067) prepares a batch while the GPU runs the "
        "one before; its v0.4 release post shows no GPU idle time between decode batches "
        "(lmsys.org blog, 2024-12-04); a request arriving during a step is scheduled a step later"), True,
        6.9e-3, (
            "SGLang served from a mock forward pass that busy-waits 2.632 ms: median TTFT 9.54 ms at "
            "concurrency 1 with 128-token prompts (vllm bench serve, openai-chat backend), so 6.9 ms of HTTP, "
            "chat template, tokenization, scheduling and detokenization outside the forward "
            "(tenstorrent/tt-inference-server issue 3560, 2026-05-18)"),
        6.1e-4, (
            "SGLang's decode loop without and with its overlap scheduler: 3,053.86 and 3,458.31 tokens/s at 16 "
            "running requests (Llama-3.1-8B, TP4; sgl-project/sglang PR 5608), 5.24 and 4.63 ms a step, so "
            "0.61 ms of host time a step that the overlap hides"), prefix_caching=True,
        allreduce="custom", allreduce_source=(
            "SGLang's GroupCoordinator.all_reduce (python/sglang/srt/distributed/parallel_state.py): its custom "
            "AllReduce (ported from vLLM's), then pynccl; PyTorch symmetric memory only with "
            "--enable-torch-symm-mem"),
        own_mla_decode=False, mla_decode_source=(
            "SGLang's fa3 backend, its default for MLA models on Hopper (0.4.5.post3's log of DeepSeek-R1 on "
            "8 x H200: 'Attention backend not set. Use fa3 backend by default.', Michaelvll/llm-ie-benchmarks "
            "sgl/logs/sgl-0.4.5.post3-deepseek-r1.log); FlashMLA only with --attention-backend flashmla")),
    "trtllm": EngineDefaults(0.0, (
        "TensorRT-LLM's overlap scheduler (on by default since PR 4174) runs the host work of a step while "
        "the GPU runs the one before (TensorRT-LLM docs, features: overlap scheduler); a request arriving "
        "during a step is scheduled a step later"), True, allreduce="custom", allreduce_source=(
            "TensorRT-LLM's AllReduce (tensorrt_llm/_torch/distributed/ops.py, strategy AUTO): its own one-shot "
            "and two-shot kernels, then NCCL; priced as vLLM's custom AllReduce (kernels of the same two "
            "kinds) as measured"),
        own_mla_decode=False, mla_decode_source=(
            "TensorRT-LLM's own MLA kernels, not measured: priced as the GPU's default attention class")),
    "static": EngineDefaults(0.0, "static batching as predict model prices it: the kernel sum, no host time"),
    "hf": EngineDefaults(0.0, (
        "Hugging Face transformers' generate() on static batches: each step is predict model "
        "--engine hf's (eagerly, its host time per PyTorch op is in the step); the Python of "
        "generate()'s own loop (logits processors, stopping criteria) is not counted")),
}
# engines whose prefix cache serve simulates, those whose default it is (vLLM's automatic prefix
# caching, on by default in its v1 engine; SGLang's radix cache, on unless --disable-radix-cache);
# TensorRT-LLM's KV block reuse is not simulated
PREFIX_CACHES = tuple(name for name, e in ENGINES.items() if e.prefix_caching)
# SGLang's forward passes without a CUDA graph (its prefill batches until piecewise CUDA graphs
# became the default for prefill in 2026, PR 16331; a decode batch larger than its largest
# captured graph, always): the host's time for one forward pass, per decoder layer, which the
# pass cannot run faster than (eager.joined: the slower of the host and the GPU sets the pace)
SGLANG_EAGER_HOST_S = {"dense": 2.18e-4, "mla_or_moe": 1.354e-3}
SGLANG_EAGER_SOURCE = (
    "SGLang's forward pass without a CUDA graph, per decoder layer: DeepSeek-V3 (MLA and MoE layers) "
    "82.6 ms for a prefill of one new token against 23.1 ms captured (sgl-project/sglang PR 12160), 1.354 ms "
    "a layer over 61; Llama-3.1-8B 8.23 ms eager against 7.35 ms captured at batch 1 (PR 1401), 0.218 ms a "
    "layer over 32 once joined with the GPU's time; a layer with MLA attention or MoE experts is priced as "
    "DeepSeek-V3's, any other as Llama's")


# GPUs on which vLLM's default attention backend is FlashAttention, the one that runs cascade
# attention (vllm/platforms/cuda.py; Blackwell's is FlashInfer, ROCm's its own)
CASCADE_ARCHITECTURES = ("ampere", "ada", "hopper")


def cascade_rule(engine: str, model, spec, d: Deployment, disabled: bool) -> tuple | None:
    """Where vLLM may run cascade attention (``engine.cascade_prefix``), the constants of its
    choice: (query heads, KV heads of a GPU, its SMs); None where it never does: another
    engine, --disable-cascade-attn (vLLM's flag), MLA (its backends have none), a sliding
    window, or an attention backend other than FlashAttention."""
    from ..attention_kernels import resolve
    from ..models.deploy import shard

    if engine != "vllm" or disabled or model.is_mla or model.sliding_window or d.kernels == "hf":
        return None
    if spec.architecture not in CASCADE_ARCHITECTURES or resolve(d.attention, None, spec).variant not in (
            "fa3", "fa2"):
        return None
    sh = shard(model, d)
    return int(sh.heads), int(sh.kv_heads), int(spec.chip.sm_count)


def check_engine_flags(engine: str, *, eager_prefill: bool = False, disable_cascade_attn: bool = False,
                       cuda_graph_max_bs: int | None = None) -> None:
    """The flags of one engine given with another (serve and plan say so alike):
    --eager-prefill and --cuda-graph-max-bs are SGLang's, --disable-cascade-attn vLLM's."""
    if eager_prefill and engine != "sglang":
        raise UserError(f"--eager-prefill prices SGLang's prefill batches without CUDA graphs (--engine sglang); "
                        f"{engine}'s are not modelled that way")
    if disable_cascade_attn and engine != "vllm":
        raise UserError(f"--disable-cascade-attn is vLLM's (--engine vllm); {engine} runs no cascade attention")
    if cuda_graph_max_bs is not None and engine != "sglang":
        raise UserError(f"--cuda-graph-max-bs sets SGLang's largest decode batch run from a CUDA graph (--engine "
                        f"sglang); {engine}'s decode steps are priced as captured")
    if cuda_graph_max_bs is not None and cuda_graph_max_bs < 0:
        raise UserError(f"--cuda-graph-max-bs must be 0 (no decode graph) or more, not {cuda_graph_max_bs}")


def memory_fraction(engine: str, gpu_memory_utilization: float | None, mem_fraction_static: float | None):
    """The engine's own share of each card from the flag it takes (serve and plan alike):
    SGLang's --mem-fraction-static, the others' --gpu-memory-utilization (None: the default)."""
    if engine == "sglang" and gpu_memory_utilization is not None:
        raise UserError("SGLang keeps its share of each card with --mem-fraction-static (its flag); "
                        "--gpu-memory-utilization is vLLM's and TensorRT-LLM's")
    if engine != "sglang" and mem_fraction_static is not None:
        raise UserError(f"--mem-fraction-static is SGLang's (--engine sglang); {engine}'s share of each card is "
                        f"--gpu-memory-utilization")
    return mem_fraction_static if engine == "sglang" else gpu_memory_utilization


def eager_pass_host_s(model, d: Deployment) -> float:
    """The host time of one SGLang forward pass without a CUDA graph through one pipeline
    stage of ``d`` (``SGLANG_EAGER_HOST_S`` per layer; the layers shared out evenly over the
    stages)."""
    per = SGLANG_EAGER_HOST_S
    total = sum(per["mla_or_moe"] if (model.is_mla or kind == "moe") else per["dense"] for kind in model.layer_kinds)
    return total / d.pp


# SGLang's decode CUDA graphs: batches up to cuda_graph_max_bs are captured (padded up to the
# next captured size), a larger one runs without a graph (cuda_graph_runner.py, can_run)
SGLANG_CUDA_GRAPH_SOURCE = (
    "SGLang's default --cuda-graph-max-bs by GPU memory and TP (python/sglang/srt/server_args.py since "
    "sgl-project/sglang PR 10372, 2025-09-12: 8 under 20 GiB; 24, or 80 at TP 4 or more, under 35 GiB; 32 or "
    "160 under 60 GiB; 256 or 512 under 160 GiB; 512 above; 160 on GPUs of 25 GB and more before it, PR 2360); "
    "a larger decode batch runs without a graph, its host time per pass as --eager-prefill prices a prefill "
    "batch's (an absorbing state under load: sgl-project/sglang issue 33483)")

# (SGLang's defaults by the GPU's memory, its chunked_prefill_size and cuda_graph_max_bs with its
# memory rule: rooflinesim/memory/sglang.py)
sglang_cuda_graph_max_bs = sglang_memory.cuda_graph_max_bs


def engine_limits(engine: str, model, spec, kv_tokens: int | None = None, context_len: int | None = None) -> dict:
    """The engine's own defaults for the deployment's GPU: the token budget of a step, the
    most requests running, the KV block (tokens), and SGLang's prefill batch limit (its
    running requests from the KV cache over ``context_len``: --context-length, else the
    model's)."""
    from ..memory import vllm_defaults

    if engine == "sglang":  # (server_args.py: chunked_prefill_size by GPU memory; scheduler.py)
        chunk = sglang_memory.chunked_prefill_size(spec)
        seqs = 4096
        if kv_tokens is not None:
            longest = context_len or model.max_position_embeddings or 4096
            pool = min(max(int(kv_tokens / longest * 512), 2048), 4096)
            seqs = max(1, min(kv_tokens // 2, pool))
        return {"max_num_batched_tokens": chunk, "max_num_seqs": seqs, "block_size": 1,
                "max_prefill_tokens": 16384}
    if engine == "trtllm":  # (llm_args.py: max_num_tokens, max_batch_size; KvCacheConfig tokens_per_block)
        return {"max_num_batched_tokens": 8192, "max_num_seqs": 2048, "block_size": 32, "max_prefill_tokens": 16384}
    mnbt, seqs = vllm_defaults(spec, spec.memory.capacity_bytes)
    return {"max_num_batched_tokens": mnbt, "max_num_seqs": seqs, "block_size": 16, "max_prefill_tokens": 16384}


def kv_cache_tokens(model, spec, d: Deployment, *, block_size: int, gpu_memory_utilization: float,
                    max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """KV-cache tokens of one replica, as ``rooflinesim fit --engine vllm`` reports them."""
    from ..memory import fit

    plan = fit(model, spec.name, batch=1, context=1, tp=d.tp, pp=d.pp, ep=d.ep, weights=d.weights,
               kv=d.kv_cache, block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
               group_size=d.group_size, engine="vllm", max_num_batched_tokens=max_num_batched_tokens,
               max_num_seqs=max_num_seqs)
    return int(plan.kv_cache_tokens)


# each engine's name for its share of the card, as its JSON reports it
MEMORY_FRACTION_KEYS = {"sglang": "mem_fraction_static", "trtllm": "free_gpu_memory_fraction"}


def engine_kv_tokens(engine: str, model, spec, d: Deployment, **budget) -> int:
    """KV-cache tokens of one replica as ``engine`` budgets its memory (``engine_kv_budget``)."""
    return engine_kv_budget(engine, model, spec, d, **budget)[0]


def engine_kv_budget(engine: str, model, spec, d: Deployment, *, block_size: int,
                     gpu_memory_utilization: float | None, max_num_batched_tokens: int, max_num_seqs: int,
                     cuda_graph_max_bs: int | None = None, piecewise_cuda_graph: bool = True) -> tuple:
    """(KV-cache tokens, the share of the card and where it came from) of one replica as
    ``engine`` budgets its memory, ``gpu_memory_utilization``
    being the engine's own share of the card (None: its default): vLLM's rule
    (``kv_cache_tokens``; 0.9) for every engine but sglang and trtllm. SGLang's is its
    mem_fraction_static (``rooflinesim fit --engine sglang``: its rule for the GPU, TP x PP,
    its prefill chunk ``max_num_batched_tokens``, ``cuda_graph_max_bs`` and
    ``piecewise_cuda_graph``), in pages of ``block_size``. TensorRT-LLM's is its
    free_gpu_memory_fraction (KvCacheConfig, tensorrt_llm/llmapi/llm_args.py: "Default is
    90%"): that share of what the memory planner leaves at the whole card (the weights, a
    forward pass of the limits, the CUDA context), in whole ``block_size`` blocks (vLLM's rule
    counts its own 16-token blocks, whatever ``block_size``)."""
    if engine == "sglang":
        from ..memory import fit

        plan = fit(model, spec.name, batch=1, context=1, tp=d.tp, pp=d.pp, ep=d.ep, weights=d.weights,
                   kv=d.kv_cache, block_size=block_size, group_size=d.group_size, engine="sglang",
                   mem_fraction_static=gpu_memory_utilization, prefill_chunk_tokens=max_num_batched_tokens,
                   cuda_graph_max_bs=cuda_graph_max_bs, piecewise_cuda_graph=piecewise_cuda_graph)
        fraction = plan.setup.utilization
        return int(plan.kv_cache_tokens), fraction, (
            f"rooflinesim fit --engine sglang at mem_fraction_static {fraction:g} "
            f"({plan.setup.utilization_source})")
    given = "given" if gpu_memory_utilization is not None else "default"
    gpu_memory_utilization = 0.9 if gpu_memory_utilization is None else gpu_memory_utilization
    if engine == "trtllm":
        free = kv_cache_tokens(model, spec, d, block_size=block_size, gpu_memory_utilization=1.0,
                               max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
        return int(free * gpu_memory_utilization) // block_size * block_size, gpu_memory_utilization, (
            f"TensorRT-LLM's free_gpu_memory_fraction {gpu_memory_utilization:g} ({given}) of what the memory "
            f"planner leaves at the whole card")
    return kv_cache_tokens(model, spec, d, block_size=16, gpu_memory_utilization=gpu_memory_utilization,
                           max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs), \
        gpu_memory_utilization, f"rooflinesim fit --engine vllm at gpu_memory_utilization {gpu_memory_utilization:g} ({given})"
