"""`serve`: engines stepped over request streams on the calibrated step times. Checked
against predict_model (a static batch, a lone request), against queueing identities
(Little's law, tokens conserved), for reproducibility and monotonicity, and for bad input."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import run_cli
from hypothesis import event, given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.cli.main import cli
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.models.workload import predict_model
from rooflinesim.serve.schedulers import base, trtllm, vllm
from rooflinesim.serve.simulate import serve
from rooflinesim.serve.traffic import Requests, parse_trace, random_requests

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")
MIXTRAL = load_config("mixtral-8x7b")


@pytest.mark.parametrize("model, d", [(LLAMA, Deployment()), (MIXTRAL, Deployment(tp=2, weights="fp8")),
                                      (load_config("qwen2.5-7b"), Deployment(kv_cache="fp8"))],
                         ids=["llama-8b", "mixtral-tp2-fp8", "qwen-7b-fp8kv"])
@pytest.mark.parametrize("batch, prompt, gen", [(1, 2048, 64), (16, 512, 200), (64, 128, 32)])
def test_a_static_batch_agrees_with_predict_model(model, d, batch, prompt, gen):
    r = serve(model, H200, FITTED, d, random_requests(batch, prompt, gen), engine="static", max_num_seqs=batch)
    one = predict_model(model, H200, FITTED, d, batch=batch, prompt=prompt, gen=gen)
    m = r.metrics
    assert m["mean_ttft_ms"] == pytest.approx(one.ttft_s * 1e3, rel=1e-9)  # (priced as predict_model prices it)
    if gen > 1:  # predict_model averages four decode contexts; serve takes every step
        assert m["mean_tpot_ms"] == pytest.approx(one.tpot_s * 1e3, rel=0.01)
    assert m["mean_e2el_ms"] == pytest.approx(one.e2e_s * 1e3, rel=0.01)


@pytest.mark.parametrize("model, d", [(LLAMA, Deployment()), (MIXTRAL, Deployment(tp=2, weights="fp8"))],
                         ids=["llama-8b", "mixtral-tp2-fp8"])
def test_a_lone_request_at_a_low_rate_takes_predict_models_times(model, d):
    reqs = random_requests(40, 1500, 100, rate=0.1, seed=3)
    m = serve(model, H200, FITTED, d, reqs, step_overhead_s=0.0, request_overhead_s=0.0).metrics  # (the kernels alone)
    one = predict_model(model, H200, FITTED, d, batch=1, prompt=1500, gen=100)
    assert m["median_ttft_ms"] == pytest.approx(one.ttft_s * 1e3, rel=0.01)
    assert m["median_tpot_ms"] == pytest.approx(one.tpot_s * 1e3, rel=0.01)
    assert m["median_queue_ms"] == pytest.approx(0, abs=1e-9)  # (most find the engine idle)


def _run(n=400, rate=20.0, seed=1, **kw):
    return serve(LLAMA, H200, FITTED, Deployment(),
                 random_requests(n, 1024, 128, rate=rate, seed=seed, range_ratio=0.5), **kw)


def test_littles_law_and_token_conservation():
    r = _run()
    s, m = r.served, r.metrics
    # the step log's mean running count is the request rate times the time requests run
    running = float((s.steps["sequences"] * s.steps["duration_s"]).sum() / s.steps["duration_s"].sum())
    in_engine = float(np.mean(s.finish_s - s.scheduled_s))
    busy = float(s.steps["duration_s"].sum())
    assert running == pytest.approx(m["completed"] / busy * in_engine, rel=0.03)
    # every output token but each request's first leaves a gap; every prompt token is computed once
    assert s.itl_s.size == int((s.output_tokens - 1).sum())
    assert int(s.steps["tokens"].sum()) == int(s.input_tokens.sum() + s.output_tokens.sum() - s.output_tokens.size)
    assert np.all(s.first_token_s >= s.scheduled_s) and np.all(s.finish_s >= s.first_token_s)


def test_the_same_seed_gives_the_same_answer():
    a, b, c = _run(seed=5).metrics, _run(seed=5).metrics, _run(seed=6).metrics
    assert a == b
    assert a["mean_ttft_ms"] != c["mean_ttft_ms"]


def test_latency_percentiles_grow_with_the_rate():
    runs = [_run(n=300, rate=rate).metrics for rate in (2.0, 8.0, 16.0, 24.0)]  # (up to about saturation)
    for key in ("p99_ttft_ms", "median_tpot_ms", "p99_e2el_ms", "output_throughput"):
        values = [m[key] for m in runs]
        assert values == sorted(values), key
    assert _run(n=300, rate=math.inf).metrics["p99_ttft_ms"] > runs[-1]["p99_ttft_ms"]


def test_throughput_stays_under_the_decode_ceiling():
    from rooflinesim.serve.steps import StepTimes

    r = _run(n=2000, rate=math.inf)
    st_ = StepTimes(LLAMA, H200, FITTED, Deployment(), max_tokens=8192, max_seqs=1024, max_context=2048)
    n = np.arange(1, 1025)
    ceiling = float(np.max(n / (st_.dense_decode[1:] + st_.logits[1:])))  # (no attention: an upper bound)
    assert r.metrics["output_throughput"] < ceiling


def test_preemption_by_recompute_when_the_cache_runs_out():
    r = _run(n=200, rate=math.inf, kv_tokens=60_000)
    assert r.metrics["preemptions"] > 0 and r.metrics["completed"] == 200
    s = r.served
    assert s.itl_s.size == int((s.output_tokens - 1).sum())
    assert np.all(np.isfinite(s.finish_s))
    assert int(s.steps["kv_blocks_used"].max()) <= r.engine.kv_blocks


def _the_same_steps(fast, slow, logged: tuple) -> None:
    """Two runs' metrics, each request's times, the gaps and the ``logged`` step fields
    agree (to rounding: a stretch sums in another order)."""
    assert fast.metrics.keys() == slow.metrics.keys()
    for k, v in fast.metrics.items():
        assert v == pytest.approx(slow.metrics[k], rel=1e-9), k
    a, b = fast.served, slow.served
    for f in ("scheduled_s", "first_token_s", "finish_s"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-12), f
    assert np.sort(a.itl_s) == pytest.approx(np.sort(b.itl_s), rel=1e-9, abs=1e-12)
    for f in logged:
        assert a.steps[f] == pytest.approx(b.steps[f], rel=1e-9, abs=1e-12), f


@pytest.mark.parametrize("rate, kv, concurrency, budget", [
    (5.0, None, None, None), (50.0, None, None, None), (math.inf, 80_000, None, None), (2.0, None, None, 512),
    (math.inf, None, 8, None), (30.0, 40_000, 64, 1024)])
@pytest.mark.parametrize("overlap", [True, False])  # (vLLM's async scheduling, and without)
def test_decode_stretches_take_the_steps_one_by_one_would(rate, kv, concurrency, budget, overlap, monkeypatch):
    # (stretches past finishes, and steps that take whole prompts, against the general step)
    kw = dict(n=300, rate=rate, kv_tokens=kv, concurrency=concurrency, max_num_batched_tokens=budget,
              max_num_seqs=budget and min(budget, 256),  # (vLLM: a budget holds a token of each running request)
              overlap_schedule=overlap)
    fast = _run(**kw)
    monkeypatch.setattr(vllm.VllmV1, "stretches", False)
    slow = _run(**kw)
    _the_same_steps(fast, slow, ("start_s", "duration_s", "tokens", "sequences"))


@pytest.mark.parametrize("rate, kv, concurrency, overlap", [
    (5.0, None, None, True), (2.0, None, None, False), (5.0, None, 4, True), (20.0, 60_000, None, True),
    (40.0, None, None, False)])
def test_light_loads_in_lockstep_take_the_fast_paths_steps(rate, kv, concurrency, overlap, monkeypatch):
    # (the fast paths' steps after either of them, taken on plain numbers: the same steps, KV
    # blocks in use included, as the fast paths take them on arrays)
    kw = dict(n=300, rate=rate, kv_tokens=kv, concurrency=concurrency, overlap_schedule=overlap)
    finished = []
    steps = vllm._Lockstep.steps

    def counted(self, *args):
        out = steps(self, *args)
        finished.append(out[1])
        return out

    monkeypatch.setattr(vllm._Lockstep, "steps", counted)
    fast = _run(**kw)
    assert sum(finished) > 0  # (requests finished in lockstep)
    monkeypatch.setattr(vllm.VllmV1, "lockstep", False)
    slow = _run(**kw)
    _the_same_steps(fast, slow, ("start_s", "duration_s", "tokens", "sequences", "sampled", "kv_blocks_used"))


@pytest.mark.parametrize("rate, kv, concurrency, overlap", [
    (5.0, None, None, True), (2.0, None, None, False), (5.0, None, 4, True), (20.0, 40_000, None, True)])
@pytest.mark.parametrize("engine_name", ["trtllm", "trtllm max_utilization", "sglang"])
def test_other_engines_in_lockstep_take_their_loops_steps(rate, kv, concurrency, overlap, engine_name, monkeypatch):
    # (TensorRT-LLM's stretches and whole-prompt joins after a stretch, under either capacity
    # policy (max_utilization's blocks of each step's tokens counted by their remainders),
    # SGLang's stretches and prefill batches of whole prompts after one, on plain numbers: the
    # same steps as their loops take them on arrays)
    from rooflinesim.serve.schedulers import sglang, trtllm

    engine_name, _, policy = engine_name.partition(" ")
    kw = dict(n=200, rate=rate, kv_tokens=kv, concurrency=concurrency, overlap_schedule=overlap, engine=engine_name)
    if policy:
        kw.update(capacity_policy=policy, block_size=16 if kv else 64)
    if engine_name == "sglang":
        kw.update(cuda_graph_max_bs=16)  # (past it, decode steps paced by the host)
    finished = []
    lockstep = {"trtllm": trtllm, "sglang": sglang}[engine_name]._Lockstep
    steps = lockstep.steps

    def counted(self, *args):
        out = steps(self, *args)
        finished.append(out[2])
        return out

    monkeypatch.setattr(lockstep, "steps", counted)
    fast = _run(**kw)
    assert sum(finished) > 0  # (requests finished in lockstep)
    monkeypatch.setattr(base.Sim, "stretches", False)
    slow = _run(**kw)
    _the_same_steps(fast, slow, ("start_s", "duration_s", "tokens", "sequences", "sampled", "kv_blocks_used"))
    assert fast.served.eager_decode_steps == slow.served.eager_decode_steps


@pytest.mark.parametrize("rate, kv, concurrency, budget, overlap", [
    (5.0, None, None, None, True), (5.0, None, None, None, False), (math.inf, 80_000, None, None, True),
    (math.inf, None, 8, None, False), (30.0, 40_000, 64, 1536, True)])
@pytest.mark.parametrize("engine_name, policy", [("sglang", None), ("trtllm", None), ("trtllm", "max_utilization")])
def test_other_engines_decode_stretches_take_the_steps_one_by_one_would(rate, kv, concurrency, budget, overlap,
                                                                        engine_name, policy, monkeypatch):
    # (SGLang's and TensorRT-LLM's decode-only steps taken at once, against their loops; the
    # KV in use too, each step's exact; SGLang past a CUDA-graph ceiling of 16 requests)
    kw = dict(n=200, rate=rate, kv_tokens=kv, concurrency=concurrency, max_num_batched_tokens=budget,
              max_num_seqs=budget and 256, overlap_schedule=overlap, engine=engine_name)
    kw.update(cuda_graph_max_bs=16) if engine_name == "sglang" else kw.update(capacity_policy=policy)
    fast = _run(**kw)
    monkeypatch.setattr(base.Sim, "stretches", False)
    slow = _run(**kw)
    _the_same_steps(fast, slow, ("start_s", "duration_s", "tokens", "sequences", "kv_blocks_used"))
    assert fast.served.eager_decode_steps == slow.served.eager_decode_steps


@settings(max_examples=60, deadline=None)
@given(bs=st.sampled_from([1, 2, 16, 64]), computed=st.lists(st.integers(-500, 5000), max_size=60),
       leave=st.lists(st.integers(0, 59), max_size=10), g=st.integers(0, 3000))
def test_lockstep_counts_the_blocks_of_its_requests(bs, computed, leave, g):
    # (the blocks the requests in lockstep fill, counted by their remainders as they join and
    # leave, are the sum over them, at one step count and over a range of them)
    from rooflinesim.serve.schedulers.lockstep import Lockstep

    class _Sim:
        output = np.full(64, 10**6)
        first = np.zeros(64)
    # (up to 60 requests: past COUNT_IN_NUMPY they are counted in numpy)
    lock = Lockstep(_Sim(), list(range(len(computed))), computed, [1] * len(computed))
    lock.count_blocks(bs)
    for r in sorted({r for r in leave if r < len(computed)}, reverse=True):
        lock.drop(r)
    lock.g = 7
    lock.join(40, 333, 0, 0.0)
    cs = [c + lock.g for c in lock.cbase]
    assert lock.held_at(lock.g + g) == sum(-(-(c + g) // bs) for c in cs)
    span = np.arange(g, g + 40)
    assert lock.held_over(lock.g + span).tolist() == [sum(-(-(c + x) // bs) for c in cs) for x in span.tolist()]


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0, 5), st.integers(1, 3000), st.integers(1, 300)), min_size=1, max_size=40),
       budget=st.sampled_from([256, 2048, 8192]), seqs=st.sampled_from([4, 64, 256]),
       kv=st.sampled_from([4000, 50_000, 10**6]), concurrency=st.sampled_from([None, 1, 7]),
       name=st.sampled_from(["vllm", "sglang", "trtllm", "trtllm max_utilization", "trtllm chunked"]))
def test_every_request_is_served_whatever_the_workload(reqs, budget, seqs, kv, concurrency, name):
    t, i, o = (np.array(x) for x in zip(*sorted(reqs)))
    if int(((i + o + 31) // 32).max()) * 32 > kv:
        kv = int(((i + o + 31) // 32).max()) * 32
    name, _, setting = name.partition(" ")
    trt = {}
    if name == "trtllm":  # (TensorRT-LLM's capacity policies, with chunked context or without)
        trt = dict(capacity_policy="max_utilization" if setting == "max_utilization" else None,
                   chunked_context=setting != "")
        if not trt["chunked_context"]:
            budget = max(budget, int(i.max()))  # (without chunks a prompt must fit a step)
    r = serve(LLAMA, H200, FITTED, Deployment(), Requests(t - t[0], i, o), engine=name,
              max_num_batched_tokens=max(budget, seqs), max_num_seqs=seqs, kv_tokens=kv, concurrency=concurrency,
              **trt)
    s = r.served
    assert int(s.steps["kv_blocks_used"].max()) <= r.engine.kv_blocks
    assert r.metrics["completed"] == len(reqs) and np.all(np.isfinite(s.finish_s))
    assert np.all(s.arrival_s >= t - t[0] - 1e-12)
    assert np.all(s.first_token_s > s.arrival_s) and np.all(s.finish_s >= s.first_token_s)
    assert s.itl_s.size == int((o - 1).sum()) and np.all(s.itl_s > 0)
    assert int(s.steps["sequences"].max()) <= seqs
    if name != "sglang":  # (an SGLang prefill batch's first request may pass the budget)
        assert int(s.steps["tokens"].max()) <= max(budget, seqs)


@pytest.mark.parametrize("name", ["sglang", "trtllm"])
def test_other_engines_take_predict_models_times_for_a_lone_request(name):
    reqs = random_requests(30, 1500, 100, rate=0.1, seed=3)
    m = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=name, step_overhead_s=0.0,
              request_overhead_s=0.0).metrics
    one = predict_model(LLAMA, H200, FITTED, Deployment(), batch=1, prompt=1500, gen=100)
    assert m["median_ttft_ms"] == pytest.approx(one.ttft_s * 1e3, rel=0.01)
    assert m["median_tpot_ms"] == pytest.approx(one.tpot_s * 1e3, rel=0.01)


def test_the_engines_measured_front_ends_are_their_defaults_and_say_where_they_come_from():
    """SGLang's HTTP, tokenization and scheduling outside the forward (6.9 ms, measured with a
    mock forward pass) and vLLM's (10.2 ms, its client's TTFT less its server's) are in every
    request's TTFT and E2EL by default, with their sources in the JSON; an engine with none
    measured adds none, and --request-overhead replaces it."""
    reqs = random_requests(30, 1500, 100, rate=0.1, seed=3)
    none = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang", request_overhead_s=0.0)
    default = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang")
    d = default.as_dict()
    assert d["request_overhead_s"] == pytest.approx(6.9e-3) and "tt-inference-server issue 3560" in d[
        "request_overhead_source"]
    for k in ("median_ttft_ms", "mean_e2el_ms"):
        assert default.metrics[k] == pytest.approx(none.metrics[k] + 6.9, rel=1e-6)
    assert default.metrics["median_itl_ms"] == pytest.approx(none.metrics["median_itl_ms"], rel=1e-9)
    vllm = serve(LLAMA, H200, FITTED, Deployment(), reqs).as_dict()
    assert vllm["request_overhead_s"] == pytest.approx(1.02e-2) and "PR 54628" in vllm["request_overhead_source"]
    vllm_none = serve(LLAMA, H200, FITTED, Deployment(), reqs, request_overhead_s=0.0).metrics
    assert vllm["median_ttft_ms"] == pytest.approx(vllm_none["median_ttft_ms"] + 10.2, rel=1e-6)
    trtllm = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="trtllm").as_dict()
    assert trtllm["request_overhead_s"] == 0.0 and "not measured" in trtllm["request_overhead_source"]
    given = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang", request_overhead_s=0.002).as_dict()
    assert given["request_overhead_s"] == 0.002 and given["request_overhead_source"].startswith("given")
    # (a step overhead given is named as given too, not as the engine's measured one)
    assert "PR 27614" in vllm["step_overhead_source"]
    stepped = serve(LLAMA, H200, FITTED, Deployment(), reqs, step_overhead_s=0.0).as_dict()
    assert stepped["step_overhead_source"].startswith("given")


def test_sglangs_eager_prefill_is_paced_by_the_slower_of_host_and_gpu():
    """With --eager-prefill a prefill batch of SGLang takes the corner of its GPU time and the
    host's measured time for a forward pass without a CUDA graph: a short prompt waits for
    the host (0.218 ms a Llama layer), a long one for the GPU; decode steps stay captured."""
    from rooflinesim.eager import joined
    from rooflinesim.serve.defaults import SGLANG_EAGER_HOST_S, eager_pass_host_s

    assert eager_pass_host_s(LLAMA, Deployment()) == pytest.approx(
        LLAMA.num_layers * SGLANG_EAGER_HOST_S["dense"])
    dsv3 = load_config("deepseek-v3")
    assert eager_pass_host_s(dsv3, Deployment(pp=2)) == pytest.approx(
        dsv3.num_layers * SGLANG_EAGER_HOST_S["mla_or_moe"] / 2)
    host = eager_pass_host_s(LLAMA, Deployment())
    for prompt in (16, 8000):
        lone = Requests(np.array([0.0]), np.array([prompt]), np.array([50]))
        runs = [serve(LLAMA, H200, FITTED, Deployment(), lone, engine="sglang", request_overhead_s=0.0,
                      eager_prefill=e) for e in (False, True)]
        (graph, eager) = (r.served.steps for r in runs)
        gpu = float(graph["duration_s"][0])
        assert float(eager["duration_s"][0]) == pytest.approx(float(joined(host, gpu, FITTED)), rel=1e-9)
        assert float(eager["duration_s"][0]) > max(gpu, host) * (1 - 1e-12)
        assert np.allclose(eager["duration_s"][1:], graph["duration_s"][1:], rtol=1e-12)
        if prompt == 16:  # (the host's time, not the GPU's, sets a short prompt's first token)
            short_gpu = gpu
            assert host > gpu
            assert runs[1].metrics["median_ttft_ms"] > runs[0].metrics["median_ttft_ms"] + (host - gpu) * 1e3
        else:  # (a long prompt's GPU time hides the host's)
            assert gpu > 10 * host and float(eager["duration_s"][0]) < gpu * 1.001
        d = runs[1].as_dict()
        assert d["eager_prefill"] is True and "PR 12160" in d["eager_prefill_host_source"]
        assert "eager_prefill" not in runs[0].as_dict()
    with pytest.raises(UserError, match="--engine sglang"):
        serve(LLAMA, H200, FITTED, Deployment(), lone, engine="vllm", eager_prefill=True)
    # (a disaggregated pair: its prefill pool runs them so, and says so)
    pair = [serve(LLAMA, H200, FITTED, Deployment(), Requests(np.array([0.0]), np.array([16]), np.array([20])),
                  engine="sglang", pd=(1, 1), request_overhead_s=0.0, eager_prefill=e) for e in (False, True)]
    assert pair[1].as_dict()["eager_prefill_host_s"] == pytest.approx(host)
    assert pair[1].metrics["median_ttft_ms"] > pair[0].metrics["median_ttft_ms"] + 0.5 * (host - short_gpu) * 1e3


def test_sglangs_default_decode_graphs_follow_its_gpu_memory_tiers():
    """SGLang's default --cuda-graph-max-bs by GPU memory and TP (server_args.py since PR 10372)."""
    from rooflinesim.serve.defaults import sglang_cuda_graph_max_bs

    for gpu, tp, want in (("h200", 1, 256), ("h200", 4, 512), ("h100", 2, 256), ("a100", 8, 512),
                          ("a100-40gb", 1, 32), ("a100-40gb", 4, 160), ("l4", 1, 24), ("l4", 4, 80),
                          ("b200", 1, 512), ("mi300x", 8, 512)):
        assert sglang_cuda_graph_max_bs(load_spec(gpu), tp) == want, (gpu, tp)


