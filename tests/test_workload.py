"""Whole-model workloads: kernel counts as formulas, TP shards, memory- and compute-bound
regimes, MoE and MLA traffic, phases and pipelines, the CLI's JSON and its errors."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflinesim.calibration.profile import IDEAL, resolve_profile
from rooflinesim.errors import UserError
from rooflinesim.hardware import load_spec
from rooflinesim.memory import fit
from rooflinesim.models import presets
from rooflinesim.models.config import from_hf_dict, load_config
from rooflinesim.models.deploy import Deployment, max_batch, shard
from rooflinesim.models.workload import predict_model, predict_requests, sweep

H100 = load_spec("h100")
H200 = load_spec("h200")
FITTED = resolve_profile(H200, None)
GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


# Two code paths (kernels priced alone or together, recorded or as written) agree to
# rounding, not bit for bit: numpy's SIMD loops differ from CPU to CPU by an ulp.
REL = 1e-12


def close(a, b) -> bool:
    """Numbers to rounding; anything else (names, flags) exactly."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fiu" or b.dtype.kind not in "fiu":
        return bool(np.array_equal(a, b))
    return bool(np.allclose(a, b, rtol=REL, atol=0))


def same_table(a, b) -> bool:
    """Two phases' kernel tables: the same rows (order aside: near ties may swap) and numbers."""
    rows_a, rows_b = {r["op"]: r for r in a}, {r["op"]: r for r in b}
    if rows_a.keys() != rows_b.keys():
        return False
    for op, x in rows_a.items():
        y = rows_b[op]
        if x.keys() != y.keys() or x["bound"] != y["bound"]:
            return False
        if not all(close(x[k], y[k]) for k in x if k not in ("op", "bound")):
            return False
    return True


def run(model, *, spec=H100, profile=IDEAL, batch=2, prompt=64, gen=8, **deploy):
    return predict_model(model, spec, profile, Deployment(**deploy), batch=batch, prompt=prompt, gen=gen)


def by_name(phase) -> dict:
    """name -> (runs per forward, FLOPs of one run, HBM bytes of one run), first point."""
    out = {}
    for o in phase.ops:
        c, f, b = out.get(o.name, (0.0, 0.0, 0.0))
        out[o.name] = (c + o.count, f + o.count * float(o.flops[0]), b + o.count * float(o.hbm_bytes[0]))
    return out


def total(phase, names) -> float:
    """FLOPs per forward (all runs) of the kernels called ``names``."""
    t = by_name(phase)
    return sum(t[n][1] for n in names if n in t)


# ------------------------------------------------------------------ counts as formulas


def test_dense_gemm_flops_are_two_tokens_params():
    m = load_config("llama-3-8b")
    r = run(m, batch=2, prompt=64)
    T, L, h, V = 2 * 64, m.num_layers, m.hidden_size, m.vocab_size
    linear = sum(m.attention_param_counts().values()) + sum(m.dense_mlp_param_counts().values())
    # every linear weight multiplies every prompt token once: 2 FLOPs per weight per token;
    # the LM head only the last token of each sequence
    assert total(r.prefill, GEMMS) == 2 * T * linear * L
    assert total(r.prefill, ["lm_head"]) == 2 * 2 * V * h
    # decode: one token per sequence
    assert total(r.decode, GEMMS) == 2 * 2 * linear * L


def test_forward_flops_match_active_params_plus_attention():
    m = load_config("llama-3-8b")
    b, p = 4, 512
    r = run(m, batch=b, prompt=p)
    T = b * p
    head = m.vocab_size * m.hidden_size
    body = m.active_params() - head - m.param_counts()["norms"]
    # causal attention: QK^T and PV over p(p+1)/2 pairs per head, 2 FLOPs per multiply-add
    attn = 4 * m.head_dim * m.num_heads * b * p * (p + 1) / 2 * m.num_layers
    expected = 2 * T * body + attn + 2 * b * head
    got = sum(f for _, f, _ in by_name(r.prefill).values())
    assert got == pytest.approx(expected, rel=0.01)  # the rest: norms, activation, embedding
    assert total(r.prefill, ["attention"]) == pytest.approx(attn)


