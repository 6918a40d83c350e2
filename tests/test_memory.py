"""Will it fit (rooflinesim.memory, `rooflinesim fit`): exact counts, golden vLLM start-up
logs, properties, and the CLI's answers and exit codes."""

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rooflinesim.errors import UserError
from rooflinesim.memory import (Parallelism, Quantization, budget, fit, kv_bytes_per_token,
                                kv_cache_bytes, load_overheads, make_setup, stage_layers,
                                tokens_from_kv_memory, weight_bytes)
from rooflinesim.models.config import from_hf_dict, load_config
from rooflinesim.models.presets import preset_names, preset_path

GIB = 2**30
LOGS = Path(__file__).parent / "data" / "vllm_logs"


# ------------------------------------------------------------------------ KV cache formulas

def test_kv_bytes_per_token_llama3_70b_bf16_tp4():
    cfg = load_config("llama-3-70b")
    # 80 layers x 2 KV heads per GPU (8 / 4) x 128 head dim x K and V x 2 bytes
    assert kv_bytes_per_token(cfg, 4, "bf16") == 2 * 80 * 2 * 128 * 2 == 81_920
    assert kv_bytes_per_token(cfg, 4, "fp8") == 81_920 / 2


def test_kv_heads_replicate_when_fewer_than_tp():
    cfg = load_config("llama-3-70b")  # 8 KV heads
    # TP 16: one KV head per GPU (replicated), not half a head
    assert kv_bytes_per_token(cfg, 16, "bf16") == 80 * 1 * 256 * 2 == kv_bytes_per_token(cfg, 8, "bf16")


def test_kv_cache_rounds_up_to_whole_blocks():
    cfg = load_config("llama-3-8b")
    per_token = 32 * 8 * 256 * 2  # 131,072 B
    assert kv_cache_bytes(cfg, 1, "bf16", batch=3, context=8193, block_size=16) == 3 * 513 * 16 * per_token
    assert kv_cache_bytes(cfg, 1, "bf16", batch=3, context=8192, block_size=16) == 3 * 8192 * per_token
    assert kv_cache_bytes(cfg, 1, "bf16", batch=1, context=1, block_size=128) == 128 * per_token


def test_mla_caches_the_latent_not_split_by_tp():
    cfg = load_config("deepseek-v3")
    # 61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes, on every TP rank
    assert kv_bytes_per_token(cfg, 1, "bf16") == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(cfg, 8, "bf16") == 70_272
    assert kv_bytes_per_token(cfg, 8, "fp8") == 61 * 576


def test_pipeline_stages_split_layers_like_vllm():
    assert [len(r) for r in stage_layers(27, 2)] == [14, 13]
    assert [len(r) for r in stage_layers(80, 3)] == [27, 27, 26]
    assert [len(r) for r in stage_layers(126, 8)] == [15, 16, 16, 16, 16, 16, 16, 15]
    cfg = load_config("llama-3-70b")
    assert kv_bytes_per_token(cfg, 4, "bf16", layers=40) == 81_920 / 2


# -------------------------------------------------------------------------- weight formulas

@pytest.mark.parametrize("name", preset_names())
def test_unsharded_bf16_weights_are_two_bytes_per_parameter(name):
    cfg = load_config(name)
    parts = weight_bytes(cfg, Parallelism(), Quantization("bf16"), vocab_padding=1)
    # every parameter once, 2 bytes; plus the rotary cos/sin table (positions x rotary dim)
    assert sum(parts.values()) - parts["rotary_cache"] == 2 * cfg.total_params()


@pytest.mark.parametrize("name,tp", [("llama-3-70b", 8), ("qwen2.5-72b", 4), ("mixtral-8x7b", 4),
                                     ("qwen3-30b-a3b", 2)])
