"""Roofline and validation charts: the figure's data (points where the predictions put
them, ceilings at the spec's rates) and, in headless Chromium, the page as a person sees it."""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli as cli

from rooflinesim.calibration import records
from rooflinesim.calibration.profile import resolve_profile
from rooflinesim.calibration.validate import validate
from rooflinesim.charts import roofline_figure, validation_figure
from rooflinesim.hardware import load_spec
from rooflinesim.models.config import load_config
from rooflinesim.models.workload import predict_model

ROOT = Path(__file__).resolve().parents[1]
H200_DATA = ROOT / "benchmarks" / "measurements" / "h200-sxm"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def h200_figure():
    spec = load_spec("h200")
    prof = resolve_profile(spec)
    pred = predict_model(load_config("llama-3.1-8b"), spec, prof, batch=8, prompt=2048, gen=2048)
    return spec, prof, pred, roofline_figure([(spec, prof)], [pred])


def _traces(fig, kind, **meta):
    return [t for t in fig.data if t.meta and t.meta.get("kind") == kind
            and all(t.meta.get(k) == v for k, v in meta.items())]


def test_ceilings_sit_at_the_spec_rates(h200_figure):
    spec, prof, _, fig = h200_figure
    (bf16,) = _traces(fig, "datasheet", dtype="bf16")
    assert bf16.y[-1] == spec.peak("bf16") == 989e12  # H200 SXM dense bf16, datasheet
    assert bf16.x[1] == pytest.approx(spec.peak("bf16") / spec.memory.hbm_bandwidth_bytes_per_s)
    assert bf16.y[0] / bf16.x[0] == pytest.approx(spec.memory.hbm_bandwidth_bytes_per_s)  # HBM slope
    (cal,) = _traces(fig, "calibrated", dtype="bf16")
    assert cal.y[-1] == pytest.approx(spec.peak("bf16") * prof.params("gemm", "bf16").compute_efficiency)
    assert cal.y[-1] < bf16.y[-1]  # achievable below the datasheet
    assert _traces(fig, "l2")  # the L2 slope, where the spec has a bandwidth


def test_op_points_are_the_predictions(h200_figure):
    _, _, pred, fig = h200_figure
    for phase in ("prefill", "decode"):
        (pts,) = _traces(fig, "ops", phase=phase)
        rows = {r["op"]: r for r in getattr(pred, phase).table()}
        for name, x, y in zip(pts.customdata, pts.x, pts.y):
            r = rows[name]
            assert x == pytest.approx(r["flops"] / r["hbm_bytes"])
            assert y == pytest.approx(r["flops"] / r["time_s"])
        assert max(pts.marker.size) > min(pts.marker.size)  # sized by share of time
    decode = _traces(fig, "ops", phase="decode")[0]
    gate_up = list(decode.customdata).index("gate_up_proj")
    assert decode.x[gate_up] < 100  # decode GEMMs sit left of the ridge: memory-bound


def test_validation_figure():
    meas = records.load([H200_DATA / "holdout.jsonl"])
    spec = load_spec("h200")
    rep = validate(meas, spec, resolve_profile(spec), "h200-sxm")
    fig = validation_figure(rep)
    (ident,) = _traces(fig, "identity")
    assert list(ident.x) == list(ident.y)
    assert {t.meta["op"] for t in _traces(fig, "points")} == set(rep.ops)
    assert sum(len(t.x) for t in _traces(fig, "points")) == len(rep.rows)


def test_cli_writes_offline_html_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "chart.html"
    args = ["roofline", "--model", "llama-3.1-8b", "--gpu", "h200", "--gpu", "h100", "--batch", "4",
            "--prompt", "512", "--context", "1024", "-o", str(out)]
    code, stdout, err = cli(args)
    assert code == 0, err
    html = out.read_text()
    assert "<script src=\"http" not in html  # no CDN: plotly.js is embedded
    assert "Plotly.newPlot" in html and len(html) > 1_000_000
    code, _, err = cli(args)
    assert code == 2 and "--force" in err
    code, _, err = cli(args[:-2] + ["--context", "100", "-o", str(tmp_path / "x.html")])
    assert code == 2 and "must exceed" in err


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (.ci/run installs it)")
def test_chart_as_a_person_sees_it(tmp_path):
    from PIL import Image

    out = tmp_path / "chart.html"
    code, _, err = cli(["roofline", "--model", "llama-3.1-8b", "--gpu", "h200", "--batch", "8",
                        "--prompt", "2048", "--context", "4096", "-o", str(out)])
    assert code == 0, err
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1150,750",
             "--virtual-time-budget=5000"]
    shot = tmp_path / "shot.png"
    subprocess.run(flags + [f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    plot_area = img[120:620, 100:880]  # inside the axes
    inked = (np.abs(plot_area - 255).sum(axis=2) > 60).mean()
    assert 0.005 < inked < 0.6  # lines and markers drawn, not a blank or solid page
    colours = {tuple(c) for c in plot_area.reshape(-1, 3)[::7]}
    assert len(colours) > 20
    dom = subprocess.run(flags + ["--dump-dom", out.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    for name in ("h200-sxm bf16 peak + HBM", "prefill ops (h200-sxm)", "decode ops (h200-sxm)"):
        assert name in dom  # the legend holds the expected traces


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (.ci/run installs it)")
def test_png_export(tmp_path):
    pytest.importorskip("kaleido")
    png = tmp_path / "chart.png"
    code, _, err = cli(["roofline", "--model", "llama-3.1-8b", "--gpu", "h200", "-o",
                        str(tmp_path / "c.html"), "--png", str(png)])
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
