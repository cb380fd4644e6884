"""Fit the platform model M_X = (T_iss0(K, B), R, Q(K)) to burst measurements, and check it.

Pure functions on a *points* frame: one row per measured configuration (medians), columns
``phase`` (rate | plateau | gap | fma | isolated), ``mode``, ``producers``, ``bytes_per_producer``,
``volume(bytes)``, ``gap(us)``, ``T_iss(us)``, ``period(us)``, ``gap_measured(us)`` (a point record). The same code fits records
from the GPU and from the simulator (tests recover a known platform from simulated sweeps).

- R (Sec. 3.3): zero-gap periodic points that are drain-dominated -- their issue time is clearly
  above the backpressure-free plateau -- fitted to T_period = V / R (least squares on relative error).
- T_iss0 (Sec. 3.4): large-gap plateau points fitted to t_fixed + max(B / P, K B / I) (the Platform's
  form; I = None when no aggregate ceiling shows).
- Q(K) (Sec. 3.5, Eq. 7): isolated bursts of growing volume fitted to max(T_iss0, (V - Q) / R) with
  R fixed; a free (Q, R_iso) line fit of the points above the knee says whether isolated and
  periodic bursts agree about R.
"""

import numpy as np
import pandas as pd

from xstage.sim import model, model_two_stage

DRAIN_MARGIN = 1.2   # a zero-gap point is drain-dominated when T_iss > DRAIN_MARGIN * T_iss0
KNEE_MARGIN = 1.15   # an isolated point is above the knee when T_iss > KNEE_MARGIN * T_iss0


def rel_err(pred, meas):
    pred, meas = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    return (pred - meas) / meas


# --- T_iss0 ----------------------------------------------------------------------------------------

def _t0_model(K, B, t_fixed, inv_p, inv_i, skew=0.0, buffer=0.0):
    return t_fixed + np.maximum(np.maximum(B - buffer, 0.0) * inv_p, K * B * inv_i) + skew * start_range(K)


def start_range(K):
    """(K - 1) / (K + 1): the expected range of K starts spread uniformly over a unit window (``Platform.start_skew_us``)."""
    K = np.asarray(K, dtype=float)
    return (K - 1.0) / (K + 1.0)


def _offsets(T, g, w, S):
    """Weighted least squares of T - g over the columns [1, S] (t_fixed, skew), both >= 0; g (..., N)."""
    y = T - g
    if S is None:
        return np.maximum(np.sum(w * y, axis=-1) / np.sum(w), 0.0), np.zeros(g.shape[:-1])
    a11, a12, a22 = np.sum(w), np.sum(w * S), np.sum(w * S * S)
    b1, b2 = np.sum(w * y, axis=-1), np.sum(w * S * y, axis=-1)
    det = a11 * a22 - a12 * a12
    t, s = (a22 * b1 - a12 * b2) / det, (a11 * b2 - a12 * b1) / det
    t_only = np.maximum(b1 / a11, 0.0)                  # skew clipped at 0
    s_only = np.maximum(b2 / a22, 0.0)                  # t_fixed clipped at 0
    t, s = np.where(s < 0, t_only, np.where(t < 0, 0.0, t)), np.where(s < 0, 0.0, np.where(t < 0, s_only, s))
    return t, s


