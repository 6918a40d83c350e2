"""Roofline charts (plotly): where each kernel of a model sits against a GPU's compute and
bandwidth ceilings, datasheet and calibrated, and predicted-vs-measured validation plots.

The figures are built from the same predictions the CLI prints (``predict_model`` for a
model, ``validate`` for measurements); HTML output embeds plotly.js, so it opens offline.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .units import format_bytes, format_rate, format_seconds

PHASE_COLORS = {"prefill": "#1f77b4", "decode": "#d62728"}
GPU_DASH = ["solid", "dash", "dot", "dashdot"]
CEILING_DTYPES = ("fp8", "bf16", "fp32")
X_RANGE = (1e-2, 1e5)  # FLOP per byte


def _ceiling_traces(spec, profile, dash: str, show_calibrated: bool, index: int = 0) -> list:
    """Datasheet ceilings (peak per dtype, HBM and L2 slopes) and, distinctly, the
    calibrated (achievable) ones; ridge points labelled."""
    traces = []
    x0, x1 = X_RANGE
    hbm = spec.memory.hbm_bandwidth_bytes_per_s
    l2 = spec.memory.l2_bandwidth_bytes_per_s
    for dt in CEILING_DTYPES:
        if not spec.supports(dt):
            continue
        peak = spec.peak(dt)
        ridge = peak / hbm
        traces.append(go.Scatter(
            x=[x0, ridge, x1], y=[hbm * x0, peak, peak], mode="lines+text",
            line={"dash": dash, "width": 2}, name=f"{spec.name} {dt} peak + HBM",
            text=["", f"{spec.name} ridge {ridge:.0f} FLOP/B" if dt == "bf16" else "", ""],
            textposition=("bottom right", "top left", "bottom left", "top right")[index % 4],
            textfont={"size": 10},
            hovertemplate=f"{spec.name} {dt}: {format_rate(peak, 'FLOP/s')}, "
                          f"HBM {format_rate(hbm, 'B/s')}, ridge {ridge:.1f} FLOP/B<extra></extra>",
            legendgroup=spec.name, meta={"kind": "datasheet", "gpu": spec.name, "dtype": dt,
                                         "peak_flop_per_s": peak, "ridge_flop_per_byte": ridge}))
        if show_calibrated and profile is not None and profile.kind != "ideal":
            p = profile.params("gemm", dt)
            c = profile.params("memory", "copy")
            apeak, abw = peak * p.compute_efficiency, hbm * c.memory_efficiency
            traces.append(go.Scatter(
                x=[x0, apeak / abw, x1], y=[abw * x0, apeak, apeak], mode="lines",
                line={"dash": "dot", "width": 1}, opacity=0.7,
                name=f"{spec.name} {dt} calibrated", legendgroup=spec.name,
                hovertemplate=f"{spec.name} {dt} achievable: {format_rate(apeak, 'FLOP/s')}, "
                              f"{format_rate(abw, 'B/s')}<extra></extra>",
                meta={"kind": "calibrated", "gpu": spec.name, "dtype": dt,
                      "peak_flop_per_s": apeak, "bandwidth_bytes_per_s": abw}))
    if l2:
        top = max(spec.peak(d) for d in CEILING_DTYPES if spec.supports(d))
        traces.append(go.Scatter(
            x=[x0, top / l2], y=[l2 * x0, top], mode="lines", line={"dash": "longdash", "width": 1},
            name=f"{spec.name} L2 {format_rate(l2, 'B/s')}"
                 + (" (estimate)" if spec.memory.l2_bandwidth_estimated else ""),
            legendgroup=spec.name, meta={"kind": "l2", "gpu": spec.name, "bandwidth_bytes_per_s": l2}))
    return traces


SYMBOLS = ["circle", "diamond", "square", "triangle-up"]


def _op_points(prediction, gpu: str, index: int = 0) -> list:
    traces = []
    for phase in ("prefill", "decode"):
        rows = [r for r in getattr(prediction, phase).table() if r["flops"] > 0 and r["hbm_bytes"] > 0]
        if not rows:
            continue
        total = sum(r["time_s"] for r in rows)
        x = [r["flops"] / r["hbm_bytes"] for r in rows]
        y = [r["flops"] / r["time_s"] for r in rows]
        size = [8 + 40 * np.sqrt(r["time_s"] / total) for r in rows]
        text = [f"{r['op']} ({phase}, {gpu})<br>runs per forward: {r['count']:.0f}<br>"
                f"FLOPs {r['flops']:.3g}, bytes {format_bytes(r['hbm_bytes'], binary=False)}<br>"
                f"time {format_seconds(r['time_s'])} ({100 * r['time_s'] / total:.1f}%), bound {r['bound']}"
                for r in rows]
        traces.append(go.Scatter(
            x=x, y=y, mode="markers", name=f"{phase} ops ({gpu})",
            marker={"size": size, "color": PHASE_COLORS[phase], "opacity": 0.75,
                    "symbol": SYMBOLS[index % len(SYMBOLS)],
                    "line": {"width": 1, "color": "white"}},
            text=text, hovertemplate="%{text}<extra></extra>",
            customdata=[r["op"] for r in rows], meta={"kind": "ops", "phase": phase, "gpu": gpu}))
    return traces


def _measured_points(records) -> list:
    from .calibration.records import to_op, Unpredictable
    from .errors import UserError
    from .timing import math_flops

    xs, ys, text = [], [], []
    for r in records:
        try:
            w = to_op(r).work()
        except (Unpredictable, UserError):
            continue
        f, b = float(np.asarray(math_flops(w))), float(np.asarray(w.hbm_bytes))
        if f <= 0 or b <= 0:
            continue
        xs.append(f / b)
        ys.append(f / r["measured_s"])
        text.append(f"measured {r['op']} {r.get('dtype', '')}: {format_seconds(r['measured_s'])}")
    if not xs:
        return []
    return [go.Scatter(x=xs, y=ys, mode="markers", name="measured", text=text,
                       hovertemplate="%{text}<extra></extra>",
                       marker={"symbol": "x", "size": 7, "color": "#2ca02c"}, meta={"kind": "measured"})]


def roofline_figure(gpus, predictions, measured=None, title: str = "") -> go.Figure:
    """``gpus``: (spec, profile) pairs; ``predictions``: a model prediction per GPU."""
    fig = go.Figure()
    for i, ((spec, profile), pred) in enumerate(zip(gpus, predictions)):
        for t in _ceiling_traces(spec, profile, GPU_DASH[i % len(GPU_DASH)], True, i):
            fig.add_trace(t)
        for t in _op_points(pred, spec.name, i):
            fig.add_trace(t)
    for t in _measured_points(measured or []):
        fig.add_trace(t)
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP / byte of HBM traffic)",
                     range=[np.log10(X_RANGE[0]), np.log10(X_RANGE[1])])
    fig.update_yaxes(type="log", title="attained FLOP/s", exponentformat="SI")
    fig.update_layout(title=title, template="plotly_white", width=1100, height=700,
                      legend={"font": {"size": 10}})
    return fig


def validation_figure(report) -> go.Figure:
    """Predicted against measured, log-log, with y = x and ±10% / ±20% bands, by op."""
    fig = go.Figure()
    rows = report.rows
    lo = min((min(r["measured_s"], r["predicted_s"]) for r in rows), default=1e-6) / 2
    hi = max((max(r["measured_s"], r["predicted_s"]) for r in rows), default=1e-3) * 2
    for band, dash in ((0.2, "dot"), (0.1, "dash")):
        for sign in (1, -1):
            fig.add_trace(go.Scatter(x=[lo, hi], y=[lo * (1 + sign * band), hi * (1 + sign * band)],
                                     mode="lines", line={"dash": dash, "color": "grey", "width": 1},
                                     name=f"±{band:.0%}", showlegend=sign == 1,
                                     meta={"kind": "band", "band": band}))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line={"color": "black"},
                             name="y = x", meta={"kind": "identity"}))
    for op in sorted({r["op"] for r in rows}):
        sel = [r for r in rows if r["op"] == op]
        fig.add_trace(go.Scatter(
            x=[r["measured_s"] for r in sel], y=[r["predicted_s"] for r in sel], mode="markers",
            name=op, text=[f"{r['case']}<br>error {100 * r['error']:+.1f}%" for r in sel],
            hovertemplate="%{text}<extra></extra>", marker={"size": 6, "opacity": 0.7},
            meta={"kind": "points", "op": op}))
    fig.update_xaxes(type="log", title="measured (s)", exponentformat="SI")
    fig.update_yaxes(type="log", title="predicted (s)", exponentformat="SI")
    fig.update_layout(title=f"{report.gpu}: predicted vs measured [{report.profile}]",
                      template="plotly_white", width=900, height=800)
    return fig


def write_html(fig: go.Figure, path) -> None:
    """Self-contained HTML (plotly.js embedded, no CDN)."""
    from .files import write_text

    write_text(path, fig.to_html(include_plotlyjs=True, full_html=True), "HTML")


PNG_INSTALL = 'pip install "rooflinesim[png]"'  # the extra that adds PNG export (kaleido)


def check_png() -> None:
    """Raise one sentence of UserError when PNG export cannot work in this install (no
    kaleido), so that a command can refuse before it writes anything."""
    import importlib.util

    from .errors import UserError

    if importlib.util.find_spec("kaleido") is None:
        raise UserError(f"PNG export needs kaleido, which this install lacks: {PNG_INSTALL} adds it "
                        "(it draws through a Chrome or Chromium browser)")


def write_png(fig: go.Figure, path) -> None:
    from .errors import UserError

    from .files import write_bytes

    check_png()
    try:
        data = fig.to_image(format="png")
    except Exception as e:  # kaleido or a browser missing
        reason = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise UserError(f"cannot write {path}: PNG export needs kaleido ({PNG_INSTALL}) and a Chrome "
                        f"or Chromium browser ({reason[:120]})") from None
    write_bytes(path, data, "PNG")


SERVE_POINTS = 4000  # points of each over-time trace a serving chart keeps (evenly spaced steps)


def serve_figure(result, title: str = "") -> go.Figure:
    """A simulated serving run: latency CDFs (TTFT, TPOT, inter-token, end to end) of the
    measured requests and, over time, the requests running per step, the tokens per step and
    the KV cache in use (warm-up requests' steps too, the measured run's start marked)."""
    from plotly.subplots import make_subplots

    s = result.served
    w = s.warmup
    ttft = (s.first_token_s[w:] - s.arrival_s[w:]) * 1e3
    e2el = (s.finish_s[w:] - s.arrival_s[w:]) * 1e3
    many = s.output_tokens[w:] > 1
    tpot = (e2el[many] - ttft[many]) / (s.output_tokens[w:][many] - 1)
    fig = make_subplots(rows=2, cols=2, subplot_titles=(
        "latency, cumulative share of requests (ITL: of gaps)", "requests running per step",
        "tokens per step", "KV cache in use"), horizontal_spacing=0.09, vertical_spacing=0.14)
    for name, x in (("TTFT", ttft), ("TPOT", tpot), ("ITL", s.itl_s * 1e3), ("E2EL", e2el)):
        x = np.sort(np.asarray(x, dtype=float))
        if x.size == 0:
            continue
        keep = np.unique(np.linspace(0, x.size - 1, min(x.size, SERVE_POINTS)).astype(int))
        fig.add_trace(go.Scatter(x=x[keep], y=(keep + 1) / x.size, mode="lines", name=f"{name} (ms)",
                                 hovertemplate=f"{name} %{{x:.2f}} ms: %{{y:.1%}}<extra></extra>"), row=1, col=1)
    steps = s.steps
    t = np.asarray(steps["start_s"], dtype=float)
    keep = np.unique(np.linspace(0, max(t.size - 1, 0), min(t.size, SERVE_POINTS)).astype(int)) if t.size else t
    blocks = max(result.engine.kv_blocks, 1)
    for (row, col), key, name, scale in (((1, 2), "sequences", "running", 1.0), ((2, 1), "tokens", "tokens", 1.0),
                                         ((2, 2), "kv_blocks_used", "KV cache used", 1.0 / blocks)):
        y = np.asarray(steps[key], dtype=float)[keep] * scale
        fig.add_trace(go.Scatter(x=t[keep], y=y, mode="lines", name=name, showlegend=True,
                                 hovertemplate=f"t %{{x:.2f}} s: {name} %{{y}}<extra></extra>"), row=row, col=col)
        if w:
            fig.add_vline(x=float(s.arrival_s[w:].min()), line_dash="dot", row=row, col=col,
                          annotation_text="measured from" if key == "sequences" else None)
    fig.update_xaxes(type="log", title_text="ms", row=1, col=1)
    fig.update_yaxes(range=[0, 1], tickformat=".0%", row=1, col=1)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=2, col=2)
    for row, col in ((1, 2), (2, 1), (2, 2)):
        fig.update_xaxes(title_text="time (s)", row=row, col=col)
    fig.update_layout(title=title, template="plotly_white", width=1150, height=720, legend={"orientation": "h"})
    return fig


def plan_figure(out: dict, title: str = "") -> go.Figure:
    """A plan's feasible deployments: cost per hour against the P99 of the first SLO, each
    labelled, the cost-latency Pareto front as a line, the SLO as a dashed limit."""
    key = next(iter(out["slos"]))
    fig = go.Figure()
    feasible = out["feasible"]

    def label(r):
        ep = f" EP {r['ep']}" if r.get("ep", 1) > 1 else ""
        pp = f" PP {r['pp']}" if r.get("pp", 1) > 1 else ""
        replicas = f"{r['prefill_replicas']}:{r['decode_replicas']}" if r.get("prefill_replicas") else r["replicas"]
        return f"{r['gpu']} x {r['tp']}{pp}{ep} {r['weights']} x{replicas}"

    fig.add_trace(go.Scatter(
        x=[r["metrics"][key] for r in feasible], y=[r["cost_per_hour"] for r in feasible], mode="markers",
        name="deployments that meet the SLOs", text=[label(r) for r in feasible],
        hovertemplate="%{text}: %{x:.4g} ms, $%{y:,.2f}/hour<extra></extra>", marker={"size": 9}))
    front = out["pareto"]
    fig.add_trace(go.Scatter(
        x=[r["metrics"][key] for r in front], y=[r["cost_per_hour"] for r in front], mode="lines+markers+text",
        name="cost-latency Pareto front", text=[label(r) for r in front], textposition="top right",
        textfont={"size": 10}, hoverinfo="skip", line={"shape": "hv"}))
    fig.add_vline(x=out["slos"][key], line_dash="dash", annotation_text=f"SLO {key}")
    fig.update_xaxes(title_text=f"{key.replace('_ms', '')} (ms)")
    fig.update_yaxes(title_text="$ per hour", type="log")
    fig.update_layout(title=title or f"{out['model']} at {out['rate']:g} req/s", template="plotly_white",
                      width=1100, height=650)
    return fig
