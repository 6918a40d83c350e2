"""`plan`: the cheapest deployment meeting P99 SLOs at a target rate, from simulated runs."""

import json

import pytest
import yaml

from rooflinesim.cli.main import main
from rooflinesim.errors import UserError
from rooflinesim.serve.plan import load_prices, plan

PRICES = {"h200-sxm": {"usd_per_gpu_hour": 4.0, "source": "test"},
          "h100-sxm": {"usd_per_gpu_hour": 3.0, "source": "test"},
          "a100-sxm4-80gb": {"usd_per_gpu_hour": 2.0, "source": "test"},
          "l4": {"usd_per_gpu_hour": 0.8, "source": "test"}}
WORKLOAD = {"dataset": "random", "input_len": 1024, "output_len": 128, "range_ratio": 0.5, "burstiness": 1.0,
            "num_prompts": 120, "seed": 0}


def _plan(**kw):
    args = dict(rate=6.0, slos={"p99_ttft_ms": 1000.0, "p99_tpot_ms": 40.0}, workload=WORKLOAD,
                gpus=["h100-sxm", "a100-sxm4-80gb", "l4"], weights=["bf16"], kv_dtypes=["bf16"], max_gpus=2,
                prices=PRICES, samples=3, jobs=1)
    args.update(kw)
    return plan("llama-3.1-8b", **args)


def test_the_cheapest_feasible_deployment_and_why_the_others_fail():
    out = _plan()
    best = out["best"]
    assert best is not None and best == out["feasible"][0]
    costs = [r["cost_per_hour"] for r in out["feasible"]]
    assert costs == sorted(costs)
    assert best["cost_per_hour"] == pytest.approx(best["gpus"] * PRICES[best["gpu"]]["usd_per_gpu_hour"])
    assert best["metrics"]["p99_ttft_ms"] <= 1000 and best["metrics"]["p99_tpot_ms"] <= 40
    assert 0 <= best["probability_meets_slo"] <= 1 and best["cost_per_million_output_tokens"] > 0
    # an 8B bf16 model's weights (16 GB) leave an L4 (24 GB) too little KV cache, or too slow a decode
    l4 = [r for r in out["rejected"] if r["gpu"] == "l4"]
    assert l4 and all(r["rejected"] in ("does not fit", "TPOT", "TTFT", "too many GPUs") and r["reason"] for r in l4)
    # the front: cost up, the first SLO's latency down, never two as cheap as each other
    front = out["pareto"]
    assert front[0]["cost_per_hour"] == best["cost_per_hour"]
    costs, latency = [r["cost_per_hour"] for r in front], [r["metrics"]["p99_ttft_ms"] for r in front]
    assert all(a < b for a, b in zip(costs, costs[1:])) and all(a > b for a, b in zip(latency, latency[1:]))
    cheapest = [r["metrics"]["p99_ttft_ms"] for r in out["feasible"] if r["cost_per_hour"] == costs[0]]
    assert latency[0] == min(cheapest)


def test_an_slo_nobody_meets_is_said():
    out = _plan(slos={"p99_tpot_ms": 0.5})
    assert out["best"] is None and out["rejected"] and all(r["rejected"] for r in out["rejected"])


def test_a_process_pool_gives_the_same_answer():
    a = _plan(gpus=["h100-sxm"], jobs=1)
    b = _plan(gpus=["h100-sxm"], jobs=2)
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_prices_file_and_bad_input(tmp_path):
    good = tmp_path / "p.yaml"
    good.write_text(yaml.safe_dump({"gpus": {"h100-sxm": {"default": {"usd_per_gpu_hour": 2.5, "source": "x"}}}}))
    assert load_prices(good)["h100-sxm"]["usd_per_gpu_hour"] == 2.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"gpus": {"h100-sxm": {"default": {"usd_per_gpu_hour": -1}}}}))
    with pytest.raises(UserError, match="price above 0"):
        load_prices(bad)
    with pytest.raises(UserError, match="no price for"):
        _plan(gpus=["h200-sxm", "mi300x"], prices={"h200-sxm": PRICES["h200-sxm"]})
    base = ["plan", "--model", "llama-3.1-8b", "--rate", "4", "--prices", str(good), "--jobs", "1",
            "--num-prompts", "40", "--interval-samples", "0"]
    for args in (["--slo-ttft-p99", "soon"], ["--slo-tpot-p99", "50"], [], ["--slo-ttft-p99", "1s", "--rate", "inf"],
                 ["--slo-ttft-p99", "1s", "--gpu", "h200"], ["--slo-ttft-p99", "1s", "--prices", str(bad)],
                 ["--slo-ttft-p99", "1s", "--dataset", "sharegpt-v4"], ["--slo-ttft-p99", "1s", "--max-num-seqs", "0"],
                 ["--slo-ttft-p99", "1s", "--max-num-batched-tokens", "1.5"],
                 ["--slo-ttft-p99", "1s", "--ray-address", "http://"],
                 ["--slo-ttft-p99", "1s", "--rate", "1e-12"]):  # (arrivals over more time than the clock resolves)
        with pytest.raises(SystemExit) as e:
            main([*base, *args])
        assert e.value.code == 2, args


