"""call24 (session 24): committed H100 platforms carried to broad grids measured on an H100 after they were fixed,
scored as frozen in data/calibration-extra/call24-preregistration.md.

    python benchmarks/calib_call24.py --json data/calibration-extra/call24-scores.json     # ~1 min

Primary H (host): ``h100-pcie-host-pool24`` (two-stage-gated2 fitted on the three committed H100 broad host folders,
two cards; committed before the call) against every lockstep point of the call's ``fresh2`` and ``fresh3`` host
grids: met iff issue 15's four checks (T_iss and period |rel err| median <= 5 %, p90 <= 15 %) hold on both.
Primary L (local): ``h100-local`` (the first card's committed local platform) against every lockstep point of the
call's local ``wide`` grid: the same four checks. Secondary (reported, decide nothing): the same platforms on the
other grids of the call (host ``fresh5``, local ``fresh2``), the product's call-1 platform (``h100-pcie-host``) on the
host grids, and each folder's own held-out verdict as its command wrote it.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from calib_newgpu22 import carried_verdict, own  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RULE = "data/calibration-extra/call24-preregistration.md"
POOL, CALL1, LOCAL = "h100-pcie-host-pool24", "h100-pcie-host", "h100-local"
HOST_GRIDS = {"fresh2": "h100-pcie-host-fresh2", "fresh3": "h100-pcie-host-fresh3", "fresh5": "h100-pcie-host-fresh5"}
LOCAL_GRIDS = {"wide": "h100-local-r3", "fresh2": "h100-local-fresh2"}
PRIMARY_HOST, PRIMARY_LOCAL = ("fresh2", "fresh3"), "wide"


def _line(label: str, v: dict) -> str:
    e = v["every_point"]
    return (f"{label}: T_iss {e['median_rel_err_T_iss']:.2%} / {e['p90_rel_err_T_iss']:.2%}, period "
            f"{e['median_rel_err_period']:.2%} / {e['p90_rel_err_period']:.2%} (n {e['n_points']}) {v['verdict']}")


def score(log=print) -> dict:
    host = {g: carried_verdict(f"{POOL}/platform.json", f) for g, f in HOST_GRIDS.items()}
    call1 = {g: carried_verdict(f"{CALL1}/platform.json", f) for g, f in HOST_GRIDS.items()}
    local = {g: carried_verdict(f"{LOCAL}/platform.json", f) for g, f in LOCAL_GRIDS.items()}
    for g, v in host.items():
        log(_line(f"{POOL} on {HOST_GRIDS[g]}", v))
    for g, v in call1.items():
        log(_line(f"{CALL1} on {HOST_GRIDS[g]}", v))
    for g, v in local.items():
        log(_line(f"{LOCAL} on {LOCAL_GRIDS[g]}", v))
    h_met = all(host[g]["meets"] for g in PRIMARY_HOST)
    l_met = bool(local[PRIMARY_LOCAL]["meets"])
    return {"pre_registered": True, "rule": RULE,
            "primary": {"H_pool24_on_fresh2_fresh3": {"verdict": "met" if h_met else "not met",
                                                       **{g: host[g] for g in PRIMARY_HOST}},
                        "L_local_on_wide": {"verdict": "met" if l_met else "not met", **local[PRIMARY_LOCAL]}},
            "secondary": {"pool24_on_fresh5": host["fresh5"], "call1_platform": call1,
                          "local_on_fresh2": local["fresh2"],
                          "own": {f: own(f) for f in (*HOST_GRIDS.values(), *LOCAL_GRIDS.values())}},
            "provenance": provenance()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True, help="the scores record to write (never overwritten)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_call24")
    result = score()
    p = result["primary"]
    print(f"primary H {p['H_pool24_on_fresh2_fresh3']['verdict']}, primary L {p['L_local_on_wide']['verdict']}")
    write_new(args.json, result, "calib_call24")
    return 0


if __name__ == "__main__":
    sys.exit(main())
