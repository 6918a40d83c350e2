"""`plan`: the cheapest deployment that serves a workload at a target rate under P99 SLOs.

The search space: replica types (GPU x tensor and expert parallelism x weight and KV
dtypes) x the engine's limits (``max_num_batched_tokens`` x ``max_num_seqs``) x replicas
(data parallelism, up to ``max_gpus``). A configuration is settled, cheapest first, by:
  1. memory: the memory planner's KV cache at those limits (``rooflinesim fit --engine
     vllm``) must hold the workload's longest request (and, given ``max_model_len``, one
     request that long, for vLLM to start); else "does not fit". Not given, a vLLM
     configuration takes the longest ``max_model_len`` its KV cache holds, up to the
     model's context, and reports it (a launch flag where it is the shorter);
  2. bounds from the replica type's step tables (``StepTimes``), without a simulation:
     * each request alone: its prefill takes at least one step per budget's worth of its
       prompt and at least its tokens at the best tokens-per-second of any step; each of
       its later tokens at least the shortest step. The P99 of those lower bounds is a
       lower bound on the P99 of the run; past an SLO, every replica count fails it;
     * the ceiling: a replica computes every prompt token and every later output token
       in some step, at most the best tokens-per-second of any step of the budget; it
       runs at most as many decodes a step as its ``max_num_seqs``, budget and KV cache
       allow, each step at least the shortest; and a request holds at least its prompt
       and the tokens so far in the KV cache through each of its decode steps, while the
       cache holds its size at a time. Its request throughput is at most the workload's
       requests over the largest of those three times; at a rate per replica at or above
       it the queue grows without bound, so fewer replicas are not simulated;
  3. a simulated run (``serve``, the engine's scheduler at those limits, the replicas
     each taking every dp-th request) at the target rate: it meets every SLO or names the
     one it misses. Configurations are simulated cheapest first (among equals, the fewest
     GPUs, and a type at a replica count with the engine's default limits first: its other
     limits run only where those miss), in waves of ``WAVE`` (the same waves with any
     number of workers, so the answer does not depend on them), until ``KEEP`` replica types
     meet the SLOs and no configuration left is as cheap as the ``KEEP``-th of them: every
     cheaper configuration is then settled, and the rest are "not needed" (as are a type's
     configurations costlier than one of its own that meets the SLOs);
  4. for each of the ``KEEP`` cheapest replica types, its other limits at the replica count
     of its cheapest configuration (the same cost) are simulated too, and among equal costs
     the configuration with the most room under the SLOs is reported; each is then
     simulated again with the kernel model's error drawn (``serve``'s intervals): its
     intervals and the probability that the SLOs hold.
With ``pd``, each replica count also comes split into a disaggregated pair (``serve --pd``:
P prefill and the rest decode replicas of the type): its bounds are the prefill pool's
ceiling (every prompt token at the best tokens-per-second) and the decode pool's (the
decodes' and the KV cache's of the ceiling above), each setting its pool's fewest
replicas; a split is tried after the colocated configuration of its type and count, as
another of the group's limits.
Cost: GPUs x the price per GPU-hour (``rooflinesim/data/gpu_prices.yaml``, each figure with
its source and date, or ``--prices``), and per million output tokens at the simulated
output throughput. The work runs in a process pool (one worker per core), or on a Ray
cluster (``ray_address``; ``pip install "rooflinesim[ray]"``).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..errors import UserError
from .bounds import bound
from .engine import engine_class
from .workers import Workers

TPS = (1, 2, 4, 8)
KEEP = 6  # replica types that meet the SLOs found before the search stops: the best and five runners-up
WAVE = 8  # configurations simulated at once (in cost order)
SEQS_OPTIONS = (256, 64)  # max_num_seqs tried beside the engine's default
TOKENS_OPTIONS = (2048, 16384)  # max_num_batched_tokens tried beside the engine's default


@dataclass(frozen=True)
class Candidate:
    """A replica type."""

    gpu: str
    tp: int
    weights: str
    kv_dtype: str
    ep: int = 1  # expert parallelism (MoE models: the experts split over the TP ranks)
    pp: int = 1  # pipeline stages (each of tp GPUs: a node's worth, the stages across nodes)

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class Config:
    """One configuration of the search: a replica type, the engine's limits, replicas."""

    candidate: Candidate
    max_num_batched_tokens: int
    max_num_seqs: int
    kv_cache_tokens: int
    replicas: int
    cost_per_hour: float
    prefill: int = 0  # prefill replicas of a disaggregated pair (the others decode); 0: colocated

    @property
    def label(self) -> str:
        return f"{self.replicas} replica(s)" if not self.prefill else \
            f"{self.prefill} prefill + {self.replicas - self.prefill} decode replicas"