def test_cli_json(tmp_path, capsys):
    prices = tmp_path / "p.yaml"
    prices.write_text(yaml.safe_dump({"gpus": {"h100-sxm": {"default": {"usd_per_gpu_hour": 2.5, "source": "x"}}}}))
    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", "llama-3.1-8b", "--rate", "4", "--slo-tpot-p99", "50ms", "--prices", str(prices),
              "--jobs", "1", "--num-prompts", "60", "--interval-samples", "2", "--max-gpus", "2", "--json"])
    assert e.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["best"]["gpu"] == "h100-sxm" and "cost_per_hour" in out["best"]
    assert "cost_per_million_output_tokens" in out["best"] and out["best"]["price_source"] == "x"


def test_a_minimum_probability_tightens_the_search_and_reports_against_the_slos_given():
    import math

    from rooflinesim.serve.plan import tightened
    from rooflinesim.serve.simulate import serving_sigmas

    slos = {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 40.0}
    tight = tightened(slos, 0.9, "vllm", ["h100-sxm"])
    half = tightened(slos, 0.5, "vllm", ["h100-sxm"])
    assert half == pytest.approx(slos)  # (the median: the estimate itself)
    s = serving_sigmas("vllm")["itl"]
    assert tight["p99_tpot_ms"] < 40 * math.exp(-1.2815515655446004 * s) * (1 + 1e-12)  # (and the kernels' spread)
    assert tight["p99_ttft_ms"] < tight["p99_tpot_ms"] * 25  # (TTFT's residual is the wider)
    loose, sure = _plan(), _plan(min_probability=0.9)
    assert sure["slos"] == slos and sure["search_slos"] == pytest.approx(tightened(slos, 0.9, "vllm",
                                                                                 ["h100-sxm", "a100-sxm4-80gb", "l4"]))
    b = sure["best"]
    assert all(b["metrics"][k] <= v for k, v in sure["search_slos"].items())
    assert b["cost_per_hour"] >= loose["best"]["cost_per_hour"]
    assert b["probability_meets_slo"] >= loose["best"]["probability_meets_slo"]


def test_pipeline_depths_are_searched_within_a_node():
    from rooflinesim.models.config import load_config
    from rooflinesim.serve.plan import candidates

    model = load_config("llama-3-70b")
    cands, _ = candidates(model, ["h100-sxm"], ["bf16"], ["bf16"], 32, (1, 2, 4))
    assert {(c.tp, c.pp) for c in cands} == {(1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2), (1, 4), (2, 4)}
    assert all(c.gpus <= 8 for c in cands)  # (stages in one node: links between nodes are not modelled)
    assert {(c.tp, c.pp) for c in candidates(model, ["h100-sxm"], ["bf16"], ["bf16"], 32)[0]} == {
        (1, 1), (2, 1), (4, 1), (8, 1)}
    out = plan("llama-3-70b", rate=1.0, slos={"p99_tpot_ms": 200.0}, workload={**WORKLOAD, "num_prompts": 30},
               gpus=["h100-sxm"], weights=["bf16"], kv_dtypes=["bf16"], max_gpus=4, prices=PRICES, samples=0,
               jobs=1, pp=[1, 2])
    assert out["best"] is not None and {r["pp"] for r in out["feasible"]} == {1, 2}
    with pytest.raises(UserError, match="pipeline"):
        plan("llama-3-70b", rate=1.0, slos={"p99_tpot_ms": 200.0}, workload=WORKLOAD, gpus=["h100-sxm"],
             weights=["bf16"], kv_dtypes=["bf16"], max_gpus=4, prices=PRICES, engine="sglang", pp=[2])


