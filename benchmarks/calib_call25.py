"""call25 (session 25): the knee-band record (knee-band25.json) scored on host grids measured after it, as frozen in
data/calibration-extra/call25-preregistration.md.

    python benchmarks/calib_call25.py --json data/calibration-extra/call25-scores.json          # the H100 branch
    python benchmarks/calib_call25.py --h200 --json data/calibration-extra/call25-h200-scores.json   # secondary only
    python benchmarks/calib_call25.py --card7 --json data/calibration-extra/call25-card7-scores.json  # a repeat
    python benchmarks/calib_call25.py --card8 --json data/calibration-extra/call25-card8-scores.json  # another

The record says, out of sample, that committed host platforms miss few lockstep pairs far from the knee and most
pairs just past it. Primary (H100 branch): ``h100-pcie-host-pool24`` on every lockstep periodic pair of the call's
``fresh11``, ``fresh12`` and ``fresh13`` host folders together. A: among pairs at knee ratio <= 0.8 or > 3 under the
platform, the share with a point off by more than 15 % in T_iss is at most 15 %. B: among pairs at knee ratio in
(1.0, 1.5], that share is at least 50 %. Met iff A and B. Secondary (decide nothing): the per-bin table beside the
record's H100 rows; pool24's four checks on each folder; each folder's own held-out verdict. ``--h200``: the same
two claims with the recommended H200 wide platform on call24's H200 host folders (``*-c24``), secondary.
``--card7``: the H100 branch's claims, unchanged, on the same three grids measured again by ``call25.sh`` on a seventh
H100 in session 27 (``*-c27``): a repeat whose claims were frozen in session 25 but whose run was not pre-registered;
``--card8``: the same on an eighth H100 (``*-c27b``).
Every branch also counts, per knee-ratio bin, which way the off pairs missed (``directions``).
"""
import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_knee10 import refuse_existing, write_new  # noqa: E402
from calib_knee_band25 import H200_WIDE, pair_rows, table  # noqa: E402
from calib_newgpu22 import carried_verdict, own  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RULE = "data/calibration-extra/call25-preregistration.md"
FAR_LO, FAR_HI, NEAR = 0.8, 3.0, (1.0, 1.5)
FAR_MAX, NEAR_MIN = 0.15, 0.50
BRANCHES = {"H100": ("h100-pcie-host-pool24", ("h100-pcie-host-fresh11", "h100-pcie-host-fresh12",
                                                "h100-pcie-host-fresh13")),
            "H200": (H200_WIDE, ("h200-pcie-host-fresh2-c24", "h200-pcie-host-fresh3-c24",
                                 "h200-pcie-host-fresh5-c24")),
            "H100-card7": ("h100-pcie-host-pool24", ("h100-pcie-host-fresh11-c27", "h100-pcie-host-fresh12-c27",
                                                      "h100-pcie-host-fresh13-c27")),
            "H100-card8": ("h100-pcie-host-pool24", ("h100-pcie-host-fresh11-c27b", "h100-pcie-host-fresh12-c27b",
                                                      "h100-pcie-host-fresh13-c27b"))}
RESULT_KEY = {"H100": "primary", "H200": "secondary_claims", "H100-card7": "repeat_claims",
              "H100-card8": "repeat_claims"}


def claims(rows: list[dict]) -> dict:
    """A and B of the module doc on pair rows (``calib_knee_band25.pair_rows``)."""
    far = [r for r in rows if r["knee_ratio"] is not None and (r["knee_ratio"] <= FAR_LO or r["knee_ratio"] > FAR_HI)]
    near = [r for r in rows if r["knee_ratio"] is not None and NEAR[0] < r["knee_ratio"] <= NEAR[1]]
    share = lambda sel: (sum(r["off"] for r in sel) / len(sel)) if sel else None  # noqa: E731
    a, b = share(far), share(near)
    a_met, b_met = a is not None and a <= FAR_MAX, b is not None and b >= NEAR_MIN
    return {"A_far": {"pairs": len(far), "pairs_off": sum(r["off"] for r in far), "share_off": a, "met": a_met},
            "B_near": {"pairs": len(near), "pairs_off": sum(r["off"] for r in near), "share_off": b, "met": b_met},
            "verdict": "met" if a_met and b_met else "not met"}


