"""The serving engines' own TP AllReduce (algorithm "engine"): the measured line where the
GPU's link has figures, never above NCCL's price, NCCL's ring elsewhere."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.models.kernels import phase_kernels
from rooflinesim.ops.collectives import Collective
from rooflinesim.ops.engine_allreduce import _data, line
from rooflinesim.pricing import collective_time

H100 = load_spec("h100")


def _time(nbytes, n, algorithm, spec=H100):
    op = Collective(kind="allreduce", bytes=nbytes, world_size=n, algorithm=algorithm)
    return collective_time(op, spec, resolve_profile(spec, None)).latency_s


@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_the_line_runs_through_the_measured_points(n):
    a, b = line("nvlink4", n)
    assert 0 < a < 2e-5 and 1e11 < b < 1e12  # (a few microseconds, a few hundred GB/s)
    for size, t in _data()["links"]["nvlink4"][str(n)]["points"]:
        assert a + size / b == pytest.approx(t, rel=0.25)  # (a line through backends' best times)


def test_small_allreduces_take_the_engines_time_and_large_ones_nccls():
    for n in (2, 4, 8):
        small, large = 256 * 1024, 65 * 2**20  # (past the engine's backends' largest: NCCL's)
        assert _time(small, n, "engine") < 0.6 * _time(small, n, "ring")
        assert _time(large, n, "engine") == pytest.approx(_time(large, n, "ring"), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1024, 2**30), n=st.sampled_from([2, 3, 4, 5, 6, 8]))
def test_the_engines_allreduce_is_never_slower_than_ncclss(size, n):
    engine, ring = _time(size, n, "engine"), _time(size, n, "ring")
    assert 0 < engine <= ring * (1 + 1e-12)
    if n in (3, 5):  # (no figures for these world sizes: NCCL's ring)
        assert engine == pytest.approx(ring, rel=1e-12)


def test_a_link_without_figures_runs_nccls_ring():
    a100 = load_spec("a100-sxm4-80gb")
    assert a100.interconnect.link not in _data()["links"]
    assert _time(512 * 1024, 4, "engine", a100) == pytest.approx(_time(512 * 1024, 4, "ring", a100), rel=1e-12)


def test_engine_deployments_allreduce_as_the_engines_do_and_transformers_as_nccl():
    from rooflinesim.models.kernels import Phase

    model = load_config("llama-3.1-8b")
    ph = Phase("decode", batch=8, seq_q=1, seq_kv=1024, sequences=8)
    for kernels, want in (("engine", "engine"), ("hf", "ring")):
        d = Deployment(tp=2, kernels=kernels, **({"hf_cache": "dynamic"} if kernels == "hf" else {}))
        algorithms = {k.args["algorithm"] for k in phase_kernels(model, d, ph) if k.args.get("kind") == "allreduce"}
        assert algorithms == {want}


def test_the_data_names_its_source():
    d = _data()
    assert "24111" in d["source"] and {k for k in d["links"]["nvlink4"] if k[0] != "_"} == {"2", "4", "6", "8"}
    assert np.all(np.diff([p[0] for p in d["links"]["nvlink4"]["4"]["points"]]) > 0)
