"""An issue law for small B and a plateau knee placed by the fit half's own plateau pairs, on top of
``--model two-stage-lockq`` (knee20, issue 15, session 15). POST HOC: every grid scored here was read before; the
three candidates, the scoring and the decision rule were committed before any candidate was fitted
(docs/calibration/knee20.md, commit 7e6e6fd).

    python benchmarks/calib_knee20.py score --json OUT   # lockq + 3 candidates, 22 fit halves; ~3 min on 2 cores

Each candidate starts from the lockq platform the product fits on a split's fit half (``calib_knee10.fit_model``);
R, the free-running laws and every other field stay as lockq fitted them:

- ``affine``: T_iss0(K, B) = t_fixed + B/P + s (K - 1)/(K + 1) (no store buffer, no aggregate ceiling), least
  squares on relative residuals over the fit half's lockstep plateau points, each coefficient >= 0, with an
  unconditional one-sided trim (a point measured > ``TRIM`` x the law leaves the fit, drain seen or not) until
  stable; then lockq's line and rho re-chosen on it (``fit_knee.fit_lockstep_capacity`` from the Eq. 7 line, as
  ``platform_fit`` calls it).
- ``margin``: per fit-half lockstep plateau pair (median T), r = (V - R T_iss0)/Q(K) under the line; caught iff
  T > ``CAUGHT`` T_iss0; the line x f = sqrt(r_f r_c) (r_c the smallest caught r, r_f the largest free r below
  it; f = 1 where either is missing), then rho alone by lockq's pair-weighted loss with the line fixed.
- ``affine+margin``: ``affine``, then ``margin`` on its platform.

Scores: ``calib_knee14.judge`` on the held-out lockstep periodic points, ``calib_fresh11.all_four``; fresh11,
fresh12, fresh12-r2 and fresh10 under ``bracket`` seeds 0-4, fresh2 and fresh5 under their recorded split.
``decide``: the rule written in the page before scoring. The JSON is written atomically, never over a file.
"""
import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, all_four  # noqa: E402
from calib_knee10 import fit_model, grid_points, refuse_existing, split_of, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.fit import start_range  # noqa: E402
from xstage.sim.fit_knee import fit_lockstep_capacity, lockstep_issue_times_us  # noqa: E402
from xstage.sim.fit_two_stage import fit_relax_rate  # noqa: E402

MODEL = "two-stage-lockq"
CANDIDATES = ("lockq", "affine", "margin", "affine+margin")
TRIM = 1.3      # affine: a plateau point measured > 1.3 x the law is backpressured (platform_fit's first trim)
CAUGHT = 1.2    # margin: a plateau pair measured > 1.2 x T_iss0 is caught (knee19's plateau_free bound)
BRACKET_GRIDS = ("fresh11", "fresh12", "fresh12-r2", "fresh10")
RECORDED_GRIDS = ("fresh2", "fresh5")
DECIDING, SEEDS, SEEDS_NEEDED, SLACK = ("fresh11", "fresh12", "fresh12-r2"), (0, 1, 2, 3, 4), 4, 0.05
RULE = ("ready for a fresh test iff (i) all four checks (medians <= 0.05, p90s <= 0.15) at >= 4 of 5 bracket seeds "
        "on each of fresh11, fresh12 and fresh12-r2, and (ii) on every other row (fresh10 bracket 0-4, fresh2 and "
        "fresh5 recorded) T_iss p90 <= lockq's p90 on the same row + 0.05; the first ready of affine, margin, "
        "affine+margin is frozen (docs/calibration/knee20.md, committed at 7e6e6fd before any candidate was fitted)")


def _affine_lstsq(K, B, T) -> np.ndarray:
    """(t_fixed us, 1/P us per byte, s us) >= 0 minimising sum ((t + B/P + s (K-1)/(K+1) - T) / T)^2: least
    squares, a negative coefficient pinned at 0 and the rest refitted."""
    X = np.column_stack([np.ones_like(B), B, start_range(K)]) / T[:, None]
    free = [0, 1, 2]
    while True:
        coef = np.zeros(3)
        coef[free] = np.linalg.lstsq(X[:, free], np.ones_like(T), rcond=None)[0]
        if (coef >= 0).all():
            return coef
        free.remove(int(np.argmin(np.where(np.isin(range(3), free), coef, np.inf))))


