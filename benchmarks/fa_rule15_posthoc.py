"""Rule 15 post hoc (tri15, session 11): rule 14 calibrated per build on one point, judged on the others.

Leave-one-in on the head-dim-128, block_n-128 in-pair points of 0dfa499-inpair, de0efae-rule13 and
a86e88c-rule14: each point in turn is the calibration point, giving the drift (``fit_drift`` on its link cost L)
and its beta_c (the no-link build's speed-up over FA-only); every other point is then predicted, L from rule 14's
global stall at that drift and fused - FA-only as L - beta_c x (that point's measured FA-only event time), and
scored within max(20 us, 20 %) of its measurement (in-pair, and the standard timing where it has one).
Figures and verdict: data/attention-extra/rule15-posthoc.md.

    python benchmarks/fa_rule15_posthoc.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fa_link_cost as F  # noqa: E402

from xstage.errors import exit_with  # noqa: E402
from xstage.sim.predict_link import link_cost, within  # noqa: E402

RUNS = ("0dfa499-inpair", "de0efae-rule13", "a86e88c-rule14")


def build_points(base: Path) -> list:
    """The in-pair points of ``RUNS`` at head dim 128, block_n 128."""
    return [p for r in RUNS for p in F.measured_points(base / "attention-runs" / r, r)
            if p["head_dim"] == 128 and p["block_n"] == 128]


def score(pts: list, platform) -> dict:
    """Held-out (calibration, point) pairs within target: L, fused - FA-only in-pair and standard; the drift each
    calibration point gives."""
    n = {"pairs": 0, "L": 0, "fused_fa_inpair": 0, "fused_fa_standard": 0, "standard_pairs": 0}
    drifts = []
    for c in pts:
        d = F.stall_fit([c], platform)["drift"]
        drifts.append((c["run"], c["M"], c["heads"], d))
        for p in pts:
            if p is c:
                continue
            l_hat = link_cost(F.kernel(p), platform, F.Q_C_BYTES, d)["link_us"]
            f_hat = l_hat - c["beta_c"] * p["fa_event_us"]
            n["pairs"] += 1
            n["L"] += within(l_hat, p["link_us"])
            n["fused_fa_inpair"] += within(f_hat, p["d_split_us"])
            if p["s_us"] is not None:
                n["standard_pairs"] += 1
                n["fused_fa_standard"] += within(f_hat, p["s_us"])
    return {"counts": n, "drifts": drifts}


def main(argv=None) -> int:
    platform, base, _ = F.inputs()
    out = score(build_points(base), platform)
    for run, M, heads, d in out["drifts"]:
        print(run, M, heads, d, flush=True)
    n = out["counts"]
    print("L", n["L"], "/", n["pairs"], " fused-FA inpair", n["fused_fa_inpair"], "/", n["pairs"],
          " fused-FA standard", n["fused_fa_standard"], "/", n["standard_pairs"])
    return 0


if __name__ == "__main__":
    exit_with(main, "fa_rule15_posthoc.py")