def load_prices(path=None) -> dict:
    """GPU -> its default price entry (usd_per_gpu_hour, provider, product, date, source)."""
    import yaml

    from ..files import load_yaml, read_text

    if path is None:
        from importlib.resources import files

        data = yaml.safe_load((files("rooflinesim.data") / "gpu_prices.yaml").read_text())
    else:
        data = load_yaml(read_text(path, "prices"), str(path))
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, dict) or not gpus:
        raise UserError(f"{path or 'gpu_prices.yaml'}: expected a 'gpus' mapping of GPU -> prices")
    out = {}
    for gpu, entry in gpus.items():
        d = entry.get("default") if isinstance(entry, dict) else None
        price = d.get("usd_per_gpu_hour") if isinstance(d, dict) else None
        if isinstance(price, bool) or not isinstance(price, (int, float)) or not (math.isfinite(price) and price > 0):
            raise UserError(f"{path or 'gpu_prices.yaml'}: {gpu}: default.usd_per_gpu_hour must be a price above 0")
        out[str(gpu)] = dict(d)
    return out


def _setup(c: Candidate, job: dict):
    from ..calibration.profile import resolve_profile
    from ..hardware import load_spec
    from ..models.config import load_config
    from ..models.deploy import Deployment

    spec = load_spec(c.gpu)
    return load_config(job["model"]), spec, resolve_profile(spec, None), Deployment(
        tp=c.tp, ep=c.ep, pp=c.pp, weights=c.weights, kv_cache=c.kv_dtype, allreduce=job.get("allreduce", "engine"),
        own_mla_decode=job.get("own_mla_decode", True))


def _limits(engine: str, model, spec, kv_default: int, job: dict) -> tuple[list, tuple]:
    """The (max_num_batched_tokens, max_num_seqs) pairs searched (the job's lists, else the
    engine's defaults for the GPU and the options beside them), and the engine's defaults."""
    from .defaults import engine_limits

    base = engine_limits(engine, model, spec, kv_default, job.get("max_model_len"))
    tokens = job.get("max_num_batched_tokens") or sorted({base["max_num_batched_tokens"], *TOKENS_OPTIONS})
    seqs = job.get("max_num_seqs") or sorted({base["max_num_seqs"], *SEQS_OPTIONS}, reverse=True)
    return [(int(t), int(s)) for t in tokens for s in seqs], (base["max_num_batched_tokens"], base["max_num_seqs"])


