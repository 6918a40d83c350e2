"""`serve --pd`: a prefill pool and a decode pool, each prompt's KV moved to its decode
replica (vLLM v1 with its NixlConnector, and SGLang's disaggregation)."""

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.cli.main import main
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment, kv_bytes_per_token_per_gpu
from rooflinesim.serve.disaggregated import KV_LINKS, Link
from rooflinesim.serve.simulate import serve
from rooflinesim.serve.traffic import random_requests

H200 = load_spec("h200")
VLLM_LINK, SGLANG_LINK = KV_LINKS["vllm"][0], KV_LINKS["sglang"][0]
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")


def _pd(reqs, pd=(1, 1), **kw):
    return serve(LLAMA, H200, FITTED, Deployment(), reqs, pd=pd, **kw)


def test_a_lone_request_takes_its_prefill_its_pull_and_one_decode_step():
    # TTFT: the prefill replica's step, the pull of the prompt's KV, then the decode
    # replica's one-token step over the prompt (which samples the first token)
    prompt = 3000
    r = _pd(random_requests(1, prompt, 50), step_overhead_s=0.0, request_overhead_s=0.0)
    steps = r.served.steps
    pull = kv_bytes_per_token_per_gpu(LLAMA, Deployment()) * prompt / VLLM_LINK
    assert r.disaggregated["mean_kv_pull_ms"] == pytest.approx(pull * 1e3, rel=1e-9)
    from rooflinesim.serve.simulate import step_times

    pre = step_times(LLAMA, H200, FITTED, Deployment(), max_tokens=8192, max_seqs=1024, max_context=prompt + 1)
    prefill_s = pre.step_s(0, 0.0, chunk_n=1, chunk_tokens=prompt, chunk_context=prompt, samplers=1)
    first_decode = steps["duration_s"][0]
    assert r.metrics["mean_ttft_ms"] == pytest.approx((prefill_s + pull + first_decode) * 1e3, rel=1e-6)
    assert r.disaggregated["prefill_steps"] == 1 and r.disaggregated["decode_steps"] == 50
    assert r.metrics["steps"] == 51  # (both pools' steps)


def test_every_request_is_served_and_the_decode_side_has_no_prefill_stalls():
    reqs = random_requests(300, 2048, 200, rate=12.0, seed=2, range_ratio=0.5)
    pd = _pd(reqs)
    colocated = serve(LLAMA, H200, FITTED, Deployment(dp=2), reqs)
    s, m = pd.served, pd.metrics
    assert m["completed"] == 300 and np.all(np.isfinite(s.finish_s))
    # every output token comes from the decode replicas: a gap per token but each request's first
    assert s.itl_s.size == int((s.output_tokens - 1).sum())
    assert np.all(s.first_token_s > s.scheduled_s) and np.all(s.finish_s >= s.first_token_s)
    # the decode replicas' steps are decodes (and one-token recomputes): no prefill in their way, so
    # the tail of the inter-token gaps stays near their median, where colocated prefills stall decodes
    assert m["p99_itl_ms"] < 1.5 * m["median_itl_ms"]
    assert colocated.metrics["p99_itl_ms"] > 2 * colocated.metrics["median_itl_ms"]
    assert int(s.steps["tokens"].max()) <= 1024  # (decodes only: a token per running request)
    # the same GPUs, the same work: the same throughput while neither pool is saturated
    assert m["output_throughput"] == pytest.approx(colocated.metrics["output_throughput"], rel=0.02)


@pytest.mark.parametrize("overlap", [True, False])
def test_the_decode_side_takes_the_steps_one_by_one_would(overlap, monkeypatch):
    # (its decode-only stretches, a step at the least, end where a pulled request may join)
    from rooflinesim.serve.schedulers import vllm

    reqs = random_requests(200, 1500, 150, rate=15.0, seed=4, range_ratio=0.5)
    fast = _pd(reqs, overlap_schedule=overlap)
    monkeypatch.setattr(vllm.VllmV1, "stretches", False)
    slow = _pd(reqs, overlap_schedule=overlap)
    for k, v in fast.metrics.items():
        assert v == pytest.approx(slow.metrics[k], rel=1e-9), k
    for f in ("first_token_s", "finish_s"):
        assert getattr(fast.served, f) == pytest.approx(getattr(slow.served, f), rel=1e-9, abs=1e-12), f
    assert np.sort(fast.served.itl_s) == pytest.approx(np.sort(slow.served.itl_s), rel=1e-9, abs=1e-12)


