"""Does the issue-law trim applied regardless of "drain seen" (knee21's ``trim-all``) ever make a committed fit worse?
A survey over every committed host and local calibration grid, for ``two-stage-lockq``, ``two-stage-gated`` and
``two-stage-gated2`` (knee22, issue 15, session 15). POST HOC: every grid here was read before; the grids, models,
splits, what counts as worse and the decision rule were committed before any survey fit (docs/calibration/knee22.md,
commit 8f59d1a). Nothing in the product changes.

    python benchmarks/calib_knee22.py --json OUT [--jobs 2]   # ~150 product fits + trim-all refits; ~20 min of CPU

Per row (target, grid, model, split): the product's fit of the fit half (``calib_knee10.fit_model``) and trim-all's
(``calib_knee21.fit_trim_all``, the product's fit with every lockstep plateau point over 1.3x the issue law withheld
from the issue-law fits, iterated), both judged by ``calib_knee14.judge`` on the held-out lockstep periodic points
and ``calib_fresh11.all_four``. ``verdict``: trim-all is worse iff a figure is > ``TOL`` higher or all four are lost;
better iff not worse and a figure is > ``TOL`` lower or all four are gained; else same. ``decide``: recommend
trim-all iff worse in no row and better in at least one (``RULE``). The JSON is written atomically, never over a file.
"""
import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, all_four  # noqa: E402
from calib_fresh_heldout import EXTRA, load_points  # noqa: E402
from calib_issue_law import TARGETS, recorded_split  # noqa: E402
from calib_knee10 import _rel, fit_model, refuse_existing, split_of, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from calib_knee21 import fit_trim_all, over_law  # noqa: E402
from xstage.errors import InputError  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

MODELS = ("two-stage-lockq", "two-stage-gated", "two-stage-gated2")
GRIDS = {"host": ("wide", "wide-3525cba", "fresh3", "fresh", "fresh2", "fresh4", "fresh5", "fresh7", "fresh10",
                  "fresh11", "fresh12", "fresh12-r2", "aligned", "default"),
         "local": ("wide", "wide-3525cba", "fresh3", "fresh", "fresh2", "fresh4", "fresh5", "fresh7", "fresh10",
                   "fresh11", "fresh12", "default")}
BRACKET_GRIDS = ("fresh10", "fresh11", "fresh12", "fresh12-r2")
SEEDS_FULL, SEEDS_CUT = (0, 1, 2, 3, 4), (0, 1, 2)    # seeds 0-4 only for lockq on host (knee21's rows); the page
TOL = 0.01                                           # one point of |rel err|
PAIRS_KiB = ((17, 14), (68, 20), (100, 14), (68, 32))
RULE = ("recommend trim-all in the product (after knee21's pre-registered call) iff, over every row (target, grid, "
        "model, split), it is worse in none and better in at least one; worse: a figure (T_iss or period median or "
        "p90) more than 0.01 above the product's, or all four checks lost; better: not worse and a figure more than "
        "0.01 below, or all four gained (docs/calibration/knee22.md, committed at 8f59d1a before any survey fit)")
ROOT = EXTRA.parent.parent


def folder(target: str, grid: str) -> Path:
    """The committed records of ``grid`` (``default``: the default grid's calibration under data/calibration)."""
    if grid == "default":
        return ROOT / "data" / "calibration" / f"h200-{TARGETS[target]}"
    return EXTRA / f"h200-{TARGETS[target]}-{grid}"


def splits(points, target: str, grid: str, model: str) -> list:
    """(label, split): the recorded split (``pairs`` seed 0 where none is recorded), and ``bracket`` at the seeds
    the page names for the small fresh knee grids."""
    rec, how = recorded_split(points)
    out = [(how, rec)]
    if grid in BRACKET_GRIDS:
        seeds = SEEDS_FULL if (target, model) == ("host", "two-stage-lockq") else SEEDS_CUT
        out += [(f"bracket seed {s}", split_of(points, "bracket", s)) for s in seeds]
    return out


def figures(plat, points, split) -> dict:
    """The scorer's figures of one fitted platform on the held-out half, with what the issue law reads."""
    j = judge(plat, points, split)
    r = {**{k: j[f"heldout_{k}"] for k in FIGS}, "n_points": j["heldout_n_points"], "misses": j["misses"],
         "b0_KiB": (plat.store_buffer_bytes or 0.0) / 1024,
         "T_iss0_us": {f"{k},{b}": round(plat.issue_time0_us(k, b * 1024), 4) for k, b in PAIRS_KiB}}
    r["all_four"] = bool(all_four({f"heldout_{k}": r[k] for k in FIGS}))
    return r


def verdict(product: dict, trim: dict, tol: float = TOL) -> str:
    """``worse``, ``better`` or ``same`` for trim-all's figures against the product's (the page's definitions)."""
    if any(trim[k] > product[k] + tol for k in FIGS) or (product["all_four"] and not trim["all_four"]):
        return "worse"
    if any(trim[k] < product[k] - tol for k in FIGS) or (trim["all_four"] and not product["all_four"]):
        return "better"
    return "same"


