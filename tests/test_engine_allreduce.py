"""The serving engines' own TP AllReduce (algorithms "engine" and "custom"): the measured
times where the GPU's link has figures, a straight line between them, never above NCCL's
price, NCCL's ring elsewhere."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.models.kernels import phase_kernels
from rooflinesim.ops.collectives import ENGINE_ALGORITHMS, Collective
from rooflinesim.ops.engine_allreduce import MiB, _data, algorithms, bandwidth, engine_allreduce_s, points
from rooflinesim.pricing import collective_time
from rooflinesim.serve.defaults import ENGINES

H100 = load_spec("h100")


def _time(nbytes, n, algorithm, spec=H100):
    op = Collective(kind="allreduce", bytes=nbytes, world_size=n, algorithm=algorithm)
    return collective_time(op, spec, resolve_profile(spec, None)).latency_s


def _row(n: int, source: str, size: int) -> dict:
    """A measured row of the data: backend -> seconds."""
    for t in _data()["links"]["nvlink4"]["tables"]:
        if t["world_size"] == n and source in t["source"]:
            for row in t["rows"]:
                if row[0] == size:
                    return {c: v for c, v in zip(t["columns"][1:], row[1:]) if v is not None}
    raise KeyError((n, source, size))


def test_the_algorithms_are_named_alike_everywhere():
    from rooflinesim.cli.main import cli
    from rooflinesim.models.deploy import ALLREDUCE
    from rooflinesim.ops.collectives import ALGORITHMS

    assert set(algorithms()) == set(ENGINE_ALGORITHMS) == set(ALLREDUCE)
    option = next(p for p in cli.commands["predict"].commands["allreduce"].params if p.name == "algorithm")
    assert tuple(option.type.choices) == ALGORITHMS
    for command in (cli.commands["serve"], cli.commands["plan"], cli.commands["predict"].commands["model"]):
        option = next(p for p in command.params if p.name == "allreduce")
        assert tuple(option.type.choices) == ALLREDUCE


@pytest.mark.parametrize("algorithm", ENGINE_ALGORITHMS)
@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_each_measured_size_takes_the_fastest_of_the_algorithms_backends(algorithm, n):
    backends = _data()["algorithms"][algorithm]["backends"]
    x, t = points("nvlink4", n, algorithm)
    assert np.all(np.diff(x) > 0) and np.all(t > 0)
    row = _row(n, "24111", 4 * MiB) if n > 2 else _row(n, "24111", MiB // 2)
    size = 4 * MiB if n > 2 else MiB // 2
    if n != 8:  # (one table: the fastest of its backends, exactly)
        want = min(v for c, v in row.items() if c in backends)
        assert engine_allreduce_s(size, n, "nvlink4", algorithm) == pytest.approx(want, rel=1e-12)
    assert 1e11 < bandwidth("nvlink4", n, algorithm) < 1e12  # (a few hundred GB/s past the last size)


def test_two_tables_at_one_size_are_averaged_backend_by_backend():
    a, b = _row(8, "24111", 4 * MiB), _row(8, "42324", 4 * MiB)
    engine = min(a["ca_1stage"], (a["symm_mem_multimem"] + b["symm_mem_multimem"]) / 2,
                 (a["symm_mem_two_shot"] + b["symm_mem_two_shot"]) / 2, (a["pynccl"] + b["pynccl"]) / 2)
    custom = min(a["ca_1stage"], a["ca_2stage"], (a["pynccl"] + b["pynccl"]) / 2)
    assert engine_allreduce_s(4 * MiB, 8, "nvlink4", "engine") == pytest.approx(engine, rel=1e-12)
    assert engine_allreduce_s(4 * MiB, 8, "nvlink4", "custom") == pytest.approx(custom, rel=1e-12)


def test_between_and_past_the_sizes():
    x, t = points("nvlink4", 8, "engine")
    mid = (x[-2] + x[-1]) / 2
    assert engine_allreduce_s(mid, 8, "nvlink4") == pytest.approx((t[-2] + t[-1]) / 2, rel=1e-12)
    assert engine_allreduce_s(x[0] / 4, 8, "nvlink4") == pytest.approx(t[0], rel=1e-12)  # (a latency floor)
    far = x[-1] * 2
    assert engine_allreduce_s(far, 8, "nvlink4") == pytest.approx(
        t[-1] + x[-1] / bandwidth("nvlink4", 8, "engine"), rel=1e-12)
    # (the 2-GPU table has one point: past it, the 4-GPU slope)
    assert bandwidth("nvlink4", 2, "custom") == bandwidth("nvlink4", 4, "custom")


def test_symmetric_memory_is_what_makes_vllm_faster_at_eight_gpus():
    """At 8 GPUs and 2-32 MiB, multimem beats the custom kernels and NCCL: vLLM's algorithm
    prices those sizes below the custom one; at 64 MiB both are NCCL's (PR 42324's pynccl)."""
    for mb in (2, 4, 8, 16, 32):
        assert _time(mb * MiB, 8, "engine") < 0.85 * _time(mb * MiB, 8, "custom")
    assert _time(64 * MiB, 8, "engine") == pytest.approx(_time(64 * MiB, 8, "custom"), rel=1e-12)


def test_small_allreduces_take_the_engines_time():
    for n in (2, 4, 8):
        for algorithm in ENGINE_ALGORITHMS:
            assert _time(256 * 1024, n, algorithm) < 0.6 * _time(256 * 1024, n, "ring")


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1024, 2**30), n=st.sampled_from([2, 3, 4, 5, 6, 8]),
       algorithm=st.sampled_from(ENGINE_ALGORITHMS))
def test_the_engines_allreduce_is_never_slower_than_ncclss(size, n, algorithm):
    engine, ring = _time(size, n, algorithm), _time(size, n, "ring")
    assert 0 < engine <= ring * (1 + 1e-12)
    if n in (3, 5):  # (no figures for these world sizes: NCCL's ring)
        assert engine == pytest.approx(ring, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(a=st.integers(1024, 2**29), b=st.integers(1024, 2**29), n=st.sampled_from([2, 4, 6, 8]),
       algorithm=st.sampled_from(ENGINE_ALGORITHMS))
def test_more_bytes_never_take_less_time(a, b, n, algorithm):
    lo, hi = sorted((a, b))
    assert engine_allreduce_s(lo, n, "nvlink4", algorithm) <= engine_allreduce_s(hi, n, "nvlink4", algorithm) * (
        1 + 1e-12)


def test_a_link_without_figures_runs_nccls_ring():
    a100 = load_spec("a100-sxm4-80gb")
    assert a100.interconnect.link not in _data()["links"]
    for algorithm in ENGINE_ALGORITHMS:
        assert _time(512 * 1024, 4, algorithm, a100) == pytest.approx(_time(512 * 1024, 4, "ring", a100), rel=1e-12)


def test_engine_deployments_allreduce_as_the_engines_do_and_transformers_as_nccl():
    from rooflinesim.models.kernels import Phase

    model = load_config("llama-3.1-8b")
    ph = Phase("decode", batch=8, seq_q=1, seq_kv=1024, sequences=8)
    for kw, want in (({}, "engine"), ({"allreduce": "custom"}, "custom"),
                     ({"kernels": "hf", "hf_cache": "dynamic"}, "ring")):
        d = Deployment(tp=2, **kw)
        algorithms = {k.args["algorithm"] for k in phase_kernels(model, d, ph) if k.args.get("kind") == "allreduce"}
        assert algorithms == {want}
    with pytest.raises(UserError, match="--allreduce must be one of engine, custom"):
        Deployment(tp=2, allreduce="nccl")


def test_each_engine_runs_its_own_allreduce_by_default():
    assert ENGINES["vllm"].allreduce == "engine"
    assert ENGINES["sglang"].allreduce == ENGINES["trtllm"].allreduce == "custom"


def test_the_data_names_its_sources():
    d = _data()
    sources = {t["source"] for t in d["links"]["nvlink4"]["tables"]}
    assert sources == {"vllm-project/vllm PR 24111", "vllm-project/vllm PR 42324"}
    assert {t["world_size"] for t in d["links"]["nvlink4"]["tables"]} == {2, 4, 6, 8}
    for t in d["links"]["nvlink4"]["tables"]:
        assert np.all(np.diff([r[0] for r in t["rows"]]) > 0) and all(len(r) == len(t["columns"]) for r in t["rows"])


def test_serve_and_predict_model_name_the_allreduce_they_price():
    from helpers import run_cli

    base = ["--model", "llama-3.1-8b", "--gpu", "h200", "--tp", "2"]
    seen = {}
    for engine, extra in (("vllm", []), ("sglang", []), ("vllm", ["--allreduce", "custom"])):
        code, out, err = run_cli(["serve", *base, "--engine", engine, "--rate", "4", "--num-prompts", "40",
                                  "--interval-samples", "0", *extra, "--json"])
        assert code == 0, err
        got = json.loads(out)
        seen[(engine, bool(extra))] = got["deployment"]["allreduce"]
        assert got["allreduce_source"] == ("given (--allreduce)" if extra else ENGINES[engine].allreduce_source)
    assert seen == {("vllm", False): "engine", ("sglang", False): "custom", ("vllm", True): "custom"}
    code, out, _ = run_cli(["predict", "model", *base, "--batch", "64", "--engine", "trtllm", "--json"])
    assert code == 0 and json.loads(out)["deployment"]["allreduce"] == "custom"
    code, _, err = run_cli(["serve", *base, "--allreduce", "nccl", "--num-prompts", "10"])
    assert code == 2 and "Traceback" not in err
