"""``--model two-stage-lockq`` (knee17, issue 15, session 14): Q_shared, q_sm and rho read together from the lockstep
pairs by the model check, scored POST HOC on the committed grids (every one of them was read before the design;
docs/calibration/knee17.md).

    python benchmarks/calib_knee17.py posthoc --json OUT     # host 2 models x 16 fits, local 16 fits; ~6 min

Each row: a model fitted on a grid's fit half (``calib_knee10.split_of``: ``bracket`` seeds 0-4 on fresh11 and
fresh10, the recorded split on the six earlier host grids), judged on its held-out lockstep periodic points
(``calib_knee14.judge``: T_iss and period |rel err| median / p90, the held-out pairs with a point off by > 15 %,
``calib_knee10.missed_pairs``), with the fitted line and rho. ``all_four``: medians <= 0.05 and p90s <= 0.15,
the rule of fresh11's pre-registration. The JSON is written atomically and never overwrites a file.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, all_four  # noqa: E402
from calib_knee10 import fit_model, grid_points, split_of, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

NEW, BASE = "two-stage-lockq", "two-stage-gated2-span-cc"
BRACKET = ("fresh11", "fresh10")
RECORDED = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba")
RUNS = tuple((g, "bracket", s) for g in BRACKET for s in range(5)) + tuple((g, "recorded", 0) for g in RECORDED)
MODELS = {"host": (NEW, BASE), "local": (NEW,)}


def one(target: str, model: str, grid: str, rule: str, seed: int, points) -> dict:
    split = split_of(points, rule, seed)
    plat, fit = fit_model(points[split.to_numpy() == "fit"], model, "knee17", target)
    j = judge(plat, points, split)
    r = {"target": target, "model": model, "grid": grid, "rule": rule, "seed": seed,
         **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "heldout_n_points": j["heldout_n_points"],
         "misses": j["misses"], "Q_shared_MiB": plat.shared_capacity_bytes(1) / 2**20,
         "q_sm_KiB": plat.sm_outstanding_bytes / 1024, "rho_GBps": plat.capacity_relax_GBps,
         "injection_GBps": plat.injection_GBps}
    r["all_four"] = all_four(r)
    return r


def posthoc(log=print) -> list:
    rows = []
    for target, models in MODELS.items():
        pts = {g: grid_points(target, g) for g in BRACKET + RECORDED}
        for model in models:
            for grid, rule, seed in RUNS:
                r = one(target, model, grid, rule, seed, pts[grid])
                rows.append(r)
                log(f"{target:5s} {model:24s} {grid:12s} {rule:8s} {seed} T_iss {r['heldout_median_rel_err_T_iss']:.1%}"
                    f" / {r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} / "
                    f"{r['heldout_p90_rel_err_period']:.1%} (n {r['heldout_n_points']}) Q_shared "
                    f"{r['Q_shared_MiB']:.3f} MiB q_sm {r['q_sm_KiB']:.1f} KiB rho {r['rho_GBps']:.1f} GB/s "
                    f"{'met' if r['all_four'] else 'not met'} misses {r['misses']}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("posthoc",))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.json.exists():
        raise SystemExit(f"calib_knee17: {args.json} exists; records are not overwritten (give a new path)")
    write_new(args.json, {"post_hoc": True, "note": "two-stage-lockq was designed after reading fresh10, fresh11 and "
                          "the wide grids; these scores test nothing fresh", "provenance": provenance(),
                          "rows": posthoc()}, "calib_knee17")
    return 0


if __name__ == "__main__":
    sys.exit(main())
