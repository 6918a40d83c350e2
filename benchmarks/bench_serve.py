"""Speed of `serve` (run: python benchmarks/bench_serve.py [--requests N]).

Measures, on this machine, one core: building a deployment's step tables (once per
deployment), and simulating N requests (default 10,000) of vLLM's random dataset (1024 in,
256 out, range ratio 0.5) on vLLM v1's scheduler as serve runs it by default (async
scheduling; without it on a pipeline of two stages) at a light, a moderate and a saturating
rate, with no interval draws (each draw is one more simulation); then SGLang and TensorRT-LLM
(both its capacity policies) as serve runs them by default, on Llama-3.1-8B on an H200, over
the same traffic. Goal (README): 10,000
requests in at most 1 s. Times are the minimum over repeats; the first line times a plain
Python loop, so that runs on other machines or hours can be compared.
"""

from __future__ import annotations

import argparse
import time

CASES = [  # (label, model, GPU, deployment keywords, request rates)
    ("llama-3.1-8b h200", "llama-3.1-8b", "h200", dict(), (5.0, 20.0, float("inf"))),
    ("mixtral-8x7b h200 tp2 fp8", "mixtral-8x7b", "h200", dict(tp=2, weights="fp8"), (10.0, float("inf"))),
    ("llama-3-70b h100 tp2 pp2", "llama-3-70b", "h100-sxm", dict(tp=2, pp=2), (5.0, float("inf"))),
]


REFERENCE_LOOP = 5_000_000


def _reference_s() -> float:
    """The least of three timings of a plain Python loop: how fast this core runs the
    interpreter now (machines, and hours on a shared one, differ by several times)."""
    best = float("inf")
    for _ in range(3):
        t0, s = time.perf_counter(), 0
        for i in range(REFERENCE_LOOP):
            s += i
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.serve.engine import EngineParams, simulate
    from rooflinesim.serve.defaults import ENGINES, default_overlap, kv_cache_tokens
    from rooflinesim.serve.steps import StepTimes
    from rooflinesim.serve.traffic import random_requests

    print(f"this machine's pace: {_reference_s():.3f} s for {REFERENCE_LOOP:,} additions in a Python loop "
          "(the simulation is Python and numpy on small arrays: its times scale with this one)")
    print("| deployment | rate (req/s) | requests | engine steps | simulated (s) | build tables (s) |")
    print("|---|---|---|---|---|---|")
    for label, name, gpu, kw, rates in CASES:
        spec = load_spec(gpu)
        profile = resolve_profile(spec, None)
        model, d = load_config(name), Deployment(**kw)
        t0 = time.perf_counter()
        steps = StepTimes(model, spec, profile, d, max_tokens=8192, max_seqs=1024, max_context=1536 + 384)
        build = time.perf_counter() - t0
        kv = kv_cache_tokens(model, spec, d, block_size=16, gpu_memory_utilization=0.9,
                             max_num_batched_tokens=8192, max_num_seqs=1024)
        overlap = default_overlap("vllm", d.pp)  # (serve's defaults: async scheduling, but with pipeline stages)
        p = EngineParams("vllm", 8192, 1024, 16, kv // 16, ENGINES["vllm"].host(overlap)[0], stages=d.pp,
                         overlap=overlap)
        for rate in rates:
            reqs = random_requests(args.requests, 1024, 256, rate=rate, range_ratio=0.5, seed=1)
            best, served = float("inf"), None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                served = simulate("vllm", reqs, steps, p)
                best = min(best, time.perf_counter() - t0)
            print(f"| {label} | {rate:g} | {args.requests:,} | {len(served.steps['duration_s']):,} | {best:.2f} | "
                  f"{build:.2f} |")

    # the other engines as serve runs them by default (their limits, KV cache and overlap), the same traffic
    from rooflinesim.serve.simulate import _replica

    spec, model = load_spec("h200"), load_config("llama-3.1-8b")
    profile = resolve_profile(spec, None)
    for engine, policy in (("sglang", None), ("trtllm", None), ("trtllm", "max_utilization")):
        t0 = time.perf_counter()
        p, _, steps = _replica(model, spec, profile, Deployment(), engine, 1536 + 384, max_num_batched_tokens=None,
                               max_num_seqs=None, block_size=None, gpu_memory_utilization=0.9, kv_tokens=None,
                               step_overhead_s=None, capacity_policy=policy)
        build = time.perf_counter() - t0
        for rate in (5.0, 20.0, float("inf")):
            reqs = random_requests(args.requests, 1024, 256, rate=rate, range_ratio=0.5, seed=1)
            best, served = float("inf"), None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                served = simulate(engine, reqs, steps, p)
                best = min(best, time.perf_counter() - t0)
            print(f"| llama-3.1-8b h200 {engine}{' ' + policy if policy else ''} | {rate:g} | {args.requests:,} | "
                  f"{len(served.steps['duration_s']):,} | {best:.2f} | {build:.2f} |")


if __name__ == "__main__":
    main()
