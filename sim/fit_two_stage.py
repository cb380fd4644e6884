"""Fitting the two-stage X-Stage's capacity (platform schema 2) to bursts from a drained path.

``fit_two_stage_capacity``: Q(K) = Q_shared + K q_sm in Eq. 7 over all K at once. ``fit_relax_rate``: the
relaxation rate rho that minimises a given loss (``check_loss``: the model check on the fitted lockstep
points). Used by ``xstage.sim.platform_fit.fit_platform(capacity_law=...)`` and ``xstage.sim.fit_knee``.

``fit_issue_time0_overlap`` (session 8, cal7; model ``two-stage-gated2``): the lockstep issue law with the start
skew inside the per-producer branch, T_iss0 = t_fixed + max(max(B - b0, 0)/P + s (K - 1)/(K + 1), K B/I)
(``Platform.skew_overlaps_ceiling``): while the last producers are still starting, the early ones already use the
aggregate path, so the skew and the aggregate ceiling overlap instead of adding.
"""

from dataclasses import replace

import numpy as np

from xstage.sim.fit import model_check, rel_err


def fit_two_stage_capacity(producers, volume, T, T0, R_Bpus: float, rounds: int = 6) -> dict:
    """Fit Q(K) = Q_shared + K q_sm (platform schema 2) in T = max(T0, (V - Q(K)) / R) over all K at once.

    A grid over (Q_shared, q_sm), both >= 0, on relative error, zoomed ``rounds`` times around the best
    cell. Returns Q_shared_bytes, q_sm_bytes, the residuals and their median / max |rel|.
    """
    K, V, T, T0 = (np.asarray(x, dtype=float) for x in (producers, volume, T, T0))
    if len(T) < 2:
        raise ValueError("fit_two_stage_capacity needs >= 2 points")

    def loss(qs, qk):
        cap = qs[:, None, None] + qk[None, :, None] * K
        r = (np.maximum(T0, (V - cap) / R_Bpus) - T) / T
        return np.sum(r * r, axis=-1)

    hi_s, hi_k = float(np.max(V)), float(np.max(V / K))
    lo_s, lo_k = 0.0, 0.0
    best = None
    for _ in range(rounds + 1):
        qs, qk = np.linspace(lo_s, hi_s, 61), np.linspace(lo_k, hi_k, 61)
        score = loss(qs, qk)
        a, b = np.unravel_index(np.argmin(score), score.shape)
        if best is None or score[a, b] <= best[0]:
            best = (float(score[a, b]), float(qs[a]), float(qk[b]))
        ds, dk = qs[1] - qs[0], qk[1] - qk[0]
        lo_s, hi_s = max(best[1] - 2 * ds, 0.0), best[1] + 2 * ds
        lo_k, hi_k = max(best[2] - 2 * dk, 0.0), best[2] + 2 * dk
    _, q_shared, q_sm = best
    res = rel_err(np.maximum(T0, (V - q_shared - q_sm * K) / R_Bpus), T)
    return {"Q_shared_bytes": q_shared, "q_sm_bytes": q_sm, "residuals": res, "n_points": int(len(T)),
            "median_abs_rel_residual": float(np.median(np.abs(res))),
            "max_abs_rel_residual": float(np.max(np.abs(res)))}


def fit_relax_rate(loss, R_Bpus: float, points: int = 25, rounds: int = 3) -> dict:
    """The relaxation rate rho (bytes/us, 0 < rho < R) minimising ``loss(rho)``: a log grid over
    [R/200, 0.95 R], then ``rounds`` finer grids around the best. ``loss`` is the fit's own figure of merit
    (``check_loss``: the model check's squared relative T_iss errors on the fitted points)."""
    lo, hi = np.log(R_Bpus / 200.0), np.log(R_Bpus * 0.95)
    best = None
    for _ in range(rounds + 1):
        grid = np.linspace(lo, hi, points)
        for x in grid:
            value = float(loss(float(np.exp(x))))
            if best is None or value < best[0]:
                best = (value, float(x))
        step = grid[1] - grid[0]
        lo, hi = best[1] - step, min(best[1] + step, np.log(R_Bpus * 0.95))
    return {"rho_Bpus": float(np.exp(best[1])), "loss": best[0]}


def check_loss(points, platform, rho_Bpus: float) -> float:
    """Sum of squared relative T_iss errors of the model check on the lockstep periodic points (the protocol the
    schema-2 issue law is fitted on; isolated bursts, after a system fence and a settle, show a lower knee at
    the same (K, B): docs/calibration.md) with the relaxing capacity at rho; points without a closed form
    count as the worst point."""
    lockstep = points[points["mode"] == "periodic"]   # the only rows read (row by row, so the same figures, faster)
    check = model_check(lockstep, replace(platform, capacity_relax_GBps=rho_Bpus / 1e3))
    err = check["rel_err_T_iss"].to_numpy(float)
    worst = np.nanmax(np.abs(err)) if np.isfinite(err).any() else 1.0
    return float(np.sum(np.where(np.isfinite(err), err, worst) ** 2))


def overlap_t0(K, B, t_fixed, inv_p, inv_i, skew=0.0, buffer=0.0):
    """t_fixed + max(max(B - b0, 0)/P + s (K - 1)/(K + 1), K B/I) (us; B in bytes; 1/P, 1/I in us/byte)."""
    K, B = np.asarray(K, dtype=float), np.asarray(B, dtype=float)
    return t_fixed + np.maximum(np.maximum(B - buffer, 0.0) * inv_p + skew * (K - 1.0) / (K + 1.0), K * B * inv_i)