def fit_issue_time0(K, B, T, rounds: int = 8, skew: bool = False, buffers=None, _buffer: float = 0.0) -> dict:
    """Fit T = t_fixed + max(B/P, K*B/I) (us; B in bytes; P, I in bytes/us) on relative error; with ``skew``,
    T = t_fixed + max(B/P, K*B/I) + s (K - 1) / (K + 1) (the producers' start skew, platform schema 2); with
    ``buffers`` (candidate store-buffer sizes b0, bytes), B/P -> max(B - b0, 0)/P with the best b0 of them
    (``store_buffer_bytes``, schema 2).

    Grid search over (1/P, 1/I) -- 1/I = 0 means no aggregate ceiling -- with t_fixed >= 0 (and s >= 0) in
    closed form, zoomed ``rounds`` times. Returns t_fixed_us, producer_issue_GBps, injection_GBps
    (None when no ceiling binds at any point), start_skew_us (None without ``skew``) and the relative
    residuals.
    """
    K, B, T = (np.asarray(x, dtype=float) for x in (K, B, T))
    if len(T) < 3:
        raise ValueError("fit_issue_time0 needs >= 3 points")
    if buffers is not None:
        fits = [fit_issue_time0(K, B, T, rounds, skew, None, float(b0)) for b0 in buffers if np.sum(B > b0) >= 2]
        if not fits:
            raise ValueError("fit_issue_time0 needs >= 2 points above a candidate store buffer")
        return min(fits, key=lambda f: float(np.sum(f["residuals"] ** 2)))
    w = 1.0 / T**2
    S = start_range(K) if skew else None
    slope_max = float(np.max(T / B))
    lo_p, hi_p = slope_max * 1e-5, slope_max
    lo_i, hi_i = slope_max * 1e-5 / K.max(), slope_max / K.min()

    Bp = np.maximum(B - _buffer, 0.0)                                           # bytes issued at P

    def solve(ps, is_):
        g = np.maximum(Bp * ps[:, None, None], K * B * is_[None, :, None])      # (P, I, N)
        t, s = _offsets(T, g, w, S)                                             # closed-form t_fixed (, s)
        r = (t[..., None] + g + (0.0 if S is None else s[..., None] * S) - T) / T
        return np.sum(r * r, axis=-1), t, s

    best, zoom = None, 4.0
    for _ in range(rounds + 1):
        ps = np.geomspace(lo_p, hi_p, 80)
        is_ = np.concatenate([[0.0], np.geomspace(lo_i, hi_i, 80)])
        score, t, s = solve(ps, is_)
        a, b = np.unravel_index(np.argmin(score), score.shape)
        if best is None or score[a, b] <= best[0]:
            best = (float(score[a, b]), float(t[a, b]), float(ps[a]), float(is_[b]), float(s[a, b]))
        _, _, ip, ii, _ = best
        lo_p, hi_p = ip / zoom, ip * zoom
        if ii > 0:
            lo_i, hi_i = ii / zoom, ii * zoom
        zoom = zoom**0.5
    _, t, ip, ii, sk = best
    binds = ii > 0 and bool(np.any(K * B * ii > Bp * ip * (1 + 1e-3)))
    if not binds:
        ii = 0.0
        score, tt, ss = solve(np.array([ip]), np.array([0.0]))
        t, sk = float(tt[0, 0]), float(ss[0, 0])
    res = rel_err(_t0_model(K, B, t, ip, ii, sk, _buffer), T)
    return {"t_fixed_us": t, "producer_issue_GBps": 1.0 / ip / 1e3,
            "injection_GBps": (1.0 / ii / 1e3) if binds else None, "start_skew_us": sk if skew else None,
            "store_buffer_bytes": _buffer if _buffer else None,
            "residuals": res, "median_abs_rel_residual": float(np.median(np.abs(res))),
            "max_abs_rel_residual": float(np.max(np.abs(res))), "n_points": int(len(T))}


# --- R ---------------------------------------------------------------------------------------------

def fit_drain_rate(volume, period, issue=None, issue0=None) -> dict:
    """Fit T_period = V / R (bytes/us) on the drain-dominated zero-gap points.

    A point is drain-dominated when its issue time exceeds DRAIN_MARGIN * T_iss0 (backpressure is
    what stretches it). Without T_iss0, the points within 20 % of the fastest rate are used.
    """
    V, P = np.asarray(volume, dtype=float), np.asarray(period, dtype=float)
    rate = V / P
    if issue is not None and issue0 is not None:
        used = np.asarray(issue, dtype=float) > DRAIN_MARGIN * np.asarray(issue0, dtype=float)
    else:
        used = rate >= 0.8 * rate.max()
    drain_limited = bool(used.any())
    if not drain_limited:                      # nothing backpressured: R is at least the fastest rate
        used = rate >= 0.8 * rate.max()
    x = rate[used]
    R = float(np.sum(x * x) / np.sum(x))       # minimizes sum((1 - x/R)^2) over 1/R
    res = rel_err(V / R, P)
    return {"R_Bpus": R, "used": used, "drain_limited": drain_limited, "residuals_used": res[used],
            "median_abs_rel_residual": float(np.median(np.abs(res[used]))), "n_used": int(used.sum()),
            "max_rate_Bpus": float(rate.max())}


