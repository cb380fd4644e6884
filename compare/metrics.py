"""Error metrics for measured-vs-simulated frames.

Relative error is ``|simulated - measured| / |measured|`` (a fraction, not a percentage). A summary
gives its median and 90th percentile over the rows that have both values. For speedups the question
is the sign: does the simulator predict a gain (> 1) where the hardware shows one?
"""

import numpy as np
import pandas as pd


def relative_error(measured, simulated) -> np.ndarray:
    """Elementwise ``|sim - meas| / |meas|``; NaN where either is missing or the measurement is 0."""
    meas = np.asarray(measured, dtype=float)
    sim = np.asarray(simulated, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.abs(sim - meas) / np.abs(meas)
    err[~np.isfinite(err)] = np.nan
    return err


def error_summary(measured, simulated, name: str = "") -> dict:
    """``{name}median_rel_err``, ``{name}p90_rel_err``, ``{name}n_points`` over rows with both values."""
    err = relative_error(measured, simulated)
    err = err[np.isfinite(err)]
    prefix = f"{name}_" if name else ""
    if err.size == 0:
        return {f"{prefix}median_rel_err": float("nan"), f"{prefix}p90_rel_err": float("nan"),
                f"{prefix}n_points": 0}
    return {f"{prefix}median_rel_err": float(np.median(err)),
            f"{prefix}p90_rel_err": float(np.percentile(err, 90)),
            f"{prefix}n_points": int(err.size)}


def speedup_sign(speedup, tolerance: float = 0.0) -> np.ndarray:
    """+1 for a gain (> 1 + tol), -1 for a loss (< 1 - tol), 0 in between; NaN stays NaN."""
    s = np.asarray(speedup, dtype=float)
    out = np.where(s > 1.0 + tolerance, 1.0, np.where(s < 1.0 - tolerance, -1.0, 0.0))
    out[~np.isfinite(s)] = np.nan
    return out


def sign_agreement(measured_speedup, simulated_speedup, tolerance: float = 0.0) -> float:
    """Fraction of rows where simulated and measured speedups fall on the same side of 1 (NaN: no rows)."""
    a = speedup_sign(measured_speedup, tolerance)
    b = speedup_sign(simulated_speedup, tolerance)
    both = np.isfinite(a) & np.isfinite(b)
    if not both.any():
        return float("nan")
    return float(np.mean(a[both] == b[both]))


def add_relative_errors(frame: pd.DataFrame, quantities: list[str]) -> pd.DataFrame:
    """For each quantity ``q(unit)`` with ``measured_q(unit)`` and ``simulated_q(unit)`` columns, add
    ``q_rel_err``. Returns a new frame."""
    out = frame.copy()
    for q in quantities:
        base = q.split("(")[0]
        out[f"{base}_rel_err"] = relative_error(out[f"measured_{q}"], out[f"simulated_{q}"])
    return out


def frame_error_summary(frame: pd.DataFrame, quantities: list[str]) -> dict:
    """Median / p90 relative error of each quantity of a side-by-side frame."""
    summary = {}
    for q in quantities:
        summary.update(error_summary(frame[f"measured_{q}"], frame[f"simulated_{q}"], name=q.split("(")[0]))
    return summary
