"""serve's warm-up requests (``serve(..., warmup=k)``): the first k requests run on the engine,
warming its prefix cache, and the metrics are the others', as a benchmark's later stage on
a server an earlier stage warmed is measured; and ``serve --num-warmups``, vLLM bench serve's
warm-up copies of the first request before the measured run."""

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
from rooflinesim.serve.simulate import serve, warmups_done_s
from rooflinesim.serve.traffic import Requests, random_requests, with_warmups

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")


def _two_stages(n=150, gap_s=60.0, seed=3) -> tuple[Requests, Requests]:
    """A stage of ``n`` requests sharing four prefixes, and the same prompts again ``gap_s``
    after its last arrival (both stages together, and the second alone)."""
    first = random_requests(n, 300, 40, rate=5.0, seed=seed).with_prefixes(1500, 4, seed)
    both = first.then(first, float(first.arrival_s[-1]) + gap_s)
    return both, first


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "static"])
def test_warm_up_requests_run_but_only_the_others_are_measured(engine):
    reqs = random_requests(200, 400, 50, rate=8.0, seed=1)
    all_ = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine)
    warm = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine, warmup=120)
    a, w = all_.served, warm.served
    # the same run: every request served alike
    assert np.allclose(a.first_token_s, w.first_token_s) and np.allclose(a.finish_s, w.finish_s)
    m = warm.metrics
    assert m["completed"] == 80 and m["warmup_requests"] == 120 and "warmup_requests" not in all_.metrics
    assert m["total_output_tokens"] == int(reqs.output_tokens[120:].sum())
    ttft = (w.first_token_s - w.arrival_s)[120:] * 1e3
    assert m["median_ttft_ms"] == pytest.approx(float(np.median(ttft)))
    assert m["p99_ttft_ms"] == pytest.approx(float(np.percentile(ttft, 99)))
    assert m["duration_s"] == pytest.approx(float(w.finish_s[120:].max() - w.arrival_s[120]))
    assert 0 < m["steps"] < all_.metrics["steps"]


