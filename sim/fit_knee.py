"""The knee laws' fits (issue 15, sessions 10-12): where a lockstep burst stops running free of the X-Stage.

Each is an opt-in ``xstage calibrate --model`` and is called from ``platform_fit.fit_platform`` after the
two-stage capacity and rho are fitted; each chooses its parameter by the model check on the fitted lockstep
points (``fit_two_stage.check_loss``), alternating with rho.

- ``fit_knee_capacity`` (``two-stage-knee2``, knee11): Q(K) per K read from that K's own lockstep sweeps.
- ``lockstep_barrier_us``, ``fit_catch_band`` (``two-stage-state``, knee12): the barrier's own time and the band
  w of ``CATCH_BANDS`` below the knee where a catch is carried from burst to burst.
- ``knee_votes``, ``place_knee``, ``knee_ratio_reads`` (``two-stage-kneek``, knee13): each lockstep pair votes
  caught or free; each K's knee ratio r(K) is placed where its votes switch, linear in K between two-sided reads.
- ``lockstep_issue_times_us``, ``fit_lockstep_capacity`` (``two-stage-lockq``, knee17): no gate; the two-stage
  line Q(K) = Q_shared + K q_sm and rho read together from the lockstep pairs by the model check, so each K's
  knee is placed by the line through its neighbours' pairs as well as its own.
- ``search_per_k``, ``per_k_platform`` (``xstage calibrate --per-k-capacity``, perk18 / combo18): after lockq's fit,
  each lockstep K of the fit gets its own Q(K) by lockq's loss on that K's pairs, rho and the floor kept.

Pure numpy/pandas; docs/calibration/knee11.md, knee12.md, knee13.md, knee17.md give the figures.
"""

from dataclasses import replace

import numpy as np
import pandas as pd

from xstage.sim import fit as calib_fit, fit_two_stage

CATCH_BANDS = tuple(round(0.02 * i, 2) for i in range(26))   # two-stage-state: candidate bands w, 0-0.5 of Q(K)
KNEE_VOTE_MARGIN = 0.15   # two-stage-kneek: a lockstep point votes only where the caught form exceeds T_iss0 by > 15 %


def fit_knee_capacity(points, platform, points_per_round: int = 25, rounds: int = 3) -> tuple:
    """``two-stage-knee2`` (knee11): Q(K) at each K of ``platform.capacity_points``, chosen one K at a time to
    minimise the model check's squared log T_iss ratios (model / measured: a burst caught
    where it ran free and the reverse weigh alike) on that K's lockstep periodic points under the
    platform's own law (relaxing to ``capacity_floor_bytes``, ``lockstep_drain_gated``): a log grid over
    [Q_f, 1.2 max V], zoomed ``rounds`` times. Eq. 7 on isolated and plateau points reads a capacity that
    relaxes as a smaller fixed one; the knee's own place -- the largest burst that still runs free -- is what
    this reads. A K without lockstep points keeps its Q. Returns the new ``capacity_points``."""
    lockstep = points[points["mode"] == "periodic"]
    caps = dict(platform.capacity_points)
    for k in sorted(caps):
        rows = lockstep[lockstep["producers"] == k]
        if rows.empty:
            continue
        vmax = float(k * rows["bytes_per_producer"].max())
        lo, hi = np.log(max(platform.capacity_floor_bytes or 0.0, 1.0)), np.log(1.2 * vmax)
        if hi <= lo:
            continue

        def loss(q):
            plat = replace(platform, capacity_points=tuple(sorted({**caps, k: q}.items())))
            err = np.log1p(calib_fit.model_check(rows, plat)["rel_err_T_iss"].to_numpy(float))
            worst = np.nanmax(np.abs(err)) if np.isfinite(err).any() else 1.0
            return float(np.sum(np.where(np.isfinite(err), err, worst) ** 2))
        best = None
        for _ in range(rounds + 1):
            grid = np.linspace(lo, hi, points_per_round)
            for x in grid:
                value = loss(float(np.exp(x)))
                if best is None or value < best[0]:
                    best = (value, float(x))
            step = grid[1] - grid[0]
            lo, hi = best[1] - step, best[1] + step
        caps[k] = float(np.exp(best[1]))
    return tuple(sorted(caps.items()))


def lockstep_barrier_us(points: pd.DataFrame) -> float:
    """``two-stage-state`` (knee12): the lockstep barrier's own time after a producer's spin gap -- the median of
    measured minus requested gap over the plateau points (their gap outlasts the drain, so nothing but the barrier
    and its fence sits between them); 0 without plateau points."""
    plateau = points[(points["phase"] == "plateau") & (points["mode"] == "periodic")]
    extra = (plateau["gap_measured(us)"] - plateau["gap(us)"]).dropna().to_numpy(float)
    return float(max(np.median(extra), 0.0)) if extra.size else 0.0


