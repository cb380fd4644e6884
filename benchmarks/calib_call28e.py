"""call28e (session 28): on call24's broad grids measured on an eighteenth H100, pool27's lockq-perk carried with each
folder's median zero-gap R against each run's own calibration (its recorded held-out verdict), as frozen in
data/calibration-extra/call28e-preregistration.md.

    python benchmarks/calib_call28e.py --json data/calibration-extra/call28e-scores.json
    python benchmarks/calib_call28e.py --card19 --json data/calibration-extra/call28e-card19-scores.json   # a repeat

E1: the carried ``h100-pcie-host-pool27-lockq-perk`` meets all four of issue 15's checks (every lockstep point) on at
least one of the three ``*-call28e`` folders. E2: its T_iss p90 below the run's own held-out T_iss p90 (the folder's
summary.json, the product's ``two-stage-gated2`` on its fit half) on at least two. Met iff both. Secondary: knee28 and
pool24 beside it, the folders each way meets, the rate check. ``--card19``: the same claims on the grids measured
again on a nineteenth H100 (``*-c28f``), a repeat decided at the device, not pre-registered.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call28c import score as call28c_score  # noqa: E402
from calib_call28d import meets  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee28 import PERK  # noqa: E402

RULE = "data/calibration-extra/call28e-preregistration.md"
FOLDERS = tuple(f"h100-pcie-host-fresh{g}-call28e" for g in (2, 3, 5))
CARD19 = tuple(f"h100-pcie-host-fresh{g}-c28f" for g in (2, 3, 5))   # session 28's repeat, not pre-registered
MEET_FOLDERS, BELOW_FOLDERS = 1, 2


def score(folders=FOLDERS, log=print, pre_registered: bool = True) -> dict:
    rec = call28c_score(folders, log=log)   # the three carried platforms at the median R, and each run's own verdict
    figs, own = rec["platforms"][PERK]["folders"], rec["own_heldout"]
    met4 = {f: meets(v) for f, v in figs.items()}
    below = {f: figs[f]["p90_rel_err_T_iss"] < own[f]["heldout_p90_rel_err_T_iss"] for f in folders}
    e1, e2 = sum(met4.values()) >= MEET_FOLDERS, sum(below.values()) >= BELOW_FOLDERS
    c = {"E1_carried_meets_issue15_on_one": {"meets": met4, "met": e1},
         "E2_carried_below_own_heldout_on_two": {"below": below, "met": e2},
         "own_meets": {f: bool(v["heldout_meets_targets"]) for f, v in own.items()},
         "verdict": "met" if e1 and e2 else "not met"}
    log(f"E1 (carried lockq-perk meets issue 15's checks on {sum(met4.values())} of 3, >= 1): {'met' if e1 else 'not met'}"
        f"; E2 (below the run's own held-out p90 on {sum(below.values())} of 3, >= 2): {'met' if e2 else 'not met'}; "
        f"primary: {c['verdict']}; the runs' own verdicts met on {sum(c['own_meets'].values())} of 3")
    return {**rec, "pre_registered": pre_registered, "rule": RULE, "primary": c,
            "secondary_call28c_claims": rec["primary"]}


def main(argv=None) -> int:
    card19 = ("score the repeat on a nineteenth H100 (session 28, the *-c28f folders; not pre-registered)",
              lambda: score(CARD19, pre_registered=False), CARD19)
    return record_main(argv, __doc__, "calib_call28e", score, needed=FOLDERS, variants={"--card19": card19})


if __name__ == "__main__":
    raise SystemExit(main())
