"""call26 (session 26): knee-band26 and pool24's free-running law scored on H100 host grids measured after them, as
frozen in data/calibration-extra/call26-preregistration.md.

    python benchmarks/calib_call26.py --json data/calibration-extra/call26-scores.json

Platform ``h100-pcie-host-pool24`` (session 24, cards 1 and 2) on the call's four host folders (``fresh10``,
``fresh14``, ``fresh4``, ``fresh7``; no H100 had measured these grids). Primary AB: call25's two claims
(``calib_call25.claims``) on every lockstep periodic pair of the four folders together: A, among pairs at knee ratio
<= 0.8 or > 3 at most 15 % off by more than 15 % in T_iss; B, among pairs at 1.0-1.5 at least 50 % off. Primary F:
issue 15's four checks (median <= 5 %, p90 <= 15 % of T_iss and of the period) on every free-running point of
``fresh4`` and ``fresh7`` together, the platform's free-running law (``Platform.free_running``), as
``fit.error_summary``'s ``free_*`` figures. Secondary (decide nothing): C, the share off among pairs at 1.5-3; the
per-bin table; pool24's four lockstep checks on each folder; each folder's own held-out verdict.
"""
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call25 import claim_lines, claims, folder_verdicts  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee_band25 import EXTRA, pair_rows, table  # noqa: E402
from xstage.provenance import provenance  # noqa: E402
from xstage.records import load_records  # noqa: E402
from xstage.sim.fit import error_summary, model_check  # noqa: E402
from xstage.sim.heldout_misses import TARGETS  # noqa: E402
from xstage.sim.platform import load_platform  # noqa: E402

RULE = "data/calibration-extra/call26-preregistration.md"
PLATFORM = "h100-pcie-host-pool24"
FOLDERS = ("h100-pcie-host-fresh10", "h100-pcie-host-fresh14", "h100-pcie-host-fresh4", "h100-pcie-host-fresh7")
FREE_FOLDERS = ("h100-pcie-host-fresh4", "h100-pcie-host-fresh7")
FREE_KEYS = tuple((key.replace("heldout_", "free_", 1), limit) for key, limit in TARGETS)   # issue 15's four checks
MID = (1.5, 3.0)


def free_check(platform_name: str = PLATFORM, folders=FREE_FOLDERS) -> dict:
    """Issue 15's four checks on every free-running point of ``folders`` together under ``platform_name``."""
    platform = load_platform(EXTRA / platform_name / "platform.json")
    points = pd.concat([load_records(EXTRA / f / "points.parquet", "point")[0] for f in folders], ignore_index=True)
    errs = error_summary(model_check(points, platform))
    figures = {k: errs[k] for k, _ in FREE_KEYS}
    met = all(figures[k] <= limit for k, limit in FREE_KEYS) if errs["n_free_points"] else False
    return {**figures, "n_free_points": errs["n_free_points"], "met": met, "verdict": "met" if met else "not met"}


def mid_share(rows: list[dict]) -> dict:
    sel = [r for r in rows if r["knee_ratio"] is not None and MID[0] < r["knee_ratio"] <= MID[1]]
    n_off = sum(r["off"] for r in sel)
    return {"pairs": len(sel), "pairs_off": n_off, "share_off": n_off / len(sel) if sel else None}


def score(log=print) -> dict:
    rows = [r for f in FOLDERS for r in pair_rows(PLATFORM, f)]
    ab, free = claims(rows), free_check()
    log(f"{PLATFORM} on {', '.join(FOLDERS)}: {len(rows)} lockstep pairs")
    for line in claim_lines(ab):
        log(line)
    log(f"primary AB: {ab['verdict']}")
    log(f"primary F ({free['n_free_points']} free-running points): T_iss {free['free_median_rel_err_T_iss']:.2%} / "
        f"{free['free_p90_rel_err_T_iss']:.2%}, period {free['free_median_rel_err_period']:.2%} / "
        f"{free['free_p90_rel_err_period']:.2%}: {free['verdict']}")
    mid = mid_share(rows)
    log(f"secondary C (ratio in ({MID[0]}, {MID[1]}]): {mid['pairs_off']} of {mid['pairs']} off")
    per_folder = folder_verdicts(PLATFORM, FOLDERS, log)
    return {"pre_registered": True, "rule": RULE, "platform": PLATFORM, "folders": list(FOLDERS),
            "primary": {"AB_knee_band": ab, "F_free_running": free}, "secondary_C_mid": mid, "bins": table(rows),
            "per_folder": per_folder, "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_call26", score, needed=FOLDERS)


if __name__ == "__main__":
    raise SystemExit(main())