@given(st.sampled_from([2, 4, 8]), st.integers(1, 16), st.integers(1, 600))
def test_tp_shards_add_up(tp, batch, prompt):
    m = load_config("llama-3-70b")  # 64 heads, 8 KV heads: nothing replicated up to tp 8
    whole = run(m, batch=batch, prompt=prompt)
    part = run(m, batch=batch, prompt=prompt, tp=tp)
    for phase in ("prefill", "decode"):
        w, s = by_name(getattr(whole, phase)), by_name(getattr(part, phase))
        for name in (*GEMMS, "attention", "lm_head"):
            assert s[name][1] * tp == pytest.approx(w[name][1], rel=1e-12), (phase, name)
        assert s["input_norm"][1] == w["input_norm"][1]  # norms are replicated
        assert "attn_allreduce" in s and "attn_allreduce" not in w


def test_replicated_kv_heads_when_fewer_than_tp():
    raw = json.loads(presets.preset_path("llama-3-8b").read_text())
    m = from_hf_dict({**raw, "num_key_value_heads": 2}, name="kv2")
    sh = shard(m, Deployment(tp=8))
    assert (sh.heads, sh.kv_heads) == (4, 1)  # one KV head on each GPU, each held by 4
    r = run(m, tp=8, batch=1, prompt=32)
    q_dim, kv_dim = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    qkv = by_name(r.prefill)["qkv_proj"][1] / m.num_layers
    assert qkv == 2 * 32 * m.hidden_size * (q_dim / 8 + 2 * m.head_dim)
    assert qkv * 8 > 2 * 32 * m.hidden_size * (q_dim + 2 * kv_dim)  # replication costs work
    with pytest.raises(UserError, match="KV heads"):
        shard(from_hf_dict({**raw, "num_key_value_heads": 8, "num_attention_heads": 48,
                                  "head_dim": 128}, name="x"),
              Deployment(tp=6))


# ------------------------------------------------------------------ regimes


@pytest.mark.parametrize("profile", [IDEAL, FITTED])
def test_decode_at_batch_1_is_weight_bound(profile):
    m = load_config("llama-3-8b")
    r = run(m, spec=H200, profile=profile, batch=1, prompt=512, gen=64)
    for o in r.decode.ops:
        if o.name in (*GEMMS, "lm_head"):
            assert set(o.bound) == {"hbm"}, o.name
    weights = (m.total_params() - m.param_counts()["embedding"]) * 2  # bf16, embedding row reads only
    assert r.tpot_s >= weights / H200.memory.hbm_bandwidth_bytes_per_s
    if profile is IDEAL:  # the datasheet roofline: the GEMMs stream their weights at full bandwidth
        gemm_s = sum(o.count * o.latency_s[0] for o in r.decode.ops if o.name in GEMMS)
        gemm_bytes = sum(o.count * o.hbm_bytes[0] for o in r.decode.ops if o.name in GEMMS)
        assert gemm_s == pytest.approx(gemm_bytes / H200.memory.hbm_bandwidth_bytes_per_s)


def test_prefill_big_gemms_are_compute_bound():
    r = run(load_config("llama-3-8b"), spec=H200, profile=FITTED, batch=4, prompt=2048)
    for o in r.prefill.ops:
        if o.name in GEMMS:
            assert set(o.bound) == {"compute"}, o.name


def test_moe_reads_only_the_active_experts():
    m = load_config("mixtral-8x7b")
    h, f = m.hidden_size, m.moe_intermediate_size
    for batch, touched in ((1, m.num_experts_per_tok), (512, m.num_experts)):
        r = run(m, batch=batch, prompt=16)
        per_layer = by_name(r.decode)["moe_experts_gate_up"][2] / m.num_layers
        weights = touched * 2 * f * h * 2  # gate and up of each touched expert, bf16
        acts = batch * m.num_experts_per_tok * (h + 2 * f) * 2  # routed rows in and out
        assert per_layer == pytest.approx(weights + acts, rel=0.02), batch
    # fp8 experts read half the bytes
    down8 = by_name(run(m, batch=1, prompt=16, weights="fp8").decode)["moe_experts_down"][2]
    assert down8 < 0.51 * by_name(run(m, batch=1, prompt=16).decode)["moe_experts_down"][2]