def span_corners(K, B, buffer: float, free_below: float) -> tuple:
    """The (K, B) where the ceiling's lead over the per-producer branch, K B/I - max(B - b0, 0)/P - s (K-1)/(K+1),
    is largest over K in [min K, max K], B in [0, ``free_below``]: it is convex in K and piecewise linear in B
    (kinked at b0), so its maximum lies at K in {min, max} and B in {min(b0, free_below), free_below}."""
    ks = (float(np.min(K)), float(np.max(K)))
    bs = sorted({min(float(buffer), float(free_below)), float(free_below)} - {0.0})
    return np.array([k for k in ks for _ in bs]), np.array([b for _ in ks for b in bs])


def fit_issue_time0_overlap(K, B, T, buffer: float = 0.0, rounds: int = 6, fit_skew: bool = True,
                            ceiling_free_below: float = 0.0) -> dict:
    """Fit ``overlap_t0`` on relative error with b0 = ``buffer`` fixed: a grid over (1/P, 1/I, s) -- 1/I = 0 means
    no aggregate ceiling, s >= 0 -- with t_fixed >= 0 in closed form (weighted mean), zoomed ``rounds`` times.
    Returns the keys of ``fit.fit_issue_time0`` (skew fitted) plus ``skew_overlaps_ceiling`` True.
    ``fit_skew=False`` (skew13): s fixed at 0, for T already net of a measured start skew.

    ``ceiling_free_below`` (bytes; law15, ``two-stage-gated2-span``): only laws whose aggregate ceiling binds at no
    (K, B) with K in the points' range and B <= that are candidates -- finite-skew3's span law: up to 24 KiB a
    lockstep burst is its start skew plus one line of B at every K, on both targets. Without it, a fit half whose
    large-K points all sit at 6 KiB fitted a ceiling to one point and extrapolated it in K B (fresh10: T_iss0(116,
    16 KiB) 1.08 us, measured 0.61; docs/calibration/law15.md). 0 (the default): no constraint, as before."""
    K, B, T = (np.asarray(x, dtype=float) for x in (K, B, T))
    if len(T) < 3:
        raise ValueError("fit_issue_time0_overlap needs >= 3 points")
    w = 1.0 / T**2
    S = (K - 1.0) / (K + 1.0)
    Bp = np.maximum(B - buffer, 0.0)
    slope_max = float(np.max(T / np.maximum(B, 1.0)))
    lo_p, hi_p = slope_max * 1e-5, slope_max
    lo_i, hi_i = slope_max * 1e-5 / K.max(), slope_max / K.min()
    lo_s, hi_s = 0.0, float(np.max(T)) if fit_skew else 0.0

    Kc, Bc = span_corners(K, B, buffer, ceiling_free_below) if ceiling_free_below > 0 else (None, None)

    def solve(ps, is_, ss):
        g = np.maximum(Bp * ps[:, None, None, None] + ss[None, None, :, None] * S, K * B * is_[None, :, None, None])
        t = np.maximum(np.sum(w * (T - g), axis=-1) / np.sum(w), 0.0)
        r = (t[..., None] + g - T) / T
        score = np.sum(r * r, axis=-1)
        if Kc is not None:                  # law15: the ceiling may not bind where the span law holds
            own = (np.maximum(Bc - buffer, 0.0) * ps[:, None, None, None]
                   + ss[None, None, :, None] * (Kc - 1.0) / (Kc + 1.0))
            binds = np.any(Kc * Bc * is_[None, :, None, None] > own * (1.0 + 1e-12), axis=-1)
            score = np.where(binds, np.inf, score)
        return score, t

    best, zoom = None, 4.0
    for _ in range(rounds + 1):
        ps = np.geomspace(lo_p, hi_p, 40)
        is_ = np.concatenate([[0.0], np.geomspace(lo_i, hi_i, 40)])
        ss = np.linspace(lo_s, hi_s, 25)
        score, t = solve(ps, is_, ss)
        a, b, c = np.unravel_index(np.argmin(score), score.shape)
        if best is None or score[a, b, c] <= best[0]:
            best = (float(score[a, b, c]), float(t[a, b, c]), float(ps[a]), float(is_[b]), float(ss[c]))
        _, _, ip, ii, sk = best
        lo_p, hi_p = ip / zoom, ip * zoom
        if ii > 0:
            lo_i, hi_i = ii / zoom, ii * zoom
        step = (hi_s - lo_s) / 24
        lo_s, hi_s = max(sk - 2 * step, 0.0), sk + 2 * step
        zoom = zoom**0.5
    _, t, ip, ii, sk = best
    binds = ii > 0 and bool(np.any(K * B * ii > Bp * ip + sk * S))
    if not binds:
        ii = 0.0
    pred = overlap_t0(K, B, t, ip, ii, sk, buffer)
    res = rel_err(pred, T)
    return {"t_fixed_us": t, "producer_issue_GBps": 1.0 / ip / 1e3,
            "injection_GBps": (1.0 / ii / 1e3) if binds else None, "start_skew_us": sk,
            "store_buffer_bytes": buffer if buffer else None, "skew_overlaps_ceiling": True,
            "residuals": res, "median_abs_rel_residual": float(np.median(np.abs(res))),
            "max_abs_rel_residual": float(np.max(np.abs(res))), "n_points": int(len(T))}
