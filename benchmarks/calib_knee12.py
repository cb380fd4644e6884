"""A lockstep state carried burst to burst at the host path's knee (``--model two-stage-state``; issue 15, session 11,
knee12) against ``two-stage-gated2`` on the committed host grids. POST HOC: every grid here, fresh10 included, was
read before (docs/calibration/knee10.md, knee11.md); these figures decide only whether a fresh grid is measured.

    python benchmarks/calib_knee11.py logo --fits own --models two-stage-state --json OUT   # own fit half, 7 grids
    python benchmarks/calib_knee11.py fresh10 --models two-stage-state --json OUT          # the product, own / pooled
    python benchmarks/calib_knee12.py insample [--json OUT]   # fitted on every fresh10 point: the form's upper bound
    python benchmarks/calib_knee12.py misses   [--json OUT]   # fresh10 seeds 0-4, own fit: held-out pairs > 15 %
    python benchmarks/calib_knee12.py line     [--json OUT]   # the Q(K) line re-chosen by the check (two variants)
    python benchmarks/calib_knee12.py sweeps   [--json OUT]   # fresh10's knee gap sweeps, point by point (seed 0)
    python benchmarks/calib_knee12.py place    [--json OUT]   # the knee ratio of fresh10's knee pairs, fit by fit

``insample``: each model fitted on every fresh10 point (held-out halves included) and scored on the held-out half
of seeds 0 (recorded) to 4 -- what the form can do at best when the fit has seen everything. ``misses``: per
seed, the own fit's held-out lockstep pairs with a point off by > 15 %, with their knee ratio
(V - R T_iss0)/Q(K) under that fit. ``line``: after the ``two-stage-state`` fit, (Q_shared, q_sm) scaled over a
grid (0.6-1.4 x, 0.7-1.3 x) and w and rho re-chosen, all by the model check on the fitted lockstep points
(variant B); variant D the same with the relaxing floor held at the Eq. 7 fit's Q_shared (``capacity_floor_bytes``).
``sweeps``: fresh10's four gap sweeps below or at the knee, every point: measured T_iss against ``two-stage-gated2``
and ``two-stage-state`` fitted on the recorded fit half, and whether the path empties before the next start
(spin + b + T_iss0 >= V/R).
``place``: for each fit of ``two-stage-state`` (own fit half at seeds 0-4, and every fresh10 point), the knee ratio
(V - R T_iss0)/Q(K) of fresh10's pairs whose sweeps or plateaus sit at the knee, with w: which side of 1 - w and 1
the fit puts each one.
"""
import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee import _write  # noqa: E402
from calib_knee10 import fit_halves, fit_model, grid_points, score_on, split_of  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim import fit as calib_fit, fit_two_stage  # noqa: E402
from xstage.sim.fit_knee import CATCH_BANDS  # noqa: E402
from xstage.sim.fit_two_stage import check_loss  # noqa: E402
from xstage.sim.heldout_misses import missed_pairs  # noqa: E402

MODELS = ("two-stage-gated2", "two-stage-state")
SEEDS = (0, 1, 2, 3, 4)


def _split(points, seed):
    return split_of(points, "recorded" if seed == 0 else "pairs", seed)


def _fit(frame, model):
    return fit_model(frame, model, "knee12")[0]


def _figures(r) -> dict:
    return {k: r[k] for k in ("heldout_median_rel_err_T_iss", "heldout_p90_rel_err_T_iss",
                              "heldout_median_rel_err_period", "heldout_p90_rel_err_period", "heldout_n_points")}


