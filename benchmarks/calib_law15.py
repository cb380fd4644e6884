"""The issue law with no aggregate ceiling where the span law holds (``--model two-stage-gated2-span``; issue 15,
session 13, law15) against ``two-stage-gated2`` on the committed host and local grids. POST HOC: every grid here,
fresh10 included, was read before (docs/calibration/knee10.md ... knee14.md); these figures decide only whether a
fresh grid is measured, by the rule committed before them (data/calibration-extra/law15-criterion.md).

    python benchmarks/calib_law15.py score --target host --json OUT    # 2 models x 24 own fits; ~12 min on one core
    python benchmarks/calib_law15.py score --target local --json OUT   # 2 models x 7 recorded splits; ~2 min
    python benchmarks/calib_law15.py insample --json OUT   # each law fitted on every fresh10 point; ~1 min
    python benchmarks/calib_law15.py issue --json OUT      # T_iss0 at the pairs that set knee14's misses; ~2 min
    python benchmarks/calib_law15.py worst --json OUT      # the held-out points near p90 on fresh2 / fresh5; ~1 min
    python benchmarks/calib_law15.py record --parts score-host.json score-local.json insample.json issue.json --json OUT

``score``: for each model, own fit half (``fit_platform`` on the split's ``fit`` points), judged on the held-out
lockstep periodic points (``calib_knee14.judge``). host: fresh10 under ``bracket`` seeds 0-4, its recorded split and
``pairs`` seeds 1-4; the six other grids under their recorded split and ``bracket`` seed 0. local: the seven grids'
recorded splits. ``insample``: each model fitted on every fresh10 host point, scored on the ``bracket`` halves.
``issue``: each model's fitted issue law (t_fixed, P, I, s, b0) and T_iss0 at (116, 16), (116, 26), (84, 16),
(58, 26) KiB, fitted on every fresh10 host point and on each ``bracket`` fit half. ``worst``: on the host grids where
the rule failed (fresh2, fresh5, recorded split), each model's held-out lockstep periodic points ranked by |rel err|,
the ranks around p90 (a diagnostic, deciding nothing). ``record``: the parts and the decision by the committed rule. Every action writes its JSON atomically and refuses to overwrite a file.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import fit_halves, grid_points, refuse_existing, write_new  # noqa: E402
from calib_knee14 import ISSUE_PAIRS, judge, split_of  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, fit_platform  # noqa: E402

NEW, REF = "two-stage-gated2-span", "two-stage-gated2"
MODELS = (NEW, REF)
SEEDS = (0, 1, 2, 3, 4)
OTHERS = ("wide", "fresh", "fresh2", "fresh3", "fresh5", "wide-3525cba")
TARGETS = {"host": "pcie-host", "local": "local"}
TARGET_P90, TARGET_MEDIAN, SLACK = 0.15, 0.05, 0.005
RULE = ("qualified iff (1) fresh10 host own fit under bracket (0.3) seeds 0-4: T_iss and period median <= 0.05 and "
        "p90 <= 0.15 at >= 4 of 5 seeds; (2) host wide, fresh, fresh2, fresh3, fresh5, wide-3525cba recorded split: "
        "the new law's T_iss p90 and period p90 each <= max(0.15, gated2's + 0.005); (3) local, the same six and "
        "fresh10, recorded split: T_iss p90 <= max(0.15, gated2's + 0.005) (data/calibration-extra/"
        "law15-criterion.md, committed before any held-out score of the law)")
HOST_RUNS = (tuple(("fresh10", "bracket", s) for s in SEEDS) + (("fresh10", "recorded", 0),)
             + tuple(("fresh10", "pairs", s) for s in SEEDS[1:])
             + tuple((g, "recorded", 0) for g in OTHERS) + tuple((g, "bracket", 0) for g in OTHERS))
LOCAL_RUNS = tuple((g, "recorded", 0) for g in OTHERS + ("fresh10",))


def fit(frame, model, target="host", name="law15"):
    """``fit_platform`` for ``model`` (a name of ``MODELS``) on a points frame."""
    platform, _ = fit_platform(frame, name=name, target=TARGETS[target], sm_count=132,
                               capacity_law=capacity_law_of(model))
    return platform


def _label(rule, seed) -> str:
    return "recorded" if rule == "recorded" else f"{rule} seed {seed}"


def score(target="host", models=MODELS, log=print, name="law15") -> list:
    runs = HOST_RUNS if target == "host" else LOCAL_RUNS
    pts = {g: grid_points(target, g) for g in sorted({g for g, _, _ in runs})}
    rows = []
    for model in models:
        for grid, rule, seed in runs:
            split = split_of(pts[grid], rule, seed)
            plat = fit(fit_halves([(grid, pts[grid], split)]), model, target, name)
            r = {"target": target, "model": model, "grid": grid, "split": _label(rule, seed),
                 "injection_GBps": plat.injection_GBps, **judge(plat, pts[grid], split)}
            rows.append(r)
            log(f"{target} {model:22s} {grid:12s} {r['split']:15s} T_iss {r['heldout_median_rel_err_T_iss']:.1%} / "
                f"{r['heldout_p90_rel_err_T_iss']:.1%} period {r['heldout_median_rel_err_period']:.1%} / "
                f"{r['heldout_p90_rel_err_period']:.1%} (n {r['heldout_n_points']}) misses {r['misses']}", flush=True)
    return rows


def insample(models=MODELS, log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for model in models:
        plat = fit(pts, model)
        for seed in SEEDS:
            r = {"model": model, "grid": "fresh10", "split": f"bracket seed {seed}", "fit": "every point",
                 **judge(plat, pts, split_of(pts, "bracket", seed))}
            rows.append(r)
            log(f"insample {model:22s} bracket seed {seed}: p90 {r['heldout_p90_rel_err_T_iss']:.1%}", flush=True)
    return rows


def issue_law(platform) -> dict:
    """The fitted issue law's terms and T_iss0 (us) at ``ISSUE_PAIRS`` (K, B KiB)."""
    return {"t_fixed_us": platform.t_fixed_us, "producer_issue_GBps": platform.producer_issue_GBps,
            "injection_GBps": platform.injection_GBps, "start_skew_us": platform.start_skew_us,
            "store_buffer_bytes": platform.store_buffer_bytes,
            "T_iss0_us": {f"{k},{b}": platform.issue_time0_us(k, b * 1024) for k, b in ISSUE_PAIRS}}


