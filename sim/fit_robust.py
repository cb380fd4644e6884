"""The ``two-stage-robust`` model's two additions to ``two-stage-gated`` (issue 15, session 7).

1. ``l1_check_loss``: rho (the relaxing capacity's rate) chosen by the sum of |relative T_iss error| of the model
   check on the fitted lockstep points instead of the sum of squares. On the fresh host grid's fit half one pair,
   (56, 40 KiB) -- measured 8.5 us where V/R is 43 us, so no rho explains it -- carried most of the squared loss
   and pulled rho from ~17 to 6-8 GB/s; a least-absolute loss gives one point one bounded vote (docs/calibration.md,
   "A robust fit").
2. ``fit_free_t_fixed``: the free-running issue law (``Platform.free_t_fixed_us``): t_free = the median of
   T - max(max(B - b0, 0)/P, K B/I) over the fitted free-running points the drain kept up with (V/R <= T / 1.15,
   ``fit.KNEE_MARGIN``: a drain-bound free burst, T ~ V/R - G, says nothing about the issue law). Free-running
   producers leave no barrier, so they carry no start skew and each one's span is its own; local HBM's free
   bursts take 0.155 us at 2 KiB at every K, where the lockstep law says 0.29-0.46 us.
"""

from dataclasses import replace

import numpy as np

from xstage.sim import fit as calib_fit

MIN_FREE_POINTS = 3


def l1_check_loss(points, platform, rho_Bpus: float) -> float:
    """Sum of |relative T_iss error| of the model check on the lockstep periodic points with the relaxing capacity
    at rho; points without a closed form count as the worst point."""
    check = calib_fit.model_check(points, replace(platform, capacity_relax_GBps=rho_Bpus / 1e3))
    err = check.loc[check["mode"] == "periodic", "rel_err_T_iss"].to_numpy(float)
    worst = np.nanmax(np.abs(err)) if np.isfinite(err).any() else 1.0
    return float(np.sum(np.abs(np.where(np.isfinite(err), err, worst))))


def fit_free_t_fixed(points, platform) -> dict | None:
    """t_free from the free-running points of ``points`` (module doc); None with fewer than MIN_FREE_POINTS
    backpressure-free free-running points. Returns t_free_us, n_points and the median |rel residual|."""
    free = points[(points["mode"] == "free") & (points["T_iss(us)"] > 0)].dropna(subset=["T_iss(us)"])
    if free.empty:
        return None
    K = free["producers"].to_numpy(int)
    B = free["bytes_per_producer"].to_numpy(float)
    T = free["T_iss(us)"].to_numpy(float)
    R = platform.drain_rate_Bpus
    free_of_backpressure = K * B / R <= T / calib_fit.KNEE_MARGIN   # the drain kept up with the issue
    if free_of_backpressure.sum() < MIN_FREE_POINTS:
        return None
    base = replace(platform, t_fixed_us=0.0, start_skew_us=None, free_t_fixed_us=None)
    law = np.array([base.issue_time0_us(int(k), b) for k, b in zip(K, B)])
    t_free = max(float(np.median((T - law)[free_of_backpressure])), 0.0)
    res = (t_free + law[free_of_backpressure] - T[free_of_backpressure]) / T[free_of_backpressure]
    return {"t_free_us": t_free, "n_points": int(free_of_backpressure.sum()),
            "median_abs_rel_residual": float(np.median(np.abs(res)))}
