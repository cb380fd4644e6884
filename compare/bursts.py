"""Burst records, measured and simulated, side by side.

A burst experiment is identified by (platform, target, mode, producers, bytes_per_producer, gap).
``summarize_bursts`` reduces rows to one line per experiment: the median sender-visible issue time
and start-to-start period over the steady-state half of the bursts (the same rule as
``BurstResult.steady``). ``compare_bursts`` re-runs every measured experiment on the simulator with
the calibrated platform -- same K, B, G, mode and number of bursts -- and puts the measured,
simulated and analytic-model values in one frame.
"""

import numpy as np
import pandas as pd

from xstage.compare.metrics import add_relative_errors, frame_error_summary
from xstage.errors import InputError
from xstage.sim.bursts import MODES, BurstConfig, simulate_bursts
from xstage.sim.platform import Platform, load_platform

KEYS = ["platform", "target", "mode", "producers", "bytes_per_producer", "gap(us)"]
QUANTITIES = ["issue(us)", "period(us)"]


def summarize_bursts(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per experiment (``source`` + KEYS, + ``gap_kind`` when present): steady-state medians of
    issue and period. Steady rows, as ``xstage.hw.microbench.steady``: the second half of periodic
    bursts, all isolated bursts but the first. With a ``trial`` column: medians per trial, then the
    median over trials."""
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


def find_platform(name: str, data_dir=None) -> Platform:
    """A platform by name: bundled, else the fitted ``calibration/<name>/platform.json`` under ``data_dir``."""
    from pathlib import Path

    from xstage.paths import data_dir as default_data_dir
    from xstage.sim.platform import bundled_platforms

    if name in bundled_platforms() or str(name).endswith(".json") or "/" in str(name):
        return load_platform(name)
    fitted = Path(data_dir or default_data_dir()) / "calibration" / str(name) / "platform.json"
    if fitted.is_file():
        return load_platform(fitted)
    raise InputError("platform", name, "is neither bundled nor calibrated under data/calibration/ "
                     "(pass --platform NAME or FILE.json)")


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
        sim = simulate_experiment(plat, r["mode"], K, B, G, min(int(r["bursts"]), max_bursts))
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


def burst_error_summary(frame: pd.DataFrame) -> dict:
    """Median / p90 relative error of issue time and period over a ``compare_bursts`` frame."""
    summary = frame_error_summary(frame, QUANTITIES)
    summary["n_experiments"] = int(len(frame))
    return summary
