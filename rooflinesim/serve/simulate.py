"""`serve` as a library call: a deployment (as for ``predict_model``), its KV cache from the
memory planner (``rooflinesim fit --engine vllm``'s figure, or ``--engine sglang``'s for
SGLang), an engine's scheduler over a
stream of requests, and the benchmark client's metrics.

Data-parallel replicas each get every dp-th request (round robin, as a load balancer
without state does) and are simulated apart.

Intervals: the profile's cross-validated error per kernel family (on shapes its fit did
not see) is read as a log-normal spread of the true time about the predicted one, with
sigma the larger of median |error| / 0.674 and p90 |error| / 1.645 (what a normal
distribution of log errors would give); each of ``interval_samples`` simulations draws one
factor per family (every kernel of a family shares it: errors within a family are taken
as fully correlated, the cautious choice) and runs the same requests again; the interval
of a metric holds the middle ``INTERVAL_LEVEL`` of its values over the draws. For the
served engines (vllm, sglang, trtllm) that interval is then widened by how far ``serve``
has landed from published serving benchmarks, per group of metrics (``residual``): the
JSON keeps both, ``interval`` (the whole) and ``interval_kernel_model``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..errors import UserError
from ..models.deploy import Deployment
from . import context
from .defaults import (ENGINES, MEMORY_FRACTION_KEYS, SGLANG_CUDA_GRAPH_SOURCE, SGLANG_EAGER_SOURCE, cascade_rule,
                       check_engine_flags, default_overlap, eager_pass_host_s, engine_kv_budget, engine_limits,
                       prefix_caching_of, sglang_cuda_graph_max_bs)
from .engine import EngineParams, engine_class, simulate
from .metrics import PERCENTILES, Served, summary
from .residual import APPLIES_TO, log_sigma, met_probability, shipped, widen
from .steps import StepTimes
from .traffic import Requests, with_warmups


MAX_PERCENTILES = 10  # percentiles a run reports besides the median
INTERVAL_LEVEL = 0.9
# the profile's cross-validated ops whose error stands for each family's (the largest)
FAMILY_OPS = {"gemm": ("gemm", "block_gemm"), "attention": ("attention",), "moe": ("moe", "fused_moe"),
              "memory": ("copy", "rmsnorm", "add_rmsnorm"),
              "collective": ("allreduce", "allgather", "reducescatter", "alltoall")}


def family_sigmas(profile) -> dict:
    """Per kernel family: sigma of the log of true over predicted time, from the profile's
    cross-validated errors (empty for a profile with none: the ideal roofline); an op its fit
    did not validate takes its base profile's error (``calibrate --base``), where it has one."""
    validation = getattr(profile, "validation", None) or {}
    own, base = (validation.get(k, {}) for k in ("cross_validated", "base_cross_validated"))
    out = {}
    for family, ops in FAMILY_OPS.items():
        found = [s for s in (own[o] if own.get(o, {}).get("n") else base.get(o, {}) for o in ops) if s.get("n")]
        if found:
            out[family] = max(log_sigma(math.log1p(s["median_ape"]), math.log1p(s["p90_ape"])) for s in found)
    return out