def fit_catch_band(points, platform, barrier_us: float) -> dict:
    """``two-stage-state`` (knee12): the band w of ``CATCH_BANDS`` minimising the model check's squared relative
    T_iss errors on the lockstep periodic points (``fit_two_stage.check_loss`` at the platform's rho); ties go to the
    narrowest."""
    rho = platform.capacity_relax_GBps * 1e3
    best = None
    for w in CATCH_BANDS:
        plat = replace(platform, lockstep_drain_gated=True, lockstep_catch_band=w, lockstep_barrier_us=barrier_us)
        value = fit_two_stage.check_loss(points, plat, rho)
        if best is None or value < best["loss"] - 1e-12:
            best = {"band": w, "loss": value}
    return best


def knee_votes(points: pd.DataFrame, platform) -> list:
    """``two-stage-kneek`` (knee13): one vote per lockstep periodic (K, B) pair -- caught or free -- by which form
    fits its points better (sum of squared log ratios measured / form): T_iss0, or gated2's caught form
    max(T_iss0, V/R - G, relaxing Eq. 7) at the point's measured gap. Only points where the caught form exceeds
    T_iss0 by more than ``KNEE_VOTE_MARGIN`` count (elsewhere the two agree); a pair without one casts no vote
    (``caught`` None). Each vote carries the pair's excess V - R T_iss0 (bytes) under ``platform``."""
    lockstep = points[(points["mode"] == "periodic")].dropna(subset=["T_iss(us)"])
    R = platform.drain_rate_Bpus
    votes = []
    for (k, b), g in lockstep.groupby(["producers", "bytes_per_producer"]):
        k, b = int(k), float(b)
        t0, V, Q = platform.issue_time0_us(k, b), k * b, platform.capacity_bytes(k)
        iso = calib_fit._two_stage_isolated(platform, k, t0, V, R, Q)
        caught = np.array([max(calib_fit.model.issue_time_us(max(float(G), 0.0), t0, V, R), iso)
                           for G in g["gap_measured(us)"]])
        T = g["T_iss(us)"].to_numpy(float)
        use = (caught > (1.0 + KNEE_VOTE_MARGIN) * t0) & (T > 0)
        vote = None
        if use.any():
            vote = bool(np.sum(np.log(T[use] / caught[use]) ** 2) < np.sum(np.log(T[use] / t0) ** 2))
        votes.append({"K": k, "B": int(b), "excess_bytes": float(V - R * t0), "caught": vote,
                      "n_points": int(use.sum())})
    return votes


def place_knee(votes: list, capacity_bytes: float) -> dict:
    """``two-stage-kneek`` (knee13): where one K's votes put its knee, as a ratio to Q(K). The votes, sorted by
    excess e, are cut where the fewest cross (a free vote above the cut or a caught one at or below it); among
    equal cuts, the one whose interval [e_below, e_above) lies nearest Q(K) (in log). Two-sided (votes on both
    sides): the knee at sqrt(e_below e_above). All free: at least the largest e (``read`` ``above``); all caught:
    below the smallest (``below``); no votes: ``none``."""
    v = sorted((d["excess_bytes"], d["caught"]) for d in votes if d["caught"] is not None)
    n, q = len(v), float(capacity_bytes)
    if not n:
        return {"read": "none", "n_votes": 0}
    best = None
    for i in range(n + 1):
        crossed = sum(c for _, c in v[:i]) + sum(not c for _, c in v[i:])
        lo, hi = (v[i - 1][0] if i else 0.0), (v[i][0] if i < n else np.inf)
        dist = np.log(lo / q) if q < lo else (np.log(q / hi) if q >= hi else 0.0)
        if best is None or (crossed, dist) < best[:2]:
            best = (crossed, dist, i, lo, hi)
    crossed, _, i, lo, hi = best
    out = {"n_votes": n, "crossed": int(crossed), "e_below_bytes": lo, "e_above_bytes": None if i == n else hi}
    if 0 < i < n:
        return {**out, "read": "two-sided", "ratio": float(np.sqrt(lo * hi) / q)}
    if i == n:
        return {**out, "read": "above", "ratio_min": lo / q}
    return {**out, "read": "below", "ratio_max": hi / q}


KNEE_BELOW = 1.0 - 1e-9   # a one-sided "below" read puts the knee just under the smallest caught excess


