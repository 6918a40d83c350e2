"""vLLM's peak metrics: the most output tokens in one second (max_output_tokens_per_s) and
the most requests in flight (max_concurrent_requests), from the steps' sampled tokens and
the requests' times."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.serve.simulate import serve
from rooflinesim.serve.traffic import random_requests

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")


@pytest.mark.parametrize("engine, d, extra", [
    ("vllm", Deployment(), {}), ("sglang", Deployment(), {}), ("trtllm", Deployment(), {}),
    ("static", Deployment(), {}), ("vllm", Deployment(dp=2), {}), ("vllm", Deployment(pp=2), {}),
    ("vllm", Deployment(), {"pd": (1, 1)}), ("trtllm", Deployment(), {"capacity_policy": "max_utilization"}),
])
def test_every_output_token_is_sampled_once_in_some_step(engine, d, extra):
    reqs = random_requests(160, 700, 90, rate=12.0, seed=3, range_ratio=0.6)
    r = serve(LLAMA, H200, FITTED, d, reqs, engine=engine, **extra)
    steps, m = r.served.steps, r.metrics
    assert int(steps["sampled"].sum()) == int(reqs.output_tokens.sum())
    # the peak second holds at least the mean second's tokens, at most all of them
    seconds = math.floor(m["duration_s"]) + 1
    assert m["total_output_tokens"] / seconds <= m["max_output_tokens_per_s"] <= m["total_output_tokens"]


def test_the_peak_second_is_the_tokens_whose_steps_end_in_it():
    reqs = random_requests(300, 500, 120, rate=25.0, seed=5)
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs)
    st = r.served.steps
    ends = st["start_s"] + st["duration_s"]
    counts = [int(st["sampled"][(ends >= t) & (ends < t + 1)].sum()) for t in range(int(ends.max()) + 1)]
    assert r.metrics["max_output_tokens_per_s"] == max(counts)


def test_requests_in_flight_at_once():
    reqs = random_requests(200, 400, 60, rate=15.0, seed=2)
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs)
    s = r.served
    t = np.sort(np.concatenate([s.arrival_s, s.finish_s]))
    inflight = [int(((s.arrival_s <= x) & (s.finish_s > x)).sum()) for x in t]
    assert r.metrics["max_concurrent_requests"] == max(inflight)
    everyone = serve(LLAMA, H200, FITTED, Deployment(), random_requests(50, 400, 60, seed=2))
    assert everyone.metrics["max_concurrent_requests"] == 50
    one_by_one = serve(LLAMA, H200, FITTED, Deployment(), random_requests(5, 100, 4, rate=0.01, seed=2))
    assert one_by_one.metrics["max_concurrent_requests"] == 1


def test_the_peak_second_carries_the_throughputs_spread():
    reqs = random_requests(200, 500, 80, rate=20.0, seed=6)
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs, interval_samples=4)
    key = "max_output_tokens_per_s"
    (klo, khi), (lo, hi) = r.interval_kernel[key], r.interval[key]
    assert lo < klo and hi > khi and lo <= r.metrics[key] <= hi
    assert "max_concurrent_requests" not in r.interval  # (a count: no interval)
