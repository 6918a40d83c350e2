"""SGLang's memory budget (`rooflinesim fit --engine sglang`, serve's and plan's KV cache for
--engine sglang): its default mem_fraction_static, golden start-up logs, properties, and the
CLI's answers and exit codes."""

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.memory import fit, kv_bytes_per_token, sglang
from rooflinesim.memory.overheads import device_memory
from rooflinesim.models.config import load_config

from helpers import run_cli

GIB, MIB = 2**30, 2**20
LOGS = Path(__file__).parent / "data" / "sglang_logs"
GOLDEN = yaml.safe_load((LOGS / "cases.yaml").read_text())
CASES = GOLDEN["cases"]


def _model(case):
    name = case["model"]
    return str(LOGS / name) if name.endswith(".json") else name


# ------------------------------------------------------------------------ the default fraction

def test_default_fraction_is_sglangs_reserve_over_nvidia_smis_memory():
    # H100 (81,559 MiB), TP 1: 512 MiB of metadata + 1.5 MiB x 8,192 prefill tokens + 2 MiB x 256
    # decode graphs + 1 GiB x 1/8 + 8 MiB x 58 piecewise graphs = 13,904 MiB
    assert sglang.piecewise_graph_tokens(8192) == 58
    reserve = 512 + 1.5 * 8192 + 2 * 256 + 1024 / 8 + 8 * 58
    assert sglang.mem_fraction_static(81559 * MIB, tp=1, pp=1, chunk=8192, graphs=256) == round(
        (81559 - reserve) / 81559, 3) == 0.83
    # without piecewise graphs (SGLang 0.5.3 to 0.5.9)
    assert sglang.mem_fraction_static(81559 * MIB, tp=1, pp=1, chunk=8192, graphs=256, piecewise=False) == 0.835
    # MLA models reserve 1.5 GiB for piecewise graphs however many
    assert sglang.reserve_mib(81559, tp=8, pp=1, chunk=8192, graphs=512, piecewise=True, mla=True) == (
        512 + 1.5 * 8192 + 2 * 512 + 1024 + 1536)


def test_default_fraction_keeps_ten_gib_on_large_gpus():
    # a small prefill chunk and no graphs: the 10 GiB floor above 60 GiB of memory
    assert sglang.reserve_mib(143771, tp=1, pp=1, chunk=512, graphs=0, piecewise=False, mla=False) == 10 * 1024
    # below 60 GiB no floor
    assert sglang.reserve_mib(46068, tp=1, pp=1, chunk=512, graphs=0, piecewise=False, mla=False) == (
        512 + 1.5 * 2048 + 1024 / 8)


@pytest.mark.parametrize("case", GOLDEN["defaults"], ids=[c["id"] for c in GOLDEN["defaults"]])
def test_golden_default_fraction(case):
    spec = load_spec(case["gpu_spec"])
    memory = device_memory(spec).nvidia_smi_bytes
    got = sglang.mem_fraction_static(memory, tp=case["tp"], pp=1, chunk=sglang.chunked_prefill_size(spec),
                                     graphs=sglang.cuda_graph_max_bs(spec, case["tp"]),
                                     piecewise=case["piecewise_cuda_graph"], mla=case["mla"])
    assert got == case["logged"]["mem_fraction_static"]


def test_defaults_by_gpu_memory():
    assert (sglang.chunked_prefill_size(load_spec("h100")), sglang.cuda_graph_max_bs(load_spec("h100"), 1),
            sglang.cuda_graph_max_bs(load_spec("h100"), 4)) == (8192, 256, 512)
    assert sglang.chunked_prefill_size(load_spec("b200")) == 16384
    assert sglang.chunked_prefill_size(load_spec("l4")) == 2048


# ------------------------------------------------------------------------ golden start-up logs

def _golden(case, check):
    """(ours, logged) tokens of one golden check."""
    logged = case["logged"]
    cfg = load_config(_model(case))
    if check == "formula":
        cell = kv_bytes_per_token(cfg, case["tp"], case["kv"], cfg.num_layers)
        ours = sglang.pool_tokens(logged["free_before_weights_gib"] * GIB, logged["free_after_weights_gib"] * GIB,
                                  case["mem_fraction_static"], cell)
        return ours, logged["max_total_num_tokens"]
    assert check == "full_chain"
    plan = fit(cfg, case["gpu_spec"], batch=1, context=1, tp=case["tp"], weights=case.get("weights", "bf16"),
               kv=case["kv"], block_size=1, engine="sglang", mem_fraction_static=case["mem_fraction_static"])
    return plan.kv_cache_tokens, logged["max_total_num_tokens"]


