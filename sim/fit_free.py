"""The free-running burst's own issue law and drain rate (issue 15 item 1, session 9, cal9).

What the committed local HBM records show (docs/calibration/free-local.md): a free-running burst (no barrier, no
fence between bursts; each producer's own span) issues at one producer's rate at every K -- (132, 36 KiB) in
0.67 us like (4, 36 KiB), (132, 224 KiB) = 28.9 MiB after a long gap in 3.8 us against 3.7 us at K = 4, an apparent
8 TB/s -- so the lockstep aggregate ceiling (I = 5.1 TB/s, fitted on barrier-started bursts) does not bind them;
and a zero-gap free stream drains at ~4.5 TB/s (V / period), above the lockstep R = 3.5 TB/s, which on local HBM
is only a lower bound (the barrier hides the drain). The law is Eq. 3 with the free burst's own terms:

    T_iss = max(t_free + max(max(B - b0f, 0) / Pf, K B / If), V / Rf - G)

(``Platform.free_t_fixed_us``, ``free_producer_issue_GBps``, ``free_store_buffer_bytes``, ``free_injection_GBps``,
``free_drain_rate_GBps``; read through ``Platform.free_running``).

``fit_free_issue_law`` -- run by ``fit_platform`` for two-stage-gated, two-stage-robust and two-stage-gated2 after
``fit_robust.fit_free_law`` -- sets them from the fitted free-running points iff

(i) at least MIN_FREE_POINTS of them beat the lockstep law: issued faster than its ceiling allows, K B / T >
    CEILING_MARGIN x I, or streamed faster than its drain rate, V / period > DRAIN_MARGIN x R (the lockstep law
    cannot have held them), and
(ii) the free law fitted on them fits them better (sum of |rel T_iss error|) than the platform's free law as it is.

The free law is fitted in ROUNDS alternations from Rf = the largest V / period of any free point (a steady stream
drains at least that fast): the issue law by ``fit.fit_issue_time0`` (no skew; the store-buffer candidates of the
schema-2 fits) on the free points the drain kept up with over one period, V / Rf <= (T + G) / 1.15; Rf by
``fit.fit_drain_rate`` on the zero-gap free points, read as drain-bound where T > 1.2 T_iss0,free. Where no ceiling
binds, If is written false (none). On the H200 host path no free point beats
the lockstep law (its free bursts are drain-bound at R and far below I), so host platforms are left as they are.
"""

from dataclasses import replace

import numpy as np

from xstage.sim import fit as calib_fit

MIN_FREE_POINTS = 3
CEILING_MARGIN = 1.15   # (i): a free point issued faster than this x the lockstep ceiling I
DRAIN_MARGIN = 1.1      # (i): a free point streamed faster than this x the lockstep drain rate R
ROUNDS = 4
BUFFERS = tuple(1024 * k for k in range(0, 33))   # the store-buffer candidates (platform_fit.BUFFERS)


def _free(points):
    free = points[(points["mode"] == "free") & (points["T_iss(us)"] > 0)].dropna(subset=["T_iss(us)"])
    return free[free["period(us)"] > 0]


def beats_lockstep(points, platform) -> dict:
    """How many fitted free-running points issued faster than the lockstep ceiling allows (``above_ceiling``) and
    streamed faster than the lockstep drain rate (``above_drain``) -- rule (i)."""
    free = _free(points)
    V = free["producers"].to_numpy(float) * free["bytes_per_producer"].to_numpy(float)
    agg = V / free["T_iss(us)"].to_numpy(float)
    stream = V / free["period(us)"].to_numpy(float)
    ceiling = np.inf if platform.injection_GBps is None else CEILING_MARGIN * platform.injection_GBps * 1e3
    return {"above_ceiling": int(np.sum(agg > ceiling)),
            "above_drain": int(np.sum(stream > DRAIN_MARGIN * platform.drain_rate_Bpus))}


