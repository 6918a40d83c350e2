"""`serve` on pipeline-parallel replicas: vLLM v1's batch queue (as many batches in flight as
stages), each batch passing the stages in order; static batches as predict_model prices
them with microbatches."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.models.workload import predict_model
from rooflinesim.serve.schedulers import base, vllm
from rooflinesim.serve.simulate import serve, step_times
from rooflinesim.serve.traffic import Requests, random_requests

H100 = load_spec("h100-sxm")
FITTED = resolve_profile(H100, None)
LLAMA70 = load_config("llama-3-70b")
LLAMA8 = load_config("llama-3.1-8b")


@pytest.mark.parametrize("pp", [2, 4])
def test_a_lone_request_takes_predict_models_times(pp):
    d = Deployment(tp=2, pp=pp)
    m = serve(LLAMA70, H100, FITTED, d, random_requests(20, 1024, 128, rate=0.05, seed=2), step_overhead_s=0.0,
              request_overhead_s=0.0).metrics  # (the kernels alone)
    one = predict_model(LLAMA70, H100, FITTED, d, batch=1, prompt=1024, gen=128)
    assert m["median_ttft_ms"] == pytest.approx(one.ttft_s * 1e3, rel=0.01)
    assert m["median_tpot_ms"] == pytest.approx(one.tpot_s * 1e3, rel=0.01)


@pytest.mark.parametrize("pp, batch", [(2, 8), (4, 3), (4, 16)])
def test_a_static_batch_takes_predict_models_times_with_microbatches(pp, batch):
    d = Deployment(tp=2, pp=pp)
    m = serve(LLAMA70, H100, FITTED, d, random_requests(batch, 1024, 64), engine="static", max_num_seqs=batch).metrics
    one = predict_model(LLAMA70, H100, FITTED, d, batch=batch, prompt=1024, gen=64)
    assert m["mean_ttft_ms"] == pytest.approx(one.ttft_s * 1e3, rel=1e-9)
    assert m["mean_e2el_ms"] == pytest.approx(one.e2e_s * 1e3, rel=0.01)


def test_the_stages_add_up_to_the_whole_pass():
    d = Deployment(tp=2, pp=4)
    steps = step_times(LLAMA70, H100, FITTED, d, max_tokens=4096, max_seqs=256, max_context=3000)
    assert len(steps.stage_tables) == 4
    rng = np.random.default_rng(0)
    for _ in range(50):
        k = int(rng.integers(1, 40))
        decode = rng.random(k) < 0.7
        tokens = np.where(decode, 1, rng.integers(1, 90, size=k))
        context = tokens + rng.integers(0, 2500, size=k)
        parts = steps.stage_s_of(tokens, context, decode, int(decode.sum()))
        assert sum(parts) == pytest.approx(steps.step_of(tokens, context, decode, int(decode.sum())), rel=1e-9)
        assert all(p > 0 for p in parts)
        # the LM head is the last stage's: sampling changes that stage alone
        silent = steps.stage_s_of(tokens, context, decode, 0)
        assert silent[:-1] == pytest.approx(parts[:-1], rel=1e-12) and (silent[-1] < parts[-1] or not decode.any())


def test_requests_batched_apart_keep_the_stages_busy_together():
    d = Deployment(tp=2, pp=2)
    # two that arrive together share a batch: one batch in flight, stage after stage
    together = serve(LLAMA70, H100, FITTED, d, Requests(np.zeros(2), np.array([200, 200]), np.array([40, 40])),
                     step_overhead_s=0.0).served.steps
    starts, ends = together["start_s"], together["start_s"] + together["duration_s"]
    assert np.all(starts[1:] >= ends[:-1] - 1e-12)
    # a prompt chunked through the budget sends its next chunk while the last is in flight, so two
    # long prompts end in batches of their own, and each request stays in its batch's group (as
    # vLLM v1 keeps a request with the batch it was scheduled in): two batches share the stages
    apart = serve(LLAMA70, H100, FITTED, d, Requests(np.zeros(2), np.array([3000, 3000]), np.array([40, 40])),
                  step_overhead_s=0.0, max_num_batched_tokens=1024, max_num_seqs=64)
    s = apart.served.steps
    starts, ends = s["start_s"], s["start_s"] + s["duration_s"]
    overlap = starts[1:] < ends[:-1] - 1e-9
    assert overlap.mean() > 0.9 and int(s["sequences"][-30:].max()) == 1


def test_preemption_in_flight_drops_the_token_and_recomputes():
    d = Deployment(tp=2, pp=2)
    reqs = random_requests(60, 600, 200, rate=50, seed=4)
    r = serve(LLAMA70, H100, FITTED, d, reqs, kv_tokens=6000)
    s = r.served
    assert r.metrics["preemptions"] > 0 and r.metrics["completed"] == 60
    assert s.itl_s.size == int((s.output_tokens - 1).sum()) and np.all(s.itl_s > 0)
    assert int(s.steps["tokens"].sum()) > int(s.input_tokens.sum() + s.output_tokens.sum() - s.output_tokens.size)


@settings(max_examples=25, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0, 3), st.integers(1, 2500), st.integers(1, 200)), min_size=1, max_size=30),
       budget=st.sampled_from([256, 2048]), seqs=st.sampled_from([4, 64]), kv=st.sampled_from([5000, 10**6]),
       pp=st.sampled_from([2, 3]))
def test_every_request_is_served_on_a_pipeline(reqs, budget, seqs, kv, pp):
    t, i, o = (np.array(x) for x in zip(*sorted(reqs)))
    kv = max(kv, int(((i + o + 15) // 16).max()) * 16)
    r = serve(LLAMA8, H100, FITTED, Deployment(pp=pp), Requests(t - t[0], i, o),
              max_num_batched_tokens=max(budget, seqs),
              max_num_seqs=seqs, kv_tokens=kv)
    s = r.served
    assert r.metrics["completed"] == len(reqs) and np.all(np.isfinite(s.finish_s))
    assert np.all(s.first_token_s > s.arrival_s) and np.all(s.finish_s >= s.first_token_s)
    assert s.itl_s.size == int((o - 1).sum()) and np.all(s.itl_s > 0)
    assert int(s.steps["sequences"].max()) <= seqs and int(s.steps["tokens"].max()) <= max(budget, seqs)
    if not r.metrics["preemptions"]:  # (every prompt token computed once, every output token but the last)
        assert int(s.steps["tokens"].sum()) == int(i.sum() + o.sum() - o.size)


def test_a_pipeline_holds_more_kv_cache_and_other_engines_refuse_it():
    one = serve(LLAMA70, H100, FITTED, Deployment(tp=4), random_requests(4, 100, 4))
    two = serve(LLAMA70, H100, FITTED, Deployment(tp=2, pp=2), random_requests(4, 100, 4))
    assert two.kv_tokens == pytest.approx(one.kv_tokens, rel=0.15)  # (the same GPUs hold the same weights)
    for engine in ("sglang", "trtllm", "hf"):
        with pytest.raises(UserError, match="pipeline"):
            serve(LLAMA8, H100, FITTED, Deployment(pp=2), random_requests(4, 100, 4), engine=engine)


def _same_runs(fast, slow) -> None:
    """Two runs' metrics, requests, gaps and logged steps agree (to rounding)."""
    a, b = fast.served, slow.served
    for f in ("scheduled_s", "first_token_s", "finish_s"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-12, nan_ok=True), f
    assert np.array_equal(a.output_tokens, b.output_tokens) and a.preemptions == b.preemptions
    assert np.sort(a.itl_s) == pytest.approx(np.sort(b.itl_s), rel=1e-9, abs=1e-12)
    for f in ("start_s", "duration_s", "tokens", "sequences", "sampled", "kv_blocks_used"):
        assert a.steps[f] == pytest.approx(b.steps[f], rel=1e-9, abs=1e-12), f
    assert fast.metrics.keys() == slow.metrics.keys()
    for k, v in fast.metrics.items():
        assert v == pytest.approx(slow.metrics[k], rel=1e-9, nan_ok=True), k


