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
                prices=PRICES, samples=3, iterations=6, jobs=1)
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
    assert out["pareto"][0] == best


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
    for args in (["--slo-ttft-p99", "soon"], [], ["--slo-ttft-p99", "1s", "--rate", "inf"],
                 ["--slo-ttft-p99", "1s", "--gpu", "h200"], ["--slo-ttft-p99", "1s", "--prices", str(bad)],
                 ["--slo-ttft-p99", "1s", "--dataset", "sharegpt"]):
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


def test_moe_models_are_planned_with_and_without_expert_parallelism():
    from rooflinesim.models.config import load_config
    from rooflinesim.serve.plan import candidates

    cands, _ = candidates(load_config("mixtral-8x7b"), ["h200-sxm"], ["fp8"], ["bf16"], 4)
    assert {(c.tp, c.ep) for c in cands} == {(1, 1), (2, 1), (2, 2), (4, 1), (4, 4)}
    dense, _ = candidates(load_config("llama-3.1-8b"), ["h200-sxm"], ["fp8"], ["bf16"], 4)
    assert {c.ep for c in dense} == {1}


def test_progress_counts_the_candidates():
    seen, started = [], []
    out = _plan(gpus=["h100-sxm"], progress=seen.append, on_start=started.append)
    assert started == [out["candidates"]] and sum(seen) == out["candidates"]


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