def test_mla_caches_the_latent_not_the_heads():
    m = load_config("deepseek-v2-lite")
    r = run(m, batch=4, prompt=1024, gen=2, kv_cache="bf16")
    attn = next(o for o in r.decode.ops if o.name == "attention").op
    per_token = attn.bytes_kv() / (4 * attn.seq_kv[0])
    assert per_token == (m.kv_lora_rank + m.qk_rope_head_dim) * 2  # the latent, read once
    gqa_equivalent = m.num_kv_heads * (m.head_dim + m.v_head_dim) * 2
    assert per_token < gqa_equivalent / 8  # 16 heads of 192 + 128
    # prefill expands the latent into MHA: FLOPs exact for qk dim 192 and v dim 128
    pre = next(o for o in r.prefill.ops if o.name == "attention").op
    pairs = 4 * m.num_heads * 1024 * 1025 / 2
    assert pre.flops()[0] == pytest.approx(2 * (m.head_dim + m.v_head_dim) * pairs)


def test_deepseek_v3_layers_and_expert_parallel():
    m = load_config("deepseek-v3")
    r = run(m, spec=H200, batch=8, prompt=256, gen=4, tp=8, ep=8, weights="fp8", kv_cache="fp8")
    counts = {n: c for n, (c, _, _) in by_name(r.decode).items()}
    assert counts["gate_up_proj"] == 3 and counts["moe_experts_gate_up"] == 58  # first_k_dense
    assert counts["qkv_a_proj"] == 61 and counts["q_absorb"] == 61
    assert "moe_ep_dispatch" not in counts  # ep inside the TP group: tokens already there
    r2 = run(m, spec=H200, batch=8, prompt=256, gen=4, tp=1, dp=8, ep=8, weights="fp8")
    assert "moe_ep_dispatch" in by_name(r2.decode)


# ------------------------------------------------------------------ phases and pipeline


def test_chunked_prefill_covers_the_same_pairs():
    m = load_config("llama-3-8b")
    whole = run(m, batch=2, prompt=1000)
    chunked = predict_model(m, H100, IDEAL, Deployment(), batch=2, prompt=1000, gen=8, chunk=256)
    assert chunked.prefill.phase.n == 4
    w = by_name(whole.prefill)
    c = {o.name: 0.0 for o in chunked.prefill.ops}
    for o in chunked.prefill.ops:
        mask = np.broadcast_to(o.kernel.mask, (4,))
        c[o.name] += o.count * float(np.sum(o.flops * mask))
    for name in (*GEMMS, "attention", "lm_head"):  # bottom-right causal chunks tile the triangle
        assert c[name] == pytest.approx(w[name][1], rel=1e-12), name
    assert chunked.ttft_s > whole.ttft_s  # more, smaller kernels


def test_tpot_is_the_mean_over_the_decode_contexts():
    m = load_config("llama-3-8b")
    r = run(m, batch=8, prompt=1000, gen=101)
    assert list(r.decode.phase.seq_kv) == [1013, 1038, 1063, 1088]  # mean = prompt + gen / 2
    s = sweep(m, H100, IDEAL, Deployment(), batch=8, context=r.decode.phase.seq_kv)
    assert np.allclose(s.step_s, r.decode.step_s, rtol=1e-12)
    assert r.tpot_s == pytest.approx(s.step_s.mean())
    assert r.e2e_s == pytest.approx(r.ttft_s + 100 * r.tpot_s)