def issue(models=MODELS, log=print) -> list:
    pts = grid_points("host", "fresh10")
    rows = []
    for model in models:
        for seed in (None,) + SEEDS:
            half = pts if seed is None else fit_halves([("fresh10", pts, split_of(pts, "bracket", seed))])
            r = {"model": model, "fit": "every point" if seed is None else f"bracket seed {seed}",
                 **issue_law(fit(half, model))}
            rows.append(r)
            log(f"issue {model:22s} {r['fit']:15s} I {r['injection_GBps']} T_iss0 "
                + " ".join(f"({p}) {v:.3f}" for p, v in r["T_iss0_us"].items()), flush=True)
    return rows


def worst(grids=("fresh2", "fresh5"), top=10, log=print) -> list:
    from xstage.sim.platform_fit import check_and_summarize
    rows = []
    for grid in grids:
        pts = grid_points("host", grid)
        split = split_of(pts, "recorded", 0)
        for model in MODELS:
            plat = fit(fit_halves([(grid, pts, split)]), model)
            check, _ = check_and_summarize(pts, plat, split)
            held = check[(check["split"] == "heldout").to_numpy() & (check["mode"] == "periodic").to_numpy()]
            held = held.dropna(subset=["rel_err_T_iss"])
            held = held.assign(abs_err=held["rel_err_T_iss"].abs()).sort_values("abs_err", ascending=False)
            pts_out = [{"K": int(r["producers"]), "B_KiB": int(r["bytes_per_producer"]) // 1024, "phase": r["phase"],
                        "gap_us": float(r["gap(us)"]), "T_iss_us": float(r["T_iss(us)"]),
                        "rel_err": float(r["rel_err_T_iss"])} for _, r in held.head(top).iterrows()]
            rows.append({"grid": grid, "model": model, "n_heldout": int(len(held)), "top": pts_out,
                         "issue_law": issue_law(plat)})
            log(f"worst {grid} {model} n {len(held)}: " + "; ".join(
                f"({p['K']},{p['B_KiB']}) {p['phase']} g{p['gap_us']:.1f} {p['rel_err']:+.1%}" for p in pts_out),
                flush=True)
    return rows