def _bounds(args) -> dict:
    """A replica type through steps 1 and 2 (in a worker): per pair of limits, its KV cache
    and either the fewest replicas worth simulating or why none is."""
    c, job = args
    from .context import kv_needed
    from .simulate import step_times
    from .defaults import ENGINES, engine_kv_tokens, engine_limits, prefix_caching_of
    from .traffic import requests_at

    out = {"candidate": c, "limits": [], "error": None}
    try:
        model, spec, profile, d = _setup(c, job)
        out["profile"] = profile.kind
        reqs = requests_at(job["workload"], math.inf)
        prompt, output = reqs.input_tokens.astype(float), reqs.output_tokens.astype(float)
        # (with the engine's prefix cache, as its runs have it, the prompt tokens a request computes:
        # at least one, and all but its prefix)
        fresh = prompt if reqs.prefix_tokens is None or not prefix_caching_of(job["engine"], None) else \
            np.maximum(prompt - reqs.longest_prefix(), 1.0)
        longest = int((prompt + output).max())
        gmu, engine = job["gpu_memory_utilization"], job["engine"]
        base = engine_limits(engine, model, spec)
        block = base["block_size"]
        sglang = {"cuda_graph_max_bs": job.get("cuda_graph_max_bs"),
                  "piecewise_cuda_graph": not job.get("eager_prefill")} if engine == "sglang" else {}
        kv_default = engine_kv_tokens(engine, model, spec, d, block_size=block, gpu_memory_utilization=gmu,
                                      max_num_batched_tokens=base["max_num_batched_tokens"] if sglang else 8192,
                                      max_num_seqs=1024, **sglang)
        pairs, out["default"] = _limits(engine, model, spec, kv_default, job)
        fits = []
        limit = job.get("max_model_len")
        for tokens, seqs in pairs:
            kv = engine_kv_tokens(engine, model, spec, d, block_size=block, gpu_memory_utilization=gmu,
                                  max_num_batched_tokens=tokens, max_num_seqs=seqs, **sglang)
            need = kv_needed(model, limit, tokens, block) if limit and engine == "vllm" else 0
            if kv < longest:
                out["limits"].append({"tokens": tokens, "seqs": seqs, "kv": kv, "rejected": "does not fit",
                                      "reason": f"KV cache of {kv:,} tokens; the longest request needs {longest:,}"})
            elif kv < need:
                out["limits"].append({"tokens": tokens, "seqs": seqs, "kv": kv, "rejected": "does not fit",
                                      "reason": f"KV cache of {kv:,} tokens; vLLM needs {need:,} to start at "
                                                f"max_model_len {limit:,}"})
            else:
                fits.append((tokens, seqs, kv))
        if not fits:
            return out
        st = step_times(model, spec, profile, d, max_tokens=max(max(t, s) for t, s, _ in fits),
                        max_seqs=max(s for _, s, _ in fits), max_context=max(longest, 2))
        overhead = ENGINES[job["engine"]].step_overhead_s
        most = job["max_gpus"] // c.gpus
        for tokens, seqs, kv in fits:
            out["limits"].append({"tokens": tokens, "seqs": seqs, "kv": kv, **bound(
                st, prompt, output, tokens, seqs, kv, overhead, job["slos"], job["rate"], most,
                job.get("request_overhead_s", 0.0), fresh)})
    except UserError as e:
        out["error"] = str(e)
    return out


def _simulate(args) -> dict:
    """Step 3 (or, with samples, step 4) for one configuration (in a worker)."""
    cfg, job, samples = args
    from dataclasses import replace

    from .residual import met_probability
    from .simulate import serve
    from .traffic import requests_at

    model, spec, profile, d = _setup(cfg.candidate, job)
    slos = job["slos"]
    pair = dict(pd=(cfg.prefill, cfg.replicas - cfg.prefill)) if cfg.prefill else {}
    try:
        r = serve(model, spec, profile, d if cfg.prefill else replace(d, dp=cfg.replicas),
                  requests_at(job["workload"], job["rate"]), engine=job["engine"],
                  max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
                  kv_tokens=cfg.kv_cache_tokens, interval_samples=samples, seed=job["workload"]["seed"],
                  request_overhead_s=job.get("request_overhead_s", 0.0),
                  eager_prefill=job.get("eager_prefill", False), max_model_len=job.get("max_model_len"),
                  disable_cascade_attn=job.get("disable_cascade_attn", False),
                  cuda_graph_max_bs=job.get("cuda_graph_max_bs"), **pair)
    except UserError as e:
        return {"config": cfg, "rejected": "invalid", "reason": str(e)}
    missed = [k for k, v in slos.items() if r.metrics[k] > v]
    out = {"config": cfg, "max_model_len": r.engine.max_model_len, "metrics": {k: r.metrics[k] for k in (
        *slos, "request_throughput", "output_throughput", "median_ttft_ms", "median_tpot_ms")}}
    if missed:
        k = missed[0]
        return {**out, "rejected": k.replace("p99_", "").replace("_ms", "").upper(),
                "reason": f"{k} is {r.metrics[k]:.4g} ms (SLO {slos[k]:.4g}) with {cfg.label} at "
                          f"{job['rate']:g} req/s"}
    if samples:
        draws = r.draws or []
        out["interval"] = {k: (r.interval or {}).get(k) for k in slos}
        out["probability_meets_slo"] = (met_probability(draws, job.get("slos_given", slos), r.serving_sigmas or {})
                                        if draws else None)
    return out


