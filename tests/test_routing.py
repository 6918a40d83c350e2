"""The busiest expert under uniform top-k routing: exact values, Monte Carlo, bounds, and
the ways it is computed (curve or direct, sympy)."""

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.ops import MoE
from rooflinesim.ops.routing import busiest_direct, expected_busiest, expected_touched, sample_loads

TABLE = yaml.safe_load((Path(__file__).parent / "data" / "busiest_expert.yaml").read_text(encoding="utf-8"))


def sampled_busiest(tokens, experts, top_k, rel_se=0.003, most=60_000):
    """Mean busiest rows over sampled routings, and its relative standard error."""
    rng = np.random.default_rng([tokens, experts, top_k])
    m = sample_loads(tokens, experts, top_k, 500, rng).max(axis=1)
    rel = m.std() / m.mean()
    more = int(min(most, (rel / rel_se) ** 2)) - m.size
    if more > 0:
        m = np.concatenate([m, sample_loads(tokens, experts, top_k, more, rng).max(axis=1)])
    return m.mean(), m.std() / math.sqrt(m.size) / m.mean()


@pytest.mark.parametrize("case", TABLE["cases"],
                         ids=lambda c: f"E{c['experts']}-k{c['top_k']}-T{c['tokens']}")
def test_busiest_expert_table(case):
    rows = expected_busiest(case["tokens"], case["experts"], case["top_k"])
    assert rows == pytest.approx(case["rows"], rel=TABLE["tolerance"]), case["how"]


def test_one_token_is_one_row_exactly():
    assert expected_busiest(1, 256, 8) == 1.0
    assert np.all(expected_busiest(np.ones(3), 256, 8) == 1.0)


@st.composite
def routings(draw):
    experts = draw(st.integers(8, 256))
    top_k = draw(st.integers(1, min(8, experts)))
    doublings = draw(st.integers(0, 14))  # tokens spread evenly in log over 1-16,384
    tokens = draw(st.integers(2**doublings, min(2 ** (doublings + 1) - 1, 16384)))
    return tokens, experts, top_k


@settings(max_examples=15, deadline=None)
@given(routings())
def test_busiest_expert_matches_sampled_routings(case):
    tokens, experts, top_k = case
    mean, rel_se = sampled_busiest(tokens, experts, top_k)
    assert rel_se < 0.004  # (sampled closely enough for a 2% test to mean something)
    assert expected_busiest(tokens, experts, top_k) == pytest.approx(mean, rel=0.02)


@settings(max_examples=25, deadline=None)
@given(routings())
def test_busiest_expert_bounds(case):
    tokens, experts, top_k = case
    rows = expected_busiest(tokens, experts, top_k)
    mean = tokens * top_k / experts
    assert math.isfinite(rows)
    assert max(1.0, math.ceil(mean - 1e-9)) <= rows <= tokens  # the loads are whole and add up to T*k
    # a token more never lightens the busiest expert; more experts to share them, never heavier
    assert expected_busiest(tokens + 1, experts, top_k) >= rows * (1 - 1e-6)
    assert expected_busiest(tokens, 2 * experts, top_k) <= rows * (1 + 1e-6)


def test_busiest_expert_is_finite_far_out():
    tokens = np.array([0, 0.5, 1, 7, 1e3, 1e6, 1e9, 1e12, 1e15])
    for experts, top_k in ((8, 1), (8, 7), (8, 8), (256, 8), (1024, 16), (2, 1)):
        with np.errstate(all="raise"):
            rows = expected_busiest(tokens, experts, top_k)
            direct = busiest_direct(tokens[:-2], experts, top_k)
        assert np.all(np.isfinite(rows)) and np.all(rows <= tokens)
        assert np.all(rows >= np.minimum(tokens, 1))
        assert np.all(rows >= tokens * top_k / experts * (1 - 1e-12))
        np.testing.assert_allclose(rows[:-2], direct, rtol=2e-3)
    assert expected_busiest(0, 8, 2) == 0.0


def test_curve_and_direct_agree():
    tokens = np.concatenate([np.arange(1.0, 200), np.geomspace(200, 1e8, 300), [2.5, 70.3, 1234.5]])
    for experts, top_k in ((8, 2), (60, 4), (128, 6), (256, 8)):
        np.testing.assert_allclose(expected_busiest(tokens, experts, top_k),
                                   busiest_direct(tokens, experts, top_k), rtol=2e-3)
    # arrays of experts or top-k are computed directly, element by element
    e, k = np.array([8, 64, 256]), np.array([2, 6, 8])
    np.testing.assert_allclose(expected_busiest(16, e, k),
                               [expected_busiest(16, int(a), int(b)) for a, b in zip(e, k)], rtol=2e-3)


def test_fractional_tokens_lie_between_whole_counts():
    lo, hi = expected_busiest(5, 16, 2), expected_busiest(6, 16, 2)
    assert expected_busiest(5.25, 16, 2) == pytest.approx(lo + 0.25 * (hi - lo), rel=2e-3)


def test_sampler_keeps_the_routing_rules():
    rng = np.random.default_rng(0)
    for tokens, experts, top_k in ((5, 8, 3), (300, 16, 4)):  # (token by token; expert by expert)
        loads = sample_loads(tokens, experts, top_k, 20000, rng)
        assert np.all(loads.sum(axis=1) == tokens * top_k) and loads.max() <= tokens
        np.testing.assert_allclose(loads.mean(axis=0), tokens * top_k / experts, rtol=0.02)
        # negatively dependent: covariance -T k (E - k) / (E^2 (E - 1))
        cov = np.cov(loads[:, :2].T)[0, 1]
        exact = -tokens * top_k * (experts - top_k) / (experts**2 * (experts - 1))
        assert cov == pytest.approx(exact, rel=0.15)


def test_touched_experts_formula():
    t, e, k = 10, 64, 6
    assert expected_touched(t, e, k) == pytest.approx(e * (1 - (1 - k / e) ** t))
    rng = np.random.default_rng(1)
    touched = (sample_loads(t, e, k, 20000, rng) > 0).sum(axis=1).mean()
    assert expected_touched(t, e, k) == pytest.approx(touched, rel=0.005)


def test_sympy_gets_an_undefined_function():
    import sympy as sp

    t, e, k = sp.symbols("T E k", positive=True)
    rows = expected_busiest(t, e, k)
    assert isinstance(rows, sp.Function("busiest")) and rows.args == (t, e, k)
    w = MoE(tokens=t, hidden=64, ffn=64, experts=e, top_k=k, ep=2).work()  # the busiest GPU's rows
    assert w.tensor_flops["bf16"].has(sp.Function("busiest"))