def test_sglangs_decode_past_its_largest_cuda_graph_is_paced_by_the_host():
    """A decode batch of more requests than SGLang captured in CUDA graphs runs without one:
    it takes the corner of its GPU time and the host's for a pass (as --eager-prefill prices
    a prefill batch); a batch within the graphs is priced as before, and a ceiling above
    every batch changes nothing."""
    from rooflinesim.serve.defaults import eager_pass_host_s

    host = eager_pass_host_s(LLAMA, Deployment())
    reqs = Requests(np.zeros(96), np.full(96, 32), np.arange(96) % 60 + 4)
    runs = {c: serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang", request_overhead_s=0.0,
                     concurrency=24, cuda_graph_max_bs=c) for c in (8, 4096, None)}
    steps = runs[8].served.steps
    seqs, tokens, dur = (np.asarray(steps[k]) for k in ("sequences", "tokens", "duration_s"))
    decode = tokens == seqs
    assert (decode & (seqs > 8)).sum() > 50 and (decode & (seqs <= 8)).sum() > 0
    assert np.all(dur[decode & (seqs > 8)] >= host * (1 - 1e-12))
    assert np.all(dur[decode & (seqs <= 8)] < host)  # (an 8B decode step on an H200 is shorter than the host's)
    assert runs[8].metrics["median_tpot_ms"] > runs[4096].metrics["median_tpot_ms"] + 1.0
    for key in ("median_tpot_ms", "p99_ttft_ms", "output_throughput"):  # (256 captured by default: 24 fit)
        assert runs[None].metrics[key] == pytest.approx(runs[4096].metrics[key], rel=1e-12)
    given, default = runs[8].as_dict(), runs[None].as_dict()
    assert given["cuda_graph_max_bs"] == 8 and given["cuda_graph_max_bs_source"] == "given (--cuda-graph-max-bs)"
    assert given["eager_decode_host_s"] == pytest.approx(host)
    assert given["eager_decode_steps"] == int((decode & (seqs > 8)).sum()) and default["eager_decode_steps"] == 0
    assert default["cuda_graph_max_bs"] == 256 and "PR 10372" in default["cuda_graph_max_bs_source"]
    lone = Requests(np.array([0.0]), np.array([16]), np.array([4]))
    assert "cuda_graph_max_bs" not in serve(LLAMA, H200, FITTED, Deployment(), lone, engine="vllm").as_dict()
    with pytest.raises(UserError, match="--engine sglang"):
        serve(LLAMA, H200, FITTED, Deployment(), lone, engine="vllm", cuda_graph_max_bs=8)
    with pytest.raises(UserError, match="0 .no decode graph. or more"):
        serve(LLAMA, H200, FITTED, Deployment(), lone, engine="sglang", cuda_graph_max_bs=-1)
    # (a disaggregated pair: its decode pool runs them so)
    pair = serve(LLAMA, H200, FITTED, Deployment(), lone, engine="sglang", pd=(1, 1), cuda_graph_max_bs=0)
    assert pair.as_dict()["cuda_graph_max_bs"] == 0 and pair.engine.decode_host_s == pytest.approx(host)
    assert pair.as_dict()["eager_decode_steps"] == 3  # (its 4 tokens: the first from the prefill pool)


