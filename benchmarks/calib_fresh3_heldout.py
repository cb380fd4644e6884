"""The ``fresh3`` calibration run (issue 15, session 8, cal5): the grid's design, and the pre-registered scores.

    python benchmarks/calib_fresh3_heldout.py design             # sweeps, capacity-limited ones, split, GPU time
    python benchmarks/calib_fresh3_heldout.py score --host DIR --local DIR [--json OUT] [--extra-seeds 1,2,3,4]
    python benchmarks/calib_fresh3_heldout.py posthoc-free [--json OUT]   # POST HOC: free-running bursts, Eq. 3 alone

Pre-registered in ``data/calibration-extra/fresh3-s8-preregistration.md`` (committed before the device run; the
commit is named in the records' provenance). Model ``two-stage-gated``; split ``pairs`` (``split_pairs``), fraction
0.3, seed 0 -- the defaults of ``xstage calibrate``. Scored, on lockstep periodic points (|rel err| median / p90 of
T_iss and period; free-running and isolated reported apart):

(a) ``own_split``: ``two-stage-gated`` (and ``v1``, for comparison) refitted on the fresh3 run's own fit half and
    judged on its held-out half -- what a user calibrating a new machine reads from ``xstage calibrate``;
(b) ``preregistered``: cal3's wide-fitted platforms (``h200-*-wide-two-stage-gated``, and v1's ``h200-*-wide``) on
    every fresh3 point (nothing of the fresh3 run fitted them).

``decision``: the pre-registered rule -- ``xstage calibrate`` defaults to ``two-stage-gated`` iff (a) with
``two-stage-gated`` at seed 0 has held-out T_iss and period median <= 5 % and p90 <= 15 % on host AND local (exact
comparisons, no rounding). ``--extra-seeds``: (a) again at other seeds, a secondary report, not part of the rule.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA, KEYS, load_points  # noqa: E402

from xstage.hw.calib import estimate  # noqa: E402
from xstage.hw.calib.calibrate import CalibConfig, plan_size  # noqa: E402
from xstage.hw.calib.grids import GRIDS, capacity_limited, grid_fields  # noqa: E402
from xstage.sim import fit as calib_fit  # noqa: E402
from xstage.sim.platform import Platform  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_split_platform, split_pairs  # noqa: E402
from xstage.units import KiB, MiB  # noqa: E402

TARGETS = {"host": "pcie-host", "local": "local"}
MODEL = "two-stage-gated"
PREREG = {"two-stage-gated": "h200-{t}-wide-two-stage-gated", "v1": "h200-{t}-wide"}
FRACTION, SEED = 0.3, 0
RULE_KEYS = (("median_rel_err_T_iss", 0.05), ("p90_rel_err_T_iss", 0.15), ("median_rel_err_period", 0.05),
             ("p90_rel_err_period", 0.15))
GATED_HOST = EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json"
# committed device runs (grid, target, wall_s of the sweep) for the GPU-time estimate
TIMED = (("wide", "host", "h200-pcie-host-wide"), ("wide", "local", "h200-local-wide"),
         ("fresh", "host", "h200-pcie-host-fresh"), ("fresh2", "host", "h200-pcie-host-fresh2"),
         ("fresh2", "local", "h200-local-fresh2"))


def design_points(grid: str) -> pd.DataFrame:
    """One row per (phase, K, B) of a grid's design (no measurement): what ``split_pairs`` reads."""
    g = GRIDS[grid]
    rows = [("rate", "periodic", k, b) for k in g["producers"] for b in g["sizes"]]
    rows += [("gap", "periodic", k, b) for k, b in g["gap_configs"]]
    rows += [("isolated", "isolated", k, b) for k in g["iso_producers"] for b in g["iso_sizes"]]
    return pd.DataFrame(rows, columns=["phase", "mode", "producers", "bytes_per_producer"])


def fitted_sweeps(grid: str, platform, seed: int, fraction: float = FRACTION) -> tuple[list, list]:
    """(fitted, held out) capacity-limited gap sweeps of ``grid`` under the ``pairs`` split at ``seed``."""
    pts = design_points(grid)
    split = split_pairs(pts, fraction, seed)
    held = {(int(k), int(b)) for k, b, s in zip(pts["producers"], pts["bytes_per_producer"], split) if s == "heldout"}
    cl = [p for p in GRIDS[grid]["gap_configs"] if capacity_limited(*p, platform)]
    return [p for p in cl if p not in held], [p for p in cl if p in held]


