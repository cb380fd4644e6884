"""Free-running bursts on local HBM: the free law's own issue terms and drain rate (issue 15 item 1, session 9, cal9).

    python benchmarks/calib_free_local.py classes [--json OUT]     # what the cal6 law gets wrong, by binding term
    python benchmarks/calib_free_local.py posthoc [--json OUT]     # own-split refits of every committed grid (POST HOC,
                                                                   # fresh7 included after its run; ~15 min)
    python benchmarks/calib_free_local.py platforms                # (re)write the pre-registered platforms
    python benchmarks/calib_free_local.py predict [--json OUT]     # their predictions on fresh7's free design
    python benchmarks/calib_free_local.py score --host DIR --local DIR [--json OUT]   # PRE-REGISTERED fresh7 score

The law (``Platform.free_*``, ``sim/fit_free.py``): a free-running burst issues in
T = max(t_free + max(max(B - b0, 0)/P, K B/I), V/R_free - G) with its own P, b0, I (false: no ceiling) and drain
rate R_free, fitted on free points by ``fit_free.fit_free_issue_law`` where >= 3 of them beat the lockstep law.
The platforms (docs/calibration/free-local.md; data/calibration-extra/fresh7-preregistration.md):

- ``current`` (the pass rule's, local): cal6's pre-registered local platform (free-s8-platforms, gated, wide + fresh3;
  lockstep law, unbounded free capacity) through ``fit_free_issue_law`` on every free point of fresh4 and fresh5 --
  the two committed runs of today's microbenchmark kernel (since dbec454 its free issue spans read 0.04-0.06 us
  longer and its gaps shorter than before; fresh7 runs the same kernel);
- ``before-dbec454`` (reported): the same on the wide, fresh, fresh2 and fresh3 fit halves (the older kernel);
- host: cal6's pre-registered host platform unchanged (the rule does not fire on host: no host free point beats the
  lockstep law; ``platforms`` checks it and records the figures).

Pass rule (pre-registered, exact comparisons): local ``current`` on every fresh7 free point: free T_iss and period
|rel err| median <= 5 % and p90 <= 15 %; host (cal6's platform) on every fresh7 free point, the same four checks,
judged apart ("host still holds").
"""

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA, load_points  # noqa: E402

from xstage.hw.calib.grids import GRIDS  # noqa: E402
from xstage.sim import fit as calib_fit, fit_free  # noqa: E402
from xstage.sim.platform import Platform  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, fit_split_platform  # noqa: E402