def test_a_slower_link_delays_the_first_token_by_the_pulls():
    reqs = random_requests(40, 2048, 20, rate=0.5, seed=4)
    fast = _pd(reqs, step_overhead_s=0.0)
    slow = _pd(reqs, step_overhead_s=0.0, kv_link=Link(VLLM_LINK / 10, 0.002))
    extra = slow.disaggregated["mean_kv_pull_ms"] - fast.disaggregated["mean_kv_pull_ms"]
    assert extra == pytest.approx(9 * fast.disaggregated["mean_kv_pull_ms"] + 2.0, rel=1e-9)
    # at this rate a request meets an idle decode replica: its TTFT grows by its pull's growth
    assert slow.metrics["median_ttft_ms"] - fast.metrics["median_ttft_ms"] == pytest.approx(extra, rel=0.05)
    assert slow.metrics["median_tpot_ms"] == pytest.approx(fast.metrics["median_tpot_ms"], rel=0.02)


def test_more_prefill_replicas_shorten_the_queue_for_prefills():
    reqs = random_requests(400, 4096, 64, rate=30.0, seed=5)
    one, two = _pd(reqs, pd=(1, 1)), _pd(reqs, pd=(2, 1))
    assert two.metrics["median_ttft_ms"] < 0.5 * one.metrics["median_ttft_ms"]
    assert two.disaggregated["gpus"] == 3 and two.replicas == 3


def test_a_small_decode_cache_queues_and_preempts_and_still_serves_everyone():
    reqs = random_requests(120, 1500, 300, rate=40.0, seed=6, range_ratio=0.5)
    r = _pd(reqs, kv_tokens=20_000)
    assert r.metrics["completed"] == 120 and np.all(np.isfinite(r.served.finish_s))
    assert r.disaggregated["decode_preemptions"] > 0
    assert r.served.steps["kv_blocks_used"].max() <= 20_000 // 16


def test_blocks_given_to_pulls_stay_held_as_requests_finish(monkeypatch):
    # a decode replica's free blocks, at every schedule, are its capacity less the running
    # requests' blocks and those of the requests still pulling their KV
    from rooflinesim.serve.schedulers import vllm

    seen = []
    schedule = vllm.VllmV1Decode._schedule

    def checked(self, run, want, waiting, tokens, gen, free):
        pulling = self.remote & ~np.isnan(self.pulled)
        assert free == self.p.kv_blocks - int(run.held.sum()) - int(self.pull_blocks[pulling].sum())
        seen.append(int(pulling.sum()))
        return schedule(self, run, want, waiting, tokens, gen, free)

    monkeypatch.setattr(vllm.VllmV1Decode, "_schedule", checked)
    r = _pd(random_requests(150, 1500, 100, rate=60.0, seed=9, range_ratio=0.5), kv_tokens=30_000,
            kv_link=Link(VLLM_LINK / 20))
    assert r.metrics["completed"] == 150 and max(seen) >= 2  # (pulls in flight across finishes)


def test_the_same_seed_gives_the_same_answer_and_intervals_hold_it():
    reqs = random_requests(100, 1024, 64, rate=10.0, seed=7)
    a = _pd(reqs, interval_samples=4, seed=3)
    b = _pd(reqs, interval_samples=4, seed=3)
    assert a.metrics == b.metrics and a.interval == b.interval
    for key in ("median_ttft_ms", "median_tpot_ms", "output_throughput"):
        lo, hi = a.interval[key]
        assert lo <= a.metrics[key] <= hi