def insample(models=MODELS, log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for model in models:
        plat = _fit(pts, model)
        for seed in SEEDS:
            r = {"model": model, "fit": "every fresh10 point", "split": f"seed {seed}",
                 **_figures(score_on(plat, pts, _split(pts, seed))), "band": plat.lockstep_catch_band}
            rows.append(r)
            log(f"insample {model:17s} seed {seed}: held-out T_iss p90 {r['heldout_p90_rel_err_T_iss']:.1%}",
                flush=True)
    return rows


def misses(model="two-stage-state", log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for seed in SEEDS:
        split = _split(pts, seed)
        plat = _fit(fit_halves([("fresh10", pts, split)]), model)
        R = plat.drain_rate_Bpus
        for k, b, g, e in missed_pairs(calib_fit.model_check(pts, plat), split):
            ratio = (k * b - R * float(g["T_iss0(us)"].iloc[0])) / float(g["Q(bytes)"].iloc[0])
            rows.append({"seed": seed, "model": model, "K": k, "B_KiB": b / 1024, "knee_ratio": float(ratio),
                         "points": int(len(e)), "over_15pct": int((np.abs(e) > 0.15).sum()),
                         "median_rel_err_T_iss": float(np.median(e)), "band": plat.lockstep_catch_band})
            log(f"misses seed {seed} ({k}, {b // 1024} KiB) ratio {ratio:.2f}: median {np.median(e):+.0%}, "
                f"{(np.abs(e) > 0.15).sum()} of {len(e)} > 15 %", flush=True)
    return rows


def _line_refit(points, plat, hold_floor: bool):
    rho, R = plat.capacity_relax_GBps * 1e3, plat.drain_rate_Bpus
    qsh0, qsm0 = plat.capacity_points[0][1], plat.sm_outstanding_bytes
    cur = replace(plat, capacity_floor_bytes=qsh0) if hold_floor else plat
    best = (check_loss(points, cur, rho), 1.0, 1.0)
    for _ in range(2):
        for a in np.linspace(0.6, 1.4, 9):
            for b in np.linspace(0.7, 1.3, 13):
                trial = replace(cur, capacity_points=((1, qsh0 * a),), sm_outstanding_bytes=qsm0 * b)
                value = check_loss(points, trial, rho)
                if value < best[0]:
                    best = (value, float(a), float(b))
        cur = replace(cur, capacity_points=((1, qsh0 * best[1]),), sm_outstanding_bytes=qsm0 * best[2])
        cur = replace(cur, lockstep_catch_band=min(CATCH_BANDS, key=lambda w: check_loss(
            points, replace(cur, lockstep_catch_band=w), rho)))
        rho = fit_two_stage.fit_relax_rate(lambda r: check_loss(points, cur, r), R)["rho_Bpus"]
        cur = replace(cur, capacity_relax_GBps=rho / 1e3)
        best = (check_loss(points, cur, rho), best[1], best[2])
    return cur, best


def line(log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for seed in SEEDS:
        split = _split(pts, seed)
        half = fit_halves([("fresh10", pts, split)])
        plat = _fit(half, "two-stage-state")
        for variant, hold in (("B: line by the check", False), ("D: line by the check, floor held", True)):
            p, best = _line_refit(half, plat, hold)
            r = {"variant": variant, "split": f"seed {seed}", **_figures(score_on(p, pts, split)),
                 "Q_shared_scale": best[1], "q_sm_scale": best[2], "band": p.lockstep_catch_band,
                 "rho_GBps": p.capacity_relax_GBps}
            rows.append(r)
            log(f"line {variant:34s} seed {seed}: held-out T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                f"{r['heldout_p90_rel_err_T_iss']:.1%}", flush=True)
    return rows


KNEE_SWEEPS = ((34, 44), (58, 36), (84, 26), (116, 26))     # fresh10's gap sweeps at knee ratio 0.8-1.0 (KiB)


def sweeps(log=print) -> list:
    pts = grid_points("host", "fresh10")
    split = _split(pts, 0)
    half = fit_halves([("fresh10", pts, split)])
    plats = {m: _fit(half, m) for m in MODELS}
    state = plats["two-stage-state"]
    checks = {m: calib_fit.model_check(pts, p) for m, p in plats.items()}
    rows = []
    for i, d in pts.iterrows():
        k, b = int(d["producers"]), int(d["bytes_per_producer"])
        if (k, b // 1024) not in KNEE_SWEEPS or d["mode"] != "periodic":
            continue
        t0, V, R = state.issue_time0_us(k, b), k * b, state.drain_rate_Bpus
        rows.append({"K": k, "B_KiB": b // 1024, "phase": d["phase"], "split": str(split.iloc[i]),
                     "spin(us)": float(d["gap(us)"]), "V/R(us)": V / R, "T_iss(us)": float(d["T_iss(us)"]),
                     "knee_ratio": (V - R * t0) / state.capacity_bytes(k),
                     "path_empties": bool(float(d["gap(us)"]) + state.lockstep_barrier_us + t0 >= V / R),
                     **{f"{m}(us)": float(c["model_T_iss(us)"].iloc[i]) for m, c in checks.items()}})
        r = rows[-1]
        log(f"({k:3d}, {b // 1024:2d} KiB) {r['phase']:7s} spin {r['spin(us)']:6.1f} measured {r['T_iss(us)']:6.2f} "
            f"gated2 {r['two-stage-gated2(us)']:6.2f} state {r['two-stage-state(us)']:6.2f} "
            f"empties {r['path_empties']}", flush=True)
    return rows


PLACE_PAIRS = ((9, 150), (34, 44), (58, 36), (58, 44), (84, 26), (84, 36), (116, 26), (116, 36))   # KiB


def place(log=print) -> list:
    pts = grid_points("host", "fresh10")
    fits = [(f"own, seed {s}", fit_halves([("fresh10", pts, _split(pts, s))])) for s in SEEDS]
    rows = []
    for label, frame in fits + [("every point", pts)]:
        p = _fit(frame, "two-stage-state")
        R = p.drain_rate_Bpus
        ratios = {f"({k}, {b})": (k * b * 1024 - R * p.issue_time0_us(k, b * 1024)) / p.capacity_bytes(k)
                  for k, b in PLACE_PAIRS}
        rows.append({"fit": label, "band": p.lockstep_catch_band, "R_GBps": p.drain_rate_GBps,
                     "Q_MiB_at_K": {k: p.capacity_bytes(k) / 2**20 for k in (9, 34, 58, 84, 116)}, "ratio": ratios})
        log(f"place {label:12s} w {p.lockstep_catch_band:.2f} " + " ".join(f"{k} {v:.2f}" for k, v in ratios.items()),
            flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("insample", "misses", "line", "sweeps", "place"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = {"insample": insample, "misses": misses, "line": line, "sweeps": sweeps,
            "place": place}[args.action]()
    _write(args.json, {"post_hoc": True, "action": args.action, "provenance": provenance(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
