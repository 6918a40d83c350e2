"""`rooflinesim serve` against published serving benchmarks (benchmarks/data/published_serving.yaml).

    python benchmarks/serving_check.py [--samples 10] [--points]

Every point of the file whose workload can be re-created is simulated: the random dataset
(with the semantics of the client that printed it: SGLang's bench_serving draws each length
uniformly from [range_ratio x L, L]), its rate and number of prompts, the engine (vllm or
sglang, at the defaults the source left in place), model, GPU, tensor parallelism and
weights. ShareGPT points are skipped (no ShareGPT length distribution ships), and so are
points on GPUs with no spec here. Prints, per metric, the median absolute error and how
many of the published values the interval (the middle 90% of --samples draws of the
kernel model's error) covered; --points lists every point.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

DATA = Path(__file__).resolve().parent / "data" / "published_serving.yaml"
MODELS = {"deepseek-ai/DeepSeek-R1": "deepseek-v3", "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b",
          "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b", "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b"}
GPUS = {"H200": "h200-sxm", "H100": "h100", "A100": "a100-sxm4-80gb"}
SEED = 1


def _gpu(text: str) -> str | None:
    return next((v for k, v in GPUS.items() if text.upper().startswith(k)), None)


def _lengths(rng, n: int, length: int, ratio: float, client: str) -> np.ndarray:
    if client.startswith("sglang"):  # (SGLang's bench_serving: uniform in [ratio x L, L])
        return rng.integers(max(int(length * ratio), 1), length + 1, size=n)
    lo, hi = max(1, int(length * (1 - ratio))), max(1, int(length * (1 + ratio)))  # (vLLM's)
    return rng.integers(lo, hi + 1, size=n)


def simulate(point: dict, samples: int):
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.hardware import load_spec
    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.serve.simulate import serve
    from rooflinesim.serve.traffic import Requests, arrivals

    ds = point["dataset"]
    spec = load_spec(_gpu(point["gpu"]))
    rng = np.random.default_rng(SEED)
    n = int(point["num_prompts"])
    client = point.get("client", "")
    inputs = _lengths(rng, n, int(ds["input_len"]), float(ds["range_ratio"]), client)
    outputs = _lengths(rng, n, int(ds["output_len"]), float(ds["range_ratio"]), client)
    rate = math.inf if str(point["request_rate"]) == "inf" else float(point["request_rate"])
    reqs = Requests(arrivals(n, rate, 1.0, rng), inputs, outputs)
    d = Deployment(tp=int(point["tp"]), weights=point["weights"])
    return serve(load_config(MODELS[point["model"]]), spec, resolve_profile(spec, None), d, reqs,
                 engine=point["engine"], interval_samples=samples, seed=SEED)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--points", action="store_true")
    args = ap.parse_args()
    points = yaml.safe_load(DATA.read_text())["points"]
    errors, covered, skipped = defaultdict(list), defaultdict(list), defaultdict(int)
    rows = []
    for p in points:
        if p["dataset"]["name"] != "random":
            skipped["ShareGPT workload"] += 1
            continue
        if _gpu(p["gpu"]) is None or p["model"] not in MODELS:
            skipped["GPU or model not here"] += 1
            continue
        r = simulate(p, args.samples)
        for key, published in p["metrics"].items():
            if key not in r.metrics:
                continue
            ours = r.metrics[key]
            err = ours / published - 1
            errors[key].append(err)
            lo, hi = (r.interval or {}).get(key, (ours, ours))
            covered[key].append(lo <= published <= hi)
            rows.append((p["id"], key, published, ours, err, lo, hi))
    if args.points:
        print("| point | metric | published | simulated | error | interval |\n|---|---|---|---|---|---|")
        for pid, key, pub, ours, err, lo, hi in rows:
            print(f"| {pid} | {key} | {pub:.4g} | {ours:.4g} | {100 * err:+.1f}% | [{lo:.4g}, {hi:.4g}] |")
        print()
    print("| metric | points | median abs. error | median signed error | inside the interval |")
    print("|---|---|---|---|---|")
    for key in sorted(errors):
        e = np.array(errors[key])
        print(f"| {key} | {e.size} | {100 * np.median(np.abs(e)):.1f}% | {100 * np.median(e):+.1f}% | "
              f"{sum(covered[key])} of {len(covered[key])} |")
    print("\nskipped: " + ", ".join(f"{v} ({k})" for k, v in skipped.items()))


if __name__ == "__main__":
    main()