def test_without_its_overlap_scheduler_sglangs_host_time_is_in_every_step():
    """SGLang run without the overlap it ships pays its measured host time a step (0.61 ms,
    PR 5608), named in the JSON; TensorRT-LLM's is not measured and none is added; a step
    overhead given replaces either."""
    reqs = random_requests(40, 512, 64, rate=2.0, seed=5)
    on, off = (serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang", overlap_schedule=o)
               for o in (True, False))
    assert on.engine.step_overhead_s == 0.0 and off.engine.step_overhead_s == pytest.approx(6.1e-4)
    assert "PR 5608" in off.as_dict()["step_overhead_source"] and "PR 2067" in on.as_dict()["step_overhead_source"]
    lone = Requests(np.array([0.0]), np.array([512]), np.array([64]))
    alone, bare = (serve(LLAMA, H200, FITTED, Deployment(), lone, engine="sglang", overlap_schedule=False,
                         step_overhead_s=h).served for h in (None, 0.0))
    assert np.allclose(alone.steps["duration_s"], bare.steps["duration_s"] + 6.1e-4, rtol=1e-12)
    trt = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="trtllm", overlap_schedule=False)
    assert trt.engine.step_overhead_s == 0.0 and "not measured" in trt.as_dict()["step_overhead_source"]


