"""The frames behind the calibration page (the paper's Fig. 3 a-d) for one platform.

Every frame is long-form with a ``series`` column: ``model`` (the Burst-Gap equations on the
platform's parameters), ``coupled model`` (the completion-coupled sum G + V/R), ``sim`` (the simpy
simulator) and ``hw`` (measured burst records, steady-state medians), ``hw local`` / ``model local``
for the local-memory control.

- ``gap_sweep``: issue time and period vs the producer-side gap G (Fig. 3 a, b), per (K, B);
- ``knee``: isolated-burst issue time vs aggregate volume V (Fig. 3 c), per K;
- ``drain``: zero-gap steady-state period vs V across (K, B) and the fit V / R (Fig. 3 d);
- ``params``: the platform parameters and the drain rate refitted from the measured points.

Measured side: with a calibration folder's ``points.parquet`` (``points=``), the aggregate figures of
every configuration (``compare_points``: T_iss = max(end) - min(start) over producers, period, measured
gap), with the simulator re-run at each point (``sim``) and the full model max(T_iss0, V/R - G, (V-Q)/R)
as the curves; series ``hw`` (lockstep periodic, spin gap), ``hw fma`` (FMA gap), ``hw free``
(free-running), ``hw aligned``, ``hw local``. Points are placed at their measured gap. Without points,
plain burst records (``measured=``) are reduced to per-producer steady-state medians as before.
"""

import numpy as np
import pandas as pd

from xstage.compare.bursts import compare_bursts, compare_points, simulate_experiment, summarize_bursts
from xstage.sim.fit import periodic_issue_time_us
from xstage.sim import model
from xstage.sim.platform import Platform
from xstage.units import KiB

MiB = 2**20