def _all_four(r) -> bool:
    return (r["heldout_median_rel_err_T_iss"] <= TARGET_MEDIAN and r["heldout_p90_rel_err_T_iss"] <= TARGET_P90
            and r["heldout_median_rel_err_period"] <= TARGET_MEDIAN and r["heldout_p90_rel_err_period"] <= TARGET_P90)


def decide(rows, new_model=NEW, rule=RULE) -> dict:
    """The committed rule (``RULE``; law16 passes its own, the same guard) on ``score``'s host and local rows."""
    by = {(r["target"], r["model"], r["grid"], r["split"]): r for r in rows}
    fresh10 = [by[("host", new_model, "fresh10", f"bracket seed {s}")] for s in SEEDS]
    met = [_all_four(r) for r in fresh10]
    host, local = {}, {}
    for g in OTHERS:
        new, ref = by[("host", new_model, g, "recorded")], by[("host", REF, g, "recorded")]
        checks = {}
        for key in ("p90_rel_err_T_iss", "p90_rel_err_period"):
            limit = max(TARGET_P90, ref[f"heldout_{key}"] + SLACK)
            checks[key] = {"new": new[f"heldout_{key}"], "gated2": ref[f"heldout_{key}"], "limit": limit,
                           "held": bool(new[f"heldout_{key}"] <= limit)}
        host[g] = checks
    for g in OTHERS + ("fresh10",):
        new, ref = by[("local", new_model, g, "recorded")], by[("local", REF, g, "recorded")]
        limit = max(TARGET_P90, ref["heldout_p90_rel_err_T_iss"] + SLACK)
        local[g] = {"new": new["heldout_p90_rel_err_T_iss"], "gated2": ref["heldout_p90_rel_err_T_iss"],
                    "limit": limit, "held": bool(new["heldout_p90_rel_err_T_iss"] <= limit)}
    ok1 = sum(met) >= 4
    ok2 = all(c["held"] for checks in host.values() for c in checks.values())
    ok3 = all(c["held"] for c in local.values())
    return {"rule": rule, "model": new_model,
            "fresh10_bracket": {"T_iss_p90_by_seed": [r["heldout_p90_rel_err_T_iss"] for r in fresh10],
                                "all_four_by_seed": met, "seeds_met": int(sum(met)), "held": ok1},
            "host_recorded": host, "host_held": ok2, "local_recorded": local, "local_held": ok3,
            "qualified": bool(ok1 and ok2 and ok3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score", "insample", "issue", "worst", "record"))
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--target", choices=tuple(TARGETS), default="host", help="score: host or local")
    ap.add_argument("--parts", type=Path, nargs="*", default=(), help="record: the other actions' JSONs")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_law15")
    if args.action == "record":
        parts = [json.loads(p.read_text()) for p in args.parts]
        rows = [r for p in parts if p["action"] == "score" for r in p["result"]]
        rec = {"post_hoc": True, "note": __doc__.splitlines()[0], "provenance": provenance(),
               "decision": decide(rows), "score_rows": rows,
               "insample": [r for p in parts if p["action"] == "insample" for r in p["result"]],
               "issue_law": [r for p in parts if p["action"] == "issue" for r in p["result"]],
               "worst": [r for p in parts if p["action"] == "worst" for r in p["result"]],
               "parts_provenance": [{"action": p["action"], "target": p.get("target"), **p["provenance"]}
                                    for p in parts]}
        write_new(args.json, rec, "calib_law15")
        return 0
    result = {"score": lambda: score(args.target), "insample": insample, "issue": issue,
              "worst": worst}[args.action]()
    write_new(args.json, {"post_hoc": True, "action": args.action, "target": args.target,
                          "provenance": provenance(), "result": result}, "calib_law15")
    return 0


if __name__ == "__main__":
    sys.exit(main())