def test_moe_models_are_planned_with_and_without_expert_parallelism():
    from rooflinesim.models.config import load_config
    from rooflinesim.serve.plan import candidates

    cands, _ = candidates(load_config("mixtral-8x7b"), ["h200-sxm"], ["fp8"], ["bf16"], 4)
    assert {(c.tp, c.ep) for c in cands} == {(1, 1), (2, 1), (2, 2), (4, 1), (4, 4)}
    dense, _ = candidates(load_config("llama-3.1-8b"), ["h200-sxm"], ["fp8"], ["bf16"], 4)
    assert {c.ep for c in dense} == {1}


def test_progress_counts_every_configuration_of_the_space_once():
    seen, started = [], []
    out = _plan(gpus=["h100-sxm"], progress=seen.append, on_start=started.append)
    # one type a TP (1 and 2 fit max_gpus 2), nine pairs of limits, replicas up to max_gpus / tp
    assert out["candidates"] == 2 and out["configurations"] == 9 * (2 + 1)
    assert started == [out["configurations"]] and sum(seen) == out["configurations"]
    assert sum(out["settled"].values()) == out["configurations"] and out["settled"]["simulated"] >= 1


def _bound_of(model, gpu, tp, workload, engine="vllm", rate=1.0, pp=1):
    from rooflinesim.serve.plan import Candidate, _bounds

    job = {"model": model, "rate": rate, "slos": {"p99_ttft_ms": 1e12, "p99_tpot_ms": 1e12, "p99_e2el_ms": 1e12},
           "workload": workload, "max_gpus": 1024, "engine": engine, "gpu_memory_utilization": 0.9,
           "max_num_batched_tokens": [], "max_num_seqs": []}
    c = Candidate(gpu, tp, "bf16", "bf16", 1, pp)
    return c, job, _bounds((c, job))


@pytest.mark.parametrize("engine,model,gpu,tp,pp,lengths", [
    ("vllm", "llama-3.1-8b", "h100-sxm", 1, 1, (1024, 128)),
    ("vllm", "llama-3.1-8b", "h200-sxm", 1, 1, (256, 128, 3000)),  # (3,000 shared-prefix tokens)
    ("sglang", "llama-3.1-8b", "h200-sxm", 1, 1, (256, 64, 3000)),
    # (300 requests on one 6,000-token prefix, held once and attended to once a step)
    ("vllm", "llama-3.1-8b", "h200-sxm", 1, 1, (256, 256, 6000, 300, 1)),
    ("vllm", "llama-3-70b", "h200-sxm", 2, 1, (256, 512)),
    ("vllm", "llama-3-70b", "h100-sxm", 2, 2, (1024, 256)),
    ("sglang", "llama-3.1-8b", "a100-sxm4-80gb", 1, 1, (3000, 64)),
    ("trtllm", "mixtral-8x7b", "h200-sxm", 2, 1, (512, 256)),
])
def test_the_analytic_bounds_hold_against_simulated_runs(engine, model, gpu, tp, pp, lengths):
    """Step 2 may prune only what a run would fail: its lower bounds stay under the simulated
    P99s (at a low rate, where they are tightest, and saturated), and its ceiling over the
    simulated saturated throughput, at every pair of limits it searches."""
    import math

    from rooflinesim.serve.plan import Config, _simulate

    w = {"dataset": "random", "input_len": lengths[0], "output_len": lengths[1], "range_ratio": 0.5,
         "burstiness": 1.0, "num_prompts": 40, "seed": 3,
         **({"prefix_len": lengths[2], "num_prefixes": 2} if len(lengths) > 2 else {}),
         **({"num_prompts": lengths[3], "num_prefixes": lengths[4]} if len(lengths) > 3 else {})}
    c, job, b = _bound_of(model, gpu, tp, w, engine, pp=pp)
    assert b["error"] is None
    checked = 0
    for lim in b["limits"]:
        if "lower" not in lim:
            continue
        cfg = Config(c, lim["tokens"], lim["seqs"], lim["kv"], 1, 1.0)
        for rate in (0.2, math.inf):
            r = _simulate((cfg, {**job, "rate": rate, "workload": w,
                                 "slos": {k: 1e12 for k in lim["lower"]}}, 0))
            if r.get("rejected") == "invalid":  # (TensorRT-LLM: a prompt past a small budget)
                continue
            for k, lower in lim["lower"].items():
                assert lower <= r["metrics"][k] * (1 + 1e-9), (lim, rate, k)
            if math.isinf(rate):
                assert r["metrics"]["request_throughput"] <= lim["ceiling"] * (1 + 1e-9), lim
            checked += 1
    assert checked >= 4


