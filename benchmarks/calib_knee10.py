"""Pooled host calibration against own-grid refits, what a fit half needs, and the noise floor (issue 15, session
10, knee10). POST HOC: every grid here was read before (docs/calibration/knee.md).

    python benchmarks/calib_knee10.py logo    [--json OUT] [--targets host,local]   # leave-one-grid-out
    python benchmarks/calib_knee10.py bracket [--json OUT]     # what each host fit half holds near the knee
    python benchmarks/calib_knee10.py noise   [--json OUT]     # the same (K, B, gap) measured twice
    python benchmarks/calib_knee10.py fresh10 --host DIR --local DIR [--json OUT]   # PRE-REGISTERED fresh10 score
    python benchmarks/calib_knee10.py misses [--host DIR] [--json OUT]   # post hoc: fresh10's held-out misses

``logo``: for each committed grid G and each split it is scored on (the recorded one; fresh3 and wide-3525cba also
``split_pairs`` seeds 1-4), ``two-stage-gated2`` is fitted three ways and judged on G's held-out half (lockstep
periodic |rel err| median / p90): ``own`` (G's fit half only: what a user with one grid gets), ``pooled`` (G's fit
half plus the recorded fit halves of every OTHER pooled grid: what ``xstage calibrate --refit --records A --pool B
--pool C`` gives) and ``others`` (the other grids' fit halves only: no point of G). The pooled grids are wide, fresh,
fresh2, fresh3, fresh5 (fresh5 on the flag build, docs/calibration/microbench-build.md); wide-3525cba (the same
grid as wide, fixed build) is scored with fresh, fresh2, fresh3 and fresh5 as its others (wide's pairs are its
own), and is never pooled into the five's fits.
``bracket``: per host fit half, the capacity-limited pairs (periodic, V - R T_iss0 > Q(K) under the committed
wide-fitted gated platform, ``grids.capacity_limited``) whose knee ratio (V - R T_iss0)/Q(K) lies in [0.7, 2] --
gap sweeps and plateau-only pairs, and at how many distinct K -- beside the own-split held-out T_iss p90.
``noise``: where the same (phase, K, B, gap step) was measured in wide and wide-3525cba, |T_a / T_b - 1|; and each
run's own trial spread (``T_iss_spread``: max / min - 1 over its trials): a floor under any model's p90.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA, load_points  # noqa: E402
from calib_issue_law import FRACTION, KEYS, TARGETS, recorded_split  # noqa: E402
from calib_knee import _write  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_platform, split_pairs  # noqa: E402

def _rel(path) -> str:
    """A folder as the records name it: relative to the checkout (``data/...``) where it lies inside it."""
    p, root = Path(path).resolve(), Path(__file__).resolve().parents[1]
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(path)


POOLED = ("wide", "fresh", "fresh2", "fresh3", "fresh5")
SCORED = POOLED + ("wide-3525cba",)
EXTRA_SEEDS = {"fresh3": (1, 2, 3, 4), "wide-3525cba": (1, 2, 3, 4)}
MODEL = "two-stage-gated2"
LO, HI = 0.7, 2.0                       # the knee band of (V - R T_iss0) / Q(K)


def grid_points(target: str, grid: str) -> pd.DataFrame:
    points, _ = load_points(EXTRA / f"h200-{TARGETS[target]}-{grid}")
    return points.reset_index(drop=True)


def splits_of(points, grid: str) -> list:
    rec, how = recorded_split(points)
    return [(how, rec)] + [(f"pairs seed {s}", split_pairs(points, FRACTION, s).reset_index(drop=True))
                           for s in EXTRA_SEEDS.get(grid, ())]


def fit_halves(parts) -> pd.DataFrame:
    """The ``fit`` rows of each (points, split), concatenated (a ``grid`` column names where each came from)."""
    return pd.concat([p[s.to_numpy() == "fit"].assign(grid=g) for g, p, s in parts], ignore_index=True)


def score_on(platform, points, split) -> dict:
    _, s = check_and_summarize(points, platform, split)
    return {f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS}


def split_of(points, rule: str, seed: int) -> pd.Series:
    """``recorded`` (the device's split), else ``split_by_rule(points, rule, 0.3, seed)``; index reset."""
    from xstage.sim.split_sweeps import split_by_rule
    if rule == "recorded":
        return recorded_split(points)[0]
    return split_by_rule(points, rule, FRACTION, seed).reset_index(drop=True)


def fit_model(frame, model: str, name: str, target: str = "host"):
    """``fit_platform`` of ``model``'s capacity law on ``frame``: (platform, fit)."""
    return fit_platform(frame, name=name, target=TARGETS[target], sm_count=132, capacity_law=capacity_law_of(model))


def refuse_existing(path: Path, who: str) -> None:
    """Stop where ``path`` exists (one line naming ``who`` and ``path`` on stderr, exit status 2, the project's status
    for bad input): records are never overwritten. The study scripts call it before their scoring, so a taken path
    fails at once, not after the fits."""
    if Path(path).exists():
        print(f"{who}: error: --json {path} exists; records are not overwritten (give a new path)", file=sys.stderr)
        raise SystemExit(2)


def write_new(path: Path, obj, who: str) -> None:
    """``obj`` as JSON at ``path`` (``.tmp`` then rename); an existing file is refused, never overwritten."""
    refuse_existing(path, who)
    _write(path, obj)


def record_main(argv, doc: str, who: str, make, needed=(), variants=None) -> int:
    """The command line of a scoring script: ``--json OUT`` (refused where it exists), every folder named in
    ``needed`` (under data/calibration-extra) committed, then ``make()`` written to OUT. Exit status 2 with one line
    on stderr otherwise. ``variants``: {flag: (help, make, needed)}, mutually exclusive flags that score another set
    of folders instead."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the record here (refuses an existing file)")
    if variants:   # an empty group breaks argparse's usage line (Python 3.11: "empty group")
        group = ap.add_mutually_exclusive_group()
        for flag, (text, *_) in variants.items():
            group.add_argument(flag, action="store_true", help=text)
    args = ap.parse_args(argv)
    for flag, (_, other_make, other_needed) in (variants or {}).items():
        if getattr(args, flag.lstrip("-").replace("-", "_")):
            make, needed = other_make, other_needed
    refuse_existing(args.json, who)
    missing = [f for f in needed if not (EXTRA / f / "points.parquet").is_file()]
    if missing:
        print(f"{who}: error: folder {missing[0]} is not committed yet (its device call has not run)", file=sys.stderr)
        return 2
    write_new(args.json, make(), who)
    return 0


def _fit(frame, target):
    fitted, _ = fit_platform(frame, name="knee10", target=TARGETS[target], sm_count=132,
                             capacity_law=capacity_law_of(MODEL))
    return fitted


def _law(p) -> dict:
    return {"R_GBps": p.drain_rate_GBps, "Q_shared_MiB": p.shared_capacity_bytes(1) / 2**20,
            "q_sm_KiB": None if p.sm_outstanding_bytes is None else p.sm_outstanding_bytes / 1024,
            "rho_GBps": p.capacity_relax_GBps, "t_fixed_us": p.t_fixed_us, "start_skew_us": p.start_skew_us}


def logo(targets=tuple(TARGETS), json_path=None, log=print) -> dict:
    out = {"post_hoc": True, "model": MODEL, "pooled_grids": list(POOLED), "rows": []}
    for target in targets:
        pts = {g: grid_points(target, g) for g in SCORED}
        rec = {g: recorded_split(pts[g])[0] for g in POOLED}
        for grid in SCORED:
            # wide-3525cba is wide's grid measured again: wide's pairs are its pairs, so wide is left out of its pool
            others = [(g, pts[g], rec[g]) for g in POOLED if g != grid and not (grid == "wide-3525cba" and g == "wide")]
            other_fit = _fit(fit_halves(others), target)
            for label, split in splits_of(pts[grid], grid):
                own = _fit(fit_halves([(grid, pts[grid], split)]), target)
                pooled = _fit(fit_halves(others + [(grid, pts[grid], split)]), target)
                for how, plat in (("own", own), ("pooled", pooled), ("others", other_fit)):
                    r = {"target": target, "grid": grid, "split": label, "fit": how, **score_on(plat, pts[grid], split),
                         **_law(plat)}
                    out["rows"].append(r)
                    log(f"{target:5s} {grid:12s} {label:13s} {how:6s} held-out T_iss "
                        f"{r['heldout_median_rel_err_T_iss']:.1%} / {r['heldout_p90_rel_err_T_iss']:.1%}  period "
                        f"{r['heldout_median_rel_err_period']:.1%} / {r['heldout_p90_rel_err_period']:.1%} "
                        f"(n {r['heldout_n_points']})  Q_sh {r['Q_shared_MiB']:.2f} q_sm {r['q_sm_KiB'] or 0:.1f} "
                        f"rho {r['rho_GBps'] or 0:.1f}", flush=True)
                _write(json_path, out)
    return out


def knee_pairs(points, split, ref) -> pd.DataFrame:
    """Per periodic (K, B) pair of a grid: its knee ratio under ``ref``, whether it has a gap sweep, its split."""
    per = points[points["mode"] == "periodic"].assign(split=split.to_numpy()[points["mode"].to_numpy() == "periodic"])
    rows = []
    for (k, b), g in per.groupby(["producers", "bytes_per_producer"]):
        k, b = int(k), int(b)
        ratio = (k * b - ref.drain_rate_GBps * 1e3 * ref.issue_time0_us(k, b)) / ref.capacity_bytes(k)
        rows.append({"K": k, "B_KiB": b / 1024, "ratio": ratio, "gap_sweep": bool((g["phase"] == "gap").any()),
                     "split": str(g["split"].iloc[0])})
    return pd.DataFrame(rows)


def bracket(json_path=None, log=print) -> dict:
    from xstage.sim.platform import Platform
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    out = {"post_hoc": True, "reference": "h200-pcie-host-wide-two-stage-gated", "band": [LO, HI], "runs": []}
    for grid in SCORED:
        pts = grid_points("host", grid)
        for label, split in splits_of(pts, grid):
            kp = knee_pairs(pts, split, ref)
            band = kp[(kp["ratio"] >= LO) & (kp["ratio"] <= HI)]
            fit, held = band[band["split"] == "fit"], band[band["split"] == "heldout"]
            r = {"grid": grid, "split": label,
                 "fit_knee_gap_sweeps": int(fit["gap_sweep"].sum()),
                 "fit_knee_gap_sweep_K": sorted({int(k) for k in fit[fit["gap_sweep"]]["K"]}),
                 "fit_knee_pairs": int(len(fit)), "fit_knee_K": sorted({int(k) for k in fit["K"]}),
                 "heldout_knee_pairs": int(len(held)),
                 "heldout_knee": [[int(k), float(b), round(float(q), 2)] for k, b, q in
                                  zip(held["K"], held["B_KiB"], held["ratio"])],
                 "fit_capacity_limited_pairs": int(((kp["ratio"] > 1) & (kp["split"] == "fit")).sum())}
            out["runs"].append(r)
            log(f"{grid:12s} {label:13s} fit half: {r['fit_knee_gap_sweeps']} knee gap sweeps at K "
                f"{r['fit_knee_gap_sweep_K']}, {r['fit_knee_pairs']} knee pairs at {len(r['fit_knee_K'])} K "
                f"{r['fit_knee_K']}; held-out knee pairs {r['heldout_knee']}")
    _write(json_path, out)
    return out


def noise(json_path=None, log=print) -> dict:
    from xstage.sim.platform import Platform
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    out = {"post_hoc": True, "pair": ["wide", "wide-3525cba"], "targets": {}}
    for target in TARGETS:
        a, b = (grid_points(target, g) for g in ("wide", "wide-3525cba"))
        key = ["phase", "mode", "producers", "bytes_per_producer"]
        for f in (a, b):
            f["step"] = f.groupby(key).cumcount()     # the n-th gap of a sweep (gaps are fractions of its period)
        m = a.merge(b, on=key + ["step"], suffixes=("_a", "_b"))
        m = m[(m["T_iss(us)_a"] > 0) & (m["T_iss(us)_b"] > 0)]
        m["d"] = (m["T_iss(us)_a"] / m["T_iss(us)_b"] - 1).abs()
        m["dp"] = (m["period(us)_a"] / m["period(us)_b"] - 1).abs()
        lock = m[m["mode"] == "periodic"]
        K = lock["producers"].to_numpy(int)
        B = lock["bytes_per_producer"].to_numpy(int)
        ratio = np.array([(k * bb - ref.drain_rate_GBps * 1e3 * ref.issue_time0_us(k, bb)) / ref.capacity_bytes(k)
                          for k, bb in zip(K, B)])
        knee = (ratio >= LO) & (ratio <= HI)
        q = lambda x: {"median": float(np.median(x)), "p90": float(np.percentile(x, 90)), "n": int(len(x))} \
            if len(x) else None   # noqa: E731
        spread = pd.concat([a, b])
        spread = spread[spread["mode"] == "periodic"]["T_iss_spread"].dropna().to_numpy(float)
        r = {"lockstep_T_iss": q(lock["d"].to_numpy()), "lockstep_period": q(lock["dp"].dropna().to_numpy()),
             "lockstep_T_iss_knee_band": q(lock["d"].to_numpy()[knee]),
             "lockstep_T_iss_outside_band": q(lock["d"].to_numpy()[~knee]),
             "trial_spread_lockstep": q(spread),
             "worst": [{"phase": p, "K": int(k), "B_KiB": bb / 1024, "step": int(s), "T_a": float(ta), "T_b": float(tb),
                        "ratio": round(float(rr), 2)}
                       for p, k, bb, s, ta, tb, rr in sorted(zip(lock["phase"], K, B, lock["step"], lock["T_iss(us)_a"],
                                                                 lock["T_iss(us)_b"], ratio),
                                                             key=lambda x: -abs(x[4] / x[5] - 1))[:12]]}
        out["targets"][target] = r
        log(f"{target}: lockstep T_iss |a/b - 1| {r['lockstep_T_iss']}; period {r['lockstep_period']}; knee band "
            f"{r['lockstep_T_iss_knee_band']}; outside {r['lockstep_T_iss_outside_band']}; trial spread "
            f"{r['trial_spread_lockstep']}")
    _write(json_path, out)
    return out


RULE_KEYS = (("median_rel_err_T_iss", 0.05), ("p90_rel_err_T_iss", 0.15), ("median_rel_err_period", 0.05),
             ("p90_rel_err_period", 0.15))
# the pool of the pre-registered fresh10 score: every committed lockstep grid of this machine measured with the build
# fresh10 is measured with (the same SASS: docs/calibration/microbench-build.md) -- fresh5, on the flag build, is not
POOL = ("wide", "fresh", "fresh2", "fresh3", "wide-3525cba")


def _refit(records: Path, target: str, seed: int, pool: bool) -> dict:
    """``xstage calibrate --refit --records RECORDS --model two-stage-gated2 [--pool ...]`` into a temporary folder
    (seed 0: the recorded split; else ``--heldout-fraction 0.3 --split-seed SEED``); its summary."""
    import tempfile
    from xstage.hw.calib import calibrate
    with tempfile.TemporaryDirectory() as tmp:
        return calibrate.refit(Path(tmp) / "o", records=records, model=MODEL,
                               split_args=None if seed == 0 else (FRACTION, seed),
                               pool=[EXTRA / f"h200-{TARGETS[target]}-{g}" for g in POOL] if pool else ())


def score_fresh10(host: Path, local: Path, seeds=(1, 2, 3, 4), log=print) -> dict:
    """PRE-REGISTERED (data/calibration-extra/knee10-preregistration.md): ``two-stage-gated2`` refitted on each
    fresh10 run's fit half (the recorded split: ``pairs``, 0.3, seed 0) pooled with the fit halves of the five
    committed grids of the same target in ``POOL`` (``--pool``), judged on the run's held-out half; four checks per
    target (T_iss and period median <= 5 %, p90 <= 15 %, exact comparisons). Secondary (decide nothing): the
    own-only refit (no pool) at seed 0, and both at ``split_pairs`` seeds 1-4."""
    out = {"post_hoc": False, "model": MODEL, "pool": list(POOL), "split": {"rule": "pairs", "fraction": FRACTION,
           "seed": 0}, "rows": [], "secondary_rows": []}
    for target, folder in (("host", host), ("local", local)):
        points, meta = load_points(folder)
        out[f"{target}_provenance"] = meta.get("provenance")
        if "split" in points:
            out[f"{target}_recorded_split_matches"] = bool(
                (points["split"].astype(str).to_numpy() == split_pairs(points, FRACTION, 0).to_numpy()).all())
        for seed in (0,) + tuple(seeds):
            for pool in (True, False):
                s = _refit(folder, target, seed, pool)
                r = {"target": target, "seed": seed, "fit": "pooled" if pool else "own",
                     **{f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS},
                     "R_GBps": s["R_GBps"], "Q_MiB_by_K": s["Q_MiB_by_K"], "rho_GBps": s.get("capacity_relax_GBps"),
                     "sm_outstanding_KiB": s.get("sm_outstanding_KiB"),
                     "pool": [dict(p, records=_rel(p["records"])) for p in s.get("pool") or []] or None}
                (out["rows"] if seed == 0 and pool else out["secondary_rows"]).append(r)
                log(f"{target:5s} fresh10 seed {seed} {r['fit']:6s} held-out T_iss "
                    f"{r['heldout_median_rel_err_T_iss']:.1%}"
                    f" / {r['heldout_p90_rel_err_T_iss']:.1%}  period {r['heldout_median_rel_err_period']:.1%} / "
                    f"{r['heldout_p90_rel_err_period']:.1%}  (n {r['heldout_n_points']})  rho {r['rho_GBps'] or 0:.1f}",
                    flush=True)
    checks = {}
    for r in out["rows"]:
        for key, limit in RULE_KEYS:
            v = r.get(f"heldout_{key}")
            checks[f"{r['target']}_{key}"] = {"value": v, "limit": limit,
                                              "met": v is not None and bool(np.isfinite(v)) and v <= limit}
    met = {t: all(c["met"] for k, c in checks.items() if k.startswith(t + "_")) for t in ("host", "local")}
    out["decision"] = {"rule": "per target: docs recommend --pool for a calibration of that target from a small grid "
                       "iff its four checks are met (pooled, seed 0)", "checks": checks, "met": met,
                       "recommend_pool": [t for t, m in met.items() if m]}
    log("four checks met:", met)
    return out


def misses(folder: Path, target: str = "host", seeds=(0, 1, 2, 3, 4), log=print) -> dict:
    """POST HOC, read after the pre-registered score: per held-out (K, B) pair of a run, the median rel. T_iss
    error of its lockstep periodic points under the pooled and the own-only refit at each seed, with the pair's knee
    ratio under the committed wide-fitted gated platform; and an in-sample bound -- the model fitted on EVERY point
    of the run (its held-out half included) -- judged on each seed's held-out points."""
    from xstage.sim.platform import Platform
    from xstage.sim import fit as calib_fit
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    points, _ = load_points(folder)
    points = points.reset_index(drop=True)
    pool = [(g, grid_points(target, g), recorded_split(grid_points(target, g))[0]) for g in POOL]
    everything = _fit(points.drop(columns=["split"], errors="ignore"), target)
    out = {"post_hoc": True, "records": _rel(folder), "rows": [], "in_sample": {}}
    for seed in seeds:
        split = recorded_split(points)[0] if seed == 0 else split_pairs(points, FRACTION, seed).reset_index(drop=True)
        held = {(int(k), int(b)) for k, b, s in zip(points["producers"], points["bytes_per_producer"], split)
                if s == "heldout"}
        mine = [(folder.name, points, split)]
        keep = [np.array([(int(k), int(b)) not in held for k, b in zip(p["producers"], p["bytes_per_producer"])])
                for _, p, _ in pool]      # as --pool: no pair held out of the run enters the fit
        pooled_parts = [(g, p[m].reset_index(drop=True), s[m].reset_index(drop=True))
                        for (g, p, s), m in zip(pool, keep)]
        fits = {"own": _fit(fit_halves(mine), target),
                "pooled": _fit(fit_halves(pooled_parts + mine), target),
                "in-sample": everything}
        for how, plat in fits.items():
            c = calib_fit.model_check(points, plat)
            c["split"] = split.to_numpy()
            c = c[(c["mode"] == "periodic") & (c["split"] == "heldout")]
            err = c["rel_err_T_iss"].abs().dropna().to_numpy(float)
            if how == "in-sample":
                out["in_sample"][f"seed {seed}"] = {"median": float(np.median(err)),
                                                    "p90": float(np.percentile(err, 90))}
            for (k, b), g in c.groupby(["producers", "bytes_per_producer"]):
                k, b = int(k), int(b)
                ratio = (k * b - ref.drain_rate_GBps * 1e3 * ref.issue_time0_us(k, b)) / ref.capacity_bytes(k)
                out["rows"].append({"seed": seed, "fit": how, "K": k, "B_KiB": b / 1024, "knee_ratio": round(ratio, 2),
                                    "n": int(len(g)), "gap_sweep": bool((g["phase"] == "gap").any()),
                                    "median_rel_err": float(g["rel_err_T_iss"].median()),
                                    "measured_us": float(g["T_iss(us)"].median()),
                                    "model_us": float(g["model_T_iss(us)"].median())})
        log(f"seed {seed}: in-sample held-out p90 {out['in_sample'][f'seed {seed}']['p90']:.1%}; pairs off > 15 %: " +
            "; ".join(f"{r['fit']} ({r['K']}, {r['B_KiB']:g}) r {r['knee_ratio']} {r['median_rel_err']:+.0%} n {r['n']}"
                      for r in out["rows"] if r["seed"] == seed and abs(r["median_rel_err"]) > 0.15), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("logo", "bracket", "noise", "fresh10", "misses"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--host", type=Path, default=EXTRA / "h200-pcie-host-fresh10")
    ap.add_argument("--local", type=Path, default=EXTRA / "h200-local-fresh10")
    ap.add_argument("--targets", default=",".join(TARGETS))
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    wrong = [t for t in targets if t not in TARGETS]
    if wrong:
        print(f"--targets: {wrong[0]!r} must be one of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    if args.action == "misses":
        _write(args.json, misses(args.host))
    elif args.action == "fresh10":
        for folder in (args.host, args.local):
            if not (folder / "points.parquet").is_file():
                print(f"--host/--local: {str(folder)!r} has no points.parquet", file=sys.stderr)
                return 2
        _write(args.json, score_fresh10(args.host, args.local))
    elif args.action == "logo":
        logo(targets, args.json)
    elif args.action == "bracket":
        bracket(args.json)
    else:
        noise(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
