"""call28 (session 28): pool27's lockq platform with a capacity per K, pooled over H100 cards 1 and 2, scored on
call25's knee grids measured on a thirteenth H100 with each folder's median zero-gap drain rate, as frozen in
data/calibration-extra/call28-preregistration.md.

    python benchmarks/calib_call28.py --json data/calibration-extra/call28-scores.json

R of a folder: the median V / period of its zero-gap spin lockstep points (``calib_knee_band25.folder_rates``), a
rate no single slow point can pull. M1: ``h100-pcie-host-pool27-lockq-perk``'s T_iss p90 on every lockstep point at
most 35 % on each of the three ``*-call28`` folders. M2: below ``h100-pcie-host-pool24``'s on each.
M3: fewer lockstep pairs off by more than 15 % than pool24's over the three together. Met iff all three. M4, scored on
its own: the median of the three p90s at most 25 %. Secondary: the same with each folder's least-squares R (session
27's ``--own-rate``), the rate check, ``h100-pcie-host-pool27-lockq`` beside them, per-bin directions.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call27c import ALSO, BASE, CANDIDATE, claims, log_platforms, per_platform  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import folder_rates  # noqa: E402
from calib_rate27 import gpu_uuid  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RULE = "data/calibration-extra/call28-preregistration.md"
FOLDERS = tuple(f"h100-pcie-host-fresh1{i}-call28" for i in (1, 2, 3))
MEDIAN_MAX = 0.25


def by_rate(data, rate: str, log) -> dict:
    """Every platform on ``data`` ((folder, points, R) each) with R by ``rate`` ("median": the rule; "fit": the run's
    least squares), M1-M4."""
    plats = {n: per_platform(n, data) for n in (CANDIDATE, BASE, ALSO)}
    c = claims(plats[CANDIDATE], plats[BASE])
    p90 = c["L1_p90_each_at_most_35"]["p90"]
    m4 = float(np.median(list(p90.values())))
    out = {"M1_p90_each_at_most_35": c["L1_p90_each_at_most_35"], "M2_below_pool24_each": c["L2_below_pool24_each"],
           "M3_fewer_pairs_off": c["L3_fewer_pairs_off"], "verdict": c["verdict"],
           "M4_median_p90_at_most_25": {"median_p90": m4, "met": m4 <= MEDIAN_MAX}}
    log(f"R by {rate}:")
    log_platforms(plats, log)
    log(f"  M1 (each p90 <= 35 %): {_yes(out['M1_p90_each_at_most_35'])}; M2 (below pool24's on each): "
        f"{_yes(out['M2_below_pool24_each'])}; M3 (fewer pairs off): {_yes(out['M3_fewer_pairs_off'])}; primary: "
        f"{out['verdict']}; M4 (median p90 {m4:.1%} <= 25 %): {_yes(out['M4_median_p90_at_most_25'])}")
    return {"R_GBps": {f: r for f, _, r in data}, "claims": out,
            "platforms": {n: {k: v for k, v in p.items() if k != "rows"} for n, p in plats.items()}}


def _yes(claim: dict) -> str:
    return "met" if claim["met"] else "not met"


def score(folders=FOLDERS, log=print) -> dict:
    log(f"call28 on {', '.join(folders)} ({gpu_uuid(folders[0])[:12]}):")
    rates = {f: folder_rates(f) for f in folders}   # each folder read once, scored with both rates
    checks = {f: check for f, (_, _, check) in rates.items()}
    for f, (_, fitted, check) in rates.items():
        log(f"  {f}: fitted R {fitted:.3f} GB/s, zero-gap median {check['median_zero_gap_rate_GBps']:.3f} "
            f"({check['fitted_vs_median']:+.2%}){'  SUSPECT' if check['suspect'] else ''}")
    primary = by_rate([(f, p, c["median_zero_gap_rate_GBps"]) for f, (p, _, c) in rates.items()], "median", log)
    secondary = by_rate([(f, p, fitted) for f, (p, fitted, _) in rates.items()], "fit", log)
    return {"pre_registered": True, "rule": RULE, "folders": list(folders), "gpu_uuid": gpu_uuid(folders[0]),
            "rate_check": checks, "primary_median_rate": primary, "secondary_fitted_rate": secondary,
            "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_call28", score, needed=FOLDERS)


if __name__ == "__main__":
    raise SystemExit(main())
