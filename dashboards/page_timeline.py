"""Schedule timeline (the paper's Fig. 9): per-SM Gantt, Tensor-Core activity, injection and X-Stage
occupancy, expert-wave and interleaved side by side.

Large traces: the Gantt is drawn with WebGL (``Scattergl``: one trace per tile kind, segments
separated by gaps) and exact only up to ``gantt_limit`` tiles (12,000 per schedule by default,
``xstage.compare.timeline.GANTT_LIMIT``). A larger kernel (e.g. 132 SMs x 20,000 tiles) is shown
whole as an aggregated per-SM heatmap (fraction of each of 600 time bins spent in mainloops) plus
the exact WebGL Gantt of its first 12,000 tiles; activity curves are exact per-bin integrals. Page
size stays a few MB whatever the tile count.
"""

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from xstage.compare.timeline import timeline_summary
from xstage.dashboards.html import Page

TITLE = "Schedule timeline (Fig. 9)"
LEAD = ("Per-SM Gantt of mainloops and remote-store issue (epilogue bursts), Tensor-Core activity, injection rate "
        "and X-Stage occupancy over one fused MoE kernel. Drag to zoom, double-click to reset; the Gantt is "
        "WebGL.")
KIND_COLORS = {"L1": "#2a9d8f", "L2": "#2457a6", "FA": "#7b4fa0"}
ISSUE_COLOR = "#d1495b"


def _segments(start, end, y):
    """x, y arrays of horizontal segments separated by NaN gaps (one WebGL trace for all); float32
    halves the page (0.01 us resolution at 100 ms)."""
    n = len(start)
    x = np.empty(3 * n, dtype=np.float32)
    yy = np.empty(3 * n, dtype=np.float32)
    x[0::3], x[1::3], x[2::3] = start, end, np.nan
    yy[0::3], yy[1::3], yy[2::3] = y, y, np.nan
    return x, yy


def _gantt_traces(gantt, sms: int, showlegend: bool):
    traces = []
    width = max(1.0, min(6.0, 500.0 / max(sms, 1)))
    for kind in sorted(gantt["kind"].unique()):
        g = gantt[gantt["kind"] == kind]
        x, y = _segments(g["mainloop_start(us)"].to_numpy(), g["mainloop_end(us)"].to_numpy(), g["sm"].to_numpy())
        traces.append(go.Scattergl(x=x, y=y, mode="lines", name=f"{kind} mainloop", legendgroup=kind,
                                   line=dict(color=KIND_COLORS.get(kind, "#444"), width=width),
                                   showlegend=showlegend, hoverinfo="x+y"))
    r = gantt[gantt["bytes_remote"] > 0]
    if len(r):
        x, y = _segments(r["issue_start(us)"].to_numpy(), r["issue_end(us)"].to_numpy(), r["sm"].to_numpy() + 0.4)
        traces.append(go.Scattergl(x=x, y=y, mode="lines", name="remote-store issue (epilogue burst)",
                                   legendgroup="issue", line=dict(color=ISSUE_COLOR, width=max(1.0, width * 0.6)),
                                   showlegend=showlegend, hoverinfo="x+y"))
    return traces


def _dedupe_legend(fig):
    seen = set()
    for trace in fig.data:
        trace.showlegend = trace.name not in seen and trace.type != "heatmap"
        seen.add(trace.name)
    return fig


