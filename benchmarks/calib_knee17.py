"""``--model two-stage-lockq`` (knee17, issue 15, session 14): Q_shared, q_sm and rho read together from the lockstep
pairs by the model check, scored POST HOC on the committed grids (every one of them was read before the design;
docs/calibration/knee17.md).

    python benchmarks/calib_knee17.py posthoc --json OUT     # host 2 models x 16 fits, local 16 fits; ~6 min
    python benchmarks/calib_knee17.py fresh12 --json OUT     # POST HOC, after fresh12's pre-registered score; ~1 min

Each row: a model fitted on a grid's fit half (``calib_knee10.split_of``: ``bracket`` seeds 0-4 on fresh11 and
fresh10, the recorded split on the six earlier host grids), judged on its held-out lockstep periodic points
(``calib_knee14.judge``: T_iss and period |rel err| median / p90, the held-out pairs with a point off by > 15 %,
``xstage.sim.heldout_misses.missed_pairs``), with the fitted line and rho. ``all_four``: medians <= 0.05 and p90s
<= 0.15, the rule of fresh11's pre-registration. The JSON is written atomically and never overwrites a file.

``fresh12`` (post hoc, read after the pre-registered score of calib_fresh12.py; decides nothing): lockq fitted on
**every** fresh12 host point and judged on each ``bracket`` seed's held-out half (the upper bound of any own fit),
and the plateau and zero-gap T_iss of every lockstep pair at each K's knee (knee ratio 0.8-1.5 under the committed
wide-fitted gated platform), measured and as the seed-0 own fit and the every-point fit predict them.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, all_four  # noqa: E402
from calib_knee10 import fit_model, grid_points, refuse_existing, split_of, write_new  # noqa: E402
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


def fresh12(log=print) -> dict:
    from xstage.sim import fit as calib_fit
    from xstage.sim.platform import Platform
    pts = grid_points("host", "fresh12")
    every, _ = fit_model(pts, NEW, "knee17-every")
    rows = []
    for seed in range(5):
        j = judge(every, pts, split_of(pts, "bracket", seed))
        rows.append({"seed": seed, **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "misses": j["misses"]})
        log(f"every-point lockq, bracket {seed}: T_iss {j['heldout_median_rel_err_T_iss']:.1%} / "
            f"{j['heldout_p90_rel_err_T_iss']:.1%} misses {j['misses']}", flush=True)
    split0 = split_of(pts, "bracket", 0)
    own0, _ = fit_model(pts[split0.to_numpy() == "fit"], NEW, "knee17-own0")
    ref = Platform.load(Path(__file__).resolve().parents[1] / "data" / "calibration-extra"
                        / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    lock = pts[(pts["mode"] == "periodic") & pts["phase"].isin(("rate", "plateau"))]
    c_own, c_every = calib_fit.model_check(lock, own0), calib_fit.model_check(lock, every)
    knee = []
    for (k, b), g in lock.groupby(["producers", "bytes_per_producer"]):
        ratio = (k * b - ref.drain_rate_Bpus * ref.issue_time0_us(int(k), b)) / ref.capacity_bytes(int(k))
        if not 0.8 <= ratio <= 1.5:
            continue
        row = {"K": int(k), "B_KiB": int(b) // 1024, "knee_ratio": round(float(ratio), 3),
               "heldout_at_seeds": [s for s in range(5) if "heldout" in set(split_of(pts, "bracket", s)[g.index])]}
        for phase in ("plateau", "rate"):
            at = (g["phase"] == phase).to_numpy()
            idx = g.index[at]
            row[f"{phase}_T_iss_us"] = float(g.loc[idx, "T_iss(us)"].median())
            row[f"{phase}_own0_us"] = float(c_own.loc[lock.index.get_indexer(idx), "model_T_iss(us)"].median())
            row[f"{phase}_every_us"] = float(c_every.loc[lock.index.get_indexer(idx), "model_T_iss(us)"].median())
        row["T_iss0_own0_us"] = own0.issue_time0_us(int(k), b)
        knee.append(row)
        log(row, flush=True)
    lines = {name: {"Q_shared_MiB": p.shared_capacity_bytes(1) / 2**20, "q_sm_KiB": p.sm_outstanding_bytes / 1024,
                    "rho_GBps": p.capacity_relax_GBps} for name, p in (("own_bracket0", own0), ("every_point", every))}
    return {"every_point_fit": rows, "knee_pairs": knee, "lines": lines}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("posthoc", "fresh12"))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee17")
    if args.action == "fresh12":
        write_new(args.json, {"post_hoc": True, "note": "read after fresh12's pre-registered score; decides nothing",
                              "provenance": provenance(), **fresh12()}, "calib_knee17")
        return 0
    write_new(args.json, {"post_hoc": True, "note": "two-stage-lockq was designed after reading fresh10, fresh11 and "
                          "the wide grids; these scores test nothing fresh", "provenance": provenance(),
                          "rows": posthoc()}, "calib_knee17")
    return 0


if __name__ == "__main__":
    sys.exit(main())