# --- Q(K) ------------------------------------------------------------------------------------------

def fit_capacity(volume, T, T0, R_Bpus: float) -> dict:
    """Fit Q in T = max(T0, (V - Q) / R) with R fixed (one producer count). Bytes, us."""
    V, T, T0 = (np.asarray(x, dtype=float) for x in (volume, T, T0))
    above = T > KNEE_MARGIN * T0
    out = {"n_points": int(len(T)), "n_above_knee": int(above.sum())}
    if not above.any():                        # no knee seen: Q is at least the largest q_peak^0
        q = float(np.max(V - R_Bpus * T0))
        out.update(Q_bytes=max(q, 1.0), bound="lower", Q_iso_bytes=None, R_iso_Bpus=None)
    else:
        def loss(q):
            pred = np.maximum(T0, (V - q) / R_Bpus)
            r = (pred - T) / T
            return float(np.sum(r * r))
        lo, hi = min(0.0, float(np.min(V - R_Bpus * T))), float(np.max(V))
        for _ in range(5):
            grid = np.linspace(lo, hi, 401)
            losses = [loss(q) for q in grid]
            k = int(np.argmin(losses))
            step = grid[1] - grid[0]
            lo, hi = grid[k] - step, grid[k] + step
        q = float(grid[k])
        out.update(Q_bytes=max(q, 1.0), bound="fit" if q > 0 else "zero")
        if above.sum() >= 2 and np.ptp(V[above]) > 0:
            slope, icpt = np.polyfit(V[above], T[above], 1)    # T = V/R_iso - Q_iso/R_iso
            out.update(R_iso_Bpus=float(1.0 / slope) if slope > 0 else None,
                       Q_iso_bytes=float(-icpt / slope) if slope > 0 else None)
        else:
            out.update(R_iso_Bpus=None, Q_iso_bytes=None)
    pred = np.maximum(T0, (V - out["Q_bytes"]) / R_Bpus)
    res = rel_err(pred, T)
    out.update(residuals=res, median_abs_rel_residual=float(np.median(np.abs(res))),
               max_abs_rel_residual=float(np.max(np.abs(res))))
    return out


# --- model check ----------------------------------------------------------------------------------

def periodic_issue_time_us(gap_us, issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes) -> float:
    """T_iss of a periodic burst with both bounds: max(T_iss0, V/R - G, (V - Q)/R).

    Eq. 3 alone, max(T_iss0, V/R - G), assumes one burst never fills X-Stage; when
    V - R T_iss0 > Q even a burst that starts drained waits for the drain (Eq. 7), so the recovered
    plateau is T_iss^iso, not T_iss0. With the queue full at the end of every issue, the residual
    at the next start is [Q - R G]_+ and the issue time is the max of the three terms.
    """
    return max(model.issue_time_us(gap_us, issue_time0_us, volume_bytes, drain_rate_Bpus),
               model.isolated_issue_time_us(issue_time0_us, volume_bytes, drain_rate_Bpus, capacity_bytes))


def _two_stage_isolated(platform, K, t0, V, R, Q) -> float:
    """Eq. 7, or its relaxing-capacity form on a platform whose capacity relaxes."""
    relax = platform.queue_options(K)
    if not relax:
        return model.isolated_issue_time_us(t0, V, R, Q)
    return model_two_stage.relaxing_isolated_issue_time_us(t0, V, R, Q, relax["floor_bytes"], relax["relax_Bpus"],
                                                           relax.get("relax_exponential", False))