def claim_lines(c: dict) -> list[str]:
    """One line per claim of ``claims``' answer: its bin, pairs off of pairs, share, met or not."""
    out = []
    for key, where in (("A_far", f"ratio <= {FAR_LO} or > {FAR_HI}"), ("B_near", f"ratio in ({NEAR[0]}, {NEAR[1]}]")):
        v = c[key]
        share = "-" if v["share_off"] is None else f"{v['share_off']:.1%}"
        out.append(f"{key[0]} ({where}): {v['pairs_off']} of {v['pairs']} off ({share}), "
                   f"{'met' if v['met'] else 'not met'}")
    return out


def directions(rows: list[dict]) -> list[dict]:
    """Per knee-ratio bin of ``table``: of the off pairs, how many waited longer than predicted (worst signed error
    < 0) and how many ran freer (> 0)."""
    out = []
    for b in table(rows):
        lo = -math.inf if b["lo"] is None else b["lo"]
        hi = math.inf if b["hi"] is None else b["hi"]
        off = [r for r in rows if r["off"] and r["knee_ratio"] is not None and lo < r["knee_ratio"] <= hi]
        out.append({"bin": b["bin"], "pairs": b["pairs"], "pairs_off": len(off),
                    "off_waited_longer": sum(r["worst_err"] < 0 for r in off),
                    "off_ran_freer": sum(r["worst_err"] > 0 for r in off)})
    return out


def direction_lines(d: list[dict]) -> list[str]:
    return ["  bin         pairs  off  waited longer  ran freer"] + [
        f"  {r['bin']:<11} {r['pairs']:>5}  {r['pairs_off']:>3}  {r['off_waited_longer']:>13}  {r['off_ran_freer']:>9}"
        for r in d]


def folder_verdicts(platform: str, folders, log=print) -> dict:
    """{folder: {"carried": the platform's four checks on every point, "own": the folder's own held-out verdict}},
    a line each to ``log``."""
    out = {f: {"carried": carried_verdict(f"{platform}/platform.json", f), "own": own(f)} for f in folders}
    for f, v in out.items():
        e = v["carried"]["every_point"]
        log(f"  {platform} on {f}: T_iss {e['median_rel_err_T_iss']:.2%} / {e['p90_rel_err_T_iss']:.2%}, "
            f"{v['carried']['verdict']}; own verdict {'met' if v['own']['meets'] else 'not met'}")
    return out


def score(branch: str = "H100", log=print) -> dict:
    platform, folders = BRANCHES[branch]
    rows = [r for f in folders for r in pair_rows(platform, f)]
    c = claims(rows)
    log(f"{platform} on {', '.join(folders)}: {len(rows)} lockstep pairs")
    for line in claim_lines(c):
        log(line)
    log(f"{RESULT_KEY[branch].replace('_', ' ')}: {c['verdict']}")
    d = directions(rows)
    for line in direction_lines(d):
        log(line)
    per_folder = folder_verdicts(platform, folders, log)
    return {"pre_registered": branch in ("H100", "H200"), "rule": RULE, "branch": branch, "platform": platform,
            "folders": list(folders), RESULT_KEY[branch]: c, "bins": table(rows), "directions": d,
            "per_folder": per_folder, "provenance": provenance()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the scores here (refuses an existing file)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--h200", action="store_true", help="score the H200 branch's folders (secondary only)")
    which.add_argument("--card7", action="store_true",
                       help="score the repeat on a seventh H100 (session 27, the *-c27 folders; not pre-registered)")
    which.add_argument("--card8", action="store_true",
                       help="score the repeat on an eighth H100 (session 27, the *-c27b folders; not pre-registered)")
    args = ap.parse_args(argv)
    refuse_existing(args.json, "calib_call25")
    branch = "H200" if args.h200 else "H100-card7" if args.card7 else "H100-card8" if args.card8 else "H100"
    write_new(args.json, score(branch), "calib_call25")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
