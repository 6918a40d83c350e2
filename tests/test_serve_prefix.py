"""serve's prefix cache (vLLM's automatic prefix caching, SGLang's radix cache) and the
workloads that share prefixes: --prefix-len/--num-prefixes and a trace's prefix columns."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.cli.main import cli
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.serve.simulate import serve
from rooflinesim.serve.traffic import Requests, parse_trace, random_requests, requests_at

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")


def _shared(n=300, prefix=2000, groups=4, rate=4.0, seed=2):
    return random_requests(n, 300, 60, rate=rate, seed=seed).with_prefixes(prefix, groups, seed)


def test_shared_prefixes_come_before_each_prompt_one_of_num_prefixes_each():
    base = random_requests(500, 300, 60, rate=4.0, seed=2)
    r = base.with_prefixes(2000, 4, 2)
    assert np.array_equal(r.input_tokens, base.input_tokens + 2000)
    assert np.array_equal(r.output_tokens, base.output_tokens) and np.array_equal(r.arrival_s, base.arrival_s)
    assert set(r.prefix_id.tolist()) == {0, 1, 2, 3} and set(r.prefix_tokens.tolist()) == {2000}
    assert base.with_prefixes(0, 1, 2) is base
    w = {"dataset": "random", "num_prompts": 50, "input_len": 100, "output_len": 10, "range_ratio": 0.0,
         "burstiness": 1.0, "seed": 3, "prefix_len": 64, "num_prefixes": 2}
    assert np.array_equal(requests_at(w, 2.0).prefix_id, requests_at(w, 9.0).prefix_id)  # (the same at any rate)


@pytest.mark.parametrize("engine, page", [("vllm", 16), ("sglang", 1)])
def test_the_cache_spares_each_prefix_after_its_first_request(engine, page):
    reqs = _shared()
    on = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine)
    off = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine, prefix_caching=False)
    m, s = on.metrics, on.served
    # every request but the first of each prefix finds its prefix, in whole pages
    hits = (len(reqs) - 4) * (2000 // page * page)
    assert s.prefix_cache_hits == hits and s.prefix_cache_queries == int(reqs.input_tokens.sum())
    assert m["prefix_cache_hit_rate"] == pytest.approx(hits / reqs.input_tokens.sum())
    # the tokens computed: every prompt's, less what the cache held, and every later output token
    assert int(s.steps["tokens"].sum()) == int(s.input_tokens.sum() + s.output_tokens.sum()
                                                - s.output_tokens.size) - hits
    assert "prefix_cache_hit_rate" not in off.metrics
    assert m["median_ttft_ms"] < 0.5 * off.metrics["median_ttft_ms"]  # (300 of 2,300 tokens to compute)
    assert on.as_dict()["prefix_caching"] and not off.as_dict()["prefix_caching"]


def test_prompts_without_a_shared_prefix_run_as_before():
    reqs = random_requests(200, 800, 80, rate=10.0, seed=4)
    on = serve(LLAMA, H200, FITTED, Deployment(), reqs)
    off = serve(LLAMA, H200, FITTED, Deployment(), reqs, prefix_caching=False)
    assert on.metrics["mean_ttft_ms"] == off.metrics["mean_ttft_ms"]
    assert on.metrics["prefix_cache_hit_rate"] == 0.0


def test_a_prefix_longer_than_the_token_budget_is_cached_once_its_prompt_is_computed():
    reqs = random_requests(60, 200, 20, rate=1.0, seed=5).with_prefixes(5000, 1, 5)
    s = serve(LLAMA, H200, FITTED, Deployment(), reqs, max_num_batched_tokens=2048).served
    assert s.prefix_cache_hits == 59 * (5000 // 16 * 16)


def test_a_whole_prompt_in_the_cache_still_computes_its_last_token():
    # (every prompt is its prefix: vLLM recomputes the last token, in its block, to sample from it)
    reqs = Requests(np.arange(20, dtype=float), np.full(20, 100), np.full(20, 5), np.zeros(20, dtype=np.int64),
                    np.full(20, 100))
    s = serve(LLAMA, H200, FITTED, Deployment(), reqs).served
    assert s.prefix_cache_hits == 19 * 96  # (99 tokens, in whole blocks of 16)
    g = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine="sglang").served
    assert g.prefix_cache_hits == 19 * 99


def test_engines_whose_cache_is_not_simulated_refuse_it():
    with pytest.raises(UserError, match="prefix caching is simulated for --engine vllm and sglang"):
        serve(LLAMA, H200, FITTED, Deployment(), _shared(n=10), engine="trtllm", prefix_caching=True)
    r = serve(LLAMA, H200, FITTED, Deployment(), _shared(n=10), engine="trtllm")  # (its default: without)
    assert "prefix_cache_hit_rate" not in r.metrics


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), prefix=st.integers(1, 3000), groups=st.integers(1, 5), rate=st.floats(0.5, 50),
       engine=st.sampled_from(["vllm", "sglang"]), kv=st.sampled_from([None, 12_000]), seed=st.integers(0, 99))
def test_every_request_is_served_with_the_cache_whatever_the_workload(n, prefix, groups, rate, engine, kv, seed):
    reqs = random_requests(n, 400, 50, rate=rate, seed=seed, range_ratio=0.5).with_prefixes(prefix, groups, seed)
    s = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine, kv_tokens=kv).served
    assert np.all(np.isfinite(s.finish_s)) and np.all(s.first_token_s >= s.arrival_s)
    assert 0 <= s.prefix_cache_hits <= s.prefix_cache_queries
    if s.preemptions == 0:  # (each prompt looked up once)
        assert s.prefix_cache_queries == int(reqs.input_tokens.sum())


def test_a_trace_gives_each_requests_prefix():
    lines = "\n".join(json.dumps({"arrival_s": t, "input_tokens": 900, "output_tokens": 10, "prefix_id": t % 2,
                                  "prefix_tokens": 640}) for t in range(6))
    r = parse_trace(lines, "t.jsonl")
    assert r.prefix_id.tolist() == [0, 1, 0, 1, 0, 1] and r.prefix_tokens.tolist() == [640] * 6
    csv_text = "arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,900,10,,\n1,900,10,3,500\n"
    c = parse_trace(csv_text, "t.csv")
    assert c.prefix_id.tolist() == [-1, 3] and c.prefix_tokens.tolist() == [0, 500]


@pytest.mark.parametrize("text, says", [
    ("arrival_s,input_tokens,output_tokens,prefix_id\n0,10,5,1\n", "needs a prefix_tokens column"),
    ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,5,1,20\n", "longer than its input"),
    ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,5,x,2\n", "prefix id"),
    ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,5,1,0\n", "prefix tokens must be"),
])
def test_bad_prefix_columns_are_one_sentence(text, says):
    with pytest.raises(UserError, match=says):
        parse_trace(text, "t.csv")


def _cli(*args):
    return CliRunner().invoke(cli, ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "60",
                                    "--rate", "4", "--interval-samples", "0", *args])


def test_cli_reports_the_cache_and_turns_it_off_as_vllm_does():
    on = _cli("--prefix-len", "1024", "--num-prefixes", "3", "--json")
    assert on.exit_code == 0, on.output
    d = json.loads(on.output)
    assert d["prefix_caching"] and d["prefix_len"] == 1024 and d["num_prefixes"] == 3
    assert 0.4 < d["prefix_cache_hit_rate"] < 0.5  # (1,024 of 2,048 tokens a prompt at most)
    off = json.loads(_cli("--prefix-len", "1024", "--num-prefixes", "3", "--no-enable-prefix-caching",
                          "--json").output)
    assert not off["prefix_caching"] and "prefix_cache_hit_rate" not in off
    assert off["median_ttft_ms"] > d["median_ttft_ms"]
    text = _cli("--prefix-len", "1024").output
    assert "prefix caching" in text and "prefix cache hit rate" in text and "1,024 shared-prefix tokens" in text


@pytest.mark.parametrize("args, says", [
    (["--num-prefixes", "3"], "--num-prefixes goes with --prefix-len"),
    (["--prefix-len", "10", "--engine", "trtllm", "--enable-prefix-caching"], "simulated for --engine vllm"),
    (["--prefix-len", "-1"], "--prefix-len"),
])
def test_cli_bad_prefix_options_are_one_sentence_and_exit_2(args, says):
    code, _, err = run_cli(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "5",
                            "--interval-samples", "0", *args])
    assert code == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def _nested(n=40, prompts=4, system=1000, whole=1500):
    """Prompts that nest two prefixes: a system prompt every request shares (level 0), then the
    whole prompt, one of ``prompts`` sent again and again (level 1), a request a second."""
    k = np.arange(n) % prompts
    return Requests(np.arange(n, dtype=float), np.full(n, whole), np.full(n, 5),
                    np.stack([np.zeros(n, dtype=np.int64), k], axis=1),
                    np.stack([np.full(n, system), np.full(n, whole)], axis=1))


@pytest.mark.parametrize("engine, page", [("vllm", 16), ("sglang", 1)])
def test_a_repeated_prompt_finds_itself_whole_and_a_new_one_its_system_prompt(engine, page):
    reqs = _nested()
    s = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine).served
    # the first request finds nothing; the first of each other prompt, the system prompt;
    # every repeat, its whole prompt but the last token
    assert s.prefix_cache_hits == 3 * (1000 // page * page) + 36 * (1499 // page * page)
    assert np.array_equal(reqs.longest_prefix(), np.full(40, 1500))
    # one level alone (the system prompt) finds less
    one = Requests(reqs.arrival_s, reqs.input_tokens, reqs.output_tokens, reqs.prefix_id[:, 0],
                   reqs.prefix_tokens[:, 0])
    assert serve(LLAMA, H200, FITTED, Deployment(), one, engine=engine).served.prefix_cache_hits == \
        39 * (1000 // page * page)


def test_the_longest_prefix_skips_levels_without_one():
    r = Requests(np.zeros(3), np.full(3, 900), np.full(3, 5), np.array([[0, 4], [1, -1], [-1, -1]]),
                 np.array([[300, 800], [300, 0], [0, 0]]))
    assert r.longest_prefix().tolist() == [800, 300, 0]
    assert r.take(slice(1, None)).longest_prefix().tolist() == [300, 0]
    assert random_requests(4, 100, 10, rate=1.0, seed=1).longest_prefix().tolist() == [0] * 4


def _churn(first_output=5, last_at=31.0):
    """A request with prefix 0 (2,000 tokens), 30 with prefixes of their own, one a second,
    then one with prefix 0 again at ``last_at``."""
    n = 32
    arrival = np.append(np.arange(31, dtype=float), last_at)
    ids = np.append(np.arange(31), 0)
    output = np.full(n, 5)
    output[0] = first_output
    order = np.argsort(arrival, kind="stable")  # (in order of arrival)
    return Requests(arrival[order], np.full(n, 2100), output[order], ids[order], np.full(n, 2000))


@pytest.mark.parametrize("engine, page", [("vllm", 16), ("sglang", 1)])
def test_a_prefix_no_request_holds_is_lost_once_its_blocks_are_taken_for_others(engine, page):
    # 30 prompts of 2,100 tokens pass through a cache of 20,000 after prefix 0's last
    # request: its blocks are taken for theirs, and the last request finds nothing; a cache
    # that holds them all still has it
    small = serve(LLAMA, H200, FITTED, Deployment(), _churn(), engine=engine, kv_tokens=20_000).served
    big = serve(LLAMA, H200, FITTED, Deployment(), _churn(), engine=engine, kv_tokens=200_000).served
    assert small.prefix_cache_hits == 0
    assert big.prefix_cache_hits == 2000 // page * page
    # prefix 0 again soon after (three prompts later, 6,300 tokens of the 20,000): still there
    soon = Requests(np.arange(5, dtype=float), np.full(5, 2100), np.full(5, 5), np.array([0, 1, 2, 3, 0]),
                    np.full(5, 2000))
    assert serve(LLAMA, H200, FITTED, Deployment(), soon, engine=engine, kv_tokens=20_000).served.prefix_cache_hits \
        == 2000 // page * page


@pytest.mark.parametrize("engine, page", [("vllm", 16), ("sglang", 1)])
def test_a_prefix_a_running_request_holds_is_never_lost(engine, page):
    # prefix 0's first request still decodes (3,000 tokens) while the 30 others pass through
    # the cache: its blocks are held, and the last request finds them
    reqs = _churn(first_output=3000, last_at=12.5)
    s = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine, kv_tokens=20_000).served
    assert s.finish_s[0] > 12.5  # (it was running when prefix 0's second request came)
    assert s.prefix_cache_hits == 2000 // page * page
    # (the same arrivals with its first request done in time: lost)
    assert serve(LLAMA, H200, FITTED, Deployment(), _churn(last_at=12.5), engine=engine,
                 kv_tokens=20_000).served.prefix_cache_hits == 0



def _together(n=40, prefix=2000, unique=100, output=300):
    """``n`` requests at once, each a ``prefix``-token prefix they all share and ``unique``
    tokens of its own, ``output`` tokens each."""
    return Requests(np.zeros(n), np.full(n, prefix + unique), np.full(n, output), np.zeros(n, dtype=np.int64),
                    np.full(n, prefix))


@pytest.mark.parametrize("engine, page", [("vllm", 16), ("sglang", 1)])
def test_a_prefix_the_running_requests_share_is_held_once(engine, page):
    # 40 prompts of 2,100 tokens with 300 tokens out each would need 96,000 KV tokens with a
    # copy of the prefix each; sharing one copy they need about 18,000, so a cache of
    # 40,000 runs them all at once, none preempted
    s = serve(LLAMA, H200, FITTED, Deployment(), _together(), engine=engine, kv_tokens=40_000).served
    assert s.preemptions == 0 and int(s.steps["sequences"].max()) == 40
    own = -(-(100 + 300 + page) // page) * page  # (each request's own tokens, with its part blocks)
    peak = int(s.steps["kv_blocks_used"].max()) * page
    assert 2000 + 40 * (400 - page) <= peak <= 2000 + 40 * own
    # (a prefix of their own each: a copy each, and the cache holds fewer at once)
    alone = _together()
    alone = Requests(alone.arrival_s, alone.input_tokens, alone.output_tokens, np.arange(40), alone.prefix_tokens)
    a = serve(LLAMA, H200, FITTED, Deployment(), alone, engine=engine, kv_tokens=40_000).served
    assert a.preemptions > 0 or int(a.steps["sequences"].max()) < 40


def _seen(monkeypatch):
    """The engine simulations serve makes, kept to look into once run."""
    from rooflinesim.serve import engine

    made, make = [], engine.engine_class

    def keep(name, stages=1):
        class Kept(make(name, stages)):
            def __init__(self, *args):
                super().__init__(*args)
                made.append(self)
        return Kept
    monkeypatch.setattr(engine, "engine_class", keep)
    return made


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), prefix=st.integers(1, 3000), groups=st.integers(1, 4), rate=st.floats(0.5, 200),
       engine=st.sampled_from(["vllm", "sglang"]), kv=st.sampled_from([8_000, 12_000, 60_000]),
       seed=st.integers(0, 99))
def test_the_shared_blocks_are_all_given_back_whatever_the_workload(n, prefix, groups, rate, engine, kv, seed):
    # preempted, retracted or finished, every request gives back what it held: at the end no
    # prefix is held, none counted twice, and the blocks in use never pass the cache's
    reqs = random_requests(n, 400, 200, rate=rate, seed=seed, range_ratio=0.5).with_prefixes(prefix, groups, seed)
    if int((reqs.input_tokens + reqs.output_tokens).max()) > kv:
        return
    with pytest.MonkeyPatch.context() as mp:
        made = _seen(mp)
        s = serve(LLAMA, H200, FITTED, Deployment(), reqs, engine=engine, kv_tokens=kv).served
    sim = made[-1]
    assert sim.dup == 0 and not sim.holders and not sim.sharers and not sim.marked.any()
    assert sim.freed >= sim.reused >= 0  # (allocated from nothing held: what was taken, less what came back)
    assert 0 <= int(s.steps["kv_blocks_used"].min()) and int(s.steps["kv_blocks_used"].max()) <= sim.p.kv_blocks
    assert np.all(np.isfinite(s.finish_s))

MOONCAKE = "\n".join(json.dumps(r) for r in [
    {"timestamp": 0, "input_length": 1300, "output_length": 20, "hash_ids": [0, 1, 2]},
    {"timestamp": 2000, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 3]},
    {"timestamp": 1000, "input_length": 600, "output_length": 15, "hash_ids": [4, 5]},
    {"timestamp": 3000, "input_length": 900, "output_length": 15, "hash_ids": []},
])


def test_a_mooncake_trace_gives_milliseconds_and_nested_prefixes_by_block():
    r = parse_trace(MOONCAKE, "mooncake.jsonl")
    assert r.arrival_s.tolist() == [0.0, 1.0, 2.0, 3.0]  # (milliseconds, sorted)
    assert r.input_tokens.tolist() == [1300, 600, 1100, 900]
    assert r.prefix_id.tolist() == [[0, 1, 2], [4, 5, -1], [0, 1, 3], [-1, -1, -1]]
    assert r.prefix_tokens.tolist() == [[512, 1024, 1300], [512, 600, 0], [512, 1024, 1100], [0, 0, 0]]
    assert r.longest_prefix().tolist() == [1300, 600, 1100, 0]
    s = serve(LLAMA, H200, FITTED, Deployment(), r).served
    assert s.prefix_cache_hits == 1024  # (the third request finds the first's first two blocks)
    small = parse_trace(MOONCAKE.replace('"hash_ids": [0, 1, 2]', '"hash_ids": [0, 1, 2, 6, 7, 8, 9, 10, 11, 12]'),
                        "m.jsonl", block_tokens=128)
    assert small.prefix_tokens[0, :3].tolist() == [128, 256, 384]


def test_a_mooncake_trace_through_the_cli(tmp_path):
    f = tmp_path / "mooncake.jsonl"
    f.write_text(MOONCAKE + "\n")
    d = json.loads(_cli_trace(str(f), "--json").output)
    assert d["completed"] == 4 and d["prefix_cache_hit_rate"] == pytest.approx(1024 / 3900)


def _cli_trace(path, *args):
    return CliRunner().invoke(cli, ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--trace", path,
                                    "--interval-samples", "0", *args])


@pytest.mark.parametrize("row, says", [
    ({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}, "cover more than its"),
    ({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": "x"}, "hash_ids must be a list"),
    ({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, -2]}, "hash_ids must be a list"),
    ({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1], "prefix_id": 1,
      "prefix_tokens": 5}, "not both"),
])
def test_bad_hash_ids_are_one_sentence_and_exit_2(tmp_path, row, says):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(row) + "\n")
    code, _, err = run_cli(["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--trace", str(f),
                            "--interval-samples", "0"])
    assert code == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_trace_run_prints_its_summary_and_takes_traces_past_a_mebibyte(tmp_path):
    f = tmp_path / "big.jsonl"
    rows = [json.dumps({"timestamp": 200 * i, "input_length": 300, "output_length": 4, "hash_ids": [0],
                        "padding": "x" * 200}) for i in range(6000)]
    f.write_text("\n".join(rows) + "\n")
    assert f.stat().st_size > 1024 * 1024
    res = _cli_trace(str(f))
    assert res.exit_code == 0, res.output
    assert f"trace {f}" in res.output and "completed requests" in res.output and "prefix cache hit rate" in res.output
