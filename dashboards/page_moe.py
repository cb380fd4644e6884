"""MoE kernel speedups across configurations (the paper's Fig. 8): interleaved over expert-wave."""

import plotly.graph_objects as go

from xstage.dashboards.html import Page

TITLE = "MoE speedups (Fig. 8)"
LEAD = ("Speedup of the X-Stage-aware interleaved scheduler over expert-wave for each model, weight precision and "
        "routing (bars: geometric mean over the sequence-length settings present; whiskers: min and max).")
_GROUP_COLORS = {("w8a8", "balanced"): "#9fb8e0", ("w8a8", "skewed"): "#2457a6",
                 ("w4a8", "balanced"): "#f0b7be", ("w4a8", "skewed"): "#d1495b"}


def speedup_figure(groups, sweep, title: str):
    fig = go.Figure()
    for (prec, routing), g in groups.groupby(["precision", "routing"], sort=False):
        fig.add_trace(go.Bar(x=g["model"], y=g["geomean_speedup"], name=f"{prec.upper()} {routing}",
                             marker_color=_GROUP_COLORS.get((prec, routing), "#888"),
                             error_y=dict(type="data", symmetric=False, array=g["max_speedup"] - g["geomean_speedup"],
                                          arrayminus=g["geomean_speedup"] - g["min_speedup"], thickness=1)))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#444")
    fig.update_layout(title=title, barmode="group", yaxis_title="speedup T_wave / T_interleaved", height=480)
    return fig


def scatter_figure(compare, title: str):
    fig = go.Figure()
    lo = float(min(compare["measured_speedup"].min(), compare["simulated_speedup"].min(), 0.9))
    hi = float(max(compare["measured_speedup"].max(), compare["simulated_speedup"].max(), 1.1))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="#888", dash="dot")))
    fig.add_trace(go.Scatter(x=compare["measured_speedup"], y=compare["simulated_speedup"], mode="markers",
                             text=compare["config"], name="configuration", marker=dict(size=9, color="#2457a6")))
    fig.add_hline(y=1.0, line_color="#ccc")
    fig.add_vline(x=1.0, line_color="#ccc")
    fig.update_layout(title=title, xaxis_title="measured speedup", yaxis_title="simulated speedup", height=460)
    return fig


def hardware_figure(hw, title: str):
    """Per hardware configuration: the fused GEMM (remote stores off) over the grouped-GEMM library, and the
    user's baseline (grouped GEMM + a separate Combine copy) over the fused FFN's slower schedule."""
    fig = go.Figure()
    for prec, color in (("bf16", "#2457a6"), ("w8a8", "#d1495b")):
        g = hw[hw["precision"] == prec]
        fig.add_trace(go.Scatter(x=g["config"], y=g["gemm_vs_grouped_mm"], mode="markers", name=f"GEMM vs library {prec}",
                                 marker=dict(color=color, size=8)))
        fig.add_trace(go.Scatter(x=g["config"], y=g["fused_vs_baseline"], mode="markers", name=f"baseline / fused {prec}",
                                 marker=dict(color=color, size=8, symbol="diamond-open")))
    for y, dash in ((1.0, "dot"), (0.9, "dash")):
        fig.add_hline(y=y, line_dash=dash, line_color="#888")
    fig.update_layout(title=title, yaxis_title="ratio", height=520, xaxis=dict(showticklabels=False))
    return fig


def moe_page(frames: dict) -> Page:
    """``frames``: ``collect()["moe"]`` -- sweep (one row per configuration), groups, [compare]."""
    sweep, groups = frames["sweep"], frames["groups"]
    page = Page("moe", TITLE, lead=LEAD)
    page.heading(f"simulated: {frames['source']}, {len(sweep)} configurations on {frames['platform']}")
    page.figure(speedup_figure(groups, sweep, "interleaved over expert-wave (simulated)"))
    if frames["source"].startswith("quick"):
        page.text(f"All 84 configurations: xstage sweep moe --platform {frames['platform']} "
                  f"--out data/sweeps/moe-{frames['platform']}.parquet, then rebuild the dashboards.")
    if "compare" in frames:
        page.heading("measured vs simulated")
        page.figure(scatter_figure(frames["compare"], "speedup: measured vs simulated, same configurations"))
    else:
        page.no_data("measured MoE kernel times", "the MoE hardware runs (issue 6): kernel records with experiment "
                     "'moe', variants expert_wave and interleaved")
    if "hardware" in frames and len(frames["hardware"]):
        hw = frames["hardware"]
        distinct = hw[hw["winner_measured"] != "same order"]
        page.heading(f"hardware: {len(hw)} configurations; the simulator names the winner in "
                     f"{int(distinct['sim_names_winner'].sum())} of the {len(distinct)} whose orders differ")
        page.figure(hardware_figure(hw, "fused GEMM vs grouped-GEMM library, and baseline time over fused time"))
    for title, frame in tables(frames).items():
        page.table(frame, title, open_=title.startswith("speedup by"))
    return page


def tables(frames: dict) -> dict:
    cols = [c for c in ("config", "wave_us", "int_us", "speedup", "wave_span_median_us", "int_span_median_us",
                        "wave_stall_per_sm_us", "int_stall_per_sm_us", "lead_rows") if c in frames["sweep"].columns]
    out = {"speedup by model, precision and routing (simulated)": frames["groups"],
           "every simulated configuration": frames["sweep"][cols]}
    if "compare" in frames:
        out["measured vs simulated per configuration"] = frames["compare"]
    if "hardware" in frames:
        out["hardware: winner measured and simulated, GEMM and baseline ratios"] = frames["hardware"]
    return out
