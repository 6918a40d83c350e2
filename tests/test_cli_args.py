"""Command-line arguments: sizes within their documented ranges, every named spec file
checked, the option spellings the commands share, help texts, and PNG export's errors."""

import importlib.util
import json
import subprocess
import sys

import pytest
from helpers import run_cli as run

from rooflinesim.cli.common import MAX_SIZE, MAX_WORK

GEMM = ["predict", "gemm", "-m", "4096", "-n", "4096", "-k", "4096", "--gpu", "h200"]


def _one_sentence(err):
    return "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["predict", "gemm", "-m", "1", "-n", str(2**64), "-k", "1"], "not in the range"),
    (["predict", "attention", "--heads", str(2**63)], "not in the range"),
    (["predict", "gemm", "-m", str(2**62), "-n", "1", "-k", "1"], "not in the range"),
    (["predict", "gemm", "-m", "1e30", "-n", "1", "-k", "1"], "not a whole number"),
    (["predict", "gemm", "-m", "1" * 5000, "-n", "1", "-k", "1"], "not in the range"),
    (["predict", "gemm", "-m", "١٢", "-n", "1", "-k", "1"], "not a whole number"),
    (["predict", "gemm", "-m", str(MAX_SIZE), "-n", str(MAX_SIZE), "-k", "1"], "too large to count"),
    (["predict", "attention", "--seq", str(2**30), "--heads", "64"], "too large to count"),
    (["predict", "copy", "--bytes", "0.5"], "whole number of bytes"),
    (["predict", "copy", "--bytes", "1e30"], "at most"),
    (["predict", "copy", "--bytes", "0"], "above 0"),
    (["predict", "allreduce", "--bytes", "1.5B"], "whole number of bytes"),
    (["predict", "alltoall", "--bytes", "inf"], "cannot read"),
    (["predict", "moe", "--tokens", "8", "--hidden", "8", "--ffn", "8", "--experts", "4", "--top-k", "2",
      "--imbalance", "nan"], "not a finite number"),
    (["predict", "moe", "--tokens", "8", "--hidden", "8", "--ffn", "8", "--experts", "4", "--top-k", "2",
      "--imbalance", "inf"], "not in the range"),
    (["predict", "model", "--model", "llama-3-8b", "--memory-fraction", "nan", "--batch", "max"],
     "not a finite number"),
    (["predict", "model", "--model", "llama-3-8b", "--launch-overhead", "nan us", "--eager"], "cannot read"),
    (["predict", "model", "--model", "llama-3-8b", "--chunk", "1", "--prompt", "100000"], "chunks"),
    (["predict", "model", "--model", "llama-3-8b", "--batch", str(2**30), "--prompt", str(2**20)],
     "tokens exceeds"),
    (["fit", "--model", "llama-3-8b", "--gpu-memory-utilization", "nan"], "not a finite number"),
    (["fit", "--model", "llama-3-8b", "--device-memory", "inf GiB"], "cannot read"),
    (["fit", "--model", "llama-3-8b", "--batch", str(2**30), "--context", str(2**20)], "tokens exceeds"),
    (["formula", "gemm", "-n", str(2**64)], "not in the range"),
    (["harness", "run", "--list", "--time-budget", "inf"], "at most"),
    (["harness", "run", "--list", "--case-timeout", "nan"], "expected seconds"),
    (["harness", "run", "--list", "--restarts", "-1"], ">= 0"),
])
def test_out_of_range_arguments_are_one_sentence_and_exit_2(args, needle):
    code, out, err = run(args)
    assert code == 2, (out, err)
    assert needle in err and _one_sentence(err), err


def test_the_largest_sizes_still_predict_finite_numbers():
    # each option at its maximum, the others small: finite, exact FLOPs
    code, out, err = run(["predict", "gemm", "-m", str(MAX_SIZE), "-n", "8192", "-k", "1", "--gpu", "h200",
                          "--json"])
    assert code == 0, err
    assert json.loads(out)["flops"] == 2 * MAX_SIZE * 8192  # one FMA = 2 FLOPs, exact in float64
    assert MAX_SIZE * 8192 == MAX_WORK
    code, out, err = run(["predict", "copy", "--bytes", "1PiB", "--gpu", "h200"])
    assert code == 0 and "nan" not in out and "inf" not in out, err


