"""The ``fresh2`` calibration run scored against platforms fixed before it (issue 15, session 7, cal4).

    python benchmarks/calib_fresh2_heldout.py prereg            # writes the pre-registered robust platforms
    python benchmarks/calib_fresh2_heldout.py score --host DIR --local DIR [--json OUT]

Pre-registered (committed before the device run; the commit is named in the record):

- ``two-stage-gated``: ``h200-*-wide-two-stage-gated/platform.json`` (session 7, cal3; fitted on the wide records'
  fit half, ``pairs`` split);
- ``two-stage-robust``: ``h200-*-wide-two-stage-robust/platform.json`` (this script's ``prereg``: the wide records'
  fit half under the ``sweeps`` split, ``xstage.sim.split_sweeps``; rho by the sum of |rel. errors|, the free-running
  issue law ``free_t_fixed_us``; ``xstage.sim.fit_robust``).

The device run: ``xstage calibrate --target host|local --grid fresh2`` (K in {10, 28, 44, 72, 104}: no (K, B) pair of
``wide`` or ``fresh``). Scored: (1) ``preregistered``: each platform's model check on every fresh2 point; (2)
``own_split``: each model refitted on the fresh2 run's fit half and judged on its held-out half, under the
``pairs`` and the ``sweeps`` split (fraction 0.3, seed 0). Figures: |rel err| median / p90 of lockstep T_iss and
period (targets 5 / 15 %), free-running T_iss and period.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA, KEYS, load_points  # noqa: E402

from xstage.records.platform import save_platform  # noqa: E402
from xstage.sim import fit as calib_fit  # noqa: E402
from xstage.sim.platform import Platform  # noqa: E402
from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_split_platform  # noqa: E402
from xstage.sim.split_sweeps import SPLIT_RULES, split_by_rule  # noqa: E402

TARGETS = {"host": "pcie-host", "local": "local"}
PREREG = {"two-stage-gated": "h200-{t}-wide-two-stage-gated", "two-stage-robust": "h200-{t}-wide-two-stage-robust"}


def prereg() -> None:
    for target, t in TARGETS.items():
        points, _ = load_points(EXTRA / f"h200-{t}-wide")
        split = split_by_rule(points, "sweeps")
        platform, _ = fit_split_platform(points, split, name=f"h200-{t}", target=t, sm_count=132,
                                         capacity_law=capacity_law_of("two-stage-robust"),
                                         notes={"fitted_on": f"data/calibration-extra/h200-{t}-wide, fit half of the "
                                                             "sweeps split (fraction 0.3, seed 0)"})
        out = EXTRA / PREREG["two-stage-robust"].format(t=t)
        out.mkdir(parents=True, exist_ok=True)
        save_platform(platform, out / "platform.json")
        print(f"{target}: rho {platform.capacity_relax_GBps:.2f} GB/s, t_free {platform.free_t_fixed_us}, -> {out}")


def score(points, target: str) -> dict:
    res = {"preregistered": {}, "own_split": {}}
    for model, folder in PREREG.items():
        platform = Platform.load(EXTRA / folder.format(t=TARGETS[target]) / "platform.json")
        errs = calib_fit.error_summary(calib_fit.model_check(points, platform))
        res["preregistered"][model] = {k: errs[k] for k in KEYS}
        for rule in SPLIT_RULES:
            split = split_by_rule(points, rule)
            fitted, _ = fit_split_platform(points, split, name=f"fresh2-{model}", target=TARGETS[target],
                                           sm_count=132, capacity_law=capacity_law_of(model))
            _, s = check_and_summarize(points, fitted, split)
            res["own_split"].setdefault(model, {})[rule] = {
                **{f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS}, "heldout_pairs": s["split"]["heldout_pairs"],
                "rho_GBps": fitted.capacity_relax_GBps, "free_t_fixed_us": fitted.free_t_fixed_us}
    return res


def _line(label, f, pre=""):
    return (f"{label:44s} T_iss {f[pre + 'median_rel_err_T_iss']:.1%} / {f[pre + 'p90_rel_err_T_iss']:.1%}  period "
            f"{f[pre + 'median_rel_err_period']:.1%} / {f[pre + 'p90_rel_err_period']:.1%}  free T_iss "
            f"{f[pre + 'free_median_rel_err_T_iss']:.1%} / {f[pre + 'free_p90_rel_err_T_iss']:.1%}  (n {f[pre + 'n_points']})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=("prereg", "score"))
    ap.add_argument("--host", type=Path, default=None)
    ap.add_argument("--local", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.action == "prereg":
        prereg()
        return 0
    result = {"preregistered_platforms": PREREG}
    for target, folder in (("host", args.host), ("local", args.local)):
        if folder is None:
            continue
        points, meta = load_points(folder)
        r = result[target] = {"records": str(folder), "provenance": meta.get("provenance"), **score(points, target)}
        for model, f in r["preregistered"].items():
            print(_line(f"{target} preregistered {model}", f))
        for model, by_rule in r["own_split"].items():
            for rule, f in by_rule.items():
                print(_line(f"{target} own split {rule} {model}", f, "heldout_"))
    if args.json is not None:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