@dataclass(frozen=True)
class ServeResult:
    metrics: dict
    served: Served
    engine: EngineParams
    kv_tokens: int
    replicas: int
    interval: dict | None = None  # metric -> [low, high]: the kernel draws', widened by serving's residual
    sigmas: dict | None = None  # the per-family spreads drawn from
    samples: int = 0
    draws: list | None = None  # each draw's metrics
    interval_kernel: dict | None = None  # metric -> [low, high] over the draws of the kernels' error alone
    serving_sigmas: dict | None = None  # per metric group: the published benchmarks' spread (none: not widened)
    disaggregated: dict | None = None  # prefill/decode pools: what the pair did (disaggregated.run's stats)
    given: tuple = ()  # the overheads the caller set ("step", "request"): their source is the caller
    eager_prefill_host_s: float = 0.0  # sglang --eager-prefill: the host's time for a prefill pass (0: captured)

    def as_dict(self) -> dict:
        e = self.engine
        extra = {} if not self.samples else {
            "interval": self.interval, "interval_level": INTERVAL_LEVEL, "interval_samples": self.samples,
            "interval_family_sigma": self.sigmas, "interval_kernel_model": self.interval_kernel,
            "interval_serving_sigma": self.serving_sigmas or {},
            "interval_serving_source": shipped()["source"] if self.serving_sigmas else None}
        return {**self.metrics, **extra, "engine": e.name, "max_num_batched_tokens": e.max_num_batched_tokens,
                "max_num_seqs": e.max_num_seqs, "block_size": e.block_size, "kv_cache_tokens": self.kv_tokens,
                **({MEMORY_FRACTION_KEYS.get(e.name, "gpu_memory_utilization"): e.memory_fraction[0],
                    "kv_cache_source": e.memory_fraction[1]} if e.memory_fraction else {}),
                "max_model_len": e.max_model_len,
                "step_overhead_s": e.step_overhead_s,
                "step_overhead_source": ("given (--step-overhead)" if "step" in self.given
                                         else ENGINES[e.name].host(e.overlap)[1]),
                "request_overhead_s": e.request_overhead_s,
                "request_overhead_source": ("given (--request-overhead)" if "request" in self.given
                                            else ENGINES[e.name].request_overhead_source),
                "overlap_schedule": e.overlap, "prefix_caching": e.prefix_caching,
                **({"cascade_attention": e.cascade is not None} if e.name == "vllm" else {}),
                **({"cuda_graph_max_bs": e.eager_decode_above, "eager_decode_host_s": e.decode_host_s,
                    "eager_decode_steps": int(self.served.eager_decode_steps),
                    "cuda_graph_max_bs_source": ("given (--cuda-graph-max-bs)" if "graph" in self.given
                                                 else SGLANG_CUDA_GRAPH_SOURCE)} if e.name == "sglang" else {}),
                **({"eager_prefill": True, "eager_prefill_host_s": self.eager_prefill_host_s,
                    "eager_prefill_host_source": SGLANG_EAGER_SOURCE} if self.eager_prefill_host_s else {}),
                **({"capacity_policy": e.capacity_policy, "chunked_context": e.chunked_context}
                   if e.name == "trtllm" else {}),
                "replicas": self.replicas,
                **({} if self.disaggregated is None else {"disaggregated": self.disaggregated})}


