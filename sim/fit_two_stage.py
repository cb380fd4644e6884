"""Fitting the two-stage X-Stage's capacity (platform schema 2) to bursts from a drained path.

``fit_two_stage_capacity``: Q(K) = Q_shared + K q_sm in Eq. 7 over all K at once. ``fit_relax_rate``: the
relaxation rate rho that minimises a given loss (the model check on the fitted points). Used by
``xstage.sim.platform_fit.fit_platform(capacity_law=...)``.
"""

import numpy as np

from xstage.sim.fit import rel_err


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
    (``xstage.sim.platform_fit``: the model check's squared relative T_iss errors on the fitted points)."""
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
