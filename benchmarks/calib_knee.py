"""The host path's soft capacity knee (issue 15, session 9, cal8): what the committed records show, and
``--model two-stage-gated3`` (gated2 with an exponentially relaxing capacity) beside ``two-stage-gated2``. POST HOC.

    python benchmarks/calib_knee.py bursts  [--json OUT]     # near-knee lockstep bursts, producer by producer
    python benchmarks/calib_knee.py pooled  [--json OUT]     # one capacity law for every host grid (~2 min)
    python benchmarks/calib_knee.py score   [--json OUT] [--targets host,local] [--grids wide,...] [--seeds 1,2,3,4]

``bursts``: the raw burst records (``bursts.parquet``: 4 producers of every run, trial 0) of the lockstep plateau and
gap runs near the knee -- the share of producer-bursts that issued backpressure-free (within 1.5x one producer's
own issue time, t_fixed + max(B - b0, 0)/P of the committed wide-fitted gated platform) and how long the others took,
beside the point's aggregate T_iss (max end - min start over all K producers).
``pooled``: each host grid's own-split ``two-stage-gated2`` fit (its T_iss0 law and R), and ONE capacity law
(Q_shared, q_sm, rho; linear or exponential relaxation) chosen for all five host grids at once by the sum of
min(|rel err|, 0.3) over every lockstep periodic point; then each run's held-out T_iss p90 with it -- what the
law's form can do when its parameters are right (an upper bound, fitted on the held-out points too).
``score``: ``two-stage-gated2`` and ``two-stage-gated3`` refitted on every committed grid's own fit half (the
recorded split; fresh3 also at ``split_pairs`` seeds 1-4) and judged on the held-out half: |rel err| median / p90
of T_iss and period on lockstep periodic points. Everything here is POST HOC: these records were read to choose
the model (docs/calibration/knee.md). ``score`` writes its JSON after every row, so it can run one grid at a time.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA, load_points  # noqa: E402
from calib_issue_law import FRACTION, KEYS, TARGETS, recorded_split, split_runs  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim import model_two_stage  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_split_platform, split_pairs  # noqa: E402
from xstage.units import KiB, MiB  # noqa: E402

GRIDS = ("wide", "fresh", "fresh2", "fresh3", "fresh5")
MODELS = ("two-stage-gated2", "two-stage-gated3")
RUNS = tuple((g, 0) for g in GRIDS) + tuple(("fresh3", s) for s in (1, 2, 3, 4))
# near-knee lockstep pairs read burst by burst: the held-out misses of docs/calibration/issue-law.md and fresh3.md,
# the "didn't fill" knee pairs, and two deep pairs for contrast
KNEE_PAIRS = (("fresh5", 124, 30), ("fresh5", 30, 68), ("fresh3", 88, 36), ("fresh3", 36, 56), ("fresh3", 26, 80),
              ("fresh3", 132, 36), ("fresh3", 64, 36), ("fresh3", 52, 36), ("fresh", 120, 40), ("fresh2", 104, 28),
              ("wide", 132, 32), ("fresh5", 76, 68), ("fresh5", 30, 200))


def _write(path, obj) -> None:
    if path is None:
        return
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(path)


# --- bursts -------------------------------------------------------------------------------------------

def knee_bursts(log=print) -> list:
    from xstage.sim.platform import Platform
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    rows = []
    for grid, K, BK in KNEE_PAIRS:
        folder = EXTRA / f"h200-pcie-host-{grid}"
        bursts, _ = load_records(folder / "bursts.parquet", "burst")
        points, _ = load_points(folder)
        for phase in ("plateau", "gap", "isolated"):
            b = bursts[(bursts["phase"] == phase) & (bursts["producers"] == K) & (bursts["bytes_per_producer"] == BK * KiB)]
            if b.empty:
                continue
            p = points[(points["phase"] == phase) & (points["producers"] == K) & (points["bytes_per_producer"] == BK * KiB)]
            issue = b["issue(us)"].to_numpy(float)
            fastest = ref.t_fixed_us + max(BK * KiB - (ref.store_buffer_bytes or 0.0), 0.0) / (ref.producer_issue_GBps * 1e3)
            stalled = issue[issue > 1.5 * fastest]
            ends = b.assign(end=b["start(us)"] + b["issue(us)"]).groupby(["gap(us)", "burst"])
            sampled = (ends["end"].max() - ends["start(us)"].min()).to_numpy(float)   # 4 producers' span per burst
            r = {"grid": grid, "K": K, "B_KiB": BK, "phase": phase, "producer_bursts": int(len(issue)),
                 "fastest_us": fastest, "share_backpressure_free": float(np.mean(issue <= 1.5 * fastest)),
                 "stalled_median_us": float(np.median(stalled)) if stalled.size else None,
                 "stalled_p90_us": float(np.percentile(stalled, 90)) if stalled.size else None,
                 "stalled_max_us": float(stalled.max()) if stalled.size else None,
                 "sampled_span_median_us": float(np.median(sampled)),
                 "point_T_iss_us": [float(x) for x in p["T_iss(us)"]],
                 "point_T_iss_producer_us": [float(x) for x in p["T_iss_producer(us)"]]}
            rows.append(r)
            log(f"{grid:6s} ({K:3d}, {BK:3d} KiB) {phase:8s} {r['share_backpressure_free']:5.0%} of {len(issue):4d} "
                f"producer-bursts free ({fastest:.2f} us alone); the rest median {r['stalled_median_us'] or 0:.1f} p90 "
                f"{r['stalled_p90_us'] or 0:.1f} max {r['stalled_max_us'] or 0:.1f} us; point T_iss median "
                f"{np.median(r['point_T_iss_us']):.1f} us (median producer {np.median(r['point_T_iss_producer_us']):.1f})")
    return rows


# --- pooled -------------------------------------------------------------------------------------------

def _lockstep(points, platform):
    per = points[(points["mode"] == "periodic") & points["T_iss(us)"].notna()]
    K = per["producers"].to_numpy(float)
    B = per["bytes_per_producer"].to_numpy(float)
    t0 = np.array([platform.issue_time0_us(int(k), b) for k, b in zip(K, B)])
    return {"K": K, "V": K * B, "t0": t0, "G": np.maximum(per["gap_measured(us)"].to_numpy(float), 0.0),
            "T": per["T_iss(us)"].to_numpy(float), "R": platform.drain_rate_Bpus, "index": per.index}


def _predict(d, q_shared, q_sm, rho, exponential):
    """The model check's lockstep form, max(T_iss0, V/R - G, relaxing Eq. 7), for arrays (``model_two_stage``)."""
    out = np.empty(len(d["T"]))
    for i, (k, v, t0, g) in enumerate(zip(d["K"], d["V"], d["t0"], d["G"])):
        Q = q_shared + k * q_sm
        iso = model_two_stage.relaxing_isolated_issue_time_us(t0, v, d["R"], Q, min(q_shared, Q), rho, exponential)
        out[i] = max(t0, v / d["R"] - g, iso)
    return out


