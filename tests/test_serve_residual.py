"""The serving residual: how far `serve` has landed from published benchmarks, carried into
its intervals and its probability that SLOs hold."""

import math

import numpy as np
import pytest

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.serve.residual import GROUPS, group_of, log_sigma, met_probability, shipped, sigmas_of, widen
from rooflinesim.serve.simulate import serve, slo_report
from rooflinesim.serve.traffic import random_requests

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")


def test_sigma_is_the_larger_reading_of_the_median_and_the_90th_percentile():
    # |log errors| 0.1 .. 1.0: median 0.55 -> 0.815; p90 0.91 -> 0.553; the larger wins
    rows = [{"metric": "median_ttft_ms", "log_error": (-1) ** i * 0.1 * i} for i in range(1, 11)]
    assert sigmas_of(rows)["ttft"] == pytest.approx(0.55 / 0.6744897501960817, rel=1e-12)
    # one large miss among small ones: the 90th percentile reads wider
    tail = [{"metric": "p99_itl_ms", "log_error": 0.05}] * 8 + [{"metric": "mean_tpot_ms", "log_error": 2.0}] * 2
    assert sigmas_of(tail)["itl"] == pytest.approx(log_sigma(0.05, 2.0), rel=1e-12)
    assert log_sigma(0.05, 2.0) == pytest.approx(2.0 / 1.6448536269514722, rel=1e-12)


def test_each_source_weighs_alike():
    # sixty small misses from one source and three large ones from another: pooled, the
    # large ones would sit past the 90th percentile; a source each, they set it
    many = [{"metric": "output_throughput", "log_error": 0.04, "source": "a"}] * 60
    few = [{"metric": "output_throughput", "log_error": -0.3, "source": "b"}] * 3
    assert sigmas_of(many + few)["throughput"] == pytest.approx(0.3 / 1.6448536269514722, rel=1e-12)
    pooled = [{**r, "source": "one"} for r in many + few]
    assert sigmas_of(pooled)["throughput"] == pytest.approx(0.04 / 0.6744897501960817, rel=1e-12)


@pytest.mark.parametrize("metric, group", [("p99_ttft_ms", "ttft"), ("median_queue_ms", "ttft"),
                                           ("mean_itl_ms", "itl"), ("p90_tpot_ms", "itl"),
                                           ("median_e2el_ms", "e2el"), ("output_throughput", "throughput"),
                                           ("request_goodput", "throughput"), ("completed", None),
                                           ("preemptions", None)])
def test_metrics_fall_in_their_groups(metric, group):
    assert group_of(metric) == group


def test_the_shipped_residuals_are_usable():
    s = shipped()
    assert s["points"] >= 10 and set(s["engines_measured"]) <= {"vllm", "sglang", "trtllm"}
    assert set(s["sigmas"]) <= set(GROUPS) and {"ttft", "itl", "throughput"} <= set(s["sigmas"])
    assert all(0 < v < 5 and math.isfinite(v) for v in s["sigmas"].values())


def test_widening_keeps_the_kernel_interval_and_the_estimate_and_grows_with_sigma():
    metrics = {"p99_ttft_ms": 100.0, "mean_itl_ms": 10.0, "completed": 5.0}
    kernel = {"p99_ttft_ms": [90.0, 120.0], "mean_itl_ms": [10.5, 11.0], "completed": [5.0, 5.0]}
    assert widen(metrics, kernel, {}) == {k: list(v) for k, v in kernel.items()}
    small, large = widen(metrics, kernel, {"ttft": 0.1, "itl": 0.1}), widen(metrics, kernel, {"ttft": 0.5, "itl": 0.5})
    for key in ("p99_ttft_ms", "mean_itl_ms"):
        assert large[key][0] < small[key][0] <= min(kernel[key][0], metrics[key])
        assert large[key][1] > small[key][1] >= max(kernel[key][1], metrics[key])
    assert small["completed"] == [5.0, 5.0]  # (no group: as drawn)
    # a point interval widens to exactly the serving spread's 90% band
    alone = widen({"p99_ttft_ms": 100.0}, {"p99_ttft_ms": [100.0, 100.0]}, {"ttft": 0.3})["p99_ttft_ms"]
    assert alone == pytest.approx([100 * math.exp(-1.6448536 * 0.3), 100 * math.exp(1.6448536 * 0.3)], rel=1e-6)


def test_the_probability_an_slo_holds():
    draws = [{"p99_ttft_ms": v, "median_ttft_ms": v / 2, "p99_tpot_ms": 40.0} for v in (80.0, 100.0, 120.0, 140.0)]
    slos = {"p99_ttft_ms": 110.0}
    assert met_probability(draws, slos, {}) == pytest.approx(0.5)  # (no spread: the share of draws)
    assert met_probability(draws, {"p99_ttft_ms": 100.0}, {"ttft": 1e-9}) == pytest.approx(0.375)  # (a tie: half)
    p = [met_probability(draws, {"p99_ttft_ms": limit}, {"ttft": 0.3}) for limit in (60, 100, 150, 400)]
    assert all(0 < a < b < 1 for a, b in zip(p, p[1:]))
    # two groups multiply; within a group the worse ratio decides
    both = met_probability(draws, {"p99_ttft_ms": 110.0, "p99_tpot_ms": 50.0}, {"ttft": 0.3, "itl": 0.2})
    one = met_probability(draws, {"p99_ttft_ms": 110.0}, {"ttft": 0.3})
    z = math.log(50 / 40) / 0.2
    assert both == pytest.approx(one * 0.5 * math.erfc(-z / math.sqrt(2)), rel=1e-12)
    same = met_probability(draws, {"p99_ttft_ms": 110.0, "median_ttft_ms": 1e9}, {"ttft": 0.3})
    assert same == pytest.approx(one, rel=1e-12)


def test_serve_widens_the_served_engines_intervals_only():
    reqs = random_requests(60, 512, 64, rate=8.0, seed=2)
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs, interval_samples=4, seed=1)
    out = r.as_dict()
    assert out["interval_serving_sigma"] == shipped()["sigmas"] and out["interval_serving_source"]
    for key in ("p99_ttft_ms", "mean_itl_ms", "output_throughput"):
        (klo, khi), (lo, hi) = out["interval_kernel_model"][key], out["interval"][key]
        assert lo < min(klo, out[key]) and hi > max(khi, out[key])
    static = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="static", max_num_seqs=8, interval_samples=4)
    assert static.interval == static.interval_kernel and not static.as_dict()["interval_serving_sigma"]
    rep = slo_report(r.metrics, {"p99_ttft_ms": r.metrics["p99_ttft_ms"] * 1.5}, r.draws, r.serving_sigmas)
    row = rep["p99_ttft_ms"]
    assert row["met"] and 0.5 < row["met_probability"] < 1 and row["met_share_of_draws"] >= row["met_probability"]
    assert np.isfinite(row["met_probability"])
