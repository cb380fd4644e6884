"""Two knee laws against ``two-stage-gated2`` on the committed host grids (issue 15, session 10, knee11). POST HOC:
every grid here, fresh10 included, was read before (docs/calibration/knee10.md); these figures choose nothing.

    python benchmarks/calib_knee11.py logo    [--json OUT] [--models a,b] [--target host]   # leave-one-grid-out
    python benchmarks/calib_knee11.py fresh10 [--json OUT] [--models a,b] [--target host]   # product refits

``logo``: for each committed grid G of ``GRIDS`` (fresh10 now among them) and each split it is scored on (the
recorded one; fresh10 also ``split_pairs`` seeds 1-4), each model is fitted three ways and judged on G's held-out
lockstep periodic points, as ``calib_knee10.logo``: ``own`` (G's fit half), ``pooled`` (G's fit half + the recorded
fit halves of every other grid of ``POOLED``; wide-3525cba, wide's grid measured again, is never pooled, and wide is
left out of its pool) and ``others`` (the others only).
``fresh10``: the product, ``calibrate.refit(records, model=M[, pool=...])`` on fresh10 at seeds 0 (the recorded
split) and 1-4 (``--heldout-fraction 0.3 --split-seed S``), own and pooled with knee10's pre-registered pool.
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA  # noqa: E402
from calib_issue_law import FRACTION, KEYS, TARGETS, recorded_split  # noqa: E402
from calib_knee import _write  # noqa: E402
from calib_knee10 import POOL, fit_halves, grid_points, score_on  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, fit_platform, split_pairs  # noqa: E402

MODELS = ("two-stage-gated2", "two-stage-knee", "two-stage-knee2")
GRIDS = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "fresh10", "wide-3525cba")
POOLED = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "fresh10")
EXTRA_SEEDS = {"fresh10": (1, 2, 3, 4)}


def _fit(frame, target, model):
    fitted, _ = fit_platform(frame, name="knee11", target=TARGETS[target], sm_count=132,
                             capacity_law=capacity_law_of(model))
    return fitted


def _law(p) -> dict:
    return {"R_GBps": p.drain_rate_GBps, "rho_GBps": p.capacity_relax_GBps,
            "Q_MiB_at_K": {k: p.capacity_bytes(k) / 2**20 for k in (9, 34, 58, 84, 116, 132)},
            "floor_MiB": p.queue_options(132)["floor_bytes"] / 2**20 if p.relaxing else None}


def _line(r) -> str:
    return (f"{r['target']:5s} {r['model']:17s} {r['grid']:12s} {r['split']:13s} {r['fit']:6s} held-out T_iss "
            f"{r['heldout_median_rel_err_T_iss']:.1%} / {r['heldout_p90_rel_err_T_iss']:.1%}  period "
            f"{r['heldout_median_rel_err_period']:.1%} / {r['heldout_p90_rel_err_period']:.1%} "
            f"(n {r['heldout_n_points']})")


def logo(models=MODELS, target="host", json_path=None, log=print, fits=("own", "pooled", "others")) -> dict:
    out = {"post_hoc": True, "models": list(models), "grids": list(GRIDS), "pooled_grids": list(POOLED),
           "fits": list(fits), "rows": []}
    pts = {g: grid_points(target, g) for g in GRIDS}
    rec = {g: recorded_split(pts[g])[0] for g in GRIDS}
    for model in models:
        for grid in GRIDS:
            others = [(g, pts[g], rec[g]) for g in POOLED if g != grid and not (grid == "wide-3525cba" and g == "wide")]
            other_fit = _fit(fit_halves(others), target, model) if "others" in fits else None
            splits = [("recorded", rec[grid])] + [(f"pairs seed {s}", split_pairs(pts[grid], FRACTION, s)
                                                   .reset_index(drop=True)) for s in EXTRA_SEEDS.get(grid, ())]
            for label, split in splits:
                plats = {"own": lambda: _fit(fit_halves([(grid, pts[grid], split)]), target, model),
                         "pooled": lambda: _fit(fit_halves(others + [(grid, pts[grid], split)]), target, model),
                         "others": lambda: other_fit}
                for how in fits:
                    plat = plats[how]()
                    r = {"target": target, "model": model, "grid": grid, "split": label, "fit": how,
                         **score_on(plat, pts[grid], split), **_law(plat)}
                    out["rows"].append(r)
                    log(_line(r), flush=True)
                _write(json_path, out)
    return out


def fresh10(models=MODELS, target="host", seeds=(0, 1, 2, 3, 4), json_path=None, log=print) -> dict:
    from xstage.hw.calib import calibrate
    folder = EXTRA / f"h200-{TARGETS[target]}-fresh10"
    out = {"post_hoc": True, "records": str(folder.relative_to(EXTRA.parents[1])), "pool": list(POOL), "rows": []}
    for model in models:
        for seed in seeds:
            for pool in (False, True):
                with tempfile.TemporaryDirectory() as tmp:
                    s = calibrate.refit(Path(tmp) / "o", records=folder, model=model,
                                        split_args=None if seed == 0 else (FRACTION, seed),
                                        pool=[EXTRA / f"h200-{TARGETS[target]}-{g}" for g in POOL] if pool else ())
                r = {"target": target, "model": model, "grid": "fresh10", "split": f"seed {seed}",
                     "fit": "pooled" if pool else "own", **{f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS},
                     "R_GBps": s["R_GBps"], "Q_MiB_by_K": s["Q_MiB_by_K"], "rho_GBps": s.get("capacity_relax_GBps"),
                     "floor_MiB": s.get("capacity_floor_MiB")}
                out["rows"].append(r)
                log(_line(r), flush=True)
                _write(json_path, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("logo", "fresh10"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--target", default="host", choices=tuple(TARGETS))
    ap.add_argument("--fits", default="own,pooled,others", help="logo: which fits (own, pooled, others)")
    args = ap.parse_args(argv)
    models = tuple(m for m in args.models.split(",") if m)
    for m in models:
        capacity_law_of(m)
    if args.action == "logo":
        logo(models, args.target, json_path=args.json, fits=tuple(f for f in args.fits.split(",") if f))
    else:
        fresh10(models, args.target, json_path=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