def _two_stage_periodic(platform, K, B, G, t0, V, R, Q) -> float:
    """``periodic_issue_time_us``, or its relaxing-capacity form on a platform whose capacity relaxes; where
    that has no closed form, the simulator's steady state (simpy, 400 bursts, the last 100)."""
    relax = platform.queue_options(K)
    if not relax:
        return periodic_issue_time_us(G, t0, V, R, Q)
    T = model_two_stage.relaxing_periodic_issue_time_us(G, t0, V, R, Q, relax["floor_bytes"], relax["relax_Bpus"],
                                                        relax.get("relax_exponential", False))
    if np.isnan(T):
        from xstage.sim.bursts import BurstConfig, simulate_bursts
        run = simulate_bursts(platform, BurstConfig(K, int(B), G, 400, skip=300, engine="simpy"),
                              record_occupancy=False)
        T = run.summary(platform)["T_iss_us"]
    return T


def _lockstep_relaxing(platform, K, G, t0, V, R, Q, spin_us=None) -> float:
    """A lockstep burst (mode ``periodic``) with a relaxing capacity: the barrier's fence lets every burst start
    from a drained path (docs/calibration.md, "What the lockstep mode measured"), where the capacity is back at
    Q(K), so ``periodic_issue_time_us``'s two bounds hold with Eq. 7's relaxing form:
    max(T_iss0, V/R - G, relaxing isolated issue time). With ``lockstep_drain_gated`` (knee11) the V/R - G term
    holds only for a burst that fills the X-Stage (V - R T_iss0 > Q(K)); below that the burst issues at T_iss0 --
    unless (``lockstep_catch_band``, knee12) it lies within w Q(K) below the knee and the path never empties
    between bursts (``lockstep_caught_below_knee``): then one catch is carried to every later burst. With
    ``lockstep_knee_ratio_points`` (knee13) the gate sits at r(K) Q(K) instead of Q(K)
    (``Platform.lockstep_knee_bytes``)."""
    if platform.lockstep_drain_gated and V - R * t0 <= platform.lockstep_knee_bytes(K) and \
            not lockstep_caught_below_knee(platform, t0, V, R, Q, spin_us):
        return t0
    return max(model.issue_time_us(G, t0, V, R), _two_stage_isolated(platform, K, t0, V, R, Q))


def lockstep_caught_below_knee(platform, t0, V, R, Q, spin_us) -> bool:
    """knee12 (``two-stage-state``): the steady state of a lockstep run whose bursts never fill Q(K), V - R T_iss0
    <= Q(K), carried burst to burst. Within the band, V - R T_iss0 > (1 - w) Q(K), a burst is caught now and then;
    a caught burst relaxes the capacity, which recovers only once the path has emptied. The next burst starts after
    the spin gap and the barrier, or at the drain's end, whichever is later; if the path is still draining when the
    spin and barrier end (``spin_us`` + b + T_iss0 < V/R), it never empties between bursts, the capacity never
    recovers, and the caught state is absorbing: the run's steady half is caught. Otherwise each burst starts at
    Q(K) and is free. False without the band (every other model) or without a spin gap (NaN)."""
    w, b = platform.lockstep_catch_band, platform.lockstep_barrier_us
    if w is None or spin_us is None or not np.isfinite(spin_us):
        return False
    return bool(V - R * t0 > (1.0 - w) * Q and spin_us + b + t0 < V / R)


def _spin_gap_us(d: dict, platform) -> float:
    """The gap a producer runs after its burst (the requested spin, ``gap(us)``); an ``fma`` gap (a count of
    iterations) is read from the measured one less the barrier (``lockstep_barrier_us``, 0 where unset)."""
    if d.get("gap_kind", "spin") == "fma":
        return max(float(d["gap_measured(us)"]) - (platform.lockstep_barrier_us or 0.0), 0.0)
    return float(d["gap(us)"]) if "gap(us)" in d else np.nan


