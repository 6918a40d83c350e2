"""The busiest expert's expected rows under uniform top-k routing: the model against Monte
Carlo (run: python benchmarks/busiest_expert_mc.py [--jobs N] [--quick]).

Over a grid of experts (8-256), top-k (1-8) and tokens (1-16,384), routings are sampled
exactly (rooflinesim.ops.routing.sample_loads) until the standard error of the mean busiest
load is --se of it (at most --max-samples routings), and the model's error is printed for
every point, with the largest; next to it, the model it replaced (the mean plus
sqrt(2 ln E) standard deviations of a load, capped at T).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from multiprocessing import Pool

import numpy as np

EXPERTS = (8, 16, 32, 64, 128, 256)
TOP_K = (1, 2, 3, 4, 6, 8)
TOKENS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 1024, 4096, 16384)
QUICK = dict(experts=(8, 64, 256), top_k=(1, 2, 8), tokens=(1, 2, 4, 16, 128, 1024, 16384))


def previous_model(tokens, experts, top_k):
    p = top_k / experts
    mean = tokens * p
    return min(tokens, mean + math.sqrt(2 * math.log(experts) * mean * (1 - p)))


def sampled(case):
    """(case, mean busiest rows, its standard error, samples) by sampling routings."""
    from rooflinesim.ops.routing import sample_loads

    tokens, experts, top_k, se, most = case
    rng = np.random.default_rng([tokens, experts, top_k])
    chunk = 2000
    total = total2 = 0.0
    n = 0
    while True:
        m = sample_loads(tokens, experts, top_k, chunk, rng).max(axis=1).astype(float)
        total, total2, n = total + m.sum(), total2 + (m * m).sum(), n + m.size
        mean = total / n
        err = math.sqrt(max(total2 / n - mean * mean, 0.0) / n)
        if err <= se * mean or n >= most:
            return case, mean, err, n
        # the samples still needed, from the spread seen so far
        chunk = int(min(most - n, max(2000, (err / (se * mean)) ** 2 * n - n)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1, help="processes sampling at once")
    ap.add_argument("--se", type=float, default=0.001, help="standard error sought, relative")
    ap.add_argument("--max-samples", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="a smaller grid")
    ap.add_argument("--json", default=None, help="also write the points to this file")
    args = ap.parse_args()

    from rooflinesim.ops.routing import expected_busiest

    grid = QUICK if args.quick else dict(experts=EXPERTS, top_k=TOP_K, tokens=TOKENS)
    cases = [(t, e, k, args.se, args.max_samples) for e in grid["experts"] for k in grid["top_k"]
             for t in grid["tokens"] if k <= e]
    cases.sort(key=lambda c: -c[1] * c[2])  # (the slowest first)
    start = time.perf_counter()
    with Pool(args.jobs) as pool:
        results = sorted(pool.imap_unordered(sampled, cases), key=lambda r: r[0][1:3] + r[0][:1])
    points = []
    print(f"{'experts':>7} {'top-k':>5} {'tokens':>6} {'sampled':>10} {'+-':>6} {'model':>10} "
          f"{'error':>7} {'previous':>8}")
    for (t, e, k, _, _), mc, err, n in results:
        model = float(expected_busiest(t, e, k))
        old = previous_model(t, e, k)
        points.append(dict(tokens=t, experts=e, top_k=k, sampled=mc, standard_error=err, samples=n,
                           model=model, previous=old))
        print(f"{e:>7} {k:>5} {t:>6} {mc:>10.4f} {100 * err / mc:>5.2f}% {model:>10.4f} "
              f"{100 * (model / mc - 1):>+6.2f}% {100 * (old / mc - 1):>+7.1f}%")
    worst = max(points, key=lambda p: abs(p["model"] / p["sampled"] - 1))
    worst_se = max(p["standard_error"] / p["sampled"] for p in points)
    old_worst = max(points, key=lambda p: abs(p["previous"] / p["sampled"] - 1))
    print(f"\n{len(points)} points, sampled to {100 * worst_se:.2f}% standard error at most "
          f"({time.perf_counter() - start:.0f} s)")
    for label, p, key in (("model", worst, "model"), ("previous model", old_worst, "previous")):
        print(f"largest error, {label}: {100 * (p[key] / p['sampled'] - 1):+.2f}% (experts "
              f"{p['experts']}, top-k {p['top_k']}, {p['tokens']} tokens: {p[key]:.4g} rows, "
              f"sampled {p['sampled']:.4g})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(points, f, indent=1)


if __name__ == "__main__":
    main()
