"""Aggregate figures of one burst configuration from its burst records (``summarize_run``), measured by the
microbenchmark or simulated (``xstage.sim.calib_runner``): aggregate issue time T_iss and period of the
V = K * B burst, per trial (lockstep: max end - min start per burst; free-running: a window where every
producer is active), then the median over trials. The calibration sweep needs them between phases (a
phase's gaps are fractions of the zero-gap period measured in the phase before); they are the points the
fit (``xstage.sim.platform_fit``) reads. Pure numpy/pandas.
"""

import numpy as np
import pandas as pd


def _aggregate_bursts(t: pd.DataFrame) -> dict:
    """Lockstep / isolated trial: burst b's aggregate issue time is max(end) - min(start) over the
    producers (all start after the same barrier); its period is min(start) to the next min(start).
    Steady bursts: the second half (periodic) or all but the first (isolated)."""
    n = int(t["burst"].max()) + 1
    end = t["start(us)"] + t["issue(us)"]
    g = t.assign(end=end, fenced=t["start(us)"] + t["fence(us)"]).groupby("burst")
    start_b, end_b, fence_b = g["start(us)"].min(), g["end"].max(), g["fenced"].max()
    issue_b = end_b - start_b
    period_b = start_b.shift(-1) - start_b
    keep = start_b.index >= (1 if t["mode"].iloc[0] == "isolated" else n // 2)
    issue, period = issue_b[keep], period_b[keep].dropna()
    return {"issue": float(issue.median()), "period": float(period.median()) if len(period) else np.nan,
            "gap": float((period_b - issue_b)[keep].median()), "fence": float((fence_b - start_b)[keep].median()),
            "producer_issue": float(t.loc[t["burst"].isin(start_b.index[keep]), "issue(us)"].median())}


def _free_window(t: pd.DataFrame) -> dict:
    """Free-running trial: aggregate figures over the window [T/2, T], T = the earliest time a
    producer starts its last burst (all producers are active in it). Each producer's burst rate in
    the window is (bursts - 1) / (last start - first start); period = K / sum of the rates
    (= V / aggregate rate); T_iss = mean issue time of the bursts in the window."""
    T = float(t.groupby("producer")["start(us)"].max().min())
    w = t[(t["start(us)"] >= T / 2) & (t["start(us)"] <= T)]
    if len(w) == 0 or T <= 0:
        return {"issue": np.nan, "period": np.nan, "gap": np.nan, "fence": np.nan, "producer_issue": np.nan}
    rates = []
    for _, q in w.groupby("producer"):
        c, span = len(q), float(q["start(us)"].max() - q["start(us)"].min())
        rates.append((c - 1) / span if c >= 2 and span > 0 else c / (T / 2))
    K = int(t["producer"].nunique())
    rates += [0.0] * (K - len(rates))
    period = K / sum(rates) if sum(rates) > 0 else np.nan
    issue = float(w["issue(us)"].mean())
    return {"issue": issue, "period": period, "gap": period - issue, "fence": np.nan,
            "producer_issue": float(w["issue(us)"].median())}


def summarize_run(frame: pd.DataFrame) -> dict:
    """Aggregate burst figures of one configuration, per trial, then the median over trials.

    The columns of a point record (``xstage.records.point``): T_iss(us) / period(us) describe the
    aggregate burst of V = K * B bytes (see `_aggregate_bursts`, `_free_window`); T_iss_producer(us) is
    the median single-producer issue time, for reference.
    """
    for col in ("fence(us)", "kernel(us)"):
        if col not in frame:
            frame = frame.assign(**{col: np.nan})
    rows = []
    for _, t in frame.groupby("trial"):
        row = _free_window(t) if t["mode"].iloc[0] == "free" else _aggregate_bursts(t)
        nbytes = float(t["bytes_per_producer"].iloc[0]) * len(t)   # every burst of every producer
        row["kernel_GBps"] = nbytes / float(t["kernel(us)"].iloc[0]) / 1e3
        rows.append(row)
    per_trial = pd.DataFrame(rows)
    return {"T_iss(us)": float(per_trial["issue"].median()), "period(us)": float(per_trial["period"].median()),
            "gap_measured(us)": float(per_trial["gap"].median()), "fence(us)": float(per_trial["fence"].median()),
            "T_iss_producer(us)": float(per_trial["producer_issue"].median()),
            "kernel(GBps)": float(per_trial["kernel_GBps"].median()),   # all bytes / CUDA-event kernel time
            "T_iss_spread": float(per_trial["issue"].max() / per_trial["issue"].min() - 1.0),
            "trials": int(len(per_trial))}