def test_sweep_is_the_pointwise_prediction():
    m = load_config("mixtral-8x7b")
    d = Deployment(tp=2, weights="fp8")
    batch, ctx = np.array([1, 7, 64, 300]), np.array([100, 5000, 777, 2048])
    s = sweep(m, H200, FITTED, d, batch=batch, context=ctx)
    for i in range(4):
        one = sweep(m, H200, FITTED, d, batch=int(batch[i]), context=int(ctx[i]))
        assert one.step_s[0] == pytest.approx(s.step_s[i], rel=1e-9)
    assert np.all(np.diff(sweep(m, H200, FITTED, d, batch=16, context=[512, 1024, 4096]).step_s) > 0)


@pytest.mark.parametrize("model,deploy", [
    ("llama-3.1-8b", dict()), ("llama-3-70b", dict(tp=4, pp=2, sequence_parallel=True, weights="fp8")),
    ("mixtral-8x7b", dict(tp=2, ep=4, dp=2, attention="fa2")),
    ("deepseek-v3", dict(tp=8, ep=8, weights="fp8", kv_cache="fp8")),
    ("mistral-7b-v0.1", dict(eager=True)), ("deepseek-v2-lite", dict(attention="naive", weights="int4")),
])
@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 64), prompt=st.integers(1, 9000), chunk=st.integers(1, 4000))
def test_each_kernel_is_priced_as_alone(model, deploy, batch, prompt, chunk):
    # a plan replays the arithmetic that sizes its kernels, and prices all of them in a
    # few passes (parameters per point): every kernel must get the very sizes its builder
    # gives and the very latency it gets when priced alone
    from rooflinesim.models.kernels import phase_kernels
    from rooflinesim.rules import in_sequence
    from rooflinesim.predict import predict

    m, d = load_config(model), Deployment(**deploy)
    r = predict_model(m, H200, FITTED, d, batch=batch, prompt=prompt, gen=300, chunk=chunk)
    for p in (r.prefill, r.decode):
        built = phase_kernels(m, d, p.phase)
        n = p.phase.n
        for o, k in zip(p.ops, built):
            assert (o.name, o.kernel.cls) == (k.name, k.cls)
            for f, v in k.args.items():
                assert close(np.broadcast_to(o.kernel.args[f], (n,)), np.broadcast_to(v, (n,))), (o.name, f)
            alone = in_sequence(predict(k.op, H200, FITTED)).latency_s  # (eager: the GPU side)
            assert close(np.broadcast_to(alone * k.mask, (n,)), o.latency_s), o.name


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_kernels_priced_apart_or_at_once_agree(monkeypatch, phase):
    # many points are priced kernel by kernel, few at once: the same numbers either way
    from rooflinesim import pricing

    m, d = load_config("deepseek-v3"), Deployment(tp=8, ep=8, weights="fp8", kv_cache="fp8")
    rng = np.random.default_rng(5)
    batch, ctx = rng.integers(1, 64, 300), rng.integers(100, 9000, 300)
    runs = []
    for points in (0, 10**9):
        monkeypatch.setattr(pricing, "APART_POINTS", points)
        s = sweep(m, H200, FITTED, d, batch=batch, context=ctx, phase=phase)
        runs.append((s.step_s, s.table(), [o.timing.latency_s for o in s.ops]))
    (a, ta, la), (b, tb, lb) = runs
    assert close(a, b) and same_table(ta, tb)
    assert all(close(x, y) for x, y in zip(la, lb))