def timeline_figure(runs: dict, title: str):
    """One column per schedule: heatmap or Gantt, Tensor-Core activity, injection rate, X-Stage occupancy."""
    names = list(runs)
    fig = make_subplots(rows=4, cols=len(names), shared_xaxes="columns", vertical_spacing=0.04,
                        row_heights=[0.52, 0.16, 0.16, 0.16],
                        subplot_titles=[f"{n}: {runs[n]['tiles']:,} tiles, makespan {runs[n]['makespan(us)']:.1f} us"
                                        for n in names])
    for c, name in enumerate(names, start=1):
        r = runs[name]
        act = r["activity"]
        sms = int(r["gantt"]["sm"].max()) + 1 if len(r["gantt"]) else 1
        if r["heatmap"] is not None:
            h = r["heatmap"].pivot(index="sm", columns="time(us)", values="busy")
            fig.add_trace(go.Heatmap(z=h.to_numpy(np.float32), x=h.columns.to_numpy(), y=h.index.to_numpy(),
                                     colorscale="Blues", zmin=0, zmax=1, showscale=c == 1,
                                     colorbar=dict(title="in mainloop", len=0.5, y=0.75),
                                     name="mainloop fraction"), row=1, col=c)
        else:
            for t in _gantt_traces(r["gantt"], sms, showlegend=c == 1):
                fig.add_trace(t, row=1, col=c)
        mid = act["time(us)"] + act["width(us)"] / 2
        fig.add_trace(go.Scatter(x=mid, y=act["tensor_active"] * 100, mode="lines", name="Tensor-Core activity (%)",
                                 line=dict(color="#2457a6"), showlegend=c == 1), row=2, col=c)
        fig.add_trace(go.Scatter(x=mid, y=act["injection(GBps)"], mode="lines", name="injection (GB/s)",
                                 line=dict(color=ISSUE_COLOR), showlegend=c == 1), row=3, col=c)
        if "queue(MiB)" in act:
            fig.add_trace(go.Scatter(x=mid, y=act["queue(MiB)"], mode="lines", name="X-Stage occupancy (MiB)",
                                     line=dict(color="#e9a03b"), showlegend=c == 1, fill="tozeroy"), row=4, col=c)
        fig.update_yaxes(title_text="SM" if c == 1 else None, row=1, col=c)
        fig.update_yaxes(title_text="TC %" if c == 1 else None, range=[0, 105], row=2, col=c)
        fig.update_yaxes(title_text="GB/s" if c == 1 else None, row=3, col=c)
        fig.update_yaxes(title_text="MiB" if c == 1 else None, row=4, col=c)
        fig.update_xaxes(title_text="time (us)", row=4, col=c)
    fig.update_layout(title=title, height=1000, legend=dict(orientation="h", y=-0.06))
    return _dedupe_legend(fig)


def window_figure(runs: dict, title: str):
    names = list(runs)
    fig = make_subplots(rows=1, cols=len(names), shared_yaxes=True,
                        subplot_titles=[f"{n}: first {len(runs[n]['gantt']):,} tiles (exact)" for n in names])
    for c, name in enumerate(names, start=1):
        g = runs[name]["gantt"]
        for t in _gantt_traces(g, int(g["sm"].max()) + 1 if len(g) else 1, showlegend=c == 1):
            fig.add_trace(t, row=1, col=c)
        fig.update_xaxes(title_text="time (us)", row=1, col=c)
    fig.update_yaxes(title_text="SM", row=1, col=1)
    fig.update_layout(title=title, height=650, legend=dict(orientation="h", y=-0.12))
    return _dedupe_legend(fig)


def timeline_page(frames: dict) -> Page:
    """``frames``: ``collect()["timeline"]`` -- {"config", "platform", "sim": {schedule: timeline_frames}, "hw": ...}."""
    page = Page("timeline", TITLE, lead=LEAD)
    sections = [("sim", f"simulated replay: {frames['config']} on {frames['platform']}")]
    if frames.get("hw"):
        sections.append(("hw", f"measured: {frames.get('hw_config', '')}"))
    for key, label in sections:
        runs = frames[key]
        page.heading(label)
        cut = [r for r in runs.values() if r["heatmap"] is not None]
        top = (f"the fraction of each time bin every SM spends in mainloops (above {len(cut[0]['gantt']):,} tiles "
               "the Gantt below shows the first window exactly)" if cut else "the exact per-tile Gantt (WebGL)")
        page.figure(timeline_figure(runs, label),
                    f"Top: {top}. Occupancy: the replay's X-Stage log (simulated) or the bytes injected, drained "
                    "at R (measured).")
        if any(r["heatmap"] is not None for r in runs.values()):
            page.figure(window_figure(runs, f"{label}: exact Gantt of the first window"))
    if not frames.get("hw"):
        page.no_data("measured MoE tile records (per-tile instrumentation of the fused kernel)",
                     "the MoE hardware runs (issue 6), which write tile records with experiment 'moe' under data/")
    for title, frame in tables(frames).items():
        page.table(frame, title)
    return page


def tables(frames: dict) -> dict:
    out = {}
    for key, label in (("sim", "simulated"), ("hw", "measured")):
        if frames.get(key):
            out[f"{label}: per-schedule summary"] = timeline_summary(frames[key])
    return out