def test_engines_differ_as_their_schedulers_do():
    reqs = random_requests(400, 1024, 256, rate=20.0, seed=7, range_ratio=0.5)
    run = {e: serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=e) for e in ("vllm", "sglang", "trtllm")}
    plain = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang", overlap_schedule=False,
                  step_overhead_s=0.0)
    # SGLang runs prefill batches ahead of decodes (no mixed chunks): first tokens sooner,
    # longer pauses between tokens; its overlap scheduler takes each request a step later
    # (the schedulers alone: without the overlap, the host's time per step is set apart)
    assert plain.metrics["median_ttft_ms"] < run["vllm"].metrics["median_ttft_ms"]
    assert run["sglang"].metrics["median_ttft_ms"] > plain.metrics["median_ttft_ms"]
    assert run["sglang"].metrics["p99_itl_ms"] > run["vllm"].metrics["p99_itl_ms"]
    assert run["sglang"].engine.block_size == 1 and run["trtllm"].engine.block_size == 32
    # with a small cache: vLLM preempts, SGLang retracts, TensorRT-LLM admits fewer and evicts none
    small = {e: serve(LLAMA, H200, FITTED, Deployment(), random_requests(150, 1024, 256), engine=e,
                      kv_tokens=40_000) for e in ("vllm", "sglang", "trtllm")}
    assert small["vllm"].metrics["preemptions"] > 0 and small["sglang"].metrics["preemptions"] > 0
    assert small["trtllm"].metrics["preemptions"] == 0
    assert int(small["trtllm"].served.steps["kv_blocks_used"].max()) <= small["trtllm"].engine.kv_blocks


@pytest.mark.parametrize("name", ["sglang", "trtllm"])
def test_the_overlap_scheduler_takes_a_request_arriving_mid_step_a_step_later(name):
    lone = serve(LLAMA, H200, FITTED, Deployment(), Requests(np.array([0.0]), np.array([1000]), np.array([200])),
                 engine=name, overlap_schedule=False, request_overhead_s=0.0, step_overhead_s=0.0).served
    t = float(lone.steps["start_s"][60] + 0.5 * lone.steps["duration_s"][60])  # (in the middle of a decode step)
    reqs = Requests(np.array([0.0, t]), np.array([1000, 500]), np.array([200, 20]))
    off, on = (serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=name, overlap_schedule=o,
                     request_overhead_s=0.0, step_overhead_s=0.0).served for o in (False, True))
    ends_off, ends_on = (s.steps["start_s"] + s.steps["duration_s"] for s in (off, on))
    k = int(np.searchsorted(ends_off, t))  # (the step it arrives in)
    assert off.scheduled_s[1] == pytest.approx(ends_off[k], rel=1e-12)  # (seen at the step's end)
    assert on.scheduled_s[1] == pytest.approx(ends_on[k + 1], rel=1e-12)  # (the next batch was formed already)
    # (later by the decode step it waited for; trtllm's step with it holds that decode's context one longer)
    assert on.first_token_s[1] - off.first_token_s[1] == pytest.approx(on.steps["duration_s"][k + 1], rel=1e-4)
    assert on.first_token_s[0] == off.first_token_s[0]  # (an idle server takes a request at once)