@pytest.mark.parametrize("model,deploy", [
    ("llama-3.1-8b", dict()), ("deepseek-v3", dict(tp=8, ep=8, weights="fp8", kv_cache="fp8")),
    ("llama-3-70b", dict(tp=2, pp=2)), ("mistral-7b-v0.1", dict(eager=True)), ("qwen2.5-7b", dict(kernels="hf")),
])
def test_kernels_priced_at_distinct_points_or_all_agree(monkeypatch, model, deploy):
    # a phase of many points prices each kernel once per distinct value of the numbers it
    # follows (a decode's GEMMs once per batch): the same numbers as pricing every point
    from rooflinesim.models import plan

    m, d = load_config(model), Deployment(**deploy)
    rng = np.random.default_rng(9)
    batch, ctx = rng.choice([1, 8, 8, 33, 64], 200), rng.integers(100, 9000, 200)
    prompt, gen = rng.choice([128, 1000, 1000], 40), rng.integers(2, 600, 40)
    runs = []
    for points in (1, 10**9):
        monkeypatch.setattr(plan, "DISTINCT_POINTS", points)
        out = []
        for phase in ("decode", "prefill"):
            s = sweep(m, H200, FITTED, d, batch=batch, context=ctx, phase=phase)
            out.append((s.step_s, s.table(), [o.timing.latency_s for o in s.ops], [o.latency_s for o in s.ops]))
        r = predict_requests(m, H200, FITTED, d, batch=batch[:40], prompt=prompt, gen=gen, chunk=512)
        out.append((np.concatenate([r.ttft_s, r.tpot_s]), [], [], []))
        runs.append(out)
    for (a, ta, la, oa), (b, tb, lb, ob) in zip(*runs):
        assert close(a, b) and same_table(ta, tb)
        assert all(close(x, y) for x, y in zip(la, lb)) and all(close(x, y) for x, y in zip(oa, ob))


def test_pipeline_stages_and_bubble():
    m = load_config("llama-3-8b")  # 32 layers
    one = run(m, batch=8, prompt=128, pp=1)
    two = run(m, batch=8, prompt=128, pp=2, microbatches=1)
    assert two.decode.stage_s.shape == (2, 4)
    send = by_name(two.decode)["pp_send"][0]
    assert send == 1 and two.tpot_s > one.tpot_s  # stages run in series, plus the hand-off
    assert two.decode.stage_s.sum(axis=0) == pytest.approx(two.decode.step_s)
    four = run(m, batch=8, prompt=128, pp=2, microbatches=4)  # 4 microbatches of 2
    st_ = four.decode.stage_s
    assert four.decode.step_s == pytest.approx(st_.sum(axis=0) + 3 * st_.max(axis=0))
    assert run(m, pp=3).prefill.stage_s.shape[0] == 3  # 11 + 11 + 10 layers: uneven is allowed
    assert shard(m, Deployment(pp=3)).stage_layers == (11, 11, 10)


def test_eager_takes_the_longer_of_host_and_gpu_time():
    m = load_config("llama-3-8b")
    graph = run(m, batch=4)
    launches = sum(o.count * o.kernel.launches for o in graph.decode.ops)
    for host in (1e-6, 5e-6, 20e-6):
        eager = run(m, batch=4, eager=True, launch_overhead_s=host)
        assert eager.tpot_s == pytest.approx(max(graph.tpot_s, launches * host), rel=1e-9)
    assert run(m, batch=4, eager=True, launch_overhead_s=20e-6).tpot_s > graph.tpot_s


@pytest.mark.parametrize("model,deploy", [
    ("llama-3.1-8b", dict()), ("mixtral-8x7b", dict(tp=2, weights="fp8")),
    ("deepseek-v2-lite", dict(attention="naive")),
])
def test_eager_steps_are_priced_as_eager_layers_are(model, deploy):
    # predict model --eager prices a forward pass as rooflinesim.eager prices a measured
    # layer: each call's host time (its op family's), each layer's call, joined with the
    # GPU time of the kernels in sequence
    from rooflinesim.eager import host_s, joined
    from rooflinesim.predict import predict
    from rooflinesim.rules import in_sequence

    m, d = load_config(model), Deployment(eager=True, **deploy)
    r = predict_model(m, H200, FITTED, d, batch=3, prompt=300, gen=40, chunk=128)
    gap = FITTED.host_params().gap_s
    for phase in (r.prefill, r.decode):
        host = m.num_layers * FITTED.host_params("sequence").call_s
        gpu = 0.0
        for o in phase.ops:
            op, runs = o.kernel.op, o.count * np.asarray(o.kernel.mask, dtype=float)
            host = host + runs * host_s(op, H200, FITTED)
            gpu = gpu + runs * (in_sequence(predict(op, H200, FITTED)).latency_s + gap * op.work().kernels)
        assert np.allclose(phase.step_s, joined(host, gpu, FITTED), rtol=1e-9, atol=0)
        assert np.all(phase.step_s > gpu)  # (the host side shows: a p-norm corner)


