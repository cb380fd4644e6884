"""call24 (session 24): committed H100 platforms carried to broad grids measured on an H100 after they were fixed,
scored as frozen in data/calibration-extra/call24-preregistration.md.

    python benchmarks/calib_call24.py --json data/calibration-extra/call24-scores.json     # ~1 min
    python benchmarks/calib_call24.py --h200 --json data/calibration-extra/call24-h200-scores.json   # the H200 branch

Primary H (host): ``h100-pcie-host-pool24`` (two-stage-gated2 fitted on the three committed H100 broad host folders,
two cards; committed before the call) against every lockstep point of the call's ``fresh2`` and ``fresh3`` host
grids: met iff issue 15's four checks (T_iss and period |rel err| median <= 5 %, p90 <= 15 %) hold on both.
Primary L (local): ``h100-local`` (the first card's committed local platform) against every lockstep point of the
call's local ``wide`` grid: the same four checks. Secondary (reported, decide nothing): the same platforms on the
other grids of the call (host ``fresh5``, local ``fresh2``), the product's call-1 platform (``h100-pcie-host``) on the
host grids, and each folder's own held-out verdict as its command wrote it.

``--h200`` (the branch added before any call ran, when no H100 came): the committed recommended wide platforms of the
H200 (``h200-pcie-host-wide-3525cba-two-stage-gated2``, ``h200-local-wide-3525cba-two-stage-gated2``) on the H200
folders of the same five steps (``*-c24``), the same checks; no call-1 reference.
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
H200 = {"pool": "h200-pcie-host-wide-3525cba-two-stage-gated2", "local": "h200-local-wide-3525cba-two-stage-gated2",
        "host_grids": {g: f"h200-pcie-host-{g}-c24" for g in ("fresh2", "fresh3", "fresh5")},
        "local_grids": {"wide": "h200-local-wide-c24", "fresh2": "h200-local-fresh2-c24"}}


def _line(label: str, v: dict) -> str:
    e = v["every_point"]
    return (f"{label}: T_iss {e['median_rel_err_T_iss']:.2%} / {e['p90_rel_err_T_iss']:.2%}, period "
            f"{e['median_rel_err_period']:.2%} / {e['p90_rel_err_period']:.2%} (n {e['n_points']}) {v['verdict']}")


def score(log=print, h200: bool = False) -> dict:
    pool, loc = (H200["pool"], H200["local"]) if h200 else (POOL, LOCAL)
    host_grids, local_grids = (H200["host_grids"], H200["local_grids"]) if h200 else (HOST_GRIDS, LOCAL_GRIDS)
    host = {g: carried_verdict(f"{pool}/platform.json", f) for g, f in host_grids.items()}
    call1 = {} if h200 else {g: carried_verdict(f"{CALL1}/platform.json", f) for g, f in host_grids.items()}
    local = {g: carried_verdict(f"{loc}/platform.json", f) for g, f in local_grids.items()}
    for g, v in host.items():
        log(_line(f"{pool} on {host_grids[g]}", v))
    for g, v in call1.items():
        log(_line(f"{CALL1} on {host_grids[g]}", v))
    for g, v in local.items():
        log(_line(f"{loc} on {local_grids[g]}", v))
    h_met = all(host[g]["meets"] for g in PRIMARY_HOST)
    l_met = bool(local[PRIMARY_LOCAL]["meets"])
    return {"pre_registered": True, "rule": RULE, "branch": "H200" if h200 else "H100", "host_platform": pool,
            "local_platform": loc,
            "primary": {"H_pool24_on_fresh2_fresh3": {"verdict": "met" if h_met else "not met",
                                                       **{g: host[g] for g in PRIMARY_HOST}},
                        "L_local_on_wide": {"verdict": "met" if l_met else "not met", **local[PRIMARY_LOCAL]}},
            "secondary": {"pool24_on_fresh5": host["fresh5"], "call1_platform": call1,
                          "local_on_fresh2": local["fresh2"],
                          "own": {f: own(f) for f in (*host_grids.values(), *local_grids.values())}},
            "provenance": provenance()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, required=True, help="the scores record to write (never overwritten)")
    ap.add_argument("--h200", action="store_true", help="score the H200 branch (the *-c24 folders)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_call24")
    result = score(h200=args.h200)
    p = result["primary"]
    print(f"primary H {p['H_pool24_on_fresh2_fresh3']['verdict']}, primary L {p['L_local_on_wide']['verdict']}")
    write_new(args.json, result, "calib_call24")
    return 0


if __name__ == "__main__":
    sys.exit(main())