def kernel_seconds(grid: str, platform, target: str) -> tuple[float, int]:
    """(an estimate of the sweep's kernel time in s, its configurations): ``xstage.hw.calib.estimate.kernel_seconds``
    (moved there in session 19) on the grid's configuration."""
    cfg = CalibConfig(target=target, **grid_fields(grid))
    return estimate.kernel_seconds(cfg, platform), plan_size(cfg)


def _platform_for(target: str) -> Platform:
    return Platform.load(EXTRA / PREREG[MODEL].format(t=TARGETS[target]) / "platform.json")


def design() -> dict:
    """fresh3's sweeps and split (read from the design only) and its GPU time, estimated from the committed runs."""
    host = Platform.load(GATED_HOST)
    R = host.drain_rate_GBps * 1e3
    sweeps = [{"K": k, "B_KiB": b // KiB, "V_MiB": k * b / MiB, "V_minus_RT0_MiB": (k * b - R * host.issue_time0_us(k, b))
               / MiB, "Q_MiB": host.capacity_bytes(k) / MiB, "capacity_limited": capacity_limited(k, b, host)}
              for k, b in GRIDS["fresh3"]["gap_configs"]]
    counts = [len(fitted_sweeps("fresh3", host, s)[0]) for s in range(1000)]
    fit0, held0 = fitted_sweeps("fresh3", host, SEED)
    rows, walls = [], []
    for grid, target, folder in TIMED:                    # wall = c0 + c1 configurations + c2 kernel estimate
        ks, n = kernel_seconds(grid, _platform_for(target), target)
        _, meta = load_points(EXTRA / folder)
        rows.append((1.0, n, ks))
        walls.append(float(meta["wall_s"]))
    coef, *_ = np.linalg.lstsq(np.array(rows), np.array(walls), rcond=None)
    est = {}
    for target in TARGETS:
        ks, n = kernel_seconds("fresh3", _platform_for(target), target)
        est[target] = {"configurations": n, "kernel_estimate_s": ks, "wall_estimate_s": float(coef @ [1.0, n, ks])}
    return {"sweeps": sweeps, "n_capacity_limited": sum(s["capacity_limited"] for s in sweeps),
            "fit_half_capacity_limited_min_over_seeds_0_999": min(counts),
            "seed0_fitted": [[k, b // KiB] for k, b in fit0], "seed0_heldout": [[k, b // KiB] for k, b in held0],
            "time_model": {"coef": coef.tolist(), "fitted_on": [f for *_, f in TIMED], "wall_s": walls,
                           "predicted_s": (np.array(rows) @ coef).tolist()}, "estimate": est}


def own_split(points, target: str, model: str, seed: int) -> dict:
    split = split_pairs(points, FRACTION, seed)
    fitted, _ = fit_split_platform(points, split, name=f"fresh3-{model}", target=TARGETS[target], sm_count=132,
                                   capacity_law=capacity_law_of(model))
    _, s = check_and_summarize(points, fitted, split, fraction=FRACTION, seed=seed)
    return {**{f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS}, **{f"fit_{k}": s.get(f"fit_{k}") for k in KEYS},
            "heldout_pairs": s["split"]["heldout_pairs"], "rho_GBps": fitted.capacity_relax_GBps,
            "R_GBps": fitted.drain_rate_GBps, "seed": seed}


def score(points, target: str, extra_seeds=()) -> dict:
    res = {"preregistered": {}, "own_split": {}}
    if "split" in points:      # the device's recorded split must be the one scored
        recorded = points["split"].astype(str).to_numpy()
        res["recorded_split_matches"] = bool((recorded == split_pairs(points, FRACTION, SEED).to_numpy()).all())
    for model, folder in PREREG.items():
        platform = Platform.load(EXTRA / folder.format(t=TARGETS[target]) / "platform.json")
        errs = calib_fit.error_summary(calib_fit.model_check(points, platform))
        res["preregistered"][model] = {k: errs[k] for k in KEYS}
        res["own_split"][model] = own_split(points, target, model, SEED)
    res["own_split_extra_seeds"] = {str(s): own_split(points, target, MODEL, s) for s in extra_seeds}
    return res


def decide(result: dict) -> dict:
    """The pre-registered rule on (a) at seed 0, ``two-stage-gated``, host and local."""
    checks = {}
    for target in TARGETS:
        f = (result.get(target) or {}).get("own_split", {}).get(MODEL)
        for key, limit in RULE_KEYS:
            value = None if f is None else f.get(f"heldout_{key}")
            checks[f"{target}_{key}"] = {"value": value, "limit": limit,
                                         "met": value is not None and np.isfinite(value) and value <= limit}
    met = all(c["met"] for c in checks.values())
    return {"rule": "switch the default of `xstage calibrate` to --model two-stage-gated iff every check is met",
            "checks": checks, "met": met, "default": MODEL if met else "v1"}


def free_eq3_law(points, platform):
    """POST HOC (read from the fresh3 host records after the run): ``platform`` with a free-running issue law
    t_free fitted on ``points``' free-running bursts that the drain kept up with over one period,
    V/R <= (T + G) / 1.15 (a free burst after a gap longer than its drain time issues backpressure-free), and
    (t_free, n) -- or (platform unchanged, None) with too few such bursts."""
    from dataclasses import replace
    free = points[(points["mode"] == "free") & (points["T_iss(us)"] > 0)].dropna(subset=["T_iss(us)"])
    V = free["producers"].to_numpy(float) * free["bytes_per_producer"].to_numpy(float)
    kept_up = V / platform.drain_rate_Bpus <= (free["T_iss(us)"] + free["gap_measured(us)"].clip(lower=0)) / 1.15
    if kept_up.sum() < 3:
        return platform, None
    base = replace(platform, t_fixed_us=0.0, start_skew_us=None, free_t_fixed_us=None)
    sel = free[kept_up.to_numpy()]
    law = np.array([base.issue_time0_us(int(k), float(b)) for k, b in zip(sel["producers"], sel["bytes_per_producer"])])
    t_free = max(float(np.median(sel["T_iss(us)"].to_numpy(float) - law)), 0.0)
    return replace(platform, free_t_fixed_us=t_free), (t_free, int(kept_up.sum()))


def posthoc_free() -> dict:
    """POST HOC: free-running bursts predicted by Eq. 3 alone -- max(T_iss0,free, V/R - G), no capacity bound --
    against the model check's relaxing form, with cal3's gated platforms (wide fit half) on every point of each
    grid, and on fresh3's own split (t_free fitted on its fit half, judged on its held-out half)."""
    out = {}
    q = lambda e: {"median": float(np.median(np.abs(e))), "p90": float(np.percentile(np.abs(e), 90)),  # noqa: E731
                   "n": int(e.size)}
    for target, t in TARGETS.items():
        gated = Platform.load(EXTRA / PREREG[MODEL].format(t=t) / "platform.json")
        wide, _ = load_points(EXTRA / f"h200-{t}-wide")
        wide_fit = wide[wide["split"].astype(str) == "fit"] if "split" in wide else wide
        with_free, tf = free_eq3_law(wide_fit, gated)
        for grid in ("wide", "fresh", "fresh2", "fresh3"):
            pts, _ = load_points(EXTRA / f"h200-{t}-{grid}")
            c0 = calib_fit.model_check(pts[pts["mode"] == "free"], gated)
            c1 = calib_fit.model_check(pts[pts["mode"] == "free"], with_free)
            out.setdefault(target, {})[grid] = {
                "model_T_iss": q(c0["rel_err_T_iss"].to_numpy()), "eq3_T_iss": q(c0["rel_err_T_iss_eq3"].to_numpy()),
                "eq3_free_law_T_iss": q(c1["rel_err_T_iss_eq3"].to_numpy()),
                "model_period": q(c0["rel_err_period"].to_numpy()), "eq3_period": q(c0["rel_err_period_eq3"].to_numpy()),
                "eq3_free_law_period": q(c1["rel_err_period_eq3"].to_numpy()), "t_free_us_from_wide_fit_half": tf}
        pts, _ = load_points(EXTRA / f"h200-{t}-fresh3")
        split = split_pairs(pts, FRACTION, SEED).to_numpy()
        own, tf3 = free_eq3_law(pts[split == "fit"], gated)
        held = pts[(split == "heldout") & (pts["mode"] == "free").to_numpy()]
        c = calib_fit.model_check(held, own)
        out[target]["fresh3_own_split_heldout"] = {"eq3_free_law_T_iss": q(c["rel_err_T_iss_eq3"].to_numpy()),
                                                   "eq3_free_law_period": q(c["rel_err_period_eq3"].to_numpy()),
                                                   "model_T_iss": q(calib_fit.model_check(held, gated)[
                                                       "rel_err_T_iss"].to_numpy()), "t_free": tf3}
    return out


def _line(label, f, pre=""):
    return (f"{label:40s} T_iss {f[pre + 'median_rel_err_T_iss']:.1%} / {f[pre + 'p90_rel_err_T_iss']:.1%}  period "
            f"{f[pre + 'median_rel_err_period']:.1%} / {f[pre + 'p90_rel_err_period']:.1%}  free T_iss "
            f"{f[pre + 'free_median_rel_err_T_iss']:.1%} / {f[pre + 'free_p90_rel_err_T_iss']:.1%}  (n {f[pre + 'n_points']})")


def _write(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    tmp.replace(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("design", "score", "posthoc-free"))
    ap.add_argument("--host", type=Path, default=None)
    ap.add_argument("--local", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--extra-seeds", default="", help="comma-separated seeds for the secondary (a) report")
    args = ap.parse_args(argv)
    if args.action == "design":
        d = design()
        for s in d["sweeps"]:
            print(f"({s['K']:3d}, {s['B_KiB']:3d} KiB)  V {s['V_MiB']:6.2f} MiB  V - R T0 {s['V_minus_RT0_MiB']:6.2f}  "
                  f"Q(K) {s['Q_MiB']:.2f}  capacity-limited {s['capacity_limited']}")
        print(f"capacity-limited sweeps {d['n_capacity_limited']}; fitted under pairs at seed 0: {d['seed0_fitted']}, "
              f"held out {d['seed0_heldout']}; fewest fitted over seeds 0-999: "
              f"{d['fit_half_capacity_limited_min_over_seeds_0_999']}")
        tm = d["time_model"]
        print("time model wall = c0 + c1 n + c2 kernel:", [round(c, 4) for c in tm["coef"]], "measured",
              [round(w, 1) for w in tm["wall_s"]], "predicted", [round(w, 1) for w in tm["predicted_s"]])
        for t, e in d["estimate"].items():
            print(f"fresh3 {t}: {e['configurations']} configurations, kernel estimate {e['kernel_estimate_s']:.1f} s, "
                  f"sweep estimate {e['wall_estimate_s']:.0f} s")
        if args.json is not None:
            _write(args.json, d)
        return 0
    if args.action == "posthoc-free":
        r = posthoc_free()
        for target, by in r.items():
            for grid, f in by.items():
                print(f"{target:5s} {grid:26s} " + "  ".join(f"{k} {v['median']:.1%} / {v['p90']:.1%}" for k, v in f.items()
                                                            if isinstance(v, dict)) + f"  t_free {f.get('t_free') or f.get('t_free_us_from_wide_fit_half')}")
        if args.json is not None:
            _write(args.json, {"post_hoc": True, **r})
        return 0
    seeds = [int(s) for s in args.extra_seeds.split(",") if s.strip()]
    result = {"model": MODEL, "split": {"rule": "pairs", "fraction": FRACTION, "seed": SEED},
              "preregistered_platforms": PREREG}
    for target, folder in (("host", args.host), ("local", args.local)):
        if folder is None:
            continue
        points, meta = load_points(folder)
        r = result[target] = {"records": str(folder), "provenance": meta.get("provenance"),
                              **score(points, target, seeds)}
        for model, f in r["preregistered"].items():
            print(_line(f"{target} (b) preregistered {model}", f))
        for model, f in r["own_split"].items():
            print(_line(f"{target} (a) own split {model} seed {SEED}", f, "heldout_") + f"  rho {f['rho_GBps']}")
        for s, f in r["own_split_extra_seeds"].items():
            print(_line(f"{target} (a, secondary) {MODEL} seed {s}", f, "heldout_") + f"  rho {f['rho_GBps']}")
    result["decision"] = decide(result)
    print("decision:", "met -> default two-stage-gated" if result["decision"]["met"] else "not met -> default stays v1")
    if args.json is not None:
        _write(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