def test_overlap_scheduling_is_modelled_where_the_engine_has_it():
    with pytest.raises(UserError, match="overlap scheduler"):
        serve(LLAMA, H200, FITTED, Deployment(), random_requests(3, 100, 8), engine="static", overlap_schedule=True)
    for name in ("vllm", "sglang", "trtllm"):  # (vLLM's async scheduling, on by default since 0.14)
        r = serve(LLAMA, H200, FITTED, Deployment(), random_requests(3, 100, 8), engine=name)
        assert r.engine.overlap and r.as_dict()["overlap_schedule"] is True
    # vLLM's pipelines run without it (0.14 left them out), and asking for it there is refused
    r = serve(LLAMA, H200, FITTED, Deployment(pp=2), random_requests(3, 100, 8))
    assert not r.engine.overlap and r.engine.step_overhead_s == pytest.approx(1.5e-4)
    with pytest.raises(UserError, match="pipeline stages is not modelled"):
        serve(LLAMA, H200, FITTED, Deployment(pp=2), random_requests(3, 100, 8), overlap_schedule=True)
    off = serve(LLAMA, H200, FITTED, Deployment(), random_requests(3, 100, 8), overlap_schedule=False).as_dict()
    assert off["step_overhead_s"] == pytest.approx(1.5e-4) and "PR 11133" in off["step_overhead_source"]


def test_trtllm_refuses_a_prompt_past_its_token_budget():
    with pytest.raises(UserError, match="chunked context is off"):
        serve(LLAMA, H200, FITTED, Deployment(), random_requests(3, 9000, 8), engine="trtllm")


def _trt(reqs, **kw):
    return serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="trtllm", overlap_schedule=False, **kw)


def test_trtllm_chunked_context_cuts_contexts_first_come_first_served_in_whole_blocks():
    # two 9,000-token prompts at once under a budget of 4,000 tokens: the first takes every
    # step's budget (in whole 32-token blocks) until its last chunk, the second what is left
    reqs = Requests(np.zeros(2), np.array([9000, 9000]), np.array([4, 4]))
    s = _trt(reqs, max_num_batched_tokens=4000, chunked_context=True).served
    tokens = s.steps["tokens"]
    assert tokens.max() <= 4000 and tokens[0] == 4000 - 4000 % 32
    assert s.first_token_s[0] < s.first_token_s[1]
    # every prompt token is computed once, each request samples its output
    assert int(tokens.sum()) == 2 * 9000 + 2 * 3
    whole = _trt(Requests(np.zeros(2), np.array([3000, 3000]), np.array([4, 4])), chunked_context=True).served
    assert whole.steps["tokens"][0] == 6000  # (contexts that fit the budget are not cut)


def test_trtllm_max_utilization_runs_more_requests_and_pauses_when_blocks_run_out():
    # a cache for about four whole requests: guaranteed_no_evict runs four at a time and never
    # evicts; max_utilization runs every request whose next step fits, pausing the latest
    # started ones (their KV freed, recomputed later) when the blocks run out
    reqs = random_requests(24, 1024, 1024)
    kv = 4 * 2048 + 64
    safe = _trt(reqs, kv_tokens=kv)
    packed = _trt(reqs, kv_tokens=kv, capacity_policy="max_utilization")
    assert int(safe.served.steps["sequences"].max()) == 4 and safe.metrics["preemptions"] == 0
    assert int(packed.served.steps["sequences"].max()) > 4 and packed.metrics["preemptions"] > 0
    for r in (safe, packed):
        assert r.metrics["completed"] == 24 and r.served.itl_s.size == 24 * 1023
        assert int(r.served.steps["kv_blocks_used"].max()) <= r.engine.kv_blocks
    # what a paused request had is computed again: more tokens than the prompts and outputs
    assert int(packed.served.steps["tokens"].sum()) > int(safe.served.steps["tokens"].sum())
    assert packed.as_dict()["capacity_policy"] == "max_utilization" and packed.as_dict()["chunked_context"] is False


def test_trtllm_budgets_its_kv_cache_as_a_share_of_what_is_left():
    from rooflinesim.serve.defaults import kv_cache_tokens

    d = Deployment(tp=2)
    left = kv_cache_tokens(LLAMA, H200, d, block_size=32, gpu_memory_utilization=1.0, max_num_batched_tokens=8192,
                           max_num_seqs=2048)
    for share in (0.9, 0.5):
        r = serve(LLAMA, H200, FITTED, d, random_requests(3, 100, 8), engine="trtllm", gpu_memory_utilization=share)
        assert 0 <= share * left - r.kv_tokens < 32 and r.kv_tokens % 32 == 0
    vllm = serve(LLAMA, H200, FITTED, d, random_requests(3, 100, 8), engine="vllm")
    assert vllm.kv_tokens == kv_cache_tokens(LLAMA, H200, d, block_size=16, gpu_memory_utilization=0.9,
                                             max_num_batched_tokens=8192, max_num_seqs=1024)


def test_trtllm_settings_are_refused_for_other_engines():
    reqs = random_requests(3, 100, 8)
    for kw in (dict(capacity_policy="max_utilization"), dict(chunked_context=True)):
        with pytest.raises(UserError, match="TensorRT-LLM"):
            serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="vllm", **kw)
    with pytest.raises(UserError, match="capacity policy"):
        serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="trtllm", capacity_policy="fastest")


def test_a_closed_loop_keeps_at_most_its_concurrency_in_flight():
    r = _run(n=200, rate=math.inf, concurrency=8)
    assert int(r.served.steps["sequences"].max()) <= 8
    open_loop = _run(n=200, rate=math.inf)
    assert r.metrics["median_ttft_ms"] < open_loop.metrics["median_ttft_ms"]  # (the client queues, not the engine)


def test_traces_under_azure_names_and_json_lines():
    csv_text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:47.0,20,1\n")
    r = parse_trace(csv_text, "azure.csv")
    assert r.arrival_s.tolist() == pytest.approx([0.0, 0.31941, 4.3145790], abs=1e-5)
    assert r.input_tokens.tolist() == [374, 20, 396] and r.output_tokens.tolist() == [44, 1, 109]
    lines = "\n".join(json.dumps({"arrival_s": a, "input_tokens": 100, "output_tokens": 10}) for a in (3.0, 1.0))
    j = parse_trace(lines, "t.jsonl")
    assert j.arrival_s.tolist() == [0.0, 2.0]
    ours = parse_trace("arrival_time_s,input_tokens,output_tokens\n0.5,10,2\n2.0,20,3\n", "t.csv")
    assert ours.arrival_s.tolist() == [0.0, 1.5]


@pytest.mark.parametrize("text, says", [
    ("", "empty trace"),
    ("a,b,c\n1,2,3\n", "no arrival column"),
    ("arrival_s,input_tokens,output_tokens\n0,10,0\n", "output tokens must be"),
    ("arrival_s,input_tokens,output_tokens\nsoon,10,5\n", "neither seconds"),
    ("arrival_s,input_tokens,output_tokens\n0,1.5,5\n", "input tokens must be"),
    ("arrival_s,input_tokens,output_tokens\nnan,10,5\n", "not a finite number"),
    ('{"arrival_s": 0}\n[1]\n', "not a JSON object"),
    ("arrival_s,input_tokens,output_tokens\n", "holds no requests"),
])
def test_bad_traces_are_one_sentence(text, says):
    with pytest.raises(UserError, match=says):
        parse_trace(text, "t.csv")