def serve(model, spec, profile, d: Deployment, reqs: Requests, *, engine: str = "vllm",
          max_num_batched_tokens: int | None = None, max_num_seqs: int | None = None, block_size: int | None = None,
          gpu_memory_utilization: float | None = None, kv_tokens: int | None = None, step_overhead_s: float | None = None,
          concurrency: int | None = None, slo_ms: dict | None = None, interval_samples: int = 0,
          seed: int = 0, progress=None, pd: tuple | None = None, decode_tp: int | None = None,
          decode_gpu: tuple | None = None, kv_link=None, overlap_schedule: bool | None = None,
          capacity_policy: str | None = None, chunked_context: bool | None = None,
          request_overhead_s: float | None = None, eager_prefill: bool = False,
          max_model_len: int | str | None = None, prefix_caching: bool | None = None,
          disable_cascade_attn: bool = False, cuda_graph_max_bs: int | None = None,
          warmup: int = 0, percentiles=PERCENTILES) -> ServeResult:
    """Simulate ``engine`` serving ``reqs`` on ``d``, and with ``interval_samples`` the
    intervals the kernel model's error gives (see the module's notes; ``seed`` draws them).
    ``gpu_memory_utilization``: the engine's own share of each card, which sets its KV cache
    where ``kv_tokens`` does not (``engine_kv_tokens``): vLLM's gpu_memory_utilization,
    SGLang's mem_fraction_static, TensorRT-LLM's free_gpu_memory_fraction (None: each one's
    default, SGLang's by its rule for the GPU).
    ``pd``: (prefill replicas, decode replicas) of a disaggregated pair (``disaggregated``),
    the decode replicas at ``decode_tp`` (default: d's) on ``decode_gpu`` ((spec, profile);
    default: the prefill replicas' GPU), the KV moved over ``kv_link`` (default, and where
    it names no bandwidth: the engine's connector as measured in use). ``overlap_schedule``:
    whether the scheduler forms the next batch while the GPU runs this one (sglang and
    trtllm; None: the engine's default, ``ENGINES``). ``capacity_policy`` ("guaranteed_no_evict"
    or "max_utilization") and ``chunked_context``: TensorRT-LLM's scheduler settings (None:
    its defaults, guaranteed_no_evict without chunks). ``request_overhead_s``: each request's
    time from the client's send to the engine's queue (HTTP, chat template, tokenization, the
    hop to the engine process; with ``pd``, to the prefill pool's), in every client-side
    latency and in when a closed loop's next request reaches the engine (None: the engine's
    measured front end, ``ENGINES``). ``eager_prefill`` (sglang): prefill batches run without
    CUDA graphs, as SGLang ran them until 2026, each paced by the slower of its GPU time and
    the host's (``eager_prefill_host_s``). ``max_model_len``: the longest request the engine
    accepts (None: the model's context, ``context.max_model_len``; "auto": for vLLM, the
    longest its KV cache holds, up to that); a request past it is refused in one sentence,
    as vLLM's start where its KV cache cannot hold one that long. ``prefix_caching``: whether
    a prompt's shared prefix (``Requests.prefix_id``), once computed, is reused (None: the
    engine's default: on for vllm and sglang). ``disable_cascade_attn``: vLLM's flag, its
    cascade attention over a prefix every running request shares off (``cascade_rule``).
    ``cuda_graph_max_bs`` (sglang): the largest decode batch run from a CUDA graph, a larger
    one paced by the slower of its GPU time and the host's for a pass without a graph
    (None: SGLang's default for the GPU and TP, ``sglang_cuda_graph_max_bs``; 0: none
    captured, as --disable-cuda-graph runs decode). ``warmup``: the first this many requests
    (in ``reqs``' order) run on the engine before and among the others but are not measured:
    the metrics are the rest's, as a benchmark's later stage on a server an earlier stage
    warmed (its prefix cache) is measured (``metrics.summary``). ``percentiles``: besides the
    median, those each latency is reported at (p90 and p99 by default; ``metrics.summary``)."""
    percentiles = tuple(float(x) for x in percentiles)
    if not percentiles or len(percentiles) > MAX_PERCENTILES or not all(0 < x <= 100 for x in percentiles):
        raise UserError(f"percentiles must be 1 to {MAX_PERCENTILES} numbers above 0 and at most 100; "
                        f"got {', '.join(f'{x:g}' for x in percentiles) or 'none'}")
    if engine not in ENGINES:
        raise UserError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    prefix_caching = prefix_caching_of(engine, prefix_caching)
    auto = max_model_len == "auto"
    limit = context.max_model_len(model, None if auto else max_model_len) if engine in context.SERVED else None
    context.check_requests(reqs.input_tokens, reqs.output_tokens, limit, engine)
    # (vLLM's limit cut to what its KV cache holds: asked for, or a cache read from a log whose
    # server started at the model's default)
    fit_limit = auto or (kv_tokens is not None and max_model_len is None)
    given = tuple(k for k, v in (("step", step_overhead_s), ("request", request_overhead_s),
                                 ("graph", cuda_graph_max_bs)) if v is not None)
    if request_overhead_s is None:
        request_overhead_s = ENGINES[engine].request_overhead_s
    if (capacity_policy is not None or chunked_context is not None) and engine != "trtllm":
        raise UserError("--capacity-policy and --chunked-context set TensorRT-LLM's scheduler (--engine trtllm); "
                        f"{engine}'s is {'chunked always' if engine == 'vllm' else 'its own'}")
    check_engine_flags(engine, eager_prefill=eager_prefill, disable_cascade_attn=disable_cascade_attn,
                       cuda_graph_max_bs=cuda_graph_max_bs)
    if capacity_policy not in (None, "guaranteed_no_evict", "max_utilization"):
        raise UserError(f"unknown capacity policy '{capacity_policy}'; known: guaranteed_no_evict, max_utilization")
    warmup = int(warmup)
    if not 0 <= warmup < len(reqs):
        raise UserError(f"warm-up requests must be at least 0 and fewer than the {len(reqs):,} requests; "
                        f"got {warmup:,}")
    if pd is not None:
        if warmup:
            raise UserError("warm-up requests are simulated for colocated replicas, not with --pd")
        return replace(_serve_pd(model, spec, profile, d, reqs, pd, decode_tp, decode_gpu, kv_link, engine=engine,
                         max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                         block_size=block_size, gpu_memory_utilization=gpu_memory_utilization, kv_tokens=kv_tokens,
                         step_overhead_s=step_overhead_s, overlap_schedule=overlap_schedule,
                         concurrency=concurrency, slo_ms=slo_ms,
                         interval_samples=interval_samples, seed=seed, progress=progress,
                         request_overhead_s=request_overhead_s, eager_prefill=eager_prefill,
                         max_model_len=limit, fit_max_model_len=fit_limit, prefix_caching=prefix_caching,
                         disable_cascade_attn=disable_cascade_attn, cuda_graph_max_bs=cuda_graph_max_bs,
                         percentiles=percentiles),
                       given=given,
                       eager_prefill_host_s=eager_pass_host_s(model, d) if eager_prefill else 0.0)
    if decode_tp is not None or decode_gpu is not None or kv_link is not None:
        raise UserError("--decode-tp, --decode-gpu and the KV link go with --pd (prefill/decode disaggregation)")
    if engine == "hf" and d.kernels != "hf":  # (transformers' kernels, its cache by --eager)
        d = replace(d, kernels="hf", hf_cache=None)
    elif engine != "hf" and d.kernels == "hf":
        raise UserError("transformers' kernels serve static batches: use --engine hf")
    longest = int((reqs.input_tokens + reqs.output_tokens).max())
    p, kv_tokens, steps = _replica(model, spec, profile, d, engine, longest,
                                   max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                   block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
                                   kv_tokens=kv_tokens, step_overhead_s=step_overhead_s,
                                   overlap_schedule=overlap_schedule, capacity_policy=capacity_policy,
                                   chunked_context=chunked_context, request_overhead_s=request_overhead_s,
                                   eager_prefill=eager_prefill, max_model_len=limit,
                                   fit_max_model_len=fit_limit, prefix_caching=prefix_caching,
                                   disable_cascade_attn=disable_cascade_attn, cuda_graph_max_bs=cuda_graph_max_bs)
    if engine == "sglang":
        context.check_sglang_pool(reqs.input_tokens, reqs.output_tokens, kv_tokens)

    def once(scale):
        return _replicas(engine, reqs, steps if scale is None else steps.scaled(scale), p, d.dp, concurrency,
                         progress, warmup)

    return _with_intervals(once, ServeResult(None, None, p, kv_tokens, d.dp, given=given,
                                             eager_prefill_host_s=p.prefill_host_s), [profile], engine, slo_ms,
                           interval_samples, seed, percentiles)


