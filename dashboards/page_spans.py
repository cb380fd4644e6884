"""Per-tile remote-store spans (the paper's Fig. 10) and the per-tile stall test (Table 2)."""

import plotly.graph_objects as go

from xstage.dashboards.html import Page
from xstage.dashboards.style import SCHEDULE_COLORS

TITLE = "Remote-store spans and stalls (Fig. 10, Table 2)"
LEAD = ("Sender-visible remote-store span of every Linear-2 tile, W8A8 skewed routing, under the expert-wave and "
        "interleaved schedules; and the stall model of Eq. 15 -- prediction [T_RS(i) - T_mma(i+1)]_+ against the "
        "MMA's wait for a staging slot.")
_SCHED = {"expert_wave": "expert-wave", "interleaved": "interleaved"}


def span_figure(l2, title: str):
    fig = go.Figure()
    for sched in ("expert_wave", "interleaved"):
        s = l2[l2["schedule"] == sched]
        if s.empty:
            continue
        label = _SCHED[sched]
        fig.add_trace(go.Box(x=s["config"].str.split("/").str[0], q1=s["q1(us)"], median=s["median(us)"],
                             q3=s["q3(us)"], lowerfence=s["p5(us)"], upperfence=s["p95(us)"], name=label,
                             marker_color=SCHEDULE_COLORS[label], boxpoints=False))
    fig.update_layout(title=title, boxmode="group", yaxis_title="sender-visible L2 remote-store span T_RS (us)",
                      height=480)
    return fig


def stall_figure(table, title: str):
    fig = go.Figure()
    x = table["config"].str.split("/").str[0]
    for label, col, color, pattern in (("wave: predicted (Eq. 15)", "stall_pred_wave(us)", "#d1495b", ""),
                                       ("wave: measured MMA stall", "stall_meas_wave(us)", "#d1495b", "/"),
                                       ("interleaved: predicted", "stall_pred_int(us)", "#2457a6", ""),
                                       ("interleaved: measured", "stall_meas_int(us)", "#2457a6", "/")):
        fig.add_trace(go.Bar(x=x, y=table[col], name=label, marker_color=color, marker_pattern_shape=pattern))
    fig.update_layout(title=title, barmode="group", yaxis_title="per-tile stall, median (us)", height=420)
    return fig


def spans_page(frames: dict) -> Page:
    """``frames``: ``collect()["spans"]`` -- l2 spans, summary, table2 (+ hw_l2, hw_table2, compare)."""
    page = Page("spans", TITLE, lead=LEAD)
    page.heading(f"simulated: setting {frames['setting']} on {frames['platform']}")
    page.figure(span_figure(frames["l2"], "L2 span distributions (simulated)"),
                "Boxes: quartiles; whiskers: 5th and 95th percentiles. Expert-wave: drain-limited, heavy-tailed "
                "spans; interleaved: near the floor T_iss0 + staging overhead.")
    page.figure(stall_figure(frames["table2"], "per-tile stall: prediction vs simulated measurement"))
    if "hw_l2" in frames:
        page.heading("measured")
        page.figure(span_figure(frames["hw_l2"], "L2 span distributions (measured)"))
        page.figure(stall_figure(frames["hw_table2"], "per-tile stall: prediction vs measurement (hardware)"))
    else:
        page.no_data("measured per-tile spans and MMA stalls",
                     "the MoE hardware runs (issue 6), which write tile records with experiment 'moe' under data/")
    for title, frame in tables(frames).items():
        page.table(frame, title, open_=title.startswith("Table 2"))
    return page


def tables(frames: dict) -> dict:
    out = {"Table 2 (simulated): spans, mainloops, stall prediction / measurement": frames["table2"],
           "Fig. 10 (simulated): L2 span distributions": frames["l2"],
           "span summary per schedule and kind (simulated)": frames["summary"]}
    if "hw_table2" in frames:
        out["Table 2 (measured)"] = frames["hw_table2"]
        out["Fig. 10 (measured): L2 span distributions"] = frames["hw_l2"]
    if "compare" in frames:
        out["measured vs simulated tile summaries"] = frames["compare"]
    return out