def knee_ratio_reads(points: pd.DataFrame, platform) -> dict:
    """``two-stage-kneek`` (knee13): r(K) at every K with lockstep points. Two-sided reads (``place_knee``) give r;
    between them r is linear in K, flat beyond the end ones, 1 (the line, knee11's gate) where no K is two-sided;
    a one-sided read clips that interpolated r into its bound, and a K without votes takes it as it is.
    Returns ``ratio_points`` (for the platform) and ``per_K`` (each K's read)."""
    from xstage.sim.platform import knee_ratio_at
    votes = knee_votes(points, platform)
    per_k = []
    for k in sorted({d["K"] for d in votes}):
        per_k.append({"K": k, "Q_bytes": platform.capacity_bytes(k),
                      **place_knee([d for d in votes if d["K"] == k], platform.capacity_bytes(k))})
    fixed = tuple((r["K"], r["ratio"]) for r in per_k if r["read"] == "two-sided")
    for r in per_k:
        base = knee_ratio_at(fixed, r["K"]) if fixed else 1.0
        if r["read"] == "above":
            r["ratio"] = max(base, r["ratio_min"])
        elif r["read"] == "below":
            r["ratio"] = min(base, KNEE_BELOW * r["ratio_max"])
        elif r["read"] == "none":
            r["ratio"] = base
    return {"ratio_points": tuple((r["K"], float(r["ratio"])) for r in per_k), "per_K": per_k, "votes": votes}


def lockstep_issue_times_us(K, V, T0, G, R: float, q_shared: float, q_sm: float, rho: float,
                            floor: float | None = None) -> np.ndarray:
    """The model check's T_iss of lockstep periodic bursts under a two-stage relaxing capacity, vectorised
    (``fit._lockstep_relaxing`` without a knee gate): max(T_iss0, V/R - G, the relaxing isolated issue time) with
    Q(K) = Q_shared + K q_sm relaxing at rho to the floor Q_shared
    (``model_two_stage.relaxing_isolated_issue_time_us``).
    Arrays K, V (bytes), T0, G (us, the measured gap, >= 0); R, rho in bytes/us. ``floor`` (bytes): the relaxing
    floor in place of Q_shared, never above Q(K) (floor24, ``benchmarks/calib_h100_floor24.py``); None: Q_shared."""
    K, V, T0, G = (np.asarray(x, dtype=float) for x in (K, V, T0, G))
    Q = q_shared + K * q_sm
    floor = np.minimum(q_shared if floor is None else floor, Q)
    a = V / T0
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = Q / (a - R)
        left = V - a * t1
        ts = (Q - floor) / rho
        slow = R - rho
        iso = np.where(left <= slow * ts, t1 + left / slow, t1 + ts + (left - slow * ts) / R)
    iso = np.where(V - R * T0 <= Q, T0, iso)
    return np.maximum(np.maximum(T0, V / R - G), iso)


def lockstep_arrays(points: pd.DataFrame, platform):
    """The lockstep periodic points with a measured T_iss, as ``fit_lockstep_capacity``'s check reads them: arrays K,
    B (bytes), T0 = the platform's T_iss0 (us), G = the measured gap (us, >= 0), T = the measured T_iss (us) and the
    weight of each point, 1/n for the n points of its (K, B) pair."""
    lock = points[points["mode"] == "periodic"].dropna(subset=["T_iss(us)"])
    lock = lock[lock["T_iss(us)"] > 0]
    K = lock["producers"].to_numpy(float)
    B = lock["bytes_per_producer"].to_numpy(float)
    T0 = np.array([platform.issue_time0_us(int(k), b) for k, b in zip(K, B)])
    G = np.maximum(lock["gap_measured(us)"].to_numpy(float), 0.0)
    weight = 1.0 / lock.groupby(["producers", "bytes_per_producer"])["T_iss(us)"].transform("size").to_numpy(float)
    return K, B, T0, G, lock["T_iss(us)"].to_numpy(float), weight


