"""call28b (session 28): lockq with a capacity per K pooled over seven H100s' knee grids (``knee28``) against pool27's
lockq-perk on call25's knee grids measured on a fourteenth H100, each folder at its median zero-gap drain rate, as
frozen in data/calibration-extra/call28b-preregistration.md.

    python benchmarks/calib_call28b.py --json data/calibration-extra/call28b-scores.json

N2: the median of ``h100-pcie-host-knee28-lockq-perk``'s three T_iss p90s (every lockstep point of each
``*-call28b`` folder) at most 22 %. N3: below ``h100-pcie-host-pool27-lockq-perk``'s on at least two of the three.
Met iff both. N1, scored on its own: knee28's p90 at most 30 % on each folder. Secondary: pool24 beside them, pairs
off, per-bin miss directions, the rate check.
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call27c import log_platforms, per_platform  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee28 import KNEE28, PERK, POOL24  # noqa: E402
from calib_knee_band25 import folder_rates  # noqa: E402
from calib_rate27 import gpu_uuid  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RULE = "data/calibration-extra/call28b-preregistration.md"
FOLDERS = tuple(f"h100-pcie-host-fresh1{i}-call28b" for i in (1, 2, 3))
MEDIAN_MAX, EACH_MAX, BELOW_MIN = 0.22, 0.30, 2


def claims(cand: dict, other: dict) -> dict:
    p90 = {f: v["p90_rel_err_T_iss"] for f, v in cand["folders"].items()}
    other_p90 = {f: v["p90_rel_err_T_iss"] for f, v in other["folders"].items()}
    median = float(np.median(list(p90.values())))
    below = sum(p90[f] < other_p90[f] for f in p90)
    n2, n3 = median <= MEDIAN_MAX, below >= BELOW_MIN
    return {"N2_median_p90_at_most_22": {"p90": p90, "median_p90": median, "met": n2},
            "N3_below_lockq_perk_on_two": {"lockq_perk_p90": other_p90, "folders_below": below, "met": n3},
            "N1_p90_each_at_most_30": {"met": all(v <= EACH_MAX for v in p90.values())},
            "verdict": "met" if n2 and n3 else "not met"}


def scored(call: str, folders, log) -> tuple[list, dict, dict]:
    """(folder data at the median R, each folder's rate check, ``per_platform`` of knee28, pool27's lockq-perk and
    pool24), logged: call28b's and call28c's common part."""
    rates = {f: folder_rates(f) for f in folders}
    checks = {f: check for f, (_, _, check) in rates.items()}
    data = [(f, points, check["median_zero_gap_rate_GBps"]) for f, (points, _, check) in rates.items()]
    plats = {n: per_platform(n, data) for n in (KNEE28, PERK, POOL24)}
    log(f"{call} on {', '.join(folders)} ({gpu_uuid(folders[0])[:12]}), R the median of each folder's zero-gap "
        "lockstep points:")
    for f, (_, fitted, chk) in rates.items():
        log(f"  {f}: fitted R {fitted:.3f} GB/s, median {chk['median_zero_gap_rate_GBps']:.3f} "
            f"({chk['fitted_vs_median']:+.2%}){'  SUSPECT' if chk['suspect'] else ''}")
    log_platforms(plats, log)
    return data, checks, plats


def score(folders=FOLDERS, log=print) -> dict:
    data, checks, plats = scored("call28b", folders, log)
    c = claims(plats[KNEE28], plats[PERK])
    yes = lambda k: "met" if c[k]["met"] else "not met"   # noqa: E731
    log(f"N2 (median p90 {c['N2_median_p90_at_most_22']['median_p90']:.1%} <= 22 %): "
        f"{yes('N2_median_p90_at_most_22')}; N3 (below lockq-perk on {c['N3_below_lockq_perk_on_two']['folders_below']}"
        f" of 3, >= 2): {yes('N3_below_lockq_perk_on_two')}; primary: {c['verdict']}; N1 (each <= 30 %): "
        f"{yes('N1_p90_each_at_most_30')}")
    return {"pre_registered": True, "rule": RULE, "folders": list(folders), "gpu_uuid": gpu_uuid(folders[0]),
            "R_GBps": {f: r for f, _, r in data}, "rate_check": checks, "primary": c,
            "platforms": {n: {k: v for k, v in p.items() if k != "rows"} for n, p in plats.items()},
            "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_call28b", score, needed=FOLDERS)


if __name__ == "__main__":
    raise SystemExit(main())