def model_check(points: pd.DataFrame, platform) -> pd.DataFrame:
    """Predicted vs measured T_iss and period for every point.

    Periodic points: T_iss = max(T_iss0, V/R - G, (V - Q)/R), period = T_iss + G (Eq. 2), with the
    measured gap G (start of the next burst minus issue end); the Eq. 3-only prediction is kept
    beside it. Isolated points: Eq. 7; their period is not modelled (NaN). Free-running points read
    ``platform.free_running(V)``: its issue law, capacity and drain rate. A relaxing capacity
    (schema 2) uses ``model_two_stage``'s relaxing forms (``_two_stage_isolated`` / ``_two_stage_periodic``;
    the simulator where the periodic one has no closed form).
    """
    rows = []
    for d in points.to_dict("records"):
        K, B = int(d["producers"]), float(d["bytes_per_producer"])
        V = K * B
        plat = platform.free_running(V) if d["mode"] == "free" else platform   # its own laws (schema 2)
        R = plat.drain_rate_Bpus                 # a free burst's own drain rate where set (free_drain_rate_GBps)
        t0 = plat.issue_time0_us(K, B)
        Q = plat.capacity_bytes(K)
        G = max(float(d["gap_measured(us)"]), 0.0)
        if d["mode"] == "isolated":
            pred_t = eq3_t = _two_stage_isolated(platform, K, t0, V, R, Q)
            pred_p = eq3_p = np.nan
        else:
            if d["mode"] == "periodic" and platform.relaxing:
                pred_t = _lockstep_relaxing(platform, K, G, t0, V, R, Q, _spin_gap_us(d, platform))
            else:
                pred_t = _two_stage_periodic(plat, K, B, G, t0, V, R, Q)
            eq3_t = model.issue_time_us(G, t0, V, R)
            pred_p, eq3_p = pred_t + G, eq3_t + G
        meas_t, meas_p = d["T_iss(us)"], d["period(us)"]
        rows.append({"phase": d["phase"], "mode": d["mode"], "gap_kind": d.get("gap_kind", "spin"), "producers": K,
                     "bytes_per_producer": int(B), "gap(us)": d["gap(us)"], "gap_measured(us)": G,
                     "T_iss(us)": meas_t, "period(us)": meas_p, "model_T_iss(us)": pred_t,
                     "model_period(us)": pred_p, "eq3_T_iss(us)": eq3_t, "eq3_period(us)": eq3_p,
                     "T_iss0(us)": t0, "V/R(us)": V / R, "Q(bytes)": Q,
                     "rel_err_T_iss": (pred_t - meas_t) / meas_t, "rel_err_period": (pred_p - meas_p) / meas_p,
                     "rel_err_T_iss_eq3": (eq3_t - meas_t) / meas_t, "rel_err_period_eq3": (eq3_p - meas_p) / meas_p})
    return pd.DataFrame(rows)


def error_summary(check: pd.DataFrame) -> dict:
    """Median and p90 |relative error|: lockstep periodic points (full model and Eq. 3 alone),
    isolated points, and free-running points (``free_``: the model assumes lockstep bursts)."""
    out = {}
    per = check[check["mode"] == "periodic"]
    iso = check[check["mode"] == "isolated"]
    free = check[check["mode"] == "free"]
    aligned = check[check["mode"] == "aligned"]
    groups = (("", per, ("T_iss", "period")), ("eq3_", per, ("T_iss_eq3", "period_eq3")),
              ("isolated_", iso, ("T_iss",)), ("free_", free, ("T_iss", "period")),
              ("aligned_", aligned, ("T_iss", "period")), ("aligned_eq3_", aligned, ("T_iss_eq3", "period_eq3")))
    for prefix, frame, cols in groups:
        for c in cols:
            if prefix.startswith("aligned") and not len(frame):
                continue
            e = np.abs(frame[f"rel_err_{c}"].dropna().to_numpy()) if len(frame) else np.array([])
            name = c.replace("_eq3", "")
            out[f"{prefix}median_rel_err_{name}"] = float(np.median(e)) if e.size else float("nan")
            out[f"{prefix}p90_rel_err_{name}"] = float(np.percentile(e, 90)) if e.size else float("nan")
    out["n_points"] = int(len(per))
    out["n_isolated_points"] = int(len(iso))
    out["n_free_points"] = int(len(free))
    if len(aligned):
        out["n_aligned_points"] = int(len(aligned))
    return out
