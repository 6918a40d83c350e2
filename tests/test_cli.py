"""The CLI as a user drives it: answers, JSON fields, and one-sentence errors with exit 2."""

import json

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


def test_cli_group_is_importable_without_sympy():
    import subprocess
    import sys

    code = ("import sys; from rooflinesim.cli.main import cli; import rooflinesim.timing; "
            "print('sympy' in sys.modules, 'plotly' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"
