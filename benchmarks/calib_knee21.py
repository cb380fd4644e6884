"""A host grid measured twice and fitted on its point-wise median (``repeat-median``), and the product's issue-law
trim applied whether or not a pair's drain is seen (``trim-all``), both on ``--model two-stage-lockq`` (knee21,
issue 15, session 15). POST HOC: every grid scored here was read before; the two candidates, the matching, the scoring
and the decision rule were committed before any candidate was fitted (docs/calibration/knee21.md, commit 50ae4a1).

    python benchmarks/calib_knee21.py posthoc --json OUT   # lockq, repeat-median, trim-all; ~40 fits, ~4 min on 2 cores
    python benchmarks/calib_knee21.py score --json OUT     # PRE-REGISTERED: repeat-median on fresh13's two runs; ~2 min

- ``repeat-median`` (``median_run``): the runs' points matched on (phase, mode, gap kind, K, B, step), step the n-th
  point of its (phase, mode, gap kind, K, B) in record order (the requested gaps are set from each run's own
  measurements, so they differ by ~1 % between runs); every measured column is the median of the runs that hold the
  point with a T_iss > 0 (two runs: their mean); a point present in one run only keeps that run's values. lockq is
  fitted on the median run's ``bracket`` fit half (``calib_knee10.fit_model``, the product's fit) and judged on the
  held-out half of the median run (decides) and of each single run (reported).
- ``trim-all`` (``fit_trim_all``): the product's fit, except that a lockstep plateau point measured > ``TRIM`` x the
  issue law is withheld from ``platform_fit``'s two issue-law fitters whether or not its pair's drain is seen
  (``withholding``, a stand-in for the fitters' modules inside ``platform_fit`` for one fit; the product is not
  changed); the withheld set is iterated from the product's own law until unchanged (at most ``ROUNDS`` refits).

Scores: ``calib_knee14.judge`` on the held-out lockstep periodic points and ``calib_fresh11.all_four``, ``bracket``
seeds 0-4; fresh12 (committed run ``c`` and knee18's repeat ``r2``), fresh11 and fresh10 (one run each). ``decide``:
the rule written in the page before any fit. ``score`` (``score_fresh``): repeat-median frozen by that rule, scored
on the later device call's two fresh13 runs exactly as data/calibration-extra/knee21-preregistration.md says, with
fresh11's repeat (if it came back) beside it, not fresh. The JSON is written atomically, never over a file.
"""
import argparse
import contextlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh11 import FIGS, all_four  # noqa: E402
from calib_fresh_heldout import EXTRA, load_points  # noqa: E402
from calib_knee10 import _rel, fit_model, grid_points, refuse_existing, split_of, write_new  # noqa: E402
from calib_knee14 import judge  # noqa: E402
from xstage.hw.calib.grids import GRIDS  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim import platform_fit  # noqa: E402
from xstage.sim.repeat_median import median_run  # noqa: E402  (moved to the product)

MODEL = "two-stage-lockq"
TRIM, ROUNDS = 1.3, 4      # trim-all: platform_fit's first one-sided trim (1.3 x the law, at most 4 rounds)
SEEDS, SEEDS_NEEDED = (0, 1, 2, 3, 4), 4
RUNS = {"fresh12": {"c": "fresh12", "r2": "fresh12-r2"}, "fresh11": {"c": "fresh11"}, "fresh10": {"c": "fresh10"}}
RULE = ("ready for a fresh test iff post hoc all four checks (medians <= 0.05, p90s <= 0.15) hold at >= 4 of 5 "
        "bracket seeds on fresh12's median run (repeat-median, judged on the median's held-out half) / on each of "
        "fresh12's two runs (trim-all), and fresh11 and fresh10 stay at >= 4 of 5 seeds (for repeat-median, one run "
        "each: lockq's own rows); if repeat-median is ready it is frozen for a fresh13 grid measured twice "
        "(docs/calibration/knee21.md, committed at 50ae4a1 before any candidate was fitted)")


# ---- repeat-median: ``median_run`` and ``with_step`` now live in ``xstage.sim.repeat_median`` (the product's) -----

# ---- trim-all ------------------------------------------------------------------------------------------------------

class _Withheld:
    """A module stand-in: ``name`` drops the (K, B, T) points in ``withheld`` from its first three arguments; every
    other attribute is the module's."""

    def __init__(self, module, name: str, withheld):
        self._module, self._name, self._withheld = module, name, frozenset(withheld)

    def __getattr__(self, attr):
        fn = getattr(self._module, attr)
        if attr != self._name:
            return fn

        def fitter(K, B, T, *args, **kw):
            K, B, T = (np.asarray(x, dtype=float) for x in (K, B, T))
            keep = np.array([(int(k), int(b), float(t)) not in self._withheld for k, b, t in zip(K, B, T)], dtype=bool)
            return fn(K[keep], B[keep], T[keep], *args, **kw)
        return fitter


