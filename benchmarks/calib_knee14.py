"""The ``bracket`` split (every gap-swept pair fitted; issue 15, session 12, knee14) on the committed host grids.
POST HOC: every grid here, fresh10 included, was read before (docs/calibration/knee10.md ... knee13.md); these
figures decide only whether a fresh grid is measured, by the rule committed before them
(data/calibration-extra/knee14-criterion.md).

    python benchmarks/calib_knee14.py score --models two-stage-gated2 --json OUT   # one model, ~23 fits; ~6 min
    python benchmarks/calib_knee14.py insample --json OUT   # each model fitted on every fresh10 point; ~1 min
    python benchmarks/calib_knee14.py issue --json OUT      # gated2's T_iss0 at the missed pairs, per fit; ~2 min
    python benchmarks/calib_knee14.py record --parts score-*.json insample.json --json OUT

``score``: for each model, own fit half (``fit_platform`` on the split's ``fit`` points, as ``calib_knee13.py
score``), judged on the held-out lockstep periodic points: fresh10 under ``bracket`` at seeds 0-4 and under
``pairs`` at seeds 0-4 (seed 0 is the recorded split); wide, fresh, fresh2, fresh3, fresh5, wide-3525cba under
``bracket`` seed 0 and under their recorded split. Each row also lists its held-out pairs with a point off by
> 15 % (median error, points over). ``insample``: each model fitted on every fresh10 point, scored on the
``bracket`` seeds' held-out halves (the upper bound of any own fit). ``issue``: two-stage-gated2 fitted on every
fresh10 point and on each ``bracket`` seed's fit half; its T_iss0 at the pairs that set seeds 1-2's p90 and which
B at K = 116 the fit holds (a diagnostic, deciding nothing). ``record``: the parts and the decision by the
committed rule. Every action writes its JSON atomically (``.tmp`` then rename) and refuses to overwrite a file.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_issue_law import KEYS  # noqa: E402
from calib_knee10 import fit_halves, fit_model, grid_points, refuse_existing, split_of, write_new  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.heldout_misses import missed_pairs  # noqa: E402
from xstage.sim.platform_fit import check_and_summarize  # noqa: E402

MODELS = ("two-stage-gated2", "two-stage-state", "two-stage-kneek")
SEEDS = (0, 1, 2, 3, 4)
OTHERS = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba")
TARGET, SLACK, MISS = 0.15, 0.005, 0.15
RULE = ("per model M: (1) fresh10 own-fit held-out lockstep T_iss p90 <= 0.15 under the bracket split (fraction 0.3) "
        "at >= 4 of seeds 0-4, and (2) on each of wide, fresh, fresh2, fresh3, fresh5, wide-3525cba M's own-fit p90 "
        "under bracket seed 0 <= max(0.15, M's own-fit p90 under the recorded split + 0.005); the split qualifies if "
        "any model does, the first of gated2, state, kneek is pre-registered (data/calibration-extra/"
        "knee14-criterion.md, committed at 22ed984 before any score)")


def _fit(frame, model):
    return fit_model(frame, model, "knee14")[0]


def held_misses(check, split) -> list:
    """The held-out lockstep periodic pairs with a point off by > 15 %: [K, B KiB, median error, over, points]."""
    return [[k, b // 1024, round(float(np.median(e)), 4), int((np.abs(e) > MISS).sum()), int(e.size)]
            for k, b, _, e in missed_pairs(check, split, MISS)]


def judge(platform, points, split) -> dict:
    check, s = check_and_summarize(points, platform, split)
    held = sorted({(int(k), int(b) // 1024) for k, b, x in zip(points["producers"], points["bytes_per_producer"],
                                                               np.asarray(split)) if x == "heldout"})
    return {**{f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS}, "heldout_pairs_KiB": [list(p) for p in held],
            "misses": held_misses(check, split)}


RUNS = (tuple(("fresh10", "bracket", s) for s in SEEDS) + tuple((g, "bracket", 0) for g in OTHERS)
        + tuple((g, "recorded", 0) for g in OTHERS)
        + (("fresh10", "recorded", 0),) + tuple(("fresh10", "pairs", s) for s in SEEDS[1:]))


def _label(rule, seed) -> str:
    return "recorded" if rule == "recorded" else f"{rule} seed {seed}"


def score(models=MODELS, log=print) -> dict:
    out = {"models": list(models), "rows": []}
    pts = {g: grid_points("host", g) for g in ("fresh10",) + OTHERS}
    for model in models:
        for grid, rule, seed in RUNS:
            split = split_of(pts[grid], rule, seed)
            plat = _fit(fit_halves([(grid, pts[grid], split)]), model)
            r = {"model": model, "grid": grid, "split": _label(rule, seed), **judge(plat, pts[grid], split)}
            out["rows"].append(r)
            log(f"{model:17s} {grid:12s} {r['split']:16s} held-out T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                f"{r['heldout_p90_rel_err_T_iss']:.1%}  period p90 {r['heldout_p90_rel_err_period']:.1%} "
                f"(n {r['heldout_n_points']}) misses {r['misses']}", flush=True)
    return out


def insample(models=MODELS, log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for model in models:
        plat = _fit(pts, model)
        for seed in SEEDS:
            split = split_of(pts, "bracket", seed)
            r = {"model": model, "grid": "fresh10", "split": f"bracket seed {seed}", "fit": "every point",
                 **judge(plat, pts, split)}
            rows.append(r)
            log(f"insample {model:17s} bracket seed {seed}: p90 {r['heldout_p90_rel_err_T_iss']:.1%} "
                f"misses {r['misses']}", flush=True)
    return rows


ISSUE_PAIRS = ((116, 16), (116, 26), (84, 16), (58, 26))


def issue(model="two-stage-gated2", log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for seed in (None,) + SEEDS:
        split = None if seed is None else split_of(pts, "bracket", seed)
        half = pts if split is None else fit_halves([("fresh10", pts, split)])
        plat = _fit(half, model)
        r = {"model": model, "fit": "every point" if seed is None else f"bracket seed {seed}",
             "K116_fit_B_KiB": sorted({int(b) // 1024 for k, b in zip(half["producers"], half["bytes_per_producer"])
                                       if int(k) == 116}),
             "T_iss0_us": {f"{k},{b}": plat.issue_time0_us(k, b * 1024) for k, b in ISSUE_PAIRS}}
        rows.append(r)
        log(f"issue {r['fit']:15s} K=116 fit B {r['K116_fit_B_KiB']} T_iss0 "
            + " ".join(f"({p}) {v:.3f}" for p, v in r["T_iss0_us"].items()), flush=True)
    return rows


def decide(rows) -> dict:
    """The committed rule on ``score``'s rows."""
    p90 = {(r["model"], r["grid"], r["split"]): r["heldout_p90_rel_err_T_iss"] for r in rows}
    per_model = {}
    for m in MODELS:
        if (m, "fresh10", "bracket seed 0") not in p90:
            continue
        fresh10 = [p90[(m, "fresh10", f"bracket seed {s}")] for s in SEEDS]
        met = sum(v <= TARGET for v in fresh10)
        others = {}
        for g in OTHERS:
            new, ref = p90[(m, g, "bracket seed 0")], p90[(m, g, "recorded")]
            limit = max(TARGET, ref + SLACK)
            others[g] = {"bracket_p90": new, "recorded_p90": ref, "limit": limit, "held": bool(new <= limit)}
        per_model[m] = {"fresh10_p90_by_seed": fresh10, "fresh10_seeds_met": met, "others": others,
                        "qualified": bool(met >= 4 and all(o["held"] for o in others.values()))}
    chosen = next((m for m in MODELS if per_model.get(m, {}).get("qualified")), None)
    return {"rule": RULE, "per_model": per_model, "qualified": chosen is not None, "model": chosen}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score", "insample", "issue", "record"))
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--models", default=",".join(MODELS), help="score / insample: comma-separated models")
    ap.add_argument("--parts", type=Path, nargs="*", default=(), help="record: the score and insample JSONs")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_knee14")
    if args.action == "record":
        parts = [json.loads(p.read_text()) for p in args.parts]
        rows = [r for p in parts if p["action"] == "score" for r in p["result"]["rows"]]
        ins = [r for p in parts if p["action"] == "insample" for r in p["result"]]
        law = [r for p in parts if p["action"] == "issue" for r in p["result"]]
        rec = {"post_hoc": True, "note": __doc__.splitlines()[0], "provenance": provenance(),
               "decision": decide(rows), "score_rows": rows, "insample": ins, "issue_law": law,
               "parts_provenance": [{"action": p["action"], "models": p.get("models"), **p["provenance"]}
                                    for p in parts]}
        write_new(args.json, rec, "calib_knee14")
        return 0
    models = tuple(m for m in args.models.split(",") if m)
    if args.action == "issue":
        result = issue()
    else:
        result = score(models) if args.action == "score" else insample(models)
    write_new(args.json, {"post_hoc": True, "action": args.action, "models": list(models),
                          "provenance": provenance(), "result": result}, "calib_knee14")
    return 0


if __name__ == "__main__":
    sys.exit(main())
