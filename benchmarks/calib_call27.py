"""call27 (session 27): a carried host platform with the card's own drain rate, scored on H100 knee grids measured
after it, as frozen in data/calibration-extra/call27-preregistration.md.

    python benchmarks/calib_call27.py --json data/calibration-extra/call27-scores.json
    python benchmarks/calib_call27.py --call27b --json data/calibration-extra/call27b-scores.json

Platform ``h100-pcie-host-pool24`` with its drain rate R replaced by each folder's own fitted R
(``xstage.sim.carried.with_drain_rate``), on every lockstep periodic pair of the call's ``fresh11``, ``fresh12`` and
``fresh13`` host folders (``*-call27``) together. A': among pairs at knee ratio <= 0.8 or > 3 at most 8 % off by more
than 15 % in T_iss. B': among pairs at 1.0-1.5 at least 50 % off. D: of the off pairs at 1.5-3 at least 75 % waited
longer than predicted, and of the off pairs at 1.0-1.1 at least 75 % ran freer (a bin with no off pair fails). Met
iff A', B' and D. Secondary (decide nothing): call25's A and B with pool24 as committed, the card's R against
pool24's, the per-bin tables with directions both ways, each folder's T_iss figures both ways and its own held-out
verdict. ``--call27b``: the same claims, unchanged, on ``fresh10`` and ``fresh14`` measured on the next H100
(``*-call27b``; data/calibration-extra/call27b-preregistration.md).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call25 import claim_lines, claims, direction_lines, directions, folder_verdicts  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import EXTRA, folder_data, pairs_and_figures, table  # noqa: E402
from calib_rate27 import gpu_uuid  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.sim.carried import with_drain_rate  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402

RULE = "data/calibration-extra/call27-preregistration.md"
PLATFORM = "h100-pcie-host-pool24"
FOLDERS = ("h100-pcie-host-fresh11-call27", "h100-pcie-host-fresh12-call27", "h100-pcie-host-fresh13-call27")
FOLDERS_27B = ("h100-pcie-host-fresh10-call27b", "h100-pcie-host-fresh14-call27b")
RULE_27B = "data/calibration-extra/call27b-preregistration.md"
FAR_MAX, NEAR_MIN, DIRECTION_MIN = 0.08, 0.50, 0.75
LONGER_BIN, FREER_BIN = (1.5, 3.0), (1.0, 1.1)


def direction_claim(rows: list[dict]) -> dict:
    """D: the share of off pairs that waited longer in (1.5, 3] and the share that ran freer in (1.0, 1.1]."""
    def share(lo, hi, sign):
        off = [r for r in rows if r["off"] and r["knee_ratio"] is not None and lo < r["knee_ratio"] <= hi]
        hits = sum((r["worst_err"] < 0) if sign < 0 else (r["worst_err"] > 0) for r in off)
        return {"off_pairs": len(off), "in_direction": hits, "share": hits / len(off) if off else None}
    longer, freer = share(*LONGER_BIN, -1), share(*FREER_BIN, +1)
    met = all(s["share"] is not None and s["share"] >= DIRECTION_MIN for s in (longer, freer))
    return {"waited_longer_1.5_3": longer, "ran_freer_1.0_1.1": freer, "met": met}


def primary(rows: list[dict]) -> dict:
    """A', B' (call25's bins with this call's limits) and D on pair rows scored with the folders' own R."""
    c = claims(rows)
    a = c["A_far"]["share_off"]
    b = c["B_near"]["share_off"]
    a_met, b_met = a is not None and a <= FAR_MAX, b is not None and b >= NEAR_MIN
    d = direction_claim(rows)
    return {"A_far": {**c["A_far"], "limit": FAR_MAX, "met": a_met},
            "B_near": {**c["B_near"], "limit": NEAR_MIN, "met": b_met}, "D_direction": d,
            "verdict": "met" if a_met and b_met and d["met"] else "not met"}


def score(folders=FOLDERS, log=print, rule: str = RULE) -> dict:
    base = load_platform(EXTRA / PLATFORM / "platform.json")
    own_rows, as_rows, per_folder = [], [], {}
    for f in folders:
        _, points, own_r = folder_data(f)
        rows_own, figs_own = pairs_and_figures(with_drain_rate(base, own_r), points)
        rows_as, figs_as = pairs_and_figures(base, points)
        own_rows += rows_own
        as_rows += rows_as
        per_folder[f] = {"gpu_uuid": gpu_uuid(f), "own_R_GBps": own_r, "R_shift": own_r / base.drain_rate_GBps - 1,
                         "every_point_own_rate": figs_own, "every_point_as_committed": figs_as}
    p = primary(own_rows)
    log(f"{PLATFORM} with each folder's own R on {', '.join(folders)}: {len(own_rows)} lockstep pairs")
    for f, v in per_folder.items():
        log(f"  {f}: {v['gpu_uuid'][:12]}, R {v['own_R_GBps']:.3f} GB/s ({v['R_shift']:+.2%} against pool24)")
    log(f"A' (ratio <= 0.8 or > 3.0): {p['A_far']['pairs_off']} of {p['A_far']['pairs']} off, limit 8 %: "
        f"{'met' if p['A_far']['met'] else 'not met'}")
    log(f"B' (ratio in (1.0, 1.5]): {p['B_near']['pairs_off']} of {p['B_near']['pairs']} off, floor 50 %: "
        f"{'met' if p['B_near']['met'] else 'not met'}")
    d = p["D_direction"]
    longer, freer = d["waited_longer_1.5_3"], d["ran_freer_1.0_1.1"]
    log(f"D: off pairs at (1.5, 3] that waited longer {longer['in_direction']} of {longer['off_pairs']}, at (1.0, 1.1]"
        f" that ran freer {freer['in_direction']} of {freer['off_pairs']}: {'met' if d['met'] else 'not met'}")
    log(f"primary: {p['verdict']}")
    for line in direction_lines(directions(own_rows)):
        log(line)
    committed = claims(as_rows)
    log("secondary, pool24 as committed:")
    for line in claim_lines(committed):
        log("  " + line)
    verdicts = folder_verdicts(PLATFORM, folders, log)
    return {"pre_registered": True, "rule": rule, "platform": PLATFORM, "folders": list(folders),
            "primary": p, "bins_own_rate": table(own_rows), "directions_own_rate": directions(own_rows),
            "secondary_as_committed": {"claims": committed, "bins": table(as_rows), "directions": directions(as_rows)},
            "per_folder": {f: {**per_folder[f], **verdicts[f]} for f in folders}, "provenance": provenance()}


def main(argv=None) -> int:
    other = ("score call27b's folders (fresh10, fresh14 on the next H100; same claims)",
             lambda: score(FOLDERS_27B, rule=RULE_27B), FOLDERS_27B)
    return record_main(argv, __doc__, "calib_call27", score, needed=FOLDERS, variants={"--call27b": other})


if __name__ == "__main__":
    raise SystemExit(main())
