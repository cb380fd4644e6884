"""perk18 (session 18, POST HOC, EXPLORATORY, decides nothing): a per-K capacity on ``two-stage-lockq``.

``lockq-perK``: the product's ``two-stage-lockq`` fit (the line Q(K) = Q_shared + K q_sm and rho read together from
the lockstep pairs, ``fit_knee.fit_lockstep_capacity``), then every K with lockstep periodic points in the fit gets its
own Q(K): a 1-D search minimising lockq's own loss (squared relative T_iss errors, each (K, B) pair weighing one,
``fit_knee.lockstep_issue_times_us``) on that K's lockstep points, with rho and the floor kept. The line's Q(K) is
the first candidate and is replaced only by a strictly lower loss, so no K fits worse than under lockq.

The per-K step lives in the product since session 21 (``xstage.sim.fit_knee.search_per_k``, ``per_k_platform``;
``xstage calibrate --per-k-capacity``), moved there unchanged. The platform written for it (``per_k_platform``): ``capacity_points`` at every K of the folder (and K = 1 and
``sm_count``, so the interpolation between them is the line wherever no K is searched), ``sm_outstanding_bytes``
None, and ``capacity_floor_bytes`` = lockq's Q_shared, so each K relaxes at lockq's rho to min(Q_shared, Q(K)) --
lockq's own floor (``Platform.queue_options``: Q_shared(K) = Q_shared there). With every searched Q(K) set to the
line's value it judges exactly as lockq does (``sanity``; the test checks it on fresh14).

Two scans, both judged on each ``bracket`` seed's held-out half (``calib_knee14.judge``) as lawscan18 judges:
``insample`` (fitted on every point of the folder, lawscan18's bound) and ``heldout`` (fitted on the seed's fit half,
``split_by_rule(points, "bracket", 0.3, seed)``, the product's split). Post hoc: a use needs a rule written first
and a fresh grid.

    python benchmarks/calib_perk18.py --json OUT     # 6 + 30 lockq fits; ~5 min on 2 cores
"""
import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, FRACTION, SEEDS, SEEDS_NEEDED, all_four  # noqa: E402
from calib_knee10 import fit_model, refuse_existing, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from calib_pool18 import EXTRA, FOLDERS, folder_of  # noqa: E402,F401  (EXTRA: the tests read the record)
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.fit_knee import per_k_platform, search_per_k  # noqa: E402,F401  (moved to the product, session 21)
from xstage.sim.split_sweeps import split_by_rule  # noqa: E402

LAW = "two-stage-lockq"
CANDIDATES = ("lockq", "lockq-perK")
SCANS = ("insample", "heldout")


def sanity(points, lockq, split) -> dict:
    """The per-K platform with every lockstep K's Q(K) set to the line's value, judged beside lockq: the figures
    must be equal (the representation changes nothing)."""
    K = {int(k) for k in points.loc[points["mode"] == "periodic", "producers"]}
    same = per_k_platform(lockq, {k: lockq.capacity_bytes(k) for k in K}, points["producers"])
    a, b = judge(lockq, points, split), judge(same, points, split)
    return {"lockq": {k: a[f"heldout_{k}"] for k in FIGS}, "per_k_line": {k: b[f"heldout_{k}"] for k in FIGS},
            "equal": all(a[f"heldout_{k}"] == b[f"heldout_{k}"] for k in FIGS) and a["misses"] == b["misses"]}


def _row(scan, grid, seed, cand, plat, points, split):
    j = judge(plat, points, split)
    r = {"scan": scan, "grid": grid, "seed": seed, "candidate": cand,
         **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "misses": j["misses"]}
    r["all_four"] = all_four(r)
    return r


def _fit_both(frame, points, grid):
    lockq, _ = fit_model(frame.drop(columns=["split"], errors="ignore"), LAW, f"perk18-{grid}")
    caps = search_per_k(frame, lockq)
    line = {k: float(lockq.capacity_bytes(k)) for k in caps}
    return lockq, per_k_platform(lockq, caps, points["producers"]), caps, line


def scan(folders=tuple(FOLDERS), scans=SCANS, log=print) -> dict:
    rows, checks = [], {}
    with tempfile.TemporaryDirectory() as d:
        for grid in folders:
            points, _ = load_records(folder_of(grid, Path(d)) / "points.parquet", "point")
            points = points.reset_index(drop=True)
            splits = {s: split_by_rule(points, "bracket", FRACTION, s) for s in SEEDS}
            fits = {}
            if "insample" in scans:
                fits[None] = _fit_both(points, points, grid)
                checks[grid] = sanity(points, fits[None][0], splits[SEEDS[0]])
                log(f"{grid:10s} sanity (per-K = line judged as lockq, seed 0): {checks[grid]['equal']}", flush=True)
            for seed in SEEDS:
                for sc in scans:
                    if sc == "heldout":
                        fits[seed] = _fit_both(points[splits[seed].to_numpy() == "fit"], points, grid)
                    lockq, perk, caps, line = fits[None if sc == "insample" else seed]
                    for cand, plat in (("lockq", lockq), ("lockq-perK", perk)):
                        r = _row(sc, grid, seed, cand, plat, points, splits[seed])
                        if cand == "lockq-perK":
                            r["Q_MiB"] = {str(k): q / 2**20 for k, q in sorted(caps.items())}
                            r["Q_line_MiB"] = {str(k): q / 2**20 for k, q in sorted(line.items())}
                        rows.append(r)
            for sc in scans:
                for cand in CANDIDATES:
                    sel = [r for r in rows if (r["scan"], r["grid"], r["candidate"]) == (sc, grid, cand)]
                    p90 = [r["heldout_p90_rel_err_T_iss"] for r in sel]
                    log(f"{grid:10s} {sc:8s} {cand:11s} seeds met {sum(r['all_four'] for r in sel)}/5, "
                        f"T_iss p90 {min(p90):.1%}-{max(p90):.1%}", flush=True)
    return {"rows": rows, "sanity": checks}


def summary(rows) -> dict:
    out = {}
    for sc in dict.fromkeys(r["scan"] for r in rows):
        for cand in dict.fromkeys(r["candidate"] for r in rows if r["scan"] == sc):
            sel = [r for r in rows if (r["scan"], r["candidate"]) == (sc, cand)]
            per = {g: sum(r["all_four"] for r in sel if r["grid"] == g) for g in dict.fromkeys(r["grid"] for r in sel)}
            p90 = {g: [min(r["heldout_p90_rel_err_T_iss"] for r in sel if r["grid"] == g),
                       max(r["heldout_p90_rel_err_T_iss"] for r in sel if r["grid"] == g)] for g in per}
            out[f"{sc}/{cand}"] = {"seeds_met": per, "of": int(sum(per.values())), "T_iss_p90_range": p90,
                                   "every_folder": all(n >= SEEDS_NEEDED for n in per.values())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_perk18")
    got = scan()
    s = summary(got["rows"])
    for key, v in s.items():
        print(f"{key:22s} {v['seeds_met']} of 30: {v['of']} {'every folder' if v['every_folder'] else ''}")
    write_new(args.json, {"post_hoc": True, "exploratory": True,
                          "note": "lockq-perK: lockq's fit, then Q(K) per lockstep K by lockq's loss on that K's pairs "
                                  "(rho and floor kept); in-sample (every point) and held-out (each bracket seed's "
                                  "fit half); decides nothing: a use needs a rule written first and a fresh grid",
                          "summary": s, "sanity": got["sanity"], "rows": got["rows"], "provenance": provenance()},
              "calib_perk18")
    return 0


if __name__ == "__main__":
    sys.exit(main())
