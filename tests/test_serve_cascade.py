"""serve's cascade attention: vLLM's FlashAttention backend attends to a prefix every running
request shares once for all of them (vllm/v1/attention/backends/flash_attn.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.deploy import Deployment
from rooflinesim.serve.schedulers import vllm
from rooflinesim.serve.schedulers.vllm import cascade_prefix
from rooflinesim.serve.simulate import serve, step_times
from rooflinesim.serve.defaults import cascade_rule
from rooflinesim.serve.traffic import Requests, random_requests

H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
LLAMA = load_config("llama-3.1-8b")
RULE = (32, 8, 132)  # (Llama-3.1-8B on one H200: query heads, KV heads, SMs)


def test_the_choice_is_vllms():
    # a prefix under 256 tokens, or fewer than 8 requests: never
    assert cascade_prefix(255, 100, False, RULE) == 0 and cascade_prefix(4096, 7, False, RULE) == 0
    # a step with a prefill chunk (no FlashDecoding), or attention without GQA: always
    assert cascade_prefix(256, 8, False, RULE) == 256 and cascade_prefix(4096, 8, True, (32, 32, 132)) == 4096
    # GQA decodes: whichever vLLM's count of thread-block waves makes faster. 8 decodes over
    # 1,024 tokens: cascade 1 wave x 8 tiles against FlashDecoding's 8 x 8 x 8 = 512 CTAs, 4
    # waves; 128 decodes: 1 x 8 against 63 waves
    assert cascade_prefix(1024, 8, True, RULE) == 0
    assert cascade_prefix(1024, 128, True, RULE) == 1024
    # (its boundary: 8 against ceil(64 n / 132) waves, cascade from n = 17)
    assert cascade_prefix(1024, 16, True, RULE) == 0 and cascade_prefix(1024, 17, True, RULE) == 1024


def test_only_where_vllms_flashattention_backend_runs():
    d = Deployment()
    assert cascade_rule("vllm", LLAMA, H200, d, False) == RULE
    assert cascade_rule("vllm", LLAMA, H200, Deployment(tp=2), False) == (16, 4, 132)
    assert cascade_rule("vllm", LLAMA, H200, d, True) is None  # (--disable-cascade-attn)
    assert cascade_rule("sglang", LLAMA, H200, d, False) is None
    assert cascade_rule("vllm", load_config("deepseek-v2-lite"), H200, d, False) is None  # (MLA)
    assert cascade_rule("vllm", load_config("mistral-7b-v0.1"), H200, d, False) is None  # (a sliding window)
    assert cascade_rule("vllm", LLAMA, load_spec("b200"), d, False) is None  # (FlashInfer there)
    assert cascade_rule("vllm", LLAMA, load_spec("mi300x"), d, False) is None
    assert cascade_rule("vllm", LLAMA, H200, Deployment(attention="naive"), False) is None


def test_the_prefix_is_attended_once_in_a_step():
    st = step_times(LLAMA, H200, FITTED, Deployment(), max_tokens=8192, max_seqs=1024, max_context=16_384)
    n, ctx, common = 1024, 6400.0, 6000
    plain = st.step_s(n, ctx, samplers=n)
    cascade = st.step_s(n, ctx, samplers=n, common=common)
    # (1,024 decodes read 6,000 tokens of KV each without it: most of the step)
    assert cascade < 0.5 * plain
    assert cascade == pytest.approx(st.dense_decode[n] + st.logits[n] + float(st.decode_attention(n, ctx - common))
                                    + st.prefix_attention(n, common), rel=1e-12)
    # the prefix's attention: its query-key pairs, so twice the prefix about twice the time
    assert 1.6 < st.prefix_attention(n, 2 * common) / st.prefix_attention(n, common) < 2.2
    assert st.decode_steps(n, np.array([ctx]), common)[0] == pytest.approx(cascade, rel=1e-12)


def _system_prompt(n=300, prefix=4000, groups=1, output=100, seed=1):
    return random_requests(n, 200, output, rate=float("inf"), seed=seed).with_prefixes(prefix, groups, seed)


def test_a_system_prompt_every_request_shares_is_read_once_a_step():
    reqs = _system_prompt()
    on = serve(LLAMA, H200, FITTED, Deployment(), reqs)
    off = serve(LLAMA, H200, FITTED, Deployment(), reqs, disable_cascade_attn=True)
    assert on.as_dict()["cascade_attention"] and not off.as_dict()["cascade_attention"]
    assert on.metrics["prefix_cache_hit_rate"] == off.metrics["prefix_cache_hit_rate"]
    assert on.metrics["median_tpot_ms"] < 0.7 * off.metrics["median_tpot_ms"]
    assert on.metrics["output_throughput"] > 1.3 * off.metrics["output_throughput"]
    # four system prompts: none every running request shares, and the steps are those without it
    four = _system_prompt(groups=4)
    a = serve(LLAMA, H200, FITTED, Deployment(), four).metrics
    b = serve(LLAMA, H200, FITTED, Deployment(), four, disable_cascade_attn=True).metrics
    for k, v in a.items():
        assert v == pytest.approx(b[k], rel=1e-12), k


def test_decode_stretches_take_the_steps_one_by_one_would(monkeypatch):
    # 20 requests on one system prompt finish first; then the 20 on the other share theirs,
    # and the batch's cascade attention starts within a stretch of decodes
    n = 40
    prefix_id = np.repeat([0, 1], n // 2)
    reqs = Requests(np.zeros(n), np.full(n, 2300), np.where(prefix_id == 0, 30, 200), prefix_id, np.full(n, 2000))
    fast = serve(LLAMA, H200, FITTED, Deployment(), reqs)
    monkeypatch.setattr(vllm.VllmV1, "stretches", False)
    slow = serve(LLAMA, H200, FITTED, Deployment(), reqs)
    off = serve(LLAMA, H200, FITTED, Deployment(), reqs, disable_cascade_attn=True)
    for k, v in fast.metrics.items():
        assert v == pytest.approx(slow.metrics[k], rel=1e-9), k
    assert fast.served.steps["duration_s"] == pytest.approx(slow.served.steps["duration_s"], rel=1e-9)
    assert fast.metrics["median_tpot_ms"] < off.metrics["median_tpot_ms"]


def test_the_cli_reports_it_and_turns_it_off_as_vllm_does():
    args = ["serve", "--model", "llama-3.1-8b", "--gpu", "h200", "--num-prompts", "40", "--rate", "inf",
            "--input-len", "100", "--output-len", "20", "--prefix-len", "1000", "--interval-samples", "0"]
    code, out, _ = run_cli(args)
    assert code == 0 and "cascade attention" in out
    code, out, _ = run_cli(args + ["--json"])
    assert code == 0 and json.loads(out)["cascade_attention"] is True
    code, out, _ = run_cli(args + ["--json", "--disable-cascade-attn"])
    assert code == 0 and json.loads(out)["cascade_attention"] is False
    code, out, err = run_cli(args + ["--engine", "sglang", "--disable-cascade-attn"])
    assert code == 2 and "vLLM's" in err and err.count("\n") == 1 and "Traceback" not in err


def test_plan_takes_the_flag_as_serve_does():
    code, _, err = run_cli(["plan", "--model", "llama-3.1-8b", "--rate", "2", "--slo-ttft-p99", "2s",
                            "--engine", "sglang", "--disable-cascade-attn"])
    assert code == 2 and "vLLM's" in err and err.count("\n") == 1 and "Traceback" not in err