def test_the_cheapest_is_the_cheapest_of_every_configuration_simulated():
    """The cost-ordered search against simulating the whole space: nothing cheaper than its
    best meets the SLOs, and its best does."""
    from rooflinesim.models.config import load_config
    from rooflinesim.serve.plan import Candidate, Config, _bounds, _simulate, candidates

    kw = dict(gpus=["h100-sxm", "a100-sxm4-80gb"], max_gpus=2, rate=8.0, samples=0,
              slos={"p99_ttft_ms": 600.0, "p99_tpot_ms": 25.0})
    out = _plan(**kw)
    job = {"model": "llama-3.1-8b", "rate": 8.0, "slos": kw["slos"], "workload": WORKLOAD, "max_gpus": 2,
           "engine": "vllm", "gpu_memory_utilization": 0.9, "max_num_batched_tokens": [], "max_num_seqs": []}
    cands, _ = candidates(load_config("llama-3.1-8b"), kw["gpus"], ["bf16"], ["bf16"], 2)
    meets = []
    for c in cands:
        for lim in _bounds((c, job))["limits"]:
            for r in range(1, 2 // c.tp + 1):
                cfg = Config(c, lim["tokens"], lim["seqs"], lim["kv"], r, r * c.tp * PRICES[c.gpu]["usd_per_gpu_hour"])
                if lim["kv"] >= 1 and "rejected" not in _simulate((cfg, job, 0)):
                    meets.append(cfg)
    assert meets, "the case should have a deployment that meets the SLOs"
    cheapest = min(x.cost_per_hour for x in meets)
    assert out["best"]["cost_per_hour"] == pytest.approx(cheapest)
    best = out["best"]
    assert any(Candidate(best["gpu"], best["tp"], "bf16", "bf16") == x.candidate and x.replicas == best["replicas"]
               and x.max_num_batched_tokens == best["max_num_batched_tokens"]
               and x.max_num_seqs == best["max_num_seqs"] for x in meets)


def test_the_best_has_the_most_room_among_its_limits_at_the_same_cost():
    from rooflinesim.serve.plan import Candidate, Config, _bounds, _simulate

    out = _plan(gpus=["h100-sxm"], samples=0)
    best, slos = out["best"], {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 40.0}
    job = {"model": "llama-3.1-8b", "rate": 6.0, "slos": slos, "workload": WORKLOAD, "max_gpus": 2,
           "engine": "vllm", "gpu_memory_utilization": 0.9, "max_num_batched_tokens": [], "max_num_seqs": []}
    c = Candidate(best["gpu"], best["tp"], "bf16", "bf16")
    room = lambda m: max(m[k] / v for k, v in slos.items())  # noqa: E731
    for lim in _bounds((c, job))["limits"]:
        r = _simulate((Config(c, lim["tokens"], lim["seqs"], lim["kv"], best["replicas"], best["cost_per_hour"]),
                       job, 0))
        if "rejected" not in r:
            assert room(best["metrics"]) <= room(r["metrics"]) * (1 + 1e-12), lim


def test_engine_limits_are_searched_and_can_be_given():
    out = _plan(gpus=["h100-sxm"], max_num_batched_tokens=[1024, 4096], max_num_seqs=[32])
    pairs = {(r["max_num_batched_tokens"], r["max_num_seqs"]) for r in out["feasible"]}
    assert pairs and pairs <= {(1024, 32), (4096, 32)}
    assert out["configurations"] == 2 * (2 + 1)


def test_a_local_ray_instance_gives_the_same_answer():
    ray = pytest.importorskip("ray", reason="Ray is a test extra where it has wheels (python < 3.14)")
    a = _plan(gpus=["h100-sxm"], jobs=1)
    try:
        b = _plan(gpus=["h100-sxm"], jobs=1, ray_address="local")
    finally:
        ray.shutdown()
    assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def test_an_unreachable_ray_cluster_is_one_sentence():
    pytest.importorskip("ray", reason="Ray is a test extra where it has wheels (python < 3.14)")
    for address in ("127.0.0.1:9", "ray://127.0.0.1:9"):  # (the discard port: nothing listens)
        with pytest.raises(UserError, match="cannot reach the Ray cluster"):
            _plan(gpus=["h100-sxm"], ray_address=address)
    with pytest.raises(UserError, match="host:port"):
        _plan(gpus=["h100-sxm"], ray_address="http://")


def test_the_plan_chart_and_its_file(tmp_path, capsys):
    from rooflinesim.charts import plan_figure

    out = _plan(gpus=["h100-sxm", "a100-sxm4-80gb"])
    fig = plan_figure(out)
    dots, front = fig.data
    assert len(dots.x) == len(out["feasible"]) and list(front.y) == [r["cost_per_hour"] for r in out["pareto"]]
    prices = tmp_path / "p.yaml"
    prices.write_text(yaml.safe_dump({"gpus": {"h100-sxm": {"default": {"usd_per_gpu_hour": 2.5, "source": "x"}}}}))
    html = tmp_path / "plan.html"
    args = ["plan", "--model", "llama-3.1-8b", "--rate", "4", "--slo-tpot-p99", "50ms", "--prices", str(prices),
            "--jobs", "1", "--num-prompts", "40", "--interval-samples", "0", "--max-gpus", "2", "--plot", str(html)]
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 0 and "Plotly.newPlot" in html.read_text()
    with pytest.raises(SystemExit) as e:  # (kept without --force)
        main(args)
    assert e.value.code == 2


PD_WORKLOAD = {**WORKLOAD, "input_len": 6000, "output_len": 300, "num_prompts": 150}


def test_disaggregated_pairs_win_where_prefills_stall_the_decodes():
    # long prompts at a tight TPOT: colocated, the prefill chunks share the decodes' steps and
    # stretch their tail; a prefill replica beside a decode replica keeps the decodes alone (at
    # 8 ms: one TP-2 replica's TPOT is about 8.8 ms, the pair's decodes about 7.5)
    kw = dict(rate=3.0, slos={"p99_ttft_ms": 1000.0, "p99_tpot_ms": 8.0}, workload=PD_WORKLOAD, gpus=["h200-sxm"],
              samples=0)
    colocated, pd = _plan(**kw), _plan(**kw, pd=True)
    assert colocated["best"] is None or colocated["best"]["cost_per_hour"] > pd["best"]["cost_per_hour"]
    b = pd["best"]
    assert (b["prefill_replicas"], b["decode_replicas"], b["gpus"], b["tp"]) == (1, 1, 2, 1)
    assert b["metrics"]["p99_tpot_ms"] <= 8.0 and pd["pd"] is True
    assert sum(pd["settled"].values()) == pd["configurations"]
    # (each count of r replicas also as its r - 1 splits: TP 1 at 1 and 2 replicas, TP 2 at 1)
    assert pd["configurations"] == colocated["configurations"] + 9 * 1


def test_the_pools_bounds_hold_against_a_saturated_pair():
    import math

    from rooflinesim.models.config import load_config
    from rooflinesim.models.deploy import Deployment
    from rooflinesim.hardware import load_spec
    from rooflinesim.calibration.profile import resolve_profile
    from rooflinesim.serve.simulate import serve
    from rooflinesim.serve.traffic import requests_at

    w = {**WORKLOAD, "num_prompts": 60}
    c, job, b = _bound_of("llama-3.1-8b", "h100-sxm", 1, w)
    spec = load_spec("h100-sxm")
    for lim in b["limits"][:3]:
        r = serve(load_config("llama-3.1-8b"), spec, resolve_profile(spec, None), Deployment(),
                  requests_at(w, math.inf), max_num_batched_tokens=lim["tokens"], max_num_seqs=lim["seqs"],
                  kv_tokens=lim["kv"], pd=(1, 1))
        assert r.metrics["request_throughput"] <= min(lim["pool_ceilings"]) * (1 + 1e-9), lim


def test_pd_plans_need_an_engine_with_a_disaggregation_model():
    with pytest.raises(UserError, match="--pd"):
        _plan(engine="trtllm", pd=True)


def test_a_front_end_delay_counts_in_the_plans_ttft():
    """plan --request-overhead: every simulated TTFT carries it, and a TTFT SLO under it is
    rejected by the bounds alone, before any run."""
    base = _plan(gpus=["h100-sxm"], samples=0, request_overhead_s=0.0)
    late = _plan(gpus=["h100-sxm"], samples=0, request_overhead_s=0.05)
    assert late["request_overhead_s"] == 0.05 and base["request_overhead_s"] == 0.0
    assert _plan(gpus=["h100-sxm"], samples=0)["request_overhead_s"] == pytest.approx(1.02e-2)  # (vLLM's measured)
    assert late["best"]["metrics"]["median_ttft_ms"] > base["best"]["metrics"]["median_ttft_ms"] + 45
    none = _plan(gpus=["h100-sxm"], samples=0, request_overhead_s=1.2)  # (the TTFT SLO: 1 s)
    assert none["best"] is None
    assert all(r["rejected"] == "TTFT" and "even alone" in r["reason"] for r in none["rejected"])


def test_sglangs_decode_graph_ceiling_is_planned_as_serve_runs_it():
    """plan --cuda-graph-max-bs runs SGLang's decode batches past it without CUDA graphs, as
    serve does (never a shorter P99 TPOT than with every batch captured), says so, and is
    refused for other engines."""
    kw = dict(gpus=["h100-sxm"], engine="sglang", samples=0, max_gpus=1)
    graphs, eager = _plan(cuda_graph_max_bs=4096, **kw), _plan(cuda_graph_max_bs=0, **kw)
    assert (graphs["cuda_graph_max_bs"], eager["cuda_graph_max_bs"]) == (4096, 0)
    assert "cuda_graph_max_bs" not in _plan(gpus=["h100-sxm"], samples=0, max_gpus=1)
    best = [min((r for r in out["feasible"] + out["rejected"] if r.get("metrics")),
                key=lambda r: r["cost_per_hour"]) for out in (graphs, eager)]
    assert best[1]["metrics"]["p99_tpot_ms"] > best[0]["metrics"]["p99_tpot_ms"]
    with pytest.raises(UserError, match="--engine sglang"):
        _plan(gpus=["h100-sxm"], cuda_graph_max_bs=8)
    from helpers import run_cli

    for bad in (["--cuda-graph-max-bs", "8"], ["--engine", "sglang", "--cuda-graph-max-bs", "-1"]):
        code, _, err = run_cli(["plan", "--model", "llama-3.1-8b", "--rate", "5", "--slo-ttft-p99", "1s",
                                "--gpu", "h200", "--max-gpus", "1", *bad])
        assert code == 2 and "--cuda-graph-max-bs" in err and "Traceback" not in err


def test_sglangs_eager_prefill_is_planned_as_serve_runs_it():
    """plan --eager-prefill simulates SGLang's prefill batches without CUDA graphs, as serve
    does (never a shorter P99 TTFT than with them), says so, and is refused for other engines."""
    short = {**WORKLOAD, "input_len": 32, "range_ratio": 0.0}  # (prompts whose prefill the host paces)
    kw = dict(gpus=["h100-sxm"], engine="sglang", samples=0, workload=short)
    graphs, eager = _plan(**kw), _plan(eager_prefill=True, **kw)
    assert eager["eager_prefill"] is True and graphs["eager_prefill"] is False
    g, e = graphs["best"], eager["best"]
    assert (g["gpu"], g["tp"], g["replicas"]) == (e["gpu"], e["tp"], e["replicas"])
    assert e["metrics"]["p99_ttft_ms"] > g["metrics"]["p99_ttft_ms"]
    assert e["metrics"]["median_ttft_ms"] > g["metrics"]["median_ttft_ms"]
    with pytest.raises(UserError, match="--engine sglang"):
        _plan(gpus=["h100-sxm"], eager_prefill=True)
    from helpers import run_cli

    code, _, err = run_cli(["plan", "--model", "llama-3.1-8b", "--rate", "5", "--slo-ttft-p99", "1s",
                            "--gpu", "h200", "--max-gpus", "1", "--eager-prefill"])
    assert code == 2 and "--engine sglang" in err and "Traceback" not in err