def warmups_done_s(model, spec, profile, d: Deployment, reqs: Requests, count: int, **options) -> float:
    """When ``count`` warm-up copies of the first of ``reqs``, sent as vLLM bench serve's
    ``--num-warmups`` sends them (``traffic.with_warmups``) and simulated alone with
    ``options`` as ``serve`` takes them, have finished: the start of the measured requests.
    Serve ``with_warmups(reqs, count, that)`` with ``warmup=count``. (It depends on the first
    request alone; an interval's draws reuse it: a slower draw's copies may still be
    finishing as the measured requests begin.)"""
    if options.get("pd") is not None:
        raise UserError("warm-up requests are simulated for colocated replicas, not with --pd")
    copies = with_warmups(reqs, count, 0.0).take(slice(0, count))
    alone = {**options, "interval_samples": 0, "slo_ms": None, "warmup": 0, "progress": None}
    return float(serve(model, spec, profile, d, copies, **alone).served.finish_s.max())


def _replica(model, spec, profile, d: Deployment, engine: str, max_context: int, *, max_num_batched_tokens,
             max_num_seqs, block_size, gpu_memory_utilization, kv_tokens, step_overhead_s,
             overlap_schedule=None, capacity_policy=None, chunked_context=None, request_overhead_s=0.0,
             eager_prefill=False, max_model_len=None, fit_max_model_len=False, prefix_caching=False,
             disable_cascade_attn=False, cuda_graph_max_bs=None) -> tuple:
    """One replica of ``d`` under ``engine``: its scheduler's limits (the engine's defaults
    for the GPU where not given), its KV cache (``engine_kv_tokens``, where not given: vLLM's
    and TensorRT-LLM's budgets at their limits, SGLang's by its rule at its prefill chunk, its
    decode graphs and, unless ``eager_prefill``, its piecewise prefill graphs), and
    its step tables up to
    ``max_context``; vLLM's checks at start (a step's token budget holds a token of each
    running request; the KV cache holds one request of ``max_model_len``), which with
    ``fit_max_model_len`` is first cut to the longest the cache holds (vLLM's --max-model-len
    auto; and a cache read from a server's log is one that started); SGLang's largest
    decode batch from a CUDA graph (``cuda_graph_max_bs``, else its default)."""
    base = engine_limits(engine, model, spec)
    block_size = int(block_size or base["block_size"])
    mnbt = int(max_num_batched_tokens or base["max_num_batched_tokens"])
    if kv_tokens is None:
        if engine in ("trtllm", "vllm"):  # (its forward pass, or vLLM's profiling pass, at its own limits)
            limits = (mnbt, int(max_num_seqs or base["max_num_seqs"]))
        elif engine == "sglang":  # (its prefill chunk feeds its rule)
            limits = (mnbt, 0)
        else:  # (vLLM's profiling pass at vLLM's limits)
            v = engine_limits("vllm", model, spec)
            limits = (v["max_num_batched_tokens"], v["max_num_seqs"])
        kv_tokens, *fraction = engine_kv_budget(engine, model, spec, d, block_size=block_size,
                                                gpu_memory_utilization=gpu_memory_utilization,
                                                max_num_batched_tokens=limits[0], max_num_seqs=limits[1],
                                                cuda_graph_max_bs=cuda_graph_max_bs,
                                                piecewise_cuda_graph=not eager_prefill)
    else:
        fraction = (None, "given (--kv-cache-tokens)")
    if kv_tokens < block_size and fraction[-1] == "given (--kv-cache-tokens)":
        raise UserError(f"--kv-cache-tokens {kv_tokens:,} is less than one KV block of {block_size:,} tokens")
    if kv_tokens < block_size:
        raise UserError(f"{model.name} leaves no room for a KV cache on {d.gpus // d.dp} x {spec.name} "
                        f"(see rooflinesim fit)")
    seqs = int(max_num_seqs or engine_limits(engine, model, spec, kv_tokens, max_model_len)["max_num_seqs"])
    if engine == "vllm":  # (vllm/config/scheduler.py, SchedulerConfig's checks; kv_cache_utils.py)
        if mnbt < seqs:
            raise UserError(f"max_num_batched_tokens ({mnbt:,}) must be at least max_num_seqs ({seqs:,}): "
                            f"vLLM refuses to start otherwise")
        if fit_max_model_len and max_model_len is not None:
            max_model_len = min(max_model_len, context.largest_fitting(model, kv_tokens, mnbt, block_size))
        context.check_vllm_start(model, kv_tokens, max_model_len, mnbt, block_size)
    if engine == "vllm" and d.pp > 1 and overlap_schedule:
        raise UserError("vLLM's async scheduling (--overlap-schedule) with pipeline stages is not modelled; "
                        "vLLM 0.14 turned it on by default for every deployment but those")
    overlap = default_overlap(engine, d.pp) if overlap_schedule is None else bool(overlap_schedule)
    if overlap and engine not in ("vllm", "sglang", "trtllm"):
        raise UserError(f"the overlap scheduler is modelled for --engine vllm (async scheduling), sglang and "
                        f"trtllm; {engine} has none")
    if step_overhead_s is None:  # (the engine's; without the overlap it ships, the host's time in series)
        step_overhead_s = ENGINES[engine].host(overlap)[0]
    graphs = None
    if engine == "sglang":
        graphs = sglang_cuda_graph_max_bs(spec, d.tp) if cuda_graph_max_bs is None else int(cuda_graph_max_bs)
    host = eager_pass_host_s(model, d) if (eager_prefill or graphs is not None) else 0.0
    p = EngineParams(engine, mnbt, seqs, block_size, kv_tokens // block_size, float(step_overhead_s),
                     base["max_prefill_tokens"], stages=d.pp, overlap=overlap,
                     capacity_policy=capacity_policy or "guaranteed_no_evict", chunked_context=bool(chunked_context),
                     request_overhead_s=float(request_overhead_s),
                     prefill_host_s=host if eager_prefill else 0.0,
                     eager_decode_above=graphs, decode_host_s=host if graphs is not None else 0.0,
                     max_model_len=max_model_len, prefix_caching=bool(prefix_caching),
                     cascade=cascade_rule(engine, model, spec, d, disable_cascade_attn) if prefix_caching else None,
                     memory_fraction=tuple(fraction))
    engine_class(engine, d.pp)  # (an engine with no pipeline model says so before the tables are priced)
    steps = step_times(model, spec, profile, d, max_tokens=max(mnbt, seqs), max_seqs=seqs,
                       max_context=max(max_context, 2))
    return p, kv_tokens, steps