@contextlib.contextmanager
def withholding(withheld):
    """Inside: ``platform_fit``'s issue-law fitters (``fit.fit_issue_time0``, ``fit_two_stage.fit_issue_time0_overlap``)
    never see the (K, B bytes, T us) points in ``withheld``; everything else in ``fit_platform`` reads them."""
    saved = platform_fit.calib_fit, platform_fit.fit_two_stage
    platform_fit.calib_fit = _Withheld(saved[0], "fit_issue_time0", withheld)
    platform_fit.fit_two_stage = _Withheld(saved[1], "fit_issue_time0_overlap", withheld)
    try:
        yield
    finally:
        platform_fit.calib_fit, platform_fit.fit_two_stage = saved


def over_law(points: pd.DataFrame, platform, trim: float = TRIM) -> frozenset:
    """The lockstep plateau points (K, B bytes, T us) measured > ``trim`` x the platform's T_iss0."""
    pl = points[(points["phase"] == "plateau") & (points["mode"] == "periodic")].dropna(subset=["T_iss(us)"])
    pl = pl[pl["T_iss(us)"] > 0]
    return frozenset((int(k), int(b), float(t)) for k, b, t in
                     zip(pl["producers"], pl["bytes_per_producer"], pl["T_iss(us)"].astype(float))
                     if t > trim * platform.issue_time0_us(int(k), float(b)))


