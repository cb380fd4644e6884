"""Calibration page: the paper's Fig. 3 a-d for one platform, measured points over model curves."""

import plotly.graph_objects as go

from xstage.dashboards.html import Page
from xstage.dashboards.style import COLORS, SERIES_STYLE, fmt_bytes

TITLE = "Calibration (Fig. 3 a-d)"

# measured series beyond the shared ones: FMA gap, free-running and barrier-aligned bursts (points records)
STYLE = {**SERIES_STYLE,
         "hw fma": dict(mode="markers", marker_symbol="diamond", marker_size=9),
         "hw free": dict(mode="markers", marker_symbol="triangle-up", marker_size=8, opacity=0.75),
         "hw aligned": dict(mode="markers", marker_symbol="square", marker_size=7, opacity=0.75)}
HW_SERIES = ["hw", "hw fma", "hw free", "hw aligned", "hw local"]


def _config_label(k, b) -> str:
    return f"K={int(k)}, B={fmt_bytes(b)}"


def _gap_figure(frame, quantity: str, title: str):
    fig = go.Figure()
    configs = frame[["producers", "bytes_per_producer"]].drop_duplicates().itertuples(index=False)
    series = ["model", "coupled model", "model local", "sim", *HW_SERIES] if quantity == "period(us)" \
        else ["model", "model local", "sim", *HW_SERIES]
    for i, (k, b) in enumerate(configs):
        color = COLORS[i % len(COLORS)]
        sel = frame[(frame["producers"] == k) & (frame["bytes_per_producer"] == b)]
        for s in series:
            pts = sel[sel["series"] == s].dropna(subset=[quantity]).sort_values("gap(us)")
            if pts.empty:
                continue
            fig.add_trace(go.Scatter(x=pts["gap(us)"], y=pts[quantity], name=f"{s}: {_config_label(k, b)}",
                                     legendgroup=f"{k}-{b}", line=dict(color=color), marker=dict(color=color),
                                     **STYLE[s]))
    fig.update_layout(title=title, xaxis_title="producer-side gap G (us)", yaxis_title=quantity,
                      height=460, legend=dict(font=dict(size=10)))
    return fig


def _knee_figure(frame):
    fig = go.Figure()
    for i, k in enumerate(sorted(frame["producers"].unique())):
        color = COLORS[i % len(COLORS)]
        for s in ("model", "sim", "hw"):
            pts = frame[(frame["producers"] == k) & (frame["series"] == s)].sort_values("volume(MiB)")
            if pts.empty:
                continue
            fig.add_trace(go.Scatter(x=pts["volume(MiB)"], y=pts["issue(us)"], name=f"{s}: K={int(k)}",
                                     legendgroup=str(k), line=dict(color=color), marker=dict(color=color),
                                     **STYLE[s]))
    fig.update_layout(title="(c) isolated-burst issue time vs aggregate volume: the capacity knee",
                      xaxis_title="aggregate burst volume V = K B (MiB)", yaxis_title="isolated issue time (us)",
                      xaxis_type="log", yaxis_type="log", height=460)
    return fig


def _drain_figure(frame, params):
    fig = go.Figure()
    line = frame[frame["series"] == "model"].sort_values("volume(MiB)")
    fig.add_trace(go.Scatter(x=line["volume(MiB)"], y=line["period(us)"], name="model: V / R",
                             line=dict(color="#444"), **SERIES_STYLE["model"]))
    for s in ("sim", *HW_SERIES):
        for i, k in enumerate(sorted(frame.loc[frame["series"] == s, "producers"].unique())):
            pts = frame[(frame["series"] == s) & (frame["producers"] == k)]
            fig.add_trace(go.Scatter(x=pts["volume(MiB)"], y=pts["period(us)"], name=f"{s}: K={int(k)}",
                                     marker=dict(color=COLORS[i % len(COLORS)]), **STYLE[s]))
    fig.update_layout(title=f"(d) zero-gap steady-state period vs volume: R = {params['drain_rate_GBps']:.4g} GB/s",
                      xaxis_title="aggregate burst volume V (MiB)", yaxis_title="steady-state period (us)", height=460)
    return fig


def calibration_page(frames: dict, platform: str, *, calibrate_hint: str | None = None) -> Page:
    """``frames`` from ``xstage.compare.calibration.calibration_frames``."""
    page = Page(f"calibration-{platform}", f"{TITLE}: {platform}",
                lead="Sender-visible issue time and burst period of K producers that each store B bytes and "
                     "then compute for a gap G. Lines: the Burst-Gap model on the platform's (T_iss0, R, Q); "
                     "open markers: the simpy simulator; filled markers: measured. "
                     f"Measured source: {frames['params'].iloc[0].get('hw source', 'burst records')}. "
                     "From a calibration folder the measured figures are the aggregate ones of points.parquet "
                     "(T_iss = max(end) - min(start) over all producers), placed at the measured gap G (next "
                     "start minus issue end; in lockstep mode it includes the barrier wait), and the simulator "
                     "is re-run at each measured point. Markers: circles lockstep periodic, diamonds FMA gap, "
                     "triangles free-running (no per-burst barrier), squares barrier-aligned.")
    params = frames["params"].iloc[0]
    if "compare" not in frames:
        page.no_data(f"measured burst records of platform {platform}",
                     calibrate_hint or f"xstage calibrate --target host --out data/calibration/{platform}")
    page.figure(_gap_figure(frames["gap_sweep"], "issue(us)",
                            "(a) issue time vs gap: T_iss = max(T_iss0, V/R - G, (V - Q)/R)"),
                "Requests left by one burst lengthen the next issue until G reaches G* = V/R - T_iss0; a burst "
                "larger than Q + R T_iss0 waits for the drain even from an empty X-Stage (the (V - Q)/R floor). "
                "The local-memory control (dotted) stays at T_iss0.")
    page.figure(_gap_figure(frame=frames["gap_sweep"], quantity="period(us)",
                            title="(b) period vs gap: the max law max(T_iss0 + G, V/R), not the coupled sum G + V/R"),
                "Dashed: the completion-coupled counterfactual G + V/R.")
    page.figure(_knee_figure(frames["knee"]),
                "T_iss^iso = max(T_iss0, (V - Q(K)) / R): flat until the outstanding volume exceeds Q(K).")
    page.figure(_drain_figure(frames["drain"], params),
                "Different K/B splits of the same volume fall on one line V / R.")
    for title, frame in tables(frames).items():
        page.table(frame, title, open_=title.startswith("platform"))
    return page


def tables(frames: dict) -> dict:
    """The tables behind the page (also printed by ``xstage report``)."""
    out = {"platform parameters and drain-rate fits": frames["params"]}
    if "compare" in frames:
        out["measured vs simulated vs model, per burst experiment"] = frames["compare"]
    out["(a, b) gap sweep: simulated and measured points"] = \
        frames["gap_sweep"][frames["gap_sweep"]["series"].isin(["sim", *HW_SERIES])]
    out["(c) isolated knee: simulated and measured points"] = \
        frames["knee"][frames["knee"]["series"].isin(["sim", "hw"])]
    out["(d) zero-gap period: simulated and measured points"] = \
        frames["drain"][frames["drain"]["series"].isin(["sim", *HW_SERIES])]
    return out
