"""The engines' fast paths against their step-by-step loops on random workloads (run: python
benchmarks/lockstep_check.py [--cases N] [--seed S] [--engine vllm-pp ...]).

Each case draws a workload (1-150 requests, arrivals over 2-60 s, some at whole seconds,
prompts of 1-3,000 tokens, outputs of 1-300) and engine limits (blocks of 1 to 32 tokens,
budgets of 512 to 8,192 tokens, max_num_seqs 4 to 256, KV caches from the longest request to
200,000 tokens, a concurrency limit or none), serves it on Llama-3.1-8B on an H200 with the
fast paths (decode stretches, each scheduler's lockstep) and without them (``Sim.stretches``
off: every step through the general loop), and compares every logged step, every request's
scheduled, first-token and finish times, the sorted inter-token gaps and the preemptions.
Engines: ``vllm-pp`` (vLLM on 2 and 3 pipeline stages, the default), ``vllm``, ``sglang``,
``trtllm``, ``trtllm-max`` (under max_utilization; vLLM's KV in use is left out for the
single-stage engine, whose stretches log it as a straight line between exact ends). Prints
the cases that differ by more than 1e-9 (relative) and how many agree bit for bit.
"""

from __future__ import annotations

import argparse
import random

import numpy as np

STEP_FIELDS = ("start_s", "duration_s", "tokens", "sequences", "sampled", "kv_blocks_used")


def _case(rng: random.Random, engine: str) -> tuple:
    """A random workload and the serve keywords (engine limits) it runs with."""
    from rooflinesim.serve.traffic import Requests

    n = rng.randint(1, 150)
    t = np.sort(np.array([rng.uniform(0, rng.choice([2, 20, 60])) for _ in range(n)]))
    if rng.random() < 0.3:
        t = np.round(t, 0)
    inp = np.array([rng.randint(1, 3000) for _ in range(n)])
    out = np.array([rng.randint(1, 300) for _ in range(n)])
    bs = rng.choice([1, 16, 32])
    seqs = rng.choice([4, 16, 256])
    budget = max(rng.choice([512, 4096, 8192]), seqs)
    kv = max(int(((inp + out + bs - 1) // bs).max()) * bs, rng.choice([3000, 20000, 200000]))
    kw = dict(engine=engine.split("-")[0], kv_tokens=kv, max_num_batched_tokens=budget, max_num_seqs=seqs,
              concurrency=rng.choice([None, None, 3, 9]), interval_samples=0)
    if engine != "sglang":
        kw["block_size"] = bs
    if engine == "trtllm-max":
        kw["capacity_policy"] = "max_utilization"
    pp = rng.choice([2, 2, 3]) if engine == "vllm-pp" else 1
    return Requests(t - t[0], inp, out), kw, pp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--engine", action="append", choices=["vllm-pp", "vllm", "sglang", "trtllm", "trtllm-max"])
    args = ap.parse_args()

    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.errors import UserError
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.serve.schedulers import base
    from rooflinesim.serve.simulate import serve

    spec = load_spec("h200")
    profile, model = resolve_profile(spec, None), load_config("llama-3.1-8b")
    rng = random.Random(args.seed)
    engines = args.engine or ["vllm-pp"]
    differ = exact = refused = 0
    for case in range(args.cases):
        engine = engines[case % len(engines)]
        reqs, kw, pp = _case(rng, engine)
        runs = []
        try:
            for fast in (True, False):
                base.Sim.stretches = fast
                runs.append(serve(model, spec, profile, Deployment(pp=pp), reqs, **kw).served)
        except UserError as e:  # (a workload the engine refuses, as the CLI would: said, not compared)
            refused += 1
            print(f"case {case} ({engine}): refused: {e}")
            continue
        finally:
            base.Sim.stretches = True
        a, b = runs
        pairs = [(np.asarray(a.steps[f], dtype=float), np.asarray(b.steps[f], dtype=float)) for f in STEP_FIELDS
                 if not (f == "kv_blocks_used" and engine == "vllm")]
        pairs += [(getattr(a, f), getattr(b, f)) for f in ("scheduled_s", "first_token_s", "finish_s")]
        pairs += [(np.sort(a.itl_s), np.sort(b.itl_s)), (np.array([a.preemptions]), np.array([b.preemptions]))]
        same = all(x.shape == y.shape and np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True) for x, y in pairs)
        if not same:
            differ += 1
            print(f"case {case} ({engine}, {pp} stages): differs, {kw}")
        elif all(np.array_equal(x, y, equal_nan=True) for x, y in pairs):
            exact += 1
    print(f"{args.cases} cases ({', '.join(engines)}): {differ} differ, {args.cases - differ - refused} agree "
          f"({exact} bit for bit), {refused} refused")


if __name__ == "__main__":
    main()
