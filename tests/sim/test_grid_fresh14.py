"""``fresh14`` (session 17): built as fresh13 (``test_grid_fresh12``'s checks), every K and every B new to every
earlier grid; the grid of the pre-registered fresh test of ``xstage calibrate --repeat 2``."""

from xstage.hw.calib.grids import GRIDS, describe_grid

from .test_grid_fresh12 import _pairs, check_new_lockstep_grid, check_straddles_the_knee


def test_fresh14_is_built_as_fresh13():
    check_new_lockstep_grid("fresh14")
    check_straddles_the_knee("fresh14")


def test_fresh14_shares_no_B_with_earlier_grids():
    new = {b for _, b in _pairs(GRIDS["fresh14"])}
    for name in GRIDS:
        if name != "fresh14":
            assert not new & {b for _, b in _pairs(GRIDS[name])}, name
    assert describe_grid("fresh14") == ("fresh14 (K 19,51,79,111,127 x B 15,17,21,25,29,33,34,37,43,190 KiB; 8 gap "
                                        "sweeps, 0 also free-running; isolated sweep at every K on 7 sizes)")
