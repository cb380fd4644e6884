"""Burst records and calibration points, measured and simulated, side by side.

A burst experiment is identified by (platform, target, mode, producers, bytes_per_producer, gap).
``summarize_bursts`` reduces rows to one line per experiment: the median sender-visible issue time
and start-to-start period over the steady-state half of the bursts (the same rule as
``BurstResult.steady``). ``compare_bursts`` re-runs every measured experiment on the simulator with
the calibrated platform -- same K, B, G, mode and number of bursts -- and puts the measured,
simulated and analytic-model values in one frame.

Calibration folders (``xstage calibrate``) hold ``points.parquet``: one row per measured configuration
with the aggregate figures (T_iss = max(end) - min(start) over all producers, the period, the measured
gap). Those, not per-producer medians of the sampled ``bursts.parquet``, are the measured side there:
on a shared link producers are served unfairly, so a per-producer median misstates the burst.
``compare_points`` re-simulates every point; the burst-record path stays for plain burst records
(e.g. ``xstage sim bursts --out``).
"""

import numpy as np
import pandas as pd

from xstage.compare.metrics import add_relative_errors, frame_error_summary
from xstage.compare.platforms import find_platform
from xstage.errors import InputError
from xstage.sim.bursts import MODES, BurstConfig, simulate_bursts
from xstage.sim.platform import Platform

KEYS = ["platform", "target", "mode", "producers", "bytes_per_producer", "gap(us)"]
QUANTITIES = ["issue(us)", "period(us)"]