def test_decode_replicas_of_another_tensor_parallelism():
    reqs = random_requests(60, 2048, 64, rate=4.0, seed=8)
    r = serve(load_config("llama-3-70b"), H200, FITTED, Deployment(tp=2), reqs, pd=(1, 1), decode_tp=4)
    assert r.disaggregated["gpus"] == 6
    # the pull moves the larger of the two sides' per-GPU share: the TP-2 prefill GPU's
    per_gpu = kv_bytes_per_token_per_gpu(load_config("llama-3-70b"), Deployment(tp=2))
    assert r.disaggregated["mean_kv_bytes_per_request"] == pytest.approx(per_gpu * reqs.input_tokens.mean())


def test_cli_json_and_text():
    from click.testing import CliRunner

    from rooflinesim.cli.main import cli

    args = ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "40", "--rate", "4", "--pd", "1:2"]
    out = json.loads(CliRunner().invoke(cli, [*args, "--json", "--interval-samples", "0"]).output)
    x = out["disaggregated"]
    assert (x["prefill_replicas"], x["decode_replicas"], x["gpus"]) == (1, 2, 3)
    assert out["kv_link_source"].startswith("vLLM's NixlConnector") and out["completed"] == 40
    text = CliRunner().invoke(cli, [*args, "--kv-link-bandwidth", "400GB/s", "--interval-samples", "0"])
    assert text.exit_code == 0 and "1 prefill and 2 decode replicas" in text.output and "400 GB/s" in text.output


@pytest.mark.parametrize("args, says", [
    (["--pd", "0:1"], "PREFILL:DECODE"),
    (["--pd", "2"], "PREFILL:DECODE"),
    (["--pd", "a:b"], "PREFILL:DECODE"),
    (["--pd", "1:1", "--engine", "trtllm"], "vllm"),
    (["--pd", "1:1", "--concurrency", "4"], "closed loop"),
    (["--pd", "1:1", "--dp", "2"], "--dp"),
    (["--pd", "1:1", "--pp", "2"], "pipeline"),
    (["--decode-tp", "2"], "go with --pd"),
    (["--pd", "1:1", "--kv-link-bandwidth", "fast"], "bandwidth"),
    (["--pd", "1:1", "--kv-link-latency", "-1ms"], "kv-link-latency"),
])
def test_bad_input_is_one_sentence_and_exit_2(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "5", *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_library_refuses_what_it_does_not_model():
    reqs = random_requests(5, 128, 8)
    with pytest.raises(UserError, match="vllm"):
        serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="trtllm", pd=(1, 1))
    with pytest.raises(UserError, match="go with --pd"):
        serve(LLAMA, H200, FITTED, Deployment(), reqs, decode_tp=2)


@settings(max_examples=40, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0, 5), st.integers(1, 3000), st.integers(1, 300)), min_size=1, max_size=40),
       budget=st.sampled_from([256, 2048, 8192]), seqs=st.sampled_from([4, 64, 256]),
       kv=st.sampled_from([4000, 50_000, 10**6]), pd=st.sampled_from([(1, 1), (2, 1), (1, 3)]),
       engine=st.sampled_from(["vllm", "sglang"]))
# (a decode replica's lone request, preempted, cannot finish beside a pulled one holding blocks)
@example(reqs=[(0.0, 1, 1)] * 4 + [(0.0, 1, 124), (0.5, 1729, 1), (0.25, 2198, 60)], budget=256, seqs=4, kv=4000,
         pd=(1, 1), engine="vllm")