def test_sizes_on_the_limit_are_accepted():
    code, _, err = run(["predict", "norm", "--tokens", str(MAX_SIZE), "--hidden", "1", "--gpu", "h200"])
    assert code == 0, err


def test_non_finite_numbers_are_never_printed(monkeypatch):
    from rooflinesim.cli import common

    with pytest.raises(common.UserError, match="not a finite number"):
        common.echo("latency", "latency  nan ns")
    with pytest.raises(common.UserError, match="not a finite number"):
        common.echo("tile padding  xinf")
    with pytest.raises(common.UserError, match="not a finite number"):
        common.emit_json({"latency_s": float("inf")})
    common.echo("info: inference on nan_to_num, wrote runs/inf.html")  # words and paths are not numbers


def test_a_bad_spec_file_is_checked_whichever_gpu_is_asked_for(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: my-gpu\nbogus: 1\n")
    for args in (GEMM, ["fit", "--model", "llama-3-8b", "--gpu", "h200"],
                 ["predict", "model", "--model", "llama-3-8b", "--gpu", "h200"],
                 ["formula", "gemm", "--crossover-gpu", "h200"], ["specs", "show", "h200"]):
        code, _, err = run([*args, "--spec-file", str(bad)])
        assert code == 2 and "bad.yaml" in err and _one_sentence(err), (args, err)


def test_both_spellings_of_the_kv_dtype():
    for spelling in ("--kv", "--kv-dtype"):
        code, out, err = run(["fit", "--model", "llama-3-8b", "--gpu", "h200", spelling, "fp8"])
        assert code == 0 and "KV fp8" in out, err
        code, out, err = run(["predict", "model", "--model", "llama-3-8b", "--gpu", "h200", spelling, "fp8"])
        assert code == 0 and "fp8 KV cache" in out, err


def test_a_world_size_across_nodes_is_plain_numbers():
    code, _, err = run(["predict", "model", "--model", "llama-3-70b", "--gpu", "h200", "--tp", "16"])
    assert code == 2 and _one_sentence(err)
    assert "a world size of 16 GPUs would cross nodes" in err and "[" not in err


def test_every_command_has_help_text():
    from rooflinesim.cli.main import cli

    def leaves(group, path):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                yield from leaves(cmd, [*path, name])
            else:
                yield [*path, name], cmd

    for path, cmd in leaves(cli, []):
        if path == ["harness", "run"]:  # (its options are the harness's own: `harness run --help`)
            continue
        code, out, _ = run([*path, "--help"])
        assert code == 0
        about = out.split("Options:")[0].split("\n", 1)[1].strip()
        assert len(about) > 20, path
    _, out, _ = run(["predict", "--help"])
    assert "or, later" not in out and "whole model" in out


def test_png_export_without_kaleido_names_the_extra_and_writes_nothing(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kaleido" else real(name, *a))
    html, png = tmp_path / "c.html", tmp_path / "c.png"
    args = ["roofline", "--model", "llama-3-8b", "-o", str(html), "--png", str(png)]
    for _ in range(2):  # the same command fails the same way the second time
        code, _, err = run(args)
        assert code == 2 and 'pip install "rooflinesim[png]"' in err and _one_sentence(err), err
        assert not html.exists() and not png.exists()


def test_a_failed_png_export_leaves_no_html(tmp_path, monkeypatch):
    import plotly.graph_objects as go

    def fail(self, *a, **kw):
        raise RuntimeError("\nKaleido requires Google Chrome to be installed.")

    monkeypatch.setattr(go.Figure, "to_image", fail)  # (what the PNG export calls)
    html, png = tmp_path / "c.html", tmp_path / "c.png"
    code, _, err = run(["roofline", "--model", "llama-3-8b", "-o", str(html), "--png", str(png)])
    assert code == 2 and _one_sentence(err)
    assert "Kaleido requires Google Chrome" in err and "rooflinesim[png]" in err
    assert not html.exists()


def test_python_m_rooflinesim_is_the_cli():
    r = subprocess.run([sys.executable, "-m", "rooflinesim", "predict", "gemm", "-m", "1", "-n", "1", "-k", "1",
                        "--gpu", "h200"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "GEMM bf16 m=1 n=1 k=1 on h200-sxm" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "rooflinesim", "predict", "gemm", "-m", "x"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and _one_sentence(r.stderr) and "not a whole number" in r.stderr