def _cli(*args):
    return CliRunner().invoke(cli, ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", *args])


def test_cli_json_has_the_benchmark_clients_names():
    r = _cli("--num-prompts", "60", "--rate", "8", "--goodput", "ttft:500", "--goodput", "tpot:30", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("completed", "duration_s", "request_throughput", "output_throughput", "total_token_throughput",
                "request_goodput", "kv_cache_tokens", "step_overhead_source"):
        assert key in out
    for metric in ("ttft", "tpot", "itl", "e2el", "queue"):
        for stat in ("mean", "median", "p90", "p99"):
            assert f"{stat}_{metric}_ms" in out
    assert out["completed"] == 60 and out["slo_ms"] == {"ttft": 500.0, "tpot": 30.0}
    text = _cli("--num-prompts", "20")
    assert text.exit_code == 0 and "time to first token" in text.output


def test_cli_sets_tensorrt_llms_scheduler_and_refuses_it_elsewhere():
    r = _cli("--engine", "trtllm", "--capacity-policy", "max-utilization", "--chunked-context", "--num-prompts", "20",
             "--input-len", "9000", "--output-len", "8", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["capacity_policy"] == "max_utilization" and out["chunked_context"] is True
    text = _cli("--engine", "trtllm", "--capacity-policy", "max-utilization", "--num-prompts", "10")
    assert text.exit_code == 0 and "max utilization capacity policy" in text.output
    code, _, err = run_cli(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--capacity-policy",
                            "max-utilization", "--num-prompts", "10"])
    assert code == 2 and "TensorRT-LLM" in err and "Traceback" not in err
    eager = _cli("--engine", "sglang", "--eager-prefill", "--num-prompts", "10", "--json")
    assert eager.exit_code == 0, eager.output
    assert json.loads(eager.output)["eager_prefill_host_s"] > 0
    assert "prefill without CUDA graphs" in _cli("--engine", "sglang", "--eager-prefill", "--num-prompts", "10").output
    code, _, err = run_cli(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--eager-prefill",
                            "--num-prompts", "10"])
    assert code == 2 and "--engine sglang" in err and "Traceback" not in err
    graphs = _cli("--engine", "sglang", "--cuda-graph-max-bs", "0", "--num-prompts", "10", "--json")
    assert graphs.exit_code == 0, graphs.output
    assert json.loads(graphs.output)["cuda_graph_max_bs"] == 0
    assert "decode batches over 0 without CUDA graphs" in _cli("--engine", "sglang", "--cuda-graph-max-bs", "0",
                                                              "--num-prompts", "10").output
    for bad in (["--cuda-graph-max-bs", "8"], ["--engine", "sglang", "--cuda-graph-max-bs", "-1"]):
        code, _, err = run_cli(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", *bad, "--num-prompts", "10"])
        assert code == 2 and "--cuda-graph-max-bs" in err and "Traceback" not in err


@pytest.mark.parametrize("args, says", [
    (["--rate", "0"], "not a rate above 0"),
    (["--rate", "-3"], "not a rate above 0"),
    (["--rate", "fast"], "neither a number"),
    (["--rate", "1e-300"], "raise the rate or send fewer requests"),  # (gaps past what the clock resolves)
    (["--rate", "1e-9"], "raise the rate or send fewer requests"),
    (["--goodput", "ttft"], "expected KEY:MS"),
    (["--goodput", "ttft:-1"], "above 0"),
    (["--goodput", "latency:3"], "expected KEY:MS"),
    (["--pp", "2", "--engine", "sglang"], "pipeline"),
    (["--range-ratio", "1"], "--client sglang"),
    (["--trace", "/nonexistent/trace.csv"], "trace"),
    (["--max-num-batched-tokens", "16", "--max-num-seqs", "64"], "at least --max-num-seqs"),
    (["--kv-cache-tokens", "100", "--input-len", "4000"], "KV blocks"),
    (["--kv-cache-tokens", "1"], "less than one KV block"),
    (["--overlap-schedule", "--engine", "static"], "overlap scheduler"),
    (["--overlap-schedule", "--pp", "2"], "pipeline stages"),
])
def test_cli_bad_input_is_one_sentence_and_exit_2(args, says, capsys):
    from rooflinesim.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "5", *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "Traceback" not in err, err


def test_cli_bad_input_messages(capsys):
    from rooflinesim.cli.main import main

    for args, says in ((["--rate", "0"], "rate above 0"), (["--pp", "2", "--engine", "trtllm"], "pipeline")):
        with pytest.raises(SystemExit):
            main(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", *args])
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_intervals_hold_the_central_answer_and_widen_with_the_kernel_error():
    reqs = random_requests(150, 1024, 64, rate=12.0, seed=4)
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs, interval_samples=12, seed=4)
    assert set(r.sigmas) >= {"gemm", "attention", "memory"}
    for key in ("median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "output_throughput"):
        lo, hi = r.interval[key]
        assert lo <= r.metrics[key] <= hi and lo < hi, key
    assert r.as_dict()["interval_level"] == 0.9
    again = serve(LLAMA, H200, FITTED, Deployment(), reqs, interval_samples=12, seed=4)
    assert again.interval == r.interval  # (the draws are seeded)
    from rooflinesim.calibration.profile import IDEAL

    ideal = serve(LLAMA, H200, IDEAL, Deployment(), reqs, interval_samples=12)
    assert ideal.interval is None and "interval" not in ideal.as_dict()  # (no validation: no interval)


def test_a_family_factor_scales_only_that_familys_kernels():
    from rooflinesim.serve.steps import StepTimes

    st_ = StepTimes(LLAMA, H200, FITTED, Deployment(), max_tokens=4096, max_seqs=256, max_context=4096)
    slow = st_.scaled({"gemm": 2.0})
    base = st_.step_s(64, 2000.0, samplers=64)
    assert base < slow.step_s(64, 2000.0, samplers=64) < 2 * base
    assert st_.scaled({}).step_s(64, 2000.0, samplers=64) == pytest.approx(base, rel=1e-12)
    assert slow.attention_decode(64, 2000.0) == pytest.approx(st_.attention_decode(64, 2000.0), rel=1e-12)


def test_the_serving_chart_holds_the_run(tmp_path):
    from rooflinesim.charts import serve_figure

    r = _run(n=120, rate=10.0)
    fig = serve_figure(r)
    names = [t.name for t in fig.data]
    assert names == ["TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2EL (ms)", "running", "tokens", "KV cache used"]
    ttft = fig.data[0]
    assert ttft.y[-1] == pytest.approx(1.0) and ttft.x[-1] == pytest.approx(
        float(np.max(r.served.first_token_s - r.served.arrival_s)) * 1e3)
    kv = fig.data[-1]
    assert 0 < max(kv.y) <= 1
    out = tmp_path / "serve.html"
    args = ["--num-prompts", "40", "--rate", "5", "--interval-samples", "0", "--plot", str(out)]
    res = _cli(*args)
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "Plotly.newPlot" in html and "<script src=\"http" not in html
    from rooflinesim.cli.main import main

    with pytest.raises(SystemExit) as e:  # (an existing file is kept without --force)
        main(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", *args])
    assert e.value.code == 2 and out.read_text() == html


CHROMIUM = __import__("shutil").which("chromium") or __import__("shutil").which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (.ci/run installs it)")
def test_the_serving_chart_as_a_person_sees_it(tmp_path):
    import subprocess

    from PIL import Image

    out = tmp_path / "serve.html"
    assert _cli("--num-prompts", "200", "--rate", "15", "--interval-samples", "0", "--plot", str(out)).exit_code == 0
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1150,750", "--virtual-time-budget=5000"]
    shot = tmp_path / "shot.png"
    subprocess.run(flags + [f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    for area in (img[110:340, 90:540], img[110:340, 630:1080], img[430:650, 90:540]):  # three of the panels
        inked = (np.abs(area - 255).sum(axis=2) > 60).mean()
        assert 0.003 < inked < 0.7
    dom = subprocess.run(flags + ["--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    for name in ("TTFT (ms)", "KV cache in use", "requests running per step"):
        assert name in dom


def test_max_rate_meets_the_slos_and_a_tenth_more_does_not():
    from rooflinesim.serve.simulate import max_rate

    def make(rate):
        return random_requests(300, 1024, 128, rate=rate, seed=2)

    slos = {"p99_ttft_ms": 400.0, "p99_tpot_ms": 25.0}
    rate, run, tried = max_rate(LLAMA, H200, FITTED, Deployment(), make, slos)
    assert 0 < rate < math.inf and len(tried) == 11
    assert all(run.metrics[k] <= v for k, v in slos.items())
    faster = serve(LLAMA, H200, FITTED, Deployment(), make(rate * 1.1)).metrics
    assert any(faster[k] > v for k, v in slos.items())


@pytest.mark.parametrize("args", [["--max-rate"], ["--slo-ttft-p99", "soon"], ["--slo-tpot-p99", "-5ms"],
                                  ["--slo-ttft-p99", "500"], ["--slo-e2el-p99", " 2.5"], ["--slo-tpot-p99", "1e3"],
                                  ["--max-rate", "--slo-ttft-p99", "1s", "--trace", "x.csv"]])
def test_bad_slos_are_one_sentence(args, capsys):
    # (a bare number too: seconds to us, milliseconds to vLLM's --goodput)
    from rooflinesim.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "5", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    if args[-1] in ("500", " 2.5", "1e3"):
        assert "needs a unit" in err


def test_cli_reports_slos_and_the_share_of_draws_that_meet_them():
    r = _cli("--num-prompts", "80", "--rate", "10", "--slo-ttft-p99", "300ms", "--slo-tpot-p99", "1s",
             "--interval-samples", "5", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["slo"]["p99_tpot_ms"]["met"] is True and out["slo"]["p99_tpot_ms"]["limit"] == pytest.approx(1000)
    assert 0 <= out["slo"]["p99_ttft_ms"]["met_share_of_draws"] <= 1 and "meets_slo" in out


@pytest.mark.parametrize("name, rows, in_mean, out_mean", [("azure-conv-2023", 19366, 1155, 211),
                                                          ("azure-code-2023", 8819, 2048, 28)])
def test_shipped_traffic_shapes_are_the_released_traces(name, rows, in_mean, out_mean):
    from rooflinesim.serve.traffic import dataset_requests, datasets, load_dataset

    assert name in datasets()
    data = load_dataset(name)
    # the row counts of the dataset's own notebook; the means the Splitwise authors' simulator states
    assert data["requests"] == rows == len(data["input_tokens"]) == len(data["output_tokens"])
    assert np.mean(data["input_tokens"]) == pytest.approx(in_mean, abs=0.5)
    assert np.mean(data["output_tokens"]) == pytest.approx(out_mean, abs=0.5)
    assert "CC-BY" in data["license"] and "Splitwise" in data["attribution"]
    a = dataset_requests(name, 500, rate=4.0, seed=3)
    b = dataset_requests(name, 500, rate=4.0, seed=3)
    assert np.array_equal(a.input_tokens, b.input_tokens) and np.array_equal(a.arrival_s, b.arrival_s)
    pairs = set(zip(data["input_tokens"], data["output_tokens"]))
    assert all((i, o) in pairs for i, o in zip(a.input_tokens.tolist(), a.output_tokens.tolist()))


def test_the_sharegpt_shape_is_the_benchmark_clients_sample():
    from rooflinesim.serve.traffic import dataset_requests, load_dataset

    data = load_dataset("sharegpt")
    i, o = np.array(data["input_tokens"]), np.array(data["output_tokens"])
    assert data["requests"] == i.size == o.size == 15822
    # the clients' filter: at least 4 tokens each, a prompt of at most 1,024, at most 2,048 together
    assert i.min() >= 4 and o.min() >= 4 and i.max() <= 1024 and (i + o).max() <= 2048
    # the published runs' totals: SGLang's client on Llama 3.3 (1,200 prompts) 224.2 in and 189.1
    # out a request; 5,000-prompt runs 194.3 out (output over request throughput)
    assert i.mean() == pytest.approx(224.2, rel=0.03) and o.mean() == pytest.approx(194.3, rel=0.05)
    assert "Apache" in data["license"] and "ShareGPT" in data["source"]
    r = dataset_requests("sharegpt", 200, rate=5.0, seed=1)
    assert set(zip(r.input_tokens.tolist(), r.output_tokens.tolist())) <= set(zip(i.tolist(), o.tolist()))


@pytest.mark.parametrize("args", [["--dataset", "sharegpt-v4"], ["--dataset", "azure-conv-2023", "--output-len", "9"],
                                  ["--dataset", "azure-conv-2023", "--trace", "t.csv"]])
def test_bad_dataset_choices_are_one_sentence(args):
    from rooflinesim.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "5", *args])
    assert e.value.code == 2


def test_progress_hears_of_every_request_of_every_run():
    seen = []
    serve(LLAMA, H200, FITTED, Deployment(dp=2), random_requests(120, 512, 16, rate=20.0), interval_samples=2,
          progress=seen.append)
    assert sum(seen) == 120 * 3


def test_a_decode_the_budget_does_not_reach_is_not_in_the_step():
    # a tiny budget: the first running request's prompt takes it all, later decodes wait
    reqs = Requests(np.array([0.0, 0.0, 0.05]), np.array([64, 64, 3000]), np.array([40, 40, 4]))
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs, max_num_batched_tokens=256, max_num_seqs=8)
    s = r.served
    assert int(s.steps["tokens"].max()) <= 256 and np.all(s.steps["sequences"] <= 3)
    assert r.metrics["completed"] == 3


def test_step_tables_for_larger_limits_answer_as_those_for_smaller_ones():
    """A deployment's tables are kept and lent to runs at smaller limits (a plan searches
    several): their grids start alike, so every step they price comes out the same."""
    from rooflinesim.serve.steps import StepTimes

    spec = load_spec("h200")
    profile = resolve_profile(spec, None)
    model, d = load_config("mixtral-8x7b"), Deployment(tp=2, weights="fp8")
    small = StepTimes(model, spec, profile, d, max_tokens=3000, max_seqs=100, max_context=2500)
    large = StepTimes(model, spec, profile, d, max_tokens=9000, max_seqs=300, max_context=7000)
    rng = np.random.default_rng(5)
    for _ in range(300):
        n_dec = int(rng.integers(0, 100))
        chunks = int(rng.integers(0, min(5, 100 - n_dec) + 1)) if n_dec < 100 else 0
        chunk_tokens = int(rng.integers(chunks, min(3000 - n_dec, 2500 * chunks) + 1)) if chunks else 0
        if n_dec + chunk_tokens == 0:
            n_dec = 1
        q = chunk_tokens / chunks if chunks else 0.0  # (a chunk attends at least to itself)
        args = (n_dec, float(rng.uniform(1, 2500)) if n_dec else 0.0, chunks, chunk_tokens,
                float(rng.uniform(q, 2500)) if chunks else 0.0, int(rng.integers(0, min(n_dec + chunks, 100) + 1)))
        assert large.step_s(*args) == pytest.approx(small.step_s(*args), rel=1e-12), args
    ctx = rng.uniform(1, 2500, 50)
    assert np.allclose(large.decode_steps(37, ctx), small.decode_steps(37, ctx), rtol=1e-12, atol=0)


def _micro_batch_one_by_one(p, fits, tokens, computed, context):
    """TensorRT-LLM's MicroBatchScheduler and FCFS context chunking, request by request as
    microBatchScheduler.cpp runs them (the reference for the vectorized one)."""
    budget, used, count = p.max_num_batched_tokens, 0, 0
    ids, give, chunks = [], [], []
    for r in fits:
        rest = int(tokens[r] - computed[r])
        if context[r] and p.chunked_context:
            chunks.append((r, rest))
        else:
            if used + rest > budget:
                break
            ids.append(r)
            give.append(rest)
            used += rest
        count += 1
        if count >= p.max_num_seqs:
            break
    room = budget - used
    if sum(rest for _, rest in chunks) > room:
        for r, rest in chunks:
            c = min(rest, room)
            if c != rest:
                c = c // p.block_size * p.block_size
            room -= c
            if c > 0:
                ids.append(r)
                give.append(c)
    else:
        for r, rest in chunks:
            ids.append(r)
            give.append(rest)
    return sorted(zip(ids, give))


def _max_utilization_one_by_one(p, prompt, output, active, tokens, computed, held, context):
    """TensorRT-LLM's MaxUtilizationScheduler request by request (capacityScheduler.cpp):
    the scheduled ids and the paused ones."""
    free = p.kv_blocks - sum(int(held[a]) for a in active)
    out, paused, taken, end, k = [], [], 0, len(active), 0
    while k < end:
        r = active[k]
        if context[r]:
            need = -(-int(tokens[r]) // p.block_size) - int(held[r]) if computed[r] == 0 else 0
        else:
            nxt = min(int(tokens[r]) + 1, int(prompt[r] + output[r]))
            need = max(-(-nxt // p.block_size) - int(held[r]), 0)
        if taken + need <= free:
            out.append(r)
            taken += need
            k += 1
            continue
        last = next((j for j in range(end - 1, k - 1, -1) if computed[active[j]] > 0), None)
        if last is None:
            break
        v = active[last]
        free += int(held[v])
        held[v], computed[v], context[v] = 0, 0, True
        paused.append(v)
        end = last
    return out, paused


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.one_of(st.just(0), st.integers(0, 5000)), st.booleans(),
                          st.integers(0, 200)),
                min_size=1, max_size=30),
       st.sampled_from([64, 512, 4096]), st.sampled_from([1, 3, 50]), st.booleans(), st.integers(0, 60))
def test_trtllms_schedulers_take_the_requests_they_would_one_by_one(rows, budget, seqs, chunked, kv_blocks):
    n = len(rows)
    total = np.array([r[0] for r in rows], dtype=np.int64)
    computed = np.minimum(np.array([r[1] for r in rows], dtype=np.int64), total - 1)
    context = np.array([r[2] for r in rows])
    computed = np.where(context, np.minimum(computed, total - 1), total - 1)  # (a decode has all but its last)
    tokens = total.copy()
    held = np.where(computed > 0, -(-(computed + 1) // 32), 0).astype(np.int64)
    prompt, output = total, np.array([r[3] + 1 for r in rows], dtype=np.int64)
    blocks = max(int(kv_blocks + held.sum()), int((-(-(prompt + output) // 32)).max()))  # (the longest fits alone)
    p = base.EngineParams("trtllm", budget, seqs, 32, blocks, 0.0, chunked_context=chunked,
                            capacity_policy="max_utilization")
    sim = trtllm.TrtLlm(Requests(np.zeros(n), prompt, output), None, p, None)
    active = np.arange(n, dtype=np.int64)
    want = _max_utilization_one_by_one(p, prompt, output, list(active), tokens, computed.copy(), held.copy(),
                                       context.copy())
    c, h, x = computed.copy(), held.copy(), context.copy()
    fits = sim._max_utilization(active, tokens, c, h, x)
    assert fits.tolist() == want[0] and sim.preemptions == len(want[1])
    event("a request paused" if sim.preemptions else "none paused")
    ids, give = sim._micro_batch(fits, tokens, c, x)
    event("a context cut" if np.any(give[x[ids]] < (tokens - c)[ids][x[ids]]) else "no context cut")
    assert sorted(zip(ids.tolist(), give.tolist())) == _micro_batch_one_by_one(p, fits.tolist(), tokens, c, x)
    assert int(give.sum()) <= budget and ids.size <= seqs


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "trtllm"])
def test_a_front_end_delay_shifts_what_the_client_sees_and_paces_a_closed_loop(engine_name):
    """--request-overhead: in an open loop every request reaches the engine that much later,
    so TTFT and E2EL move by it and the gaps between tokens do not; in a closed loop of one
    request at a time each request also waits for it before the engine sees it."""
    reqs = random_requests(60, 700, 40, rate=3.0, seed=5)
    kw = dict(engine=engine_name, max_num_batched_tokens=2048)
    base = serve(LLAMA, H200, FITTED, Deployment(), reqs, request_overhead_s=0.0, **kw).metrics
    late = serve(LLAMA, H200, FITTED, Deployment(), reqs, request_overhead_s=0.02, **kw)
    assert late.as_dict()["request_overhead_s"] == 0.02
    m = late.metrics
    for k in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "p99_e2el_ms"):
        assert m[k] == pytest.approx(base[k] + 20.0, rel=1e-6), k
    for k in ("mean_itl_ms", "p99_itl_ms", "mean_tpot_ms"):
        assert m[k] == pytest.approx(base[k], rel=1e-6), k
    one = dict(kw, concurrency=1)  # (every request due at once: each sent as the one before finishes)
    burst = random_requests(60, 700, 40, rate=math.inf, seed=5)
    closed0 = serve(LLAMA, H200, FITTED, Deployment(), burst, request_overhead_s=0.0, **one).metrics
    closed = serve(LLAMA, H200, FITTED, Deployment(), burst, request_overhead_s=0.02, **one).metrics
    assert closed["duration_s"] == pytest.approx(closed0["duration_s"] + 60 * 0.02, rel=1e-6)


@pytest.mark.parametrize("command", [["serve", "--rate", "2", "--num-prompts", "10"],
                                     ["plan", "--rate", "2", "--slo-ttft-p99", "1s", "--gpu", "h200"]])
@pytest.mark.parametrize("value", ["-0.1", "soon", "nan", "inf", "11"])
def test_a_front_end_delay_that_cannot_be_parsed_exits_2(command, value):
    code, _, err = run_cli([*command, "--model", "llama-3.1-8b", "--request-overhead", value])
    assert code == 2 and "--request-overhead" in err and "Traceback" not in err


def test_a_very_low_rate_is_served_one_request_at_a_time():
    # (days between requests: each alone, as at a light load; the peak second counted over
    # the seconds that have tokens, not an array as long as the run)
    r = _run(n=5, rate=1e-6)
    assert r.metrics["completed"] == 5 and r.metrics["duration_s"] > 1e6
    assert 0 < r.metrics["max_output_tokens_per_s"] <= int(r.served.output_tokens.max())
    assert r.metrics["max_concurrent_requests"] == 1
