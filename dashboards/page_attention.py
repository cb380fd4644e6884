"""FlashAttention fused with the post-attention All-to-All (the paper's Fig. 11 and Table 3)."""

import plotly.graph_objects as go

from xstage.dashboards.html import Page

TITLE = "FlashAttention + All-to-All (Fig. 11, Table 3)"
LEAD = ("Sender-visible residual E_res = T_fused - T_FA relative to FA-only time, against the X-Stage prediction "
        "(flat, near the issue floor) and the completion-coupled counterfactual (growing with M); band: +-2 % "
        "(the paper's DVFS envelope).")
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
        yield f" (Triton, {label})", _HW_SYMBOLS[i % len(_HW_SYMBOLS)], g


FA4_COLOR = "#6a4c93"


def _fa4_groups(fa4):
    """(label suffix, rows) per FA4 run and platform: the headline run first, solid; the others open."""
    if fa4 is None or not len(fa4):
        return
    for (headline, run, platform, W), g in fa4.groupby(["headline", "run", "platform", "world_size"], sort=True):
        yield f" (FA4 {run}{', headline' if headline else ''}, {platform}, W={W})", bool(headline), g


def _fa4_best_replay(fa4, fa4_compare):
    """The replay rows of the headline FA4 run's best fused variant, per M (None when there are none)."""
    if fa4 is None or fa4_compare is None or not len(fa4) or not len(fa4_compare) or not fa4["headline"].any():
        return None
    best = fa4.loc[fa4["headline"], ["records", "M", "best_fused_is"]].rename(
        columns={"records": "record_file", "best_fused_is": "variant"})
    return fa4_compare.merge(best, on=["record_file", "M", "variant"])


def residual_figure(sim, hw, title: str, compare=None, compare_platform: str = "", fa4=None, fa4_compare=None):
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
    for suffix, solid, g in _fa4_groups(fa4):
        fig.add_trace(go.Scatter(x=g["M"], y=100 * g["E_res/T_FA"], mode="markers",
                                 name=f"measured best fused paired E_res / T_FA{suffix}",
                                 marker=dict(size=11, color=FA4_COLOR, symbol="square" if solid else "square-open")))
    head = _fa4_best_replay(fa4, fa4_compare)
    if head is not None and len(head):
        fig.add_trace(go.Scatter(x=head["M"], y=100 * head["simulated_e_res(us)"] / head["measured_fa_only(us)"],
                                 mode="markers", name="replay of the FA4 best fused variant (headline run, tile-end send)",
                                 marker=dict(size=11, color=FA4_COLOR, symbol="diamond-open", line_width=2)))
    fig.add_hrect(y0=-2, y1=2, fillcolor="#9fb8e0", opacity=0.25, line_width=0)
    fig.update_layout(title=title, xaxis_title="sequence length M (tokens)", yaxis_title="residual / T_FA (%)",
                      height=460)
    return fig


def speedup_figure(sim, hw, title: str, fa4=None):
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
    for suffix, solid, g in _fa4_groups(fa4):
        open_ = "" if solid else "-open"
        fig.add_trace(go.Scatter(x=g["M"], y=g["speedup_vs_serial_best"], mode="markers",
                                 name=f"measured, best fused over serial-best{suffix}",
                                 marker=dict(size=11, color=FA4_COLOR, symbol=f"square{open_}")))
        fig.add_trace(go.Scatter(x=g["M"], y=g["speedup_vs_best_unfused"], mode="markers",
                                 name=f"measured, best fused over the best unfused (pipelined){suffix}",
                                 marker=dict(size=11, color="#1982c4", symbol=f"triangle-down{open_}")))
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
    page = Page("attention", TITLE, lead=LEAD)
    page.figure(residual_figure(sim, hw, f"E_res(M) / T_FA: catalog replays on {frames['platform']}"
                                + (" and measurement" if hw is not None else ""),
                                frames.get("compare"), frames.get("compare_platform", ""),
                                frames.get("fa4"), frames.get("fa4_compare")),
                "Lines: the catalog's FA3/FA4 shapes replayed on the simulated platform. Markers: measured E_res, and "
                "the replay of each measured configuration on the measured platform with the measured FA time; "
                "one series per kernel family (Triton, FA4 per run) and platform.")
    page.figure(speedup_figure(sim, hw, "speedup of the fused kernel", frames.get("fa4")),
                "FA4: the fastest fused variant over Serial-best (the fastest FA + copy engine) and over the best "
                "unfused path (the pipelined FA4 + copy engine included).")
    if "tiles" in frames and len(frames["tiles"]):
        page.figure(tile_figure(frames["tiles"], "fused kernel: per-tile issue span, measured vs Q-loop replay"))
    if hw is None:
        page.no_data("measured FlashAttention + A2A kernels",
                     "bash benchmarks/gpu/attention.sh on a GPU, then commit data/attention/")
    for title, frame in tables(frames).items():
        page.table(frame, title, open_=title.startswith("Table 3"))
    return page


FA4_TABLE = ("run", "headline", "M", "fa_us", "sdpa_us", "fa_vs_sdpa", "triton_fa_us", "serial_best_us",
             "best_unfused_is", "best_unfused_us", "best_fused_is", "fused_us", "e_res_paired_us",
             "hiding_ratio_paired", "speedup_vs_serial_best", "speedup_vs_best_unfused", "fastest_fused_is",
             "fastest_fused_vs_unfused")


def tables(frames: dict) -> dict:
    sim = frames["sim"]
    cols = [c for c in ("shape", "M", "heads", "fa_us", "fused_us", "coupled_us", "serial_us", "E_res_us", "E_cc_us",
                        "hiding_ratio", "speedup_vs_serial", "M_ub_star", "model_E_cc_us") if c in sim.columns]
    out = {"Table 3 (simulated replays)": sim[cols]}
    if frames.get("hw") is not None:
        out["Table 3 (measured)"] = frames["hw"]
    if "compare" in frames:
        out["measured vs simulated per M"] = frames["compare"]
    if frames.get("fa4") is not None and len(frames["fa4"]):
        cols = [c for c in FA4_TABLE if c in frames["fa4"].columns]
        out["FA4 as the FA core (measured, per run)"] = frames["fa4"][cols]
    if frames.get("fa4_compare") is not None and len(frames["fa4_compare"]):
        out["FA4 fused variants: measured vs the Q-loop replay"] = frames["fa4_compare"]
    if "tiles" in frames and len(frames["tiles"]):
        out["per-tile instrumentation vs the Q-loop replay, per M"] = frames["tiles"]
    return out
