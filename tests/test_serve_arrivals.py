"""When requests are sent: vLLM bench serve's schedule (its gaps rescaled to the rate asked
for, vllm-project/vllm PR 21108), the older clients' gaps as drawn, and vLLM's ramp-up."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.errors import UserError
from rooflinesim.serve.traffic import arrivals, ramp_rates, random_requests


def test_vllms_schedule_sends_the_rate_asked_for():
    n, rate = 1000, 10.0
    filled = [arrivals(n, rate, 1.0, np.random.default_rng(s)) for s in range(40)]
    drawn = [arrivals(n, rate, 1.0, np.random.default_rng(s), fill=False) for s in range(40)]
    for t in filled + drawn:
        assert t[0] == 0 and (np.diff(t) >= 0).all() and t.size == n
    # rescaled, the n gaps add up to n / rate: the last send is short of it by the first gap alone
    ends = np.array([t[-1] for t in filled])
    assert (ends < n / rate).all() and (n / rate - ends).max() < 20 / rate
    assert np.std(ends) < 0.05 * np.std([t[-1] for t in drawn])
    # gamma gaps keep their shape under the rescaling: bursty ones stay bursty
    cv = lambda t: np.std(np.diff(t)) / np.mean(np.diff(t))  # noqa: E731
    assert cv(arrivals(n, rate, 0.25, np.random.default_rng(1))) > 1.5
    assert cv(arrivals(n, rate, 1.0, np.random.default_rng(1))) == pytest.approx(1.0, abs=0.15)


def test_the_older_clients_gaps_are_drawn_as_they_come():
    t = arrivals(6, 4.0, 2.0, np.random.default_rng(7), fill=False)
    gaps = np.random.default_rng(7).gamma(shape=2.0, scale=1.0 / 8.0, size=5)
    assert np.allclose(t, np.concatenate([[0.0], np.cumsum(gaps)]))
    assert (arrivals(5, math.inf, 1.0, np.random.default_rng(0)) == 0).all()


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_a_ramp_up_sends_each_request_at_its_own_rate(strategy):
    rates = ramp_rates(3001, (strategy, 2.0, 32.0))
    assert rates[0] == pytest.approx(2.0) and rates[-1] == pytest.approx(32.0) and (np.diff(rates) > 0).all()
    assert rates[1500] == pytest.approx(17.0 if strategy == "linear" else 8.0)
    t = arrivals(3001, math.inf, 1.0, np.random.default_rng(3), ramp=(strategy, 2.0, 32.0))
    gaps = np.diff(t)
    assert np.mean(gaps[:300]) == pytest.approx(np.mean(1 / rates[1:301]), rel=0.2)
    assert np.mean(gaps[-300:]) == pytest.approx(1 / 32.0, rel=0.2)
    assert np.allclose(ramp_rates(10, ("exponential", 5.0, 5.0)), 5.0)


@pytest.mark.parametrize("ramp, says", [(("linear", 0.0, 10.0), "above 0"), (("linear", 12.0, 10.0), "at most"),
                                         (("cubic", 1.0, 10.0), "unknown ramp-up"),
                                         (("linear", 1.0, math.inf), "finite")])
def test_bad_ramps_are_one_sentence(ramp, says):
    with pytest.raises(UserError, match=says):
        random_requests(10, 100, 10, ramp=ramp)


BASE = ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "300", "--interval-samples", "0"]


def test_cli_ramps_up_as_vllms_client():
    code, out, err = run_cli([*BASE, "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2",
                              "--ramp-up-end-rps", "30", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert (got["ramp_up_strategy"], got["ramp_up_start_rps"], got["ramp_up_end_rps"]) == ("linear", 2.0, 30.0)
    assert got["request_rate"] is None and got["all_at_once"] is False and got["completed"] == 300
    code, out, _ = run_cli([*BASE, "--ramp-up-strategy", "exponential", "--ramp-up-start-rps", "2",
                            "--ramp-up-end-rps", "30"])
    assert code == 0 and "ramp-up (exponential) from 2 to 30 req/s" in out


@pytest.mark.parametrize("bad, says", [
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "2", "--ramp-up-end-rps", "9", "--rate", "5"],
     "not both"),
    (["--ramp-up-start-rps", "2"], "go with --ramp-up-strategy"),
    (["--ramp-up-strategy", "linear", "--ramp-up-end-rps", "9"], "needs both"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "9", "--ramp-up-end-rps", "2"], "at most"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "0", "--ramp-up-end-rps", "2"], "--ramp-up-start-rps"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "2", "--max-rate",
      "--slo-ttft-p99", "1s"], "constant rate"),
])
def test_cli_refuses_a_ramp_it_cannot_run_in_one_sentence(bad, says):
    code, _, err = run_cli([*BASE, *bad])
    assert code == 2 and says in err and "Traceback" not in err


def test_sglangs_client_draws_its_own_lengths_and_sends_its_gaps_as_drawn():
    from rooflinesim.serve.traffic import random_lengths

    rng = np.random.default_rng(0)
    x = random_lengths(20000, 1000, 0.5, rng, "sglang")
    assert x.min() >= 500 and x.max() <= 1000 and x.mean() == pytest.approx(750, rel=0.02)
    assert (random_lengths(50, 1000, 1.0, rng, "sglang") == 1000).all()
    assert random_lengths(20000, 100, 0.0, rng, "sglang").min() == 1
    v = random_lengths(20000, 1000, 0.5, rng)
    assert v.min() >= 500 and v.max() <= 1500
    with pytest.raises(UserError, match="--client sglang, takes 1"):
        random_lengths(5, 100, 1.0, rng)
    with pytest.raises(UserError, match="unknown benchmark client"):
        random_lengths(5, 100, 0.5, rng, "trtllm-bench")
    # its gaps as drawn: the same as the older clients' schedule, not rescaled
    a = random_requests(300, 100, 10, rate=5.0, seed=9, client="sglang")
    rng = np.random.default_rng(9)
    random_lengths(300, 100, 0.0, rng, "sglang"), random_lengths(300, 10, 0.0, rng, "sglang")
    assert np.allclose(a.arrival_s, arrivals(300, 5.0, 1.0, rng, fill=False))


def test_cli_client_sglang():
    code, out, err = run_cli([*BASE, "--client", "sglang", "--input-len", "1000", "--range-ratio", "1", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert got["client"] == "sglang" and got["total_input_tokens"] == 300 * 1000
    for bad, says in ((["--range-ratio", "1"], "--client sglang, takes 1"),
                      (["--client", "sglang", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
                        "--ramp-up-end-rps", "2"], "has none")):
        code, _, err = run_cli([*BASE, *bad])
        assert code == 2 and says in err and "Traceback" not in err


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), rate=st.floats(0.01, 1e4), burst=st.floats(0.05, 50.0), seed=st.integers(0, 2**31),
       fill=st.booleans())
def test_any_schedule_starts_at_zero_and_never_goes_back(n, rate, burst, seed, fill):
    t = arrivals(n, rate, burst, np.random.default_rng(seed), fill=fill)
    assert t.size == n and t[0] == 0 and (np.diff(t) >= 0).all() and np.isfinite(t).all()
    if fill and n > 1:  # (rescaled: the n gaps add up to n / rate, the first not counted)
        assert t[-1] <= n / rate * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 300), start=st.floats(0.1, 100.0), grow=st.floats(1.0, 50.0),
       strategy=st.sampled_from(["linear", "exponential"]), seed=st.integers(0, 2**31))
def test_any_ramp_rises_from_its_start_to_its_end(n, start, grow, strategy, seed):
    rates = ramp_rates(n, (strategy, start, start * grow))
    assert rates[0] == pytest.approx(start) and rates[-1] == pytest.approx(start * grow)
    assert (np.diff(rates) >= -1e-9 * rates[1:]).all()
    t = arrivals(n, math.inf, 1.0, np.random.default_rng(seed), ramp=(strategy, start, start * grow))
    assert t[0] == 0 and (np.diff(t) >= 0).all() and np.isfinite(t).all()