def test_data_parallel_multiplies_throughput_only():
    m = load_config("llama-3-8b")
    a, b = run(m, batch=16), run(m, batch=16, dp=4)
    assert b.tpot_s == pytest.approx(a.tpot_s, rel=REL) and b.ttft_s == pytest.approx(a.ttft_s, rel=REL)
    assert b.rates()["decode"]["total"] == pytest.approx(4 * a.rates()["decode"]["total"])
    assert b.rates()["decode"]["per_gpu"] == pytest.approx(a.rates()["decode"]["per_gpu"])


def test_sequence_parallel_swaps_allreduce_for_reduce_scatter_and_all_gather():
    names = set(by_name(run(load_config("llama-3-8b"), tp=4, sequence_parallel=True).decode))
    assert {"attn_reducescatter", "mlp_allgather"} <= names and "attn_allreduce" not in names


def test_int4_weights_and_fp8_kv_shrink_traffic():
    m = load_config("llama-3-8b")
    base = by_name(run(m, batch=1).decode)
    w4 = by_name(run(m, batch=1, weights="int4").decode)
    assert w4["down_proj"][2] < 0.3 * base["down_proj"][2]  # 4 bits plus a scale per 128
    kv8 = by_name(run(m, batch=1, prompt=4096, kv_cache="fp8").decode)
    kv16 = by_name(run(m, batch=1, prompt=4096).decode)
    assert kv8["attention"][2] < 0.55 * kv16["attention"][2]


def test_max_batch_is_the_largest_the_memory_planner_fits():
    m, d = load_config("llama-3.1-8b"), Deployment(weights="fp8", kv_cache="fp8")
    b = max_batch(m, d, H100, 2048 + 128)
    assert fit(m, H100, batch=b, context=2176, weights="fp8", kv="fp8").fits
    assert not fit(m, H100, batch=b + 1, context=2176, weights="fp8", kv="fp8").fits
    half = max_batch(m, d, H100, 2176, memory_fraction=0.5)
    plan = fit(m, H100, context=2176, weights="fp8", kv="fp8", gpu_memory_utilization=0.5)
    assert half == plan.max_batch
    assert half < b


# ------------------------------------------------------------------ the CLI


def cli(args):
    from rooflinesim.cli.main import main
    from rooflinesim.cli.model import register
    from rooflinesim.cli.predict import predict

    register(predict)

    class _Main:
        name = "rooflinesim"

        def main(self, args=None, prog_name=None, **kw):
            main(args)

    r = CliRunner().invoke(_Main(), ["predict", "model", *args])
    return r.exit_code, r.stdout, r.stderr


def test_cli_json_fields():
    code, out, err = cli(["--model", "llama-3-70b", "--gpu", "h100", "--tp", "4", "--batch", "32",
                          "--prompt", "2048", "--gen", "256", "--weights", "fp8", "--json"])
    assert code == 0, err
    d = json.loads(out)
    for key in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "weights_bytes_per_gpu",
                "kv_cache_bytes_per_gpu", "prefill", "decode", "deployment", "profile"):
        assert key in d
    assert d["e2e_s"] == pytest.approx(d["ttft_s"] + 255 * d["tpot_s"])
    assert d["tokens_per_s"]["decode"]["total"] == pytest.approx(32 / d["tpot_s"])
    assert d["tokens_per_s"]["decode"]["per_gpu"] == pytest.approx(8 / d["tpot_s"])
    for phase in ("prefill", "decode"):
        ops = d[phase]["ops"]
        assert {"op", "count", "flops", "hbm_bytes", "time_s", "bound", "share"} <= set(ops[0])
        assert sum(o["share"] for o in ops) == pytest.approx(1)
        assert sum(o["time_s"] for o in ops) == pytest.approx(d[phase]["time_s"])  # pp 1
    assert {o["op"]: o["count"] for o in d["decode"]["ops"]}["qkv_proj"] == 80