@pytest.mark.parametrize("pp, rate, kv, concurrency, budget", [
    (2, 5.0, None, None, None), (2, 40.0, None, None, None), (3, 10.0, None, None, None),
    (2, float("inf"), 30_000, None, None), (2, 20.0, None, 6, None), (2, 10.0, 40_000, None, 512),
    (4, 8.0, None, None, 2048)])
def test_a_pipeline_in_lockstep_takes_its_loops_batches(pp, rate, kv, concurrency, budget, monkeypatch):
    # (batches of decodes, and of the prompts sent since beside them, launched and taken back on
    # plain numbers: the same batches, at the same times, as the loop takes them on arrays;
    # small caches preempting, a concurrency limit, a budget cutting prompts)
    reqs = random_requests(300, 800, 120, rate=rate, range_ratio=0.2, seed=7)
    kw = dict(kv_tokens=kv, concurrency=concurrency, max_num_batched_tokens=budget,
              max_num_seqs=budget and 256, interval_samples=0)
    taken, steps = [], vllm._PipelineLockstep.steps

    def counted(self, *args):
        out = steps(self, *args)
        taken.append(out[1])
        return out

    monkeypatch.setattr(vllm._PipelineLockstep, "steps", counted)
    fast = serve(LLAMA8, H100, FITTED, Deployment(pp=pp), reqs, **kw)
    assert sum(taken) > 0  # (requests finished in lockstep)
    monkeypatch.setattr(base.Sim, "stretches", False)
    _same_runs(fast, serve(LLAMA8, H100, FITTED, Deployment(pp=pp), reqs, **kw))


@settings(max_examples=30, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0, 20), st.integers(1, 2500), st.integers(1, 150)), min_size=1, max_size=60),
       budget=st.sampled_from([256, 2048, 8192]), seqs=st.sampled_from([4, 64]), kv=st.sampled_from([4000, 10**6]),
       block=st.sampled_from([1, 16]), pp=st.sampled_from([2, 3]), concurrency=st.sampled_from([None, 3]))
def test_a_pipeline_in_lockstep_agrees_with_its_loop(reqs, budget, seqs, kv, block, pp, concurrency):
    t, i, o = (np.array(x) for x in zip(*sorted(reqs)))
    kv = max(kv, int(((i + o + block - 1) // block).max()) * block)
    r = Requests(t - t[0], i, o)
    kw = dict(max_num_batched_tokens=max(budget, seqs), max_num_seqs=seqs, kv_tokens=kv, block_size=block,
              concurrency=concurrency, interval_samples=0)
    fast = serve(LLAMA8, H100, FITTED, Deployment(pp=pp), r, **kw)
    try:
        base.Sim.stretches = False
        slow = serve(LLAMA8, H100, FITTED, Deployment(pp=pp), r, **kw)
    finally:
        base.Sim.stretches = True
    _same_runs(fast, slow)
