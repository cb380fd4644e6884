"""``fresh5`` (session 8, cal7): no (K, B) pair of an earlier grid; lockstep only; its large-K mid-B sweeps."""

from xstage.hw.calib.grids import GRIDS, grid_fields
from xstage.units import KiB


def _pairs(g):
    return ({(k, b) for k in g["producers"] for b in g["sizes"]} | set(g["gap_configs"])
            | {(k, b) for k in g["iso_producers"] for b in g["iso_sizes"]})


def test_fresh5_shares_no_pair_with_earlier_grids():
    new = _pairs(GRIDS["fresh5"])
    for name in ("default", "wide", "fresh", "fresh2", "fresh3", "fresh4"):
        assert not new & _pairs(GRIDS[name]), name
    assert GRIDS["fresh5"]["free_gaps"] == 0 and (124, 18 * KiB) in GRIDS["fresh5"]["gap_configs"]
    assert set(grid_fields("fresh5", quick=True)["gap_configs"]) <= set(GRIDS["fresh5"]["gap_configs"])