def _with_intervals(once, result: ServeResult, profiles: list, engine: str, slo_ms, interval_samples: int,
                    seed: int, percentiles=PERCENTILES) -> ServeResult:
    """``result`` with the run ``once(None)`` and its metrics, and with
    ``interval_samples`` the intervals of runs ``once(factors)`` with the kernel model's
    error drawn per family (see the module's notes; with several GPUs' ``profiles``, each
    family's largest spread)."""
    served = once(None)
    metrics = summary(served, slo_ms, percentiles)
    if result.disaggregated is not None:
        metrics = {**metrics, "steps": metrics["steps"] + result.disaggregated["prefill_steps"]}
    sigmas = {}
    for prof in profiles:
        for f, x in family_sigmas(prof).items():
            sigmas[f] = max(sigmas.get(f, 0.0), x)
    if not interval_samples or not sigmas:
        return replace(result, metrics=metrics, served=served)
    rng = np.random.default_rng([int(seed), 20261201])
    draws = []
    for _ in range(int(interval_samples)):
        factors = {f: float(np.exp(rng.normal(0.0, s))) for f, s in sorted(sigmas.items())}
        draws.append(summary(once(factors), slo_ms, percentiles))
    lo, hi = 50 * (1 - INTERVAL_LEVEL), 50 * (1 + INTERVAL_LEVEL)
    kernel = {k: [float(np.percentile(v, lo)), float(np.percentile(v, hi))]
              for k in metrics if isinstance(metrics[k], float) and k not in ("duration_s",)
              for v in [[m[k] for m in draws]]}
    serving = serving_sigmas(engine)
    return replace(result, metrics=metrics, served=served, interval=widen(metrics, kernel, serving), sigmas=sigmas,
                   samples=int(interval_samples), draws=draws, interval_kernel=kernel, serving_sigmas=serving)