def candidates(model, gpus: list, weights: list, kv_dtypes: list, max_gpus: int,
               pps: tuple = (1,)) -> tuple[list, list]:
    """(the replica types, and the combinations left out with why: a TP the model cannot
    split, a dtype the GPU lacks, more GPUs than a node or the limit holds). An MoE model's
    types at TP above 1 come with and without expert parallelism over the TP ranks; each
    TP comes at every pipeline depth of ``pps`` whose stages stay in one node (the send
    between stages is priced on the node's links: links between nodes are not modelled)."""
    from ..hardware import load_spec
    from ..models.deploy import Deployment, shard

    out, skipped = [], []
    for gpu in gpus:
        spec = load_spec(gpu)
        for w in weights:
            if w == "fp8" and not spec.supports("fp8"):
                skipped.append({"gpu": spec.name, "weights": w, "reason": f"{spec.name} has no fp8 matrix rate"})
                continue
            for kv in kv_dtypes:
                for tp, pp in ((t, q) for t in TPS for q in sorted(set(pps))):
                    if tp * pp > min(max_gpus, spec.interconnect.gpus_per_node):
                        continue
                    for ep in ((1, tp) if model.is_moe and tp > 1 else (1,)):
                        try:
                            shard(model, Deployment(tp=tp, ep=ep, pp=pp, weights=w, kv_cache=kv))
                        except UserError:
                            continue
                        out.append(Candidate(spec.name, tp, w, kv, ep, pp))
    return out, skipped


def calibrated(gpu: str) -> bool:
    """Whether predictions on ``gpu`` use a fitted profile (its own, or one lent by a measured
    GPU of its vendor), not the ideal roofline."""
    from ..calibration.profile import resolve_profile
    from ..hardware import load_spec

    return resolve_profile(load_spec(gpu), None).kind != "ideal"


