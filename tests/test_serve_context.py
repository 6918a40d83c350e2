"""The longest request an engine accepts (--max-model-len) and vLLM's refusal to start when
its KV cache cannot hold one such request: serve and plan say so in one sentence, and plan
reports the --max-model-len a deployment must be launched with."""

import json
from contextlib import nullcontext

import numpy as np
import pytest
from helpers import run_cli

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.serve import context
from rooflinesim.serve.plan import plan
from rooflinesim.serve.simulate import serve
from rooflinesim.serve.defaults import engine_limits
from rooflinesim.serve.traffic import Requests

LLAMA = load_config("llama-3.1-8b")  # max_position_embeddings 131,072
LLAMA70 = load_config("llama-3.1-70b")
MISTRAL = load_config("mistral-7b-v0.1")  # a 4,096-token sliding window on every layer, 32,768 positions
GH200, H200 = load_spec("gh200"), load_spec("h200")


def _reqs(prompt, output, n=4):
    return Requests(np.arange(n) * 0.1, np.full(n, prompt), np.full(n, output))


def test_vllms_kv_need_for_one_request_of_max_model_len():
    # a full-attention layer: whole blocks of the context
    assert context.kv_needed(LLAMA, 131_072, 8192, 16) == 131_072
    assert context.kv_needed(LLAMA, 1000, 8192, 16) == 1008
    # a sliding window: the window less one plus a step's tokens, one block more (kv_cache_interface.py)
    assert context.kv_needed(MISTRAL, 32_768, 8192, 16) == (-(-(4096 - 1 + 8192) // 16) + 1) * 16
    assert context.kv_needed(MISTRAL, 100, 8192, 16) == (7 + 1) * 16
    # the longest that fits: the model's where its need fits, else the cache's whole blocks
    assert context.largest_fitting(LLAMA, 40_000, 8192, 16) == 40_000 // 16 * 16
    assert context.largest_fitting(LLAMA, 10**6, 8192, 16) == 131_072
    assert context.largest_fitting(MISTRAL, 20_000, 8192, 16) == 32_768
    fits = context.largest_fitting(MISTRAL, 5000, 8192, 16)
    assert context.kv_needed(MISTRAL, fits, 8192, 16) <= 5000 < context.kv_needed(MISTRAL, fits + 16, 8192, 16)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_request_past_the_context_is_refused(engine):
    prof = resolve_profile(H200, None)
    with pytest.raises(UserError, match="max_model_len 131,072") as e:
        serve(LLAMA, H200, prof, Deployment(), _reqs(131_000, 100), engine=engine)
    assert f"{engine} rejects them" in str(e.value) and "4 of 4 requests" in str(e.value)
    with pytest.raises(UserError, match="max_model_len 2,000"):
        serve(LLAMA, H200, prof, Deployment(), _reqs(1990, 20), engine=engine, max_model_len=2000)
    r = serve(LLAMA, H200, prof, Deployment(), _reqs(1980, 20), engine=engine, max_model_len=2000)
    assert r.engine.max_model_len == 2000 and r.as_dict()["max_model_len"] == 2000
    with pytest.raises(UserError, match="past llama-3.1-8b's context of 131,072"):
        serve(LLAMA, H200, prof, Deployment(), _reqs(100, 10), engine=engine, max_model_len=131_073)


def test_static_batches_are_priced_whatever_their_length():
    r = serve(LLAMA, H200, resolve_profile(H200, None), Deployment(), _reqs(131_000, 200, n=1), engine="static")
    assert r.metrics["completed"] == 1 and r.engine.max_model_len is None


def test_vllm_does_not_start_where_its_kv_cache_cannot_hold_one_longest_request():
    prof = resolve_profile(GH200, None)
    d = Deployment(weights="fp8")  # 70B fp8 on one GH200: about 34,000 KV tokens, under 131,072
    with pytest.raises(UserError, match="vLLM would not start") as e:
        serve(LLAMA70, GH200, prof, d, _reqs(1000, 100))
    fits = int(str(e.value).split("pass --max-model-len ")[1].split(" ")[0].replace(",", ""))
    assert 20_000 < fits < 60_000 and fits % 16 == 0
    r = serve(LLAMA70, GH200, prof, d, _reqs(1000, 100), max_model_len=fits)
    assert r.engine.max_model_len == fits and r.kv_tokens == fits
    with pytest.raises(UserError, match="vLLM would not start"):
        serve(LLAMA70, GH200, prof, d, _reqs(1000, 100), max_model_len=fits + 1)
    # SGLang starts (its context limit stays; a request longer than the pool is refused by the scheduler)
    s = serve(LLAMA70, GH200, prof, d, _reqs(1000, 100), engine="sglang")
    assert s.engine.max_model_len == 131_072
    # a KV cache read from a server's log is one that started: its max_model_len is what it holds
    logged = serve(LLAMA70, GH200, prof, d, _reqs(1000, 100), kv_tokens=30_000)
    assert logged.engine.max_model_len == 30_000 // 16 * 16
    with pytest.raises(UserError, match="vLLM would not start"):
        serve(LLAMA70, GH200, prof, d, _reqs(1000, 100), kv_tokens=30_000, max_model_len=40_000)
    # --max-model-len auto (vLLM 0.14, PR 29431): the longest the cache holds, up to the model's
    assert serve(LLAMA70, GH200, prof, d, _reqs(1000, 100), max_model_len="auto").engine.max_model_len == fits
    assert serve(LLAMA, H200, resolve_profile(H200, None), Deployment(), _reqs(1000, 100),
                 max_model_len="auto").engine.max_model_len == 131_072


def test_vllms_step_budget_must_hold_a_token_of_each_running_request():
    prof = resolve_profile(H200, None)
    with pytest.raises(UserError, match=r"max_num_batched_tokens \(512\) must be at least max_num_seqs \(1,024\)"):
        serve(LLAMA, H200, prof, Deployment(), _reqs(100, 10), max_num_batched_tokens=512)
    r = serve(LLAMA, H200, prof, Deployment(), _reqs(100, 10), max_num_batched_tokens=512, max_num_seqs=512)
    assert r.metrics["completed"] == 4
    # (SGLang's chunk has no such rule)
    assert serve(LLAMA, H200, prof, Deployment(), _reqs(100, 10), engine="sglang",
                 max_num_batched_tokens=64).metrics["completed"] == 4


@pytest.mark.parametrize("prompt, output, refused", [
    (2_000, 998, False), (2_000, 999, True),  # (prompt and output: at most the pool less 2)
    (2_994, 1, False), (2_995, 1, True),  # (a prompt: at most the pool less 6)
])
def test_sglang_holds_a_request_to_its_kv_pool(prompt, output, refused):
    # (SGLang's max_req_len, its pool less one: a longer prompt aborted, an output cut; serve
    # says so rather than simulate another benchmark; a pair's pools too)
    prof = resolve_profile(H200, None)
    reqs = Requests(np.array([0.0, 0.5]), np.array([100, prompt]), np.array([10, output]))
    for pd in (None, (1, 1)):
        run = lambda: serve(LLAMA, H200, prof, Deployment(), reqs, engine="sglang", kv_tokens=3_000,  # noqa: E731
                            interval_samples=0, pd=pd)
        if refused:
            with pytest.raises(UserError, match="1 of 2 requests outgrow SGLang's KV pool of 3,000 tokens"):
                run()
        else:
            assert run().served.output_tokens.tolist() == [10, output]
    with pytest.raises(UserError, match="outgrow SGLang's KV pool") if refused else nullcontext():
        context.check_sglang_pool(reqs.input_tokens, reqs.output_tokens, 3_000)


def test_sglangs_running_requests_follow_its_context_length():
    full = engine_limits("sglang", LLAMA, H200, 200_000)["max_num_seqs"]
    short = engine_limits("sglang", LLAMA, H200, 200_000, 4096)["max_num_seqs"]
    assert full == 2048 and short == 4096  # (kv / context x 512, within [2048, 4096])


def test_cli_says_it_in_one_sentence_with_exit_2():
    base = ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "5", "--interval-samples", "0"]
    for args, says in ((["--input-len", "140000"], "requests need more than max_model_len 131,072"),
                       (["--max-model-len", "200000"], "past llama-3.1-8b's context"),
                       (["--max-model-len", "500"], "requests need more than max_model_len 500"),
                       (["--max-num-batched-tokens", "1"], "must be at least max_num_seqs"),
                       (["--engine", "sglang", "--kv-cache-tokens", "3000", "--input-len", "2990"],
                        "outgrow SGLang's KV pool of 3,000 tokens"),
                       ):
        code, _, err = run_cli(base + args)
        assert code == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err, (args, err)
    code, _, err = run_cli(["serve", "--model", "llama-3.1-70b", "--gpu", "gh200", "--weights", "fp8",
                            "--num-prompts", "5", "--interval-samples", "0"])
    assert code == 2 and "vLLM would not start" in err and "--max-model-len" in err
    code, out, _ = run_cli(base + ["--max-model-len", "4096", "--json"])
    assert code == 0 and json.loads(out)["max_model_len"] == 4096
    code, _, err = run_cli(base + ["--max-model-len", "long"])
    assert code == 2 and "whole number" in err and "Traceback" not in err
    gh = ["serve", "--model", "llama-3.1-70b", "--gpu", "gh200", "--weights", "fp8", "--num-prompts", "5",
          "--interval-samples", "0", "--json", "--max-model-len"]
    for spelling in ("auto", "-1"):
        code, out, err = run_cli(gh + [spelling])
        assert code == 0, err
        assert 20_000 < json.loads(out)["max_model_len"] < 60_000
    code, out, _ = run_cli(base)
    assert code == 0 and "max_model_len 131,072" in out


PRICES = {"gh200": {"usd_per_gpu_hour": 2.0, "source": "test"}, "h200-sxm": {"usd_per_gpu_hour": 4.0, "source": "test"}}
WORKLOAD = {"dataset": "random", "input_len": 1024, "output_len": 128, "range_ratio": 0.5, "burstiness": 1.0,
            "num_prompts": 60, "seed": 0}


def _plan(**kw):
    args = dict(rate=1.0, slos={"p99_tpot_ms": 200.0}, workload=WORKLOAD, gpus=["gh200", "h200-sxm"],
                weights=["fp8"], kv_dtypes=["bf16"], max_gpus=1, prices=PRICES, samples=0, jobs=1)
    args.update(kw)
    return plan("llama-3.1-70b", **args)


def test_plan_reports_the_max_model_len_to_launch_with():
    out = _plan()
    best = out["best"]
    assert best["gpu"] == "gh200"  # (the cheaper card: its KV cache holds the workload, not 131,072 tokens)
    assert best["max_model_len"] < 131_072 and best["max_model_len"] == best["kv_cache_tokens"] // 16 * 16
    h200 = [r for r in out["feasible"] if r["gpu"] == "h200-sxm"]
    assert h200 and all(r["max_model_len"] == 131_072 for r in h200)
    # a context every deployment must take: the GH200's cache cannot hold one request of it
    wide = _plan(max_model_len=100_000)
    assert wide["best"]["gpu"] == "h200-sxm" and wide["best"]["max_model_len"] == 100_000
    gh = [r for r in wide["rejected"] if r["gpu"] == "gh200"]
    assert gh and gh[0]["rejected"] == "does not fit" and "to start at max_model_len 100,000" in gh[0]["reason"]
    with pytest.raises(UserError, match="requests need more than max_model_len 1,000"):
        _plan(max_model_len=1000)
    assert _plan(max_model_len="auto")["best"] == best


def test_plan_cli_shows_the_column_and_refuses_a_workload_past_the_context():
    args = ["plan", "--model", "llama-3.1-70b", "--rate", "1", "--slo-tpot-p99", "200ms", "--gpu", "gh200",
            "--weights", "fp8", "--max-gpus", "1", "--num-prompts", "40", "--interval-samples", "0"]
    code, out, err = run_cli(args)
    assert code == 0, err
    assert "max_model_len" in out
    code, _, err = run_cli(args + ["--input-len", "140000"])
    assert code == 2 and "max_model_len 131,072" in err and "Traceback" not in err
