"""``fresh13`` (session 15, knee21): built as fresh12 (its checks, ``test_grid_fresh12``), and every B new too: no K
and no B (rate, plateau, gap sweep or isolated) of any earlier grid."""

from xstage.hw.calib.grids import GRIDS, describe_grid

from .test_grid_fresh12 import _pairs, check_new_lockstep_grid, check_straddles_the_knee


def test_fresh13_is_built_as_fresh12():
    check_new_lockstep_grid("fresh13")
    check_straddles_the_knee("fresh13")


def test_fresh13_shares_no_B_with_earlier_grids():
    new = {b for _, b in _pairs(GRIDS["fresh13"])}
    for name in GRIDS:
        if name != "fresh13":
            assert not new & {b for _, b in _pairs(GRIDS[name])}, name
    assert describe_grid("fresh13") == ("fresh13 (K 21,47,74,106,125 x B 11,19,23,27,31,35,41,47,54,180 KiB; 8 gap "
                                        "sweeps, 0 also free-running; isolated sweep at every K on 7 sizes)")