def _serve_pd(model, spec, profile, d: Deployment, reqs: Requests, pd: tuple, decode_tp, decode_gpu, kv_link, *,
              engine: str, max_num_batched_tokens, max_num_seqs, block_size, gpu_memory_utilization, kv_tokens,
              step_overhead_s, overlap_schedule, concurrency, slo_ms, interval_samples, seed,
              progress, request_overhead_s=0.0, eager_prefill=False, max_model_len=None,
              fit_max_model_len=False, prefix_caching=False, disable_cascade_attn=False,
              cuda_graph_max_bs=None, percentiles=PERCENTILES) -> ServeResult:
    """``serve`` on a prefill pool and a decode pool (``disaggregated``): each pool's replicas
    of ``d`` (the decode pool's at ``decode_tp``, on ``decode_gpu``), their KV caches from
    the memory planner at vLLM's limits on their GPU, their limits as one replica's."""
    from ..models.deploy import kv_bytes_per_token_per_gpu
    from . import disaggregated

    if engine not in ("vllm", "sglang"):
        raise UserError(f"prefill/decode disaggregation is simulated for --engine vllm (its NixlConnector) and "
                        f"sglang; {engine}'s is not modelled yet")
    if d.pp > 1 or d.dp > 1:
        raise UserError("with --pd the replicas are the prefill and decode pools' (leave --dp at 1); "
                        "pipeline stages (--pp) are not simulated in a disaggregated pair yet")
    if concurrency is not None:
        raise UserError("--concurrency (a closed loop) with --pd is not simulated yet: the two pools are "
                        "simulated one after the other")
    prefill_n, decode_n = (int(x) for x in pd)
    if prefill_n < 1 or decode_n < 1:
        raise UserError(f"--pd needs at least one prefill and one decode replica (got {prefill_n}:{decode_n})")
    link, link_source = (kv_link or disaggregated.Link()).for_engine(engine)
    longest = int((reqs.input_tokens + reqs.output_tokens).max())
    d_spec, d_profile = decode_gpu or (spec, profile)
    pools = []
    for count, dep, reach, spec, profile, front, eager in (
            (prefill_n, d, int(reqs.input_tokens.max()) + 1, spec, profile, request_overhead_s, eager_prefill),
            (decode_n, d if decode_tp is None else replace(d, tp=int(decode_tp)), longest, d_spec, d_profile, 0.0,
             False)):
        p, kv, steps = _replica(model, spec, profile, dep, engine, reach,
                                max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                                block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
                                kv_tokens=kv_tokens, step_overhead_s=step_overhead_s,
                                overlap_schedule=overlap_schedule, request_overhead_s=front, eager_prefill=eager,
                                max_model_len=max_model_len, fit_max_model_len=fit_max_model_len,
                                prefix_caching=prefix_caching, disable_cascade_attn=disable_cascade_attn,
                                cuda_graph_max_bs=cuda_graph_max_bs)
        if engine == "sglang":
            context.check_sglang_pool(reqs.input_tokens, reqs.output_tokens, kv)
        pools.append(disaggregated.Pool(count, p, kv, steps, kv_bytes_per_token_per_gpu(model, dep), dep.gpus,
                                        spec.name, profile))
    prefill, decode = pools
    stats = {}

    def once(scale):
        served, found = disaggregated.run(reqs, prefill, decode, link, progress, scale, engine)
        if scale is None:
            stats.update(found, kv_link_source=link_source)
        return served

    result = ServeResult(None, None, replace(decode.engine, request_overhead_s=float(request_overhead_s)),
                         decode.kv_tokens, prefill_n + decode_n, disaggregated=stats)
    return _with_intervals(once, result, [prefill.profile, decode.profile], engine, slo_ms, interval_samples, seed,
                           percentiles)