def test_tp_shards_sum_to_the_whole(name, tp):
    cfg = load_config(name)  # KV heads >= tp, so nothing is replicated but norms/router/rotary
    one = weight_bytes(cfg, Parallelism(), Quantization("bf16"))
    shard = weight_bytes(cfg, Parallelism(tp=tp), Quantization("bf16"))
    for part in ("embedding", "lm_head", "attention", "dense_mlp", "routed_experts", "shared_experts"):
        assert shard[part] * tp == pytest.approx(one[part]), part
    for part in ("norms", "router", "rotary_cache"):
        assert shard[part] == one[part], part


def test_int4_group_scales_and_awq_zero_points():
    cfg = load_config("llama-3-8b")
    # (k, n) of every linear layer of one Llama-3-8B layer
    mats = [(4096, 4096), (4096, 1024), (4096, 1024), (4096, 4096),
            (4096, 14336), (4096, 14336), (14336, 4096)]
    groups = 32 * sum(k // 128 * n for k, n in mats)
    gptq = weight_bytes(cfg, Parallelism(), Quantization("int4", 128, "gptq"))
    awq = weight_bytes(cfg, Parallelism(), Quantization("int4", 128, "awq"))
    assert gptq["quant_scales"] == groups * 2  # one 16-bit scale per group
    assert awq["quant_scales"] == groups * (2 + 0.5)  # plus a 4-bit zero point
    linear = 32 * sum(k * n for k, n in mats)
    assert gptq["attention"] + gptq["dense_mlp"] == linear / 2  # int4: half a byte
    assert gptq["embedding"] == 128256 * 4096 * 2  # embeddings stay in 16 bits


def test_fp8_and_int8_scales():
    cfg = load_config("llama-3-8b")
    per_layer_n = 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096
    tensor = weight_bytes(cfg, Parallelism(), Quantization("fp8"))
    channel = weight_bytes(cfg, Parallelism(), Quantization("fp8", fp8_scales="channel"))
    int8 = weight_bytes(cfg, Parallelism(), Quantization("int8"))
    assert tensor["quant_scales"] == 32 * 7 * 4  # one fp32 scale per matrix
    assert channel["quant_scales"] == int8["quant_scales"] == 32 * per_layer_n * 4
    assert tensor["dense_mlp"] == 32 * 3 * 4096 * 14336  # one byte per weight


def test_tied_embedding_counted_once_and_on_last_stage_with_pp():
    raw = json.loads(preset_path("llama-3-8b").read_text())
    cfg = from_hf_dict({**raw, "tie_word_embeddings": True}, name="tied")
    one = weight_bytes(cfg, Parallelism(), Quantization("bf16"))
    assert one["lm_head"] == 0 and one["embedding"] == 128256 * 4096 * 2
    first = weight_bytes(cfg, Parallelism(pp=2), Quantization("bf16"), stage=0)
    last = weight_bytes(cfg, Parallelism(pp=2), Quantization("bf16"), stage=1)
    assert first["lm_head"] == 0 and last["embedding"] == 0 and last["lm_head"] == one["embedding"]


def test_experts_split_over_ep_or_tp_hold_the_same_bytes():
    cfg = load_config("mixtral-8x7b")
    ep = weight_bytes(cfg, Parallelism(tp=8, ep=8), Quantization("bf16"))
    tp = weight_bytes(cfg, Parallelism(tp=8), Quantization("bf16"))
    assert ep["routed_experts"] == 32 * 1 * 3 * 4096 * 14336 * 2  # one whole expert per GPU
    assert tp["routed_experts"] == ep["routed_experts"]  # 8 experts, 1/8 of each


def test_vocab_is_padded_before_the_tp_split():
    cfg = load_config("mistral-7b-v0.1")  # vocab 32000 = 500 x 64
    assert weight_bytes(cfg, Parallelism(tp=4), Quantization("bf16"))["embedding"] == 32000 / 4 * 4096 * 2
    cfg = load_config("qwen3-30b-a3b")  # vocab 151936 = 2374 x 64
    assert weight_bytes(cfg, Parallelism(tp=1), Quantization("bf16"), vocab_padding=128)["embedding"] \
        == 151936 * 2048 * 2
    assert weight_bytes(cfg, Parallelism(tp=1), Quantization("bf16"), vocab_padding=1000)["embedding"] \
        == 152000 * 2048 * 2


# --------------------------------------------------------------------------- the budget

def test_vllm_budget_is_its_formula():
    plan = fit("llama-3.1-8b", "h100", context=8192, engine="vllm")
    b, s = plan.per_gpu, plan.setup
    assert s.capacity_bytes == pytest.approx(79.11 * GIB)
    assert (s.max_num_batched_tokens, s.max_num_seqs) == (8192, 1024)  # H100: vLLM's large defaults
    available = 79.11 * GIB * 0.9 - b.weights_total - b.activation["peak"] - b.overheads["non_torch"]
    assert b.kv_room == pytest.approx(available)
    assert plan.kv_cache_tokens == int(available // (131_072 * 16)) * 16
    assert plan.max_concurrency == plan.kv_cache_tokens / 8192
    a100 = fit("llama-3.1-8b", "a100-sxm4-80gb", context=8192, engine="vllm").setup
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)


def test_neutral_budget_adds_up():
    plan = fit("llama-3-70b", "h100", tp=4, batch=16, context=8192, weights="fp8", kv="fp8")
    b = plan.per_gpu
    assert plan.fits
    assert b.kv_cache == 16 * 8192 * 40_960
    assert b.total == pytest.approx(b.weights_total + b.kv_cache + b.activation["peak"]
                                    + sum(b.overheads.values()) + b.headroom)
    assert b.headroom == pytest.approx(0.1 * b.capacity)
    assert b.overheads["nccl_buffers"] > 0  # TP 4: communication buffers
    one = fit("llama-3-8b", "h100", batch=1, context=1024).per_gpu
    assert one.overheads["nccl_buffers"] == 0


def test_limits_are_consistent_with_the_verdict():
    kw = dict(tp=2, weights="fp8", kv="fp8")
    plan = fit("llama-3-70b", "h100", batch=8, context=8192, **kw)
    assert fit("llama-3-70b", "h100", batch=plan.max_batch, context=8192, **kw).fits
    assert not fit("llama-3-70b", "h100", batch=plan.max_batch + 1, context=8192, **kw).fits
    long = fit("llama-3.1-70b", "h100", batch=64, context=1024, **kw)
    assert long.max_context_limited_by == "memory"
    assert fit("llama-3.1-70b", "h100", batch=64, context=long.max_context, **kw).fits
    assert not fit("llama-3.1-70b", "h100", batch=64, context=long.max_context + 16, **kw).fits
    big = fit("llama-3-70b", "h100", tp=2, batch=64, context=8192)
    assert not big.fits and big.min_tp > 2 and big.min_gpus == big.min_tp
    assert fit("llama-3-70b", "h100", tp=big.min_tp, batch=64, context=8192).fits
    assert not fit("llama-3-70b", "h100", tp=big.min_tp // 2, batch=64, context=8192).fits


def test_overflow_names_the_parts():
    plan = fit("llama-3-70b", "h100", tp=1, batch=1, context=4096)
    assert not plan.fits
    assert list(plan.overflow["parts"])[0] == "weights"
    assert plan.overflow["excess_bytes"] > 60 * GIB


def test_pipeline_budget_binds_on_the_fullest_stage():
    plan = fit("deepseek-v2-lite", "l4", tp=2, pp=2, batch=1, context=1024)
    assert [b.layers for b in plan.stages] == [14, 13]
    assert plan.kv_cache_tokens == min(b.kv_tokens // 16 * 16 for b in plan.stages)


@given(tp=st.sampled_from([1, 2, 4, 8]), batch=st.integers(1, 64), context=st.integers(1, 40_000))
def test_kv_grows_linearly_with_batch_and_quantization_never_grows_weights(tp, batch, context):
    cfg = load_config("llama-3.1-70b")
    one = kv_cache_bytes(cfg, tp, "bf16", 1, context, 16)
    assert kv_cache_bytes(cfg, tp, "bf16", batch, context, 16) == batch * one
    sizes = [sum(weight_bytes(cfg, Parallelism(tp=tp), Quantization(d)).values())
             for d in ("bf16", "fp8", "int8", "int4")]
    assert sizes[0] > max(sizes[1], sizes[2]) and min(sizes[1], sizes[2]) > sizes[3]


def test_overheads_file_and_overrides(tmp_path):
    assert load_overheads(cuda_graphs="0").cuda_graphs == 0
    path = tmp_path / "o.yaml"
    path.write_text("cuda_context: 1 GiB\n")
    assert load_overheads(path).cuda_context == GIB
    assert load_overheads(path).cuda_graphs == load_overheads().cuda_graphs  # others keep defaults
    path.write_text("cuda_contxt: 1 GiB\n")
    with pytest.raises(UserError, match="unknown overhead 'cuda_contxt'"):
        load_overheads(path)


@pytest.mark.parametrize("kw,needle", [
    (dict(tp=3), "does not divide the 64 attention heads"),
    (dict(tp=2, ep=2), "needs a mixture-of-experts model"),
    (dict(weights="fp4"), "unknown weight dtype 'fp4'"),
    (dict(kv="int4"), "unknown KV-cache dtype"),
    (dict(batch=0), "batch must be"),
    (dict(gpu_memory_utilization=1.5), "utilization"),
    (dict(pp=81), "more than the 80 layers"),
])
def test_bad_input_is_a_user_error(kw, needle):
    with pytest.raises(UserError, match=needle):
        fit("llama-3-70b", "h100", **{"context": 4096, **kw})


# --------------------------------------------------------------------------- golden cases

def _golden():
    data = yaml.safe_load((LOGS / "cases.yaml").read_text())
    return data["tolerance"], data["cases"]


TOL, CASES = _golden()


def _model(case):
    m = case["model"]
    return str(LOGS / m) if m.endswith(".json") else m


def _setup_kw(case):
    return dict(tp=case.get("tp", 1), pp=case.get("pp", 1), weights=case.get("weights", "bf16"),
                kv=case.get("kv", "bf16"), fp8_scales=case.get("fp8_scales", "tensor"),
                keep_16bit=case.get("keep_16bit", ()), block_size=case.get("block_size", 16))


def _check(case, check):
    """(ours, logged) of one golden check."""
    logged = case["logged"]
    gpu = case.get("gpu_spec", "h100")
    if check == "weights":
        s = make_setup(_model(case), gpu, **_setup_kw(case))
        return budget(s, 1, 1)[0].weights_total / GIB, logged["model_weights_gib"]
    cfg = load_config(_model(case))
    bs, tp = case.get("block_size", 16), case.get("tp", 1)
    if check == "kv_tokens":
        mems = logged.get("kv_cache_gib_by_stage") or [logged["kv_cache_gib"]]
        layers = [len(r) for r in stage_layers(cfg.num_layers, case.get("pp", 1))]
        ours = min(tokens_from_kv_memory(m * GIB, kv_bytes_per_token(cfg, tp, case["kv"], n), bs)
                   for m, n in zip(mems, layers))
        return ours, logged["gpu_kv_cache_tokens"]
    assert check == "full_chain"
    total = logged.get("total_gpu_memory_gib")
    plan = fit(_model(case), gpu, batch=1, context=case["max_model_len"], engine="vllm",
               gpu_memory_utilization=case["gpu_memory_utilization"],
               device_memory_bytes=total * GIB if total else None,
               max_num_batched_tokens=case.get("max_num_batched_tokens"),
               max_num_seqs=case.get("max_num_seqs"), **_setup_kw(case))
    if "gpu_kv_cache_tokens" in logged:
        return plan.kv_cache_tokens, logged["gpu_kv_cache_tokens"]
    return plan.per_gpu.kv_room / GIB, logged["kv_cache_gib"]


GOLDEN = [(c, k) for c in CASES for k in c["checks"]]


def test_golden_file_is_complete():
    assert len(CASES) >= 5
    assert len({c["model"] for c in CASES}) >= 5
    for c in CASES:
        assert c["source"].startswith(("https://github.com/vllm-project/vllm/",
                                       "https://github.com/llm-d-incubation/llm-d-planner/")), c["id"]
        assert set(c["meets"]) == set(c["checks"]), c["id"]
        if not all(c["meets"].values()):
            assert c.get("why"), f"{c['id']}: a check that misses 3 % needs a reason"
    assert sum(k == "weights" for _, k in GOLDEN) >= 5
    assert sum(k != "weights" and c["meets"][k] for c, k in GOLDEN) >= 4


@pytest.mark.parametrize("case,check", GOLDEN, ids=[f"{c['id']}-{k}" for c, k in GOLDEN])
def test_golden_vllm_logs(case, check):
    ours, logged = _check(case, check)
    error = ours / logged - 1
    assert (abs(error) <= TOL) == case["meets"][check], (
        f"{case['id']} {check}: ours {ours:.6g} vs logged {logged:.6g} ({100 * error:+.2f} %); "
        f"cases.yaml says meets={case['meets'][check]}")


def test_golden_max_concurrency_follows_the_tokens():
    for case in CASES:
        logged = case["logged"]
        if "max_concurrency" in logged and case["meets"].get("kv_tokens"):
            ours, _ = _check(case, "kv_tokens")
            assert ours / case["max_model_len"] == pytest.approx(logged["max_concurrency"], rel=TOL)


V019 = {c["id"]: c for c in CASES if c["id"].endswith("-v019")}


def _v019_plan(case):
    logged = case["logged"]
    return fit(case["model"], case["gpu_spec"], batch=1, context=case["max_model_len"],
               engine="vllm", gpu_memory_utilization=case["gpu_memory_utilization"],
               device_memory_bytes=logged["total_gpu_memory_gib"] * GIB,
               max_num_batched_tokens=case["max_num_batched_tokens"],
               max_num_seqs=case["max_num_seqs"], **_setup_kw(case))


@pytest.mark.parametrize("case_id", sorted(V019))
def test_golden_v019_kv_room_is_within_the_stated_uncertainty(case_id):
    """The stated uncertainty (bytes) covers what the logged KV memory differs by."""
    case = V019[case_id]
    b = _v019_plan(case).per_gpu
    assert abs(b.kv_room / GIB - case["logged"]["kv_cache_gib"]) <= b.uncertainty_total / GIB


@pytest.mark.parametrize("case_id", sorted(V019))
def test_golden_v019_parts_match_the_logged_budget(case_id):
    """Each part of vLLM's budget, not only their sum: non-torch memory (with the TP
    workspace) within 0.1 GiB, the activation peak within 0.1 GiB for dense models."""
    case = V019[case_id]
    logged, b = case["logged"], _v019_plan(case).per_gpu
    assert b.overhead_total / GIB == pytest.approx(logged["non_torch_gib"], abs=0.1)
    if not load_config(case["model"]).is_moe:
        assert b.activation["peak"] / GIB == pytest.approx(logged["activation_peak_gib"], abs=0.1)


def test_tp_workspace_only_where_vllm_was_seen_to_set_it_up():
    """Counted at TP > 1 on Hopper/Blackwell over NVLink; elsewhere left out and stated as
    the uncertainty instead."""
    o = load_overheads()
    h100 = fit("llama-3.1-8b", "h100", tp=2, context=8192, engine="vllm").per_gpu
    assert h100.overheads["tp_workspace"] == o.vllm_tp_workspace
    assert fit("llama-3.1-8b", "h100", tp=1, context=8192, engine="vllm").per_gpu.overheads[
        "tp_workspace"] == 0
    for gpu in ("l40s", "a100-sxm4-80gb"):
        b = fit("llama-3.1-8b", gpu, tp=2, context=8192, engine="vllm").per_gpu
        assert b.overheads["tp_workspace"] == 0
        assert b.uncertainty["overheads"] >= o.vllm_tp_workspace
    assert h100.uncertainty["overheads"] == o.uncertainty_non_torch


def test_low_kv_room_warns_with_the_uncertainty():
    """Qwen2.5-72B at TP 2 leaves 4 % of the budget to the KV cache: a warning says how large
    the uncertainty is against it; Llama-3.3-70B fp8 at TP 2 (50 %) gets none."""
    low = _v019_plan(V019["qwen25-72b-h100-tp2-v019"])
    assert any("of the KV tokens" in w for w in low.warnings)
    roomy = _v019_plan(V019["llama33-70b-fp8-h100-tp2-v019"])
    assert not any("KV cache gets only" in w for w in roomy.warnings)
    lo, hi = low.kv_tokens_range
    assert lo < low.kv_cache_tokens < hi


def test_gpu_weight_bytes_is_the_largest_stage():
    from rooflinesim.memory import gpu_weight_bytes

    cfg, q = load_config("llama-3-70b"), Quantization("fp8")
    stages = [sum(weight_bytes(cfg, Parallelism(tp=2, pp=3), q, s).values()) for s in range(3)]
    assert gpu_weight_bytes(cfg, Parallelism(tp=2, pp=3), q) == max(stages)
    assert gpu_weight_bytes(cfg, Parallelism(tp=2), q) == sum(weight_bytes(cfg, Parallelism(tp=2), q).values())


def test_ep_beyond_tp_holds_whole_experts():
    cfg = load_config("mixtral-8x7b")  # 8 experts
    # EP 8 over 4 TP groups of 2 (data-parallel attention): one whole expert per GPU
    parts = weight_bytes(cfg, Parallelism(tp=2, ep=8), Quantization("bf16"))
    assert parts["routed_experts"] == 32 * 1 * 3 * 4096 * 14336 * 2


# ------------------------------------------------------------------------------------ CLI

def run(args):
    """Through main(), so exit codes and error sentences are the real ones."""
    from rooflinesim.cli.fit import fit as fit_command
    from rooflinesim.cli.main import cli, main

    if "fit" not in cli.commands:
        cli.add_command(fit_command)

    class _Main:
        name = "rooflinesim"

        def main(self, args=None, prog_name=None, **kw):
            main(args)

    result = CliRunner().invoke(_Main(), args)
    return result.exit_code, result.stdout, result.stderr


ISSUE_EXAMPLE = ["fit", "--model", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--batch", "16",
                 "--context", "8192", "--weights", "fp8", "--kv", "fp8"]
DECIMAL_UNIT = re.compile(r"\d\s*(kB|MB|GB|TB|PB)\b")


def test_cli_fits_exit_0_and_reports_binary_units():
    code, out, _ = run(ISSUE_EXAMPLE)
    assert code == 0
    assert "FITS" in out and "GiB" in out
    assert not DECIMAL_UNIT.search(out)  # binary units only, never mixed with GB
    for needle in ("KV cache", "activation peak", "CUDA context", "NCCL buffers", "headroom",
                   "max concurrency", "largest batch", "longest context", "fewest GPUs", "assumed"):
        assert needle in out


def test_cli_vllm_tp2_matches_the_published_log():
    """`fit --engine vllm` as a user runs it for a published vLLM 0.19.0 TP 2 start-up log:
    weights and KV tokens within 3 %, with the KV room's uncertainty stated."""
    case = V019["llama33-70b-fp8-h100-tp2-v019"]
    logged = case["logged"]
    code, out, err = run(["fit", "--model", "llama-3.3-70b", "--gpu", "h100", "--tp", "2",
                          "--weights", "fp8", "--fp8-scales", "channel", "--context", "8192",
                          "--engine", "vllm", "--gpu-memory-utilization", "0.95",
                          "--device-memory", "79.19 GiB", "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert d["per_gpu"]["weights_bytes"] / GIB == pytest.approx(logged["model_weights_gib"], rel=TOL)
    assert d["vllm"]["gpu_kv_cache_tokens"] == pytest.approx(logged["gpu_kv_cache_tokens"], rel=TOL)
    assert 0 < d["vllm"]["available_kv_cache_uncertainty_bytes"] == d["kv_room_uncertainty_bytes"]
    code, out, _ = run(["fit", "--model", "llama-3.3-70b", "--gpu", "h100", "--tp", "2",
                        "--weights", "fp8", "--context", "8192", "--engine", "vllm"])
    assert "available KV cache memory" in out and "±" in out and "appears only at TP > 1" in out


def test_cli_does_not_fit_exit_1():
    code, out, _ = run(["fit", "--model", "llama-3-70b", "--gpu", "h100", "--tp", "1", "--context", "4096"])
    assert code == 1
    assert "DOES NOT FIT" in out and "over by" in out and "weights" in out


def test_cli_json_fields():
    code, out, _ = run(ISSUE_EXAMPLE + ["--json"])
    assert code == 0
    d = json.loads(out)
    for key in ("fits", "per_gpu", "kv_cache_tokens", "max_concurrency", "max_batch", "max_context",
                "min_gpus", "assumptions"):
        assert key in d
    for key in ("weights_bytes", "kv_cache_bytes", "activation_bytes", "overhead_bytes",
                "total_bytes", "capacity_bytes"):
        assert key in d["per_gpu"]
    assert d["fits"] is True
    assert d["kv_bytes_per_token"] == 40_960
    assert d["per_gpu"]["kv_cache_bytes"] == 16 * 8192 * 40_960
    code, out, _ = run(["fit", "--model", "llama-3-70b", "--tp", "1", "--context", "4096", "--json"])
    assert code == 1 and json.loads(out)["fits"] is False


def test_cli_engine_vllm_and_overrides():
    code, out, _ = run(["fit", "--model", "llama-3.1-8b", "--gpu", "h100", "--context", "8192",
                        "--engine", "vllm", "--json"])
    assert code == 0
    d = json.loads(out)
    assert d["engine"] == "vllm" and d["vllm"]["gpu_kv_cache_tokens"] == d["kv_cache_tokens"]
    code, out, _ = run(ISSUE_EXAMPLE + ["--json", "--set", "cuda_graphs=0"])
    assert json.loads(out)["per_gpu"]["overheads"]["cuda_graphs"] == 0


def test_cli_context_beyond_the_model_warns():
    code, out, err = run(["fit", "--model", "llama-3-70b", "--tp", "8", "--context", "100000"])
    assert code == 0
    assert "beyond the 8,192 tokens" in err and "beyond the 8,192 tokens" in out


@pytest.mark.parametrize("args,needle", [
    (["--tp", "3"], "TP 3 does not divide the 64 attention heads"),
    (["--batch", "0"], "0 is not in the range"),
    (["--weights", "fp5"], "unknown weight dtype 'fp5'"),
    (["--kv", "int8"], "unknown KV-cache dtype"),
    (["--tp", "2", "--ep", "2"], "mixture-of-experts"),
    (["--set", "cuda_grafs=0"], "unknown overhead"),
    (["--gpu", "h10"], "did you mean"),
])
def test_cli_bad_input_is_one_sentence_exit_2(args, needle):
    code, _, err = run(["fit", "--model", "llama-3-70b", "--context", "4096", *args])
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_the_budget_function_is_not_shadowed_by_its_module():
    import subprocess
    import sys

    code = ("from rooflinesim.memory import fit\nfrom rooflinesim.memory import budget\n"
            "assert callable(budget) and not hasattr(budget, '__file__'), budget\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