TARGETS = {"host": "pcie-host", "local": "local"}
GRIDS_WITH_FREE = ("wide", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh7")   # fresh7: after its run
OLD_KERNEL = ("wide", "fresh", "fresh2", "fresh3")      # before dbec454 (the end-fence kernel change)
NEW_KERNEL = ("fresh4", "fresh5")
CAL6 = EXTRA / "free-s8-platforms"
OUTDIR = EXTRA / "free-s9-platforms"
LIMITS = {"median": 0.05, "p90": 0.15}
FREE_FIELDS = ("free_producer_issue_GBps", "free_store_buffer_bytes", "free_injection_GBps", "free_drain_rate_GBps")
MODEL = "two-stage-gated"


def cal6(target: str) -> Platform:
    """cal6's pre-registered gated platform fitted on the wide + fresh3 fit halves (free-s8-platforms, (b))."""
    return Platform.load(CAL6 / f"h200-{TARGETS[target]}-gated-wide-fresh3.json")


def points(target: str, grid: str) -> pd.DataFrame:
    return load_points(EXTRA / f"h200-{TARGETS[target]}-{grid}")[0]


def fit_half(pts: pd.DataFrame) -> pd.DataFrame:
    return pts[pts["split"].astype(str).to_numpy() == "fit"]


def without_free_law(p: Platform) -> Platform:
    """``p`` without this work's fields: the free law as cal6 left it (free_t_fixed_us from ``fit_free_law``)."""
    return p if all(getattr(p, f) is None for f in FREE_FIELDS) else replace(p, **{f: None for f in FREE_FIELDS})


def q(e) -> dict:
    e = np.abs(np.asarray(e, dtype=float))
    e = e[np.isfinite(e)]
    return {"median": float(np.median(e)), "p90": float(np.percentile(e, 90)), "max": float(e.max()),
            "n": int(e.size)} if e.size else {}


def score_free(pts: pd.DataFrame, platform: Platform) -> dict:
    c = calib_fit.model_check(pts[pts["mode"] == "free"], platform)
    return {"T_iss": q(c["rel_err_T_iss"]), "period": q(c["rel_err_period"])}


def _fmt(f: dict) -> str:
    return (f"T_iss {f['T_iss'].get('median', np.nan):.1%} / {f['T_iss'].get('p90', np.nan):.1%}  period "
            f"{f['period'].get('median', np.nan):.1%} / {f['period'].get('p90', np.nan):.1%}  (n {f['T_iss'].get('n')})")


# --- what the cal6 law gets wrong ----------------------------------------------------------------------------------

def classes() -> dict:
    """cal6's local platform on every committed local free point, by the term that binds its prediction: the
    per-producer rate, the lockstep ceiling K B / I, or the drain V/R - G; and the measured aggregate rates."""
    p = cal6("local")
    fr = p.free_running()
    out = {}
    for grid in GRIDS_WITH_FREE:
        pts = points("local", grid)
        c = calib_fit.model_check(pts[pts["mode"] == "free"], p)
        K, B = c["producers"].to_numpy(float), c["bytes_per_producer"].to_numpy(float)
        per = np.maximum(B - (fr.store_buffer_bytes or 0.0), 0.0) / (fr.producer_issue_GBps * 1e3)
        ceiling = K * B / (fr.injection_GBps * 1e3)
        drain = c["model_T_iss(us)"].to_numpy() > c["T_iss0(us)"].to_numpy() * (1 + 1e-9)
        term = np.where(drain, "drain V/R - G", np.where(ceiling > per, "lockstep ceiling K B / I", "per-producer B / P"))
        V, T = K * B, c["T_iss(us)"].to_numpy(float)
        row = {}
        for name in ("per-producer B / P", "lockstep ceiling K B / I", "drain V/R - G"):
            m = term == name
            e = c["rel_err_T_iss"].to_numpy(float)[m]
            row[name] = {"n": int(m.sum()), "median_rel_err": float(np.median(e)) if m.any() else None,
                         "median_abs_rel_err": float(np.median(np.abs(e))) if m.any() else None}
        small = B <= 9 * 1024
        row["B <= 9 KiB"] = {"n": int(small.sum()), "median_rel_err": float(np.median(c["rel_err_T_iss"][small]))
                             if small.any() else None}
        zero = c["gap(us)"].to_numpy(float) == 0.0
        row["max aggregate K B / T (TB/s)"] = float(np.max(V / T) / 1e6)
        row["max zero-gap V / period (TB/s)"] = float(np.max((V / c["period(us)"].to_numpy(float))[zero]) / 1e6)
        row["all"] = score_free(pts, p)
        out[grid] = row
    return {"platform": str(CAL6 / "h200-local-gated-wide-fresh3.json"), "lockstep_I_GBps": p.injection_GBps,
            "lockstep_R_GBps": p.drain_rate_GBps, "t_free_us": p.free_t_fixed_us, "grids": out}


# --- post hoc: own-split refits ---------------------------------------------------------------------------------

def own_split(target: str, grid: str) -> dict:
    pts = points(target, grid).reset_index(drop=True)
    split = pts["split"].astype(str)
    fitted, fit = fit_split_platform(pts, split, name=f"free-local-{grid}", target=TARGETS[target], sm_count=132,
                                     capacity_law=capacity_law_of(MODEL))
    held = pts[split.to_numpy() == "heldout"]
    law = fit.get("free_law") or {}
    forced = None
    if not law.get("adopted"):   # the law fitted on the fit half all the same (rule (ii) alone), reported apart
        terms = fit_free.fit_law(pts[split.to_numpy() == "fit"])
        forced = terms and score_free(held, fit_free.with_law(fitted, terms))
    return {"rule": {k: v for k, v in law.items() if not isinstance(v, np.ndarray)},
            "heldout_free_law_without_rule_i": forced,
            "free_capacity_bound": fitted.free_capacity_bound,
            "lockstep_I_GBps": fitted.injection_GBps, "lockstep_R_GBps": fitted.drain_rate_GBps,
            "free_terms": {f: getattr(fitted, f) for f in ("free_t_fixed_us",) + FREE_FIELDS},
            "heldout_free_new_law": score_free(held, fitted), "heldout_free_cal6_law": score_free(held,
                                                                                             without_free_law(fitted)),
            "n_heldout_free": int((held["mode"] == "free").sum())}


def posthoc() -> dict:
    out = {}
    for target in TARGETS:
        for grid in GRIDS_WITH_FREE:
            r = own_split(target, grid)
            out.setdefault(target, {})[grid] = r
            print(f"{target:5s} {grid:7s} rule {r['rule']}", file=sys.stderr)
            print(f"{target:5s} {grid:7s} own split, held out: new law {_fmt(r['heldout_free_new_law'])} | cal6 law "
                  f"{_fmt(r['heldout_free_cal6_law'])}")
    fixed = {}
    for name, p in (("cal6", cal6("local")), ("current", load("local", "current")),
                    ("before-dbec454", load("local", "before-dbec454"))):
        fixed[name] = {grid: score_free(points("local", grid), p) for grid in GRIDS_WITH_FREE}
    fixed["host_cal6"] = {grid: score_free(points("host", grid), cal6("host")) for grid in GRIDS_WITH_FREE}
    return {"post_hoc": "every figure: these records were read to find the law (session 9, cal9); own-split refits "
                        "use each record's recorded split (pairs, 0.3, seed 0); the platforms' rows score every free "
                        "point of grids they were partly fitted on",
            "model": MODEL, "own_split": out, "platforms_on_every_free_point": fixed}


# --- the pre-registered platforms -----------------------------------------------------------------------------------

FITS = {"current": NEW_KERNEL, "before-dbec454": OLD_KERNEL}


def build(target: str, fit: str):
    pts = pd.concat([points(target, g) if g in NEW_KERNEL else fit_half(points(target, g)) for g in FITS[fit]],
                    ignore_index=True)
    return fit_free.fit_free_issue_law(pts, cal6(target))


def platform_path(target: str, fit: str) -> Path:
    return OUTDIR / f"h200-{TARGETS[target]}-gated-{fit}.json"


def load(target: str, fit: str) -> Platform:
    """A pre-registered platform; on host the rule leaves cal6's platform as it is, so that file is cal6's."""
    path = platform_path(target, fit)
    return Platform.load(path) if path.is_file() else cal6(target)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def platforms() -> dict:
    info = {}
    for target in TARGETS:
        for fit in FITS:
            p, i = build(target, fit)
            info[f"{target}/{fit}"] = {k: v for k, v in (i or {}).items()}
            if p is cal6(target) or p == cal6(target):
                info[f"{target}/{fit}"]["platform"] = "unchanged: cal6's " + str(CAL6.name)
                print(target, fit, "rule:", i, "-> unchanged")
                continue
            _write(platform_path(target, fit), p.to_json())
            print(target, fit, {f: getattr(p, f) for f in ("free_t_fixed_us",) + FREE_FIELDS})
    _write(OUTDIR / "fit-info.json", json.dumps(info, indent=1, default=str) + "\n")
    return info


def predict() -> dict:
    """Predicted free T_iss on fresh7's free design: zero-gap points at G = the kernel's measured free loop gap
    (0.146 us, fresh4/fresh5) and the gap sweeps at G = f x V/R_free (the scored check uses the measured gap)."""
    g, out = GRIDS["fresh7"], {}
    grid = sorted({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"]))
    for target in TARGETS:
        for fit in ("cal6",) + tuple(FITS):
            p = cal6(target) if fit == "cal6" else load(target, fit)
            R = p.free_running().drain_rate_Bpus
            rows = [{"phase": "free-rate", "K": k, "B": b, "G": 0.146} for k, b in grid]
            rows += [{"phase": "free-gap", "K": k, "B": b, "G": f * k * b / R} for k, b in g["gap_configs"]
                     for f in (0.1, 0.5, 0.9, 1.3)]
            pts = pd.DataFrame([{"phase": r["phase"], "mode": "free", "producers": r["K"], "bytes_per_producer": r["B"],
                                 "gap(us)": 0.0, "gap_measured(us)": r["G"], "T_iss(us)": 1.0, "period(us)": 1.0}
                                for r in rows])
            c = calib_fit.model_check(pts, p)
            out[f"{target}/{fit}"] = [{"phase": r["phase"], "K": int(r["producers"]),
                                       "B_KiB": int(r["bytes_per_producer"]) // 1024,
                                       "G_us": round(float(r["gap_measured(us)"]), 3),
                                       "T_iss_us": round(float(r["model_T_iss(us)"]), 3)} for r in c.to_dict("records")]
    return out


# --- the pre-registered score -------------------------------------------------------------------------------------

PRIMARY = {"local": "current", "host": "cal6"}


def decide(res: dict, target: str) -> dict:
    f = (res.get(target) or {}).get(PRIMARY[target], {})
    checks = {f"{k}_{s}": {"value": f.get(k, {}).get(s), "limit": lim,
                           "met": f.get(k, {}).get(s) is not None and f[k][s] <= lim}
              for k in ("T_iss", "period") for s, lim in LIMITS.items()}
    return {"rule": f"{target}/{PRIMARY[target]}: free T_iss and period median <= 5 %, p90 <= 15 % on every fresh7 "
                    "free point", "checks": checks, "met": all(c["met"] for c in checks.values())}


def score(folders: dict) -> dict:
    res = {}
    for target, folder in folders.items():
        if folder is None:
            continue
        pts, meta = load_points(folder)
        free = pts[pts["mode"] == "free"]
        V = free["producers"] * free["bytes_per_producer"]
        r = res[target] = {"records": str(folder), "provenance": meta.get("provenance"), "n_free": int(len(free)),
                           "cal6": score_free(pts, cal6(target))}
        for fit in FITS:
            r[fit] = score_free(pts, load(target, fit))
        big = pts[(pts["mode"] == "free") & (pts["producers"] * pts["bytes_per_producer"] > 29 * 2**20)]
        small = pts[(pts["mode"] == "free") & (pts["producers"] * pts["bytes_per_producer"] <= 29 * 2**20)]
        p = cal6(target) if PRIMARY[target] == "cal6" else load(target, PRIMARY[target])
        r["by_volume"] = {"V <= 29 MiB": score_free(small, p), "V > 29 MiB": score_free(big, p),
                          "max_V_MiB": float(V.max() / 2**20)}
    res["decision"] = {t: decide(res, t) for t in TARGETS if t in res}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("classes", "posthoc", "platforms", "predict", "score"))
    ap.add_argument("--host", type=Path, default=None)
    ap.add_argument("--local", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.action == "platforms":
        platforms()
        return 0
    res = {"classes": classes, "posthoc": posthoc, "predict": predict}.get(args.action, lambda: None)()
    if args.action == "score":
        res = score({"host": args.host, "local": args.local})
        for target, by in res.items():
            if target != "decision":
                for name, f in by.items():
                    if isinstance(f, dict) and "T_iss" in f:
                        print(f"{target:5s} {name:16s} {_fmt(f)}")
        for target, d in res["decision"].items():
            print("decision", target, "met" if d["met"] else "not met",
                  {k: round(c["value"], 4) for k, c in d["checks"].items() if c["value"] is not None})
    elif args.action == "classes":
        for grid, row in res["grids"].items():
            print(grid, {k: v for k, v in row.items() if k != "all"}, _fmt(row["all"]))
    elif args.action == "predict":
        for k, rows in res.items():
            print(k, [(r["K"], r["B_KiB"], r["G_us"], r["T_iss_us"]) for r in rows[-6:]])
    if args.json is not None:
        _write(args.json, json.dumps(res, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