def serving_sigmas(engine: str) -> dict:
    """Per metric group, the spread of the published serving benchmarks about ``serve``'s
    answers (``residual``), for an engine they stand for (none for static and hf)."""
    return dict(shipped()["sigmas"]) if engine in APPLIES_TO else {}


def _replicas(engine, reqs, steps, p, dp: int, concurrency, progress=None, warmup: int = 0) -> Served:
    """``reqs`` dealt round robin over ``dp`` replicas (each its share of a closed loop's
    slots and of the ``warmup`` requests), the replicas' requests back in ``reqs``' order."""
    k = min(dp, len(reqs))
    parts = [simulate(engine, _every(reqs, i, dp), steps, p, None if concurrency is None else
                      max(1, _share(concurrency, dp, i)), progress, warmup=len(range(i, warmup, dp)))
             for i in range(k)]
    return parts[0] if k == 1 else _merge(parts, np.concatenate([np.arange(i, len(reqs), dp) for i in range(k)]),
                                          warmup)


_STEP_TABLES: dict = {}
KEPT_TABLES = 64  # (a plan's worker prices every replica type it meets: about 2 MB each)


def step_times(model, spec, profile, d: Deployment, *, max_tokens: int, max_seqs: int, max_context: int) -> StepTimes:
    """The step tables of a deployment, kept for the next run of the same deployment (a rate
    or limits search runs dozens): by the identity of the model and spec (frozen), the
    values of the profile's parameters (``Profile.key``), and the deployment. Tables kept
    for larger limits serve smaller ones: their grids start alike (``steps._grid``), so
    they answer as tables made for the smaller limits do, and the answer never depends
    on what ran before."""
    key = (id(model), id(spec), profile.key() if hasattr(profile, "key") else (id(profile),),
           replace(d, dp=1))  # (the replicas price their steps alike)
    for (k, limits), (_, steps) in _STEP_TABLES.items():
        if k == key and all(a >= b for a, b in zip(limits, (max_tokens, max_seqs, max_context))):
            return steps
    if len(_STEP_TABLES) >= KEPT_TABLES:
        _STEP_TABLES.pop(next(iter(_STEP_TABLES)))
    steps = StepTimes(model, spec, profile, d, max_tokens=max_tokens, max_seqs=max_seqs, max_context=max_context)
    _STEP_TABLES[(key, (max_tokens, max_seqs, max_context))] = ((model, spec, profile), steps)
    return steps