def plan(model_name: str, *, rate: float, slos: dict, workload: dict, gpus: list, weights: list,
         kv_dtypes: list, max_gpus: int, prices: dict, engine: str = "vllm", samples: int = 10,
         max_num_batched_tokens: list | None = None, max_num_seqs: list | None = None, jobs: int | None = None,
         gpu_memory_utilization: float | None = None, uncalibrated: bool = False, ray_address: str | None = None,
         pp: list | None = None, min_probability: float | None = None, pd: bool = False, progress=None,
         on_start=None, request_overhead_s: float | None = None, eager_prefill: bool = False,
         max_model_len: int | None = None, disable_cascade_attn: bool = False,
         cuda_graph_max_bs: int | None = None, allreduce: str | None = None) -> dict:
    """The search of the module's notes: the cheapest configuration that meets the SLOs,
    the runners-up, the cost-latency Pareto front of those found, each replica type's
    verdict, and how many configurations each step settled. GPUs with no fitted profile
    (the ideal roofline: optimistic, with no interval) are left out unless
    ``uncalibrated``. ``progress(k)``: k more configurations settled (``on_start(n)``: n
    in all). ``request_overhead_s``: each request's front end, as serve's (None: the
    engine's measured one). ``eager_prefill`` (sglang): its prefill batches without CUDA
    graphs, as serve's (the bounds, which leave the host out, stay below such runs).
    ``max_model_len``: the longest request each deployment must accept (vLLM: its KV cache
    must hold one to start); None: each takes the model's context, or (vLLM) the longest its
    KV cache holds where that is shorter (the launch flag ``--max-model-len`` reported with it).
    ``disable_cascade_attn``: vLLM's flag, as serve's. ``cuda_graph_max_bs`` (sglang): its
    largest decode batch from a CUDA graph, as serve's (None: its default for each GPU and
    TP; the bounds leave the host out, so they stay below runs past it). ``allreduce``: the
    TP AllReduce's backends (Deployment.allreduce; None: the engine's)."""
    from ..models.config import load_config
    from .defaults import ENGINES, check_engine_flags, engine_kernels

    if not slos:
        raise UserError("plan needs an SLO (--slo-ttft-p99, --slo-tpot-p99 or --slo-e2el-p99)")
    if not (rate > 0 and math.isfinite(rate)):
        raise UserError(f"plan needs a finite target rate above 0 (got {rate!r})")
    engine_class(engine, max(pp or (1,)))  # (an engine with no pipeline model says so first)
    check_engine_flags(engine, eager_prefill=eager_prefill, disable_cascade_attn=disable_cascade_attn,
                       cuda_graph_max_bs=cuda_graph_max_bs)
    if pd and (engine not in ("vllm", "sglang") or max(pp or (1,)) > 1):
        raise UserError("--pd (disaggregated pairs) is simulated for --engine vllm and sglang without pipeline stages")
    missing = [g for g in gpus if g not in prices]
    if missing:
        raise UserError(f"no price for {', '.join(missing)}: give --prices FILE with them, or leave them out")
    model = load_config(model_name)
    from .context import check_requests, max_model_len as context_limit
    from .traffic import requests_at

    if max_model_len == "auto":  # (vLLM's --max-model-len auto: what the search does without one)
        max_model_len = None
    limit = context_limit(model, max_model_len)
    sample = requests_at(workload, math.inf)
    check_requests(sample.input_tokens, sample.output_tokens, limit, engine)
    ideal = [g for g in gpus if not calibrated(g)]
    if not uncalibrated:
        gpus = [g for g in gpus if g not in ideal]
        if not gpus:
            raise UserError(f"no candidate GPU has a fitted profile ({', '.join(ideal)} would be priced on the ideal "
                            f"roofline); pass --include-uncalibrated to plan with them anyway")
    cands, skipped = candidates(model, gpus, weights, kv_dtypes, max_gpus, tuple(pp or (1,)))
    if not uncalibrated:
        skipped += [{"gpu": g, "reason": "no fitted profile: the ideal roofline would flatter it "
                                         "(--include-uncalibrated plans with it)"} for g in ideal]
    given = dict(slos)
    if min_probability is not None:  # (the search's limits, tightened by the spread of what is measured)
        slos = tightened(slos, min_probability, engine, gpus)
    job = {"model": model_name, "rate": rate, "slos": slos, "slos_given": given, "workload": workload,
           "max_gpus": max_gpus, "min_probability": min_probability, "pd": bool(pd),
           "engine": engine, "gpu_memory_utilization": gpu_memory_utilization,
           "request_overhead_s": float(ENGINES[engine].request_overhead_s if request_overhead_s is None
                                       else request_overhead_s),
           "eager_prefill": bool(eager_prefill), "max_model_len": max_model_len,
           "disable_cascade_attn": bool(disable_cascade_attn), "cuda_graph_max_bs": cuda_graph_max_bs,
           **engine_kernels(engine, allreduce),
           "max_num_batched_tokens": sorted(set(max_num_batched_tokens or ())),
           "max_num_seqs": sorted(set(max_num_seqs or ()), reverse=True)}
    tick = progress or (lambda k: None)
    workers = Workers(jobs or os.cpu_count() or 1, ray_address)
    try:
        return _search(model, cands, skipped, job, prices, samples, workers, tick, on_start)
    finally:
        workers.close()


