"""The committed wide and fresh calibration records re-scored under the ``pairs`` and the ``sweeps`` split
(``xstage.sim.split_sweeps``; issue 15, session 7).

    python benchmarks/calib_split_rescore.py [--models two-stage-gated,two-stage-robust] [--rules pairs,sweeps] [--only LABELS]
        [--json OUT]

For each record folder and split rule (fraction 0.3, seed 0): the model fitted on the fit half
(``fit_split_platform``) and its model check on the held-out half, |rel err| median / p90 of lockstep T_iss
and period, free-running T_iss, and the fitted rho. The ``sweeps`` figures are post hoc on records that were
already seen (the rule was chosen after the fresh run's host miss); the ``pairs`` figures reproduce the
recorded split.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_fresh_heldout import EXTRA, load_points  # noqa: E402

from xstage.sim.platform_fit import capacity_law_of, check_and_summarize, fit_split_platform  # noqa: E402
from xstage.sim.split_sweeps import SPLIT_RULES, split_by_rule  # noqa: E402

FOLDERS = {"host wide": ("h200-pcie-host-wide", "pcie-host"), "host fresh": ("h200-pcie-host-fresh", "pcie-host"),
           "local wide": ("h200-local-wide", "local"), "local fresh": ("h200-local-fresh", "local")}
KEYS = ("median_rel_err_T_iss", "p90_rel_err_T_iss", "median_rel_err_period", "p90_rel_err_period",
        "free_median_rel_err_T_iss", "free_p90_rel_err_T_iss", "free_median_rel_err_period", "free_p90_rel_err_period",
        "n_points", "n_free_points")


def score(points, target, model, rule):
    split = split_by_rule(points, rule)
    platform, _ = fit_split_platform(points, split, name=f"{rule}-{model}", target=target, sm_count=132,
                                     capacity_law=capacity_law_of(model))
    _, s = check_and_summarize(points, platform, split)
    out = {f"heldout_{k}": s.get(f"heldout_{k}") for k in KEYS}
    out.update(heldout_pairs=s["split"]["heldout_pairs"], rho_GBps=platform.capacity_relax_GBps,
               R_GBps=platform.drain_rate_GBps, free_t_fixed_us=platform.free_t_fixed_us)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="two-stage-gated,two-stage-robust")
    ap.add_argument("--rules", default=",".join(SPLIT_RULES))
    ap.add_argument("--only", default=None, help="comma-separated record labels (default: all)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {}
    labels = args.only.split(",") if args.only else list(FOLDERS)
    for label in labels:
        folder, target = FOLDERS[label]
        points, _ = load_points(EXTRA / folder)
        for model in args.models.split(","):
            for rule in args.rules.split(","):
                f = score(points, target, model, rule)
                result.setdefault(label, {}).setdefault(model, {})[rule] = f
                print(f"{label:11s} {model:16s} {rule:6s} T_iss {f['heldout_median_rel_err_T_iss']:.1%} / "
                      f"{f['heldout_p90_rel_err_T_iss']:.1%}  period {f['heldout_median_rel_err_period']:.1%} / "
                      f"{f['heldout_p90_rel_err_period']:.1%}  free T_iss {f['heldout_free_median_rel_err_T_iss']:.1%}"
                      f" / {f['heldout_free_p90_rel_err_T_iss']:.1%}  n {f['heldout_n_points']}  rho "
                      f"{f['rho_GBps']}", flush=True)
    if args.json is not None:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        tmp.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
