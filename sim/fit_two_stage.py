"""Fitting the two-stage X-Stage's capacity (platform schema 2) to bursts from a drained path.

``fit_two_stage_capacity``: Q(K) = Q_shared + K q_sm in Eq. 7 over all K at once. ``fit_relaxing_capacity``:
the same plus the relaxation rate rho (``model_two_stage.relaxing_isolated_issue_time_us``, vectorised as
``relaxing_isolated_np``). Used by ``xstage.sim.platform_fit.fit_platform(capacity_law=...)``.
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


def relaxing_isolated_np(T0, V, R_Bpus: float, Q, Qf, rho):
    """``model_two_stage.relaxing_isolated_issue_time_us`` on numpy arrays (broadcast)."""
    T0, V, Q, Qf, rho = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (T0, V, Q, Qf, rho)))
    held = V - R_Bpus * T0 > Q
    a = V / T0
    t1 = np.where(held, Q / np.where(held, a - R_Bpus, 1.0), 0.0)
    left = V - a * t1
    ts = (Q - Qf) / rho
    slow = R_Bpus - rho
    T = np.where(left <= slow * ts, t1 + left / slow, t1 + ts + (left - slow * ts) / R_Bpus)
    return np.where(held, T, T0)


def fit_relaxing_capacity(producers, volume, T, T0, R_Bpus: float, rounds: int = 5) -> dict:
    """Fit Q(K) = Q_shared + K q_sm and the relaxation rate rho (platform schema 2) to points from a drained
    path: T = ``relaxing_isolated_np``(T0, V, R, Q(K), Q_shared, rho). A grid over (rho, Q_shared, q_sm) on
    relative error, zoomed ``rounds`` times. Returns Q_shared_bytes, q_sm_bytes, rho_Bpus and residuals."""
    K, V, T, T0 = (np.asarray(x, dtype=float) for x in (producers, volume, T, T0))
    if len(T) < 3:
        raise ValueError("fit_relaxing_capacity needs >= 3 points")

    def loss(rho, qs, qk):
        cap = qs[None, :, None, None] + qk[None, None, :, None] * K
        pred = relaxing_isolated_np(T0, V, R_Bpus, cap, qs[None, :, None, None], rho[:, None, None, None])
        r = (pred - T) / T
        return np.sum(r * r, axis=-1)

    lo_r, hi_r = np.log(R_Bpus * 1e-3), np.log(R_Bpus * 0.95)
    lo_s, hi_s, lo_k, hi_k = 1.0, float(np.max(V)), 0.0, float(np.max(V / K))
    best = None
    for _ in range(rounds + 1):
        rho = np.exp(np.linspace(lo_r, hi_r, 17))
        qs, qk = np.linspace(lo_s, hi_s, 25), np.linspace(lo_k, hi_k, 25)
        score = loss(rho, qs, qk)
        a, b, c = np.unravel_index(np.argmin(score), score.shape)
        if best is None or score[a, b, c] <= best[0]:
            best = (float(score[a, b, c]), float(rho[a]), float(qs[b]), float(qk[c]))
        dr, ds, dk = (np.log(rho[1]) - np.log(rho[0])), qs[1] - qs[0], qk[1] - qk[0]
        lo_r, hi_r = np.log(best[1]) - 2 * dr, min(np.log(best[1]) + 2 * dr, np.log(R_Bpus * 0.95))
        lo_s, hi_s = max(best[2] - 2 * ds, 1.0), best[2] + 2 * ds
        lo_k, hi_k = max(best[3] - 2 * dk, 1.0), best[3] + 2 * dk
    _, rho, q_shared, q_sm = best
    res = rel_err(relaxing_isolated_np(T0, V, R_Bpus, q_shared + q_sm * K, q_shared, rho), T)
    return {"Q_shared_bytes": q_shared, "q_sm_bytes": q_sm, "rho_Bpus": rho, "residuals": res,
            "n_points": int(len(T)), "median_abs_rel_residual": float(np.median(np.abs(res))),
            "max_abs_rel_residual": float(np.max(np.abs(res)))}
