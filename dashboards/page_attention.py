"""FlashAttention fused with the post-attention All-to-All (the paper's Fig. 11 and Table 3)."""

import plotly.graph_objects as go

from xstage.dashboards.html import Page

TITLE = "FlashAttention + All-to-All (Fig. 11, Table 3)"
_SHAPE_COLORS = {"fa3": "#2a9d8f", "fa4": "#2457a6"}


_HW_SYMBOLS = ("diamond", "circle", "triangle-up", "star")


def _hw_groups(hw):
    """(label suffix, marker symbol, rows) per measured platform and world size: one GPU over PCIe and
    W GPUs over NVLink are separate series."""
    keys = [k for k in ("platform", "world_size") if k in hw.columns]
    if not keys:
        yield "", _HW_SYMBOLS[0], hw
        return
    for i, (key, g) in enumerate(hw.groupby(keys, sort=True)):
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"W={v}" if k == "world_size" else str(v) for k, v in zip(keys, key))
        yield f" ({label})", _HW_SYMBOLS[i % len(_HW_SYMBOLS)], g


def residual_figure(sim, hw, title: str, compare=None, compare_platform: str = ""):
    fig = go.Figure()
    for shape, g in sim.groupby("shape", sort=False):
        c = _SHAPE_COLORS.get(shape, "#444")
        fig.add_trace(go.Scatter(x=g["M"], y=100 * g["E_res/T_FA"], mode="lines+markers", line_color=c,
                                 name=f"{shape}: X-Stage replay E_res / T_FA"))
        fig.add_trace(go.Scatter(x=g["M"], y=100 * g["E_cc/T_FA"], mode="lines+markers", line=dict(color=c, dash="dash"),
                                 name=f"{shape}: completion-coupled replay"))
        fig.add_trace(go.Scatter(x=g["M"], y=100 * g["model_E_cc_us"] / g["fa_us"], mode="lines",
                                 line=dict(color=c, dash="dot"), name=f"{shape}: Eq. 17 x N_t (model)"))
    if hw is not None and len(hw):
        for suffix, symbol, g in _hw_groups(hw):
            fig.add_trace(go.Scatter(x=g["M"], y=100 * g["E_res/T_FA"], mode="markers",
                                     name=f"measured E_res / T_FA{suffix}",
                                     marker=dict(size=11, color="#d1495b", symbol=symbol)))
    if compare is not None and len(compare):
        fa = compare["measured_fa_only(us)"]
        fig.add_trace(go.Scatter(x=compare["M"], y=100 * compare["simulated_e_res(us)"] / fa, mode="markers",
                                 name=f"replay of the measured configuration ({compare_platform})",
                                 marker=dict(size=11, color="#d1495b", symbol="diamond-open", line_width=2)))
        fig.add_trace(go.Scatter(x=compare["M"], y=100 * compare["simulated_e_cc(us)"] / fa, mode="markers",
                                 name=f"its completion-coupled counterfactual ({compare_platform})",
                                 marker=dict(size=11, color="#e9a03b", symbol="x-open", line_width=2)))
    fig.add_hrect(y0=-2, y1=2, fillcolor="#9fb8e0", opacity=0.25, line_width=0)
    fig.update_layout(title=title, xaxis_title="sequence length M (tokens)", yaxis_title="residual / T_FA (%)",
                      height=460)
    return fig


def speedup_figure(sim, hw, title: str):
    fig = go.Figure()
    for shape, g in sim.groupby("shape", sort=False):
        fig.add_trace(go.Scatter(x=g["M"], y=g["speedup_vs_serial"], mode="lines+markers",
                                 line_color=_SHAPE_COLORS.get(shape, "#444"), name=f"{shape}: replay, fused over serial"))
    if hw is not None and len(hw):
        for suffix, symbol, g in _hw_groups(hw):
            fig.add_trace(go.Scatter(x=g["M"], y=g["speedup_vs_serial"], mode="markers",
                                     name=f"measured, over serial{suffix}",
                                     marker=dict(size=11, color="#d1495b", symbol=symbol)))
            fig.add_trace(go.Scatter(x=g["M"], y=g["speedup_vs_serial_best"], mode="markers",
                                     name=f"measured, over serial-best{suffix}",
                                     marker=dict(size=11, color="#e9a03b", symbol=f"{symbol}-open")))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#444")
    fig.update_layout(title=title, xaxis_title="sequence length M (tokens)", yaxis_title="speedup", height=420)
    return fig


def tile_figure(t, title: str):
    fig = go.Figure()
    for who, color in (("measured", "#d1495b"), ("simulated", "#2457a6")):
        fig.add_trace(go.Bar(x=t["M"].astype(str), y=t[f"{who}_span_median(us)"], name=f"{who} median",
                             marker_color=color,
                             error_y=dict(type="data", symmetric=False, array=t[f"{who}_span_p90(us)"]
                                          - t[f"{who}_span_median(us)"], arrayminus=[0] * len(t))))
    fig.update_layout(title=title, barmode="group", xaxis_title="M", yaxis_title="issue span (us; whisker: p90)",
                      height=400)
    return fig


def attention_page(frames: dict) -> Page:
    """``frames``: ``collect()["attention"]`` -- sim (catalog replays), [hw per-M summary], [compare]."""
    sim, hw = frames["sim"], frames.get("hw")
    page = Page("attention", TITLE,
                lead="Sender-visible residual E_res = T_fused - T_FA relative to FA-only time, against the X-Stage "
                     "prediction (flat, near the issue floor) and the completion-coupled counterfactual (growing "
                     "with M); band: +-2 % (the paper's DVFS envelope).")
    page.figure(residual_figure(sim, hw, f"E_res(M) / T_FA: catalog replays on {frames['platform']}"
                                + (" and measurement" if hw is not None else ""),
                                frames.get("compare"), frames.get("compare_platform", "")),
                "Lines: the catalog's FA3/FA4 shapes replayed on the simulated platform. Markers: measured E_res, and "
                "the replay of each measured configuration on the measured platform with the measured FA time.")
    page.figure(speedup_figure(sim, hw, "speedup of the fused kernel"))
    if "tiles" in frames and len(frames["tiles"]):
        page.figure(tile_figure(frames["tiles"], "fused kernel: per-tile issue span, measured vs Q-loop replay"))
    if hw is None:
        page.no_data("measured FlashAttention + A2A kernels",
                     "bash benchmarks/gpu/attention.sh on a GPU, then commit data/attention/")
    for title, frame in tables(frames).items():
        page.table(frame, title, open_=title.startswith("Table 3"))
    return page


def tables(frames: dict) -> dict:
    sim = frames["sim"]
    cols = [c for c in ("shape", "M", "heads", "fa_us", "fused_us", "coupled_us", "serial_us", "E_res_us", "E_cc_us",
                        "hiding_ratio", "speedup_vs_serial", "M_ub_star", "model_E_cc_us") if c in sim.columns]
    out = {"Table 3 (simulated replays)": sim[cols]}
    if frames.get("hw") is not None:
        out["Table 3 (measured)"] = frames["hw"]
    if "compare" in frames:
        out["measured vs simulated per M"] = frames["compare"]
    if "tiles" in frames and len(frames["tiles"]):
        out["per-tile instrumentation vs the Q-loop replay, per M"] = frames["tiles"]
    return out