def test_golden_file_is_complete():
    assert len(CASES) >= 5 and len({c["model"] for c in CASES}) >= 4
    for c in CASES:
        assert c["source"].startswith("https://"), c["id"]
        assert set(c["meets"]) == set(c["checks"]), c["id"]
        if not all(c["meets"].values()):
            assert c.get("why"), f"{c['id']}: a check that misses needs a reason"
    assert sum(c["meets"].get("full_chain", False) for c in CASES) >= 2


@pytest.mark.parametrize("case,check", [(c, k) for c in CASES for k in c["checks"]],
                         ids=[f"{c['id']}-{k}" for c in CASES for k in c["checks"]])
def test_golden_sglang_logs(case, check):
    ours, logged = _golden(case, check)
    error = ours / logged - 1
    assert (abs(error) <= GOLDEN["tolerance"][check]) == case["meets"][check], (
        f"{case['id']} {check}: ours {ours:,} vs logged {logged:,} ({100 * error:+.2f} %); "
        f"cases.yaml says meets={case['meets'][check]}")


def test_golden_weights_are_what_sglang_loaded():
    """Where the full chain meets the log, our weights are SGLang's within 1 %."""
    for case in CASES:
        if case["meets"].get("full_chain"):
            plan = fit(_model(case), case["gpu_spec"], batch=1, context=1, tp=case["tp"], block_size=1,
                       engine="sglang", mem_fraction_static=case["mem_fraction_static"])
            assert plan.per_gpu.weights_total / GIB == pytest.approx(case["logged"]["weights_gib"], rel=0.01)


# ------------------------------------------------------------------------ the budget

def test_budget_is_sglangs_rule_on_our_figures():
    plan = fit("llama-3.1-8b", "h100", batch=1, context=1, engine="sglang", mem_fraction_static=0.88, block_size=1)
    s, b = plan.setup, plan.per_gpu
    o = s.overheads
    before = s.capacity_bytes - o.cuda_context  # (TP 1: no distributed set-up)
    assert b.kv_room == pytest.approx(before - b.weights_total - before * (1 - 0.88), rel=1e-12)
    assert plan.kv_cache_tokens == int(b.kv_room) // 131072
    # the parts add up to the card when the KV cache fills its room
    full = fit("llama-3.1-8b", "h100", batch=1, context=plan.kv_cache_tokens, engine="sglang",
               mem_fraction_static=0.88, block_size=1).per_gpu
    assert full.total == pytest.approx(s.capacity_bytes, rel=1e-6)
    d = plan.as_dict()
    assert d["engine"] == "sglang" and d["sglang"]["max_total_num_tokens"] == plan.kv_cache_tokens
    assert d["assumptions"]["mem_fraction_static"] == 0.88


def test_budget_counts_the_distributed_set_up_per_peer():
    one = fit("llama-3.3-70b", "h200", batch=1, context=1, tp=4, engine="sglang", mem_fraction_static=0.85)
    o = one.setup.overheads
    assert one.per_gpu.overheads["distributed"] == 3 * o.sglang_distributed_per_peer


def test_default_fraction_is_used_and_named():
    plan = fit("llama-3.1-8b", "h200", batch=1, context=1, engine="sglang")
    s = plan.setup
    assert s.utilization == sglang.mem_fraction_static(143771 * MIB, tp=1, pp=1, chunk=8192, graphs=256)
    assert "0.5.10" in s.utilization_source and "no nvidia-smi figure" not in s.utilization_source
    # a GPU with no nvidia-smi figure says what stood for it
    other = fit("llama-3.1-8b", "b200", batch=1, context=1, engine="sglang").setup
    assert "no nvidia-smi figure for b200: its spec capacity" in other.utilization_source
    eager = fit("llama-3.1-8b", "h200", batch=1, context=1, engine="sglang", piecewise_cuda_graph=False)
    assert eager.setup.utilization > s.utilization and eager.kv_cache_tokens > plan.kv_cache_tokens


