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
from calib_knee10 import fit_halves, grid_points, refuse_existing, split_of, write_new  # noqa: E402
import calib_law15  # noqa: E402
from calib_law15 import OTHERS, SEEDS, TARGETS, _label  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, fit_platform  # noqa: E402

NEW, REF, DIAG = "two-stage-gated2-cc", "two-stage-gated2", "two-stage-gated2-span-cc"
MODELS = (NEW, REF, DIAG)
RULE = ("qualified iff (1) fresh10 host own fit under bracket (0.3) seeds 0-4: T_iss and period median <= 0.05 and "
        "p90 <= 0.15 at >= 4 of 5 seeds; (2) host wide, fresh, fresh2, fresh3, fresh5, wide-3525cba recorded split: "
        "the new model's T_iss p90 and period p90 each <= max(0.15, gated2's + 0.005) (a grid over 0.15 under gated2 "
        "need not come down); (3) local, the same six and fresh10, recorded split: T_iss p90 <= max(0.15, gated2's + "
        "0.005) (data/calibration-extra/law16-criterion.md, f24b9f9, committed before any held-out score)")


def _write_new(path, obj) -> None:
    write_new(path, obj, "calib_law16")


def fit(frame, model, target="host"):
    """``fit_platform`` for ``model`` (a name of ``MODELS``) on a points frame: (platform, fit)."""
    return fit_platform(frame, name="law16", target=TARGETS[target], sm_count=132,
                        capacity_law=capacity_law_of(model))


def score(target="host", models=MODELS, log=print) -> list:
    """law15's runs (``calib_law15.score``) for this study's models."""
    return calib_law15.score(target, models, log, name="law16")


def decide(rows) -> dict:
    """The committed rule (``RULE``, law15's guard for ``NEW``) on ``score``'s host and local rows."""
    return calib_law15.decide(rows, NEW, RULE)


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("score", "trace", "record"))
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--target", choices=tuple(TARGETS), default="host", help="score: host or local")
    ap.add_argument("--parts", type=Path, nargs="*", default=(), help="record: the other actions' JSONs")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_law16")
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