def fit_law(points) -> dict | None:
    """The free law's terms fitted on the free-running points (module doc); None with too few points."""
    free = _free(points)
    if len(free) < MIN_FREE_POINTS:
        return None
    K, B, T, per = (free[c].to_numpy(float) for c in ("producers", "bytes_per_producer", "T_iss(us)", "period(us)"))
    G = free["gap_measured(us)"].clip(lower=0).to_numpy(float)
    V = K * B
    zero_gap = (free["gap(us)"].to_numpy(float) == 0.0)
    R = float(np.max(V / per))
    law = drain = None
    for _ in range(ROUNDS):
        kept = V / R <= (T + G) / calib_fit.KNEE_MARGIN
        if kept.sum() < MIN_FREE_POINTS:
            return None
        try:
            law = calib_fit.fit_issue_time0(K[kept], B[kept], T[kept], skew=False, buffers=BUFFERS)
        except ValueError:
            return None
        inv_i = 0.0 if law["injection_GBps"] is None else 1.0 / (law["injection_GBps"] * 1e3)
        t0 = calib_fit._t0_model(K, B, law["t_fixed_us"], 1.0 / (law["producer_issue_GBps"] * 1e3), inv_i, 0.0,
                                 law["store_buffer_bytes"] or 0.0)
        if not zero_gap.any():
            break
        drain = calib_fit.fit_drain_rate(V[zero_gap], per[zero_gap], T[zero_gap], t0[zero_gap])
        R = drain["R_Bpus"]
    return {"t_free_us": law["t_fixed_us"], "producer_issue_GBps": law["producer_issue_GBps"],
            "store_buffer_bytes": law["store_buffer_bytes"] or 0.0,
            "injection_GBps": law["injection_GBps"] if law["injection_GBps"] is not None else False,   # false: none
            "drain_rate_GBps": R / 1e3, "drain_limited": bool(drain["drain_limited"]) if drain else False,
            "n_drain_points": drain["n_used"] if drain else 0, "n_issue_points": law["n_points"],
            "median_abs_rel_residual": law["median_abs_rel_residual"]}


def with_law(platform, law: dict):
    """``platform`` with the free law ``law`` (``fit_law``'s terms) in its ``free_*`` fields."""
    return replace(platform, free_t_fixed_us=law["t_free_us"], free_producer_issue_GBps=law["producer_issue_GBps"],
                   free_store_buffer_bytes=law["store_buffer_bytes"], free_injection_GBps=law["injection_GBps"],
                   free_drain_rate_GBps=law["drain_rate_GBps"])


def free_l1(points, platform) -> float:
    """Sum of |rel T_iss error| of the model check on the free-running points (no closed form: 1 each)."""
    err = calib_fit.model_check(_free(points), platform)["rel_err_T_iss"].to_numpy(float)
    return float(np.sum(np.abs(err[np.isfinite(err)]))) + float(np.sum(~np.isfinite(err)))


def fit_free_issue_law(points, platform) -> tuple:
    """(platform, info): ``platform`` with the free law where the fitted free points show it (module doc, rules
    (i) and (ii)), else ``platform`` unchanged; info names the rule's figures (None without free points)."""
    if _free(points).empty:
        return platform, None
    beat = beats_lockstep(points, platform)
    info = {**beat, "adopted": False}
    if max(beat.values()) < MIN_FREE_POINTS:
        return platform, info
    law = fit_law(points)
    if law is None:
        return platform, info
    candidate = with_law(platform, law)
    l1_before, l1_after = free_l1(points, platform), free_l1(points, candidate)
    info.update(law, l1_before=l1_before, l1_after=l1_after, adopted=l1_after < l1_before)
    if not info["adopted"]:
        return platform, info
    ceiling = "no ceiling binds" if law["injection_GBps"] is False else f"I = {law['injection_GBps']:.0f} GB/s"
    note = (f"free-running law (free_*; docs/calibration/free-local.md): {beat['above_ceiling']} fitted free points issued "
            f"faster than {CEILING_MARGIN} x the lockstep I, {beat['above_drain']} streamed faster than {DRAIN_MARGIN} x "
            f"the lockstep R; T_iss = max(t_free + max(max(B - b0, 0)/P, K B/I), V/R_free - G) fitted on them: t_free = "
            f"{law['t_free_us']:.3f} us, P = {law['producer_issue_GBps']:.1f} GB/s, b0 = {law['store_buffer_bytes']:.0f} B, "
            f"{ceiling} from {law['n_issue_points']} points the drain kept up with (median |rel residual| "
            f"{law['median_abs_rel_residual']:.1%}); R_free = {law['drain_rate_GBps']:.0f} GB/s from "
            f"{law['n_drain_points']} zero-gap free points; sum |rel T_iss err| {l1_after:.2f} against {l1_before:.2f}.")
    return replace(candidate, notes={**platform.notes, "free_law": note}), info
