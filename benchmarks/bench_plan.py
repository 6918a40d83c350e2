"""Speed of `plan`'s search (run: python benchmarks/bench_plan.py [--jobs 2] [--repeats 1]).

Plans Llama-3-70B at 10 req/s under P99 TTFT 2 s and P99 TPOT 50 ms over every bundled GPU
with a price and a fitted profile, TP 1-8, bf16 and fp8 weights, the engine's limits (its
defaults, 2048 and 16384 tokens a step, 256 and 64 running requests) and up to 16 GPUs,
with the CLI's defaults otherwise (300 random requests of 1024 +- 50% in, 256 +- 50% out;
10 draws of the kernel model's error for the picked deployments): the README's `plan`
command, in a fresh process each repeat (so the step tables are priced again). Prints the
configurations of the space, how each step settled them, and the wall time.
Goal (README): 1,000 configurations in at most 60 s on two cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

COMMAND = ["plan", "--model", "llama-3-70b", "--rate", "10", "--slo-ttft-p99", "2s", "--slo-tpot-p99", "50ms",
           "--max-gpus", "16", "--json"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "rooflinesim", *COMMAND, "--jobs", str(args.jobs)],
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        out = json.loads(done.stdout)
        settled = ", ".join(f"{v:,} {k}" for k, v in out["settled"].items())
        best = out["best"]
        print(f"{out['configurations']:,} configurations of {out['candidates']} replica types in {wall:.1f} s "
              f"on {args.jobs} workers ({settled}); cheapest: {best['gpu']} x {best['tp']} {best['weights']} "
              f"x{best['replicas']}, ${best['cost_per_hour']:.2f}/hour")


if __name__ == "__main__":
    main()
