"""Tile records (fused kernels and their replay): spans, stalls, and the Table 2 stall test.

Tile records follow ``xstage.records.COLUMNS["tile"]``. The remote-store span of a tile is
``issue_end - issue_start`` (sender-visible T_RS), its mainloop ``mainloop_end - mainloop_start``.

Table 2 (the per-tile stall model, Eq. 15): for each L2 tile i of an SM, the prediction is
``[T_RS(i) - T_mma(i+1)]_+`` -- its span minus the mainloop of its successor on the same SM (the
one cover window a double-buffered accumulator gives). The measurement is the MMA's wait for a
staging slot at the entry of tile ``i + S`` (S staging slots: that tile needs the slot tile i's
epilogue holds).
"""

import numpy as np
import pandas as pd

from xstage.errors import InputError

GROUP = ["source", "platform", "experiment", "config", "schedule"]


def with_spans(tiles: pd.DataFrame) -> pd.DataFrame:
    """Add ``span(us)`` and ``mainloop(us)`` (new frame)."""
    out = tiles.copy()
    out["span(us)"] = out["issue_end(us)"] - out["issue_start(us)"]
    out["mainloop(us)"] = out["mainloop_end(us)"] - out["mainloop_start(us)"]
    out["kind"] = out["kind"].astype(str)
    return out


def span_summary(tiles: pd.DataFrame) -> pd.DataFrame:
    """Per (source, platform, experiment, config, schedule, kind) of remote tiles: counts, span
    median / p10 / p90, mainloop median, MMA stall median, and the kernel's makespan."""
    t = with_spans(tiles)
    makespan = t.groupby(GROUP, sort=True, observed=True)["issue_end(us)"].max().rename("makespan(us)")
    remote = t[t["bytes_remote"] > 0]
    if remote.empty:
        return pd.DataFrame(columns=[*GROUP, "kind", "tiles", "span_median(us)", "span_p10(us)", "span_p90(us)",
                                     "mainloop_median(us)", "mma_stall_median(us)", "makespan(us)"])
    g = remote.groupby([*GROUP, "kind"], sort=True, observed=True)
    out = pd.DataFrame({
        "tiles": g.size(),
        "span_median(us)": g["span(us)"].median(),
        "span_p10(us)": g["span(us)"].quantile(0.1),
        "span_p90(us)": g["span(us)"].quantile(0.9),
        "mainloop_median(us)": g["mainloop(us)"].median(),
        "mma_stall_median(us)": g["mma_stall(us)"].median(),
    }).reset_index()
    return out.merge(makespan.reset_index(), on=GROUP, how="left")


def stall_pairs(tiles: pd.DataFrame, staging_slots: int = 2) -> pd.DataFrame:
    """Per L2 tile with a successor and an (i + S)-th tile: span, successor mainloop, predicted and
    measured stall (Eq. 15). Tiles without an MMA stall measurement (NaN) are left out."""
    t = with_spans(tiles).sort_values([*GROUP, "sm", "seq"], kind="stable")
    same = [*GROUP, "sm"]
    nxt_ml = t.groupby(same, sort=False, observed=True)["mainloop(us)"].shift(-1)
    later_stall = t.groupby(same, sort=False, observed=True)["mma_stall(us)"].shift(-max(int(staging_slots), 1))
    t = t.assign(**{"cover(us)": nxt_ml, "measured_stall(us)": later_stall})
    has_both = t["cover(us)"].notna() & t["measured_stall(us)"].notna()
    l2 = t[(t["kind"] == "L2") & (t["bytes_remote"] > 0) & has_both].copy()
    l2["predicted_stall(us)"] = np.maximum(l2["span(us)"] - l2["cover(us)"], 0.0)
    return l2[[*GROUP, "sm", "seq", "span(us)", "mainloop(us)", "cover(us)", "predicted_stall(us)",
               "measured_stall(us)"]]


def stall_table(tiles: pd.DataFrame, staging_slots: int = 2) -> pd.DataFrame:
    """The paper's Table 2: per (source, config), wave / interleaved L2 span medians, L2 / L1 mainloop
    medians, and per-tile stall prediction / measurement medians for each schedule."""
    t = with_spans(tiles)
    pairs = stall_pairs(tiles, staging_slots)
    rows = []
    keys = ["source", "platform", "config"]
    for key, grp in t.groupby(keys, sort=True, observed=True):
        row = dict(zip(keys, key))
        for sched, label in (("expert_wave", "wave"), ("interleaved", "int")):
            s = grp[grp["schedule"] == sched]
            remote = s[(s["kind"] == "L2") & (s["bytes_remote"] > 0)]
            row[f"span_{label}(us)"] = remote["span(us)"].median() if len(remote) else np.nan
            p = pairs[(pairs["schedule"] == sched) & (pairs["config"] == key[2]) & (pairs["source"] == key[0])]
            row[f"stall_pred_{label}(us)"] = p["predicted_stall(us)"].median() if len(p) else np.nan
            row[f"stall_meas_{label}(us)"] = p["measured_stall(us)"].median() if len(p) else np.nan
        ml = grp[grp["schedule"] == "expert_wave"] if (grp["schedule"] == "expert_wave").any() else grp
        row["mainloop_L2(us)"] = ml.loc[ml["kind"] == "L2", "mainloop(us)"].median()
        row["mainloop_L1(us)"] = ml.loc[ml["kind"] == "L1", "mainloop(us)"].median()
        rows.append(row)
    return pd.DataFrame(rows)


def compare_tile_summaries(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    """Measured and simulated ``span_summary`` rows side by side on (experiment, config, schedule, kind)."""
    keys = ["experiment", "config", "schedule", "kind"]
    values = ["tiles", "span_median(us)", "span_p90(us)", "mainloop_median(us)", "mma_stall_median(us)",
              "makespan(us)"]
    m = span_summary(measured)[keys + values].rename(columns={v: f"measured_{v}" for v in values})
    s = span_summary(simulated)[keys + values].rename(columns={v: f"simulated_{v}" for v in values})
    out = m.merge(s, on=keys, how="inner")
    if out.empty:
        raise InputError("tile records", "measured and simulated", "share no (experiment, config, schedule, kind)")
    return out[keys + [f"{w}_{v}" for v in values for w in ("measured", "simulated")]]


def span_quantiles(tiles: pd.DataFrame, kind: str = "L2") -> pd.DataFrame:
    """Distribution of the remote-store span of ``kind`` tiles per (source, config, schedule):
    n, p5, q1, median, q3, p95, max (the boxes of Fig. 10, precomputed)."""
    t = with_spans(tiles)
    t = t[(t["kind"] == kind) & (t["bytes_remote"] > 0)]
    g = t.groupby(["source", "config", "schedule"], sort=True, observed=True)["span(us)"]
    out = pd.DataFrame({"tiles": g.size(), "p5(us)": g.quantile(0.05), "q1(us)": g.quantile(0.25),
                        "median(us)": g.median(), "q3(us)": g.quantile(0.75), "p95(us)": g.quantile(0.95),
                        "max(us)": g.max()})
    return out.reset_index()