def test_every_request_is_served_by_the_pair_whatever_the_workload(reqs, budget, seqs, kv, pd, engine):
    from rooflinesim.serve.traffic import Requests

    t, i, o = (np.array(x) for x in zip(*sorted(reqs)))
    kv = max(kv, int(((i + o + 15) // 16).max()) * 16)
    r = _pd(Requests(t - t[0], i, o), pd=pd, max_num_batched_tokens=max(budget, seqs), max_num_seqs=seqs,
            kv_tokens=kv, engine=engine)
    s, x = r.served, r.disaggregated
    assert r.metrics["completed"] == len(reqs) and np.all(np.isfinite(s.finish_s))
    # the first token after the prefill and the pull; every later token leaves a gap
    assert np.all(s.first_token_s >= s.scheduled_s) and np.all(s.finish_s >= s.first_token_s)
    assert x["prefill_replicas"] == pd[0] and x["decode_replicas"] == pd[1]
    assert s.itl_s.size == int((o - 1).sum()) and np.all(s.itl_s > 0)
    if s.steps["sequences"].size:  # (under SGLang, one-token outputs take no decode step)
        assert int(s.steps["sequences"].max()) <= seqs
        assert int(s.steps["tokens"].max()) <= max(budget, seqs)


def test_sglang_a_lone_request_takes_its_prefill_and_the_last_chunks_move():
    # SGLang's prefill server samples the first token and pushes each chunk's KV as it is
    # computed; the decode server streams that token when the KV is in, with no step of its own
    prompt = 3000
    r = _pd(random_requests(1, prompt, 50), engine="sglang", step_overhead_s=0.0, max_num_batched_tokens=1024,
            request_overhead_s=0.0)
    per_token = kv_bytes_per_token_per_gpu(LLAMA, Deployment())
    from rooflinesim.serve.simulate import step_times

    pre = step_times(LLAMA, H200, FITTED, Deployment(), max_tokens=4096, max_seqs=4096, max_context=prompt + 1)
    chunks = [pre.step_s(0, 0.0, chunk_n=1, chunk_tokens=c, chunk_context=e, samplers=int(e == prompt))
              for c, e in ((1024, 1024), (1024, 2048), (952, 3000))]
    last = per_token * 952 / SGLANG_LINK  # (the chunks before moved while the next were computed)
    assert r.metrics["mean_ttft_ms"] == pytest.approx((sum(chunks) + last) * 1e3, rel=1e-6)
    assert r.disaggregated["prefill_steps"] == 3 and r.disaggregated["decode_steps"] == 49


def test_sglang_pairs_keep_the_decodes_alone_too():
    reqs = random_requests(300, 2048, 200, rate=12.0, seed=2, range_ratio=0.5)
    pd = _pd(reqs, engine="sglang")
    colocated = serve(LLAMA, H200, FITTED, Deployment(dp=2), reqs, engine="sglang")
    m = pd.metrics
    assert m["completed"] == 300 and pd.served.itl_s.size == int((reqs.output_tokens - 1).sum())
    assert m["p99_tpot_ms"] < colocated.metrics["p99_tpot_ms"]
    assert int(pd.served.steps["tokens"].max()) <= int(pd.served.steps["sequences"].max())  # (decodes only)
    assert m["output_throughput"] == pytest.approx(colocated.metrics["output_throughput"], rel=0.02)


def test_the_highest_rate_a_pair_sustains_under_slos():
    from rooflinesim.serve.simulate import max_rate

    slos = {"p99_ttft_ms": 500.0, "p99_tpot_ms": 8.0}
    rate, r, tried = max_rate(LLAMA, H200, FITTED, Deployment(),
                              lambda x: random_requests(80, 2000, 100, rate=x, seed=1), slos, iterations=6, pd=(1, 1))
    assert 0 < rate < float("inf") and all(r.metrics[k] <= v for k, v in slos.items())
    assert r.disaggregated["decode_replicas"] == 1 and len(tried) == 7


def test_sglang_a_request_waiting_for_kv_gets_what_a_finished_pull_frees():
    # a pulled request with one output token finishes as it joins; the KV it frees goes to
    # the request waiting for KV behind it, with nothing else running or arriving
    from rooflinesim.serve.engine import EngineParams, simulate
    from rooflinesim.serve.simulate import step_times
    from rooflinesim.serve.traffic import Requests

    steps = step_times(LLAMA, H200, FITTED, Deployment(), max_tokens=4096, max_seqs=64, max_context=3000)
    p = EngineParams("sglang", 4096, 64, 1, 4000, 0.0)
    s = simulate("sglang", Requests(np.array([0.0, 0.001]), np.array([2000, 2632]), np.array([1, 5])), steps, p,
                 pull_s=np.array([0.01, 0.01]))
    assert np.all(np.isfinite(s.finish_s))
    assert s.first_token_s[0] == pytest.approx(0.01) and s.scheduled_s[1] == pytest.approx(0.01)
    assert s.first_token_s[1] == pytest.approx(0.02)  # (its KV given when the first's was freed, then pulled)
