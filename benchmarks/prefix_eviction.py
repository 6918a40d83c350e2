"""The prefix cache as it runs short: vLLM's hit rate on a seeded Mooncake-style trace at
three KV-cache sizes (run: python benchmarks/prefix_eviction.py [--write-trace FILE]).

The trace: 8,000 requests, Poisson at 4 req/s; half start a conversation (one of 50 system
prompts of one 512-token block, then 1-12 blocks of their own), half continue one of the
400 most recent conversations by 1-4 blocks (its whole earlier prompt the prefix), each
request's prompt ending within its last block and its output 20-400 tokens: Mooncake's
format, a hash per block (``hash_ids``), at most 60. Llama-3.1-8B on one H200 under vLLM
(its defaults), with the planner's KV cache, with 400,000 tokens and with 50 million (a
cache that never runs short: the hit rate without eviction). ``--write-trace`` also writes
the trace, for ``rooflinesim serve --trace``.
"""

from __future__ import annotations

import argparse
import json
import random


def trace_rows(n: int = 8000, rate: float = 4.0, seed: int = 1) -> list:
    rng = random.Random(seed)
    rows, t, fresh, live = [], 0.0, 1000, []
    for _ in range(n):
        t += rng.expovariate(rate)
        if live and rng.random() < 0.5:  # (a conversation goes on)
            h = rng.choice(live)
            h.extend(range(fresh, fresh + rng.randint(1, 4)))
            fresh += 5
        else:  # (a new one, after one of the system prompts)
            h = [rng.randrange(50)] + list(range(fresh, fresh + rng.randint(1, 12)))
            fresh += 13
            live.append(h)
            if len(live) > 400:
                live.pop(0)
        blocks = min(len(h), 60)
        rows.append({"timestamp": int(t * 1000), "input_length": 512 * blocks - rng.randint(10, 300),
                     "output_length": rng.randint(20, 400), "hash_ids": h[:blocks]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-trace", metavar="FILE")
    args = ap.parse_args()

    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.serve.simulate import serve
    from rooflinesim.serve.traffic import parse_trace

    text = "".join(json.dumps(r) + "\n" for r in trace_rows())
    if args.write_trace:
        with open(args.write_trace, "x") as fh:  # (never over a file that exists)
            fh.write(text)
    reqs = parse_trace(text, "trace.jsonl")
    spec = load_spec("h200")
    profile, model = resolve_profile(spec, None), load_config("llama-3.1-8b")
    print("| KV cache (tokens) | prefix cache hit rate | median TTFT (ms) | P99 TTFT (ms) |")
    print("|---|---|---|---|")
    for kv in (None, 400_000, 50_000_000):
        r = serve(model, spec, profile, Deployment(), reqs, kv_tokens=kv)
        m = r.metrics
        print(f"| {r.kv_tokens:,}{' (planned)' if kv is None else ''} | {100 * m['prefix_cache_hit_rate']:.1f}% "
              f"| {m['median_ttft_ms']:.1f} | {m['p99_ttft_ms']:.1f} |")


if __name__ == "__main__":
    main()