def test_a_warm_cache_spares_the_later_stage_the_first_sends_misses():
    both, first = _two_stages()
    n = len(first)
    cold = serve(LLAMA, H200, FITTED, Deployment(), first)
    warm = serve(LLAMA, H200, FITTED, Deployment(), both, warmup=n)
    # cold, each prefix's first request computed it whole; warm, every request finds its prefix
    assert warm.served.prefix_cache_hits == n * (1500 // 16 * 16)
    assert warm.metrics["prefix_cache_hit_rate"] > cold.metrics["prefix_cache_hit_rate"]
    assert warm.metrics["completed"] == n
    assert warm.metrics["p99_ttft_ms"] < cold.metrics["p99_ttft_ms"]
    # the stages apart (the server idle between them): the gaps counted are the later stage's alone
    assert warm.served.itl_s.size == int((first.output_tokens - 1).sum())


def test_replicas_share_the_warm_up_and_keep_the_requests_in_order():
    reqs = random_requests(300, 300, 30, rate=12.0, seed=5)
    one = serve(LLAMA, H200, FITTED, Deployment(dp=3), reqs)
    warm = serve(LLAMA, H200, FITTED, Deployment(dp=3), reqs, warmup=101)
    assert np.allclose(one.served.arrival_s, reqs.arrival_s - reqs.arrival_s[0])
    assert np.allclose(one.served.first_token_s, warm.served.first_token_s)
    assert warm.metrics["completed"] == 199
    ttft = (warm.served.first_token_s - warm.served.arrival_s)[101:] * 1e3
    assert warm.metrics["mean_ttft_ms"] == pytest.approx(float(ttft.mean()))


@pytest.mark.parametrize("k", [-1, 200, 201])
def test_a_warm_up_of_every_request_or_fewer_than_none_is_refused(k):
    reqs = random_requests(200, 300, 30, rate=4.0, seed=1)
    with pytest.raises(UserError, match="warm-up requests must be"):
        serve(LLAMA, H200, FITTED, Deployment(), reqs, warmup=k)


def test_warm_up_is_refused_with_a_disaggregated_pair():
    reqs = random_requests(50, 300, 30, rate=4.0, seed=1)
    with pytest.raises(UserError, match="colocated"):
        serve(LLAMA, H200, FITTED, Deployment(), reqs, warmup=10, pd=(1, 1))


def test_requests_then_shifts_the_later_and_pads_the_prefix_levels():
    a = random_requests(5, 100, 10, rate=2.0, seed=1)
    b = Requests(np.array([0.0, 1.0]), np.array([700, 800]), np.array([5, 6]),
                 np.array([[3, 7], [3, -1]]), np.array([[100, 700], [100, 0]]))
    ab = a.then(b, 10.0)
    assert len(ab) == 7 and np.allclose(ab.arrival_s[5:], [10.0, 11.0])
    assert ab.prefix_id.shape == (7, 2) and (ab.prefix_id[:5] == -1).all() and (ab.prefix_tokens[:5] == 0).all()
    assert (ab.prefix_id[5:] == b.prefix_id).all()
    assert (ab.longest_prefix() == [0] * 5 + [700, 100]).all()
    plain = a.then(a, 3.0)
    assert plain.prefix_id is None and len(plain) == 10


def test_warm_up_copies_are_the_first_request_and_share_its_whole_prompt():
    reqs = random_requests(20, 900, 40, rate=3.0, seed=2, range_ratio=0.5)
    warm = with_warmups(reqs, 4, 7.5)
    assert len(warm) == 24 and (warm.arrival_s[:4] == 0).all()
    assert np.allclose(warm.arrival_s[4:], reqs.arrival_s + 7.5)
    assert (warm.input_tokens[:5] == reqs.input_tokens[0]).all()
    assert (warm.output_tokens[:5] == reqs.output_tokens[0]).all()
    assert (warm.input_tokens[5:] == reqs.input_tokens[1:]).all()
    assert (warm.longest_prefix()[:5] == reqs.input_tokens[0]).all() and (warm.longest_prefix()[5:] == 0).all()
    # a workload with shared prefixes keeps them, the whole prompt one level deeper
    shared = reqs.with_prefixes(300, 3, seed=2)
    deeper = with_warmups(shared, 2, 1.0)
    assert deeper.prefix_id.shape == (22, 2)
    assert (deeper.prefix_id[:3, 0] == shared.prefix_id[0]).all()
    assert (deeper.prefix_tokens[:3, 1] == shared.input_tokens[0]).all()
    assert (deeper.prefix_id[3:, 0] == shared.prefix_id[1:]).all() and (deeper.prefix_id[3:, 1] == -1).all()
    assert with_warmups(reqs, 0, 5.0) is reqs


@pytest.mark.parametrize("concurrency", [None, 2])
def test_the_measured_requests_start_once_the_copies_have_finished(concurrency):
    reqs = random_requests(60, 2000, 60, rate=4.0, seed=4)
    alone = with_warmups(reqs, 6, warmups_done_s(LLAMA, H200, FITTED, Deployment(), reqs, 6,
                                                  concurrency=concurrency))
    copies = serve(LLAMA, H200, FITTED, Deployment(), alone.take(slice(0, 6)), concurrency=concurrency).served
    assert alone.arrival_s[6] == pytest.approx(float(copies.finish_s.max()))
    r = serve(LLAMA, H200, FITTED, Deployment(), alone, warmup=6, concurrency=concurrency)
    w = r.served
    assert w.first_token_s[:6].max() < w.arrival_s[6] and r.metrics["completed"] == 60
    if concurrency:  # (the copies two at a time, as vLLM's client caps them)
        assert w.first_token_s[2] > w.finish_s[:2].min()
    # the first measured request finds its prompt cached (all but its last token, in whole blocks)
    whole = int(reqs.input_tokens[0])
    cold = serve(LLAMA, H200, FITTED, Deployment(), reqs, concurrency=concurrency).served
    assert (w.first_token_s - w.arrival_s)[6] < 0.5 * (cold.first_token_s - cold.arrival_s)[0]
    assert w.prefix_cache_hits == (whole - 1) // 16 * 16


def test_cli_num_warmups_as_vllms_client():
    base = ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "40", "--rate", "6",
            "--interval-samples", "0"]
    code, out, err = run_cli([*base, "--num-warmups", "5", "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert got["num_warmups"] == 5 and got["warmup_requests"] == 5 and got["completed"] == 40
    code, out, _ = run_cli([*base, "--num-warmups", "5"])
    assert code == 0 and "after 5 warm-up requests (not counted)" in out
    for bad, says in ((["--num-warmups", "-1"], "--num-warmups"), (["--num-warmups", "2", "--pd", "1:1"], "colocated"),
                      (["--num-warmups", "9999990"], "at most")):
        code, _, err = run_cli([*base, *bad])
        assert code == 2 and says in err and "Traceback" not in err


def test_the_serving_chart_draws_the_measured_requests_and_marks_their_start():
    from rooflinesim.charts import serve_figure

    reqs = random_requests(120, 400, 40, rate=8.0, seed=2)
    r = serve(LLAMA, H200, FITTED, Deployment(), reqs, warmup=70)
    fig = serve_figure(r)
    s = r.served
    ttft = np.sort((s.first_token_s - s.arrival_s)[70:]) * 1e3
    drawn = fig.data[0]
    assert drawn.x[-1] == pytest.approx(float(ttft[-1])) and drawn.x[0] == pytest.approx(float(ttft[0]))
    marks = [shape.x0 for shape in fig.layout.shapes]
    assert len(marks) == 3 and all(x == pytest.approx(float(s.arrival_s[70])) for x in marks)
    assert not serve_figure(serve(LLAMA, H200, FITTED, Deployment(), reqs)).layout.shapes
