"""call28c (session 28): which carried H100 host platform for broad grids: pool24 (gated2, pooled over two cards'
broad grids), knee28 (lockq-perk pooled over seven cards' knee grids) and pool27's lockq-perk on call24's broad grids
measured on a fifteenth H100, each folder at its median zero-gap drain rate, as frozen in
data/calibration-extra/call28c-preregistration.md.

    python benchmarks/calib_call28c.py --json data/calibration-extra/call28c-scores.json

B1: ``h100-pcie-host-pool24``'s T_iss p90 (every lockstep point) below knee28's on at least two of the three
``*-call28c`` folders. B2: knee28's below pool27's lockq-perk's on at least two. Met iff both. B3, scored on its own:
pool24's p90 at most 30 % on each folder. Secondary: each folder's own held-out verdict (its summary.json).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call28b import scored  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee28 import KNEE28, PERK, POOL24  # noqa: E402
from calib_knee_band25 import EXTRA  # noqa: E402
from xstage.provenance import provenance  # noqa: E402

RULE = "data/calibration-extra/call28c-preregistration.md"
FOLDERS = tuple(f"h100-pcie-host-fresh{g}-call28c" for g in (2, 3, 5))
BELOW_MIN, EACH_MAX = 2, 0.30
OWN = ("heldout_median_rel_err_T_iss", "heldout_p90_rel_err_T_iss", "heldout_median_rel_err_period",
       "heldout_p90_rel_err_period", "heldout_meets_targets")


def _below(a: dict, b: dict) -> dict:
    p90 = lambda x: {f: v["p90_rel_err_T_iss"] for f, v in x["folders"].items()}   # noqa: E731
    pa, pb = p90(a), p90(b)
    n = sum(pa[f] < pb[f] for f in pa)
    return {"p90": pa, "other_p90": pb, "folders_below": n, "met": n >= BELOW_MIN}


def score(folders=FOLDERS, log=print) -> dict:
    data, checks, plats = scored("call28c", folders, log)
    b1, b2 = _below(plats[POOL24], plats[KNEE28]), _below(plats[KNEE28], plats[PERK])
    b3 = all(v <= EACH_MAX for v in b1["p90"].values())
    c = {"B1_pool24_below_knee28_on_two": b1, "B2_knee28_below_lockq_perk_on_two": b2,
         "B3_pool24_each_at_most_30": {"met": b3}, "verdict": "met" if b1["met"] and b2["met"] else "not met"}
    yes = lambda ok: "met" if ok else "not met"   # noqa: E731
    log(f"B1 (pool24 below knee28 on {b1['folders_below']} of 3, >= 2): {yes(b1['met'])}; B2 (knee28 below lockq-perk "
        f"on {b2['folders_below']} of 3): {yes(b2['met'])}; primary: {c['verdict']}; B3 (pool24 each <= 30 %): {yes(b3)}")
    own = {f: {k: json.loads((EXTRA / f / "summary.json").read_text()).get(k) for k in OWN} for f in folders}
    return {"pre_registered": True, "rule": RULE, "folders": list(folders), "R_GBps": {f: r for f, _, r in data},
            "rate_check": checks, "primary": c, "own_heldout": own,
            "platforms": {n: {k: v for k, v in p.items() if k != "rows"} for n, p in plats.items()},
            "provenance": provenance()}


def main(argv=None) -> int:
    return record_main(argv, __doc__, "calib_call28c", score, needed=FOLDERS)


if __name__ == "__main__":
    raise SystemExit(main())