def tightened(slos: dict, probability: float, engine: str, gpus: list) -> dict:
    """The limits a configuration's estimates must meet for each SLO to hold with about
    ``probability``: each limit over exp(z sigma), z the normal quantile of the probability
    and sigma the metric group's serving residual and the candidates' largest kernel-family
    spread, taken as independent (each SLO apart: the probability reported for the picked
    configurations, over the kernel draws, is that of them all)."""
    from statistics import NormalDist

    from ..calibration.profile import resolve_profile
    from ..hardware import load_spec
    from .residual import group_of
    from .simulate import family_sigmas, serving_sigmas

    kernel = max((s for g in gpus for s in family_sigmas(resolve_profile(load_spec(g), None)).values()), default=0.0)
    serving = serving_sigmas(engine)
    z = NormalDist().inv_cdf(probability)
    return {k: v * math.exp(-z * math.hypot(serving.get(group_of(k), 0.0), kernel)) for k, v in slos.items()}


def _search(model, cands, skipped, job, prices, samples, workers, tick, on_start) -> dict:
    bounds = workers.map(_bounds, [(c, job) for c in cands])
    # every configuration of the space, each settled once: by step 1 or 2, by a run, or not needed
    # (with pd, each count of r replicas also as its r - 1 splits)
    counts = {c: max(1, job["max_gpus"] // c.gpus) for c in cands}
    space = {c: (counts[c] + (counts[c] * (counts[c] - 1) // 2 if job.get("pd") else 0)) * max(1, len(b["limits"]))
             for c, b in zip(cands, bounds)}
    total = sum(space.values())
    if on_start is not None:
        on_start(total)
    settled = Counter()
    verdicts: dict = {c: [] for c in cands}  # per type: (how it was settled, cost per hour, verdict, reason)
    todo: list[Config] = []
    price = {c: prices[c.gpu]["usd_per_gpu_hour"] for c in cands}
    defaults = {c: b.get("default") for c, b in zip(cands, bounds)}
    for c, b in zip(cands, bounds):
        if b["error"] is not None:
            settled["invalid"] += space[c]
            verdicts[c].append(("bound", math.inf, "invalid", b["error"]))
            continue
        most = counts[c]
        per_limits = space[c] // max(1, len(b["limits"]))
        for lim in b["limits"]:
            rejected = lim.get("rejected")
            if rejected and (rejected != "too many GPUs" or not job.get("pd")):
                settled[lim["rejected"] if lim["rejected"] == "does not fit" else "bound"] += per_limits
                verdicts[c].append(("bound", math.inf, lim["rejected"],
                                    _limits_text(lim["tokens"], lim["seqs"]) + lim["reason"]))
                continue
            if rejected:  # (too many GPUs colocated; the splits are bounded apart)
                settled["bound"] += most
                verdicts[c].append(("bound", math.inf, lim["rejected"],
                                    _limits_text(lim["tokens"], lim["seqs"]) + lim["reason"]))
            else:
                settled["bound"] += lim["replicas"] - 1  # (too few replicas for the rate)
                for r in range(lim["replicas"], most + 1):
                    todo.append(Config(c, lim["tokens"], lim["seqs"], lim["kv"], r, r * c.gpus * price[c]))
            if job.get("pd"):
                fewest_p, fewest_d = lim["pools"]
                for r in range(2, most + 1):
                    for p in range(1, r):
                        if p < fewest_p or r - p < fewest_d:
                            settled["bound"] += 1  # (a pool too small for the rate)
                        else:
                            todo.append(Config(c, lim["tokens"], lim["seqs"], lim["kv"], r, r * c.gpus * price[c], p))
    tick(sum(settled.values()))
    # cost first; among equals the fewest GPUs, then each group (a type at a replica count) with
    # the engine's default limits first
    todo.sort(key=lambda x: (x.cost_per_hour, x.replicas * x.candidate.gpus, x.candidate.gpu, x.candidate.tp,
                             x.candidate.pp, x.candidate.weights, x.candidate.kv_dtype, x.candidate.ep, x.replicas,
                             x.prefill != 0, (x.max_num_batched_tokens, x.max_num_seqs) != defaults[x.candidate],
                             -x.max_num_batched_tokens, -x.max_num_seqs, x.prefill))
    found, met, groups = [], {}, set()  # met: type -> the cost of its cheapest configuration that meets the SLOs
    others: dict = {}  # (type, replicas) that met the SLOs -> its other limits, left unsimulated
    queue = todo
    while queue:
        if len(met) >= KEEP and queue[0].cost_per_hour > sorted(met.values())[KEEP - 1]:
            break  # (everything as cheap as the KEEP cheapest types' configurations is settled)
        wave, later, taken = [], [], set()
        for cfg in queue:
            group = (cfg.candidate, cfg.replicas)
            if group in groups or (cfg.candidate in met and cfg.cost_per_hour > met[cfg.candidate]):
                settled["not needed"] += 1  # (other limits of its type and replicas, or fewer replicas, meet the SLOs)
                tick(1)
                if group in groups:
                    others.setdefault(group, []).append(cfg)
            elif len(wave) < WAVE and group not in taken:
                wave.append(cfg)
                taken.add(group)
            else:
                later.append(cfg)  # (one run a group a wave: the next limits only if these miss)
        queue = later
        for r in workers.map(_simulate, [(cfg, job, 0) for cfg in wave]):
            settled["simulated"] += 1
            cfg = r["config"]
            if "rejected" in r:
                verdicts[cfg.candidate].append(("run", cfg.cost_per_hour, r["rejected"], _limits_text(
                    cfg.max_num_batched_tokens, cfg.max_num_seqs) + r["reason"]))
            else:
                found.append(r)
                groups.add((cfg.candidate, cfg.replicas))
                met[cfg.candidate] = min(met.get(cfg.candidate, math.inf), cfg.cost_per_hour)
        tick(len(wave))
    settled["not needed"] += len(queue)
    tick(len(queue))
    for cfg in queue:
        top = sorted(met.values())[KEEP - 1]
        verdicts[cfg.candidate].append(("left", cfg.cost_per_hour, "not needed",
                                        f"its cheapest configuration left (${cfg.cost_per_hour:,.2f}/hour) costs "
                                        f"more than each of the {KEEP} cheapest replica types found to meet the "
                                        f"SLOs (up to ${top:,.2f}/hour)"))
    profiles = {c: b.get("profile", "") for c, b in zip(cands, bounds)}
    slos = job["slos"]
    order = lambda r: (r["config"].cost_per_hour, max(r["metrics"][k] / v for k, v in slos.items()),  # noqa: E731
                       -r["metrics"]["output_throughput"])
    found.sort(key=order)

    def firsts() -> list:  # the best, then each other replica type's cheapest (the most room among equals)
        out, seen = [], set()
        for r in found:
            if r["config"].candidate not in seen:
                seen.add(r["config"].candidate)
                out.append(r)
        return out[:KEEP]

    # (their other limits at the same replicas and cost, left unsimulated: run too, so that each
    # type is reported at the limits with the most room under the SLOs)
    tune = [cfg for r in firsts() for cfg in others.get((r["config"].candidate, r["config"].replicas), [])]
    found += [r for r in workers.map(_simulate, [(cfg, job, 0) for cfg in tune]) if "rejected" not in r]
    settled["not needed"] -= len(tune)
    settled["simulated"] += len(tune)
    found.sort(key=order)
    picked = firsts()
    seen = {r["config"].candidate for r in found}
    if samples:  # (step 4: the intervals and the probability that the SLOs hold, of those picked)
        picked = workers.map(_simulate, [(r["config"], job, samples) for r in picked])
    drawn = {r["config"]: r for r in picked}  # (with their intervals, where drawn)
    rows = {r["config"]: _row(r["config"], drawn.get(r["config"], r), prices, profiles[r["config"].candidate])
            for r in found}
    feasible = list(rows.values())
    front, best_latency = [], math.inf
    key = next(iter(slos))
    # (cost ascending, and among equal costs the lowest latency first: a point joins the front
    # when it lowers the latency, so one is never beside another as cheap and faster)
    for r in sorted(feasible, key=lambda r: (r["cost_per_hour"], r["metrics"][key])):
        if r["metrics"][key] < best_latency:
            front.append(r)
            best_latency = r["metrics"][key]
    rejected = []
    for c in cands:
        if c in seen or not verdicts[c]:
            continue
        rejected.append({"gpu": c.gpu, "tp": c.tp, "pp": c.pp, "ep": c.ep, "weights": c.weights, "kv_dtype": c.kv_dtype,
                         "profile": profiles[c], **_verdict(verdicts[c])})
    best = [rows[r["config"]] for r in picked]
    extra = {} if job.get("min_probability") is None else {"min_probability": job["min_probability"],
                                                            "search_slos": slos}
    return {"model": model.name, "rate": job["rate"], "slos": job.get("slos_given", slos), **extra,
            "workload": job["workload"],
            "engine": job["engine"], "request_overhead_s": job.get("request_overhead_s", 0.0),
            "max_model_len": job.get("max_model_len"),
            "eager_prefill": job.get("eager_prefill", False), "allreduce": job.get("allreduce", "engine"),
            **({"disable_cascade_attn": job.get("disable_cascade_attn", False)} if job["engine"] == "vllm" else {}),
            **({"cuda_graph_max_bs": job.get("cuda_graph_max_bs")} if job["engine"] == "sglang" else {}),
            "pd": job.get("pd", False), "candidates": len(cands), "configurations": total,
            "settled": dict(sorted(settled.items())), "best": best[0] if best else None,
            "runners_up": best[1:], "pareto": front, "feasible": feasible, "rejected": rejected,
            "not_tried": skipped}


def _verdict(found: list) -> dict:
    """A replica type's verdict from its configurations' (how, cost, verdict, reason): not
    needed where some were left unsimulated (cheaper ones met the SLOs first), else the
    costliest run's miss (the closest to meeting them), else a bound's (an SLO or the GPU
    limit before a memory one)."""
    left = [v for v in found if v[0] == "left"]
    runs = [v for v in found if v[0] == "run"]
    if left:
        v = min(left, key=lambda v: v[1])
    elif runs:
        v = max(runs, key=lambda v: v[1])
    else:
        v = min(found, key=lambda v: v[2] == "does not fit")
    return {"rejected": v[2], "reason": v[3]}


def _limits_text(tokens: int, seqs: int) -> str:
    return f"max_num_batched_tokens {tokens}, max_num_seqs {seqs}: "


def _row(cfg: Config, r: dict, prices: dict, profile: str) -> dict:
    c = cfg.candidate
    tokens_per_hour = r["metrics"]["output_throughput"] * 3600
    return {"gpu": c.gpu, "tp": c.tp, "pp": c.pp, "ep": c.ep, "weights": c.weights, "kv_dtype": c.kv_dtype,
            "profile": profile, "max_num_batched_tokens": cfg.max_num_batched_tokens, "max_num_seqs": cfg.max_num_seqs,
            "kv_cache_tokens": cfg.kv_cache_tokens, "max_model_len": r.get("max_model_len"),
            "replicas": cfg.replicas, "gpus": cfg.replicas * c.gpus,
            "prefill_replicas": cfg.prefill or None,
            "decode_replicas": cfg.replicas - cfg.prefill if cfg.prefill else None,
            "cost_per_hour": cfg.cost_per_hour,
            "cost_per_million_output_tokens": cfg.cost_per_hour / tokens_per_hour * 1e6,
            "usd_per_gpu_hour": prices[c.gpu]["usd_per_gpu_hour"], "price_source": prices[c.gpu].get("source"),
            "metrics": r["metrics"], "interval": r.get("interval"),
            "probability_meets_slo": r.get("probability_meets_slo")}