def pooled(log=print) -> dict:
    data, splits = {}, {}
    for grid, seed in RUNS:
        points, _ = load_points(EXTRA / f"h200-pcie-host-{grid}")
        points = points.reset_index(drop=True)
        split = recorded_split(points)[0] if seed == 0 else split_pairs(points, FRACTION, seed).reset_index(drop=True)
        if seed == 0:
            fitted, _ = fit_split_platform(points, split, name="pooled", target="pcie-host", sm_count=132,
                                           capacity_law=capacity_law_of("two-stage-gated2"))
            data[grid] = _lockstep(points, fitted)
        splits[(grid, seed)] = split
    out = {"post_hoc": True, "loss": "sum of min(|rel err T_iss|, 0.3) over every lockstep periodic point of the five "
           "host grids", "laws": [], "end_occupancy_K132": []}
    for grid in ("wide", "fresh3"):                   # V - R T of K = 132 lockstep bursts the capacity held back
        d = data[grid]
        lim = (d["K"] == 132) & (d["T"] > 2 * d["t0"]) & (d["T"] > 1.15 * (d["V"] / d["R"] - d["G"]))
        for v, t in sorted(zip(d["V"][lim], d["T"][lim]), key=lambda x: x[1]):
            out["end_occupancy_K132"].append({"grid": grid, "V_MiB": v / MiB, "T_iss_us": t,
                                              "V_minus_RT_MiB": (v - d["R"] * t) / MiB})
    log("K = 132, V - R T (MiB) against T (us): " + ", ".join(f"{r['T_iss_us']:.0f}: {r['V_minus_RT_MiB']:.2f}"
                                                               for r in out["end_occupancy_K132"]))
    grid_q = np.linspace(0.6, 1.0, 9) * MiB
    grid_k = np.linspace(14, 24, 11) * KiB
    grid_r = np.geomspace(6e3, 45e3, 16)
    for exponential in (False, True):
        best = None
        for a in grid_q:
            for b in grid_k:
                for r in grid_r:
                    loss = sum(float(np.sum(np.minimum(np.abs(_predict(d, a, b, r, exponential) / d["T"] - 1), 0.3)))
                               for d in data.values())
                    if best is None or loss < best[0]:
                        best = (loss, a, b, r)
        loss, a, b, r = best
        law = {"relaxation": "exponential" if exponential else "linear", "Q_shared_MiB": a / MiB, "q_sm_KiB": b / KiB,
               "rho_GBps": r / 1e3, "loss": loss, "heldout_p90_rel_err_T_iss": {}, "heldout_pairs_over_15_percent": {}}
        for (grid, seed), split in splits.items():
            d = data[grid]
            held = split.to_numpy()[d["index"]] == "heldout"
            err = (_predict(d, a, b, r, exponential) / d["T"] - 1)[held]
            law["heldout_p90_rel_err_T_iss"][f"{grid} seed {seed}"] = float(np.percentile(np.abs(err), 90))
            over = pd.DataFrame({"K": d["K"][held].astype(int), "B_KiB": (d["V"][held] / d["K"][held] / KiB).round().astype(int),
                                 "err": err})
            over = over[over["err"].abs() > 0.15].groupby(["K", "B_KiB"])["err"].agg(["median", "size"])
            law["heldout_pairs_over_15_percent"][f"{grid} seed {seed}"] = [
                {"K": int(k), "B_KiB": int(bk), "median_rel_err": float(m), "n": int(n)} for (k, bk), (m, n) in over.iterrows()]
        out["laws"].append(law)
        log(f"{law['relaxation']:11s} Q_shared {a / MiB:.2f} MiB, q_sm {b / KiB:.1f} KiB, rho {r / 1e3:.1f} GB/s: "
            "held-out p90 " + ", ".join(f"{k} {v:.1%}" for k, v in law["heldout_p90_rel_err_T_iss"].items()))
    return out