def fit_trim_all(half: pd.DataFrame, product=None, trim: float = TRIM, rounds: int = ROUNDS,
                 model: str = MODEL, target: str = "host") -> tuple:
    """``trim-all`` on a fit half: (platform, fit, info). From the product's fit of ``model`` (``product``: its
    (platform, fit), fitted here when None), W = the plateau points > ``trim`` x the law; refit with W withheld from
    the issue-law fits; repeat until W is unchanged (at most ``rounds`` refits). No point over the product's law: the
    product. (``model``, ``target``: knee22's survey of the gated models and local grids; knee21 ran host lockq.)"""
    plat, fit = product if product is not None else fit_model(half, model, "knee21", target)
    used, history = frozenset(), []
    converged = False
    for _ in range(rounds):
        w = over_law(half, plat, trim)
        if w == used:
            converged = True
            break
        used = w
        history.append(sorted([k, b // 1024, round(t, 3)] for k, b, t in w))
        with withholding(w):
            plat, fit = fit_model(half, model, "knee21", target)
    else:
        converged = over_law(half, plat, trim) == used
    return plat, fit, {"withheld_rounds": history, "withheld": sorted([k, b // 1024, round(t, 3)] for k, b, t in used),
                       "refits": len(history), "converged": bool(converged)}


# ---- scoring -------------------------------------------------------------------------------------------------------

def _row(plat, points, split, **head) -> dict:
    j = judge(plat, points, split)
    r = {**head, **{f"heldout_{k}": j[f"heldout_{k}"] for k in FIGS}, "heldout_n_points": j["heldout_n_points"],
         "misses": j["misses"], "Q_shared_MiB": plat.shared_capacity_bytes(1) / 2**20,
         "q_sm_KiB": plat.sm_outstanding_bytes / 1024, "rho_GBps": plat.capacity_relax_GBps,
         "b0_KiB": (plat.store_buffer_bytes or 0.0) / 1024,
         "T_iss0_us": {f"{k},{b}": round(plat.issue_time0_us(k, b * 1024), 4)
                       for k, b in ((17, 14), (68, 20), (100, 14), (68, 32))}}
    r["all_four"] = all_four(r)
    return r


def _held_pairs(points, split) -> set:
    return {(int(k), int(b)) for k, b, s in zip(points["producers"], points["bytes_per_producer"], np.asarray(split))
            if s == "heldout"}


def _log(r, log):
    log(f"{r['grid']:8s} {r['candidate']:14s} fit {r['fitted_on']:6s} judged {r['judged_on']:6s} seed {r['seed']} "
        f"T_iss {r['heldout_median_rel_err_T_iss']:.1%} / {r['heldout_p90_rel_err_T_iss']:.1%} period "
        f"{r['heldout_median_rel_err_period']:.1%} / {r['heldout_p90_rel_err_period']:.1%} "
        f"{'met' if r['all_four'] else 'not met'} misses {r['misses']}" +
        (f" withheld {r['withheld']}" if "withheld" in r else ""), flush=True)


def score_grid(grid: str, runs: dict, seeds=SEEDS, log=print, trim_all: bool = True) -> list:
    """lockq (and trim-all) on each run; repeat-median where the grid has >= 2 runs ({name: points})."""
    rows = []
    for seed in seeds:
        splits = {n: split_of(p, "bracket", seed) for n, p in runs.items()}
        for name, pts in runs.items():
            half = pts[splits[name].to_numpy() == "fit"]
            product = fit_model(half, MODEL, "knee21")
            head = {"grid": grid, "seed": seed, "fitted_on": name, "judged_on": name}
            rows.append(_row(product[0], pts, splits[name], candidate="lockq", **head))
            _log(rows[-1], log)
            if not trim_all:
                continue
            plat, _, info = fit_trim_all(half, product)
            rows.append({**_row(plat, pts, splits[name], candidate="trim-all", **head), **info})
            _log(rows[-1], log)
        if len(runs) < 2:
            continue
        med, info = median_run(runs)
        split = split_of(med, "bracket", seed)
        for name, s in splits.items():
            if _held_pairs(runs[name], s) != _held_pairs(med, split):
                raise ValueError(f"{grid} seed {seed}: the median's held-out pairs differ from run {name}'s")
        plat, _ = fit_model(med[split.to_numpy() == "fit"], MODEL, "knee21")
        for name, pts, s in [("median", med, split)] + [(n, runs[n], splits[n]) for n in runs]:
            rows.append({**_row(plat, pts, s, candidate="repeat-median", grid=grid, seed=seed, fitted_on="median",
                                judged_on=name), "median_run": info})
            _log(rows[-1], log)
    return rows


def score(grids=RUNS, log=print) -> list:
    return [r for g, names in grids.items()
            for r in score_grid(g, {n: grid_points("host", x) for n, x in names.items()}, log=log)]


def seeds_met(rows, grid, candidate, fitted_on, judged_on) -> int:
    return int(sum(r["all_four"] for r in rows if (r["grid"], r["candidate"], r["fitted_on"], r["judged_on"])
                   == (grid, candidate, fitted_on, judged_on)))


def decide(rows) -> dict:
    """The rule written before any fit (``RULE``)."""
    guards = {"repeat-median": {g: seeds_met(rows, g, "lockq", "c", "c") for g in ("fresh11", "fresh10")},
              "trim-all": {g: seeds_met(rows, g, "trim-all", "c", "c") for g in ("fresh11", "fresh10")}}
    deciding = {"repeat-median": {"fresh12 median": seeds_met(rows, "fresh12", "repeat-median", "median", "median")},
                "trim-all": {f"fresh12 {n}": seeds_met(rows, "fresh12", "trim-all", n, n) for n in ("c", "r2")}}
    out = {"rule": RULE, "per_candidate": {}}
    for name in ("repeat-median", "trim-all"):
        ready = (all(v >= SEEDS_NEEDED for v in deciding[name].values())
                 and all(v >= SEEDS_NEEDED for v in guards[name].values()))
        out["per_candidate"][name] = {"seeds_met": deciding[name], "guards": guards[name], "ready": bool(ready)}
    out["reported"] = {f"repeat-median judged on fresh12 {n}": seeds_met(rows, "fresh12", "repeat-median", "median", n)
                       for n in ("c", "r2")}
    out["lockq_seeds_met"] = {f"{g} {n}": seeds_met(rows, g, "lockq", n, n) for g, names in RUNS.items()
                              for n in names}
    out["frozen"] = "repeat-median" if out["per_candidate"]["repeat-median"]["ready"] else None
    return out


# ---- the pre-registered score of the fresh13 call (data/calibration-extra/knee21-preregistration.md) --------------

FRESH13 = {"r1": EXTRA / "h200-pcie-host-fresh13-r1", "r2": EXTRA / "h200-pcie-host-fresh13-r2"}
FRESH11_REPEAT = {"c": EXTRA / "h200-pcie-host-fresh11", "r2": EXTRA / "h200-pcie-host-fresh11-r2"}
SCORE_RULE = ("met iff two-stage-lockq, fitted by the product (calib_knee10.fit_model) on the bracket (0.3) fit half "
              "of the point-wise median of fresh13's two runs (calib_knee21.median_run), meets all four checks "
              "(held-out lockstep T_iss and period |rel err| median <= 0.05, p90 <= 0.15) on the median's held-out "
              "half at >= 4 of seeds 0-4; with fewer than two runs back: not measured "
              "(data/calibration-extra/knee21-preregistration.md)")


def run_meta(folder: Path) -> dict:
    """Where a run's records are and what its provenance says (commit, date, GPU)."""
    _, meta = load_points(folder)
    prov = meta.get("provenance") or {}
    gpu = prov.get("gpu") or {}
    return {"records": _rel(folder), "git_commit": prov.get("git_commit"), "date": prov.get("date"),
            "gpu_uuid": gpu.get("gpu_uuid"), "driver": gpu.get("driver")}


def load_runs(folders: dict, grid: str) -> dict:
    """{name: points} of the folders that hold points.parquet; each must be ``grid``'s design (its K and B)."""
    want = GRIDS[grid]
    runs = {}
    for name, folder in folders.items():
        if not (Path(folder) / "points.parquet").is_file():
            continue
        pts = load_points(Path(folder))[0].reset_index(drop=True)
        per = pts[pts["mode"] == "periodic"]
        got = (sorted({int(k) for k in per["producers"]}), sorted({int(b) for b in per["bytes_per_producer"]}))
        if got != (sorted(want["producers"]), sorted(want["sizes"])):
            raise ValueError(f"run {name} ({folder}): K {got[0]} and B {[b // 1024 for b in got[1]]} KiB are not "
                             f"--grid {grid}'s")
        runs[name] = pts
    return runs


def score_fresh(folders=FRESH13, grid: str = "fresh13", seeds=SEEDS, log=print) -> dict:
    """PRE-REGISTERED: ``repeat-median`` on the runs in ``folders`` ({name: folder}, two runs of ``grid``): the
    decision by ``SCORE_RULE``; reported beside it (deciding nothing): the median fit judged on each single run and
    lockq fitted and judged on each single run (the one-run protocol)."""
    runs = load_runs(folders, grid)
    out = {"pre_registered": True, "preregistration": "data/calibration-extra/knee21-preregistration.md",
           "grid": grid, "runs": {n: run_meta(Path(folders[n])) for n in runs},
           "missing": [n for n in folders if n not in runs]}
    rows = score_grid(grid, runs, seeds, log, trim_all=False) if runs else []
    met = seeds_met(rows, grid, "repeat-median", "median", "median")
    out["decision"] = {"rule": SCORE_RULE, "seeds_met": met if len(runs) >= 2 else None,
                       "verdict": ("met" if met >= SEEDS_NEEDED else "not met") if len(runs) >= 2 else "not measured",
                       "reported": {f"repeat-median judged on {n}": seeds_met(rows, grid, "repeat-median", "median", n)
                                    for n in runs} | {f"lockq on {n} alone": seeds_met(rows, grid, "lockq", n, n)
                                                      for n in runs}}
    out["rows"] = rows
    return out


def score_fresh11_repeat(log=print) -> dict:
    """Secondary, NOT fresh (fresh11's committed run was read before): repeat-median on fresh11's committed run and
    its repeat, where the repeat came back. knee18's own pre-registered score of the repeat is
    ``calib_knee18.py score``, run as it stands."""
    if not (FRESH11_REPEAT["r2"] / "points.parquet").is_file():
        return {"note": "fresh11's repeat did not come back: nothing scored"}
    return {"post_hoc": True, "note": "one of the two runs (fresh11's committed run) was read before",
            **score_fresh(FRESH11_REPEAT, "fresh11", log=log)}


READ = ["docs/calibration/knee17.md", "knee18.md", "knee19.md", "knee20.md", "knee18-preregistration.md",
        "sim/fit_knee.py", "sim/platform_fit.py", "benchmarks/calib_knee20.py, calib_knee19.py, calib_knee18.py, "
        "calib_knee14.py, calib_knee10.py, calib_fresh12.py", "knee20's committed lockq figures",
        "the design columns of fresh12's two runs (matching)"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("posthoc", "score"))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee21")
    if args.action == "score":
        out = score_fresh()
        write_new(args.json, {**out, "fresh11_repeat": score_fresh11_repeat(), "provenance": provenance()},
                  "calib_knee21")
        return 0
    rows = score()
    write_new(args.json, {"post_hoc": True, "note": "every grid here was read before; the candidates, the matching and "
                          "the rule were committed before any candidate was fitted (50ae4a1)",
                          "provenance": provenance(), "read": READ, "model": MODEL,
                          "runs": {g: {n: f"data/calibration-extra/h200-pcie-host-{x}" for n, x in names.items()}
                                   for g, names in RUNS.items()},
                          "decision": decide(rows), "rows": rows}, "calib_knee21")
    return 0


if __name__ == "__main__":
    sys.exit(main())
