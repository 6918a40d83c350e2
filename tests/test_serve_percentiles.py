"""The percentiles a run reports (vLLM's --metric-percentiles): named as its client names them,
with intervals, and the P99 an SLO needs always there."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.serve.metrics import percentile_key, summary
from rooflinesim.serve.simulate import serve
from rooflinesim.serve.traffic import random_requests

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")
REQS = random_requests(150, 500, 60, rate=9.0, seed=4, range_ratio=0.5)


def test_percentiles_are_named_as_vllms_client_names_them():
    assert [percentile_key(p) for p in (50, 90.0, 95, 99.9, 100)] == ["p50", "p90", "p95", "p99.9", "p100"]


def test_a_run_reports_the_percentiles_asked_for_with_intervals():
    r = serve(LLAMA, H200, FITTED, Deployment(), REQS, interval_samples=3, percentiles=(95, 99.9))
    m, s = r.metrics, r.served
    ttft = (s.first_token_s - s.arrival_s) * 1e3
    assert m["p95_ttft_ms"] == pytest.approx(float(np.percentile(ttft, 95)))
    assert m["p99.9_ttft_ms"] == pytest.approx(float(np.percentile(ttft, 99.9)))
    assert m["median_ttft_ms"] == pytest.approx(float(np.median(ttft)))
    assert "p90_ttft_ms" not in m and "p99_ttft_ms" not in m
    for key in ("p95_ttft_ms", "p99.9_itl_ms", "p95_e2el_ms"):
        lo, hi = r.interval[key]
        assert lo <= m[key] <= hi
    default = summary(s)
    assert default["p90_ttft_ms"] == pytest.approx(float(np.percentile(ttft, 90))) and "p95_ttft_ms" not in default
    assert m["median_ttft_ms"] <= m["p95_ttft_ms"] <= m["p99.9_ttft_ms"]


@pytest.mark.parametrize("bad", [(), (0,), (101,), tuple(range(1, 12))])
def test_percentiles_out_of_range_are_refused(bad):
    with pytest.raises(UserError, match="percentiles must be"):
        serve(LLAMA, H200, FITTED, Deployment(), REQS, percentiles=bad)


BASE = ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "80", "--rate", "6",
        "--interval-samples", "0"]


def test_cli_metric_percentiles():
    code, out, err = run_cli([*BASE, "--metric-percentiles", "50,95,99.9", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert got["metric_percentiles"] == [50.0, 95.0, 99.9]
    assert {"median_tpot_ms", "p95_tpot_ms", "p99.9_tpot_ms"} <= set(got) and "p99_tpot_ms" not in got
    code, out, _ = run_cli([*BASE, "--metric-percentiles", "95"])
    header = next(line for line in out.splitlines() if line.startswith("ms "))
    assert code == 0 and header.split() == ["ms", "mean", "median", "p95"]
    # an SLO on the P99 is checked whatever percentiles are shown
    code, out, err = run_cli([*BASE, "--metric-percentiles", "95", "--slo-ttft-p99", "2s", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert "p99_ttft_ms" in got and got["slo"]["p99_ttft_ms"]["met"] in (True, False)
    for bad in ("abc", "0", "101", "90,,x"):
        code, _, err = run_cli([*BASE, "--metric-percentiles", bad])
        assert code == 2 and "--metric-percentiles" in err and "Traceback" not in err
