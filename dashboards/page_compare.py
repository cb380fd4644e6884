"""Simulated vs measured, wherever measured records exist: error metrics and parity plots."""

import numpy as np
import plotly.graph_objects as go

from xstage.dashboards.html import Page
from xstage.dashboards.style import COLORS

TITLE = "Simulated vs measured"
LEAD = ("Every measured experiment re-run on the simulator with the calibrated platform, side by side. Relative "
        "error = |simulated - measured| / measured; sign agreement = share of configurations where simulator and "
        "hardware agree on whether the schedule change speeds the kernel up.")


def parity_figure(series: list, title: str, unit: str, log: bool = True):
    """``series``: (label, measured, simulated, hover text)."""
    fig = go.Figure()
    values = np.concatenate([np.concatenate([np.asarray(m, float), np.asarray(s, float)]) for _, m, s, _ in series])
    values = values[np.isfinite(values) & (values > 0 if log else True)]
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.1, 1.0)
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(color="#888", dash="dot")))
    for i, (label, m, s, text) in enumerate(series):
        fig.add_trace(go.Scatter(x=m, y=s, mode="markers", name=label, text=text,
                                 marker=dict(size=8, color=COLORS[i % len(COLORS)])))
    kind = "log" if log else "linear"
    fig.update_layout(title=title, xaxis_title=f"measured {unit}", yaxis_title=f"simulated {unit}",
                      xaxis_type=kind, yaxis_type=kind, height=480)
    return fig


def compare_page(collected: dict) -> Page:
    """``collected``: the whole ``collect()`` result (reads each page's ``compare`` frame)."""
    page = Page("compare", TITLE, lead=LEAD)
    errors = collected["errors"]
    if errors.empty:
        page.no_data("any measured records", "xstage calibrate --target host --out data/calibration/NAME "
                     "(bursts); bash benchmarks/gpu/attention.sh (attention); MoE runs (moe)")
    else:
        page.table(errors, "error metrics per comparison", open_=True)
    for name, frames in collected["calibration"].items():
        if "compare" not in frames:
            continue
        c = frames["compare"]
        text = [f"{m} K={k} B={b} G={g:.3g}" for m, k, b, g in
                zip(c["mode"], c["producers"], c["bytes_per_producer"], c["gap(us)"])]
        page.figure(parity_figure([("issue time", c["measured_issue(us)"], c["simulated_issue(us)"], text),
                                   ("period", c["measured_period(us)"], c["simulated_period(us)"], text)],
                                  f"burst experiments on {name}", "(us)"))
    att = collected.get("attention", {})
    if "compare" in att and len(att["compare"]):
        c = att["compare"]
        page.figure(parity_figure([("fused time", c["measured_fused(us)"], c["simulated_fused(us)"],
                                    [f"M={m}" for m in c["M"]])], "FlashAttention + A2A: fused kernel time", "(us)"))
    moe = collected.get("moe", {})
    if "compare" in moe:
        c = moe["compare"]
        page.figure(parity_figure([("speedup", c["measured_speedup"], c["simulated_speedup"], c["config"])],
                                  "MoE: interleaved over expert-wave", "speedup", log=False))
    for title, frame in tables(collected).items():
        if title != "error metrics per comparison":
            page.table(frame, title)
    return page


def tables(collected: dict) -> dict:
    out = {"error metrics per comparison": collected["errors"]}
    for name, frames in collected["calibration"].items():
        if "compare" in frames:
            out[f"burst experiments on {name}: measured / simulated / model"] = frames["compare"]
    for key, label in (("attention", "FlashAttention + A2A per M"), ("moe", "MoE per configuration"),
                       ("spans", "MoE tile summaries")):
        if "compare" in collected.get(key, {}):
            out[label] = collected[key]["compare"]
    return out
