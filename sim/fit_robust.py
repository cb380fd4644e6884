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
3. ``fit_free_law`` (session 8, cal6; ``two-stage-gated`` and ``two-stage-robust``): whether free-running bursts
   see the lockstep capacity (``Platform.free_capacity_bound``). The rule, on the fitted free-running points: the
   capacity bound is dropped iff (i) at least MIN_FREE_POINTS of them held more than FREE_HELD_MARGIN x Q(K) at
   their issue end (V - R T > 1.5 Q(K): the lockstep capacity cannot have bounded them) and (ii) Eq. 3 alone,
   max(T_iss0,free, V/R - G), fits them no worse (sum of |rel T_iss error|) than the bounded law with the same
   issue law. The issue law then is t_free fitted on the free points the drain kept up with over one period,
   V/R <= (T + G) / 1.15 (a burst after a gap longer than its drain time issues backpressure-free once no capacity
   binds). Otherwise the platform is unchanged (two-stage-robust keeps ``fit_free_t_fixed``'s t_free).
"""

from dataclasses import replace

import numpy as np

from xstage.sim import fit as calib_fit

MIN_FREE_POINTS = 3
FREE_HELD_MARGIN = 1.5   # fit_free_law (i): a free burst held > this x Q(K) outstanding at its issue end


def l1_check_loss(points, platform, rho_Bpus: float) -> float:
    """Sum of |relative T_iss error| of the model check on the lockstep periodic points with the relaxing capacity
    at rho; points without a closed form count as the worst point."""
    check = calib_fit.model_check(points, replace(platform, capacity_relax_GBps=rho_Bpus / 1e3))
    err = check.loc[check["mode"] == "periodic", "rel_err_T_iss"].to_numpy(float)
    worst = np.nanmax(np.abs(err)) if np.isfinite(err).any() else 1.0
    return float(np.sum(np.abs(np.where(np.isfinite(err), err, worst))))


def _free_points(points):
    return points[(points["mode"] == "free") & (points["T_iss(us)"] > 0)].dropna(subset=["T_iss(us)"])


def fit_free_t_fixed(points, platform, over_period: bool = False) -> dict | None:
    """t_free from the free-running points of ``points`` (module doc); None with fewer than MIN_FREE_POINTS
    backpressure-free free-running points. Returns t_free_us, n_points and the median |rel residual|. With
    ``over_period``, a point is backpressure-free when V/R <= (T + G) / 1.15 (``fit_free_law``)."""
    free = _free_points(points)
    if free.empty:
        return None
    K = free["producers"].to_numpy(int)
    B = free["bytes_per_producer"].to_numpy(float)
    T = free["T_iss(us)"].to_numpy(float)
    R = platform.drain_rate_Bpus
    span = T + (free["gap_measured(us)"].clip(lower=0).to_numpy(float) if over_period else 0.0)
    free_of_backpressure = K * B / R <= span / calib_fit.KNEE_MARGIN   # the drain kept up with the issue
    if free_of_backpressure.sum() < MIN_FREE_POINTS:
        return None
    base = replace(platform, t_fixed_us=0.0, start_skew_us=None, free_t_fixed_us=None)
    law = np.array([base.issue_time0_us(int(k), b) for k, b in zip(K, B)])
    t_free = max(float(np.median((T - law)[free_of_backpressure])), 0.0)
    res = (t_free + law[free_of_backpressure] - T[free_of_backpressure]) / T[free_of_backpressure]
    return {"t_free_us": t_free, "n_points": int(free_of_backpressure.sum()),
            "median_abs_rel_residual": float(np.median(np.abs(res)))}


def held_beyond_capacity(points, platform) -> int:
    """How many free-running points of ``points`` held more than FREE_HELD_MARGIN x Q(K) at their issue end,
    V - R T > 1.5 Q(K) (``fit_free_law`` (i))."""
    free = _free_points(points)
    K = free["producers"].to_numpy(int)
    held = K * free["bytes_per_producer"].to_numpy(float) - platform.drain_rate_Bpus * free["T_iss(us)"].to_numpy(float)
    Q = np.array([platform.capacity_bytes(int(k)) for k in K])
    return int(np.sum(held > FREE_HELD_MARGIN * Q))


def _free_l1(points, platform) -> float:
    err = calib_fit.model_check(_free_points(points), platform)["rel_err_T_iss"].to_numpy(float)
    return float(np.sum(np.abs(err[np.isfinite(err)]))) + float(np.sum(~np.isfinite(err)))


def fit_free_law(points, platform) -> tuple:
    """(platform, info): ``platform`` with ``free_capacity_bound=False`` and the over-period t_free where the fitted
    free-running points show it (module doc, rule 3), else ``platform`` unchanged; info names the rule's figures
    (n_held_beyond_capacity, the two sums of |rel error|, t_free) or is None without enough free points."""
    n_held = held_beyond_capacity(points, platform)
    free = fit_free_t_fixed(points, platform, over_period=True)
    if free is None:
        return platform, None
    issue = replace(platform, free_t_fixed_us=free["t_free_us"])
    l1_bound = _free_l1(points, replace(issue, free_capacity_bound=None))
    l1_free = _free_l1(points, replace(issue, free_capacity_bound=False))
    on = n_held >= MIN_FREE_POINTS and l1_free <= l1_bound
    info = {"n_held_beyond_capacity": n_held, "l1_bounded": l1_bound, "l1_unbounded": l1_free, "unbounded": on,
            **free}
    if not on:
        return platform, info
    note = (f"free-running bursts: Eq. 3 alone, no capacity bound (free_capacity_bound = false): {n_held} fitted free "
            f"points held > {FREE_HELD_MARGIN} Q(K) at issue end; sum |rel T_iss err| {l1_free:.2f} unbounded vs "
            f"{l1_bound:.2f} bounded; t_free = {free['t_free_us']:.3f} us from {free['n_points']} free points with "
            f"V/R <= (T + G) / 1.15 (median |rel residual| {free['median_abs_rel_residual']:.1%}).")
    return replace(issue, free_capacity_bound=False, notes={**platform.notes, "free_capacity_bound": note}), info
