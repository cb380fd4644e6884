"""call28d (session 28): pool27's lockq-perk against issue 15's four checks on call24's broad grids measured on a
sixteenth H100, each folder at its median zero-gap drain rate, as frozen in
data/calibration-extra/call28d-preregistration.md.

    python benchmarks/calib_call28d.py --json data/calibration-extra/call28d-scores.json
    python benchmarks/calib_call28d.py --card17 --json data/calibration-extra/call28d-card17-scores.json   # a repeat

C1: ``h100-pcie-host-pool27-lockq-perk``'s T_iss p90 (every lockstep point) at most 20 % on at least two of the three
``*-call28d`` folders. C2: it meets all four of issue 15's checks on at least one. Met iff both. Secondary: pool24 and
knee28 beside it, call28c's B1-B3 on these folders, each folder's own held-out verdict, the rate check. ``--card17``:
the same claims on the grids measured again on a seventeenth H100 (``*-c28e``), a repeat decided at the device, not
pre-registered.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calib_call28c import score as call28c_score  # noqa: E402
from calib_knee10 import record_main  # noqa: E402
from calib_knee28 import PERK  # noqa: E402
from xstage.sim.heldout_misses import meets_targets  # noqa: E402

RULE = "data/calibration-extra/call28d-preregistration.md"
FOLDERS = tuple(f"h100-pcie-host-fresh{g}-call28d" for g in (2, 3, 5))
CARD17 = tuple(f"h100-pcie-host-fresh{g}-c28e" for g in (2, 3, 5))   # session 28's repeat, not pre-registered
P90_MAX, P90_FOLDERS, MEET_FOLDERS = 0.20, 2, 1


def meets(figs: dict) -> bool:
    """Issue 15's four checks (``heldout_misses.meets_targets``) on one folder's every-point figures."""
    return bool(meets_targets({f"heldout_{k}": v for k, v in figs.items()}))


def score(folders=FOLDERS, log=print, pre_registered: bool = True) -> dict:
    rec = call28c_score(folders, log=log)   # the same platforms, rate rule and secondaries; call28c's claims too
    figs = rec["platforms"][PERK]["folders"]
    p90 = {f: v["p90_rel_err_T_iss"] for f, v in figs.items()}
    met4 = {f: meets(v) for f, v in figs.items()}
    c1 = sum(v <= P90_MAX for v in p90.values()) >= P90_FOLDERS
    c2 = sum(met4.values()) >= MEET_FOLDERS
    c = {"C1_p90_at_most_20_on_two": {"p90": p90, "met": c1}, "C2_meets_issue15_on_one": {"meets": met4, "met": c2},
         "verdict": "met" if c1 and c2 else "not met"}
    log(f"C1 (lockq-perk p90 <= 20 % on {sum(v <= P90_MAX for v in p90.values())} of 3, >= 2): "
        f"{'met' if c1 else 'not met'}; C2 (meets issue 15's four checks on {sum(met4.values())} of 3, >= 1): "
        f"{'met' if c2 else 'not met'}; primary: {c['verdict']}")
    return {**rec, "pre_registered": pre_registered, "rule": RULE, "primary": c,
            "secondary_call28c_claims": rec["primary"]}


def main(argv=None) -> int:
    card17 = ("score the repeat on a seventeenth H100 (session 28, the *-c28e folders; not pre-registered)",
              lambda: score(CARD17, pre_registered=False), CARD17)
    return record_main(argv, __doc__, "calib_call28d", score, needed=FOLDERS, variants={"--card17": card17})


if __name__ == "__main__":
    raise SystemExit(main())