def kept_over(product, over) -> list:
    """The points of ``over`` (K, B bytes, T us) that the product's last issue fit kept: [K, B KiB, T us]."""
    ip = product[1]["issue_points"]
    ip = ip[ip["in_issue_fit"].to_numpy(bool)]
    kept = {(int(k), int(b), float(t)) for k, b, t in zip(ip["producers"], ip["bytes_per_producer"], ip["T_iss(us)"])}
    return sorted([k, b // 1024, round(t, 3)] for k, b, t in over if (k, b, t) in kept)


def survey_row(points, split, *, target: str, grid: str, model: str, label: str) -> dict:
    """The product and trim-all on one fit half, judged on its held-out half; a fit that raises is recorded."""
    head = {"target": target, "grid": grid, "model": model, "split": label}
    half = points[np.asarray(split) == "fit"]
    try:
        product = fit_model(half, model, "knee22", target)
        w0 = over_law(half, product[0])
        plat, _, info = fit_trim_all(half, product, model=model, target=target)
        kept = kept_over(product, w0)
        row = {**head, "n_over_product_law": len(w0), "n_kept_over": len(kept), "kept_over": kept,
               "n_withheld": len(info["withheld"]), **info,
               "product": figures(product[0], points, split), "trim_all": figures(plat, points, split)}
    except (InputError, ValueError, np.linalg.LinAlgError) as e:
        return {**head, "error": f"{type(e).__name__}: {e}"}
    row["verdict"] = verdict(row["product"], row["trim_all"])
    return row


def _line(r) -> str:
    if "error" in r:
        return f"{r['target']:5s} {r['grid']:12s} {r['model']:16s} {r['split']:14s} ERROR {r['error']}"
    p, t = r["product"], r["trim_all"]
    return (f"{r['target']:5s} {r['grid']:12s} {r['model']:16s} {r['split']:14s} over {r['n_over_product_law']:2d} "
            f"kept {r['n_kept_over']:2d} "
            f"withheld {r['n_withheld']:2d} T_iss {p['median_rel_err_T_iss']:.1%}/{p['p90_rel_err_T_iss']:.1%} -> "
            f"{t['median_rel_err_T_iss']:.1%}/{t['p90_rel_err_T_iss']:.1%} period p90 "
            f"{p['p90_rel_err_period']:.1%} -> {t['p90_rel_err_period']:.1%} four {p['all_four']}->{t['all_four']} "
            f"{r['verdict']}")


def survey_grid(target: str, grid: str, models=MODELS, log=print) -> list:
    points = load_points(folder(target, grid))[0].reset_index(drop=True)
    rows = []
    for model in models:
        for label, split in splits(points, target, grid, model):
            rows.append(survey_row(points, split, target=target, grid=grid, model=model, label=label))
            log(_line(rows[-1]), flush=True)
    return rows


def _task(args):
    return survey_grid(*args)


def survey(grids=GRIDS, jobs: int = 1) -> list:
    tasks = [(t, g) for g in dict.fromkeys(g for gs in grids.values() for g in gs) for t in grids if g in grids[t]]
    if jobs <= 1:
        return [r for t in tasks for r in survey_grid(*t)]
    with ProcessPoolExecutor(jobs) as pool:
        return [r for rows in pool.map(_task, tasks) for r in rows]


def decide(rows) -> dict:
    """The rule written before any survey fit (``RULE``); per-model tallies beside it, deciding nothing."""
    scored = [r for r in rows if "verdict" in r]
    tally = {m: {v: sum(r["verdict"] == v for r in scored if r["model"] == m) for v in ("worse", "better", "same")}
             for m in dict.fromkeys(r["model"] for r in rows)}
    name = lambda r: f"{r['target']} {r['grid']} {r['model']} {r['split']}"  # noqa: E731
    worse = [name(r) for r in scored if r["verdict"] == "worse"]
    better = [name(r) for r in scored if r["verdict"] == "better"]
    return {"rule": RULE, "rows": len(rows), "scored": len(scored), "errors": [name(r) for r in rows if "error" in r],
            "worse": worse, "better": better, "per_model": tally,
            "recommend_trim_all": bool(not worse and better)}


READ = ["docs/calibration/knee20.md", "knee21.md", "data/calibration-extra/knee21-preregistration.md",
        "benchmarks/calib_knee21.py (fit_trim_all, withholding, over_law)", "sim/platform_fit.py",
        "benchmarks/calib_knee10.py, calib_knee14.py, calib_fresh11.py, calib_issue_law.py",
        "docs/calibration.md (the targets table)", "knee21's committed trim-all rows (knee21-posthoc.json)",
        "the committed points files' sizes, phases and split columns"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee22")
    rows = survey(jobs=args.jobs)
    write_new(args.json, {"post_hoc": True, "note": "every grid here was read before; the grids, models, splits, "
                          "'worse' and the rule were committed before any survey fit (8f59d1a)",
                          "provenance": provenance(), "read": READ, "models": list(MODELS),
                          "grids": {t: {g: _rel(folder(t, g)) for g in gs} for t, gs in GRIDS.items()},
                          "seeds": {"recorded": "every grid (pairs seed 0 where none is recorded)",
                                    "bracket": f"{', '.join(BRACKET_GRIDS)}: seeds 0-4 for host lockq, 0-2 otherwise"},
                          "decision": decide(rows), "rows": rows}, "calib_knee22")
    return 0


if __name__ == "__main__":
    sys.exit(main())