def fit_lockstep_capacity(points: pd.DataFrame, platform, grid: int = 24, rounds: int = 4) -> dict:
    """``two-stage-lockq`` (knee17): Q_shared, q_sm and rho chosen together by the model check on the lockstep
    periodic points (squared relative T_iss errors, ``lockstep_issue_times_us``; each (K, B) pair weighs one, its
    points 1/n each, so a 14-point gap sweep does not outvote the plateau pairs beside it) with R and T_iss0 fixed,
    instead of Q(K) by Eq. 7 on the free points and rho alone. Eq. 7 with a fixed capacity reads a
    capacity that relaxes as a smaller fixed one, which puts the lockstep knee too low (fresh11: plateau bursts
    at 1.06-1.10 Q(K) measured free) and leaves rho nearly 0. A grid over Q_shared in [0, 2] Q(K_max) and q_sm in
    [0, 2 Q(K_max) / K_max] (Q(K_max) the platform's, K_max the largest lockstep K) and rho on fit_relax_rate's
    log grid [R/200, 0.95 R], then ``rounds`` finer grids around the best. Returns ``Q_shared_bytes``,
    ``q_sm_bytes``, ``rho_Bpus``, ``loss`` and ``n_points``."""
    K, B, T0, G, T, weight = lockstep_arrays(points, platform)
    V, R = K * B, platform.drain_rate_Bpus
    k_max = float(K.max())
    q_max = platform.capacity_bytes(int(k_max))

    def loss(qs, qsm, rho):
        return float(np.sum(weight * ((lockstep_issue_times_us(K, V, T0, G, R, qs, qsm, rho) - T) / T) ** 2))
    axes = [np.linspace(0.0, 2.0 * q_max, grid), np.linspace(0.0, 2.0 * q_max / k_max, grid),
            np.linspace(np.log(R / 200.0), np.log(0.95 * R), grid)]
    best = None
    for _ in range(rounds + 1):
        for qs in axes[0]:
            for qsm in axes[1]:
                for x in axes[2]:
                    value = loss(qs, qsm, float(np.exp(x)))
                    if best is None or value < best[0] - 1e-12:
                        best = (value, float(qs), float(qsm), float(x))
        steps = [a[1] - a[0] for a in axes]
        axes = [np.linspace(max(best[1] - steps[0], 0.0), best[1] + steps[0], 9),
                np.linspace(max(best[2] - steps[1], 0.0), best[2] + steps[1], 9),
                np.linspace(best[3] - steps[2], min(best[3] + steps[2], np.log(0.95 * R)), 9)]
    return {"Q_shared_bytes": best[1], "q_sm_bytes": best[2], "rho_Bpus": float(np.exp(best[3])), "loss": best[0],
            "n_points": int(len(T))}


def per_k_platform(lockq, caps: dict, ks):
    """``two-stage-lockq``'s platform ``lockq`` with Q(K) = ``caps[K]`` where given and the line's Q_shared + K q_sm
    at every other K of ``ks`` (plus 1 and ``sm_count``), relaxing at lockq's rho to lockq's floor Q_shared
    (perk18, docs/calibration/lawscan18.md): ``capacity_points`` at those K, ``sm_outstanding_bytes`` None and
    ``capacity_floor_bytes`` = Q_shared, so with every ``caps[K]`` on the line it judges exactly as ``lockq``."""
    q_shared = lockq.capacity_points[0][1]          # max(Q_shared, 1 byte), as lockq's platform holds it
    anchors = sorted({1, int(lockq.sm_count), *(int(k) for k in ks), *caps})
    points = tuple((k, float(caps.get(k, lockq.capacity_bytes(k)))) for k in anchors)
    return replace(lockq, capacity_points=points, sm_outstanding_bytes=None, capacity_floor_bytes=q_shared)


def search_per_k(points, lockq, points_per_round: int = 25, rounds: int = 3) -> dict:
    """Q(K) per lockstep K of ``points`` (perk18): lockq's loss on that K's pairs (``lockstep_issue_times_us`` with
    Q_shared the floor and q_sm = (Q - Q_shared)/K, so Q(K) = Q and the floor is min(Q_shared, Q), as
    ``per_k_platform`` has it), a log grid over [Q_shared, 1.2 max V] zoomed ``rounds`` times; the line's value wins
    ties, so no K fits worse than under lockq. {K: bytes}."""
    K, B, T0, G, T, w = lockstep_arrays(points, lockq)
    R, rho, qs = lockq.drain_rate_Bpus, lockq.capacity_relax_GBps * 1e3, lockq.capacity_points[0][1]
    caps = {}
    for k in sorted(set(K.astype(int))):
        m = K == k

        def loss(q):
            t = lockstep_issue_times_us(K[m], K[m] * B[m], T0[m], G[m], R, qs, (q - qs) / k, rho)
            return float(np.sum(w[m] * ((t - T[m]) / T[m]) ** 2))
        line = lockq.capacity_bytes(k)
        best = (loss(line), np.log(line))
        lo, hi = np.log(max(qs, 1.0)), np.log(1.2 * k * float(B[m].max()))
        for _ in range(rounds + 1):
            if hi <= lo:
                break
            grid = np.linspace(lo, hi, points_per_round)
            for x in grid:
                value = loss(float(np.exp(x)))
                if value < best[0] - 1e-12:
                    best = (value, float(x))
            step = grid[1] - grid[0]
            lo, hi = best[1] - step, best[1] + step
        caps[k] = float(line) if best[1] == np.log(line) else float(np.exp(best[1]))
    return caps
