"""`plan`: the cheapest deployment that serves a workload at a target rate under P99 SLOs.

For each candidate replica (GPU type x tensor parallelism x weight and KV dtypes), in turn:
  1. memory: the memory planner's KV cache (``rooflinesim fit --engine vllm``) must hold the
     workload's longest request; else "does not fit";
  2. a floor: one run at a low rate (a tenth of the target, per replica at most) must meet
     the SLOs; else the SLO it misses (every request alone already takes longer);
  3. a ceiling: the replica's saturated request throughput (every request at once) bounds
     the rate it can take, so the replicas the target needs are at least target / ceiling;
     a candidate needing more than ``max_gpus`` even then is rejected without more runs;
  4. the highest rate one replica sustains under the SLOs (``max_rate``: bisection), and so
     the replicas the target needs;
  5. the whole deployment (those replicas, each taking every dp-th request) simulated at
     the target rate with the kernel model's error drawn (``serve``'s intervals): a
     replica is added while it misses the SLOs (at most two more).
Cost: GPUs x the price per GPU-hour (``rooflinesim/data/gpu_prices.yaml``, each figure with
its source and date, or ``--prices``), and per million output tokens at the simulated
output throughput. Candidates run in a process pool (one per core).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..errors import UserError

TPS = (1, 2, 4, 8)
EXTRA_REPLICAS = 2


@dataclass(frozen=True)
class Candidate:
    gpu: str
    tp: int
    weights: str
    kv_dtype: str
    ep: int = 1  # expert parallelism (MoE models: the experts split over the TP ranks)


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


def _run_candidate(args) -> dict:
    """One candidate through steps 1-5 (in a worker process)."""
    c, job = args
    from ..calibration.profile import resolve_profile
    from ..hardware import load_spec
    from ..models.config import load_config
    from ..models.deploy import Deployment
    from .simulate import kv_cache_tokens, max_rate, serve
    from .traffic import requests_at

    model = load_config(job["model"])
    spec = load_spec(c.gpu)
    profile = resolve_profile(spec, None)
    w = job["workload"]

    def make(rate):
        return requests_at(w, rate)

    out = {"candidate": c, "gpu": c.gpu, "tp": c.tp, "ep": c.ep, "weights": c.weights, "kv_dtype": c.kv_dtype,
           "profile": profile.kind}
    try:
        d = Deployment(tp=c.tp, ep=c.ep, weights=c.weights, kv_cache=c.kv_dtype)
        reqs = make(math.inf)
        longest = int((reqs.input_tokens + reqs.output_tokens).max())
        kv = kv_cache_tokens(model, spec, d, block_size=16, gpu_memory_utilization=job["gpu_memory_utilization"],
                             max_num_batched_tokens=8192, max_num_seqs=1024)
        if kv < longest:
            return {**out, "rejected": "does not fit", "reason": f"KV cache of {kv:,} tokens; the longest "
                                                                 f"request needs {longest:,}"}
        opts = dict(engine=job["engine"], kv_tokens=kv)
        slos = job["slos"]
        low = serve(model, spec, profile, d, make(job["rate"] / 10), **opts).metrics
        missed = [k for k, v in slos.items() if low[k] > v]
        if missed:
            return {**out, "rejected": missed[0].replace("p99_", "").replace("_ms", "").upper(),
                    "reason": f"even at a tenth of the rate, {missed[0]} is {low[missed[0]]:.4g} ms "
                              f"(SLO {slos[missed[0]]:.4g})"}
        ceiling = serve(model, spec, profile, d, make(math.inf), **opts).metrics["request_throughput"]
        if math.ceil(job["rate"] / ceiling) * c.tp > job["max_gpus"]:
            return {**out, "rejected": "too many GPUs",
                    "reason": f"saturated at {ceiling:.3g} req/s a replica: at least "
                              f"{math.ceil(job['rate'] / ceiling) * c.tp} GPUs (max {job['max_gpus']})"}
        rate, _, _ = max_rate(model, spec, profile, d, make, slos, iterations=job["iterations"], **opts)
        replicas = max(1, math.ceil(job["rate"] / rate)) if rate < math.inf else 1
        for _ in range(EXTRA_REPLICAS + 1):
            if replicas * c.tp > job["max_gpus"]:
                return {**out, "rejected": "too many GPUs", "reason": f"{replicas} replicas of {c.tp} GPUs "
                                                                      f"(max {job['max_gpus']} GPUs)"}
            dd = Deployment(tp=c.tp, ep=c.ep, dp=replicas, weights=c.weights, kv_cache=c.kv_dtype)
            r = serve(model, spec, profile, dd, make(job["rate"]), interval_samples=job["samples"],
                      seed=w["seed"], **opts)
            if all(r.metrics[k] <= v for k, v in slos.items()):
                break
            replicas += 1
        else:
            return {**out, "rejected": "SLO at the target rate",
                    "reason": f"{replicas - 1} replicas still miss the SLOs at {job['rate']:g} req/s"}
        price = job["prices"][c.gpu]["usd_per_gpu_hour"]
        gpus = replicas * c.tp
        per_hour = gpus * price
        tokens_per_hour = r.metrics["output_throughput"] * 3600
        draws = r.draws or []
        meets = (float(np.mean([all(m[k] <= v for k, v in slos.items()) for m in draws])) if draws else None)
        return {**out, "replicas": replicas, "gpus": gpus,
                "max_rate_per_replica": None if math.isinf(rate) else rate,  # (None: every request at once meets the SLOs)
                "cost_per_hour": per_hour, "cost_per_million_output_tokens": per_hour / tokens_per_hour * 1e6,
                "usd_per_gpu_hour": price, "price_source": job["prices"][c.gpu].get("source"),
                "metrics": {k: r.metrics[k] for k in (*slos, "request_throughput", "output_throughput",
                                                      "median_ttft_ms", "median_tpot_ms")},
                "interval": {k: (r.interval or {}).get(k) for k in slos},
                "probability_meets_slo": meets}
    except UserError as e:
        return {**out, "rejected": "invalid", "reason": str(e)}


def candidates(model, gpus: list, weights: list, kv_dtypes: list, max_gpus: int) -> tuple[list, list]:
    """(the candidates, and the combinations left out with why: a TP the model cannot
    split, a dtype the GPU lacks, more GPUs than a node or the limit holds). An MoE model's
    candidates at TP above 1 come with and without expert parallelism over the TP ranks."""
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
                for tp in TPS:
                    if tp > min(max_gpus, spec.interconnect.gpus_per_node):
                        continue
                    for ep in ((1, tp) if model.is_moe and tp > 1 else (1,)):
                        try:
                            shard(model, Deployment(tp=tp, ep=ep, weights=w, kv_cache=kv))
                        except UserError:
                            continue
                        out.append(Candidate(spec.name, tp, w, kv, ep))
    return out, skipped


def calibrated(gpu: str) -> bool:
    """Whether predictions on ``gpu`` use a fitted profile (its own, or one lent by a measured
    GPU of its vendor), not the ideal roofline."""
    from ..calibration.profile import resolve_profile
    from ..hardware import load_spec

    return resolve_profile(load_spec(gpu), None).kind != "ideal"


def plan(model_name: str, *, rate: float, slos: dict, workload: dict, gpus: list, weights: list,
         kv_dtypes: list, max_gpus: int, prices: dict, engine: str = "vllm", samples: int = 10,
         iterations: int = 8, jobs: int | None = None, gpu_memory_utilization: float = 0.9,
         uncalibrated: bool = False, progress=None, on_start=None) -> dict:
    """Every candidate through the steps of the module's notes; the cheapest that meets the
    SLOs, the runners-up, the cost-latency Pareto front and the rejected with reasons. GPUs
    with no fitted profile (the ideal roofline: optimistic, with no interval) are left out
    unless ``uncalibrated``."""
    from ..models.config import load_config

    if not slos:
        raise UserError("plan needs an SLO (--slo-ttft-p99, --slo-tpot-p99 or --slo-e2el-p99)")
    if not (rate > 0 and math.isfinite(rate)):
        raise UserError(f"plan needs a finite target rate above 0 (got {rate!r})")
    missing = [g for g in gpus if g not in prices]
    if missing:
        raise UserError(f"no price for {', '.join(missing)}: give --prices FILE with them, or leave them out")
    model = load_config(model_name)
    ideal = [g for g in gpus if not calibrated(g)]
    if not uncalibrated:
        gpus = [g for g in gpus if g not in ideal]
        if not gpus:
            raise UserError(f"no candidate GPU has a fitted profile ({', '.join(ideal)} would be priced on the ideal "
                            f"roofline); pass --include-uncalibrated to plan with them anyway")
    cands, skipped = candidates(model, gpus, weights, kv_dtypes, max_gpus)
    if not uncalibrated:
        skipped += [{"gpu": g, "reason": "no fitted profile: the ideal roofline would flatter it "
                                         "(--include-uncalibrated plans with it)"} for g in ideal]
    job = {"model": model_name, "rate": rate, "slos": slos, "workload": workload, "max_gpus": max_gpus,
           "prices": prices, "engine": engine, "samples": samples, "iterations": iterations,
           "gpu_memory_utilization": gpu_memory_utilization}
    work = [(c, job) for c in cands]
    if on_start is not None:
        on_start(len(work))  # (how many candidates ``progress`` will count)
    jobs = jobs or os.cpu_count() or 1
    tick = progress or (lambda k: None)
    results = []
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
            for r in pool.map(_run_candidate, work):  # (in order, as each is done)
                results.append(r)
                tick(1)
    else:
        for w in work:
            results.append(_run_candidate(w))
            tick(1)
    ok = sorted((r for r in results if "rejected" not in r),
                key=lambda r: (r["cost_per_hour"], r["cost_per_million_output_tokens"], r["gpus"]))
    rejected = [r for r in results if "rejected" in r]
    front, best_latency = [], math.inf
    key = next(iter(slos))
    for r in ok:  # (cost ascending: a point joins the front when it lowers the latency)
        if r["metrics"][key] < best_latency:
            front.append(r)
            best_latency = r["metrics"][key]
    clean = lambda r: {k: v for k, v in r.items() if k != "candidate"}  # noqa: E731
    return {"model": model.name, "rate": rate, "slos": slos, "workload": workload, "engine": engine,
            "candidates": len(cands), "best": clean(ok[0]) if ok else None, "runners_up": [clean(r) for r in ok[1:6]],
            "pareto": [clean(r) for r in front], "feasible": [clean(r) for r in ok],
            "rejected": [clean(r) for r in rejected], "not_tried": skipped}
