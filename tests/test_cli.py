"""The CLI as a user drives it: answers, JSON fields, and one-sentence errors with exit 2."""

import json
import re

import pytest
from helpers import run_cli as run


def test_predict_gemm_json_fields():
    code, out, _ = run(["predict", "gemm", "--gpu", "h100", "-m", "4096", "-n", "4096", "-k", "4096",
                        "--profile", "ideal", "--json"])
    assert code == 0
    d = json.loads(out)
    for key in ("latency_s", "flops", "hbm_bytes", "intensity_flop_per_byte", "bound"):
        assert key in d
    assert d["flops"] == 2 * 4096**3
    assert d["bound"] == "compute"
    assert d["latency_s"] == pytest.approx(2 * 4096**3 / 989e12)  # ideal roofline, H100 bf16


def test_predict_table_mentions_bound_and_gpu():
    code, out, _ = run(["predict", "gemm", "--gpu", "h200", "-m", "1", "-n", "8192", "-k", "8192",
                        "--profile", "ideal"])
    assert code == 0
    assert "h200-sxm" in out and "hbm" in out


@pytest.mark.parametrize("args,needle", [
    (["predict", "gemm", "-m", "0", "-n", "1", "-k", "1"], "0 is not in the range"),
    (["predict", "gemm", "-m", "-3", "-n", "1", "-k", "1"], "-3"),
    (["predict", "gemm", "-m", "1", "-n", "1", "-k", "1", "--gpu", "h10"], "did you mean h100-sxm"),
    (["predict", "gemm", "-m", "1", "-n", "1", "-k", "1", "--gpu", "a100", "--dtype", "fp8"], "no fp8"),
    (["predict", "gemm", "-m", "1", "-n", "1", "-k", "1", "--dtype", "fp5"], "GEMM dtype"),
    (["predict", "attention", "--heads", "32", "--kv-heads", "5"], "must divide"),
    (["predict", "allreduce", "--bytes", "12 parsecs"], "cannot read"),
    (["predict", "gemm", "-m", "1", "-n", "1", "-k", "1", "--gpu", "AMD Radeon Graphics"],
     "device name of mi300x and mi325x"),
    (["predict", "gemm", "-m", "1", "-n", "1", "-k", "1", "--gpu", "NVIDIA H200 NVL"],
     "no spec lists that device name"),
    (["predict", "gemm", "-m", "1", "-n", "1", "-k", "1", "--spec-file", "/nonexistent.yaml",
      "--gpu", "/nonexistent.yaml"], "nonexistent"),
])
def test_bad_input_is_one_sentence_and_exit_2(args, needle):
    code, out, err = run(args)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_malformed_spec_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncompute: [1, 2\n")
    code, _, err = run(["specs", "validate", str(bad)])
    assert code == 2 and "bad.yaml" in err and "Traceback" not in err


def test_specs_list_show_schema():
    code, out, _ = run(["specs", "list"])
    assert code == 0 and "h200-sxm" in out and "mi300x" in out
    code, out, _ = run(["specs", "show", "h100"])
    assert code == 0 and "989 TFLOP/s" in out and "ridge 295.2" in out
    code, out, _ = run(["specs", "schema"])
    assert code == 0 and "properties" in json.loads(out)


@pytest.mark.parametrize("args", [
    ["predict", "model", "--model", "llama-3.1-8b", "--batch", "1"],
    ["fit", "--model", "llama-3.1-8b"],
    ["specs", "show"],
    ["predict", "allreduce", "--bytes", "1 MB", "--gpus", "2"],
])
def test_every_gpu_option_takes_the_device_name_torch_reports(args):
    """The names torch reports, in any case, wherever a GPU is named."""
    for gpu in ("NVIDIA H100 80GB HBM3", "nvidia h100 80gb hbm3"):
        argv = [*args, gpu] if args[:2] == ["specs", "show"] else [*args, "--gpu", gpu]
        code, out, err = run(argv)
        assert code == 0, err
        assert "h100-sxm" in out


def test_collective_reports_nccl_bus_bandwidth():
    code, out, _ = run(["predict", "allreduce", "--bytes", "1GiB", "--gpus", "8", "--gpu", "h100",
                        "--profile", "ideal", "--json"])
    d = json.loads(out)
    # ideal ring: busbw equals the per-direction link bandwidth (450 GB/s for NVLink 4)
    assert d["losses"]["busbw_bytes_per_s"] == pytest.approx(450e9)
    assert d["losses"]["algbw_bytes_per_s"] == pytest.approx(450e9 * 8 / 14)


def test_formula_prints_sympy_and_crossover():
    code, out, _ = run(["formula", "gemm", "--crossover-gpu", "h100"])
    assert code == 0 and "2*k*m*n" in out and "memory-bound below m =" in out
    code, out, _ = run(["formula", "attention", "--latex"])
    assert code == 0 and "\\" in out


def test_moe_breakdown_lists_kernels():
    code, out, _ = run(["predict", "moe", "--tokens", "256", "--hidden", "4096", "--ffn", "14336",
                        "--experts", "8", "--top-k", "2", "--ep", "2", "--gpu", "h100", "--json"])
    d = json.loads(out)
    names = [p["name"] for p in d["parts"]]
    assert "experts_gate_up" in names and "ep_dispatch" in names and "ep_combine" in names


def test_moe_reports_the_routing_that_set_its_time():
    args = ["predict", "moe", "--tokens", "4", "--hidden", "1024", "--ffn", "2048", "--experts", "8",
            "--top-k", "2", "--ep", "2", "--gpu", "h200"]
    code, out, _ = run(args + ["--json"])
    assert code == 0
    d = json.loads(out)
    assert d["experts_touched"] == pytest.approx(8 * (1 - (6 / 8) ** 4))
    assert d["busiest_expert_rows"] == pytest.approx(2.41, rel=0.01)  # sampled: 2.408 rows
    code, out, _ = run(args)
    assert code == 0 and "experts touched" in out
    assert float(re.search(r"busiest expert\s+([\d.]+) rows", out).group(1)) == pytest.approx(2.41, rel=0.01)
    code, out, _ = run(args + ["--routing", "balanced", "--json"])
    assert json.loads(out)["busiest_expert_rows"] == 1  # 8 routed rows over 8 experts


def test_formula_moe_names_the_numeric_busiest_expert():
    code, out, _ = run(["formula", "moe"])
    assert code == 0 and "E*(1 - (1 - k/E)**T)" in out
    assert "busiest expert load (uniform, computed numerically): busiest(T, E, k)" in out


def test_cli_group_is_importable_without_sympy():
    import subprocess
    import sys

    code = ("import sys; from rooflinesim.cli.main import cli; import rooflinesim.timing; "
            "print('sympy' in sys.modules, 'plotly' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"


@pytest.mark.parametrize("model,extra,context", [
    ("llama-3.1-8b", ["--weights", "fp8", "--kv-dtype", "fp8"], 4096),
    ("llama-3-70b", ["--tp", "4", "--pp", "2", "--gpu-memory-utilization", "0.8"], 2304),
    ("mixtral-8x7b", ["--tp", "2", "--ep", "2", "--weights", "int4"], 1024),
])
def test_batch_max_is_the_memory_planners_largest_batch(model, extra, context):
    fit_args = [a.replace("--kv-dtype", "--kv") for a in extra]
    code, out, err = run(["fit", "--model", model, "--gpu", "h200", "--context", str(context),
                          *fit_args, "--json"])
    assert code == 0, err
    largest = json.loads(out)["max_batch"]
    code, out, err = run(["predict", "model", "--model", model, "--gpu", "h200", "--batch", "max",
                          "--prompt", str(context - 256), "--gen", "256", *extra, "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert d["batch"] == largest > 1
    assert d["batch_from"].startswith("max: the largest batch the memory planner fits")


def test_the_batch_says_whether_it_was_given_or_defaulted():
    def source(*extra):
        code, out, err = run(["predict", "model", "--model", "llama-3.1-8b", "--gpu", "h200", *extra,
                              "--json"])
        assert code == 0, err
        return json.loads(out)["batch_from"]

    assert source() == "default"
    assert source("--batch", "1") == "given"


def test_batch_max_follows_the_memory_fraction():
    def largest(fraction):
        code, out, _ = run(["predict", "model", "--model", "llama-3.1-8b", "--gpu", "h100", "--batch",
                            "max", "--memory-fraction", str(fraction), "--json"])
        return json.loads(out)["batch"]

    assert largest(0.5) < largest(0.9)


@pytest.mark.parametrize("args,needle", [
    (["--model", "llama-3.1-405b", "--gpu", "h100"], "not even one sequence of 2304 tokens fits"),
    (["--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--ep", "16", "--dp", "2"],
     "--batch max needs --ep no larger than --tp"),
])
def test_batch_max_that_cannot_be_sized_is_one_sentence_and_exit_2(args, needle):
    code, _, err = run(["predict", "model", *args, "--batch", "max"])
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model,extra", [
    ("llama-3.1-8b", ["--tp", "8", "--weights", "int4"]),  # int4 group scales, vocab split
    ("qwen3-30b-a3b", ["--tp", "8"]),  # 4 KV heads: each replicated on two GPUs
    ("deepseek-v3", ["--tp", "8", "--ep", "8", "--weights", "fp8"]),  # MLA, whole experts per GPU
    ("mixtral-8x7b", ["--tp", "2", "--ep", "2", "--weights", "int4"]),
    ("qwen2.5-72b", ["--tp", "4"]),  # qkv biases, untied LM head
    ("phi-3-mini-4k", ["--tp", "2", "--weights", "int8"]),
])
def test_predict_model_and_fit_report_the_same_weights_per_gpu(model, extra):
    """One weight accounting: both commands give the same bytes for one GPU."""
    code, out, err = run(["fit", "--model", model, "--gpu", "h200", "--context", "2304", *extra,
                          "--json"])
    assert code == 0, err
    fitted = json.loads(out)["per_gpu"]
    code, out, err = run(["predict", "model", "--model", model, "--gpu", "h200", "--batch", "1",
                          "--prompt", "2048", "--gen", "256", *extra, "--json"])
    assert code == 0, err
    predicted = json.loads(out)
    assert predicted["weights_bytes_per_gpu"] == pytest.approx(fitted["weights_bytes"], rel=1e-9)
    # one sequence of 2,304 tokens: 144 whole blocks of 16, the planner's KV count
    assert predicted["kv_cache_bytes_per_gpu"] == pytest.approx(fitted["kv_cache_bytes"], rel=1e-9)