def _share(total: int, k: int, i: int) -> int:
    """Replica ``i``'s share of ``total`` split as evenly as whole numbers go over ``k``."""
    return total // k + (1 if i < total % k else 0)


def _every(reqs: Requests, i: int, k: int) -> Requests:
    return reqs.take(slice(i, None, k))


def _merge(parts: list, index: np.ndarray, warmup: int) -> Served:
    """The replicas' runs as one, each request at its place (``index``: the requests'
    places, in the parts' order)."""
    order = np.empty_like(index)
    order[index] = np.arange(index.size)

    def cat(name: str) -> np.ndarray:
        x = np.concatenate([getattr(p, name) for p in parts])
        return x if name == "itl_s" else x[order]

    steps = {k: np.concatenate([p.steps[k] for p in parts]) for k in parts[0].steps}
    return Served(cat("arrival_s"), cat("input_tokens"), cat("output_tokens"), cat("scheduled_s"),
                  cat("first_token_s"), cat("finish_s"), cat("itl_s"), sum(p.preemptions for p in parts), steps,
                  sum(p.prefix_cache_queries for p in parts), sum(p.prefix_cache_hits for p in parts),
                  sum(p.eager_decode_steps for p in parts), warmup=warmup)


def slo_report(metrics: dict, slos: dict, draws: list | None = None, serving: dict | None = None) -> dict:
    """Each SLO (metric key -> limit, e.g. p99_ttft_ms: 2000) against the run's value, and
    with interval draws the share of them that meet it and the probability that it holds
    (the draws with the serving residual's spread, ``serving``: group -> sigma)."""
    out = {}
    for key, limit in slos.items():
        row = {"limit": limit, "value": metrics[key], "met": metrics[key] <= limit}
        if draws:
            row["met_share_of_draws"] = float(np.mean([d[key] <= limit for d in draws]))
            row["met_probability"] = met_probability(draws, {key: limit}, serving or {})
        out[key] = row
    return out


def max_rate(model, spec, profile, d: Deployment, make_requests, slos: dict, *, iterations: int = 10,
             **options) -> tuple[float, ServeResult, list]:
    """The highest request rate whose run meets every SLO of ``slos`` (metric key ->
    limit), by bisection between 0 and the saturated request throughput (a run with every
    request at t = 0); ``make_requests(rate)`` gives the workload at a rate. Returns the
    rate, its run, and every (rate, met) tried."""
    if not slos:
        raise UserError("--max-rate needs an SLO to meet (--slo-ttft-p99, --slo-tpot-p99 or --slo-e2el-p99)")
    tried = []

    def run(rate: float):
        r = serve(model, spec, profile, d, make_requests(rate), **options)
        met = all(r.metrics[k] <= v for k, v in slos.items())
        tried.append((rate, met))
        return r, met

    top, ok = run(math.inf)
    if ok:
        return math.inf, top, tried
    lo, hi, best = 0.0, float(top.metrics["request_throughput"]), None
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        r, met = run(mid)
        if met:
            lo, best = mid, r
        else:
            hi = mid
    if best is None:
        raise UserError(f"no rate meets the SLOs: even {lo + (hi - lo) / 2:.3g} requests/s misses them "
                        f"(at the lowest rates each request still takes its own prefill and decode time)")
    return lo, best, tried