def test_cli_table_and_batch_max():
    code, out, _ = cli(["--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "max", "--prompt", "128",
                        "--gen", "128", "--weights", "fp8", "--kv-dtype", "fp8"])
    assert code == 0
    assert "time to first token" in out and "gate_up_proj" in out and "batch " in out


def test_cli_warns_beyond_the_context_limit():
    code, out, err = cli(["--model", "phi-3-mini-4k", "--prompt", "4000", "--gen", "200"])
    assert code == 0 and "warning:" in err and "4096" in err


@pytest.mark.parametrize("args,needle", [
    (["--model", "llama-3-8b", "--tp", "3"], "does not divide the 32 attention heads"),
    (["--model", "llama-3-8b", "--pp", "40"], "exceeds the 32 layers"),
    (["--model", "mixtral-8x7b", "--tp", "4", "--ep", "3"], "does not divide the 8 experts"),
    (["--model", "llama-3-8b", "--ep", "2"], "mixture-of-experts"),
    (["--model", "llama-3-8b", "--batch", "0"], "0 is not in the range 1<=x"),
    (["--model", "llama-3-8b", "--batch", "lots"], "'max'"),
    (["--model", "llama-3-8b", "--weights", "fp5"], "unknown dtype"),
    (["--model", "llama-3-8b", "--kv-dtype", "int4"], "must be one of"),
    (["--model", "llama-9"], "unknown model"),
    (["--model", "llama-3-8b", "--gpu", "h10"], "did you mean"),
    (["--model", "llama-3-8b", "--gpu", "a100", "--weights", "fp8"], "no fp8"),
    (["--model", "llama-3-70b", "--tp", "16"], "cross nodes"),
    (["--model", "llama-3-8b", "--prompt", "0"], "0 is not in the range"),
])
def test_cli_bad_input_is_one_sentence_and_exit_2(args, needle):
    code, _, err = cli(args)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_the_measured_layer_is_the_engine_layer_unfused(mode):
    # decoder_layer records (the harness's eager PyTorch layer) and predict model's layers
    # come from one builder: the same GEMMs and attention shapes; PyTorch's layer adds the
    # residual apart from its norms and runs SiLU and the multiply apart
    from rooflinesim.models.kernels import Phase, phase_kernels
    from rooflinesim.models.layer import decoder_layer

    m = load_config("llama-3.1-8b")
    b, seq = 8, 1000
    ph = (Phase("prefill", batch=b, seq_q=seq, seq_kv=seq, sequences=b) if mode == "prefill"
          else Phase("decode", batch=b, seq_q=1, seq_kv=seq + 1, sequences=b))
    engine = {k.name: k.op for k in phase_kernels(m, Deployment(), ph)}
    layer = decoder_layer(mode, b, seq, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                          m.intermediate_size)
    measured = {name: op for name, op, _ in layer.parts}
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        assert measured[name] == engine[name], name
    a, e = measured["attention"], engine["attention"]
    assert (a.batch, a.heads, a.kv_heads, a.seq_q, a.seq_kv, a.head_dim) == \
        (e.batch, e.heads, e.kv_heads, e.seq_q, e.seq_kv, e.head_dim)
    assert [n for n, _, _ in layer.parts].count("residual_add") == 2 and "act" in engine and "silu" in measured
    rows = b * (seq if mode == "prefill" else 1)  # (the engine's norm reads the residual too, in one kernel)
    assert engine["input_norm"].tokens == rows and measured["input_norm"].tokens == rows
    assert engine["input_norm"].kind == "add_rmsnorm" and measured["input_norm"].kind == "rmsnorm"