def _default_gap_configs(p: Platform) -> list[tuple[int, int]]:
    return [(p.sm_count, 32 * KiB), (p.sm_count, 16 * KiB), (max(1, p.sm_count // 2), 32 * KiB)]


def _gap_values(p: Platform, K: int, B: int, n: int) -> np.ndarray:
    t0 = p.issue_time0_us(K, B)
    g_star = model.recovery_gap_us(t0, K * B, p.drain_rate_Bpus)
    return np.linspace(0.0, max(2.0 * g_star, 4.0 * t0, 1.0), n)


def gap_sweep_frame(p: Platform, hw: pd.DataFrame | None, *, sim_points: int = 7, sim_bursts: int = 40,
                    model_points: int = 61) -> pd.DataFrame:
    """Fig. 3 a, b: issue time and period vs gap for each (K, B) configuration."""
    hw_periodic = hw[hw["mode"] == "periodic"] if hw is not None else pd.DataFrame()
    if len(hw_periodic):
        configs = sorted({(int(k), int(b)) for k, b in zip(hw_periodic["producers"], hw_periodic["bytes_per_producer"])})
    else:
        configs = _default_gap_configs(p)
    rows = []
    R = p.drain_rate_Bpus
    for K, B in configs:
        V = K * B
        t0 = p.issue_time0_us(K, B)
        gaps = _gap_values(p, K, B, model_points)
        if len(hw_periodic):
            sel = hw_periodic[(hw_periodic["producers"] == K) & (hw_periodic["bytes_per_producer"] == B)]
            gaps = np.linspace(0.0, max(float(sel["gap(us)"].max()), gaps[-1]), model_points)
        for g in gaps:
            t_iss = model.issue_time_us(g, t0, V, R)
            rows.append(("model", K, B, g, t_iss, t_iss + g))
            rows.append(("coupled model", K, B, g, np.nan, model.coupled_period_us(g, V, R)))
            rows.append(("model local", K, B, g, t0, t0 + g))
        for g in np.linspace(0.0, gaps[-1], sim_points):
            s = simulate_experiment(p, "periodic", K, B, g, sim_bursts)
            rows.append(("sim", K, B, g, s["simulated_issue(us)"], s["simulated_period(us)"]))
    out = pd.DataFrame(rows, columns=["series", "producers", "bytes_per_producer", "gap(us)", "issue(us)",
                                      "period(us)"])
    if hw is not None and len(hw):
        measured = hw[hw["mode"].isin(["periodic", "local"])]
        measured = measured[measured.set_index(["producers", "bytes_per_producer"]).index.isin(configs)]
        measured = measured.assign(series=np.where(measured["mode"] == "local", "hw local", "hw"))
        out = pd.concat([out, measured[out.columns]], ignore_index=True)
    out.insert(3, "volume(MiB)", out["producers"] * out["bytes_per_producer"] / MiB)
    return out


def knee_frame(p: Platform, hw: pd.DataFrame | None, *, sim_points: int = 9, model_points: int = 80) -> pd.DataFrame:
    """Fig. 3 c: isolated-burst issue time vs aggregate volume, per K; the knee sits at q_peak^0 = Q."""
    hw_iso = hw[hw["mode"] == "isolated"] if hw is not None else pd.DataFrame()
    if len(hw_iso):
        ks = sorted({int(k) for k in hw_iso["producers"]})
    else:
        ks = sorted({p.sm_count, max(1, p.sm_count // 2), max(1, p.sm_count // 4)})
    rows = []
    R = p.drain_rate_Bpus
    for K in ks:
        Q = p.capacity_bytes(K)
        b_knee = Q / K  # per-producer bytes where V ~ Q (+ R T_iss0)
        b_max = 4.0 * b_knee
        if len(hw_iso):
            b_max = max(b_max, float(hw_iso.loc[hw_iso["producers"] == K, "bytes_per_producer"].max()))
        for B in np.geomspace(1 * KiB, b_max, model_points):
            t0 = p.issue_time0_us(K, B)
            rows.append(("model", K, B, model.isolated_issue_time_us(t0, K * B, R, Q)))
        for B in np.geomspace(1 * KiB, b_max, sim_points):
            B = int(round(B / 16)) * 16
            s = simulate_experiment(p, "isolated", K, B, 0.0, 3)
            rows.append(("sim", K, B, s["simulated_issue(us)"]))
    out = pd.DataFrame(rows, columns=["series", "producers", "bytes_per_producer", "issue(us)"])
    if len(hw_iso):
        out = pd.concat([out, hw_iso.assign(series="hw")[out.columns]], ignore_index=True)
    out.insert(3, "volume(MiB)", out["producers"] * out["bytes_per_producer"] / MiB)
    return out


def drain_frame(p: Platform, hw: pd.DataFrame | None, *, sim_bursts: int = 40) -> pd.DataFrame:
    """Fig. 3 d: zero-gap steady-state period vs V over several (K, B), with the line V / R."""
    hw_zero = hw[(hw["mode"] == "periodic") & (hw["gap(us)"] == 0)] if hw is not None else pd.DataFrame()
    rows = []
    if len(hw_zero):
        configs = sorted({(int(k), int(b)) for k, b in zip(hw_zero["producers"], hw_zero["bytes_per_producer"])})
    else:
        ks = sorted({p.sm_count, max(1, p.sm_count // 2), max(1, p.sm_count // 4)})
        configs = [(k, b) for k in ks for b in (8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB)]
    for K, B in configs:
        s = simulate_experiment(p, "periodic", K, B, 0.0, sim_bursts)
        rows.append(("sim", K, B, s["simulated_period(us)"]))
    v_max = max(k * b for k, b in configs)
    for V in np.linspace(0.0, v_max * 1.05, 40):
        rows.append(("model", 0, V, V / p.drain_rate_Bpus))  # producers 0: the line, any K
    out = pd.DataFrame(rows, columns=["series", "producers", "bytes_per_producer", "period(us)"])
    out["volume(MiB)"] = np.where(out["producers"] > 0, out["producers"] * out["bytes_per_producer"],
                                  out["bytes_per_producer"]) / MiB
    out.loc[out["series"] == "model", "bytes_per_producer"] = np.nan
    if len(hw_zero):
        m = hw_zero.assign(series="hw")
        m["volume(MiB)"] = m["producers"] * m["bytes_per_producer"] / MiB
        out = pd.concat([out, m[out.columns]], ignore_index=True)
    return out[["series", "producers", "bytes_per_producer", "volume(MiB)", "period(us)"]]


def fit_drain_rate_GBps(drain: pd.DataFrame, p: Platform, series: str = "hw") -> float:
    """Least-squares R of period = V / R through the origin over the drain-dominated points of ``series``
    (those whose period exceeds 1.5 T_iss0); NaN when there are none."""
    pts = drain[drain["series"] == series]
    if pts.empty:
        return float("nan")
    V = pts["volume(MiB)"].to_numpy() * MiB
    t0 = np.array([p.issue_time0_us(int(k), float(b)) for k, b in zip(pts["producers"], pts["bytes_per_producer"])])
    period = pts["period(us)"].to_numpy(dtype=float)
    keep = np.isfinite(period) & (period > 1.5 * t0)
    if not keep.any():
        return float("nan")
    inv_r = np.sum(V[keep] * period[keep]) / np.sum(V[keep] ** 2)  # us per byte
    return 1.0 / inv_r / 1e3


# --- measured side from calibration points (points.parquet) ------------------------------------------

def point_series(cmp: pd.DataFrame) -> pd.Series:
    """The measured series of each ``compare_points`` row: hw, hw fma, hw free, hw aligned, hw local."""
    name = cmp["mode"].map({"periodic": "hw", "free": "hw free", "aligned": "hw aligned", "local": "hw local",
                            "isolated": "hw"}).fillna("hw " + cmp["mode"].astype(str))
    return name.where(~((cmp["mode"] == "periodic") & (cmp["gap_kind"] == "fma")), "hw fma")


def _measured_and_sim(sel: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """``compare_points`` rows as long-form ``hw*`` rows (measured) and ``sim`` rows (re-simulated)."""
    hw = sel.assign(series=point_series(sel)).rename(columns={f"measured_{c}": c for c in columns})
    sim = sel.assign(series="sim").rename(columns={f"simulated_{c}": c for c in columns})
    return pd.concat([hw, sim], ignore_index=True)


def points_gap_sweep_frame(p: Platform, cmp: pd.DataFrame, *, model_points: int = 61) -> pd.DataFrame:
    """Fig. 3 a, b from points: the (K, B) of the gap sweeps (phases gap / free-gap / aligned-gap), every
    non-isolated point of those (K, B) at its measured gap, and the model curves up to the largest gap."""
    swept = cmp[cmp["phase"].astype(str).str.endswith("gap") & (cmp["mode"] != "isolated")]
    configs = sorted({(int(k), int(b)) for k, b in zip(swept["producers"], swept["bytes_per_producer"])})
    R, rows = p.drain_rate_Bpus, []
    parts = []
    for K, B in configs:
        V, t0, Q = K * B, p.issue_time0_us(K, B), p.capacity_bytes(K)
        sel = cmp[(cmp["producers"] == K) & (cmp["bytes_per_producer"] == B) & (cmp["mode"] != "isolated")]
        g_max = max(float(sel["gap_measured(us)"].max()) * 1.05, 1.0)
        for g in np.linspace(0.0, g_max, model_points):
            t_iss = periodic_issue_time_us(g, t0, V, R, Q)
            rows.append(("model", K, B, g, t_iss, t_iss + g))
            rows.append(("coupled model", K, B, g, np.nan, model.coupled_period_us(g, V, R)))
            rows.append(("model local", K, B, g, t0, t0 + g))
        parts.append(_measured_and_sim(sel, ("issue(us)", "period(us)")))
    cols = ["series", "producers", "bytes_per_producer", "gap(us)", "issue(us)", "period(us)"]
    out = pd.DataFrame(rows, columns=cols)
    if parts:
        measured = pd.concat(parts, ignore_index=True).drop(columns="gap(us)").rename(
            columns={"gap_measured(us)": "gap(us)"})
        out = pd.concat([out, measured[[*cols, "phase"]]], ignore_index=True)
    out.insert(3, "volume(MiB)", out["producers"] * out["bytes_per_producer"] / MiB)
    return out


def points_knee_frame(p: Platform, cmp: pd.DataFrame, *, model_points: int = 80) -> pd.DataFrame:
    """Fig. 3 c from points: isolated T_iss (aggregate) and its re-simulation per K, the Eq. 7 curve."""
    iso = cmp[cmp["mode"] == "isolated"]
    R, rows = p.drain_rate_Bpus, []
    for K in sorted({int(k) for k in iso["producers"]}):
        bs = iso.loc[iso["producers"] == K, "bytes_per_producer"]
        for B in np.geomspace(float(bs.min()), float(bs.max()), model_points):
            rows.append(("model", K, B, model.isolated_issue_time_us(p.issue_time0_us(K, B), K * B, R,
                                                                      p.capacity_bytes(K))))
    cols = ["series", "producers", "bytes_per_producer", "issue(us)"]
    out = pd.DataFrame(rows, columns=cols)
    if len(iso):
        out = pd.concat([out, _measured_and_sim(iso, ("issue(us)",))[cols]], ignore_index=True)
    out.insert(3, "volume(MiB)", out["producers"] * out["bytes_per_producer"] / MiB)
    return out


def points_drain_frame(p: Platform, cmp: pd.DataFrame) -> pd.DataFrame:
    """Fig. 3 d from points: the zero-gap (nominal) spin-gap periodic points -- lockstep (``hw``),
    free-running, aligned -- with their re-simulation, and the line V / R."""
    zero = cmp[(cmp["gap(us)"] == 0) & (cmp["mode"] != "isolated") & (cmp["gap_kind"] == "spin")]
    cols = ["series", "producers", "bytes_per_producer", "volume(MiB)", "period(us)"]
    v_max = float((zero["producers"] * zero["bytes_per_producer"]).max()) if len(zero) else 1.0 * MiB
    line = pd.DataFrame({"series": "model", "producers": 0, "bytes_per_producer": np.nan,
                         "volume(MiB)": np.linspace(0.0, v_max * 1.05, 40) / MiB})
    line["period(us)"] = line["volume(MiB)"] * MiB / p.drain_rate_Bpus
    if not len(zero):
        return line[cols]
    pts = _measured_and_sim(zero, ("period(us)",))
    pts = pts[(pts["series"] != "sim") | (pts["mode"] == "periodic")]   # one sim point per (K, B)
    pts["volume(MiB)"] = pts["producers"] * pts["bytes_per_producer"] / MiB
    return pd.concat([line, pts[cols]], ignore_index=True)


def calibration_frames(p: Platform, measured: pd.DataFrame | None = None, *, points: pd.DataFrame | None = None,
                       fast: bool = False) -> dict:
    """All frames of the calibration page. ``points``: a calibration folder's points.parquet (preferred);
    ``measured``: raw burst records (any number of files), used only without points."""
    if points is not None and len(points):
        cmp = compare_points(points, p, fast=fast)
        frames = {"gap_sweep": points_gap_sweep_frame(p, cmp), "knee": points_knee_frame(p, cmp),
                  "drain": points_drain_frame(p, cmp)}
        frames["params"] = pd.DataFrame([_params(p, frames, int(len(cmp)), "points.parquet (aggregate T_iss, period)")])
        frames["compare"] = cmp
        return frames
    hw = summarize_bursts(measured) if measured is not None and len(measured) else None
    kw = dict(sim_points=4) if fast else {}
    frames = {
        "gap_sweep": gap_sweep_frame(p, hw, sim_bursts=16 if fast else 40, **kw),
        "knee": knee_frame(p, hw, **({"sim_points": 5} if fast else {})),
        "drain": drain_frame(p, hw, sim_bursts=16 if fast else 40),
    }
    frames["params"] = pd.DataFrame([_params(p, frames, 0 if hw is None else int(len(hw)),
                                             "burst records (per-producer steady-state medians)" if hw is not None
                                             else "none")])
    if measured is not None and len(measured):
        frames["compare"] = compare_bursts(measured, p, max_bursts=100 if fast else 400)
    return frames


def _params(p: Platform, frames: dict, n_hw: int, source: str) -> dict:
    K = p.sm_count
    return {
        "platform": p.name, "target": p.target, "sm_count": K, "drain_rate_GBps": p.drain_rate_GBps,
        "T_iss0(us) at K=SMs, 32KiB": p.issue_time0_us(K, 32 * KiB),
        "Q(MiB) at K=SMs": p.capacity_bytes(K) / MiB,
        "sim drain fit (GB/s)": fit_drain_rate_GBps(frames["drain"], p, "sim"),
        "hw drain fit (GB/s)": fit_drain_rate_GBps(frames["drain"], p, "hw"),
        "hw experiments": n_hw,
        "hw source": source,
    }