@given(st.floats(0.5, 0.95), st.floats(0.001, 0.04))
def test_more_fraction_more_kv(fraction, more):
    lo = fit("llama-3.1-8b", "h100", batch=1, context=1, engine="sglang", mem_fraction_static=fraction)
    hi = fit("llama-3.1-8b", "h100", batch=1, context=1, engine="sglang", mem_fraction_static=fraction + more)
    assert hi.kv_cache_tokens >= lo.kv_cache_tokens


def test_wrong_flags_for_the_engine_are_one_sentence():
    with pytest.raises(UserError, match="mem_fraction_static"):
        fit("llama-3.1-8b", "h100", engine="sglang", gpu_memory_utilization=0.8)
    with pytest.raises(UserError, match="SGLang"):
        fit("llama-3.1-8b", "h100", engine="vllm", mem_fraction_static=0.8)
    with pytest.raises(UserError, match="must be in"):
        fit("llama-3.1-8b", "h100", engine="sglang", mem_fraction_static=1.5)


# ------------------------------------------------------------------------ the CLI

def _cli(*args):
    """(exit code, stdout and stderr) of ``rooflinesim ARGS``."""
    code, out, err = run_cli(list(args))
    return code, out + err


def test_cli_fit_sglang_json_and_table():
    code, out = _cli("fit", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang",
                     "--mem-fraction-static", "0.88", "--context", "8192", "--json")
    assert code == 0, out
    d = json.loads(out)
    assert d["block_size"] == 1 and d["sglang"]["mem_fraction_static"] == 0.88
    assert abs(d["kv_cache_tokens"] / 444500 - 1) < 0.01  # (the docs' log above)
    code, out = _cli("fit", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--context", "8192")
    assert code == 0 and "SGLang budget" in out and "max_total_num_tokens" in out


@pytest.mark.parametrize("args", [
    ("--engine", "sglang", "--gpu-memory-utilization", "0.8"),
    ("--engine", "vllm", "--mem-fraction-static", "0.8"),
    ("--mem-fraction-static", "0.8"),
    ("--engine", "vllm", "--eager-prefill"),
    ("--engine", "sglang", "--mem-fraction-static", "0"),
    ("--engine", "sglang", "--cuda-graph-max-bs", "-1"),
])
def test_cli_fit_bad_sglang_flags_exit_2(args):
    code, out = _cli("fit", "--model", "llama-3.1-8b", "--gpu", "h100", *args)
    assert code == 2 and "Traceback" not in out and len(out.strip().splitlines()) == 1, out


def test_serve_sglang_takes_its_own_budget():
    code, out = _cli("serve", "--model", "llama-3.1-8b", "--gpu", "h100", "--engine", "sglang", "--num-prompts",
                     "20", "--input-len", "256", "--output-len", "32", "--rate", "4", "--interval-samples", "0",
                     "--mem-fraction-static", "0.88", "--json")
    assert code == 0, out
    d = json.loads(out)
    planned = fit("llama-3.1-8b", "h100", batch=1, context=1, engine="sglang", mem_fraction_static=0.88,
                  prefill_chunk_tokens=8192, block_size=1)
    assert d["kv_cache_tokens"] == planned.kv_cache_tokens
    assert d["mem_fraction_static"] == 0.88 and "fit --engine sglang" in d["kv_cache_source"]
    code, out = _cli("serve", "--model", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "5", "--input-len", "64",
                     "--output-len", "8", "--interval-samples", "0", "--json")
    d = json.loads(out)
    assert code == 0 and d["gpu_memory_utilization"] == 0.9 and "fit --engine vllm" in d["kv_cache_source"]
    for args in (("--engine", "sglang", "--gpu-memory-utilization", "0.8"),
                 ("--engine", "vllm", "--mem-fraction-static", "0.8")):
        code, out = _cli("serve", "--model", "llama-3.1-8b", "--gpu", "h100", "--num-prompts", "5", *args)
        assert code == 2 and "Traceback" not in out, out


@pytest.mark.parametrize("args", [("--engine", "sglang", "--gpu-memory-utilization", "0.8"),
                                  ("--mem-fraction-static", "0.8")])
def test_plan_takes_each_engines_own_memory_flag(args):
    code, out = _cli("plan", "--model", "llama-3.1-8b", "--rate", "5", "--slo-ttft-p99", "1s", "--max-gpus", "2",
                     "--gpu", "h100", *args)
    assert code == 2 and "Traceback" not in out and len(out.strip().splitlines()) == 1, out
