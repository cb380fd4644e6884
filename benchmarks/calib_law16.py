"""The consistent capacity read (``--model two-stage-gated2-cc``; issue 15, session 13, law16) against
``two-stage-gated2`` on the committed host and local grids. POST HOC: every grid here, fresh10 included, was read
before (docs/calibration/knee10.md ... law15.md); these figures decide only whether a fresh grid is measured, by the
rule committed before them (data/calibration-extra/law16-criterion.md, f24b9f9).

    python benchmarks/calib_law16.py score --target host --json OUT    # 3 models x 22 own fits; ~8 min on one core
    python benchmarks/calib_law16.py score --target local --json OUT   # 3 models x 7 recorded splits; ~3 min
    python benchmarks/calib_law16.py trace --json OUT    # fit halves only: Q(K), rho, the capacity read; ~5 min
    python benchmarks/calib_law16.py record --parts score-host.json score-local.json trace.json --json OUT

``score``: for each model, own fit half (``fit_platform`` on the split's ``fit`` points), judged on the held-out
lockstep periodic points (``calib_knee14.judge``); the runs are law15's (host: fresh10 under ``bracket`` seeds 0-4,
its recorded split and ``pairs`` seeds 1-4, the six other grids under their recorded split and ``bracket`` seed 0;
local: the seven grids' recorded splits). ``two-stage-gated2-span-cc`` is a diagnostic (the criterion says why).
``trace``: on the fit halves of fresh10 (``bracket`` seeds 0-4) and of the six host grids (recorded split), per
model: the issue law's terms, Q_shared, q_sm, rho, and each plateau point the issue fit leaves out (capacity-read or
trimmed) -- no held-out point. ``record``: the parts and the decision by the committed rule. Every action writes its
JSON atomically and refuses to overwrite a file.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import fit_halves, grid_points, split_of, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, fit_platform  # noqa: E402

NEW, REF, DIAG = "two-stage-gated2-cc", "two-stage-gated2", "two-stage-gated2-span-cc"
MODELS = (NEW, REF, DIAG)
# law15's runs and targets (calib_law15.py itself no longer imports: calib_knee14 lost _write_new in 2c3be33)
SEEDS = (0, 1, 2, 3, 4)
OTHERS = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba")
TARGETS = {"host": "pcie-host", "local": "local"}
TARGET_P90, TARGET_MEDIAN, SLACK = 0.15, 0.05, 0.005
HOST_RUNS = (tuple(("fresh10", "bracket", s) for s in SEEDS) + (("fresh10", "recorded", 0),)
             + tuple(("fresh10", "pairs", s) for s in SEEDS[1:])
             + tuple((g, "recorded", 0) for g in OTHERS) + tuple((g, "bracket", 0) for g in OTHERS))
LOCAL_RUNS = tuple((g, "recorded", 0) for g in OTHERS + ("fresh10",))
RULE = ("qualified iff (1) fresh10 host own fit under bracket (0.3) seeds 0-4: T_iss and period median <= 0.05 and "
        "p90 <= 0.15 at >= 4 of 5 seeds; (2) host wide, fresh, fresh2, fresh3, fresh5, wide-3525cba recorded split: "
        "the new model's T_iss p90 and period p90 each <= max(0.15, gated2's + 0.005) (a grid over 0.15 under gated2 "
        "need not come down); (3) local, the same six and fresh10, recorded split: T_iss p90 <= max(0.15, gated2's + "
        "0.005) (data/calibration-extra/law16-criterion.md, f24b9f9, committed before any held-out score)")


def _label(rule, seed) -> str:
    return "recorded" if rule == "recorded" else f"{rule} seed {seed}"


def _all_four(r) -> bool:
    return (r["heldout_median_rel_err_T_iss"] <= TARGET_MEDIAN and r["heldout_p90_rel_err_T_iss"] <= TARGET_P90
            and r["heldout_median_rel_err_period"] <= TARGET_MEDIAN and r["heldout_p90_rel_err_period"] <= TARGET_P90)


def _write_new(path, obj) -> None:
    write_new(path, obj, "calib_law16")


def fit(frame, model, target="host"):
    """``fit_platform`` for ``model`` (a name of ``MODELS``) on a points frame: (platform, fit)."""
    return fit_platform(frame, name="law16", target=TARGETS[target], sm_count=132,
                        capacity_law=capacity_law_of(model))


def score(target="host", models=MODELS, log=print) -> list:
    runs = HOST_RUNS if target == "host" else LOCAL_RUNS
    pts = {g: grid_points(target, g) for g in sorted({g for g, _, _ in runs})}
    rows = []
    for model in models:
        for grid, rule, seed in runs:
            split = split_of(pts[grid], rule, seed)
            plat, _ = fit(fit_halves([(grid, pts[grid], split)]), model, target)
            r = {"target": target, "model": model, "grid": grid, "split": _label(rule, seed),
                 "injection_GBps": plat.injection_GBps, **judge(plat, pts[grid], split)}
            rows.append(r)
            log(f"{target} {model:24s} {grid:12s} {r['split']:15s} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                f"{r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} / "
                f"{r['heldout_p90_rel_err_period']:.1%} (n {r['heldout_n_points']}) misses {r['misses']}", flush=True)
    return rows


def left_out(fit_dict) -> list:
    """The plateau points the last issue fit left out: [K, B KiB, T_iss us, 'capacity' or 'trimmed']."""
    ip = fit_dict["issue_points"]
    out = ip[(ip["phase"] == "plateau") & ~ip["in_issue_fit"]]
    return [[int(k), int(b) // 1024, round(float(t), 3), "capacity" if c else "trimmed"]
            for k, b, t, c in zip(out["producers"], out["bytes_per_producer"], out["T_iss(us)"],
                                  out["capacity_explained"])]


def trace(models=MODELS, log=print) -> list:
    runs = tuple(("fresh10", "bracket", s) for s in SEEDS) + tuple((g, "recorded", 0) for g in OTHERS)
    rows = []
    for grid, rule, seed in runs:
        pts = grid_points("host", grid)
        half = fit_halves([(grid, pts, split_of(pts, rule, seed))])
        for model in models:
            plat, f = fit(half, model)
            two = f["Q_two_stage"]
            r = {"grid": grid, "split": _label(rule, seed), "model": model, "t_fixed_us": plat.t_fixed_us,
                 "producer_issue_GBps": plat.producer_issue_GBps, "injection_GBps": plat.injection_GBps,
                 "start_skew_us": plat.start_skew_us, "store_buffer_bytes": plat.store_buffer_bytes,
                 "drain_rate_GBps": plat.drain_rate_GBps, "Q_shared_bytes": two["Q_shared_bytes"],
                 "q_sm_bytes": two["q_sm_bytes"], "rho_GBps": f["relax"]["rho_Bpus"] / 1e3,
                 "Q_per_K_bytes": {str(k): c["Q_bytes"] for k, c in f["Q"].items()},
                 "n_capacity_limited_excluded": f["T_iss0"]["n_capacity_limited_excluded"],
                 "plateau_left_out": left_out(f)}
            rows.append(r)
            small = [p for p in r["plateau_left_out"] if p[2] < 3]
            log(f"trace {grid:12s} {r['split']:15s} {model:24s} I {plat.injection_GBps} rho {r['rho_GBps']:.2f} "
                f"left out (< 3 us): {small}", flush=True)
    return rows


def decide(rows) -> dict:
    """The committed rule (``RULE``) on ``score``'s host and local rows."""
    by = {(r["target"], r["model"], r["grid"], r["split"]): r for r in rows}
    fresh10 = [by[("host", NEW, "fresh10", f"bracket seed {s}")] for s in SEEDS]
    met = [_all_four(r) for r in fresh10]
    host, local = {}, {}
    for g in OTHERS:
        new, ref = by[("host", NEW, g, "recorded")], by[("host", REF, g, "recorded")]
        checks = {}
        for key in ("p90_rel_err_T_iss", "p90_rel_err_period"):
            limit = max(TARGET_P90, ref[f"heldout_{key}"] + SLACK)
            checks[key] = {"new": new[f"heldout_{key}"], "gated2": ref[f"heldout_{key}"], "limit": limit,
                           "held": bool(new[f"heldout_{key}"] <= limit)}
        host[g] = checks
    for g in OTHERS + ("fresh10",):
        new, ref = by[("local", NEW, g, "recorded")], by[("local", REF, g, "recorded")]
        limit = max(TARGET_P90, ref["heldout_p90_rel_err_T_iss"] + SLACK)
        local[g] = {"new": new["heldout_p90_rel_err_T_iss"], "gated2": ref["heldout_p90_rel_err_T_iss"],
                    "limit": limit, "held": bool(new["heldout_p90_rel_err_T_iss"] <= limit)}
    ok1 = sum(met) >= 4
    ok2 = all(c["held"] for checks in host.values() for c in checks.values())
    ok3 = all(c["held"] for c in local.values())
    return {"rule": RULE, "model": NEW,
            "fresh10_bracket": {"T_iss_p90_by_seed": [r["heldout_p90_rel_err_T_iss"] for r in fresh10],
                                "all_four_by_seed": met, "seeds_met": int(sum(met)), "held": ok1},
            "host_recorded": host, "host_held": ok2, "local_recorded": local, "local_held": ok3,
            "qualified": bool(ok1 and ok2 and ok3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score", "trace", "record"))
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--target", choices=tuple(TARGETS), default="host", help="score: host or local")
    ap.add_argument("--parts", type=Path, nargs="*", default=(), help="record: the other actions' JSONs")
    args = ap.parse_args(argv)
    if args.json.exists():
        raise SystemExit(f"calib_law16: {args.json} exists; records are not overwritten (give a new path)")
    if args.action == "record":
        parts = [json.loads(p.read_text()) for p in args.parts]
        rows = [r for p in parts if p["action"] == "score" for r in p["result"]]
        rec = {"post_hoc": True, "note": __doc__.splitlines()[0], "provenance": provenance(),
               "decision": decide(rows), "score_rows": rows,
               "trace": [r for p in parts if p["action"] == "trace" for r in p["result"]],
               "parts_provenance": [{"action": p["action"], "target": p.get("target"), **p["provenance"]}
                                    for p in parts]}
        _write_new(args.json, rec)
        return 0
    result = score(args.target) if args.action == "score" else trace()
    _write_new(args.json, {"post_hoc": True, "action": args.action, "target": args.target,
                           "provenance": provenance(), "result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