def summarize_bursts(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per experiment (``source`` + KEYS, + ``gap_kind`` when present): steady-state medians of
    issue and period. Steady rows, as in a run's summary (``xstage.sim.burst_summary``): the second half
    of periodic bursts, all isolated bursts but the first. With a ``trial`` column: medians per trial,
    then the median over trials."""
    keys = ["source", *KEYS] + (["gap_kind"] if "gap_kind" in frame.columns else [])
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "bursts", *QUANTITIES])
    n = frame.groupby(keys, sort=True, dropna=False)["burst"].transform("max") + 1
    isolated = frame["mode"] == "isolated"
    steady = frame[(~isolated & (frame["burst"] >= n // 2)) | (isolated & ((frame["burst"] >= 1) | (n == 1)))]
    trial = ["trial"] if "trial" in frame.columns else []
    per = steady.groupby(keys + trial, sort=True, dropna=False).agg(
        **{"issue(us)": ("issue(us)", "median"), "period(us)": ("period(us)", "median")}).reset_index()
    out = per.groupby(keys, sort=True, dropna=False)[QUANTITIES].median().reset_index()
    counts = frame.groupby(keys, sort=True, dropna=False)["burst"].max().rename("bursts") + 1
    out = out.merge(counts.reset_index(), on=keys, how="left")
    return out[[*keys, "bursts", *QUANTITIES]]


def platform_for(measured: pd.DataFrame, platform: Platform | str | None = None, data_dir=None) -> Platform:
    """The platform to simulate with: the one given, else the records' ``platform`` name."""
    if isinstance(platform, Platform):
        return platform
    if platform is not None:
        return find_platform(platform, data_dir)
    names = sorted(set(measured["platform"].astype(str)))
    if len(names) != 1:
        raise InputError("records platform", names, "must name exactly one platform (or pass --platform)")
    return find_platform(names[0], data_dir)


def simulate_experiment(platform: Platform, mode: str, producers: int, bytes_per_producer: int,
                        gap_us: float, bursts: int) -> dict:
    """Simulate one burst experiment; steady-state medians and the model's prediction."""
    if mode not in MODES:
        raise InputError("mode", mode, f"must be one of {', '.join(MODES)}")
    config = BurstConfig(int(producers), int(bytes_per_producer), float(gap_us), bursts=max(int(bursts), 2),
                         mode=mode)
    result = simulate_bursts(platform, config, record_occupancy=False)
    s = result.summary(platform)
    return {"simulated_issue(us)": s["T_iss_us"], "simulated_period(us)": s["period_us"],
            "model_issue(us)": s["model_T_iss_us"], "model_period(us)": s["model_period_us"]}


def compare_bursts(measured: pd.DataFrame, platform: Platform | str | None = None, *,
                   max_bursts: int = 400, progress=None) -> pd.DataFrame:
    """Measured burst records -> one row per experiment with measured / simulated / model columns.

    ``max_bursts`` caps the simulated bursts per experiment (the measured count is used when smaller).
    ``progress`` is an optional callable wrapping an iterable (e.g. tqdm).
    """
    if measured.empty:
        raise InputError("burst records", "empty", "must hold at least one row")
    plat = platform_for(measured, platform)
    summary = summarize_bursts(measured[measured["source"] != "sim"] if (measured["source"] != "sim").any()
                               else measured)
    rows = []
    items = summary.to_dict("records")
    for r in (progress(items) if progress else items):
        K, B, G = int(r["producers"]), int(r["bytes_per_producer"]), float(r["gap(us)"])
        # measured modes the simulator has no barrier for (free-running, barrier-aligned) run periodic
        sim = simulate_experiment(plat, SIM_MODE.get(r["mode"], r["mode"]), K, B, G,
                                  min(int(r["bursts"]), max_bursts))
        rows.append({"platform": r["platform"], "simulated_platform": plat.name, "target": r["target"],
                     "mode": r["mode"], "gap_kind": r.get("gap_kind", "spin"), "producers": K, "bytes_per_producer": B, "gap(us)": G,
                     "bursts": int(r["bursts"]),
                     "measured_issue(us)": r["issue(us)"], "simulated_issue(us)": sim["simulated_issue(us)"],
                     "model_issue(us)": sim["model_issue(us)"],
                     "measured_period(us)": r["period(us)"], "simulated_period(us)": sim["simulated_period(us)"],
                     "model_period(us)": sim["model_period(us)"]})
    out = pd.DataFrame(rows)
    # an isolated burst has no steady-state period: the measured one includes the drain wait
    isolated = out["mode"] == "isolated"
    out.loc[isolated, ["measured_period(us)", "simulated_period(us)", "model_period(us)"]] = np.nan
    return add_relative_errors(out, QUANTITIES)


MODE_ORDER = ("periodic", "aligned", "free", "isolated", "local", "coupled")


def burst_error_summary(frame: pd.DataFrame) -> dict:
    """Median / p90 relative error of issue time and period over a ``compare_bursts`` or ``compare_points``
    frame: over all rows, and per measured mode (``periodic_…``, ``free_…``, ``isolated_…``) when there
    are several (isolated points have no period metrics)."""
    summary = frame_error_summary(frame, QUANTITIES)
    summary["n_experiments"] = int(len(frame))
    if "mode" in frame.columns and frame["mode"].nunique() > 1:
        for mode in [m for m in MODE_ORDER if m in set(frame["mode"])] + \
                sorted(set(frame["mode"]) - set(MODE_ORDER)):
            part = frame[frame["mode"] == mode]
            for q in QUANTITIES:
                base = q.split("(")[0]
                part_summary = frame_error_summary(part, [q])
                if part_summary[f"{base}_n_points"]:
                    summary.update({f"{mode}_{k}": v for k, v in part_summary.items()})
    return summary


# --- calibration points (points.parquet): aggregate figures per measured configuration -------------

# measured mode -> simulator mode: lockstep ("periodic"), barrier-aligned and free-running bursts are all
# the simulator's periodic mode (its producers start together and stay aligned); isolated is isolated
SIM_MODE = {"periodic": "periodic", "aligned": "periodic", "free": "periodic", "isolated": "isolated",
            "local": "local"}
POINT_BURSTS = {"periodic": 60, "isolated": 6, "local": 4}


def load_calibration_points(path) -> pd.DataFrame:
    """points.parquet (point records) with a ``platform`` column: the meta's platform name, else the
    name of the folder holding the file."""
    from pathlib import Path

    from xstage.records import load_records

    path = Path(path)
    frame, meta = load_records(path, "point")      # checks the point columns
    name = meta.get("platform") or (meta.get("config") or {}).get("name") or path.parent.name
    return frame.assign(platform=str(name)) if "platform" not in frame.columns else frame


def _model_point(platform: Platform, mode: str, K: int, B: int, G: float) -> tuple[float, float]:
    """The full Burst-Gap model (``hw.calib_fit.model_check``): periodic T_iss = max(T_iss0, V/R - G, (V-Q)/R),
    period T_iss + G; isolated Eq. 7 (no period); local T_iss0."""
    from xstage.sim.fit import periodic_issue_time_us
    from xstage.sim import model

    t0, V, R, Q = platform.issue_time0_us(K, B), K * B, platform.drain_rate_Bpus, platform.capacity_bytes(K)
    if mode == "isolated":
        return model.isolated_issue_time_us(t0, V, R, Q), np.nan
    if mode == "local":
        return t0, t0 + G
    t = periodic_issue_time_us(G, t0, V, R, Q)
    return t, t + G


def compare_points(points: pd.DataFrame, platform: Platform | str | None = None, *, fast: bool = False,
                   progress=None) -> pd.DataFrame:
    """Calibration points (aggregate T_iss = max(end) - min(start) over producers, and period, per
    configuration) -> one row per point with measured / simulated / model columns.

    Each point is re-simulated with the measured producer-side gap (next start minus issue end, which in
    lockstep mode includes the barrier wait) in the simulator mode ``SIM_MODE[mode]``, as
    ``hw.calib_fit.model_check`` evaluates the model. ``fast``: fewer simulated bursts (16 periodic)."""
    if points.empty:
        raise InputError("calibration points", "empty", "must hold at least one row")
    plat = platform_for(points, platform) if "platform" in points.columns or platform is not None else None
    if plat is None:
        raise InputError("calibration points", "no platform", "need a platform column or --platform")
    pts = points.dropna(subset=["T_iss(us)"])
    unknown = sorted(set(pts["mode"]) - set(SIM_MODE))
    if unknown:
        raise InputError("points mode", unknown, f"must be one of {', '.join(SIM_MODE)}")
    rows = []
    items = pts.to_dict("records")
    for r in (progress(items) if progress else items):
        K, B = int(r["producers"]), int(r["bytes_per_producer"])
        G = float(r["gap_measured(us)"]) if np.isfinite(r["gap_measured(us)"]) else float(r["gap(us)"])
        sim_mode = SIM_MODE[r["mode"]]
        # an isolated burst starts from a drained path: its measured "gap" is the drain wait
        G = float(r["gap(us)"]) if sim_mode == "isolated" else max(G, 0.0)
        n = 16 if fast and sim_mode == "periodic" else POINT_BURSTS[sim_mode]
        sim = simulate_experiment(plat, sim_mode, K, B, G, n)
        m_issue, m_period = _model_point(plat, sim_mode, K, B, G)
        rows.append({"platform": r.get("platform", plat.name), "simulated_platform": plat.name,
                     "target": r.get("target", plat.target), "phase": r["phase"], "mode": r["mode"],
                     "simulated_mode": sim_mode, "gap_kind": r.get("gap_kind", "spin"), "producers": K,
                     "bytes_per_producer": B, "gap(us)": float(r["gap(us)"]), "gap_measured(us)": G,
                     "measured_issue(us)": float(r["T_iss(us)"]), "simulated_issue(us)": sim["simulated_issue(us)"],
                     "model_issue(us)": m_issue,
                     "measured_period(us)": float(r["period(us)"]), "simulated_period(us)": sim["simulated_period(us)"],
                     "model_period(us)": m_period})
    out = pd.DataFrame(rows)
    isolated = out["mode"] == "isolated"
    out.loc[isolated, ["measured_period(us)", "simulated_period(us)", "model_period(us)"]] = np.nan
    return add_relative_errors(out, QUANTITIES)