# --- score --------------------------------------------------------------------------------------------

def own_split(points, split, target: str, model: str) -> dict:
    """``calib_issue_law.own_split``'s figures, and the fitted capacity law beside them."""
    fitted, _ = fit_split_platform(points, split, name=f"knee-{model}", target=TARGETS[target], sm_count=132,
                                   capacity_law=capacity_law_of(model))
    _, s = check_and_summarize(points, fitted, split)
    return {**{f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS}, **{f"fit_{k}": s.get(f"fit_{k}") for k in KEYS},
            "t_fixed_us": fitted.t_fixed_us, "producer_issue_GBps": fitted.producer_issue_GBps,
            "injection_GBps": fitted.injection_GBps, "start_skew_us": fitted.start_skew_us,
            "store_buffer_bytes": fitted.store_buffer_bytes, "rho_GBps": fitted.capacity_relax_GBps,
            "Q_shared_MiB": fitted.shared_capacity_bytes(1) / MiB,
            "q_sm_KiB": None if fitted.sm_outstanding_bytes is None else fitted.sm_outstanding_bytes / KiB,
            "capacity_relax_exponential": fitted.capacity_relax_exponential}


def score(targets, grids, seeds, models=MODELS, json_path=None, log=print) -> dict:
    out = {"post_hoc": True, "models": list(models), "split": {"rule": "pairs", "fraction": FRACTION,
           "seed 0": "the split the device recorded", "fresh3 extra seeds": list(seeds)}, "rows": []}
    if json_path is not None and Path(json_path).is_file():           # resume: keep the rows already written
        old = json.loads(Path(json_path).read_text())
        out["rows"] = [r for r in old.get("rows", [])
                       if not (r["target"] in targets and r["grid"] in grids and r["model"] in models)]
    for target in targets:
        for grid in grids:
            points, _ = load_points(EXTRA / f"h200-{TARGETS[target]}-{grid}")
            points = points.reset_index(drop=True)
            for label, sp in split_runs(points, grid, seeds):
                for model in models:
                    r = {"target": target, "grid": grid, "split": label, "model": model,
                         **own_split(points, sp, target, model)}
                    out["rows"].append(r)
                    log(f"{target:5s} {grid:6s} {label:13s} {model:17s} held-out T_iss "
                        f"{r['heldout_median_rel_err_T_iss']:.1%} / {r['heldout_p90_rel_err_T_iss']:.1%}  period "
                        f"{r['heldout_median_rel_err_period']:.1%} / {r['heldout_p90_rel_err_period']:.1%}  "
                        f"(n {r['heldout_n_points']})  rho {r['rho_GBps']}", flush=True)
                    _write(json_path, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("bursts", "pooled", "score"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--grids", default=",".join(GRIDS))
    ap.add_argument("--seeds", default="1,2,3,4", help="extra split_pairs seeds for fresh3")
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    grids = [g for g in args.grids.split(",") if g]
    for field, vals, allowed in (("--targets", targets, tuple(TARGETS)), ("--grids", grids, GRIDS)):
        wrong = [v for v in vals if v not in allowed]
        if wrong:
            print(f"{field}: {wrong[0]!r} must be one of {', '.join(allowed)}", file=sys.stderr)
            return 2
    try:
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
    except ValueError:
        print(f"--seeds: {args.seeds!r} must be comma-separated integers", file=sys.stderr)
        return 2
    if args.action == "bursts":
        _write(args.json, {"post_hoc": True, "pairs": knee_bursts()})
    elif args.action == "pooled":
        _write(args.json, pooled())
    else:
        score(targets, grids, seeds, json_path=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