def fit_affine_issue_law(K, B, T, trim: float = TRIM) -> dict:
    """``affine``: T_iss0 = t_fixed + B/P + s (K-1)/(K+1) on plateau points (K, B bytes, T us), trimmed
    one-sidedly at ``trim`` x the law until stable. Returns t_fixed_us, producer_issue_GBps, start_skew_us,
    n_points (kept) and trimmed ([K, B KiB, T us] of each point left out)."""
    K, B, T = (np.asarray(x, dtype=float) for x in (K, B, T))
    use = np.ones(len(T), dtype=bool)
    for _ in range(len(T)):
        if use.sum() < 3:
            raise ValueError(f"fit_affine_issue_law needs >= 3 untrimmed points, got {int(use.sum())}")
        t, inv_p, s = _affine_lstsq(K[use], B[use], T[use])
        keep = T <= trim * (t + B * inv_p + s * start_range(K))
        if (keep == use).all():
            break
        use = keep
    return {"t_fixed_us": float(t), "producer_issue_GBps": float(1e-3 / inv_p) if inv_p > 0 else float("inf"),
            "start_skew_us": float(s), "n_points": int(use.sum()),
            "trimmed": [[int(k), int(b) // 1024, round(float(x), 3)] for k, b, x in zip(K[~use], B[~use], T[~use])]}


def with_issue_law(platform, law: dict):
    """``platform`` with the affine issue law in place of its own (no store buffer, ceiling or SM stage)."""
    return replace(platform, t_fixed_us=law["t_fixed_us"], producer_issue_GBps=law["producer_issue_GBps"],
                   start_skew_us=law["start_skew_us"], start_skew_points=None, store_buffer_bytes=0.0,
                   injection_GBps=None, skew_overlaps_ceiling=True, sm_store_GBps=None)


def with_line(platform, q_shared: float, q_sm: float, rho_Bpus: float):
    """``platform`` with lockq's capacity: Q(K) = q_shared + K q_sm (bytes) relaxing at rho (bytes/us)."""
    return replace(platform, capacity_points=((1, max(q_shared, 1.0)),), sm_outstanding_bytes=q_sm,
                   capacity_relax_GBps=rho_Bpus / 1e3)


def _lockstep(points: pd.DataFrame) -> pd.DataFrame:
    lock = points[points["mode"] == "periodic"].dropna(subset=["T_iss(us)"])
    return lock[lock["T_iss(us)"] > 0]


def lockq_loss(points: pd.DataFrame, platform, rho_Bpus: float) -> float:
    """lockq's own figure of merit (``fit_lockstep_capacity``'s loss) with the platform's line and rho =
    ``rho_Bpus``: pair-weighted squared relative T_iss error over the lockstep periodic points."""
    lock = _lockstep(points)
    K, B = lock["producers"].to_numpy(float), lock["bytes_per_producer"].to_numpy(float)
    T0 = np.array([platform.issue_time0_us(int(k), b) for k, b in zip(K, B)])
    G = np.maximum(lock["gap_measured(us)"].to_numpy(float), 0.0)
    T = lock["T_iss(us)"].to_numpy(float)
    w = 1.0 / lock.groupby(["producers", "bytes_per_producer"])["T_iss(us)"].transform("size").to_numpy(float)
    model = lockstep_issue_times_us(K, K * B, T0, G, platform.drain_rate_Bpus, platform.shared_capacity_bytes(1),
                                    platform.sm_outstanding_bytes, rho_Bpus)
    return float(np.sum(w * ((model - T) / T) ** 2))


def knee_margin(points: pd.DataFrame, platform, caught: float = CAUGHT) -> dict:
    """``margin``: the factor f on the line that puts the knee midway (geometric) between the largest free and the
    smallest caught knee ratio r = (V - R T_iss0)/Q(K) of the lockstep plateau pairs in ``points``."""
    lock = _lockstep(points)
    plateau = lock[lock["phase"] == "plateau"]
    pairs = []
    for (k, b), g in plateau.groupby(["producers", "bytes_per_producer"]):
        t0 = platform.issue_time0_us(int(k), float(b))
        r = (k * b - platform.drain_rate_Bpus * t0) / platform.capacity_bytes(int(k))
        T = float(g["T_iss(us)"].median())
        if r > 0:
            pairs.append({"K": int(k), "B_KiB": int(b) // 1024, "r": float(r), "caught": bool(T > caught * t0)})
    r_c = min((p["r"] for p in pairs if p["caught"]), default=None)
    r_f = max((p["r"] for p in pairs if not p["caught"] and (r_c is None or p["r"] < r_c)), default=None)
    f = 1.0 if r_c is None or r_f is None else float(np.sqrt(r_f * r_c))
    return {"factor": f, "r_free": r_f, "r_caught": r_c, "pairs": pairs}


def candidate(name: str, fit_half: pd.DataFrame, lockq, fit: dict):
    """(platform, info) of candidate ``name`` from lockq's fit on ``fit_half`` (``fit``: its fit dict)."""
    plat, info = lockq, {}
    if name in ("affine", "affine+margin"):
        pl = fit_half[(fit_half["phase"] == "plateau") & (fit_half["mode"] == "periodic")]
        pl = pl[pl["T_iss(us)"] > 0]
        law = fit_affine_issue_law(pl["producers"], pl["bytes_per_producer"], pl["T_iss(us)"])
        two = fit["Q_two_stage"]   # the Eq. 7 line platform_fit hands fit_lockstep_capacity (its grid's range)
        stage = with_line(with_issue_law(lockq, law), two["Q_shared_bytes"], two["q_sm_bytes"], 1.0)
        lq = fit_lockstep_capacity(fit_half, stage)
        plat = with_line(stage, lq["Q_shared_bytes"], lq["q_sm_bytes"], lq["rho_Bpus"])
        info["issue_law"] = law
    if name in ("margin", "affine+margin"):
        m = knee_margin(fit_half, plat)
        info["margin"] = {k: v for k, v in m.items() if k != "pairs"}
        if m["factor"] != 1.0:
            scaled = with_line(plat, m["factor"] * plat.shared_capacity_bytes(1),
                               m["factor"] * plat.sm_outstanding_bytes, plat.capacity_relax_GBps * 1e3)
            rho = fit_relax_rate(lambda r: lockq_loss(fit_half, scaled, r), plat.drain_rate_Bpus)
            plat = with_line(scaled, scaled.shared_capacity_bytes(1), scaled.sm_outstanding_bytes, rho["rho_Bpus"])
    return plat, info


def score_split(grid: str, rule: str, seed: int, points: pd.DataFrame, log=print) -> list:
    """lockq fitted on the split's fit half; each candidate's held-out figures (``judge``)."""
    split = split_of(points, rule, seed)
    half = points[split.to_numpy() == "fit"]
    lockq, fit = fit_model(half, MODEL, "knee20")
    rows = []
    for name in CANDIDATES:
        plat, info = candidate(name, half, lockq, fit)
        j = judge(plat, points, split)
        r = {"grid": grid, "rule": rule, "seed": seed, "candidate": name,
             **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "heldout_n_points": j["heldout_n_points"],
             "misses": j["misses"], "Q_shared_MiB": plat.shared_capacity_bytes(1) / 2**20,
             "q_sm_KiB": plat.sm_outstanding_bytes / 1024, "rho_GBps": plat.capacity_relax_GBps,
             "T_iss0_us": {f"{k},{b}": round(plat.issue_time0_us(k, b * 1024), 4)
                           for k, b in ((17, 14), (68, 20), (100, 14), (68, 32))}, **info}
        r["all_four"] = all_four(r)
        rows.append(r)
        log(f"{grid:10s} {rule:8s} {seed} {name:13s} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
            f"{r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} / "
            f"{r['heldout_p90_rel_err_period']:.1%} {'met' if r['all_four'] else 'not met'} misses {r['misses']}",
            flush=True)
    return rows


RUNS = (tuple((g, "bracket", s) for g in BRACKET_GRIDS for s in SEEDS)
        + tuple((g, "recorded", 0) for g in RECORDED_GRIDS))


def score(runs=RUNS, log=print) -> list:
    pts = {g: grid_points("host", g) for g in {g for g, _, _ in runs}}
    return [r for grid, rule, seed in runs for r in score_split(grid, rule, seed, pts[grid], log)]


def decide(rows) -> dict:
    """The rule written before scoring (``RULE``), per candidate."""
    key = {(r["candidate"], r["grid"], r["rule"], r["seed"]): r for r in rows}
    out = {"rule": RULE, "per_candidate": {}}
    for name in CANDIDATES[1:]:
        met = {g: int(sum(key[(name, g, "bracket", s)]["all_four"] for s in SEEDS)) for g in DECIDING}
        guard = []
        for (c, g, rule, s), r in key.items():
            if c == name and g not in DECIDING:
                ref = key[("lockq", g, rule, s)]["heldout_p90_rel_err_T_iss"]
                guard.append({"grid": g, "rule": rule, "seed": s, "p90": r["heldout_p90_rel_err_T_iss"],
                              "lockq_p90": ref, "held": bool(r["heldout_p90_rel_err_T_iss"] <= ref + SLACK)})
        out["per_candidate"][name] = {"seeds_met": met, "guard": guard,
                                      "ready": bool(all(v >= SEEDS_NEEDED for v in met.values())
                                                    and all(x["held"] for x in guard))}
    out["lockq_seeds_met"] = {g: int(sum(key[("lockq", g, "bracket", s)]["all_four"] for s in SEEDS))
                              for g in DECIDING}
    out["frozen"] = next((n for n in CANDIDATES[1:] if out["per_candidate"][n]["ready"]), None)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score",))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee20")
    rows = score()
    write_new(args.json, {"post_hoc": True, "note": "every grid here was read before; the candidates and the rule "
                          "were committed before any candidate was fitted (7e6e6fd)", "provenance": provenance(),
                          "read": ["docs/calibration/knee17.md", "knee18.md", "knee19.md", "fresh11.md",
                                   "docs/calibration.md", "data/calibration-extra/knee19-posthoc.json",
                                   "fresh12 host points (plateau, isolated)", "lockq's fits on fresh12 bracket 0-4"],
                          "model": MODEL, "candidates": list(CANDIDATES), "decision": decide(rows), "rows": rows},
              "calib_knee20")
    return 0


if __name__ == "__main__":
    sys.exit(main())
