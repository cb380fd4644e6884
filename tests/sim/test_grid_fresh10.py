"""``fresh10`` (session 10, knee10): no (K, B) pair of an earlier grid; lockstep only; the knee ratio steps across
1 at every K; its held-out half holds a knee gap sweep at every split seed 0-4 (a fact of the design)."""

from pathlib import Path

import pandas as pd

from xstage.hw.calib.grids import GRIDS, capacity_limited, grid_fields
from xstage.sim.platform import Platform
from xstage.sim.platform_fit import split_pairs

EXTRA = Path(__file__).resolve().parents[2] / "data" / "calibration-extra"


def _pairs(g):
    return ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])
            | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})


def test_fresh10_shares_no_pair_with_earlier_grids():
    new = _pairs(GRIDS["fresh10"])
    for name in GRIDS:
        if name != "fresh10":
            assert not new & _pairs(GRIDS[name]), name
    assert GRIDS["fresh10"]["free_gaps"] == 0
    assert set(grid_fields("fresh10", quick=True)["gap_configs"]) <= set(GRIDS["fresh10"]["gap_configs"])


def test_fresh10_steps_across_the_knee_at_every_K_and_holds_a_knee_sweep_out_at_every_seed():
    ref = Platform.load(EXTRA / "h200-pcie-host-wide-two-stage-gated" / "platform.json")
    g = GRIDS["fresh10"]
    for k in g["producers"]:
        limited = [capacity_limited(k, b, ref) for b in g["sizes"]]
        assert not limited[0] and limited[-1], k              # below the knee at the smallest B, past it at the largest
    rows = [("rate", "periodic", k, b) for k in g["producers"] for b in g["sizes"]]
    rows += [("gap", "periodic", k, b) for k, b in g["gap_configs"]]
    rows += [("isolated", "isolated", k, b) for k in g["iso_producers"] for b in g["iso_sizes"]]
    pts = pd.DataFrame(rows, columns=["phase", "mode", "producers", "bytes_per_producer"])
    for seed in range(5):
        split = split_pairs(pts, 0.3, seed)
        held = {(int(k), int(b)) for k, b, s in zip(pts["producers"], pts["bytes_per_producer"], split)
                if s == "heldout"}
        assert held & set(g["gap_configs"]), seed
